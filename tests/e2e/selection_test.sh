#!/usr/bin/env bash
# Metric selection: --metrics.exclude/--metrics.include (flags or
# --config.file) drop families; catalog families are dropped at ingest, so
# the store holds fewer series (xpu_exporter_series), and others (process_*,
# the registry's) are left out of the page. /config shows the patterns; a bad
# pattern exits 2.
source "$(dirname "$0")/lib.sh" "$1"
start_sim sim --interval 100ms
start_exporter sim --collector.interval 100ms --hal none --kubelet.pod-resources-socket ""
FULL_URL=$URL
cat >"$TMP/sel.yml" <<'YML'
metrics:
  exclude: ['xpu_link_.*', 'process_.*', 'xpu_device_topology_info']
YML
"$EXPORTER" --web.listen-address 127.0.0.1:0 --xdm.endpoint "unix://$TMP/sim.sock" \
  --controller.endpoint "unix://$TMP/sim-ctl.sock" --collector.interval 100ms --hal none \
  --kubelet.pod-resources-socket "" --config.file "$TMP/sel.yml" 2>"$TMP/sel.log" &
PIDS+=($!)
wait_for 10 grep -q "listening on port" "$TMP/sel.log" || fail "selected exporter did not start: $(cat "$TMP/sel.log")"
SEL_URL="http://127.0.0.1:$(grep -o 'listening on port(s) [0-9]*' "$TMP/sel.log" | awk '{print $4}')"
series() { curl -sf "$1/metrics" | sed -n 's/^xpu_exporter_series \([0-9]*\).*/\1/p'; }
full_ready() { grep -q '^xpu_link_up{' <(curl -sf "$FULL_URL/metrics") && [ "$(series "$FULL_URL")" -gt 0 ]; }
sel_ready() { grep -q '^xpu_utilization_ratio{' <(curl -sf "$SEL_URL/metrics"); }
wait_for 15 full_ready || fail "full exporter has no link series"
wait_for 15 sel_ready || fail "selected exporter has no data"
curl -sf "$SEL_URL/metrics" >"$TMP/sel.page"
for fam in xpu_link_ process_ xpu_device_topology_info; do
  grep -q "^$fam" "$TMP/sel.page" && fail "excluded family $fam is on the page"
done
grep -q '^xpu_device_info{' "$TMP/sel.page" || fail "a family not excluded went missing"
FULL=$(series "$FULL_URL")
SEL=$(series "$SEL_URL")
echo "series held: $FULL with every family, $SEL with xpu_link_* excluded"
[ "$SEL" -lt "$((FULL / 2))" ] || fail "excluded series still held: $SEL of $FULL"
curl -sf "$SEL_URL/config" | python3 -c '
import json, sys
s = json.load(sys.stdin)["settings"]["metrics.exclude"]
assert s["source"] == "file" and "xpu_link_.*" in s["value"], s
' || fail "/config does not show the selection"
grep -q "metric selection: .* catalog families exported" "$TMP/sel.log" || fail "selection not logged"
# --xdm.devices: a subset of the devices, from every source.
"$EXPORTER" --web.listen-address 127.0.0.1:0 --xdm.endpoint "unix://$TMP/sim.sock" \
  --controller.endpoint "unix://$TMP/sim-ctl.sock" --collector.interval 100ms --hal none \
  --kubelet.pod-resources-socket "" --xdm.devices 1,3 2>"$TMP/dev.log" &
PIDS+=($!)
wait_for 10 grep -q "listening on port" "$TMP/dev.log" || fail "device-subset exporter did not start: $(cat "$TMP/dev.log")"
DEV_URL="http://127.0.0.1:$(grep -o 'listening on port(s) [0-9]*' "$TMP/dev.log" | awk '{print $4}')"
dev_ready() { grep -q '^xpu_utilization_ratio{minor="3"' <(curl -sf "$DEV_URL/metrics"); }
wait_for 15 dev_ready || fail "device subset: no data for minor 3"
MINORS=$(curl -sf "$DEV_URL/metrics" | grep -o '^xpu_[a-z_]*{minor="[0-9]*"' | sed 's/.*minor="//; s/"//' | sort -u | tr '\n' ' ')
[ "$MINORS" = "1 3 " ] || fail "--xdm.devices 1,3 exported minors: $MINORS"
echo "--xdm.devices 1,3: minors on the page: $MINORS"

set +e
"$EXPORTER" --metrics.include '(' >/dev/null 2>"$TMP/bad.err"
rc=$?
set -e
[ "$rc" -eq 2 ] && grep -q "metrics.include: '(' is not a valid regex" "$TMP/bad.err" ||
  fail "a bad pattern: rc $rc, $(cat "$TMP/bad.err")"
echo "selection test passed"
