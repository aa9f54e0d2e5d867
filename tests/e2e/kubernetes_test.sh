#!/usr/bin/env bash
# The API-server watch end to end, against a stand-in API server that speaks
# the real list/watch protocol over HTTPS with a bearer token
# (tests/support/fake_apiserver.py): pod labels on xpu_device_pod_info by an
# allowlist, HAMi grants as per-container limits, HAMi's node register as
# device shares; pods appear, change and vanish; a broken watch resumes from
# its resourceVersion; 410 Gone re-lists; malformed annotations are counted;
# 401/403 and an absent API server make a failing collector, never a crash;
# no request ever asks for more than this node's pods.
source "$(dirname "$0")/lib.sh" "$1"
cd "$TMP"
start_apiserver s3cret-token

start_sim sim --interval 100ms --kubelet-socket "$TMP/kubelet.sock"
# The stand-in kubelet names a pod "alloc-" + the allocation id's first 8.
curl -sf -XPOST "$CONTROL/control/allocate" -d '{"id":"train000","devices":[{"minor":2}]}' >/dev/null
UUID2=$(curl -sf "$CONTROL/control/state" | python3 -c 'import json,sys; print([d["uuid"] for d in json.load(sys.stdin)["devices"] if d["minor"]==2][0])')
UUID5=$(curl -sf "$CONTROL/control/state" | python3 -c 'import json,sys; print([d["uuid"] for d in json.load(sys.stdin)["devices"] if d["minor"]==5][0])')
pod() {  # pod NAME NODE LABELS-JSON ANNOTATIONS-JSON
  api POST pod "{\"metadata\":{\"namespace\":\"ml\",\"name\":\"$1\",\"labels\":$3,\"annotations\":$4},
    \"spec\":{\"nodeName\":\"$2\",\"containers\":[{\"name\":\"main\"},{\"name\":\"sidecar\"}]},\"status\":{\"phase\":\"Running\"}}"
}
pod alloc-train000 node-a '{"team":"vision","app.kubernetes.io/name":"trainer","secret":"no"}' \
  "{\"hami.io/vgpu-devices-allocated\":\"$UUID2,PPU,4096,30:;$UUID5,PPU,2048,0:;\"}"
pod elsewhere node-b '{"team":"other"}' '{}'
api POST node "{\"metadata\":{\"name\":\"node-a\",\"annotations\":{
  \"hami.io/node-ppu-register\":\"$UUID2,10,65536,100,PPU-810E,0,true:$UUID5,4,65536,100,PPU-810E,1,false:\"}}}"

start_exporter sim --collector.interval 100ms --hal none --kubelet.pod-resources-socket "$TMP/kubelet.sock" \
  --kubelet.interval 100ms --kubernetes.api-server "$API" --kubernetes.ca-file "$TMP/ca.crt" \
  --kubernetes.token-file "$TMP/token" --kubernetes.node-name node-a --kubernetes.node-interval 200ms \
  --kubernetes.pod-labels 'team,app\.kubernetes\.io/.*' --log.level debug

wait_for 10 has_metric "xpu_device_pod_info{minor=\"2\",uuid=\"$UUID2\",namespace=\"default\"" || fail "no kubelet row"
# The kubelet row of another namespace gets no labels; the API server's pod
# in "ml" has its own limits.
wait_for 10 has_metric "xpu_container_memory_limit_bytes{minor=\"2\",uuid=\"$UUID2\",namespace=\"ml\",pod=\"alloc-train000\",container=\"main\"} 4294967296" ||
  fail "no memory limit: $(scrape | grep -E 'xpu_container|kubernetes|apiserver')"
has_metric "xpu_container_core_limit_ratio{minor=\"2\",uuid=\"$UUID2\",namespace=\"ml\",pod=\"alloc-train000\",container=\"main\"} 0.3" || fail "core limit"
has_metric "xpu_container_memory_limit_bytes{minor=\"5\",uuid=\"$UUID5\",namespace=\"ml\",pod=\"alloc-train000\",container=\"sidecar\"} 2147483648" ||
  fail "second container's grant"
