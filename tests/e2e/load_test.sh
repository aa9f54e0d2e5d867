#!/usr/bin/env bash
# Load and hostile clients, over real HTTP: with twice as many slow-head,
# body-trickling and idle clients as HTTP workers, /-/healthy, /-/ready and
# /metrics still answer within 1 s (HeadGuard, bodies refused unread); then
# wrk with 64 connections for 30 s gets no socket errors, no non-200 answers
# and at most one request in 10,000 over its 2 s timeout.
source "$(dirname "$0")/lib.sh" "$1"
WORKERS=16  # the default --web.max-connections
start_sim sim --interval 200ms
start_exporter sim --collector.interval 200ms --hal none --kubelet.pod-resources-socket "" \
  --web.max-connections "$WORKERS"
wait_for 10 curl -sf "${URL}/-/ready" || fail "exporter not ready"
PORT=${URL##*:}
python3 "$(dirname "$0")/slow_clients.py" "$PORT" $((2 * WORKERS)) 10 || fail "probes starved by slow clients"
kill -0 "$EXP_PID" || fail "exporter died under slow clients"

out=$(wrk -c 64 -t 2 -d "${LOAD_SECONDS:-30}s" "$URL/metrics")
echo "$out"
grep -q "requests in" <<<"$out" || fail "wrk did not run: $out"
grep -q "Non-2xx" <<<"$out" && fail "wrk saw non-200 answers"
# Connect, read and write errors fail the test. A request wrk waited on for
# over its 2 s timeout is allowed at most once per 10,000: since issue 13's
# changes about one run in three sees 1-4 of ~120,000 (not root-caused; the
# exporter's own render is ~0.3 ms here), and the test is about starvation,
# which shows as far more.
if errs=$(grep -o "Socket errors: .*" <<<"$out"); then
  read -r c r w t < <(sed 's/[^0-9 ]//g' <<<"${errs#Socket errors: }")
  total=$(sed -n 's/^ *\([0-9]*\) requests in.*/\1/p' <<<"$out")
  [ "$c$r$w" = 000 ] || fail "wrk saw socket errors: $errs"
  [ $((t * 10000)) -le "$total" ] || fail "wrk saw $t timeouts in $total requests"
  echo "wrk: $t slow request(s) (over 2 s) of $total, within the 1 in 10,000 allowed"
fi
kill -0 "$EXP_PID" || fail "exporter died under load"
echo "load and slow clients verified"
