#!/usr/bin/env bash
# What the exporter costs on a real GPU node, for each --hal (issue 51; its
# table in docs/benchmarks.md). Two steps, as a lent GPU machine reaches no
# package registry:
#
#   bench/gpu-cost.sh pack DIR [BUILD]
#       here: copies the exporter (stripped), the scrape client and every
#       library they load, the dynamic loader too, into DIR (about 40 MiB),
#       so that they run on any x86-64 Linux whatever its own libraries
#   bench/gpu-cost.sh run DIR [-- EXPORTER-FLAGS...]
#       there: for each --hal in $CONFIGS (default "none pci,kmsg nvml auto")
#       starts the exporter with no daemon (--xdm.endpoint ""), lets it idle
#       $IDLE_S seconds (15) past its first reads, then makes $ROUNDS rounds
#       (2) of $SCRAPES (300) keep-alive scrapes as Prometheus makes them
#       (its Accept header, gzip, the body kept compressed); prints a
#       markdown table: idle CPU and wake-ups, RSS and PSS, threads, the
#       scrape times, the page's gzip bytes, NVML's last read.
#
# The programs run under the packed loader (DIR/lib/ld-linux-x86-64.so.2
# --library-path DIR/lib), so the host's own libraries stay out of them but
# for the driver's libnvidia-ml, which the exporter opens itself; other
# programs (nvidia-smi) run as they are.
set -euo pipefail

pack() {
  local dir=$1 build=${2:-$(cd "$(dirname "$0")/.." && pwd)/build}
  local exp=$build/src/app/xpu-exporter client=$build/bench/scrape_client
  for f in "$exp" "$client"; do [ -x "$f" ] || { echo "gpu-cost: $f is not built" >&2; exit 2; }; done
  mkdir -p "$dir/lib"
  strip -o "$dir/xpu-exporter" "$exp"
  strip -o "$dir/scrape_client" "$client"
  # Every library either loads, as this machine resolves them, and the loader.
  ldd "$exp" "$client" | awk '/=> \// {print $3} /^\t\/.*ld-linux/ {print $1}' | sort -u |
    while read -r lib; do cp -L "$lib" "$dir/lib/"; done
  cp "$0" "$dir/gpu-cost.sh"
  du -sh "$dir"
}

run() {
  local dir
  dir=$(cd "$1" && pwd)
  shift
  [ "${1:-}" = -- ] && shift
  local extra=("$@")
  local loader
  loader=$(ls "$dir"/lib/ld-linux-*.so.* | head -1)
  exe() { "$loader" --library-path "$dir/lib" "$@"; }
  # Not local: the EXIT trap reads them after run() has returned.
  tmp=$(mktemp -d)
  pid=""
  trap '[ -n "${pid:-}" ] && kill "$pid" 2>/dev/null; rm -rf "${tmp:-}"' EXIT
  # schedstat: nanoseconds on a CPU and times put on one, summed over the
  # process's threads (%.0f: mawk's %d stops at 2^31).
  sched() { cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk -v f="$2" '{s += $f} END {printf "%.0f", s}'; }
  field() { sed -n "s/.*$1=\([^ ]*\).*/\1/p" <<<"$2"; }
  echo "# xpu-exporter's cost by --hal, $(date -u +%Y-%m-%dT%H:%MZ)"
  echo
  echo "- machine: $(nproc) cores, $(awk '/^MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo), $(uname -r)"
  if command -v nvidia-smi >/dev/null 2>&1; then
    echo "- cards: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | sort | uniq -c | sed 's/^ *//' | paste -sd ';' -)"
  else
    echo "- cards: no nvidia-smi here"
  fi
  echo "- each --hal: idle ${IDLE_S:-15} s past its first reads, then ${ROUNDS:-2} x ${SCRAPES:-300} keep-alive scrapes (Prometheus's Accept, gzip kept compressed)"
  echo
  echo "| --hal | idle CPU % of a core | wake-ups a second | RSS MiB | PSS MiB | threads | scrape median / p99 ms, each round | gzip bytes | xpu_nvml_read_duration_seconds |"
  echo "|---|---|---|---|---|---|---|---|---|"
  local cfg
  for cfg in ${CONFIGS:-none pci,kmsg nvml auto}; do
    : >"$tmp/log"
    # The loader itself, not a function around it: $! is then the exporter.
    "$loader" --library-path "$dir/lib" "$dir/xpu-exporter" --web.listen-address 127.0.0.1:0 \
      --xdm.endpoint "" --hal "$cfg" --hal.state-dir "$tmp/state" "${extra[@]}" 2>"$tmp/log" &
    pid=$!
    local port="" i
    for i in $(seq 1 200); do
      port=$(grep -o 'listening on port(s) [0-9]*' "$tmp/log" | awk '{print $4}' || true)
      [ -n "$port" ] && break
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.05
    done
    if [ -z "$port" ]; then
      echo "| $cfg | did not start: $(tail -1 "$tmp/log") |"
      pid=""
      continue
    fi
    local url=http://127.0.0.1:$port/metrics
    # Past every source's first read (NVML's first opens the library): the
    # page answers, then a few intervals more.
    for i in $(seq 1 200); do exe "$dir/scrape_client" "${url%/metrics}/-/ready" --dump >/dev/null 2>&1 && break; sleep 0.05; done
    sleep 3
    local c0 r0 t0 c1 r1 t1
    c0=$(sched "$pid" 1) r0=$(sched "$pid" 3) t0=$(date +%s%N)
    sleep "${IDLE_S:-15}"
    c1=$(sched "$pid" 1) r1=$(sched "$pid" 3) t1=$(date +%s%N)
    local idle wakes rss pss threads
    idle=$(awk -v c="$((c1 - c0))" -v t="$((t1 - t0))" 'BEGIN {printf "%.3f", 100 * c / t}')
    wakes=$(awk -v r="$((r1 - r0))" -v t="$((t1 - t0))" 'BEGIN {printf "%.1f", r / (t / 1e9)}')
    rss=$(awk '/^VmRSS/ {printf "%.1f", $2 / 1024}' /proc/"$pid"/status)
    pss=$(awk '/^Pss:/ {printf "%.1f", $2 / 1024}' /proc/"$pid"/smaps_rollup)
    threads=$(ls /proc/"$pid"/task | wc -l)
    local times="" out bytes=""
    for i in $(seq 1 "${ROUNDS:-2}"); do
      out=$(exe "$dir/scrape_client" "$url" --count "${SCRAPES:-300}" --gzip-raw --prometheus) ||
        out="median_ms=failed p99_ms=failed"
      times="$times${times:+, }$(field median_ms "$out") / $(field p99_ms "$out")"
      bytes=$(field wire_bytes "$out")
    done
    local nvml
    nvml=$(exe "$dir/scrape_client" "$url" --dump 2>/dev/null |
      awk '$1 == "xpu_nvml_read_duration_seconds" {printf "%.4f", $2}')
    echo "| $cfg | $idle | $wakes | $rss | $pss | $threads | $times | $bytes | ${nvml:--} |"
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    pid=""
  done
}

case "${1:-}" in
  pack) shift; [ $# -ge 1 ] || { echo "usage: bench/gpu-cost.sh pack DIR [BUILD]" >&2; exit 2; }; pack "$@" ;;
  run) shift; [ $# -ge 1 ] || { echo "usage: bench/gpu-cost.sh run DIR [-- FLAGS]" >&2; exit 2; }; run "$@" ;;
  *) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
