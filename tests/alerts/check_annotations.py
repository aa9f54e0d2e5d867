#!/usr/bin/env python3
"""Every alert has a severity label, summary/description/runbook_url
annotations, and its runbook anchor exists in docs/runbooks.md.
Usage: check_annotations.py REPO_ROOT"""
import re
import sys

root = sys.argv[1]
rules = open(f"{root}/alerts/xpu-exporter.rules.yml").read()
runbooks = open(f"{root}/docs/runbooks.md").read()
anchors = {re.sub(r"[^a-z0-9-]", "", h.strip().lower().replace(" ", "-"))
           for h in re.findall(r"^## (.+)$", runbooks, re.M)}
errors = []
blocks = re.split(r"\n\s+- (?=alert:|record:)", rules)
alerts = 0
for b in blocks:
    m = re.match(r"alert:\s*(\S+)", b)
    if not m:
        continue
    alerts += 1
    name = m.group(1)
    if not re.search(r"severity:\s*(critical|warning|info)", b):
        errors.append(f"{name}: no severity")
    for a in ("summary", "description", "runbook_url"):
        if not re.search(rf"\b{a}:", b):
            errors.append(f"{name}: no {a}")
    url = re.search(r"runbook_url:\s*\"?([^\"\n]+)", b)
    if url and url.group(1).split("#")[-1] not in anchors:
        errors.append(f"{name}: runbook anchor {url.group(1).split('#')[-1]} not in docs/runbooks.md")
for e in errors:
    print("FAIL:", e)
print(f"{alerts} alerts checked, {len(errors)} problems")
sys.exit(1 if errors or alerts < 12 else 0)
