#!/usr/bin/env bash
# What the ring forgets is remembered (issue 32): an Xid 79 read from the
# kernel log, on the default kernel-only path (a facility-0 record in a
# record file), is kept in --hal.state-dir with the boot id. The record then
# gone (a record file without it stands in for a ring that wrapped), a
# restarted exporter still shows the fault; a state file from another boot
# (its boot id changed) is cleared: the reboot is Xid 79's remedy.
source "$(dirname "$0")/lib.sh" "$1"
start_sim sim --interval 200ms
mkdir -p "$TMP/state"
now_us() { awk '{printf "%.0f", $1 * 1000000}' /proc/uptime; }
printf '3,1,%s,-;NVRM: Xid (PCI:0000:20:00): 79, pid=1, name=e2e, GPU has fallen off the bus.\n' \
  "$(now_us)" >"$TMP/kmsg.records"
flags=(--hal kmsg --hal.kmsg.path "$TMP/kmsg.records" --hal.state-dir "$TMP/state"
  --hal.interval 200ms --collector.interval 200ms)
XID79='xpu_device_fault_active{minor="1",uuid="[^"]*",bus_id="[^"]*",code="0x10DE004F",level="isolate_card",source="kmsg"} 1'
start_exporter sim "${flags[@]}"
wait_for 10 has_metric "$XID79" || fail "Xid 79 not raised: $(scrape | grep 'source="kmsg"' | head)"
wait_for 10 grep -q 0x10DE004F "$TMP/state/kmsg-states.json" || fail "not kept: $(cat "$TMP/state/kmsg-states.json")"
python3 -c '
import json, sys
s = json.load(open(sys.argv[1]))
assert s["boot_id"] == open("/proc/sys/kernel/random/boot_id").read().strip(), s
assert s["states"] == {"0000:20:00.0": ["0x10DE004F"]}, s
' "$TMP/state/kmsg-states.json" || fail "state file: $(cat "$TMP/state/kmsg-states.json")"
ls "$TMP/state" | grep -q tmp && fail "a temporary file was left: $(ls "$TMP/state")"

# The ring wrapped: the record is gone. Restarted, the fault is still there.
kill "$EXP_PID"; wait "$EXP_PID" 2>/dev/null || true
: >"$TMP/kmsg.records"
start_exporter sim "${flags[@]}"
wait_for 10 has_metric 'xpu_exporter_source_up{source="kmsg"} 1' || fail "kmsg not up after the restart"
wait_for 10 has_metric "$XID79" || fail "the kept Xid 79 is gone after a restart: $(scrape | grep 'source="kmsg"' | head)"
has_metric 'xpu_device_health{minor="1",uuid="[^"]*",bus_id="[^"]*",source="kmsg"} 0' || fail "minor 1 healthy after a restart"
grep -q "state(s) and event(s) kept from before the restart" "$TMP/exporter.log" || fail "no log line for the kept state"

# Another boot: cleared.
kill "$EXP_PID"; wait "$EXP_PID" 2>/dev/null || true
sed -i 's/"boot_id":"[^"]*"/"boot_id":"another-boot"/' "$TMP/state/kmsg-states.json"
start_exporter sim "${flags[@]}"
wait_for 10 has_metric 'xpu_device_health{minor="1",uuid="[^"]*",bus_id="[^"]*",source="kmsg"} 1' ||
  fail "a state from another boot was kept: $(scrape | grep 'source="kmsg"' | head)"
has_metric 'xpu_device_fault_active{.*source="kmsg"}' && fail "a fault is active after another boot"

# Corrupt: refused, counted, the exporter starts without it.
kill "$EXP_PID"; wait "$EXP_PID" 2>/dev/null || true
printf '{"version":1,' >"$TMP/state/kmsg-states.json"
start_exporter sim "${flags[@]}"
wait_for 10 has_metric 'xpu_kmsg_state_file_errors_total{op="read"} 1' || fail "a corrupt file not counted"
wait_for 10 has_metric 'xpu_device_health{minor="1",uuid="[^"]*",bus_id="[^"]*",source="kmsg"} 1' || fail "not started clean"
check_families
