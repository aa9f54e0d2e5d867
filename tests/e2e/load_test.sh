#!/usr/bin/env bash
# Load and hostile clients, over real HTTP: with twice as many slow-head,
# body-trickling and idle clients as HTTP workers, /-/healthy, /-/ready and
# /metrics still answer within 1 s (HeadGuard, bodies refused unread); then
# wrk with 64 connections for 30 s gets no errors and no non-200 answers.
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
grep -qE "Socket errors|Non-2xx" <<<"$out" && fail "wrk saw errors"
kill -0 "$EXP_PID" || fail "exporter died under load"
echo "load and slow clients verified"
