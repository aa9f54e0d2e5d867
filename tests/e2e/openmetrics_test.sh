#!/usr/bin/env bash
# OpenMetrics (issue 14): /metrics answers Prometheus's Accept header with
# OpenMetrics 1.0 (# UNIT, counter families without _total, # EOF), anything
# else with the text format; both carry the same series. A fault raised on a
# device that a pod holds carries that pod as an exemplar on
# xpu_device_fault_events_total, and the real Prometheus, with exemplar
# storage, scrapes the page without error and returns the exemplar from
# /api/v1/query_exemplars.
source "$(dirname "$0")/lib.sh" "$1"
# What Prometheus 2.42 sends when it scrapes.
PROM_ACCEPT='application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1'

start_sim sim --interval 200ms --hal-root "$TMP/hal" --kubelet-socket "$TMP/kubelet.sock"
curl -sf -XPOST "$CONTROL/control/allocate" -d '{"id":"trainjob-7f3a","devices":[{"minor":1}]}' >/dev/null ||
  fail "allocate"
start_exporter sim --collector.interval 200ms --hal sysfs --hal.root "$TMP/hal" --hal.interval 200ms \
  --kubelet.pod-resources-socket "$TMP/kubelet.sock" --kubelet.interval 1s
EXP_ADDR=${URL#http://}
wait_for 10 has_metric 'xpu_device_pod_info{minor="1",.*pod="alloc-trainjob"' || fail "no pod attribution"
curl -sf -XPOST "$CONTROL/control/fault" -d '{"minor":1,"code":"0x80E18400"}' >/dev/null
wait_for 10 has_metric 'xpu_device_fault_events_total{bus_id="[^"]*",code="0x80E18400",.*minor="1"' || fail "fault not counted"

# ---- negotiation and the format ----
curl -sf -H "Accept: $PROM_ACCEPT" -D "$TMP/om.h" "$URL/metrics" >"$TMP/om.txt" || fail "OpenMetrics scrape"
curl -sf -D "$TMP/text.h" "$URL/metrics" >"$TMP/text.txt" || fail "text scrape"
grep -qi '^Content-Type: application/openmetrics-text; version=1.0.0; charset=utf-8' "$TMP/om.h" ||
  fail "OpenMetrics not negotiated: $(grep -i content-type "$TMP/om.h")"
grep -qi '^Content-Type: text/plain; version=0.0.4' "$TMP/text.h" || fail "text format not the default"
[ "$(tail -n 1 "$TMP/om.txt")" = "# EOF" ] || fail "OpenMetrics page does not end with # EOF"
# Prometheus 3.4+ with native histograms asks for protobuf first: among what
# we serve, OpenMetrics is its best choice; 0.0.1 asked alone is answered so.
PROM3_ACCEPT='application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited;q=0.6,application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.5,application/openmetrics-text;version=0.0.1;q=0.4,text/plain;version=1.0.0;escaping=allow-utf-8;q=0.3,text/plain;version=0.0.4;q=0.2,*/*;q=0.1'
curl -sf -o /dev/null -H "Accept: $PROM3_ACCEPT" -D "$TMP/om3.h" "$URL/metrics" || fail "Prometheus 3 scrape"
grep -qi '^Content-Type: application/openmetrics-text; version=1.0.0; charset=utf-8' "$TMP/om3.h" ||
  fail "Prometheus 3's Accept not answered with OpenMetrics: $(grep -i content-type "$TMP/om3.h")"
curl -sf -o /dev/null -H "Accept: application/openmetrics-text;version=0.0.1" -D "$TMP/om001.h" "$URL/metrics" ||
  fail "OpenMetrics 0.0.1 scrape"
grep -qi '^Content-Type: application/openmetrics-text; version=0.0.1; charset=utf-8' "$TMP/om001.h" ||
  fail "0.0.1 not answered as asked: $(grep -i content-type "$TMP/om001.h")"

# ---- zstd (Accept-Encoding: zstd), decoded by the zstd tool ----
# The device families (the exporter's own come and go between scrapes).
series() { grep -v '^#' | grep -v '^xpu_exporter_\|^process_' | sed 's/[ {].*//' | sort -u; }
curl -sf -H 'Accept-Encoding: zstd' -D "$TMP/z.h" "$URL/metrics" >"$TMP/page.zst" || fail "zstd scrape"
grep -qi '^Content-Encoding: zstd' "$TMP/z.h" || fail "zstd not served: $(cat "$TMP/z.h")"
zstd -q -d -c "$TMP/page.zst" >"$TMP/z.txt" || fail "the zstd tool cannot decode the page"
[ "$(series <"$TMP/z.txt")" = "$(series <"$TMP/text.txt")" ] || fail "the zstd page has other families"
# q-values: gzip preferred when the client says so; zstd refused with q=0.
curl -sf -H 'Accept-Encoding: zstd;q=0.1, gzip;q=0.5' -D "$TMP/g.h" "$URL/metrics" >"$TMP/page.gz" ||
  fail "gzip scrape"
grep -qi '^Content-Encoding: gzip' "$TMP/g.h" || fail "gzip not preferred: $(cat "$TMP/g.h")"
[ "$(gzip -dc "$TMP/page.gz" | series)" = "$(series <"$TMP/text.txt")" ] || fail "the gzip page differs"
curl -sf -H 'Accept-Encoding: zstd;q=0' -D "$TMP/i.h" -o /dev/null "$URL/metrics" || fail "identity scrape"
grep -qi '^Content-Encoding' "$TMP/i.h" && fail "a coding the client refused was used"
grep -q '^# EOF' "$TMP/text.txt" && fail "# EOF in the text format"
grep -q '^# UNIT xpu_memory_used_bytes bytes$' "$TMP/om.txt" || fail "no # UNIT for a catalog family"
grep -q '^# UNIT process_cpu_seconds seconds$' "$TMP/om.txt" || fail "no # UNIT for process_cpu_seconds"
grep -q '^# TYPE xpu_device_fault_events counter$' "$TMP/om.txt" || fail "counter family keeps _total"
grep -q '^# TYPE xpu_device_fault_events_total' "$TMP/om.txt" && fail "counter family named with _total"
grep -Eq '^xpu_device_fault_events_total\{bus_id="0000:20:00.0",code="0x80E18400",level="reset_card",minor="1",source="sysfs",uuid="[^"]+"\} [0-9]+ # \{namespace="default",pod="alloc-trainjob",container="main"\} 1 [0-9]+\.[0-9]{3}$' \
  "$TMP/om.txt" || fail "no exemplar with the pod: $(grep '^xpu_device_fault_events_total' "$TMP/om.txt")"
grep -q ' # {' "$TMP/text.txt" && fail "exemplar in the text format"
promtool check metrics <"$TMP/text.txt" || fail "text format not promtool-clean"
# The same series in both (values may move between the two scrapes).
series() { grep -v '^#' "$1" | sed 's/ .*//' | sort; }
diff <(series "$TMP/text.txt") <(series "$TMP/om.txt") >"$TMP/series.diff" ||
  fail "series differ between the formats: $(head -5 "$TMP/series.diff")"

# ---- the real Prometheus, exemplar storage on ----
PROM_PORT=$(free_port)
cat >"$TMP/prometheus.yml" <<YML
global:
  scrape_interval: 1s
scrape_configs:
  - job_name: xpu-exporter
    static_configs:
      - targets: ["$EXP_ADDR"]
YML
prometheus --config.file "$TMP/prometheus.yml" --storage.tsdb.path "$TMP/tsdb" \
  --enable-feature=exemplar-storage --web.listen-address "127.0.0.1:$PROM_PORT" >"$TMP/prom.log" 2>&1 &
PIDS+=($!)
PROM="http://127.0.0.1:$PROM_PORT"
wait_for 30 curl -sf "$PROM/-/ready" || fail "prometheus not ready: $(tail -5 "$TMP/prom.log")"
wait_for 30 bash -c "curl -sf '$PROM/api/v1/query?query=xpu_device_fault_events_total' | grep -q 0x80E18400" ||
  fail "prometheus has no fault events: $(curl -s "$PROM/api/v1/targets")"
# A second raise while Prometheus watches: its exemplar is one Prometheus scrapes.
curl -sf -XDELETE "$CONTROL/control/fault?minor=1&code=0x80E18400" >/dev/null
wait_for 10 bash -c "! curl -sf $URL/metrics | grep -q '^xpu_device_fault_active{minor=\"1\"'" || fail "fault not cleared"
curl -sf -XPOST "$CONTROL/control/fault" -d '{"minor":1,"code":"0x80E18400"}' >/dev/null
exemplars() {
  local now; now=$(date +%s)
  curl -sf "$PROM/api/v1/query_exemplars" --data-urlencode 'query=xpu_device_fault_events_total' \
    --data-urlencode "start=$((now - 120))" --data-urlencode "end=$((now + 60))"
}
wait_for 30 bash -c "$(declare -f exemplars); PROM=$PROM; exemplars | grep -q alloc-trainjob" ||
  fail "no exemplar in Prometheus: $(exemplars)"
exemplars | python3 -c '
import json, sys
data = json.load(sys.stdin)["data"]
ex = [e for s in data for e in s["exemplars"]]
assert any(e["labels"].get("pod") == "alloc-trainjob" and e["labels"].get("namespace") == "default"
           and e["labels"].get("container") == "main" and float(e["value"]) == 1 for e in ex), data
assert all(s["seriesLabels"]["__name__"] == "xpu_device_fault_events_total" for s in data), data
' || fail "exemplar labels wrong: $(exemplars)"
curl -sf "$PROM/api/v1/targets" | python3 -c '
import json, sys
t = json.load(sys.stdin)["data"]["activeTargets"]
assert len(t) == 1 and t[0]["health"] == "up" and t[0]["lastError"] == "", t
' || fail "Prometheus reports a scrape error: $(curl -s "$PROM/api/v1/targets")"
# No ingest errors of any kind in Prometheus's own counters.
for m in prometheus_target_scrapes_sample_out_of_order_total prometheus_target_scrapes_sample_duplicate_timestamp_total \
  prometheus_target_scrapes_sample_out_of_bounds_total prometheus_target_scrapes_exemplar_out_of_order_total \
  prometheus_target_scrape_pool_exceeded_label_limits_total; do
  v=$(curl -sf "$PROM/metrics" | sed -n "s/^$m \(.*\)/\1/p")
  [ "${v:-0}" = 0 ] || fail "$m is $v"
done
echo "PASS"
