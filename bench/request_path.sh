#!/usr/bin/env bash
# Instructions per scrape on the HTTP request path, under callgrind
# (instructions are stable where timings on a shared machine are not):
#   bench/request_path.sh BUILD_DIR [SCRAPES]
# Runs BUILD_DIR's exporter under callgrind against its xdm-sim (8 devices),
# sends SCRAPES sequential scrapes over one keep-alive connection with
# Prometheus' Accept and gzip (bench/scrape_client), and prints per scrape:
# the civetweb workers' instructions (head, dispatch, handler, gzip, write),
# the /metrics handler's (the page: what a larger page explains), and the
# rest (the request path). Only the workers are counted (--toggle-collect).
set -euo pipefail
BUILD=${1:?usage: request_path.sh BUILD_DIR [SCRAPES]}
N=${2:-200}
CLIENT=${CLIENT:-$BUILD/bench/scrape_client}
TMP=$(mktemp -d /tmp/xpu-callgrind.XXXXXX)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$TMP"; }
trap cleanup EXIT
[ -n "${KEEP:-}" ] && trap 'for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; cp "$TMP"/cg.out* "$KEEP"/ 2>/dev/null; rm -rf "$TMP"' EXIT
"$BUILD/tools/xdm-sim/xdm-sim" --socket "$TMP/x.sock" --controller-socket "$TMP/c.sock" \
  --control-address "" >"$TMP/sim.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 1 200); do grep -q ready "$TMP/sim.log" && break; sleep 0.05; done
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
valgrind --tool=callgrind --callgrind-out-file="$TMP/cg.out" --toggle-collect=worker_thread \
  "$BUILD/src/app/xpu-exporter" --xdm.endpoint "unix://$TMP/x.sock" \
  --controller.endpoint "unix://$TMP/c.sock" --web.listen-address "127.0.0.1:$PORT" --hal none \
  2>"$TMP/exp.log" &
EXP=$!
PIDS+=($EXP)
for _ in $(seq 1 600); do curl -sf "http://127.0.0.1:$PORT/-/ready" >/dev/null 2>&1 && break; sleep 0.1; done
# The ready checks above are requests too: counted apart by starting after them.
callgrind_control -z "$EXP" >/dev/null
"$CLIENT" "http://127.0.0.1:$PORT/metrics" --count "$N" --gzip --prometheus >"$TMP/client.out"
callgrind_control -d "$EXP" >/dev/null
kill "$EXP"; wait "$EXP" 2>/dev/null || true
OUTS=()
for f in "$TMP"/cg.out*; do [ -s "$f" ] && OUTS+=("$f"); done
total=0
for f in "${OUTS[@]}"; do
  t=$(callgrind_annotate "$f" 2>/dev/null | sed -n 's/^ *\([0-9,]*\) .*PROGRAM TOTALS.*/\1/p' | tr -d ,)
  total=$((total + ${t:-0}))
done
handler=0
for f in "${OUTS[@]}"; do
  h=$(callgrind_annotate --inclusive=yes "$f" 2>/dev/null |
    sed -n 's/^ *\([0-9,]*\) .*xpu::app::Exporter::Metrics(xpu::http::Request const&).*/\1/p' |
    head -1 | tr -d ,)
  handler=$((handler + ${h:-0}))
done
R=$((N + 1))  # scrape_client sends one untimed scrape first
echo "scrapes=$R workers_per_scrape=$((total / R)) handler_per_scrape=$((handler / R)) path_per_scrape=$(((total - handler) / R))"
cat "$TMP/client.out"
