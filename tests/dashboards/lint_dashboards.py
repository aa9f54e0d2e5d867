#!/usr/bin/env python3
"""Lints the Grafana dashboards in dashboards/: valid JSON, unique panel ids,
the ${datasource} variable on every panel and target, a unit on every panel,
node/device template variables (a rollup dashboard, tagged "rollups": cluster and
node, and it reads recording rules' outputs only, so that a central store that
keeps only those answers it), and every metric referenced exists: in the
exporter's catalog, in its golden output (self-metrics, device and HAL
families), registered in its source, in the recording rules, or among Prometheus' own (up, scrape_*).

Usage: lint_dashboards.py REPO_ROOT
"""
import glob
import json
import os
import re
import sys

root = sys.argv[1]
errors = []


def recorded_metrics():
    names = set()
    for rules in glob.glob(os.path.join(root, "alerts/*.yml")):
        with open(rules) as f:
            names |= set(re.findall(r"^\s+- record:\s*(\S+)", f.read(), re.M))
    return names


def known_metrics():
    names = {"up", "scrape_duration_seconds", "scrape_samples_scraped"}
    with open(os.path.join(root, "src/catalog/metrics.yaml")) as f:
        names |= set(re.findall(r"^\s+name:\s*(\S+)", f.read(), re.M))
    with open(os.path.join(root, "tests/fixtures/e2e-output.txt")) as f:
        names |= set(re.findall(r"^# TYPE (\S+) ", f.read(), re.M))
    # Families registered in code but without series until something happens
    # (read errors, ...): their names appear in .Name("...") / Family("...").
    for src in glob.glob(os.path.join(root, "src/**/*.cc"), recursive=True):
        with open(src) as f:
            names |= set(re.findall(r'(?:\.Name|Family)\("(xpu_[a-z0-9_]+)"', f.read()))
    return names | recorded_metrics()


KNOWN = known_metrics()
RECORDED = recorded_metrics()
# Identifiers in PromQL that are not metric names.
PROMQL_WORDS = {
    "sum", "avg", "min", "max", "count", "topk", "bottomk", "by", "without", "on", "ignoring",
    "group_left", "group_right", "rate", "increase", "irate", "time", "vector", "or", "and",
    "unless", "bool", "count_values", "label_values", "offset", "abs", "clamp_min", "clamp_max",
}


def metrics_in(expr):
    # Drop label matchers, strings and range selectors before looking for names.
    e = re.sub(r'\{[^}]*\}', "", expr)
    e = re.sub(r'"[^"]*"', "", e)
    e = re.sub(r"\[[^\]]*\]", "", e)
    e = re.sub(r"\bby\s*\([^)]*\)", "", e)
    return {t for t in re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*", e)
            if t not in PROMQL_WORDS and not t.startswith("__")}


files = sorted(glob.glob(os.path.join(root, "dashboards/*.json")))
if len(files) < 3:
    errors.append(f"expected at least 3 dashboards, found {len(files)}")
for path in files:
    name = os.path.basename(path)
    try:
        with open(path) as f:
            board = json.load(f)
    except ValueError as e:
        errors.append(f"{name}: not JSON: {e}")
        continue
    for key in ("uid", "title", "schemaVersion", "panels", "templating"):
        if key not in board:
            errors.append(f"{name}: missing {key}")
    variables = {v["name"]: v for v in board.get("templating", {}).get("list", [])}
    if variables.get("datasource", {}).get("type") != "datasource":
        errors.append(f"{name}: no datasource variable")
    rollups = "rollups" in board.get("tags", [])
    for v in ("cluster", "node") if rollups else ("node", "device"):
        if v not in variables:
            errors.append(f"{name}: no {v} variable")
    text = json.dumps(board)
    if re.search(r'"uid":\s*"(?!\$\{datasource\})[^"]*"\s*,?\s*"type":\s*"prometheus"', text) or \
       re.search(r'"type":\s*"prometheus",\s*"uid":\s*"(?!\$\{datasource\})', text):
        errors.append(f"{name}: a hard-coded datasource uid")
    ids = set()
    for p in board.get("panels", []):
        pid, title = p.get("id"), p.get("title", "?")
        if pid in ids:
            errors.append(f"{name}: duplicate panel id {pid}")
        ids.add(pid)
        if p.get("datasource") != {"type": "prometheus", "uid": "${datasource}"}:
            errors.append(f"{name}: panel '{title}' does not use ${{datasource}}")
        if not p.get("fieldConfig", {}).get("defaults", {}).get("unit"):
            errors.append(f"{name}: panel '{title}' has no unit")
        if not p.get("targets"):
            errors.append(f"{name}: panel '{title}' has no query")
        for t in p.get("targets", []):
            if t.get("datasource") != {"type": "prometheus", "uid": "${datasource}"}:
                errors.append(f"{name}: panel '{title}' target {t.get('refId')} lacks ${{datasource}}")
            for m in metrics_in(t.get("expr", "")):
                if m not in KNOWN:
                    errors.append(f"{name}: panel '{title}' uses unknown metric {m}")
                elif rollups and m not in RECORDED:
                    errors.append(f"{name}: panel '{title}' reads {m}, not a recorded series")

for e in errors:
    print("FAIL:", e)
print(f"{len(files)} dashboards checked against {len(KNOWN)} known metrics: "
      f"{len(errors)} problems")
sys.exit(1 if errors else 0)
