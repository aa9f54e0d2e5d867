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
#       markdown table: idle CPU and wake-ups (schedstat's runs, preemptions
#       too), RSS and PSS (idle; the packed libraries are private copies, so
#       PSS is near RSS), threads, the scrape times, the page's gzip bytes,
#       NVML's last read. The driver's NVML is named as `ldconfig -p` finds
#       it unless the flags name one.
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
  # glibc's other parts beside its libc: what the driver's libnvidia-ml (opened
  # by the exporter, under this loader) links against, where the host's older
  # glibc would not match ours.
  local libc_dir
  libc_dir=$(dirname "$(ldd "$exp" | awk '$1 == "libc.so.6" {print $3}')")
  for lib in libpthread.so.0 libdl.so.2 librt.so.1 libutil.so.1 libresolv.so.2; do
    [ -e "$libc_dir/$lib" ] && cp -L "$libc_dir/$lib" "$dir/lib/"
  done
  cp "$0" "$dir/gpu-cost.sh"
  local kib
  kib=$(du -sk "$dir" | awk '{print $1}')
  echo "gpu-cost: packed $((kib / 1024)) MiB into $dir"
  # The device tool carries at most 64 MiB.
  [ "$kib" -le $((64 * 1024)) ] || { echo "gpu-cost: more than 64 MiB" >&2; exit 1; }
}

