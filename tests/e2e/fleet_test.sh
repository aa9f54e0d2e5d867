#!/usr/bin/env bash
# A fleet, end to end, with the engines Debian ships (issue 35): N simulated
# nodes (an xdm-sim and an exporter each), two Prometheus servers in agent mode
# that split the targets between them by hashmod and remote_write everything
# into one VictoriaMetrics, and vmalert evaluating the shipped recording rules
# against VictoriaMetrics and writing their outputs back. Then, against
# VictoriaMetrics' Prometheus-compatible query API:
#   - each node's series arrive through exactly one agent (none twice);
#   - over a window, the samples stored are the samples the agents scraped
#     (scrape_samples_scraped, the exporters' pages as parsed): nothing lost;
#   - every query of every shipped dashboard returns data, and every alert
#     rule's expression evaluates without error;
#   - a card-level fault on one node reaches the fleet rollups.
# Prints the figures of docs/scaling.md ("A fleet through agents").
#   fleet_test.sh BUILD_DIR [NODES]
source "$(dirname "$0")/lib.sh" "$1"
ROOT=$(cd "$E2E_DIR/../.." && pwd)
N=${2:-${XPU_FLEET_NODES:-24}}
SCRAPE_S=2
for tool in prometheus victoria-metrics vmalert; do
  command -v "$tool" >/dev/null || fail "$tool is not installed (./x deps)"
done

# VictoriaMetrics, single node, on a temporary port and data folder. Queries
# see samples as soon as they are stored (no 30 s latency offset).
VM_PORT=$(free_port)
VM=http://127.0.0.1:$VM_PORT
victoria-metrics -storageDataPath "$TMP/vm" -httpListenAddr "127.0.0.1:$VM_PORT" \
  -retentionPeriod 1 -search.latencyOffset 0s -search.disableCache -loggerLevel ERROR \
  >"$TMP/vm.log" 2>&1 &
PIDS+=($!)
wait_for 20 curl -sf "$VM/health" || fail "victoria-metrics did not start: $(tail -3 "$TMP/vm.log")"

# The nodes: alternating two models; node 1 has every source (its
# simulator's sysfs and PCI tree, a kernel log with an Xid record, a pod from
# its kubelet), so that every dashboard panel has data; a card-level fault
# is raised on it below.
TARGETS=""
for i in $(seq 1 "$N"); do
  model=PPU-810E
  [ $((i % 2)) -eq 0 ] && model=H800-SXM5-80GB
  hal=(--hal none --kubelet.pod-resources-socket "")
  sim_extra=(--control-address "")
  if [ "$i" -eq 1 ]; then
    awk '{printf "3,1,%.0f,-;NVRM: Xid (PCI:0000:20:00): 63, pid=1, name=train, Row Remapper: New row marked for remapping, reset gpu to activate.\n", $1 * 1000000}' \
      /proc/uptime >"$TMP/kmsg.records"
    hal=(--hal sysfs,pci,kmsg --hal.root "$TMP/hal1" --hal.interval 500ms --hal.pci.sysfs-root "$TMP/hal1/sys"
      --hal.kmsg.path "$TMP/kmsg.records" --hal.kmsg.user-records --hal.state-dir "$TMP"
      --kubelet.pod-resources-socket "$TMP/kubelet1.sock" --kubelet.interval 1s)
    sim_extra=(--hal-root "$TMP/hal1" --kubelet-socket "$TMP/kubelet1.sock")
  fi
  "$SIM" --socket "$TMP/s$i.sock" --controller-socket "$TMP/c$i.sock" --model "$model" \
    --devices 4 --interval 1s --seed "$i" "${sim_extra[@]}" >"$TMP/sim$i.out" 2>"$TMP/sim$i.err" &
  PIDS+=($!)
  "$EXPORTER" --xdm.endpoint "unix://$TMP/s$i.sock" --controller.endpoint "unix://$TMP/c$i.sock" \
    --web.listen-address 127.0.0.1:0 "${hal[@]}" \
    --hal.nvml.library "$TMP/no-libnvidia-ml.so" --kubernetes.node-name "node-$i" \
    2>"$TMP/exp$i.log" &
  PIDS+=($!)
