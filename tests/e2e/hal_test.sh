#!/usr/bin/env bash
# The HAL path end to end: xdm-sim writes its sysfs-like tree, xpu-exporter
# samples it directly. A fault injected through the control API must appear
# within one HAL interval, also while XDM is paused; clearing it removes the
# active series but not the events counted; an unhealthy device shows 0 from
# both sources.
source "$(dirname "$0")/lib.sh" "$1"
HAL_MS=500
SLACK_MS=400  # one scrape and process scheduling on a busy 2-core machine
start_sim sim --interval 100ms --hal-root "$TMP/hal"
start_exporter sim --collector.interval 100ms --hal sysfs --hal.root "$TMP/hal" --hal.interval ${HAL_MS}ms
wait_for 10 has_metric 'xpu_hal_up{backend="sysfs"} 1' || fail "HAL not up"
wait_for 10 has_metric 'xpu_device_health{minor="2",.*source="xdm"} 1' || fail "no XDM health"
has_metric 'xpu_device_fault_level{minor="2",.*} 0' || fail "fault level not 0 at start"

curl -sf -XPOST "$CONTROL/control/fault" -d '{"minor":2,"code":"0x80E18400"}' >/dev/null
took=$(wait_ms $((HAL_MS + SLACK_MS)) has_metric 'xpu_device_fault_active{minor="2",uuid="[^"]*",bus_id="[^"]*",code="0x80E18400",level="reset_card",source="sysfs"} 1') ||
  fail "fault not visible within one HAL interval"
echo "fault visible after ${took} ms (HAL interval ${HAL_MS} ms)"
has_metric 'xpu_device_fault_level{minor="2",.*} 4' || fail "fault level not 4"

# XDM silent: the HAL still sees new faults.
curl -sf -XPOST "$CONTROL/control/pause" >/dev/null
curl -sf -XPOST "$CONTROL/control/fault" -d '{"minor":3,"code":"0x80CB8001"}' >/dev/null
took=$(wait_ms $((HAL_MS + SLACK_MS)) has_metric 'xpu_device_fault_active{minor="3",.*code="0x80CB8001",level="isolate_card",source="sysfs"} 1') ||
  fail "fault not visible within one HAL interval while XDM is paused"
echo "fault visible after ${took} ms with XDM paused"
wait_for 10 has_metric 'xpu_exporter_upstream_up 0' || fail "upstream should be down while paused"
curl -sf "$URL/-/ready" >/dev/null || fail "/-/ready must stay 200 while the HAL samples"
curl -sf "$URL/status" >"$TMP/status.json" || fail "/status failed"
grep -q '"isolate_card"' "$TMP/status.json" || fail "/status lacks the active fault: $(cat "$TMP/status.json")"
curl -sf -XPOST "$CONTROL/control/resume" >/dev/null

# Clearing removes the active series; the events counter keeps its count.
curl -sf -XDELETE "$CONTROL/control/fault?minor=2" >/dev/null
wait_for 10 bash -c "curl -sf $URL/metrics >$TMP/page && ! grep -q 'xpu_device_fault_active{minor=\"2\"' $TMP/page" ||
  fail "fault not cleared"
has_metric 'xpu_device_fault_events_total{bus_id="0000:30:00.0",code="0x80E18400",level="reset_card",minor="2",source="sysfs",uuid="[^"]*"} 1' ||
  has_metric 'xpu_device_fault_events_total{.*minor="2".*} 1' || fail "events counter lost"
has_metric 'xpu_device_fault_level{minor="2",.*} 0' || fail "fault level not back to 0"

# Unhealthy: both sources say 0.
curl -sf -XPOST "$CONTROL/control/health" -d '{"minor":4,"healthy":false}' >/dev/null
wait_for 10 has_metric 'xpu_device_health{minor="4",.*source="sysfs"} 0' || fail "HAL health not 0"
wait_for 10 has_metric 'xpu_device_health{minor="4",.*source="xdm"} 0' || fail "XDM health not 0"
scrape >"$TMP/final.txt"
promtool check metrics <"$TMP/final.txt" || fail "promtool"
echo "HAL path verified"
