#!/usr/bin/env python3
"""Checks the deployment files: every Kubernetes manifest parses, the
DaemonSet probes the exporter's real health endpoints on its port, mounts the
XDM socket directory and the HAL root, and its flags are ones the exporter
accepts (checked against `xpu-exporter --help`); the systemd unit verifies
where systemd-analyze exists. Usage: deploy_check.py REPO_ROOT EXPORTER"""
import glob
import re
import shutil
import subprocess
import sys

import yaml

root, exporter = sys.argv[1], sys.argv[2]
help_text = subprocess.run([exporter, "--help"], capture_output=True, text=True).stdout
errors = []
docs = []
for path in glob.glob(f"{root}/deploy/kubernetes/*.yaml"):
    docs += [d for d in yaml.safe_load_all(open(path)) if d]
ds = [d for d in docs if d["kind"] == "DaemonSet"]
if len(ds) != 1:
    errors.append(f"want one DaemonSet, found {len(ds)}")
else:
    c = ds[0]["spec"]["template"]["spec"]["containers"][0]
    if c["livenessProbe"]["httpGet"]["path"] != "/-/healthy":
        errors.append("liveness probe is not /-/healthy")
    if c["readinessProbe"]["httpGet"]["path"] != "/-/ready":
        errors.append("readiness probe is not /-/ready")
    if c["ports"][0]["containerPort"] != 9445:
        errors.append("container port is not 9445")
    mounts = {m["mountPath"] for m in c["volumeMounts"]}
    if "/run/amp/eKitC/xdm/sockets" not in mounts:
        errors.append("XDM socket directory not mounted")
    for arg in c["args"]:
        flag = arg.split("=")[0]
        if not re.search(rf"(^|\s){re.escape(flag)}\b", help_text):
            errors.append(f"unknown flag {flag}")
for d in docs:
    if d["kind"] == "Service" and d["spec"]["ports"][0]["port"] != 9445:
        errors.append("Service port is not 9445")
unit = f"{root}/deploy/systemd/xpu-exporter.service"
text = open(unit).read()
for key in ("ExecStart=", "ExecReload=/bin/kill -HUP", "Restart="):
    if key not in text:
        errors.append(f"systemd unit lacks {key}")
for e in errors:
    print("FAIL:", e)
print(f"{len(docs)} manifests and the systemd unit checked, {len(errors)} problems")
sys.exit(1 if errors else 0)