done
for i in $(seq 1 "$N"); do
  wait_for 20 grep -q "listening on port" "$TMP/exp$i.log" || fail "exporter $i did not start: $(cat "$TMP/exp$i.log")"
  TARGETS+="\"127.0.0.1:$(grep -o 'listening on port(s) [0-9]*' "$TMP/exp$i.log" | awk '{print $4}')\","
done
NODE1=$(grep -o 'listening on port(s) [0-9]*' "$TMP/exp1.log" | awk '{print "127.0.0.1:" $4}')
wait_for 10 grep -q "xdm-sim ready" "$TMP/sim1.out" || fail "xdm-sim 1 did not start"
CONTROL=$(grep -o 'control=http://[0-9.:]*' "$TMP/sim1.out" | cut -d= -f2)
curl -sf -XPOST "$CONTROL/control/allocate" -d '{"id":"trainjob-7f3a","devices":[{"minor":1}]}' >/dev/null ||
  fail "allocate"

step() { echo "[$SECONDS s] $*"; }
step "$N nodes listening"

# Two agents, each keeping the targets whose address hashes to its shard.
AGENT_URLS=()
for shard in 0 1; do
  port=$(free_port)
  cat >"$TMP/agent$shard.yml" <<YML
global:
  scrape_interval: ${SCRAPE_S}s
  external_labels: {cluster: e2e, shard: "$shard"}
scrape_configs:
  - job_name: xpu-exporter
    static_configs:
      - targets: [${TARGETS%,}]
    relabel_configs:
      - source_labels: [__address__]
        modulus: 2
        target_label: __tmp_shard
        action: hashmod
      - source_labels: [__tmp_shard]
        regex: "$shard"
        action: keep
remote_write:
  - url: $VM/api/v1/write
    queue_config: {batch_send_deadline: 1s}
YML
  prometheus --enable-feature=agent --config.file "$TMP/agent$shard.yml" \
    --storage.agent.path "$TMP/agent$shard" --web.listen-address "127.0.0.1:$port" \
    >"$TMP/agent$shard.log" 2>&1 &
  PIDS+=($!)
  AGENT_URLS+=("http://127.0.0.1:$port")
done
for u in "${AGENT_URLS[@]}"; do
  wait_for 30 curl -sf "$u/-/ready" || fail "agent $u did not start: $(tail -3 "$TMP"/agent*.log)"
done

step "agents ready"

# vmalert: the shipped rules against VictoriaMetrics, outputs written back.
# Its alerts go nowhere (this test reads the expressions, e2e_alerts the
# notifications).
VMALERT_PORT=$(free_port)
vmalert -rule "$ROOT/alerts/xpu-fleet.rules.yml" -rule "$ROOT/alerts/xpu-exporter.rules.yml" \
  -datasource.url "$VM" -remoteWrite.url "$VM" -notifier.url "http://127.0.0.1:9" \
  -evaluationInterval 2s -httpListenAddr "127.0.0.1:$VMALERT_PORT" -loggerLevel ERROR \
  >"$TMP/vmalert.log" 2>&1 &
PIDS+=($!)
wait_for 20 curl -sf "http://127.0.0.1:$VMALERT_PORT/health" || fail "vmalert did not start: $(tail -3 "$TMP/vmalert.log")"

# q PROMQL [TIME]: the first result's value from VictoriaMetrics, or empty.
q() {
  curl -sf "$VM/api/v1/query" --data-urlencode "query=$1" ${2:+--data-urlencode "time=$2"} |
    python3 -c 'import json,sys; r=json.load(sys.stdin)["data"]["result"]; print(r[0]["value"][1] if r else "")'
}
equals() { [ "$(q "$1")" = "$2" ]; }

# Every node up, through one agent each.
wait_for 60 equals 'count(up{job="xpu-exporter"} == 1)' "$N" ||
  fail "not every node up in VictoriaMetrics: $(q 'count(up{job="xpu-exporter"} == 1)') of $N"
