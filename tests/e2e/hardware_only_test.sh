#!/usr/bin/env bash
# A node without the Runtime Kit (--xdm.endpoint ""), or whose daemon is not
# answering: the exporter is a complete hardware exporter. On xdm-sim's PCI
# tree of 8 cards (NVIDIA's vendor ID, so that the stand-in NVML covers
# them; the simulator's daemon runs, but nothing talks to it), with the
# stand-in NVML answering for all 8 and a kernel record file:
# - /status lists 8 devices from the first samples, each with health from
#   the pci and nvml sources, named by its bus address and NVML's uuid;
#   /-/ready answers 200; no upstream series says the daemon is down;
# - a kernel-facility Xid 79 record for one card raises isolate_card on it
#   within two intervals, and the Node condition goes False naming it;
# - an NVML card lost from its first read (a restart after the fault) is
#   found by its address: isolate_card on its bus address, not "not seen";
# - memory used is what nvidia-smi shows (the _v2 figure), the driver's
#   reservation on its own.
source "$(dirname "$0")/lib.sh" "$1"
cd "$TMP"
FAKE=$BUILD/tests/hal/libfake_nvml.so
[ -f "$FAKE" ] || fail "no stand-in library at $FAKE (a build with tests)"
export XPU_FAKE_NVML_FIXTURE=$TMP/nvml.json
INTERVAL_MS=500
SLACK_MS=600  # a scrape and process scheduling on a busy 2-core machine
# fixture [PYTHON EDIT]: the sim's 8 cards (minor m at 0000:<m+1>0:00.0), as
# NVML names them (8-digit domain, upper case), each with the H200's
# memory figures (tests/fixtures/nvidia-h200: 0 used, 616 MiB reserved).
fixture() {
  python3 - "$XPU_FAKE_NVML_FIXTURE" "${1:-}" <<'PY'
import json, os, sys
path, edit = sys.argv[1:]
f = {"devices": [
    {"name": "NVIDIA H200", "uuid": "GPU-hw-%d" % m, "bus_id": "00000000:%02X:00.0" % (0x10 + m * 0x10),
     "temperature": 34, "memory": {"total": 150754820096, "used": 0, "reserved": 644939776},
     "mig": {"enabled": False}} for m in range(8)]}
exec(edit)
with open(path + ".tmp", "w") as out:
    json.dump(f, out)
os.rename(path + ".tmp", path)
PY
}
fixture
start_apiserver t0ken
api POST node '{"metadata":{"name":"node-a","uid":"u-node-a"}}'
export API
patches() { curl -sfk "$API/control/patches" | python3 -c "import json,sys; print('\n'.join(p['status']['conditions'][0]['status'] + '/' + p['status']['conditions'][0]['reason'] + ' ' + p['status']['conditions'][0]['message'] for p in json.load(sys.stdin)))"; }
last_is() { patches | tail -1 | grep -q "^$1"; }
export -f patches last_is
start_sim sim --interval 200ms --hal-root "$TMP/hal" --pci-vendor 0x10de
: >kmsg.records
flags=(--xdm.endpoint "" --hal pci,kmsg,nvml --hal.pci.sysfs-root "$TMP/hal/sys"
  --hal.kmsg.path "$TMP/kmsg.records" --hal.nvml.library "$FAKE" --hal.interval ${INTERVAL_MS}ms
  --kubernetes.api-server "$API" --kubernetes.ca-file "$TMP/ca.crt" --kubernetes.token-file "$TMP/token"
  --kubernetes.node-name node-a --kubernetes.node-interval 300ms
  --kubernetes.node-condition --kubernetes.node-condition-hold 2s --kubernetes.events)
start_exporter sim "${flags[@]}"

# Every card from the first samples, with no daemon.
status() { curl -sf "$URL/status"; }
wait_for 10 bash -c "curl -sf $URL/status | python3 -c 'import json,sys; d=json.load(sys.stdin)[\"devices\"]; sys.exit(0 if len(d) == 8 and all(x[\"health\"].get(\"pci\") is True and x[\"health\"].get(\"nvml\") is True for x in d) else 1)'" ||
  fail "/status does not list 8 cards with pci and nvml health: $(status)"
