#!/usr/bin/env bash
# A fleet on one machine: one real Prometheus scraping N exporters on
# loopback, each fed by its own xdm-sim (8 devices x 7 links, 1 s updates),
# every 15 s, with the shipped recording rules and alerts loaded, for a few
# minutes. Prints what one Prometheus pays per node (docs/scaling.md).
#   ./x bench fleet [EXPORTERS [SECONDS]]      (or bench/fleet.sh BUILD_DIR ...)
# Not part of the tests: it prints figures.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BUILD=${1:-$ROOT/build}
N=${2:-50}
SECONDS_TO_RUN=${3:-240}
SIM=$BUILD/tools/xdm-sim/xdm-sim
EXP=$BUILD/src/app/xpu-exporter
TMP=$(mktemp -d /tmp/xpu-fleet.XXXXXX)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$TMP"; }
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
until_ok() { for _ in $(seq 1 600); do "$@" >/dev/null 2>&1 && return 0; sleep 0.1; done; return 1; }
rss_mib() { awk '/^VmRSS/ {printf "%.1f", $2 / 1024}' "/proc/$1/status"; }

TARGETS=""
EXP_PIDS=()
for i in $(seq 1 "$N"); do
  "$SIM" --socket "$TMP/s$i.sock" --controller-socket "$TMP/c$i.sock" --control-address "" \
    --devices 8 --links 7 --interval 1s >"$TMP/sim$i.log" 2>&1 &
  PIDS+=($!)
  port=$(free_port)
  "$EXP" --xdm.endpoint "unix://$TMP/s$i.sock" --controller.endpoint "unix://$TMP/c$i.sock" \
    --web.listen-address "127.0.0.1:$port" --hal none --kubelet.pod-resources-socket "" \
    --kubernetes.node-name "node-$i" 2>"$TMP/exp$i.log" &
  PIDS+=($!)
  EXP_PIDS+=($!)
  TARGETS+="\"127.0.0.1:$port\","
done
for i in $(seq 1 "$N"); do
  until_ok grep -q "listening on port" "$TMP/exp$i.log" || { echo "exporter $i did not start" >&2; exit 1; }
done

PROM_PORT=$(free_port)
PROM="http://127.0.0.1:$PROM_PORT"
cat >"$TMP/prometheus.yml" <<YML
global:
  scrape_interval: 15s
  evaluation_interval: 15s
rule_files:
  - $ROOT/alerts/xpu-exporter.rules.yml
scrape_configs:
  - job_name: xpu-exporter
    static_configs:
      - targets: [${TARGETS%,}]
  - job_name: prometheus
    static_configs:
      - targets: ["127.0.0.1:$PROM_PORT"]
YML
# extra-scrape-metrics: scrape_body_size_bytes per target.
prometheus --config.file "$TMP/prometheus.yml" --storage.tsdb.path "$TMP/tsdb" \
  --web.listen-address "127.0.0.1:$PROM_PORT" --enable-feature=extra-scrape-metrics \
  >"$TMP/prom.log" 2>&1 &
PROM_PID=$!
PIDS+=("$PROM_PID")
until_ok curl -sf "$PROM/-/ready" || { echo "prometheus did not start: $(tail -3 "$TMP/prom.log")" >&2; exit 1; }
echo "fleet: $N exporters x 8 devices, Prometheus scraping every 15 s for $SECONDS_TO_RUN s..." >&2
sleep "$SECONDS_TO_RUN"

q() {  # q PROMQL: the first result's value
  curl -sf "$PROM/api/v1/query" --data-urlencode "query=$1" |
    python3 -c 'import json,sys; r=json.load(sys.stdin)["data"]["result"]; print(r[0]["value"][1] if r else "n/a")'
}
num() { awk -v v="$1" -v f="${2:-%.1f}" 'BEGIN {if (v == "n/a") print v; else printf f, v}'; }
up=$(q 'sum(up{job="xpu-exporter"})')
devices=$(q 'count(xpu_device_info)')
series_node=$(q 'avg(scrape_samples_scraped{job="xpu-exporter"})')
series_device=$(q 'count({job="xpu-exporter",minor!=""}) / count(xpu_device_info)')
bytes=$(q 'avg(scrape_body_size_bytes{job="xpu-exporter"})')
scrape_ms=$(q 'avg(scrape_duration_seconds{job="xpu-exporter"}) * 1000')
scrape_max_ms=$(q 'max(max_over_time(scrape_duration_seconds{job="xpu-exporter"}[5m])) * 1000')
ingest=$(q 'rate(prometheus_tsdb_head_samples_appended_total[2m])')
head=$(q 'prometheus_tsdb_head_series')
rules_ms=$(q 'sum(prometheus_rule_group_last_duration_seconds) * 1000')
rec_ms=$(q 'prometheus_rule_group_last_duration_seconds{rule_group=~".*xpu-recording"} * 1000')
prom_rss=$(rss_mib "$PROM_PID")
exp_rss=0
for p in "${EXP_PIDS[@]}"; do exp_rss=$(awk -v a="$exp_rss" -v b="$(rss_mib "$p")" 'BEGIN {print a + b}'); done

echo "## Fleet: $N exporters, one Prometheus ($(date -u +%Y-%m-%d), $(nproc) cores, ${SECONDS_TO_RUN} s)"
echo
echo "| what | value |"
echo "|---|---|"
echo "| targets up | $(num "$up" %d) of $N |"
echo "| devices | $(num "$devices" %d) |"
echo "| samples per scrape, per node | $(num "$series_node") |"
echo "| series per device (with a minor label) | $(num "$series_device") |"
echo "| bytes per scrape (uncompressed) | $(num "$bytes" %d) |"
echo "| scrape duration, mean / max ms | $(num "$scrape_ms" %.2f) / $(num "$scrape_max_ms" %.2f) |"
echo "| Prometheus ingest, samples/s | $(num "$ingest") |"
echo "| Prometheus head series | $(num "$head" %d) |"
echo "| rule evaluation, all groups, ms | $(num "$rules_ms" %.2f) |"
echo "| rule evaluation, recording group, ms | $(num "$rec_ms" %.2f) |"
echo "| Prometheus RSS MiB | $prom_rss |"
echo "| exporters' RSS, mean MiB | $(awk -v a="$exp_rss" -v n="$N" 'BEGIN {printf "%.1f", a / n}') |"
