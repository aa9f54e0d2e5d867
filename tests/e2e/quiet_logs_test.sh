#!/usr/bin/env bash
# Quiet, useful logs: with XDM down for 30 s (and the exporter retrying every
# 100-400 ms), the log holds one warning, saying XDM is down and why; XDM's
# return is one info line; a second outage is one more warning. Each
# attempt's details are at --log.level=debug.
source "$(dirname "$0")/lib.sh" "$1"
"$EXPORTER" --web.listen-address 127.0.0.1:0 --xdm.endpoint "unix://$TMP/sim.sock" \
  --controller.endpoint "" --collector.interval 200ms --xdm.backoff-initial 100ms \
  --xdm.backoff-max 400ms --hal none --kubelet.pod-resources-socket "" 2>"$TMP/exporter.log" &
EXP_PID=$!
PIDS+=("$EXP_PID")
wait_for 10 grep -q "listening on port" "$TMP/exporter.log" || fail "exporter did not start: $(cat "$TMP/exporter.log")"
URL="http://127.0.0.1:$(grep -o 'listening on port(s) [0-9]*' "$TMP/exporter.log" | awk '{print $4}')"
START=$SECONDS
# 30 s of XDM down, and many attempts in them (each re-subscribe is counted).
attempts() { scrape | sed -n 's/^xpu_exporter_stream_reconnects_total \([0-9]*\).*/\1/p'; }
enough() { [ $((SECONDS - START)) -ge 30 ] && [ "$(attempts)" -ge 40 ]; }
wait_for 60 enough || fail "fewer than 40 attempts in 30 s: $(attempts)"
warnings() { grep -c 'level=warn' "$TMP/exporter.log" || true; }
[ "$(warnings)" -eq 1 ] || fail "$(warnings) warnings over 30 s of XDM down, want 1: $(grep 'level=warn' "$TMP/exporter.log" | head -5)"
grep 'level=warn' "$TMP/exporter.log" | grep -q "XDM down at unix://$TMP/sim.sock.*UNAVAILABLE\|XDM down at unix://$TMP/sim.sock.*14" ||
  fail "the warning does not say XDM is down and why: $(grep 'level=warn' "$TMP/exporter.log")"
echo "$(attempts) attempts in $((SECONDS - START)) s of XDM down: $(warnings) warning line"

start_sim sim --interval 200ms
wait_for 20 grep -q "XDM back at" "$TMP/exporter.log" || fail "XDM's return not logged"
[ "$(warnings)" -eq 1 ] || fail "XDM's return added warnings"
kill "$SIM_PID"
wait_for 20 bash -c "[ \$(grep -c 'XDM down at' '$TMP/exporter.log') -eq 2 ]" || fail "the second outage was not said"
[ "$(warnings)" -eq 2 ] || fail "$(warnings) warnings after two outages, want 2: $(grep 'level=warn' "$TMP/exporter.log")"
echo "quiet logs test passed"