[ "$(q 'max(count by (instance) (up{job="xpu-exporter"}))')" = 1 ] || fail "a node is scraped by both agents"
# Each node through the agent hashmod names: its address's MD5, the last 8
# bytes big-endian, modulo 2 (Prometheus's relabel.go), computed here apart
# from Prometheus. The ports are random, so a split all to one side (about 1
# in 2^N) is a right answer too, not a failure.
expected=$(python3 - "${TARGETS%,}" <<'PY'
import hashlib, sys
for t in sys.argv[1].replace('"', '').split(','):
    print(t, int.from_bytes(hashlib.md5(t.encode()).digest()[8:], 'big') % 2)
PY
)
held=$(curl -sf "$VM/api/v1/query" --data-urlencode 'query=up{job="xpu-exporter"}' |
  python3 -c 'import json,sys; [print(r["metric"]["instance"], r["metric"]["shard"]) for r in json.load(sys.stdin)["data"]["result"]]')
[ "$(sort <<<"$held")" = "$(sort <<<"$expected")" ] ||
  fail "the agents do not hold the targets hashmod assigns: held $(sort <<<"$held" | tr '\n' ' '); assigned $(sort <<<"$expected" | tr '\n' ' ')"

step "every node up in VictoriaMetrics, through one agent each"

# A card-level fault on node 1 (an uncorrectable HBM error: reset_card)
# reaches the per-node and per-cluster rollups, which read 0 before it.
node1_faults="cluster_instance:xpu_devices_card_fault:count{cluster=\"e2e\",instance=\"$NODE1\"}"
wait_for 60 equals "$node1_faults" 0 || fail "node 1's rollup before the fault: '$(q "$node1_faults")', not 0"
wait_for 60 equals 'cluster:xpu_nodes_with_card_fault:count{cluster="e2e"}' 0 ||
  fail "a node with a card fault before any: $(q 'cluster:xpu_nodes_with_card_fault:count')"
curl -sf -XPOST "$CONTROL/control/fault" -d '{"minor":2,"code":"0x80E18400"}' >/dev/null || fail "control fault"
wait_for 60 equals "$node1_faults" 1 || fail "the fault did not reach node 1's rollup: $(q "$node1_faults")"
wait_for 60 equals 'cluster:xpu_devices_card_fault:count{cluster="e2e"}' 1 ||
  fail "the fault did not reach the rollup: $(q 'cluster:xpu_devices_card_fault:count')"
wait_for 30 equals 'cluster:xpu_nodes_with_card_fault:count{cluster="e2e"}' 1 ||
  fail "cluster:xpu_nodes_with_card_fault:count is $(q 'cluster:xpu_nodes_with_card_fault:count'), not 1"
wait_for 30 equals 'cluster:xpu_devices:count{cluster="e2e"}' $((N * 4)) ||
  fail "cluster:xpu_devices:count is $(q 'cluster:xpu_devices:count'), not $((N * 4))"

step "the fault in the rollups"

# No series twice, from the stored series' side (one agent per node, above,
# is what makes it so): dropping the shard label merges nothing (the name
# kept as a label: an aggregation drops it).
all=$(q 'count({job="xpu-exporter",shard=~".+"})')
merged=$(q 'count(count without (shard) (label_replace({job="xpu-exporter",shard=~".+"}, "name", "$1", "__name__", "(.+)")))')
[ -n "$all" ] && [ "$all" = "$merged" ] || fail "series duplicated across the shards: $all with the shard label, $merged without"

# Nothing lost: over a window of 16 s after every node was up, the samples
# stored (those the agents wrote, with their shard label; not vmalert's
# ALERTS, which keep the labels of the series they fired on)
# equal the samples the agents scraped. The window is real time that must
# pass; then the agents send within a second or two: wait for
# VictoriaMetrics to agree, up to 30 s.
W=16
T_END=$(( $(date +%s) + W + 1 ))
past() { [ "$(date +%s)" -gt "$1" ]; }
wait_for $((W + 10)) past "$T_END" || fail "the clock"
served="sum(sum_over_time(scrape_samples_scraped{job=\"xpu-exporter\"}[${W}s]))"
stored="sum(count_over_time({job=\"xpu-exporter\",shard=~\".+\",__name__!~\"up|scrape_.+|ALERTS.*\"}[${W}s]))"
same_count() { local a b; a=$(q "$served" "$T_END"); b=$(q "$stored" "$T_END"); [ -n "$a" ] && [ "$a" = "$b" ]; }
# by_instance EXPR: "instance value" lines at T_END.
by_instance() {
  curl -sf "$VM/api/v1/query" --data-urlencode "query=$1" --data-urlencode "time=$T_END" |
    python3 -c 'import json,sys; [print(r["metric"].get("instance"), r["metric"].get("__name__", ""), r["value"][1]) for r in json.load(sys.stdin)["data"]["result"]]' | sort
}
wait_for 30 same_count || {
  echo "scraped and stored per instance, where they differ:" >&2
  diff <(by_instance "sum by (instance) (${served#sum})") <(by_instance "sum by (instance) (${stored#sum})") >&2 || true
  echo "series with more or fewer samples than their target's scrapes (new, gone, or stale markers):" >&2
  curl -sf "$VM/api/v1/query" --data-urlencode "time=$T_END" --data-urlencode \
    "query=count_over_time({job=\"xpu-exporter\",shard=~\".+\",__name__!~\"up|scrape_.+|ALERTS.*\"}[${W}s]) != on (instance) group_left count_over_time(up{job=\"xpu-exporter\"}[${W}s])" |
    head -c 3000 >&2
  fail "samples lost or added between the exporters and VictoriaMetrics over ${W} s to $T_END: scraped $(q "$served" "$T_END"), stored $(q "$stored" "$T_END")"
}
echo "nothing lost: $(q "$served" "$T_END") samples scraped and stored over ${W} s"

