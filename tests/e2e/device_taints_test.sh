#!/usr/bin/env bash
# Device taints end to end: xdm-sim's cards, a kernel-log Xid 79 (a file of
# records in the kernel's format) and the stand-in API server serving the
# DRA API (discovery, this node's ResourceSlices, DeviceTaintRules in
# v1beta2). The real exporter maps each card to the device whose
# resource.kubernetes.io/pciBusID is its address, writes exactly one
# NoSchedule rule for the card the Xid names, says so on /status and the
# page, and deletes a card's rule after the hold once the card is seen
# healthy (an event's window has passed), leaving the other card's.
# Its only writes are DeviceTaintRules.
source "$(dirname "$0")/lib.sh" "$1"
cd "$TMP"
start_apiserver t0ken
start_sim sim --interval 200ms --hal-root "$TMP/hal"
: >kmsg.records
# The built-in kernel catalog with events active for 4 s (not 10 minutes),
# so the recovery is seen within the test.
sed 's/^event_active_for: .*/event_active_for: 4s/' "$E2E_DIR/../../src/hal/kmsg/kmsg_patterns.yaml" >kmsg.yml
flags=(--collector.interval 200ms --hal sysfs,kmsg --hal.root "$TMP/hal" --hal.interval 200ms
  --hal.kmsg.path "$TMP/kmsg.records" --hal.kmsg.catalog "$TMP/kmsg.yml"
  --kubernetes.api-server "$API" --kubernetes.ca-file "$TMP/ca.crt" --kubernetes.token-file "$TMP/token"
  --kubernetes.node-name node-a --kubernetes.node-interval 1s
  --kubernetes.device-taints --kubernetes.node-condition-hold 3s)
start_exporter sim "${flags[@]}"

# The node's slice: one device per card of /status, by its address.
wait_for 10 bash -c "curl -sf $URL/status | python3 -c 'import json,sys; d=json.load(sys.stdin)[\"devices\"]; sys.exit(len([x for x in d if x[\"busId\"]]) < 2)'" ||
  fail "no cards with addresses on /status"
curl -sf "$URL/status" | python3 -c '
import json, sys
devices = [d for d in json.load(sys.stdin)["devices"] if d["busId"]]
print(json.dumps({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
  "metadata": {"name": "node-a-gpu.example.com"},
  "spec": {"driver": "gpu.example.com", "nodeName": "node-a",
           "pool": {"name": "node-a", "generation": 1, "resourceSliceCount": 1},
           "devices": [{"name": "gpu-%d" % d["minor"], "attributes": {
               "resource.kubernetes.io/pciBusID": {"string": d["busId"]}}} for d in devices]}}))
' >slice.json
curl -sfk -XPOST "$API/control/slice" --data-binary @slice.json >/dev/null || fail "slice"
taints() { curl -sf "$URL/status" | python3 -c "import json,sys; t=json.load(sys.stdin)['kubernetes']['deviceTaints']; $1"; }
export -f taints
wait_for 15 taints 'sys.exit(not all("device" in c for c in t["cards"]) or not t["cards"])' ||
  fail "not every card is mapped: $(curl -sf "$URL/status" | python3 -c 'import json,sys; print(json.load(sys.stdin).get("kubernetes"))')"
taints 'assert t["ruleVersion"] == "v1beta2" and t["sliceVersion"] == "v1", t' || fail "versions"
BUS=$(curl -sf "$URL/status" | python3 -c 'import json,sys; print([d["busId"] for d in json.load(sys.stdin)["devices"] if d["minor"] == 1][0])')
rules() { curl -sfk "$API/control/rules"; }
writes() { curl -sfk "$API/control/rulewrites" | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))'; }
export API URL
export -f rules writes
[ "$(writes)" = 0 ] || fail "rules written for healthy cards: $(rules)"

# The driver's own line for minor 1's address: one rule, for gpu-1 only.
record "NVRM: Xid (PCI:${BUS%.*}): 79, pid=1, name=e2e, GPU has fallen off the bus."
wait_for 10 bash -c '[ "$(writes)" -ge 1 ]' || fail "no rule for the Xid 79: $(grep -i taint "$TMP/exporter.log" | tail -5)"
rules | python3 -c '
import json, sys
r = json.load(sys.stdin)
assert len(r) == 1, r
r = r[0]
assert r["apiVersion"] == "resource.k8s.io/v1beta2", r
assert r["spec"]["deviceSelector"] == {"driver": "gpu.example.com", "pool": "node-a", "device": "gpu-1"}, r
assert r["spec"]["taint"]["key"] == "xpu-exporter.io/card-fault" and r["spec"]["taint"]["value"] == "isolate_card", r
assert r["spec"]["taint"]["effect"] == "NoSchedule", r
assert r["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "xpu-exporter", r
' || fail "the rule: $(rules)"
wait_for 10 has_metric "xpu_kubernetes_device_taint_state{bus_id=\"$BUS\",state=\"written\"} 1" || fail "state not written"
has_metric 'xpu_kubernetes_device_taint_writes_total{op="create",result="ok"} 1' || fail "writes counter"
taints "c=[c for c in t['cards'] if c['busId'] == '$BUS'][0]; assert c['state'] == 'written' and c['rule']['effect'] == 'NoSchedule', c" ||
  fail "/status of the card"
check_families
scrape | promtool check metrics || fail "promtool"

# An Xid 48 (double-bit ECC: reset_card, an event) on minor 2: a rule of
# its own; once its window has passed the card is healthy, and its rule
# goes after the 3 s hold. Minor 1's Xid 79 is a state: its rule stays.
BUS2=$(curl -sf "$URL/status" | python3 -c 'import json,sys; print([d["busId"] for d in json.load(sys.stdin)["devices"] if d["minor"] == 2][0])')
record "NVRM: Xid (PCI:${BUS2%.*}): 48, pid=2, name=e2e, An uncorrectable double bit error (DBE) has been detected on GPU."
wait_for 10 bash -c '[ "$(writes)" -ge 2 ]' || fail "no rule for the Xid 48: $(rules)"
rules | python3 -c '
import json, sys
r = {x["spec"]["deviceSelector"]["device"]: x["spec"]["taint"]["value"] for x in json.load(sys.stdin)}
assert r == {"gpu-1": "isolate_card", "gpu-2": "reset_card"}, r
' || fail "the two rules: $(rules)"
wait_for 30 bash -c 'rules | python3 -c "import json,sys; sys.exit(len(json.load(sys.stdin)) != 1)"' ||
  fail "the recovered card's rule was not deleted: $(rules)"
rules | grep -q '"gpu-1"' || fail "the Xid 79 card's rule went: $(rules)"
[ "$(writes)" = 3 ] || fail "more writes than two creates and a delete: $(curl -sfk "$API/control/rulewrites")"

# Its writes went only to DeviceTaintRules; its reads to discovery, this
# node's slices and its own rules.
curl -sfk "$API/control/requests" | python3 -c '
import json, sys
for p in json.load(sys.stdin):
    if p.startswith(("POST ", "PUT ", "DELETE ", "PATCH ")):
        assert " /apis/resource.k8s.io/v1beta2/devicetaintrules" in p, p
    elif "resourceslices" in p:
        assert "fieldSelector=spec.nodeName%3Dnode-a" in p, p
' || fail "a request outside the rules and this node's slices"
kill -0 "$EXP_PID" || fail "exporter died"
echo "device taints test passed"
