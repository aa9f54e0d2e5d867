#!/usr/bin/env bash
# A short daemon stall is not an outage; a long one is (docs/reliability.md,
# "A short stall is not an outage"). xdm-sim collects every 100 ms and is
# stopped with SIGSTOP: for 1.5 s every device series stays on every scrape
# and the mode holds while xpu_device_data_age_seconds grows; for 15 s the
# values are withdrawn past the 5 s floor, xpu_device_info stays for joins,
# and all returns on SIGCONT.
source "$(dirname "$0")/lib.sh" "$1"

start_sim sim --interval 100ms
start_exporter sim
# Series of the store: the device-labelled ones, less the registry's (identity,
# health and the HAL's and the kernel log's faults, which --hal=auto adds where
# /dev/kmsg is readable) and the data age (which stay through any stall).
data_series() {
  grep '^xpu_.*uuid=' <<<"$1" |
    grep -cvE '^xpu_device_(info|topology_info|health|data_age_seconds|fault_active|fault_level|fault_events_total)\{' || true
}
all_there() { [ "$(data_series "$(scrape)")" -eq 288 ]; }  # 8 devices x 36 families
wait_for 20 all_there || fail "expected 288 data series, got $(data_series "$(scrape)")"
wait_for 10 has_metric 'xpu_device_data_age_seconds{minor="7"' || fail "no data age gauge"

max_age() { grep '^xpu_device_data_age_seconds{' <<<"$1" | awk '{ if ($2 > m) m = $2 } END { print m + 0 }'; }

# 1.5 s: every scrape has every series, up stays 1, the data age grows.
kill -STOP "$SIM_PID"
stopped=$(date +%s%N)
scrapes=0 oldest=0
while [ $(( ($(date +%s%N) - stopped) / 1000000 )) -lt 1500 ]; do
  page=$(scrape) || fail "scrape failed during the stall"
  n=$(data_series "$page")
  [ "$n" -eq 288 ] || { kill -CONT "$SIM_PID"; fail "scrape $scrapes in a short stall had $n of 288 data series"; }
  grep -q '^xpu_exporter_upstream_up 1$' <<<"$page" ||
    { kill -CONT "$SIM_PID"; fail "upstream went down in a short stall: $(grep upstream_mode <<<"$page")"; }
  oldest=$(max_age "$page")
  scrapes=$((scrapes + 1))
  sleep 0.1
done
kill -CONT "$SIM_PID"
# Each round forks curl, grep and awk: a loaded machine gets fewer rounds.
[ "$scrapes" -ge 4 ] || fail "only $scrapes scrapes in the stall"
awk -v a="$oldest" 'BEGIN { exit !(a >= 1.0) }' || fail "data age at the end of a 1.5 s stall: $oldest"
fresh() { awk -v a="$(max_age "$(scrape)")" 'BEGIN { exit !(a < 0.5) }'; }
wait_for 10 fresh || fail "data age did not fall after SIGCONT"
echo "short stall: $scrapes scrapes, all 288 series on each, data age reached ${oldest} s"

# 15 s: withdrawn past the floor, identity kept; back on SIGCONT.
kill -STOP "$SIM_PID"
stopped=$SECONDS
stopped_ms=$(($(date +%s%N) / 1000000))
gone() {
  local page
  page=$(scrape) || return 1
  [ "$(data_series "$page")" -eq 0 ] && grep -q '^xpu_exporter_upstream_up 0$' <<<"$page"
}
wait_for 15 gone || { kill -CONT "$SIM_PID"; fail "series not withdrawn in a 15 s stall"; }
# In milliseconds: whole seconds would let a withdrawal at 3.1 s pass. The
# last data came up to one collection (100 ms) before the stop.
took_ms=$(($(date +%s%N) / 1000000 - stopped_ms))
[ "$took_ms" -ge 4900 ] || { kill -CONT "$SIM_PID"; fail "withdrawn after ${took_ms} ms, before the 5 s floor"; }
page=$(scrape)
[ "$(grep -c '^xpu_device_info{' <<<"$page")" -eq 8 ] || { kill -CONT "$SIM_PID"; fail "xpu_device_info not kept"; }
awk -v a="$(max_age "$page")" 'BEGIN { exit !(a >= 4) }' || { kill -CONT "$SIM_PID"; fail "data age $(max_age "$page") after withdrawal"; }
while [ $((SECONDS - stopped)) -lt 15 ]; do sleep 0.5; done
kill -CONT "$SIM_PID"
wait_for 15 all_there || fail "series did not return after SIGCONT"
has_metric 'xpu_exporter_upstream_up 1' || fail "upstream not back"
echo "long stall: withdrawn after ${took_ms} ms, identity kept, back after SIGCONT"