python3 - "$(status)" <<'PY' || fail "/status: $(status)"
import json, sys
s = json.loads(sys.argv[1])
d = s["devices"]
assert [x["busId"] for x in d] == ["0000:%02x:00.0" % (0x10 + m * 0x10) for m in range(8)], d
assert all(x["minor"] is None for x in d), "no layer names a minor without the daemon"
assert [x["uuid"] for x in d] == ["GPU-hw-%d" % m for m in range(8)], "NVML's names"
assert s["upstream"]["endpoint"] == "", s["upstream"]
assert s["hal"]["up"] is True, s["hal"]
assert {x["name"]: x["sight"] for x in s["hal"]["sources"]} == {"pci": "seeing", "kmsg": "seeing", "nvml": "seeing"}, s["hal"]
assert all(x["model"] == "NVIDIA H200" for x in d), "NVML's model name"
PY
[ "$(curl -s -o /dev/null -w '%{http_code}' "$URL/-/ready")" = 200 ] ||
  fail "/-/ready: $(curl -s "$URL/-/ready")"
has_metric 'xpu_exporter_upstream_up' && fail "an upstream_up series where no daemon is configured"
for m in 0 7; do
  bus=$(printf '0000:%02x:00.0' $((0x10 + m * 0x10)))
  has_metric "xpu_device_health{minor=\"\",uuid=\"GPU-hw-$m\",bus_id=\"$bus\",source=\"pci\"} 1" ||
    fail "no pci health for $bus: $(scrape | grep '^xpu_device_health' | head -4)"
  has_metric "xpu_device_health{minor=\"\",uuid=\"GPU-hw-$m\",bus_id=\"$bus\",source=\"kmsg\"} 1" ||
    fail "no kmsg health for $bus"
done
# What nvidia-smi says: Used 0, Reserved 616 MiB apart.
has_metric 'xpu_memory_used_bytes{minor="",uuid="GPU-hw-3",[^}]*} 0$' ||
  fail "memory used is not the _v2 figure: $(scrape | grep '^xpu_memory_used_bytes' | head -2)"
has_metric 'xpu_nvml_memory_reserved_bytes{minor="",uuid="GPU-hw-3",bus_id="0000:40:00.0"} 644939776$' ||
  fail "the reservation is not on its own: $(scrape | grep reserved | head -2)"
wait_for 15 last_is True/NoCardFaults || fail "not True with every source seeing: $(patches)"
check_families

# The driver's own Xid 79 line for the card at 0000:40:00.0: isolate_card
# on it within two intervals, and the condition False naming it.
record "NVRM: Xid (PCI:0000:40:00): 79, pid=0, name=, GPU has fallen off the bus."
took=$(wait_ms $((2 * INTERVAL_MS + SLACK_MS)) has_metric 'xpu_device_fault_active{minor="",uuid="GPU-hw-3",bus_id="0000:40:00.0",code="0x10DE004F",level="isolate_card",source="kmsg"} 1') ||
  fail "Xid 79 not raised within two intervals: $(scrape | grep -E '^xpu_(device_fault_active|kmsg_fault_records)' | head)"
echo "Xid 79 on 0000:40:00.0 raised after ${took} ms (interval ${INTERVAL_MS} ms)"
wait_for 10 last_is False/IsolateCard || fail "no False for the Xid 79: $(patches)"
patches | tail -1 | grep -q "PCI device 0000:40:00.0: 0x10DE004F" || fail "the condition does not name the card: $(patches | tail -1)"
wait_for 10 bash -c 'curl -sfk "$API/control/events" | grep -q "0000:40:00.0"' ||
  fail "no Event names the card: $(curl -sfk "$API/control/events"; grep -i event "$TMP/exporter.log")"

# Restarted with the card at 0000:50:00.0 lost from NVML's first read: found
# by its address, isolate_card on it, the condition False naming it too.
kill "$EXP_PID"; wait "$EXP_PID" 2>/dev/null || true
fixture 'f["devices"][4]["lost"] = True'
start_exporter sim "${flags[@]}"
wait_for 10 has_metric 'xpu_device_fault_active{minor="",uuid="[^"]*",bus_id="0000:50:00.0",code="0xFC010001",level="isolate_card",source="nvml"} 1' ||
  fail "the lost card is not found by its address: $(scrape | grep -E 'source=\"nvml\"' | grep fault | head)"
has_metric 'xpu_device_fault_level{[^}]*bus_id="",source="nvml"}' && fail "a card without an address beside it"
wait_for 10 bash -c 'patches | tail -1 | grep -q "PCI device 0000:50:00.0: 0xFC010001"' ||
  fail "the condition does not name the lost card: $(patches | tail -1)"
check_families
