#!/usr/bin/env bash
# Golden-file end-to-end test (node_exporter style): the real xpu-exporter
# against xdm-sim with a fixed seed and frozen values, scraped over HTTP,
# non-deterministic lines dropped by one regex, diffed against
# tests/fixtures/e2e-output.txt, and linted by promtool.
# Regenerate: UPDATE_GOLDEN=1 ctest -R e2e_golden
source "$(dirname "$0")/lib.sh" "$1"
GOLDEN="$(cd "$(dirname "$0")/.." && pwd)/fixtures/e2e-output.txt"
DROP='^(xpu_exporter_(http_[a-z_]*|build_info|collector_duration_seconds|collector_success\{collector="poll"\}|last_sample_timestamp_seconds|scrape_duration_seconds|config_last_reload_success_timestamp_seconds|stream_messages_total|poll_requests_total|poll_failures_total|stream_reconnects_total)|xpu_hal_sample_duration_seconds|xpu_device_data_age_seconds|xpu_exporter_source_view_age_seconds\{|process_)'

start_sim sim --seed 1 --frozen --interval 200ms --hal-root "$TMP/hal"
# One active fault, raised before the exporter starts, so fault families show.
curl -sf -XPOST "$CONTROL/control/fault" -d '{"minor":1,"code":"0x80E18400"}' >/dev/null
start_exporter sim --collector.interval 200ms --hal sysfs --hal.root "$TMP/hal" --hal.interval 200ms
# Complete once every source has answered: data, device list and static info.
wait_for 10 has_metric 'xpu_device_info{minor="7".*driver_version="1.5.2"' || fail "no device info"
wait_for 10 has_metric 'xpu_link_up{minor="7".*link="6"}' || fail "no link data"
wait_for 10 has_metric 'xpu_exporter_collector_success{collector="controller"} 1' || fail "no controller"
wait_for 10 has_metric 'xpu_device_fault_active{minor="1"' || fail "no HAL fault"
scrape >"$TMP/raw.txt"
promtool check metrics <"$TMP/raw.txt" || fail "promtool check metrics found problems"
check_families
grep -vE "$DROP" "$TMP/raw.txt" >"$TMP/got.txt"
if [ "${UPDATE_GOLDEN:-}" = 1 ]; then
  cp "$TMP/got.txt" "$GOLDEN"
  echo "updated $GOLDEN"
  exit 0
fi
diff -u "$GOLDEN" "$TMP/got.txt" || fail "output differs from $GOLDEN (UPDATE_GOLDEN=1 to accept)"
echo "golden output matches ($(wc -l <"$TMP/got.txt") lines), promtool clean"
