#!/usr/bin/env python3
"""Holds a real /metrics page (text format, on stdin) to the two lists of
families: the metric catalog (src/catalog/metrics.yaml) and the exporter's own
(src/catalog/own_families.yaml, which the binary embeds to refuse those names
in custom catalogs). Every family on the page must be in one of them, with
the declared type; a family the exporter writes without declaring it would
be a name a custom catalog could take, and break the scrape. Every family
must also be in docs/metrics.md with that type and the page's HELP text
(metrics_doc.py). No series may appear twice.

With XPU_METRICS_SEEN set to a file, the families seen (name, type, help) are
added to it, for `metrics_doc.py generate`."""
import json
import os
import re
import sys

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import metrics_doc  # noqa: E402

root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "src", "catalog")
catalog = {m["name"]: m["type"] for m in yaml.safe_load(open(os.path.join(root, "metrics.yaml")))["metrics"]}
own = yaml.safe_load(open(os.path.join(root, "own_families.yaml")))
declared = {f["name"]: f["type"] for f in own["families"]}
prefixes = tuple(own["prefixes"])

doc = metrics_doc.load_doc()
helps = {}
found = {}
bad = []
seen = 0
series = set()
for line in sys.stdin:
    if line and not line.startswith("#"):
        key = line.rsplit(" ", 1)[0] if "}" not in line else line[: line.rindex("}") + 1]
        if key in series:
            bad.append(f"series {key} is on the page twice")
        series.add(key)
        continue
    h = re.match(r"# HELP (\S+) (.*)$", line.rstrip("\n"))
    if h:
        helps[h.group(1)] = re.sub(r"\\(.)", lambda e: "\n" if e.group(1) == "n" else e.group(1), h.group(2))
        continue
    m = re.match(r"# TYPE (\S+) (\S+)", line)
    if not m:
        continue
    name, kind = m.groups()
    seen += 1
    found[name] = (kind, helps.get(name, ""))
    documented = doc.get(name)
    if documented is None:
        bad.append(f"{name} ({kind}) is not in docs/metrics.md (tests/support/metrics_doc.py)")
    elif documented != found[name]:
        bad.append(f"{name}: docs/metrics.md says {documented}, the page {found[name]}")
    if name.startswith(prefixes):
        continue
    want = catalog.get(name) or declared.get(name)
    if want is None:
        bad.append(f"{name} ({kind}) is in neither metrics.yaml nor own_families.yaml")
    elif want != kind:
        bad.append(f"{name} is a {kind} on the page but declared {want}")
if os.environ.get("XPU_METRICS_SEEN"):
    import fcntl  # end-to-end tests run side by side: one writer at a time

    with open(os.environ["XPU_METRICS_SEEN"], "a+") as seen_file:
        fcntl.flock(seen_file, fcntl.LOCK_EX)
        seen_file.seek(0)
        text = seen_file.read()
        known = json.loads(text) if text.strip() else {}
        known.update(found)
        seen_file.seek(0)
        seen_file.truncate()
        json.dump(known, seen_file, indent=1, sort_keys=True)
for b in bad:
    print(f"check_families: {b}", file=sys.stderr)
if seen == 0:
    print("check_families: no families on the page", file=sys.stderr)
sys.exit(1 if bad or seen == 0 else 0)
