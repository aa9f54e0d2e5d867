#!/usr/bin/env bash
# Load and hostile clients, over real HTTP: with twice as many slow-head,
# body-trickling and idle clients as HTTP workers, /-/healthy, /-/ready and
# /metrics still answer within 1 s (head deadlines in civetweb, bodies refused
# unread); then wrk with 64 connections for 30 s gets no socket errors, no
# timeouts and no non-200 answers, while probes every 0.5 s are each answered
# within 1 s, and afterwards no connection waits for a worker.
source "$(dirname "$0")/lib.sh" "$1"
WORKERS=16  # the default --web.max-connections
start_sim sim --interval 200ms
start_exporter sim --collector.interval 200ms --hal none --kubelet.pod-resources-socket "" \
  --web.max-connections "$WORKERS"
wait_for 10 curl -sf "${URL}/-/ready" || fail "exporter not ready"
PORT=${URL##*:}
python3 "$(dirname "$0")/slow_clients.py" "$PORT" $((2 * WORKERS)) 10 || fail "probes starved by slow clients"
kill -0 "$EXP_PID" || fail "exporter died under slow clients"

# Probes as the kubelet sends them, every 0.5 s through the run: each must
# be answered 200 within 1 s (wrk cannot see a starved probe, nor a
# connection that never got a worker).
probes="$TMP/probes.txt"
: >"$probes"
: >"$TMP/backlog.txt"
# Connections waiting in the kernel's accept queue of the listening socket.
backlog() { ss -Hltn "sport = :$PORT" | awk '{s += $2} END {print s + 0}'; }
(
  end=$((SECONDS + ${LOAD_SECONDS:-30}))
  while [ $SECONDS -lt $end ]; do
    curl -s -o /dev/null --max-time 1 -w '%{http_code} %{time_total}\n' "$URL/-/healthy" >>"$probes" ||
      echo "000 timeout" >>"$probes"
    backlog >>"$TMP/backlog.txt"
    sleep 0.5 # the probe period, not a wait for a condition
  done
) &
PROBER=$!
# The server's cuts (an idle keep-alive closed early under pressure is
# reason="keepalive"; one closed at its own keep-alive timeout is none); a
# failed scrape here says so.
cuts() {
  local page
  page=$(scrape) || { echo "(no scrape)"; return 0; }
  grep -E '^xpu_exporter_http_connections_cut_total' <<<"$page" | tr '\n' ' ' || true
}
cuts_before=$(cuts)
# Each answer's status counted (wrk_statuses.lua): a refusal names itself.
out=$(wrk -c 64 -t 2 -d "${LOAD_SECONDS:-30}s" -s "$E2E_DIR/wrk_statuses.lua" "$URL/metrics")
wait "$PROBER"
echo "$out"
# What the server cut during the run (a cut connection is a socket error
# to wrk): the counters before and after.
echo "cuts before: $cuts_before"
echo "cuts after:  $(cuts)"
grep -q "requests in" <<<"$out" || fail "wrk did not run: $out"
grep -q "Non-2xx" <<<"$out" && fail "wrk saw non-200 answers: $(grep -A25 '^not 200:' <<<"$out")"
# Strict: no connect, read or write error and no timeout at all.
if errs=$(grep -o "Socket errors: .*" <<<"$out"); then fail "wrk saw $errs"; fi
n=$(wc -l <"$probes")
bad=$(grep -cv '^200 ' "$probes" || true)
echo "probes during the run: $n, failed or over 1 s: $bad; slowest $(sort -k2 -n "$probes" | tail -1)"
[ "$n" -ge 10 ] || fail "only $n probes ran"
[ "$bad" -eq 0 ] || fail "$bad of $n probes unanswered within 1 s under load"
# Every connection wrk opened was served: none waits for a worker after it,
# in civetweb's queue or the kernel's accept queue (ss's Recv-Q of the
# listening socket).
wait_for 5 has_metric 'xpu_exporter_http_connections_queued 0$' || fail "connections still queued"
backlog_empty() { [ "$(backlog)" -eq 0 ]; }
wait_for 5 backlog_empty || fail "$(backlog) connections left in the accept queue"
echo "most connections waiting in the accept queue during the run: $(sort -n "$TMP/backlog.txt" | tail -1)"
kill -0 "$EXP_PID" || fail "exporter died under load"
echo "load and slow clients verified"
