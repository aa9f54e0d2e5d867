#!/usr/bin/env bash
# Reload (issue 14): SIGHUP and POST /-/reload re-read --config.file and apply
# selection, devices, log level and HAL settings live, while a scraper polls
# /metrics without one failed or empty scrape; a bad file changes nothing and
# says why; a restart-only setting is named in the log and in /config; HAL
# faults that stay active are not counted again; --config.check exits 0 or 2.
source "$(dirname "$0")/lib.sh" "$1"
CFG=$TMP/exporter.yml
cat >"$CFG" <<'YML'
log.level: info
YML
start_sim sim --interval 100ms --hal-root "$TMP/hal"
start_exporter sim --collector.interval 100ms --hal sysfs --hal.root "$TMP/hal" \
  --kubelet.pod-resources-socket "" --config.file "$CFG" --web.enable-lifecycle
BASE=${URL%/metrics}
reload() { curl -s -o "$TMP/reload.out" -w '%{http_code}' -XPOST "$BASE/-/reload"; }
links() { has_metric 'xpu_link_up{'; }
no_links() { ! has_metric 'xpu_link_' && has_metric 'xpu_utilization_ratio{'; }
wait_for 15 links || fail "no link series at start"
link_count() { grep -c 'xpu_link_up{' <<<"$(scrape)"; }
all_links() { [ "$(link_count)" = "$FULL" ]; }
FULL=$(link_count)

# A scraper through every reload below: each scrape must answer 200 with
# device data. It stops when $TMP/stop exists and prints its counts.
python3 - "$URL/metrics" "$TMP/stop" >"$TMP/scraper.out" 2>&1 <<'PY' &
import os, sys, urllib.request
url, stop = sys.argv[1], sys.argv[2]
ok = bad = 0
while not os.path.exists(stop):
    try:
        body = urllib.request.urlopen(url, timeout=5).read().decode()
        good = "\nxpu_device_info{" in body and "\nxpu_memory_total_bytes{" in body
    except Exception as e:  # any failure counts
        good = False
        print("scrape failed:", e)
    ok, bad = ok + good, bad + (not good)
print(f"scrapes ok={ok} bad={bad}")
PY
SCRAPER=$!
PIDS+=("$SCRAPER")

# ---- SIGHUP: exclude a family and turn on debug logging ----
# A broken stream logs its re-subscribe at debug only.
reconnects() { scrape | sed -n 's/^xpu_exporter_stream_reconnects_total \([0-9]*\).*/\1/p'; }
r0=$(reconnects)
curl -sf -XPOST "$CONTROL/control/stream/break" >/dev/null
wait_for 10 bash -c "[ \"\$(curl -sf $URL/metrics | sed -n 's/^xpu_exporter_stream_reconnects_total \([0-9]*\).*/\1/p')\" -gt $r0 ]" ||
  fail "stream break not seen"
grep -q 'level=debug msg' "$TMP/exporter.log" && fail "debug lines before the reload"
cat >"$CFG" <<'YML'
log.level: debug
metrics:
  exclude: ['xpu_link_.*']
YML
kill -HUP "$EXP_PID"
wait_for 10 grep -q "configuration reloaded" "$TMP/exporter.log" || fail "SIGHUP reload not logged"
no_links || fail "xpu_link_* still on the page after the reload"
curl -sf -XPOST "$CONTROL/control/stream/break" >/dev/null
wait_for 10 grep -q 'level=debug msg="ExporterDataStream ended' "$TMP/exporter.log" ||
  fail "log level not debug after the reload"
curl -sf "$BASE/config" | python3 -c '
import json, sys
s = json.load(sys.stdin)["settings"]
assert s["metrics.exclude"]["value"] in ("xpu_link_.*", ["xpu_link_.*"]) and s["metrics.exclude"]["source"] == "file", s["metrics.exclude"]
assert s["log.level"]["value"] == "debug", s["log.level"]
' || fail "/config does not show the reloaded settings"

