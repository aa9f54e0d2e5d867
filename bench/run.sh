#!/usr/bin/env bash
# The whole benchmark suite, on loopback, in a few minutes on 2 cores:
#   ./x bench            (or bench/run.sh BUILD_DIR)
# Prints figures as markdown; docs/benchmarks.md records a run.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BUILD=${1:-$ROOT/build}
SIM=$BUILD/tools/xdm-sim/xdm-sim
EXP=$BUILD/src/app/xpu-exporter
CLIENT=$BUILD/bench/scrape_client
TMP=$(mktemp -d /tmp/xpu-bench.XXXXXX)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$TMP"; }
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# CPU time of every thread of a process, in microseconds (schedstat is in ns;
# /proc/PID/stat's clock ticks are too coarse for an idle exporter).
# schedstat_sum FIELD PID: a schedstat field summed over the process's threads
# (a thread that ends between two readings takes its share with it). Printed
# with %.0f: mawk's %d stops at 2^31-1, and the nanoseconds of a process past
# 2.1 s of CPU read as that (every CPU figure after it 0).
schedstat_sum() { cat /proc/"$2"/task/*/schedstat 2>/dev/null | awk -v f="$1" '{s += $f} END {printf "%.0f", s}'; }
cpu_us() { echo $(($(schedstat_sum 1 "$1") / 1000)); }
# How often its threads were put on a CPU (schedstat's third field): an idle
# process's wake-ups (and any preemptions), steadier from run to run than its
# CPU time.
runs_of() { schedstat_sum 3 "$1"; }
rss_kb() { awk '/^VmRSS/ {print $2}' "/proc/$1/status"; }
hwm_kb() { awk '/^VmHWM/ {print $2}' "/proc/$1/status"; }
# Memory the process does not share: anonymous and private pages (RSS also
# counts the shared-library text every process maps).
private_kb() { awk '/^Private_(Clean|Dirty)/ {s += $2} END {print s}' "/proc/$1/smaps_rollup"; }
until_ok() { for _ in $(seq 1 400); do "$@" >/dev/null 2>&1 && return 0; sleep 0.05; done; return 1; }

start() {  # start NAME SIMFLAGS -- EXPFLAGS ; sets SIM_PID EXP_PID URL
  local name=$1; shift
  local simflags=() expflags=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do simflags+=("$1"); shift; done
  [ $# -gt 0 ] && shift
  expflags=("$@")
  ${SIM_TASKSET:-} "$SIM" --socket "$TMP/$name.sock" --controller-socket "$TMP/$name-c.sock" \
    --control-address "" "${simflags[@]}" >"$TMP/$name-sim.log" 2>&1 &
  SIM_PID=$!; PIDS+=("$SIM_PID")
  until_ok grep -q ready "$TMP/$name-sim.log"
  local port; port=$(free_port)
  ${EXP_TASKSET:-} "$EXP" --xdm.endpoint "unix://$TMP/$name.sock" --controller.endpoint "unix://$TMP/$name-c.sock" \
    --web.listen-address "127.0.0.1:$port" --hal none "${expflags[@]}" 2>"$TMP/$name-exp.log" &
  EXP_PID=$!; PIDS+=("$EXP_PID")
  URL="http://127.0.0.1:$port/metrics"
  until_ok curl -sf "${URL%/metrics}/-/ready"
}
stop() { kill "$SIM_PID" "$EXP_PID" 2>/dev/null || true; wait "$SIM_PID" "$EXP_PID" 2>/dev/null || true; }
field() { sed -n "s/.*$1=\([^ ]*\).*/\1/p" <<<"$2"; }

echo "# xpu-exporter benchmarks"
echo
echo "Machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1); $(date -u +%Y-%m-%d)"
echo
echo "## Scrape, side by side with node_exporter's textfile collector"
echo
echo "Plain: one scraper, no compression. CPU per scrape is the exporter's, less what ingest"
echo "used meanwhile (its idle rate). PSS is the highest of samples taken every 50 ms through"
echo "all of the size's runs (plain, gzip, one and two scrapers)."
echo
echo "| size | series | body bytes | xpu median ms | xpu p99 ms | xpu CPU ms/scrape | xpu RSS MiB (peak) | xpu PSS MiB (peak) | idle CPU % | node_exporter median ms | p99 ms | node_exporter PSS MiB | speed-up (median) |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
GZIP_ROWS=""
ZSTD_ROWS=""
HA_ROWS=""
# PSS samples (KiB) of process $1 every 50 ms until killed, appended to file
# $2 (appends: a kill mid-write loses one sample, not the rest).
pss_watch() {
  while awk '/^Pss:/ {print $2}' "/proc/$1/smaps_rollup" >>"$2" 2>/dev/null; do sleep 0.05; done
}
# CPU ms per scrape of process $1 over a run: cpu_per PID C0 C1 T0 T1 IDLE% N
cpu_per() {
  awk -v t=$(($3 - $2)) -v el=$(( ($5 - $4) / 1000000 )) -v idle="$6" -v n="$7" \
    'BEGIN {v = (t / 1000 - idle / 100 * el) / n; if (v < 0) v = 0; printf "%.3f", v}'
}
for size in "8 devices:8:7:400:200" "10k series:64:50:200:100" "100k series:256:128:100:30"; do
  IFS=: read -r label devices links n peer_n <<<"$size"
  # Above the default series cap (--collector.max-series 50000) on purpose.
  start s --devices "$devices" --links "$links" --interval 1s -- --collector.max-series 200000
  until_ok bash -c "[ \$(curl -sf $URL | grep -c '^xpu_link_up') -ge $((devices * links)) ]"
  # Idle CPU over 10 s (stream updating every second, no scrapes).
  c0=$(cpu_us "$EXP_PID"); sleep 10; c1=$(cpu_us "$EXP_PID")
  idle=$(awk -v t=$((c1 - c0)) 'BEGIN {printf "%.3f", 100 * t / 1e6 / 10}')
  series=$(curl -sf "$URL" | grep -c '^xpu_')
  : >"$TMP/pss"
  pss_watch "$EXP_PID" "$TMP/pss" & WATCH=$!
  c0=$(cpu_us "$EXP_PID"); t0=$(date +%s%N)
  out=$("$CLIENT" "$URL" --count "$n")
  c1=$(cpu_us "$EXP_PID"); t1=$(date +%s%N)
  cpu=$(cpu_per "$EXP_PID" "$c0" "$c1" "$t0" "$t1" "$idle" "$n")
  # gzip as Prometheus asks for it: its Accept header (OpenMetrics), gzip.
  # --gzip-raw keeps the body compressed: the exporter's time to the last
  # byte; --gzip also inflates it in the client, as Prometheus does.
  c0=$(cpu_us "$EXP_PID"); t0=$(date +%s%N)
  graw=$("$CLIENT" "$URL" --count "$n" --gzip-raw --prometheus)
  c1=$(cpu_us "$EXP_PID"); t1=$(date +%s%N)
  gcpu=$(cpu_per "$EXP_PID" "$c0" "$c1" "$t0" "$t1" "$idle" "$n")
  gout=$("$CLIENT" "$URL" --count "$n" --gzip --prometheus)
  # zstd the same way (Accept-Encoding: zstd), kept compressed.
  c0=$(cpu_us "$EXP_PID"); t0=$(date +%s%N)
  zraw=$("$CLIENT" "$URL" --count "$n" --zstd-raw --prometheus)
  c1=$(cpu_us "$EXP_PID"); t1=$(date +%s%N)
  zcpu=$(cpu_per "$EXP_PID" "$c0" "$c1" "$t0" "$t1" "$idle" "$n")
  ZSTD_ROWS+="| $label | $(field wire_bytes "$graw") | $gcpu | $(field median_ms "$graw") | $(field p99_ms "$graw") | $(field wire_bytes "$zraw") | $zcpu | $(field median_ms "$zraw") | $(field p99_ms "$zraw") |"$'\n'
  # An HA pair: two scrapers at once, each on its own connection.
  c0=$(cpu_us "$EXP_PID"); t0=$(date +%s%N)
  g2=$("$CLIENT" "$URL" --count "$n" --gzip-raw --prometheus --parallel 2)
  c1=$(cpu_us "$EXP_PID"); t1=$(date +%s%N)
  g2cpu=$(cpu_per "$EXP_PID" "$c0" "$c1" "$t0" "$t1" "$idle" "$n")  # per round of two
  shared=$(curl -sf "$URL" | awk '/^xpu_exporter_scrapes_shared_total/ {print $2}')
  kill "$WATCH" 2>/dev/null; wait "$WATCH" 2>/dev/null || true
  awk '/^Pss:/ {print $2}' "/proc/$EXP_PID/smaps_rollup" >>"$TMP/pss"
  rss=$(awk -v a="$(rss_kb "$EXP_PID")" -v b="$(hwm_kb "$EXP_PID")" 'BEGIN {printf "%.1f (%.1f)", a/1024, b/1024}')
  pss=$(awk -v a="$(awk '/^Pss:/ {print $2}' "/proc/$EXP_PID/smaps_rollup")" -v b="$(sort -n "$TMP/pss" | tail -1)" 'BEGIN {printf "%.1f (%.1f)", a/1024, b/1024}')
  # The same exposition served by node_exporter's textfile collector.
  mkdir -p "$TMP/textfile"
  curl -sf "$URL" | grep -v '^xpu_exporter_\|^# .* xpu_exporter_' >"$TMP/textfile/xpu.prom"
  stop
  nport=$(free_port)
  prometheus-node-exporter --collector.disable-defaults --collector.textfile \
    --collector.textfile.directory "$TMP/textfile" --web.listen-address "127.0.0.1:$nport" \
    >"$TMP/node.log" 2>&1 &
  NODE_PID=$!; PIDS+=("$NODE_PID")
  until_ok curl -sf "http://127.0.0.1:$nport/metrics"
  nout=$("$CLIENT" "http://127.0.0.1:$nport/metrics" --count "$peer_n")
  ngout=$("$CLIENT" "http://127.0.0.1:$nport/metrics" --count "$peer_n" --gzip --prometheus)
  npss=$(awk -v b="$(awk '/^Pss:/ {print $2}' "/proc/$NODE_PID/smaps_rollup")" 'BEGIN {printf "%.1f", b/1024}')
  kill "$NODE_PID"; wait "$NODE_PID" 2>/dev/null || true
  rm -rf "$TMP/textfile"
  speed=$(awk -v a="$(field median_ms "$out")" -v b="$(field median_ms "$nout")" 'BEGIN {printf "%.1fx", b / a}')
  echo "| $label | $series | $(field bytes "$out") | $(field median_ms "$out") | $(field p99_ms "$out") | $cpu | $rss | $pss | $idle | $(field median_ms "$nout") | $(field p99_ms "$nout") | $npss | $speed |"
  gspeed=$(awk -v a="$(field median_ms "$gout")" -v b="$(field median_ms "$ngout")" 'BEGIN {printf "%.1fx", b / a}')
  GZIP_ROWS+="| $label | $(field wire_bytes "$graw") | $(field median_ms "$graw") | $(field p99_ms "$graw") | $gcpu | $(field median_ms "$gout") | $(field p99_ms "$gout") | $(field wire_bytes "$ngout") | $(field median_ms "$ngout") | $(field p99_ms "$ngout") | $gspeed |"$'\n'
  HA_ROWS+="| $label | $gcpu | $g2cpu | $(awk -v a="$gcpu" -v b="$g2cpu" 'BEGIN {if (a > 0) printf "%.2fx", b / a; else print "-"}') | $(field median_ms "$g2") | $(field p99_ms "$g2") | $shared of $((2 * n + 2)) |"$'\n'
done
echo
echo "## gzip scrapes as Prometheus makes them (its Accept header, so OpenMetrics; Accept-Encoding: gzip)"
echo
echo "\"to last byte\": the body kept compressed (the exporter's time and the transfer);"
echo "\"inflated\": the client also inflates it with zlib, as Prometheus does. node_exporter's"
echo "figures are inflated ones."
echo
echo "| size | xpu gzip bytes | to last byte median ms | p99 ms | xpu CPU ms/scrape | inflated median ms | inflated p99 ms | node_exporter gzip bytes | median ms | p99 ms | speed-up (inflated median) |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
printf "%s" "$GZIP_ROWS"
echo
echo "## zstd beside gzip (Prometheus's Accept header; the body kept compressed)"
echo
echo "| size | gzip bytes | gzip CPU ms/scrape | gzip median ms | p99 ms | zstd bytes | zstd CPU ms/scrape | zstd median ms | p99 ms |"
echo "|---|---|---|---|---|---|---|---|---|"
printf "%s" "$ZSTD_ROWS"
echo
echo "## Two scrapers at once (an HA pair), gzip as Prometheus asks"
echo
echo "| size | CPU ms/scrape, one scraper | CPU ms per round of two | ratio | median ms | p99 ms | scrapes that shared a render |"
echo "|---|---|---|---|---|---|---|"
printf "%s" "$HA_ROWS"

echo
echo "## The HAL's cost: 8 cards, every source at its defaults, beside --hal none (issue 51)"
echo
# One xdm-sim (8 cards, every second, its PCI and sysfs tree, NVIDIA's vendor
# id) and two exporters on it at once: every HAL source (sysfs, pci, the
# kernel log, NVML through the stand-in library: the GPU driver is the one
# part mocked) at the default intervals, and --hal none. Idle CPU and
# wake-ups are measured on both over the same 30 s; then 4 alternating rounds of 400
# gzip scrapes as Prometheus makes them (body kept compressed), the median
# of each exporter's round medians, and its cost per compressed byte.
hal_bench() {
  local d=$TMP/hal fake=$BUILD/tests/hal/libfake_nvml.so kmsg=/dev/kmsg
  mkdir -p "$d/nvml"
  if [ ! -f "$fake" ]; then echo "- skipped: $fake is not built (./x bench builds it)"; return; fi
  # The kernel log at its default path where this user may read it, else
  # an empty record file.
  if ! head -c0 /dev/kmsg 2>/dev/null; then kmsg=$d/kmsg; : >"$kmsg"; fi
  python3 - "$d/nvml/fixture.json" <<'PY'
import json, sys
cards = [{"name": "NVIDIA H200", "uuid": "GPU-bench-%d" % m,
          "bus_id": "00000000:%02X:00.0" % (0x10 + m * 0x10), "temperature": 34,
          "memory": {"total": 150754820096, "used": 0, "reserved": 644939776}, "ecc_mode": 1,
          "ecc": {"volatile_corrected": 0, "volatile_uncorrected": 0,
                  "aggregate_corrected": 0, "aggregate_uncorrected": 0},
          "remap": {"corrected": 0, "uncorrected": 0, "pending": False, "failure": False},
          "nvlinks": [{"active": True, "replay": 0, "recovery": 0, "crc_flit": 0, "crc_data": 0}] * 18,
          "mig": {"enabled": False}, "processes": []} for m in range(8)]
json.dump({"devices": cards}, open(sys.argv[1], "w"))
PY
  "$SIM" --socket "$d/s.sock" --controller-socket "$d/c.sock" --control-address "" \
    --hal-root "$d/tree" --pci-vendor 0x10de --devices 8 --interval 1s >"$d/sim.log" 2>&1 &
  local sim=$!; PIDS+=("$sim")
  until_ok grep -q ready "$d/sim.log"
  local hport nport; hport=$(free_port); nport=$(free_port)
  local common=(--xdm.endpoint "unix://$d/s.sock" --controller.endpoint "unix://$d/c.sock"
    --kubelet.pod-resources-socket "")
  XPU_FAKE_NVML_FIXTURE=$d/nvml/fixture.json "$EXP" "${common[@]}" \
    --web.listen-address "127.0.0.1:$hport" --hal sysfs,pci,kmsg,nvml --hal.root "$d/tree" \
    --hal.pci.sysfs-root "$d/tree/sys" --hal.kmsg.path "$kmsg" --hal.nvml.library "$fake" \
    --hal.state-dir "$d/state" 2>"$d/hal.log" &
  local hal=$!; PIDS+=("$hal")
  "$EXP" "${common[@]}" --web.listen-address "127.0.0.1:$nport" --hal none 2>"$d/none.log" &
  local none=$!; PIDS+=("$none")
  local hurl="http://127.0.0.1:$hport/metrics" nurl="http://127.0.0.1:$nport/metrics"
  until_ok bash -c "curl -sf $hurl | grep -q '^xpu_nvml_up 1'"
  until_ok curl -sf "${nurl%/metrics}/-/ready"
  sleep 5  # every source past its first, whole, read
  local h0 n0 h1 n1 hr0 nr0 hr1 nr1
  h0=$(cpu_us "$hal"); n0=$(cpu_us "$none"); hr0=$(runs_of "$hal"); nr0=$(runs_of "$none")
  sleep 30
  h1=$(cpu_us "$hal"); n1=$(cpu_us "$none"); hr1=$(runs_of "$hal"); nr1=$(runs_of "$none")
  local hidle nidle hwakes nwakes
  hidle=$(awk -v t=$((h1 - h0)) 'BEGIN {printf "%.3f", 100 * t / 1e6 / 30}')
  nidle=$(awk -v t=$((n1 - n0)) 'BEGIN {printf "%.3f", 100 * t / 1e6 / 30}')
  hwakes=$(awk -v t=$((hr1 - hr0)) 'BEGIN {printf "%.1f", t / 30}')
  nwakes=$(awk -v t=$((nr1 - nr0)) 'BEGIN {printf "%.1f", t / 30}')
  local hmeds=() nmeds=() out hbytes nbytes
  for _ in 1 2 3 4; do
    out=$("$CLIENT" "$hurl" --count 400 --gzip-raw --prometheus)
    hmeds+=("$(field median_ms "$out")"); hbytes=$(field wire_bytes "$out")
    out=$("$CLIENT" "$nurl" --count 400 --gzip-raw --prometheus)
    nmeds+=("$(field median_ms "$out")"); nbytes=$(field wire_bytes "$out")
  done
  local hmed nmed
  hmed=$(printf "%s\n" "${hmeds[@]}" | sort -g | awk '{a[NR] = $1} END {printf "%.3f", (a[2] + a[3]) / 2}')
  nmed=$(printf "%s\n" "${nmeds[@]}" | sort -g | awk '{a[NR] = $1} END {printf "%.3f", (a[2] + a[3]) / 2}')
  pss_of() { awk '/^Pss:/ {printf "%.1f", $2 / 1024}' "/proc/$1/smaps_rollup"; }
  echo "| --hal | idle CPU % (30 s) | wake-ups a second | threads | PSS MiB | gzip bytes | gzip median ms (4 rounds of 400) | µs per compressed KB |"
  echo "|---|---|---|---|---|---|---|---|"
  echo "| sysfs,pci,kmsg,nvml | $hidle | $hwakes | $(ls "/proc/$hal/task" | wc -l) | $(pss_of "$hal") | $hbytes | $hmed | $(awk -v m="$hmed" -v b="$hbytes" 'BEGIN {printf "%.2f", m * 1000 / (b / 1000)}') |"
  echo "| none | $nidle | $nwakes | $(ls "/proc/$none/task" | wc -l) | $(pss_of "$none") | $nbytes | $nmed | $(awk -v m="$nmed" -v b="$nbytes" 'BEGIN {printf "%.2f", m * 1000 / (b / 1000)}') |"
  echo
  echo "- per compressed byte, the HAL's page costs $(awk -v a="$hmed" -v ab="$hbytes" -v b="$nmed" -v bb="$nbytes" 'BEGIN {printf "%.2fx", (a / ab) / (b / bb)}') what --hal none's does (kernel log: $kmsg)"
  kill "$hal" "$none" "$sim" 2>/dev/null || true
  wait "$hal" "$none" "$sim" 2>/dev/null || true
}
hal_bench
echo

echo "## Ingest (xdm-sim --flood, 100k samples per message; exporter pinned to one core)"
echo
SIM_TASKSET="taskset -c 0" EXP_TASKSET="taskset -c 1" start f --devices 256 --links 128 --flood \
  -- --collector.max-series 200000
sleep 2
msgs() { curl -sf "$URL" | awk '/^xpu_exporter_stream_messages_total/ {print $2}'; }
m0=$(msgs); c0=$(cpu_us "$EXP_PID"); t0=$(date +%s%N)
sleep 5  # no scrapes: the CPU is ingest's alone
m1=$(msgs); c1=$(cpu_us "$EXP_PID"); t1=$(date +%s%N)
per=$((256 * (15 + 3 * 128)))
awk -v m=$((m1 - m0)) -v per=$per -v el=$(( (t1 - t0) / 1000000 )) -v t=$((c1 - c0)) \
  'BEGIN {printf "- %.0f samples/s absorbed (%d messages of %d samples in %.1f s), exporter CPU %.0f%% of one core: %.2f M samples per CPU-second\n", m * per / (el / 1000), m, per, el / 1000, 100 * t / 1e6 / (el / 1000), m * per / (t / 1e6) / 1e6}'
out=$("$CLIENT" "$URL" --count 50 --gzip-raw --prometheus)
echo "- scrape while flooding (gzip, as Prometheus): median $(field median_ms "$out") ms, p99 $(field p99_ms "$out") ms (50 scrapes of $(field bytes "$out") bytes)"
stop

echo
echo "## Freshness (8 devices, 20 ms interval: sample leaves xdm-sim -> visible in /metrics)"
echo
start r --interval 20ms --marker-id 9999 -- --collector.interval 20ms --collector.unknown-metrics
out=$("$CLIENT" "$URL" --freshness 9999 --seconds 5)
echo "- $(field freshness_samples "$out") samples: median $(field median_ms "$out") ms, p99 $(field p99_ms "$out") ms, max $(field max_ms "$out") ms"
stop

echo
echo "## Memory under a flooding daemon (default limits; docs/reliability.md)"
echo
# 1024 devices x 44 links: ~153,000 samples a message, just under the default
# 4 MiB --xdm.max-message-size; the default 50,000-series cap refuses the rest.
start m --devices 1024 --links 44 --flood
for _ in 1 2 3 4 5 6; do sleep 5; curl -sf -H 'Accept-Encoding: gzip' "$URL" >/dev/null; done
page=$(curl -sf "$URL")
echo "- 30 s, a scrape every 5 s: RSS $(( $(rss_kb "$EXP_PID") / 1024 )) MiB, peak (VmHWM)" \
  "$(( $(hwm_kb "$EXP_PID") / 1024 )) MiB; $(awk '/^xpu_exporter_stream_messages_total/ {print $2}' <<<"$page")" \
  "messages, series $(awk '/^xpu_exporter_series / {print $2}' <<<"$page"), dropped at the cap" \
  "$(awk '/^xpu_exporter_series_dropped_total/ {print $2}' <<<"$page")"
stop

echo
echo "## Micro-benchmarks (Google Benchmark)"
echo
echo '```'
"$BUILD/bench/micro_bench" --benchmark_min_time=0.2 2>/dev/null | grep -E '^(BM_|Benchmark|-)'
echo '```'
