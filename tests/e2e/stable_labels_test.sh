#!/usr/bin/env bash
# Stable labels: from the exporter's first moments, no scrape shows a device
# series without its identity (uuid=""): data that comes before the device
# list is held back, not published twice under two label sets. xdm-sim
# streams data at once but answers ListAndWatch only after 2 s (a daemon
# whose device scan is slower than its collector); each run starts a fresh
# simulator and exporter and scrapes back to back until device series appear.
source "$(dirname "$0")/lib.sh" "$1"
for run in 1 2 3; do
  start_sim sim --interval 50ms --list-delay 2s
  "$EXPORTER" --web.listen-address 127.0.0.1:0 --xdm.endpoint "unix://$TMP/sim.sock" \
    --controller.endpoint "unix://$TMP/sim-ctl.sock" --collector.interval 50ms --hal none \
    --kubelet.pod-resources-socket "" 2>"$TMP/exporter-$run.log" &
  pid=$!
  PIDS+=("$pid")
  wait_for 10 grep -q "listening on port" "$TMP/exporter-$run.log" || fail "exporter did not start"
  url="http://127.0.0.1:$(grep -o 'listening on port(s) [0-9]*' "$TMP/exporter-$run.log" | awk '{print $4}')"
  scrapes=0
  deadline=$((SECONDS + 15))
  until grep -q '^xpu_utilization_ratio{minor="0",uuid="PPU' "$TMP/page" 2>/dev/null; do
    [ $SECONDS -lt $deadline ] || fail "run $run: no device series within 15 s"
    curl -sf "$url/metrics" >"$TMP/page" || continue
    scrapes=$((scrapes + 1))
    if grep -qE '^xpu_[a-z_]+\{minor="[0-9]+",uuid="",' "$TMP/page"; then
      fail "run $run, scrape $scrapes: a device series without uuid: $(grep -E '^xpu_[a-z_]+\{minor="[0-9]+",uuid="",' "$TMP/page" | head -2)"
    fi
  done
  echo "run $run: $scrapes scrapes until device series, none without uuid"
  kill "$pid" "$SIM_PID"
  wait "$pid" "$SIM_PID" 2>/dev/null || true
  rm -f "$TMP/page" "$TMP/sim.out"
done
echo "stable labels test passed"
