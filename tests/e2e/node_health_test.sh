#!/usr/bin/env bash
# Device health handed to Kubernetes, end to end: xdm-sim's devices, faults
# from the sysfs backend (xdm-sim's tree) and the kernel log (a file of
# records in the kernel's format: the real /dev/kmsg is e2e_kmsg's), and the
# stand-in API server (tests/support/fake_apiserver.py: HTTPS, a bearer
# token, strategic-merge patches of the Node's status, Events). The Node
# condition XpuDevicesHealthy follows the worst active level and is patched
# only when it changes; each raise at restart_card or worse makes one Event
# on the Node; a restarted exporter patches and posts nothing it already
# did; the only writes are the Node's status and Events in "default".
source "$(dirname "$0")/lib.sh" "$1"
cd "$TMP"
start_apiserver t0ken
api POST node '{"metadata":{"name":"node-a","uid":"8d3f-node-a"},"status":{"conditions":[{"type":"Ready","status":"True","reason":"KubeletReady","message":"ok","lastTransitionTime":"2026-01-01T00:00:00Z"}]}}'
# count KIND [PYTHON-FILTER]: how many patches or events the server took;
# last KIND: the last one (a patch's condition, or an Event); reads: how
# often the exporter's node-health part read the Node (once a round).
count() { curl -sfk "$API/control/$1" | python3 -c "import json,sys; print(len([x for x in json.load(sys.stdin) if ${2:-True}]))"; }
last() { curl -sfk "$API/control/$1" | python3 -c "import json,sys; x=json.load(sys.stdin)[-1]; print(json.dumps(x.get('status',{}).get('conditions',[x])[0]))"; }
reads() { count agents 'x == ["xpu-exporter/node-health", "/api/v1/nodes/node-a"]'; }
at_least() { [ "$(count "$1" "${3:-True}")" -ge "$2" ]; }  # at_least KIND N [FILTER]
export API
export -f count last reads at_least
# rounds N: waits until the exporter has gone round N more times.
rounds() {
  local n0
  n0=$(reads)
  wait_for $((15 + $1)) bash -c "[ \$(reads) -ge $((n0 + $1)) ]" || fail "the exporter stopped reading its Node"
}

start_sim sim --interval 200ms --hal-root "$TMP/hal"
: >kmsg.records
flags=(--collector.interval 200ms --hal sysfs,kmsg --hal.root "$TMP/hal" --hal.interval 200ms
  --hal.kmsg.path "$TMP/kmsg.records"
  --kubernetes.api-server "$API" --kubernetes.ca-file "$TMP/ca.crt" --kubernetes.token-file "$TMP/token"
  --kubernetes.node-name node-a --kubernetes.node-interval 300ms
  --kubernetes.node-condition --kubernetes.node-condition-hold 5s --kubernetes.events)
start_exporter sim "${flags[@]}"

wait_for 15 at_least patches 1 ||
  fail "no condition patched: $(grep kubernetes "$TMP/exporter.log" | tail -5)"
last patches | python3 -c '
import json, sys
c = json.load(sys.stdin)
assert c["type"] == "XpuDevicesHealthy" and c["status"] == "True" and c["reason"] == "NoCardFaults", c
assert "kmsg, sysfs" in c["message"], c
' || fail "first condition: $(last patches)"
wait_for 10 has_metric 'xpu_kubernetes_node_condition_synced 1' || fail "not synced"
rounds 3
[ "$(count patches)" = 1 ] || fail "more than one patch for one state: $(count patches)"

# A reset_card fault from the sysfs backend on minor 2: False, one Event.
curl -sf -XPOST "$CONTROL/control/fault" -d '{"minor":2,"code":"0x80E18400"}' >/dev/null
wait_for 10 at_least patches 1 'x["status"]["conditions"][0]["status"] == "False"' ||
  fail "condition not False after a reset_card fault: $(last patches)"
last patches | python3 -c '
import json, sys
c = json.load(sys.stdin)
assert c["reason"] == "ResetCard", c
assert c["message"].startswith("1 device(s) need card-level action: xpu 2 ") and "0x80E18400" in c["message"] and "[reset_card, sysfs]" in c["message"], c
' || fail "False condition: $(last patches)"
wait_for 10 at_least events 1 ||
  fail "no Event for the raise: $(grep kubernetes "$TMP/exporter.log" | tail -5)"
curl -sfk "$API/control/events" | python3 -c '
import json, sys
e = json.load(sys.stdin)
assert len(e) == 1, e
e = e[0]
assert e["involvedObject"] == {"apiVersion": "v1", "kind": "Node", "name": "node-a", "uid": "8d3f-node-a"}, e
assert e["type"] == "Warning" and e["reason"] == "ResetCard" and e["source"]["component"] == "xpu-exporter", e
assert "xpu 2" in e["message"] and "0x80E18400" in e["message"] and "Action:" in e["message"], e
' || fail "the Event: $(curl -sfk "$API/control/events")"

