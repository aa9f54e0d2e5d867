#!/usr/bin/env python3
"""Runs every PromQL expression of every dashboard panel and every recording
rule against a live Prometheus, template variables substituted, and fails if
any returns an empty result or an error.

Usage: query_dashboards.py PROMETHEUS_URL REPO_ROOT NODE DEVICE"""
import glob
import json
import os
import re
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

prom, root, node, device = sys.argv[1:5]
SUBST = {"$__rate_interval": "30s", "$__interval": "5s", "$__range": "5m",
         # Dots in an address match themselves as regex wildcards too; escaping
         # them would need PromQL string escapes as well.
         "$node": node, "$device": device,
         # No cluster label where one Prometheus scrapes (e2e_alerts); a
         # fleet's agents add one (e2e_fleet): any matches both.
         "$cluster": ".*"}


def query(expr):
    url = prom + "/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            body = json.load(r)
    except urllib.error.HTTPError as e:
        body = json.load(e)
    if body.get("status") != "success":
        return None, body.get("error")
    return body["data"]["result"], None


exprs = []
for path in sorted(glob.glob(os.path.join(root, "dashboards/*.json"))):
    board = json.load(open(path))
    for p in board["panels"]:
        for t in p.get("targets", []):
            e = t["expr"]
            for k, v in SUBST.items():
                e = e.replace(k, v)
            exprs.append((f"{os.path.basename(path)}: {p['title']} [{t['refId']}]", e))
for path in glob.glob(os.path.join(root, "alerts/*.yml")):
    for rec in re.findall(r"^\s+- record:\s*(\S+)", open(path).read(), re.M):
        exprs.append((f"recording rule {rec}", rec))

failures = []
for what, e in exprs:
    # Recording rules and rates need a few evaluations; retry briefly.
    deadline = time.time() + 30
    while True:
        result, err = query(e)
        if result:
            break
        if time.time() > deadline:
            failures.append(f"{what}: {'error ' + err if err else 'empty'}: {e}")
            break
        time.sleep(0.5)
for f in failures:
    print("FAIL:", f)
print(f"{len(exprs) - len(failures)}/{len(exprs)} dashboard and recording-rule queries "
      "returned data")
sys.exit(1 if failures else 0)
