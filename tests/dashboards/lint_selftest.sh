#!/usr/bin/env bash
# The dashboard lint must fail on what it is meant to catch.
set -euo pipefail
ROOT=$1
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
mkdir -p "$T/src/catalog" "$T/tests/fixtures" "$T/alerts" "$T/dashboards"
cp "$ROOT/src/catalog/metrics.yaml" "$T/src/catalog/"
cp "$ROOT/tests/fixtures/e2e-output.txt" "$T/tests/fixtures/"
cp "$ROOT/alerts/"*.yml "$T/alerts/"
check() {  # check DESCRIPTION PYTHON-EDIT [DASHBOARD]
  cp "$ROOT/dashboards/"*.json "$T/dashboards/"
  python3 - "$T/dashboards/${3:-xpu-fleet-overview.json}" <<PY
import json, sys
p = sys.argv[1]; b = json.load(open(p))
$2
json.dump(b, open(p, "w"))
PY
  if python3 "$ROOT/tests/dashboards/lint_dashboards.py" "$T" >/dev/null; then
    echo "FAIL: lint accepted: $1"; exit 1
  fi
}
check "duplicate panel id" 'b["panels"][1]["id"] = b["panels"][0]["id"]'
check "unknown metric" 'b["panels"][4]["targets"][0]["expr"] = "xpu_no_such_metric"'
check "missing unit" 'b["panels"][4]["fieldConfig"]["defaults"].pop("unit")'
check "hard-coded datasource" 'b["panels"][4]["datasource"] = {"type": "prometheus", "uid": "P1809F7CD0C75ACF3"}'
check "no node variable" 'b["templating"]["list"] = [v for v in b["templating"]["list"] if v["name"] != "node"]'
# The rollup dashboard reads recorded series only (a central store keeps those).
check "rollup dashboard reading a device series" \
  'b["panels"][0]["targets"][0]["expr"] = "sum(xpu_device_info)"' xpu-fleet-rollups.json
check "rollup dashboard without a cluster variable" \
  'b["templating"]["list"] = [v for v in b["templating"]["list"] if v["name"] != "cluster"]' xpu-fleet-rollups.json
echo "lint rejects all 7 broken dashboards"