scrape | grep -q 'xpu_container_core_limit_ratio{[^}]*container="sidecar"' && fail "a 0 core grant is no limit"
wait_for 10 has_metric "xpu_device_split_count{minor=\"2\",uuid=\"$UUID2\"} 10" || fail "node register"
has_metric "xpu_device_shared_healthy{minor=\"5\",uuid=\"$UUID5\"} 0" || fail "register health"
has_metric "xpu_device_shared_memory_bytes{minor=\"2\",uuid=\"$UUID2\"} 68719476736" || fail "register memory"
has_metric 'xpu_kubernetes_pods 1' || fail "pods of another node counted"
has_metric 'xpu_exporter_collector_success{collector="apiserver_pods"} 1' || fail "collector"

# Labels reach xpu_device_pod_info for the pod the kubelet reports; the
# kubelet pod here is in "default", so add the API server's view of it.
api POST pod '{"metadata":{"namespace":"default","name":"alloc-train000","labels":{"team":"vision","secret":"x"}},"spec":{"nodeName":"node-a","containers":[{"name":"main"}]}}'
wait_for 10 has_metric "xpu_device_pod_info{minor=\"2\",uuid=\"$UUID2\",namespace=\"default\",pod=\"alloc-train000\",container=\"main\",resource=\"lingjun.com/xpu\",label_team=\"vision\"} 1" ||
  fail "pod label not on pod_info: $(scrape | grep pod_info)"
scrape | grep -q 'label_secret' && fail "a label outside the allowlist was exported"

# A change arrives through the watch.
api POST pod '{"metadata":{"namespace":"default","name":"alloc-train000","labels":{"team":"speech"}},"spec":{"nodeName":"node-a","containers":[{"name":"main"}]}}'
wait_for 10 has_metric 'xpu_device_pod_info{.*label_team="speech"' || fail "label change not seen"

# A broken watch resumes from its resourceVersion (no re-list).
LISTS=$(curl -sfk "$API/control/requests" | python3 -c 'import json,sys; print(sum(1 for p in json.load(sys.stdin) if "/pods?" in p and "watch=true" not in p))')
api POST break
pod late-0 node-a '{"team":"late"}' '{}'
wait_for 15 has_metric 'xpu_kubernetes_pods 3' || fail "pod added after a broken watch not seen"
curl -sfk "$API/control/requests" | python3 -c '
import json, sys
reqs = json.load(sys.stdin)
lists = sum(1 for p in reqs if "/pods?" in p and "watch=true" not in p)
assert lists == '"$LISTS"', f"a broken watch re-listed: {lists} lists"
resumed = [p for p in reqs if "watch=true" in p and "resourceVersion=" in p]
assert len(resumed) >= 2, reqs
' || fail "the watch did not resume from its resourceVersion"
has_metric 'xpu_kubernetes_watch_restarts_total{reason="error"} [1-9]' || fail "broken watch not counted"

# 410 Gone: the resourceVersion expired; the exporter lists again. One step:
# between a compaction and a separate break, a bookmark could hand the watch
# the new resourceVersion, and its resume would not be refused.
api POST compact '{"break":true}'
wait_for 15 has_metric 'xpu_kubernetes_watch_restarts_total{reason="gone"} [1-9]' || fail "410 not counted"
api DELETE "pod?namespace=ml&name=late-0"
wait_for 10 has_metric 'xpu_kubernetes_pods 2' || fail "deleted pod still counted after re-list"
curl -sfk "$API/control/requests" | python3 -c '
import json, sys
lists = sum(1 for p in json.load(sys.stdin) if "/pods?" in p and "watch=true" not in p)
assert lists > '"$LISTS"', "no re-list after 410"
' || fail "410 did not re-list"

# A pod that vanishes takes its limits with it.
api DELETE "pod?namespace=ml&name=alloc-train000"
wait_for 10 bash -c "! curl -sf '$URL/metrics' | grep -q xpu_container_memory_limit_bytes" || fail "limits of a deleted pod remain"

