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
    kmsg = [m for m in c["volumeMounts"] if m["mountPath"] == "/dev/kmsg"]
    if not kmsg or not kmsg[0].get("readOnly"):
        errors.append("/dev/kmsg is not mounted read-only (the kmsg backend)")
    caps = c["securityContext"]["capabilities"]
    if caps.get("drop") != ["ALL"] or caps.get("add", []) != ["SYSLOG"]:
        errors.append(f"capabilities {caps}: want all dropped and only SYSLOG added")
    env = {e["name"]: e for e in c.get("env", [])}
    if env.get("NODE_NAME", {}).get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") != "spec.nodeName":
        errors.append("NODE_NAME is not set from the downward API's spec.nodeName")
    sa = ds[0]["spec"]["template"]["spec"].get("serviceAccountName")
    bindings = [d for d in docs if d["kind"] == "ClusterRoleBinding"
                and any(s["name"] == sa for s in d["subjects"])]
    roles = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ClusterRole"}
    granted = set()
    for b in bindings:
        for rule in roles.get(b["roleRef"]["name"], {}).get("rules", []):
            for res in rule["resources"]:
                for verb in rule["verbs"]:
                    granted.add((res, verb))
    need = {("pods", "get"), ("pods", "list"), ("pods", "watch"), ("nodes", "get")}
    if granted != need:
        errors.append(f"the DaemonSet's service account has {sorted(granted)}, want exactly {sorted(need)}")
    version = re.search(r"project\(xpu-exporter VERSION ([0-9.]+)", open(f"{root}/CMakeLists.txt").read())[1]
    if c["image"] != f"xpu-exporter:{version}":
        errors.append(f"image {c['image']} is not xpu-exporter:{version} (what ./x image builds)")
    for arg in c["args"]:
        flag = arg.split("=")[0]
        if not re.search(rf"(^|\s){re.escape(flag)}\b", help_text):
            errors.append(f"unknown flag {flag}")
for d in docs:
    if d["kind"] == "Service" and d["spec"]["ports"][0]["port"] != 9445:
        errors.append("Service port is not 9445")
for d in docs:
    if d["kind"] == "ServiceMonitor":
        relabels = d["spec"]["endpoints"][0].get("relabelings", [])
        if not any(r.get("targetLabel") == "node" and r.get("sourceLabels") == ["__meta_kubernetes_pod_node_name"]
                   for r in relabels):
            errors.append("the ServiceMonitor does not set node from the pod's node name")
containerfile = open(f"{root}/deploy/container/Containerfile").read()
if "USER 65532:65532" not in containerfile or "FROM scratch" not in containerfile:
    errors.append("the image's runtime stage is not FROM scratch with USER 65532")
unit = f"{root}/deploy/systemd/xpu-exporter.service"
text = open(unit).read()
for key in ("ExecStart=", "ExecReload=/bin/kill -HUP", "Restart="):
    if key not in text:
        errors.append(f"systemd unit lacks {key}")
for e in errors:
    print("FAIL:", e)
print(f"{len(docs)} manifests and the systemd unit checked, {len(errors)} problems")
sys.exit(1 if errors else 0)
