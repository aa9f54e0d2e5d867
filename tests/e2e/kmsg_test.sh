#!/usr/bin/env bash
# The kmsg backend against the real kernel log: where /dev/kmsg is writable
# (root on these machines) the test writes real records into it, with an
# address only this run's xdm-sim uses (a PCI domain drawn per run, so other
# processes' records and earlier runs' never match), and sees the exporter
# raise, count and clear them; elsewhere the same steps run on a file of
# records in the kernel's format, and the test says so (XPU_E2E_KMSG_FILE=1 forces that).
source "$(dirname "$0")/lib.sh" "$1"
DOMAIN=$(printf '%04x' $((0xa000 + RANDOM % 0x5fff)))
start_sim sim --interval 200ms --pci-domain "$DOMAIN"
if [ -z "${XPU_E2E_KMSG_FILE:-}" ] && [ "$(id -u)" = 0 ] && [ -w /dev/kmsg ] && [ -r /dev/kmsg ]; then
  KMSG=/dev/kmsg
  echo "e2e_kmsg: writing records into the real /dev/kmsg (PCI domain $DOMAIN)"
else
  KMSG="$TMP/kmsg.records"
  : >"$KMSG"
  echo "e2e_kmsg: /dev/kmsg is not writable here: the records go to $KMSG, in the kernel's format"
fi
SEQ=0
# record LEVEL TEXT: one record at level LEVEL (3: err), written as a
# userspace process can (facility user: hence --hal.kmsg.user-records).
record() {
  if [ "$KMSG" = /dev/kmsg ]; then
    printf '<%d>%s\n' "$1" "$2" >/dev/kmsg
  else
    SEQ=$((SEQ + 1))
    local now_us
    now_us=$(awk '{printf "%.0f", $1 * 1000000}' /proc/uptime)
    printf '%d,%d,%d,-;%s\n' $((8 + $1)) "$SEQ" "$now_us" "$2" >>"$KMSG"
  fi
}
# Two of the sim's devices: minor 0 is <domain>:10:00.0, minor 1 <domain>:20:00.0.
DEV0="$DOMAIN:10:00"
DEV1="$DOMAIN:20:00.0"
flags=(--hal kmsg --hal.kmsg.path "$KMSG" --hal.kmsg.user-records --hal.interval 200ms
  --collector.interval 200ms)
start_exporter sim "${flags[@]}"
# The log is read (a blind one withdraws the health series: no 1 to see).
wait_for 10 has_metric 'xpu_exporter_source_up{source="kmsg"} 1' ||
  fail "the kernel log is not read: $(scrape | grep -E 'kmsg_up|source_up')"
wait_for 10 has_metric 'xpu_device_health{minor="0",uuid="[^"]*",bus_id="[^"]*",source="kmsg"} 1' ||
  fail "no kmsg health for minor 0: $(scrape | grep -E 'kmsg|health' | head)"

# An Xid 79 on minor 0: a state, isolate_card, unhealthy from the kernel's side.
record 3 "NVRM: Xid (PCI:$DEV0): 79, pid=1, name=e2e, GPU has fallen off the bus."
wait_for 10 has_metric "xpu_device_fault_active{minor=\"0\",uuid=\"[^\"]*\",bus_id=\"[^\"]*\",code=\"0x10DE004F\",level=\"isolate_card\",source=\"kmsg\"} 1" ||
  fail "Xid 79 not raised: $(scrape | grep -E 'fault|kmsg' | head -20)"
has_metric 'xpu_device_health{minor="0",uuid="[^"]*",bus_id="[^"]*",source="kmsg"} 0' || fail "minor 0 still healthy for kmsg"
has_metric 'xpu_device_fault_level{minor="0",uuid="[^"]*",bus_id="[^"]*",source="kmsg"} 6' || fail "level is not 6"
has_metric 'xpu_device_health{minor="1",uuid="[^"]*",bus_id="[^"]*",source="kmsg"} 1' || fail "minor 1 touched"
# An amdgpu ring timeout on minor 1, twice: an event, counted each time.
record 3 "amdgpu $DEV1: amdgpu: ring gfx_0.0.0 timeout, signaled seq=1, emitted seq=2"
record 3 "amdgpu $DEV1: amdgpu: ring gfx_0.0.0 timeout, signaled seq=3, emitted seq=4"
wait_for 10 has_metric "xpu_device_fault_events_total{minor=\"1\",uuid=\"[^\"]*\",bus_id=\"[^\"]*\",code=\"0x10020001\",level=\"restart_job\",source=\"kmsg\"} 2" ||
  fail "ring timeouts not counted twice: $(scrape | grep -E 'events_total' | head)"
# A record of the same driver that matches no pattern is counted by driver.
record 3 "amdgpu $DEV1: amdgpu: SMU driver if version not matched"
wait_for 10 has_metric 'xpu_kmsg_unmatched_records_total{driver="amdgpu"} [1-9]' || fail "unmatched not counted"
check_families
status=$(curl -sf "${URL%/metrics}/status")
python3 - "$status" <<'PY' || fail "/status does not show the kernel log's fault: $status"
import json, sys
s = json.loads(sys.argv[1])
assert "kmsg" in s["hal"]["backend"], s["hal"]
d0 = [d for d in s["devices"] if d["minor"] == 0][0]
assert d0["health"]["kmsg"] is False, d0["health"]
assert [(f["code"], f["source"]) for f in d0["faults"]] == [("0x10DE004F", "kmsg")], d0["faults"]
PY
curl -sf "${URL%/metrics}/" | grep -q "0x10DE004F.*isolate_card, kmsg" || fail "the landing page does not show it"

# A restart reads the ring from its start: the same counts, neither lost
# nor doubled, and the state still active.
kill "$EXP_PID"; wait "$EXP_PID" 2>/dev/null || true
start_exporter sim "${flags[@]}"
wait_for 10 has_metric "xpu_device_fault_events_total{minor=\"1\",uuid=\"[^\"]*\",bus_id=\"[^\"]*\",code=\"0x10020001\",level=\"restart_job\",source=\"kmsg\"} 2" ||
  fail "after a restart the count is not 2: $(scrape | grep -E 'events_total' | head)"
has_metric "xpu_device_fault_events_total{minor=\"0\",uuid=\"[^\"]*\",bus_id=\"[^\"]*\",code=\"0x10DE004F\",level=\"isolate_card\",source=\"kmsg\"} 1" ||
  fail "after a restart Xid 79 is not counted once"
has_metric 'xpu_device_fault_level{minor="0",uuid="[^"]*",bus_id="[^"]*",source="kmsg"} 6' || fail "the state did not survive a restart"

# amdgpu's successful reset clears minor 1's event.
record 3 "amdgpu $DEV1: amdgpu: GPU reset(1) succeeded!"
wait_for 10 has_metric 'xpu_device_fault_level{minor="1",uuid="[^"]*",bus_id="[^"]*",source="kmsg"} 0' ||
  fail "reset did not clear minor 1"
echo "kmsg records raised, counted (2 and 1, the same after a restart) and cleared via $KMSG"
