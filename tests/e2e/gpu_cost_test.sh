#!/usr/bin/env bash
# bench/gpu-cost.sh, the script a lent GPU machine runs (issue 51): packed
# here (the exporter, the scrape client, every library they load and the
# loader), then run briefly as there, the stand-in NVML in the driver's
# place: each --hal gets a row of figures, nvml's with NVML's read time, and
# nothing is left running.
source "$(dirname "$0")/lib.sh" "$1"

pack=$TMP/pack
bash "$E2E_DIR/../../bench/gpu-cost.sh" pack "$pack" "$BUILD" >/dev/null || fail "pack failed"
ls "$pack"/lib/ld-linux-*.so.* >/dev/null 2>&1 || fail "no loader packed"
export XPU_FAKE_NVML_FIXTURE=$TMP/nvml.json
cat >"$XPU_FAKE_NVML_FIXTURE" <<'JSON'
{"devices": [{"name": "NVIDIA H200", "uuid": "GPU-cost-0", "bus_id": "00000000:3B:00.0",
  "temperature": 34, "memory": {"total": 150754820096, "used": 0}, "ecc_mode": 1,
  "remap": {"corrected": 0, "uncorrected": 0, "pending": false, "failure": false},
  "mig": {"enabled": false}, "processes": []}]}
JSON
out=$(IDLE_S=1 ROUNDS=2 SCRAPES=5 CONFIGS="none pci,kmsg nvml bogus" bash "$pack/gpu-cost.sh" run "$pack" -- \
  --hal.nvml.library "$BUILD/tests/hal/libfake_nvml.so") || fail "run failed: $out"
echo "$out"
num='[0-9]+(\.[0-9]+)?'
row="\\| $num \\| $num \\| $num \\| $num \\| [0-9]+ \\| $num / $num, $num / $num \\| [0-9]+ \\|"
grep -Eq "^\\| none $row - \\|\$" <<<"$out" || fail "no figures for --hal none"
grep -Eq "^\\| pci,kmsg $row - \\|\$" <<<"$out" || fail "no figures for --hal pci,kmsg"
grep -Eq "^\\| nvml $row $num \\|\$" <<<"$out" || fail "no figures, or no NVML read time, for --hal nvml"
grep -q '^| bogus | did not start' <<<"$out" || fail "a --hal that does not start is not said"
! pgrep -f "$pack/xpu-exporter" >/dev/null || fail "an exporter was left running"
echo PASS