# Malformed annotations are counted, never fatal.
pod bad-0 node-a '{}' '{"hami.io/vgpu-devices-allocated":"not,a,grant"}'
wait_for 10 has_metric 'xpu_kubernetes_malformed_total{what="allocated_annotation"} [1-9]' || fail "bad annotation not counted"
api POST node '{"metadata":{"name":"node-a","annotations":{"hami.io/node-ppu-register":"GPU-x,ten,1,1,t,0,true:"}}}'
wait_for 10 has_metric 'xpu_kubernetes_malformed_total{what="register_annotation"} [1-9]' || fail "bad register not counted"
kill -0 "$EXP_PID" || fail "exporter died on malformed data"

# 403 and 401: failing collectors with a clear log line, no crash; back to 1 after.
api POST auth '{"status":403}'
api POST break
wait_for 15 has_metric 'xpu_exporter_collector_success{collector="apiserver_node"} 0' || fail "403 on node not a failing collector"
wait_for 15 has_metric 'xpu_exporter_collector_success{collector="apiserver_pods"} 0' || fail "403 on pods not a failing collector"
grep -q "RBAC must allow" "$TMP/exporter.log" || fail "403 not explained in the log"
echo "wrong" >"$TMP/token"
api POST auth '{"status":200}'
wait_for 15 grep -q "token was refused" "$TMP/exporter.log" || fail "401 not explained in the log"
echo "s3cret-token" >"$TMP/token"  # rotated back: re-read on the next request
wait_for 40 has_metric 'xpu_exporter_collector_success{collector="apiserver_pods"} 1' || fail "pods collector did not recover: $(grep kubernetes "$TMP/exporter.log" | tail; scrape | grep -E "apiserver|restarts")"
wait_for 10 has_metric 'xpu_exporter_collector_success{collector="apiserver_node"} 1' || fail "node collector did not recover"
kill -0 "$EXP_PID" || fail "exporter died"

# Never more than this node's pods.
curl -sfk "$API/control/requests" | python3 -c '
import json, sys
for p in json.load(sys.stdin):
    assert p.startswith("/api/v1/nodes/node-a") or "fieldSelector=spec.nodeName%3Dnode-a" in p, p
' || fail "a request asked for more than this node"
scrape | promtool check metrics || fail "promtool check metrics"
check_families

# The API server gone altogether: failing collectors, still ready, still serving.
kill "${PIDS[0]}"
wait_for 40 has_metric 'xpu_exporter_collector_success{collector="apiserver_pods"} 0' || fail "absent API server not a failing collector"
wait_for 10 has_metric 'xpu_exporter_collector_success{collector="apiserver_node"} 0' || fail "absent API server (node) not failing"
curl -sf "$URL/-/ready" >/dev/null || fail "not ready without the API server"
kill -0 "$EXP_PID" || fail "exporter died without the API server"

# An API server that accepts and never answers cannot hold a shutdown: the
# exporter exits on SIGTERM within about a second (curl's stop check).
python3 -c '
import socket, sys
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(16)
open("hole.port", "w").write(str(s.getsockname()[1]))
held = []
while True:
    c, _ = s.accept(); held.append(c)
    print("accepted", flush=True)
' >hole.log &
PIDS+=($!)
wait_for 5 test -s hole.port || fail "black hole did not start"
"$EXPORTER" --web.listen-address 127.0.0.1:0 --xdm.endpoint "unix://$TMP/sim.sock" --hal none \
  --kubelet.pod-resources-socket "" --kubernetes.api-server "https://127.0.0.1:$(cat hole.port)" \
  --kubernetes.ca-file "$TMP/ca.crt" --kubernetes.token-file "$TMP/token" --kubernetes.node-name node-a \
  2>"$TMP/hung.log" &
HUNG=$!
PIDS+=("$HUNG")
wait_for 10 grep -q "listening on port" "$TMP/hung.log" || fail "second exporter did not start"
# Both calls (the pod list and the node read) are stuck in the black hole.
wait_for 10 bash -c '[ "$(grep -c accepted hole.log)" -ge 2 ]' || fail "the exporter did not call the black hole"
kill -TERM "$HUNG"
MS=$(wait_ms 3000 bash -c "! kill -0 $HUNG") || fail "exporter hung on SIGTERM behind a silent API server"
echo "exit behind a silent API server: ${MS} ms"
echo "kubernetes test passed"
