#!/usr/bin/env bash
# The nvml backend end to end: xdm-sim serves NVIDIA models (A100, then
# H800), xpu-exporter runs with --hal=nvml pointed at the stand-in for
# NVIDIA's library (tests/hal/fake_nvml: the real one needs a driver and a
# GPU that cannot run here, docs/hal.md), whose cards this test writes in a
# fixture with the sim's bus ids, and one card more that XDM does not list.
# Seen: each card joined to XDM's device by bus id, judged and on the page
# with NVML's families; a lost GPU and a pending row remap raise their
# faults within an interval; nvmlInit failing makes the source blind
# (health withdrawn, never healthy) until it works; both sources' health on
# /status and the landing page.
source "$(dirname "$0")/lib.sh" "$1"
FAKE=$BUILD/tests/hal/libfake_nvml.so
[ -f "$FAKE" ] || fail "no stand-in library at $FAKE (a build with tests)"
export XPU_FAKE_NVML_FIXTURE=$TMP/nvml.json
DOMAIN=$(printf '%04x' $((0xa000 + RANDOM % 0x5fff)))
# fixture [JQ-LIKE PYTHON EDIT]: the two sim cards (minor 0 at
# <domain>:10:00.0, minor 1 at <domain>:20:00.0) and a third XDM does not
# list, written whole and renamed over the last (never read half written).
fixture() {
  python3 - "$XPU_FAKE_NVML_FIXTURE" "$DOMAIN" "${1:-}" <<'PY'
import json, os, sys
path, domain, edit = sys.argv[1:]
bus = lambda b: "0000%s:%s:00.0" % (domain.upper(), b)
f = {"devices": [
    {"name": "NVIDIA A100-SXM4-80GB", "uuid": "GPU-nvml-0", "bus_id": bus("10"),
     "temperature": 104, "memory": {"total": 85899345920, "used": 1073741824}, "ecc_mode": 1,
     "ecc": {"volatile_corrected": 3, "volatile_uncorrected": 0,
             "aggregate_corrected": 17, "aggregate_uncorrected": 1},
     "remap": {"corrected": 1, "uncorrected": 0, "pending": False, "failure": False},
     "clocks_event_reasons": 1, "pcie_replays": 4,
     "mig": {"enabled": True, "devices": [
         {"uuid": "MIG-nvml-0-1", "gi": 1, "ci": 0, "memory": {"total": 10737418240, "used": 536870912}}]}},
    {"name": "NVIDIA A100-SXM4-80GB", "uuid": "GPU-nvml-1", "bus_id": bus("20"),
     "temperature": 44, "memory": {"total": 85899345920, "used": 0}, "ecc_mode": 1,
     "clocks_event_reasons": 96, "mig": {"enabled": False},
     "nvlinks": [{"active": True, "replay": 5, "recovery": 1, "crc_flit": 7, "crc_data": 0}]},
    {"name": "NVIDIA A100-SXM4-80GB", "uuid": "GPU-nvml-x", "bus_id": bus("f0"),
     "temperature": 40, "memory": {"total": 85899345920, "used": 0}, "mig": {"enabled": False}},
]}
exec(edit)
with open(path + ".tmp", "w") as out:
    json.dump(f, out)
os.rename(path + ".tmp", path)
PY
}
health() {  # health MINOR SOURCE VALUE
  has_metric "xpu_device_health{minor=\"$1\",uuid=\"[^\"]*\",bus_id=\"[^\"]*\",source=\"$2\"} $3"
}
fault_on() {  # fault_on MINOR CODE LEVEL
  has_metric "xpu_device_fault_active{minor=\"$1\",uuid=\"[^\"]*\",bus_id=\"[^\"]*\",code=\"$2\",level=\"$3\",source=\"nvml\"} 1"
}

