#!/usr/bin/env bash
# tools/nvml-check against the stand-in library: the program builds from the
# backend's reading code alone, links no libstdc++ at run time, agrees with
# an nvidia-smi that says the same as the library (PASS, exit 0), finds a
# card where they differ (FAIL, exit 1) and says it cannot run without a
# library (exit 2).  nvml_check_test.sh ROOT FAKE_NVML_LIBRARY
set -euo pipefail
ROOT=$1
LIB=$2
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

"$ROOT/tools/nvml-check" build "$T/nvml_check"
if ldd "$T/nvml_check" | grep -E 'libstdc\+\+|libgcc_s'; then
  fail "nvml_check links libstdc++ or libgcc_s dynamically"
fi

cat >"$T/nvml.json" <<'JSON'
{"devices": [
  {"name": "NVIDIA A100-SXM4-80GB", "uuid": "GPU-a100-0", "bus_id": "00000000:3B:00.0",
   "temperature": 41, "ecc_mode": 1, "mig": {"enabled": true, "devices": []}},
  {"name": "NVIDIA H800", "uuid": "GPU-h800-1", "bus_id": "00000000:5E:00.0",
   "temperature": 60, "ecc_mode": 0, "mig": {"enabled": false}}]}
JSON
export XPU_FAKE_NVML_FIXTURE=$T/nvml.json
smi() {  # smi FILE TEMP0 UUID1: an nvidia-smi -q -x answer
  cat >"$1" <<XML
<?xml version="1.0" ?>
<nvidia_smi_log>
  <driver_version>550.54.15</driver_version>
  <gpu id="00000000:3B:00.0">
    <product_name>NVIDIA A100-SXM4-80GB</product_name>
    <uuid>GPU-a100-0</uuid>
    <mig_mode><current_mig>Enabled</current_mig><pending_mig>Enabled</pending_mig></mig_mode>
    <ecc_mode><current_ecc>Enabled</current_ecc><pending_ecc>Enabled</pending_ecc></ecc_mode>
    <temperature><gpu_temp>$2 C</gpu_temp></temperature>
  </gpu>
  <gpu id="00000000:5E:00.0">
    <product_name>NVIDIA H800</product_name>
    <uuid>$3</uuid>
    <mig_mode><current_mig>Disabled</current_mig></mig_mode>
    <ecc_mode><current_ecc>Disabled</current_ecc></ecc_mode>
    <temperature><gpu_temp>61 C</gpu_temp></temperature>
  </gpu>
</nvidia_smi_log>
XML
}

smi "$T/same.xml" 43 GPU-h800-1
out=$("$T/nvml_check" --library "$LIB" --smi "cat $T/same.xml") || fail "agreeing cards: $out"
echo "$out"
[ "$(grep -c ' -> AGREE$' <<<"$out")" = 2 ] || fail "two cards should agree"
[ "$(tail -1 <<<"$out")" = "nvml-check: PASS: 2 card(s), 0 disagree" ] || fail "verdict: $out"

smi "$T/differ.xml" 70 GPU-other
rc=0
out=$("$T/nvml_check" --library "$LIB" --smi "cat $T/differ.xml") || rc=$?
echo "$out"
[ "$rc" = 1 ] || fail "differing cards: exit $rc, want 1"
grep -q '^0000:3b:00.0 GPU-a100-0:.*temperature 41 vs 70 C MISMATCH.* -> DISAGREE$' <<<"$out" ||
  fail "the temperature 29 C apart is not found"
grep -q "^0000:5e:00.0 GPU-h800-1:.*uuid MISMATCH (nvml 'GPU-h800-1', smi 'GPU-other')" <<<"$out" ||
  fail "the other uuid is not found"
[ "$(tail -1 <<<"$out")" = "nvml-check: FAIL: 2 card(s), 2 disagree" ] || fail "verdict: $out"

rc=0
out=$("$T/nvml_check" --library "$T/absent.so" --smi "cat $T/same.xml") || rc=$?
[ "$rc" = 2 ] || fail "no library: exit $rc, want 2"
grep -q "^nvml-check: CANNOT RUN: NVML library $T/absent.so cannot be loaded" <<<"$out" ||
  fail "no library: $out"
echo "nvml-check: ok"
