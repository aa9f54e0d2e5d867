#!/usr/bin/env python3
"""Holds a real /metrics page (text format, on stdin) to the two lists of
families: the metric catalog (src/catalog/metrics.yaml) and the exporter's own
(src/catalog/own_families.yaml, which the binary embeds to refuse those names
in custom catalogs). Every family on the page must be in one of them, with
the declared type; a family the exporter writes without declaring it would
be a name a custom catalog could take, and break the scrape. No series may
appear twice."""
import os
import re
import sys

import yaml

root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "src", "catalog")
catalog = {m["name"]: m["type"] for m in yaml.safe_load(open(os.path.join(root, "metrics.yaml")))["metrics"]}
own = yaml.safe_load(open(os.path.join(root, "own_families.yaml")))
declared = {f["name"]: f["type"] for f in own["families"]}
prefixes = tuple(own["prefixes"])

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
    m = re.match(r"# TYPE (\S+) (\S+)", line)
    if not m:
        continue
    name, kind = m.groups()
    seen += 1
    if name.startswith(prefixes):
        continue
    want = catalog.get(name) or declared.get(name)
    if want is None:
        bad.append(f"{name} ({kind}) is in neither metrics.yaml nor own_families.yaml")
    elif want != kind:
        bad.append(f"{name} is a {kind} on the page but declared {want}")
for b in bad:
    print(f"check_families: {b}", file=sys.stderr)
if seen == 0:
    print("check_families: no families on the page", file=sys.stderr)
sys.exit(1 if bad or seen == 0 else 0)