# ---- POST /-/reload: back to everything, a device subset ----
cat >"$CFG" <<'YML'
log.level: info
xdm.devices: [1]
YML
[ "$(reload)" = 200 ] || fail "/-/reload: $(cat "$TMP/reload.out")"
wait_for 10 links || fail "xpu_link_* not back after /-/reload"
page=$(scrape)
minors=$(grep -o '^xpu_[a-z_]*{minor="[0-9]*"' <<<"$page" | sed 's/.*minor="//; s/"//' | sort -u | tr '\n' ' ')
[ "$minors" = "1 " ] || fail "--xdm.devices 1 by reload still shows minors: $minors: $(grep -v "^#" <<<"$page" | grep "minor=\"0\"" | cut -c1-60 | sort -u | head -5)"
cat >"$CFG" <<'YML'
log.level: info
YML
[ "$(reload)" = 200 ] || fail "/-/reload: $(cat "$TMP/reload.out")"
wait_for 10 all_links || fail "devices not back after dropping the subset: $(link_count) of $FULL link series"

# ---- a bad file changes nothing ----
before=$(link_count)
printf 'metrics:\n  exclude: [xpu_link_.*\n' >"$CFG"  # unterminated flow sequence
code=$(reload)
[ "$code" = 500 ] || fail "bad file: /-/reload answered $code"
grep -q "exporter.yml" "$TMP/reload.out" || fail "bad file: the answer does not name the file: $(cat "$TMP/reload.out")"
has_metric 'xpu_exporter_config_last_reload_successful 0' || fail "failed reload not in the gauge"
[ "$(grep -c 'xpu_link_up{' <<<"$(scrape)")" = "$before" ] || fail "a bad file changed the selection"
curl -sf "$BASE/config" | python3 -c '
import json, sys
j = json.load(sys.stdin)
assert j["lastReload"]["successful"] is False and "exporter.yml" in j["lastReload"]["error"], j["lastReload"]
' || fail "/config does not report the failed reload"
echo "metrics: {exclude: ['(']}" >"$CFG"  # a bad regex
[ "$(reload)" = 500 ] || fail "bad regex accepted by /-/reload"
kill -HUP "$EXP_PID"
wait_for 10 grep -q "kept the configuration in force" "$TMP/exporter.log" || fail "bad SIGHUP not logged"
links || fail "a bad SIGHUP changed the selection"

# ---- a restart-only setting: named in the log and in /config ----
printf 'log.level: info\nweb.max-connections: 8\nkubernetes.node-name: other\n' >"$CFG"
[ "$(reload)" = 200 ] || fail "/-/reload: $(cat "$TMP/reload.out")"
has_metric 'xpu_exporter_config_last_reload_successful 1' || fail "good reload not in the gauge"
has_metric 'xpu_exporter_config_restart_pending 2' || fail "restart-pending gauge not 2"
grep -q 'kubernetes.node-name changed; it takes effect after a restart' "$TMP/exporter.log" ||
  fail "node name change not named"
grep -q 'web.max-connections changed; it takes effect after a restart' "$TMP/exporter.log" ||
  fail "restart-only change not logged"
curl -sf "$BASE/config" | python3 -c '
import json, sys
s = json.load(sys.stdin)["settings"]["web.max-connections"]
assert s["value"] == "16" and s["reload"] == "restart", s
assert s["pendingRestart"] == {"value": "8", "source": "file"}, s
' || fail "/config does not show the pending restart"

# ---- the metric catalog is read again: a renamed family changes its name ----
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
sed 's/name: xpu_temperature_celsius$/name: xpu_die_temperature_celsius/' "$ROOT/src/catalog/metrics.yaml" >"$TMP/metrics.yml"
grep -q 'xpu_die_temperature_celsius' "$TMP/metrics.yml" || fail "test catalog not made"
printf 'log.level: info\nmetrics.catalog: %s\n' "$TMP/metrics.yml" >"$CFG"
[ "$(reload)" = 200 ] || fail "/-/reload with a catalog: $(cat "$TMP/reload.out")"
wait_for 10 has_metric 'xpu_die_temperature_celsius{' || fail "renamed family not on the page after the reload"
has_metric 'xpu_temperature_celsius{' && fail "old family name still on the page"
has_metric 'xpu_memory_used_bytes{' || fail "an unchanged family went missing"
printf 'metrics:\n  - {id: 1, name: bad name}\n' >"$TMP/metrics.yml"
[ "$(reload)" = 500 ] || fail "a bad catalog was accepted by /-/reload"
has_metric 'xpu_die_temperature_celsius{' || fail "a bad catalog changed the page"
# A family the exporter writes itself (the old hand list lacked it): refused too.
printf 'metrics:\n  - {id: 1, name: xpu_container_core_limit_ratio, type: gauge, unit: ratio, help: h}\n' >"$TMP/metrics.yml"
[ "$(reload)" = 500 ] || fail "a catalog taking xpu_container_core_limit_ratio was accepted by /-/reload"
grep -q "own namespace xpu_container_" "$TMP/reload.out" || fail "reload refusal not explained: $(cat "$TMP/reload.out")"
has_metric 'xpu_die_temperature_celsius{' || fail "a refused catalog changed the page"