# The kernel log: Xid 79 (isolate_card) on minor 1, then an Xid 13
# (restart_job at most: no Event, no change to the condition's text).
record "NVRM: Xid (PCI:0000:20:00): 79, pid=1, name=e2e, GPU has fallen off the bus."
wait_for 10 bash -c "curl -sfk $API/control/patches | grep -q IsolateCard" || fail "Xid 79 not in the condition: $(last patches)"
last patches | python3 -c '
import json, sys
c = json.load(sys.stdin)
m = c["message"]
assert c["status"] == "False" and m.startswith("2 device(s)"), c
assert m.index("[isolate_card, kmsg]") < m.index("[reset_card, sysfs]"), m
assert "xpu 1 (0000:20:00.0): 0x10DE004F" in m, m
' || fail "condition with both sources: $(last patches)"
wait_for 10 at_least events 2 ||
  fail "no Event for Xid 79"
[ "$(count events 'x["reason"] == "IsolateCard"')" = 1 ] || fail "Xid 79's Event: $(curl -sfk "$API/control/events")"
PATCHES=$(count patches)
record "NVRM: Xid (PCI:0000:20:00): 13, pid=2, name=e2e, Graphics SM Warp Exception"
wait_for 10 has_metric 'xpu_device_fault_events_total{minor="1",uuid="[^"]*",bus_id="[^"]*",code="0x10DE000D",level="[a-z_]*",source="kmsg"} 1' ||
  fail "Xid 13 not counted"
rounds 7  # a round a second: past the 5 s hold, a change that is not worse would be patched by now
[ "$(count patches)" = "$PATCHES" ] || fail "a lesser fault changed the condition: $(last patches)"
[ "$(count events)" = 2 ] || fail "a lesser fault made an Event: $(curl -sfk "$API/control/events")"

# Cleared on the sysfs side: the message changes (the kernel's Xid 79
# stays until the device is seen healthy), no Event. Not worse: patched
# once it has held (--kubernetes.node-condition-hold, 5 s here; a flapping
# fault must not patch the Node on and on).
curl -sf -XDELETE "$CONTROL/control/fault?minor=2" >/dev/null
wait_for 25 bash -c "! curl -sfk $API/control/patches | python3 -c 'import json,sys; c=json.load(sys.stdin)[-1][\"status\"][\"conditions\"][0]; sys.exit(\"reset_card\" not in c[\"message\"])'" ||
  fail "the cleared fault is still named: $(last patches)"
last patches | python3 -c '
import json, sys
c = json.load(sys.stdin)
assert c["status"] == "False" and c["message"].startswith("1 device(s)"), c
' || fail "after the clear: $(last patches)"
TRANSITION=$(last patches | python3 -c 'import json,sys; print(json.load(sys.stdin)["lastTransitionTime"])')
has_metric 'xpu_kubernetes_events_total{result="sent"} 2' || fail "sent count"
check_families
scrape | promtool check metrics || fail "promtool"

# A restart: the ring (the file) is read again and the fault found at the
# first sample, but nothing new happened: no patch, no Event.
PATCHES=$(count patches)
kill "$EXP_PID"
wait "$EXP_PID" 2>/dev/null
start_exporter sim "${flags[@]}"
wait_for 15 has_metric 'xpu_kubernetes_node_condition_synced 1' || fail "restarted exporter not synced"
rounds 7  # a round a second: past the 5 s hold, a change that is not worse would be patched by now
[ "$(count patches)" = "$PATCHES" ] || fail "a restart patched the unchanged condition: $(last patches)"
[ "$(count events)" = 2 ] || fail "a restart posted Events again: $(curl -sfk "$API/control/events")"

# A new card fault after the restart is live: an Event of its own. The
# condition stays False, so its transition time stays.
curl -sf -XPOST "$CONTROL/control/fault" -d '{"minor":3,"code":"0x80CB8001"}' >/dev/null
wait_for 10 at_least events 3 || fail "no Event after the restart"
# Another fault at the same level: not worse, so patched after the hold.
wait_for 25 at_least patches 1 '"0x80CB8001" in x["status"]["conditions"][0]["message"]' ||
  fail "the new fault is not in the condition: $(last patches)"
last patches | python3 -c '
import json, sys
c = json.load(sys.stdin)
assert c["lastTransitionTime"] == "'"$TRANSITION"'", ("the status stayed False: its transition time stays", c)
' || fail "transition time: $(last patches)"

# Writes went only to this Node's status and to Events in "default".
curl -sfk "$API/control/requests" | python3 -c '
import json, sys
for p in json.load(sys.stdin):
    if p.startswith("PATCH "):
        assert p == "PATCH /api/v1/nodes/node-a/status", p
    elif p.startswith("POST "):
        assert p == "POST /api/v1/namespaces/default/events", p
    else:
        assert p.startswith("/api/v1/nodes/node-a") or "fieldSelector=spec.nodeName%3Dnode-a" in p, p
' || fail "a request outside this node's status and events"
# The Ready condition someone else owns is untouched.
curl -sfk "$API/control/patches" | python3 -c '
import json, sys
for p in json.load(sys.stdin):
    assert [c["type"] for c in p["status"]["conditions"]] == ["XpuDevicesHealthy"], p
' || fail "a patch touched another condition"
kill -0 "$EXP_PID" || fail "exporter died"
echo "node health test passed"