run() {
  local dir
  dir=$(cd "$1" && pwd)
  shift
  [ "${1:-}" = -- ] && shift
  local extra=("$@")
  local loader
  loader=$(find "$dir/lib" -maxdepth 1 -name 'ld-linux-*.so.*' | head -n 1)
  [ -n "$loader" ] || { echo "gpu-cost: no loader in $dir/lib (pack it first)" >&2; exit 2; }
  # The driver's NVML as this machine's own linker finds it, named, unless
  # the flags name one: the packed loader looks only where its cache says.
  case " ${extra[*]-} " in
    *" --hal.nvml.library"*) ;;
    *)
      local nvml_lib
      nvml_lib=$( (ldconfig -p 2>/dev/null || true) | awk '$1 == "libnvidia-ml.so.1" {print $NF; exit}')
      [ -n "$nvml_lib" ] && extra+=(--hal.nvml.library "$nvml_lib")
      ;;
  esac
  exe() { "$loader" --library-path "$dir/lib" "$@"; }
  # Not local: the EXIT trap reads them after run() has returned.
  tmp=$(mktemp -d)
  pid=""
  trap 'stop_exporter; rm -rf "${tmp:-}"' EXIT
  # schedstat: nanoseconds on a CPU and times put on one, summed over the
  # process's threads (%.0f: mawk's %d stops at 2^31).
  sched() { cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk -v f="$2" '{s += $f} END {printf "%.0f", s}'; }
  field() { sed -n "s/.*$1=\([^ ]*\).*/\1/p" <<<"$2"; }
  echo "# xpu-exporter's cost by --hal, $(date -u +%Y-%m-%dT%H:%MZ)"
  echo
  echo "- machine: $(nproc) cores, $(awk '/^MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo), $(uname -r)"
  if command -v nvidia-smi >/dev/null 2>&1; then
    echo "- cards: $( (timeout 20 nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || true) | sort | uniq -c | sed 's/^ *//' | paste -sd ';' -)"
  else
    echo "- cards: no nvidia-smi here"
  fi
  echo "- exporter flags besides --hal: ${extra[*]-(none)}"
  echo "- each --hal: idle ${IDLE_S:-15} s past its first reads, then ${ROUNDS:-2} x ${SCRAPES:-300} keep-alive scrapes (Prometheus's Accept, gzip kept compressed)"
  echo
  echo "| --hal | idle CPU % of a core | wake-ups a second | RSS MiB | PSS MiB | threads | scrape median / p99 ms, each round | gzip bytes | xpu_nvml_read_duration_seconds |"
  echo "|---|---|---|---|---|---|---|---|---|"
  local cfg
  for cfg in ${CONFIGS:-none pci,kmsg nvml auto}; do
    : >"$tmp/log"
    # The loader itself, not a function around it: $! is then the exporter.
    mkdir -p "$tmp/state-$cfg"
    "$loader" --library-path "$dir/lib" "$dir/xpu-exporter" --web.listen-address 127.0.0.1:0 \
      --xdm.endpoint "" --hal "$cfg" --hal.state-dir "$tmp/state-$cfg" ${extra[@]+"${extra[@]}"} \
      2>"$tmp/log" &
    pid=$!
    local port="" i
    for i in $(seq 1 600); do
      port=$(grep -o 'listening on port(s) [0-9]*' "$tmp/log" | awk '{print $4}' || true)
      [ -n "$port" ] && break
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.05
    done
    if [ -z "$port" ]; then
      echo "| $cfg | did not start: $(tail -n 1 "$tmp/log" | tr '|' '/') |"
      stop_exporter
      continue
    fi
    local url=http://127.0.0.1:$port/metrics
    # Past every source's first read (NVML's first opens the library): the
    # page answers, then a few intervals more. (/-/ready would not: with no
    # daemon and no source it says 503.)
    for i in $(seq 1 100); do exe "$dir/scrape_client" "$url" --dump >/dev/null 2>&1 && break; sleep 0.1; done
    sleep 3
    local c0 r0 t0 c1 r1 t1
    c0=$(sched "$pid" 1)
    r0=$(sched "$pid" 3)
    t0=$(date +%s%N)
    sleep "${IDLE_S:-15}"
    c1=$(sched "$pid" 1)
    r1=$(sched "$pid" 3)
    t1=$(date +%s%N)
    if ! kill -0 "$pid" 2>/dev/null || [ -z "$c0" ] || [ -z "$c1" ]; then
      echo "| $cfg | exited: $(tail -n 1 "$tmp/log" | tr '|' '/') |"
      stop_exporter
      continue
    fi
    local idle wakes rss pss threads
    idle=$(awk -v c="$((c1 - c0))" -v t="$((t1 - t0))" 'BEGIN {printf "%.3f", 100 * c / t}')
    wakes=$(awk -v r="$((r1 - r0))" -v t="$((t1 - t0))" 'BEGIN {printf "%.1f", r / (t / 1e9)}')
    rss=$(awk '/^VmRSS/ {printf "%.1f", $2 / 1024}' /proc/"$pid"/status 2>/dev/null || true)
    pss=$(awk '/^Pss:/ {printf "%.1f", $2 / 1024}' /proc/"$pid"/smaps_rollup 2>/dev/null || true)
    threads=$(find /proc/"$pid"/task -mindepth 1 -maxdepth 1 2>/dev/null | wc -l)
    local times="" out bytes=""
    for i in $(seq 1 "${ROUNDS:-2}"); do
      out=$(exe "$dir/scrape_client" "$url" --count "${SCRAPES:-300}" --gzip-raw --prometheus) ||
        out="median_ms=failed p99_ms=failed"
      times="$times${times:+, }$(field median_ms "$out") / $(field p99_ms "$out")"
      bytes=$(field wire_bytes "$out")
    done
    local nvml
    nvml=$( (exe "$dir/scrape_client" "$url" --dump 2>/dev/null || true) |
      awk '$1 == "xpu_nvml_read_duration_seconds" {printf "%.4f", $2}')
    echo "| $cfg | $idle | $wakes | ${rss:--} | ${pss:--} | $threads | $times | ${bytes:--} | ${nvml:--} |"
    stop_exporter
  done
}

# Stops the exporter of the row: SIGTERM, then SIGKILL after 10 s (a call
# into NVML that hangs must not hang the run).
stop_exporter() {
  [ -n "${pid:-}" ] || return 0
  kill "$pid" 2>/dev/null || true
  local i
  for i in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  pid=""
}

case "${1:-}" in
  pack) shift; [ $# -ge 1 ] || { echo "usage: bench/gpu-cost.sh pack DIR [BUILD]" >&2; exit 2; }; pack "$@" ;;
  run) shift; [ $# -ge 1 ] || { echo "usage: bench/gpu-cost.sh run DIR [-- FLAGS]" >&2; exit 2; }; run "$@" ;;
  *) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