step "nothing lost"

# Every dashboard query returns data and every recording rule has outputs;
# every alert expression evaluates without error.
python3 "$E2E_DIR/query_dashboards.py" "$VM" "$ROOT" ".*" ".*" || fail "dashboard queries on VictoriaMetrics"
python3 - "$VM" "$ROOT" <<'PY' || fail "alert expressions on VictoriaMetrics"
import glob, json, sys, urllib.parse, urllib.request, yaml
vm, root = sys.argv[1:]
bad, n = [], 0
for path in sorted(glob.glob(root + "/alerts/*.yml")):
    for g in yaml.safe_load(open(path))["groups"]:
        for r in g["rules"]:
            if "alert" not in r:
                continue
            n += 1
            url = vm + "/api/v1/query?" + urllib.parse.urlencode({"query": r["expr"]})
            try:
                body = json.load(urllib.request.urlopen(url, timeout=10))
            except Exception as e:  # an HTTP error is VictoriaMetrics refusing the expression
                body = {"status": "error", "error": str(e)}
            if body.get("status") != "success":
                bad.append(f'{r["alert"]}: {body.get("error")}')
for b in bad:
    print("FAIL:", b)
print(f"{n - len(bad)}/{n} alert expressions evaluate on VictoriaMetrics")
sys.exit(1 if bad else 0)
PY

# Figures (docs/scaling.md): from VictoriaMetrics and the agents' own metrics.
agent_metric() {  # agent_metric NAME: summed over both agents
  local total=0 v
  for u in "${AGENT_URLS[@]}"; do
    v=$(curl -sf "$u/metrics" | awk -v n="$1" '$1 == n || index($1, n "{") == 1 {s += $2} END {print s + 0}')
    total=$(awk -v a="$total" -v b="${v:-0}" 'BEGIN {printf "%.0f", a + b}')
  done
  echo "$total"
}
series=$(q 'count({job="xpu-exporter",shard=~".+",__name__!~"up|scrape_.+|ALERTS.*"})')
per_scrape=$(q 'avg(scrape_samples_scraped{job="xpu-exporter"})')
bytes=$(agent_metric prometheus_remote_storage_bytes_total)
samples=$(agent_metric prometheus_remote_storage_samples_total)
awk -v n="$N" -v s="$series" -v p="$per_scrape" -v b="$bytes" -v c="$samples" -v i="$SCRAPE_S" 'BEGIN {
  bps = b / c
  printf "fleet figures: nodes %d, devices %d, series per node %.0f, samples per scrape per node %.0f\n", n, n * 4, s / n, p
  printf "fleet figures: remote-write %d bytes for %d samples: %.2f bytes per sample\n", b, c, bps
  printf "fleet figures: at a %d s scrape, per node %.1f samples/s, %.1f MB per node-hour; at 15 s %.2f samples/s, %.2f MB per node-hour\n", i, p / i, bps * p / i * 3600 / 1e6, p / 15, bps * p / 15 * 3600 / 1e6
}'
echo "PASS: e2e_fleet ($N nodes, two agents, VictoriaMetrics, vmalert)"
