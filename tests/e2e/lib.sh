# Helpers for the end-to-end tests: real xdm-sim and xpu-exporter processes on
# temporary Unix sockets and loopback ports, cleaned up on exit.
# Usage: source lib.sh BUILD_DIR
set -euo pipefail
BUILD=${1:?build dir}
E2E_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SIM=$BUILD/tools/xdm-sim/xdm-sim
EXPORTER=$BUILD/src/app/xpu-exporter
TMP=$(mktemp -d /tmp/xpu-e2e.XXXXXX)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  [ -n "${KEEP_TMP:-}" ] || rm -rf "$TMP"
}
trap cleanup EXIT

fail() { echo "FAIL: $*" >&2; exit 1; }

# A loopback port free now, for a program that takes no port 0 (Prometheus,
# VictoriaMetrics, the package's unit). It is released before the program
# binds it, so another test may take it first under ctest -j: that program
# then fails to start, loudly, never silently sharing.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# wait_for TIMEOUT_S CMD...: re-runs CMD until it succeeds (a condition, not a sleep).
wait_for() {
  local deadline=$((SECONDS + $1)); shift
  until "$@" >/dev/null 2>&1; do
    [ $SECONDS -lt $deadline ] || return 1
    sleep 0.05
  done
}

# start_sim NAME [flags...]: sets SIM_PID and CONTROL (http://127.0.0.1:PORT).
start_sim() {
  local name=$1; shift
  : >"$TMP/$name.out"  # see start_exporter
  "$SIM" --socket "$TMP/$name.sock" --controller-socket "$TMP/$name-ctl.sock" "$@" \
    >"$TMP/$name.out" 2>"$TMP/$name.err" &
  SIM_PID=$!
  PIDS+=("$SIM_PID")
  wait_for 10 grep -q "xdm-sim ready" "$TMP/$name.out" || fail "xdm-sim did not start: $(cat "$TMP/$name.err")"
  CONTROL=$(grep -o 'control=http://[0-9.:]*' "$TMP/$name.out" | cut -d= -f2)
}

# start_exporter SIMNAME [flags...]: sets EXP_PID and URL (http://127.0.0.1:PORT).
start_exporter() {
  local name=$1; shift
  # Emptied here, not by the background job's redirection: that may happen
  # after the wait below has read an earlier exporter's "listening" line.
  : >"$TMP/exporter.log"
  # The kernel log's kept states stay with this test (a machine's
  # /var/lib/xpu-exporter, where it exists, is not the tests').
  local state=()
  case " $* " in *" --hal.state-dir"*) ;; *) mkdir -p "$TMP/state"; state=(--hal.state-dir "$TMP/state") ;; esac
  # Nor is a machine's NVIDIA driver: `auto` would read its cards beside
  # the simulated ones. A test of the nvml backend names its stand-in.
  local nvml=()
  case " $* " in *" --hal.nvml.library"*) ;; *) nvml=(--hal.nvml.library "$TMP/no-libnvidia-ml.so") ;; esac
  # The simulator's daemon, unless the test names another (or none: "").
  local xdm=(--xdm.endpoint "unix://$TMP/$name.sock" --controller.endpoint "unix://$TMP/$name-ctl.sock")
  case " $* " in *" --xdm.endpoint"*) xdm=() ;; esac
  "$EXPORTER" --web.listen-address 127.0.0.1:0 "${xdm[@]}" "${state[@]}" "${nvml[@]}" "$@" 2>"$TMP/exporter.log" &
  EXP_PID=$!
  PIDS+=("$EXP_PID")
  wait_for 10 grep -q "listening on port" "$TMP/exporter.log" || fail "exporter did not start: $(cat "$TMP/exporter.log")"
  URL="http://127.0.0.1:$(grep -o 'listening on port(s) [0-9]*' "$TMP/exporter.log" | awk '{print $4}')"
}

scrape() { curl -sf "$URL/metrics"; }
# check_families: every family on the page is declared, in the catalog or in
# src/catalog/own_families.yaml, with its type, and documented in
# docs/metrics.md with its HELP text (tests/support/check_families.py).
check_families() {
  scrape | python3 "$E2E_DIR/../support/check_families.py" ||
    fail "a family on the page is not declared (see above)"
}
# Reads the whole page before matching: with pipefail, `curl | grep -q` fails
# whenever grep stops early and curl gets SIGPIPE.
has_metric() {
  local page
  page=$(scrape) || return 1
  grep -q "^$1" <<<"$page"
}

# wait_ms LIMIT_MS CMD...: like wait_for with a millisecond bound; prints the
# milliseconds it took.
wait_ms() {
  local limit=$1; shift
  local start now
  start=$(date +%s%N)
  until "$@" >/dev/null 2>&1; do
    now=$(date +%s%N)
    [ $(( (now - start) / 1000000 )) -lt "$limit" ] || return 1
    sleep 0.01
  done
  echo $(( ($(date +%s%N) - start) / 1000000 ))
}

# start_apiserver TOKEN: the stand-in Kubernetes API server
# (tests/support/fake_apiserver.py) over HTTPS, its certificate signed by a CA
# of its own ($TMP/ca.crt), accepting TOKEN (also in $TMP/token). Sets API
# (its URL); `api METHOD PATH [BODY]` calls its /control/ API.
start_apiserver() {
  (
    cd "$TMP"
    openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 2 -subj "/CN=k8s-ca" 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -keyout srv.key -out srv.csr -subj "/CN=kubernetes" 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1,DNS:kubernetes.default.svc\n' >srv.ext
    openssl x509 -req -in srv.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out srv.crt -days 2 \
      -extfile srv.ext 2>/dev/null
  )
  echo "$1" >"$TMP/token"
  python3 "$E2E_DIR/../support/fake_apiserver.py" "$TMP/srv.crt" "$TMP/srv.key" "$1" \
    >"$TMP/api.out" 2>"$TMP/api.err" &
  PIDS+=($!)
  wait_for 10 grep -q "port=" "$TMP/api.out" || fail "fake API server did not start: $(cat "$TMP/api.err")"
  API="https://127.0.0.1:$(sed -n 's/port=//p' "$TMP/api.out")"
}
api() { curl -sfk -X"$1" "$API/control/$2" ${3:+-d "$3"} >/dev/null || fail "control $1 $2"; }

# $TMP/kmsg.records, a kernel-log record file for the exporter to read
# (--hal.kmsg.path): `record TEXT` appends one record (facility 0, level 3,
# stamped now, numbered by SEQ). kmsg_test.sh has its own `record LEVEL
# TEXT`, into /dev/kmsg where it may.
SEQ=0
record() {
  SEQ=$((SEQ + 1))
  printf '3,%d,%s,-;%s\n' "$SEQ" "$(awk '{printf "%.0f", $1 * 1000000}' /proc/uptime)" "$1" >>"$TMP/kmsg.records"
}
