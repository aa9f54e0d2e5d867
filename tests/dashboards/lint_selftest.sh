#!/usr/bin/env bash
# The dashboard lint must fail on what it is meant to catch.
set -euo pipefail
ROOT=$1
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
mkdir -p "$T/tests/fixtures" "$T/alerts" "$T/dashboards"
# What the lint reads: the catalog and every family the sources register
# (src/), the fixture page, the rules.
cp -r "$ROOT/src" "$T/"
cp "$ROOT/tests/fixtures/e2e-output.txt" "$T/tests/fixtures/"
cp "$ROOT/alerts/"*.yml "$T/alerts/"
cp "$ROOT/dashboards/"*.json "$T/dashboards/"
# The copy as it is passes: each check below fails for its own edit only.
if ! python3 "$ROOT/tests/dashboards/lint_dashboards.py" "$T"; then
  echo "FAIL: the lint rejects the unchanged copy"; exit 1
fi
n=0
check() {  # check DESCRIPTION PYTHON-EDIT DASHBOARD EXPECTED-MESSAGE
  cp "$ROOT/dashboards/"*.json "$T/dashboards/"
  python3 - "$T/dashboards/$3" <<PY
import json, sys
p = sys.argv[1]; b = json.load(open(p))
$2
json.dump(b, open(p, "w"))
PY
  local out
  if out=$(python3 "$ROOT/tests/dashboards/lint_dashboards.py" "$T"); then
    echo "FAIL: lint accepted: $1"; exit 1
  fi
  if ! grep -qF -- "$4" <<<"$out"; then
    echo "FAIL: lint rejected $1 without saying '$4':"; echo "$out"; exit 1
  fi
  n=$((n + 1))
}
O=xpu-fleet-overview.json
R=xpu-fleet-rollups.json
check "duplicate panel id" 'b["panels"][1]["id"] = b["panels"][0]["id"]' $O "duplicate panel id"
check "unknown metric" 'b["panels"][4]["targets"][0]["expr"] = "xpu_no_such_metric"' $O \
  "unknown metric xpu_no_such_metric"
check "missing unit" 'b["panels"][4]["fieldConfig"]["defaults"].pop("unit")' $O "has no unit"
check "hard-coded datasource" \
  'b["panels"][4]["datasource"] = {"type": "prometheus", "uid": "P1809F7CD0C75ACF3"}' $O \
  "does not use \${datasource}"
check "no node variable" \
  'b["templating"]["list"] = [v for v in b["templating"]["list"] if v["name"] != "node"]' $O \
  "no node variable"
# The rollup dashboard reads recorded series only (a central store keeps those).
check "rollup dashboard reading a device series" \
  'b["panels"][0]["targets"][0]["expr"] = "sum(xpu_device_info)"' $R \
  "reads xpu_device_info, not a recorded series"
check "rollup dashboard without a cluster variable" \
  'b["templating"]["list"] = [v for v in b["templating"]["list"] if v["name"] != "cluster"]' $R \
  "no cluster variable"
echo "lint rejects all $n broken dashboards, each for its own reason"
