#!/usr/bin/env bash
# Hostile upstream data (xdm-sim garbage mode): NaN/Inf, a negative counter,
# an unknown ID, a duplicate, label values with quotes, backslashes, newlines
# and invalid UTF-8, a 1 MiB model string and a broken topology. The output
# must stay valid for promtool, the exporter must stay up, and each case must
# be counted and logged once, not per sample.
source "$(dirname "$0")/lib.sh" "$1"
start_sim sim --interval 100ms
curl -sf -XPOST "$CONTROL/control/garbage" -d '{"enabled":true}' >/dev/null
start_exporter sim --collector.interval 100ms --collector.unknown-metrics
wait_for 10 has_metric 'xpu_device_info' || fail "no device info"
for reason in non_finite negative_counter duplicate bad_label bad_topology; do
  wait_for 10 has_metric "xpu_exporter_invalid_samples_total{reason=\"$reason\"} [1-9]" ||
    fail "reason $reason not counted"
done
wait_for 10 has_metric 'xpu_exporter_unknown_metric_samples_total [1-9]' || fail "unknown IDs not counted"
wait_for 10 has_metric 'xpu_unknown_metric{.*id="999"' || fail "unknown ID not exported"
# Let several pushes of garbage through, then check everything.
n=$(scrape | awk '/^xpu_exporter_stream_messages_total/ {print $2}')
wait_for 10 bash -c "[ \$(curl -sf $URL/metrics | awk '/^xpu_exporter_stream_messages_total/ {print \$2}') -ge $((n + 5)) ]"
scrape >"$TMP/out.txt"
promtool check metrics <"$TMP/out.txt" || fail "promtool rejects the output"
kill -0 "$EXP_PID" || fail "exporter died"
grep -q 'model="PPU-810E \\"quoted\\" back\\\\slash\\nnewline' "$TMP/out.txt" || fail "model label not escaped"
[ "$(grep -c 'NaN or infinite' "$TMP/exporter.log")" = 1 ] || fail "NaN not logged exactly once"
[ "$(grep -c 'negative counter' "$TMP/exporter.log")" = 1 ] || fail "negative counter not logged once"
# The longest line stays bounded: the 1 MiB model was cut.
max=$(awk '{ if (length($0) > m) m = length($0) } END { print m }' "$TMP/out.txt")
[ "$max" -lt 4096 ] || fail "a line of $max bytes: label not truncated"
echo "hostile data handled: promtool clean, counted, logged once, longest line $max bytes"