# A daemon that answers polls and ListAndWatch but refuses the stream
# (xdm-sim --no-stream). The exporter polls each interval and re-subscribes
# only as its backoff allows (a poll's answer once hurried it at every poll:
# thousands of calls a second), and XDM's health still follows ListAndWatch
# within about an interval. gRPC's backup poll, every 5 s by default, is put
# off past the test, so that only the exporter's own threads drive gRPC.
kill "$EXP_PID" "$SIM_PID"; wait "$EXP_PID" "$SIM_PID" 2>/dev/null || true
start_sim polled --interval 500ms --no-stream
GRPC_CLIENT_CHANNEL_BACKUP_POLL_INTERVAL_MS=600000 start_exporter polled
wait_for 10 has_metric 'xpu_exporter_upstream_mode{mode="poll"} 1' || fail "not polling a daemon without the stream"
counter() { scrape | awk -v n="$1" '$1 == n { print $2 }'; }
xdm_health() {
  local page
  page=$(scrape) || return 1
  grep '^xpu_device_health{' <<<"$page" | grep 'minor="3"' | grep "source=\"xdm\"" | grep -q "} $1\$"
}
wait_for 10 xdm_health 1 || fail "no XDM health for minor 3"
reconnects=$(counter xpu_exporter_stream_reconnects_total)
polls=$(counter xpu_exporter_poll_requests_total)
t_start=$(date +%s%N)
worst=0
for healthy in false true false true; do
  t0=$(date +%s%N)
  curl -sf -XPOST "$CONTROL/control/health" -d "{\"minor\":3,\"healthy\":$healthy}" >/dev/null || fail "control/health"
  want=$([ $healthy = true ] && echo 1 || echo 0)
  wait_for 10 xdm_health "$want" || fail "XDM health of minor 3 never became $want"
  ms=$((($(date +%s%N) - t0) / 1000000))
  [ "$ms" -gt "$worst" ] && worst=$ms
done
# One interval between polls, a scrape's round trip and a loaded machine's
# scheduling: 3 s. Not carried at all, it would take the whole wait (10 s).
[ "$worst" -le 3000 ] || fail "ListAndWatch's health took ${worst} ms while only polled"
# Four more polls make the window the calls are counted in.
p4=$(counter xpu_exporter_poll_requests_total)
more_polls() { awk -v a="$(counter xpu_exporter_poll_requests_total)" -v b="$p4" 'BEGIN { exit !(a >= b + 4) }'; }
wait_for 10 more_polls || fail "the exporter stopped polling"
r=$(counter xpu_exporter_stream_reconnects_total) p=$(counter xpu_exporter_poll_requests_total)
elapsed=$((($(date +%s%N) - t_start) / 1000000))
# The changes and the window took $elapsed ms: re-subscriptions at backoffs
# of 1, 2, 4, 8 s (one of them hurried, after which it starts anew), and a
# poll each 500 ms plus one at each refusal.
awk -v a="$r" -v b="$reconnects" -v ms="$elapsed" 'BEGIN { exit !(a - b <= 3 + log(ms / 1000 + 1) / log(2)) }' ||
  fail "stream re-subscribed $((${r%.*} - ${reconnects%.*})) times in $elapsed ms"
awk -v a="$p" -v b="$polls" -v ms="$elapsed" -v r="$r" -v r0="$reconnects" 'BEGIN { exit !(a - b <= 2 + ms / 500 + (r - r0)) }' ||
  fail "$((${p%.*} - ${polls%.*})) polls in $elapsed ms"
echo "polled daemon: ListAndWatch's health within ${worst} ms; $((${r%.*} - ${reconnects%.*})) re-subscriptions, $((${p%.*} - ${polls%.*})) polls in $elapsed ms"
echo PASS
