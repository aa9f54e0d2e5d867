#!/usr/bin/env python3
"""Exits 0 if NOTIFICATIONS (webhook bodies, one per line) hold an alert with
status STATUS and all the given label=value pairs (value may be a regex)."""
import json
import re
import sys

path, status, pairs = sys.argv[1], sys.argv[2], sys.argv[3:]
want = dict(p.split("=", 1) for p in pairs)
try:
    lines = open(path).read().splitlines()
except FileNotFoundError:
    sys.exit(1)
for line in lines:
    for alert in json.loads(line).get("alerts", []):
        labels = alert.get("labels", {})
        if alert.get("status") == status and all(
                k in labels and re.fullmatch(v, labels[k]) for k, v in want.items()):
            print(json.dumps(alert))
            sys.exit(0)
sys.exit(1)