# ---- HAL settings change live; an active fault is not counted again ----
curl -sf -XPOST "$CONTROL/control/fault" -d '{"minor":2,"code":"0x80E18400"}' >/dev/null
wait_for 10 has_metric 'xpu_device_fault_active{minor="2",.*code="0x80E18400".*} 1' || fail "fault not seen"
events() { scrape | grep '^xpu_device_fault_events_total{bus_id="[^"]*",code="0x80E18400",.*minor="2"' | awk '{print $2}'; }
before=$(events)
printf 'log.level: info\nhal.interval: 300ms\n' >"$CFG"
[ "$(reload)" = 200 ] || fail "/-/reload: $(cat "$TMP/reload.out")"
grep -q 'HAL backend sysfs at .*, every 300 ms' "$TMP/exporter.log" || fail "HAL not rebuilt with the new interval"
has_metric 'xpu_hal_up{backend="sysfs"} 1' || wait_for 10 has_metric 'xpu_hal_up{backend="sysfs"} 1' || fail "HAL down after reload"
curl -sf -XPOST "$CONTROL/control/fault" -d '{"minor":3,"code":"0x80CB8001"}' >/dev/null
wait_for 10 has_metric 'xpu_device_fault_active{minor="3",.*code="0x80CB8001".*} 1' || fail "new sampler misses a new fault"
[ "$(events)" = "$before" ] || fail "a fault still active was counted again: $before -> $(events)"

# ---- the scraper saw every scrape succeed ----
touch "$TMP/stop"
wait "$SCRAPER" || true
cat "$TMP/scraper.out"
grep -q 'bad=0$' "$TMP/scraper.out" || fail "scrapes failed during reloads"
ok=$(sed -n 's/.*ok=\([0-9]*\).*/\1/p' "$TMP/scraper.out")
[ "$ok" -ge 20 ] || fail "too few scrapes to judge: $ok"

# ---- without --web.enable-lifecycle: 403; GET: 405 ----
kill "$EXP_PID"; wait "$EXP_PID" 2>/dev/null || true
start_exporter sim --hal none --kubelet.pod-resources-socket ""
BASE=${URL%/metrics}
[ "$(reload)" = 403 ] || fail "/-/reload without --web.enable-lifecycle not refused"
[ "$(curl -s -o /dev/null -w '%{http_code}' "$BASE/-/reload")" = 405 ] || fail "GET /-/reload not 405"

# ---- --config.check ----
check() {  # check EXPECTED-RC FLAGS...: prints the output
  local want=$1 rc=0; shift
  out=$("$EXPORTER" --config.check "$@" 2>&1) || rc=$?
  [ "$rc" = "$want" ] || fail "--config.check $* exited $rc, not $want: $out"
}
printf 'log.level: debug\nmetrics.exclude: [xpu_link_.*]\n' >"$CFG"
check 0 --config.file "$CFG"
grep -q "configuration OK" <<<"$out" || fail "--config.check says nothing on success: $out"
printf 'log.level: loud\n' >"$CFG"
check 2 --config.file "$CFG"
grep -q "log.level" <<<"$out" || fail "--config.check does not name the bad key: $out"
printf 'basic_auth_users: {u: not-a-hash}\n' >"$TMP/web.yml"
check 2 --web.config.file "$TMP/web.yml"
printf 'faults: [\n' >"$TMP/faults.yml"
check 2 --hal.fault-catalog "$TMP/faults.yml"
grep -q "faults.yml" <<<"$out" || fail "--config.check does not name the bad fault catalog: $out"
printf 'metrics:\n  - {id: 1, name: bad name}\n' >"$TMP/metrics.yml"
check 2 --metrics.catalog "$TMP/metrics.yml"
echo "PASS"