for model in A100-SXM4-80GB H800-SXM5-80GB; do
  echo "e2e_nvml: xdm-sim --model $model"
  fixture
  start_sim sim --model "$model" --devices 2 --interval 200ms --pci-domain "$DOMAIN"
  # The kernel log's catalog with a 2 s event window (NVML's events follow
  # it): an event-like Xid clears within the test, a state must not.
  sed 's/^event_active_for: .*/event_active_for: 2s/' "$E2E_DIR/../../src/hal/kmsg/kmsg_patterns.yaml" >"$TMP/kmsg.yaml"
  flags=(--hal nvml --hal.nvml.library "$FAKE" --hal.interval 500ms --collector.interval 200ms
    --hal.kmsg.catalog "$TMP/kmsg.yaml")
  start_exporter sim "${flags[@]}"
  wait_for 10 has_metric 'xpu_nvml_up 1' || fail "nvml not up: $(scrape | grep -E 'nvml_up|source_up')"
  # Joined to XDM's devices by bus id: XDM's minor and uuid.
  wait_for 10 health 0 nvml 1 || fail "no nvml health for minor 0: $(scrape | grep -E 'health' | head)"
  health 1 nvml 1 || fail "no nvml health for minor 1"
  health 0 xdm 1 || fail "XDM's own health of minor 0 is not beside it"
  # NVML's own families are named at its next sample after XDM's list came.
  wait_for 5 has_metric "xpu_nvml_ecc_errors_total{minor=\"0\",uuid=\"[^\"]*\",bus_id=\"$DOMAIN:10:00.0\",error=\"corrected\",scope=\"aggregate\"} 17" ||
    fail "ECC counts of minor 0: $(scrape | grep ecc_errors | head -4)"
  has_metric "xpu_nvml_nvlink_errors_total{minor=\"1\",[^}]*counter=\"replay\"} 5" ||
    fail "NVLink replays of minor 1: $(scrape | grep nvlink | head -4)"
  has_metric 'xpu_nvml_mig_enabled{minor="0",[^}]*} 1' || fail "MIG mode of minor 0"
  # The card XDM does not list: judged by NVML, named by its own uuid.
  has_metric 'xpu_device_health{minor="",uuid="GPU-nvml-x",bus_id="[^"]*",source="nvml"} 1' ||
    fail "the card XDM does not list is not judged: $(scrape | grep 'source="nvml"' | head)"
  # XDM's gauges: NVML's temperature, memory and power fill in for the card
  # XDM does not list, in XDM's families (one HELP/TYPE each), and XDM's
  # values stand for its own cards.
  page=$(scrape) || fail "no page"
  grep -q 'xpu_temperature_celsius{minor="",uuid="GPU-nvml-x",model="NVIDIA A100-SXM4-80GB"} 40$' <<<"$page" ||
    fail "NVML's temperature of the card XDM does not list: $(grep -E '^xpu_temperature' <<<"$page")"
  grep -q 'xpu_memory_total_bytes{minor="",uuid="GPU-nvml-x",[^}]*} 85899345920$' <<<"$page" ||
    fail "NVML's memory of the card XDM does not list"
  for family in xpu_temperature_celsius xpu_memory_total_bytes xpu_memory_used_bytes; do
    [ "$(grep -c "^# TYPE $family " <<<"$page")" = 1 ] || fail "$family written twice: $(grep "^# TYPE $family" <<<"$page")"
    [ "$(grep -c "^$family{minor=\"0\"" <<<"$page")" = 1 ] || fail "minor 0's $family more than once (XDM's and NVML's)"
  done
  grep -q 'xpu_temperature_celsius{minor="0",[^}]*} 104$' <<<"$page" &&
    fail "NVML's temperature of minor 0 (104; the sim's stays under 80) wrote over XDM's"
  check_families

  # A pending row remap on minor 0 and a lost GPU on minor 1, within an interval or two.
  fixture 'f["devices"][0]["remap"]["pending"] = True; f["devices"][1]["lost"] = True'
  wait_for 5 fault_on 1 0xFC010001 isolate_card || fail "GPU lost not raised: $(scrape | grep fault_active | head)"
  health 1 nvml 0 || fail "a lost GPU is not unhealthy"
  wait_for 5 fault_on 0 0xFC010003 reset_card || fail "pending row remap not raised"
  # Card-level action (reset_card and above) makes the card unhealthy, as for every source.
  health 0 nvml 0 || fail "a pending remap (reset_card) left minor 0 healthy"
  status=$(curl -sf "${URL%/metrics}/status")
  python3 - "$status" <<'PY' || fail "/status does not show both sources: $status"
import json, sys
s = json.loads(sys.argv[1])
assert s["hal"]["backend"] == "nvml" and s["hal"]["up"] is True, s["hal"]
d1 = [d for d in s["devices"] if d["minor"] == 1][0]
assert d1["health"]["xdm"] is True and d1["health"]["nvml"] is False, d1["health"]
assert ("0xFC010001", "nvml") in [(f["code"], f["source"]) for f in d1["faults"]], d1["faults"]
# A card-level fault (a pending remap: reset_card) is unhealthy here as on /metrics.
d0 = [d for d in s["devices"] if d["minor"] == 0][0]
assert d0["health"]["nvml"] is False, d0["health"]
PY
  curl -sf "${URL%/metrics}/" | grep -q "0xFC010001" || fail "the landing page does not show the lost GPU"
  fixture  # back
  wait_for 5 health 1 nvml 1 || fail "minor 1 not healthy again"
  # An Xid 79 as NVML's event: isolate_card within an interval, under the
  # kernel log's code, and it stays (a state: its remedy is a reboot).
  wait_for 10 grep -q "listening for Xid" "$TMP/exporter.log" || fail "no event listener: $(cat "$TMP/exporter.log")"
  # With it, an Xid 13 (an event: restart_job) on minor 1, which clears
  # once the 2 s window is past: what a state must outlast.
  fixture 'f["events"] = [{"device": 0, "type": 8, "data": 79}, {"device": 1, "type": 8, "data": 13}]'
  wait_for 5 fault_on 0 0x10DE004F isolate_card || fail "Xid 79 not raised: $(scrape | grep fault_active | head)"
  wait_for 5 fault_on 1 0x10DE000D restart_job || fail "Xid 13 not raised: $(scrape | grep fault_active | head)"
  health 0 nvml 0 || fail "Xid 79 left minor 0 healthy"
  fixture
  wait_for 10 bash -c "! curl -sf $URL/metrics | grep -q '^xpu_device_fault_active{.*code=\"0x10DE000D\"'" ||
    fail "the event Xid 13 did not clear after its window"
  health 0 nvml 1 && fail "Xid 79 cleared by itself"
  fault_on 0 0x10DE004F isolate_card || fail "Xid 79 did not stay past the event window"
  kill "$EXP_PID"; wait "$EXP_PID" 2>/dev/null || true
  kill "$SIM_PID"; wait "$SIM_PID" 2>/dev/null || true
done

# nvmlInit_v2 failing (the driver not running): blind, never healthy, and
# seen again once it works.
fixture 'f["init_error"] = 9'
start_sim sim --model A100-SXM4-80GB --devices 2 --interval 200ms --pci-domain "$DOMAIN"
start_exporter sim "${flags[@]}"
wait_for 10 has_metric 'xpu_exporter_source_up{source="nvml"} 0' ||
  fail "a failing nvmlInit does not make the source blind: $(scrape | grep -E 'source_up|nvml_up')"
has_metric 'xpu_device_health{[^}]*source="nvml"}' && fail "a blind source still has health series"
grep -q "nvml" "$TMP/exporter.log" || fail "the failure is not logged"
fixture
wait_for 10 health 0 nvml 1 || fail "not seen once nvmlInit works: $(scrape | grep -E 'source_up|nvml')"

# --hal=auto on a machine without NVIDIA's library: as before, no nvml series.
kill "$EXP_PID"; wait "$EXP_PID" 2>/dev/null || true
start_exporter sim --hal auto --hal.nvml.library "$TMP/absent/libnvidia-ml.so.1" --hal.root "$TMP/none"
wait_for 10 has_metric 'xpu_exporter_upstream_up 1' || fail "no page with auto"
page=$(scrape) || fail "no page"
grep -q "nvml" <<<"$page" && fail "auto without the library writes nvml series: $(grep nvml <<<"$page")"
grep -q "HAL nvml: not found yet" "$TMP/exporter.log" || fail "auto does not say why nvml is not on"
status=$(curl -sf "${URL%/metrics}/status") || fail "no /status"
python3 -c '
import json, sys
s = [x for x in json.loads(sys.argv[1])["hal"]["sources"] if x["name"] == "nvml"]
assert s and s[0]["sight"] == "looking" and "absent" in s[0]["why"], s
' "$status" || fail "/status does not say nvml is looked for: $status"
[ "$(curl -s -o /dev/null -w '%{http_code}' "${URL%/metrics}/-/ready")" = 200 ] ||
  fail "a source looked for keeps the exporter unready"

# --hal=auto with a driver that loads late: nvmlInit_v2 fails for 5 s, then
# works. Probes and scrapes answer meanwhile; xpu_nvml_up is 1 within 3
# intervals of it working.
kill "$EXP_PID"; wait "$EXP_PID" 2>/dev/null || true
fixture 'f["init_error"] = 9'
start_exporter sim --hal auto --hal.nvml.library "$FAKE" --hal.interval 1s --hal.root "$TMP/none"
slowest=0
for _ in $(seq 1 10); do  # 5 s: a probe and a scrape every 0.5 s
  for path in /-/healthy /-/ready /metrics; do
    t=$(curl -s -o /dev/null --max-time 2 -w '%{time_total}' "${URL%/metrics}$path") || fail "$path unanswered while NVML is looked for"
    ms=$(awk -v t="$t" 'BEGIN { printf "%d", t * 1000 }')
    [ "$ms" -gt "$slowest" ] && slowest=$ms
  done
  sleep 0.5 # the probe period, not a wait for a condition
done
[ "$slowest" -lt 1000 ] || fail "a probe or scrape took $slowest ms while NVML was looked for"
has_metric 'xpu_nvml_up' && fail "nvml series before NVML answers"
fixture
took=$(wait_ms 3000 has_metric 'xpu_nvml_up 1') || fail "NVML loaded late not picked up within 3 intervals: $(scrape | grep -E 'nvml_up|source_up')"
grep -q "HAL nvml: 3 card(s) through" "$TMP/exporter.log" || fail "finding NVML is not logged"
echo "e2e_nvml: NVML loaded late picked up after $took ms (slowest answer meanwhile $slowest ms)"
echo "e2e_nvml: OK"
