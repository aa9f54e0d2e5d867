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
by_file = {}
for path in glob.glob(f"{root}/deploy/kubernetes/*.yaml"):
    by_file[path.rsplit("/", 1)[1]] = [d for d in yaml.safe_load_all(open(path)) if d]
    docs += by_file[path.rsplit("/", 1)[1]]


def granted_to(sa, sa_ns, manifests):
    """(namespace or "*", resource, verb) the service account `sa` gets from `manifests`."""
    roles = {}
    for d in manifests:
        if d["kind"] in ("ClusterRole", "Role"):
            roles[(d["kind"], d["metadata"]["name"])] = d
    out = set()
    for b in manifests:
        if b["kind"] not in ("ClusterRoleBinding", "RoleBinding"):
            continue
        if not any(s["kind"] == "ServiceAccount" and s["name"] == sa and s.get("namespace") == sa_ns
                   for s in b["subjects"]):
            continue
        role = roles.get((b["roleRef"]["kind"], b["roleRef"]["name"]), {})
        where = b["metadata"].get("namespace", "*") if b["kind"] == "RoleBinding" else "*"
        for rule in role.get("rules", []):
            for res in rule["resources"]:
                for verb in rule["verbs"]:
                    out.add((where, res, verb))
    return out
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
    # The probes go to the probe listener (--web.probe-listen-address), the
    # port named for them, so no client of the main port can make them wait.
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    probe_args = [a for a in c["args"] if a.startswith("--web.probe-listen-address=")]
    if not probe_args:
        errors.append("no --web.probe-listen-address")
    elif "probes" not in ports or not probe_args[0].endswith(":" + str(ports["probes"])):
        errors.append("no container port 'probes' matching --web.probe-listen-address")
    for kind in ("livenessProbe", "readinessProbe"):
        if c[kind]["httpGet"]["port"] != "probes":
            errors.append(f"{kind} does not use the probe listener's port")
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
    # The base manifests read only; the opt-in file adds exactly what the
    # Node condition and the Events write (docs/kubernetes.md).
    sa_ns = ds[0]["metadata"]["namespace"]
    granted = granted_to(sa, sa_ns, by_file["xpu-exporter.yaml"])
    need = {("*", "pods", "get"), ("*", "pods", "list"), ("*", "pods", "watch"), ("*", "nodes", "get")}
    if granted != need:
        errors.append(f"the DaemonSet's service account has {sorted(granted)}, want exactly {sorted(need)}")
    opt_in = f"{root}/deploy/kubernetes/opt-in/node-health.yaml"
    extra = granted_to(sa, sa_ns, [d for d in yaml.safe_load_all(open(opt_in)) if d])
    want_extra = {("*", "nodes/status", "patch"), ("default", "events", "create")}
    if extra != want_extra:
        errors.append(f"node-health.yaml grants {sorted(extra)}, want exactly {sorted(want_extra)}")
    for flag in re.findall(r"--kubernetes\.[a-z-]+", open(opt_in).read()):
        if not re.search(rf"(^|\s){re.escape(flag)}\b", help_text):
            errors.append(f"node-health.yaml names an unknown flag {flag}")
    # The device taints' file: exactly the slices read and the rules written.
    taints = f"{root}/deploy/kubernetes/opt-in/device-taints.yaml"
    taint_docs = [d for d in yaml.safe_load_all(open(taints)) if d]
    extra = granted_to(sa, sa_ns, taint_docs)
    want_extra = {("*", "resourceslices", v) for v in ("get", "list", "watch")} | {
        ("*", "devicetaintrules", v) for v in ("get", "list", "watch", "create", "update", "delete")}
    if extra != want_extra:
        errors.append(f"device-taints.yaml grants {sorted(extra)}, want exactly {sorted(want_extra)}")
    policy = [d for d in taint_docs if d["kind"] == "ValidatingAdmissionPolicy"]
    if not policy or f"system:serviceaccount:{sa_ns}:{sa}" not in str(policy[0]["spec"]["matchConditions"]):
        errors.append("device-taints.yaml has no ValidatingAdmissionPolicy for the exporter's account")
    for flag in re.findall(r"--kubernetes\.[a-z.-]+[a-z]", open(taints).read()):
        if not re.search(rf"(^|\s){re.escape(flag)}\b", help_text):
            errors.append(f"device-taints.yaml names an unknown flag {flag}")
    if "--kubernetes.node-condition" in c["args"] or "--kubernetes.events" in c["args"] or \
            "--kubernetes.device-taints" in c["args"]:
        errors.append("the base DaemonSet turns on a write to the API server (opt-in only)")
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
# The chart: its write rules and flags only under their values, both off
# by default (no helm here to render it: checked as text).
chart = f"{root}/deploy/helm/xpu-exporter"
values = yaml.safe_load(open(f"{chart}/values.yaml"))
if any(values["kubernetes"].get(v) is not False for v in ("nodeCondition", "events", "deviceTaints")):
    errors.append("the chart's kubernetes.nodeCondition, events and deviceTaints must default to false")
for name, needle in (("rbac.yaml", "resources: [nodes/status]"), ("rbac.yaml", "resources: [events]"),
                     ("rbac.yaml", "resources: [devicetaintrules]"),
                     ("rbac.yaml", "resources: [resourceslices]"),
                     ("daemonset.yaml", "- --kubernetes.node-condition"),
                     ("daemonset.yaml", "- --kubernetes.device-taints"),
                     ("daemonset.yaml", "- --kubernetes.events")):
    text = open(f"{chart}/templates/{name}").read()
    value = ("deviceTaints" if "taint" in needle or "slices" in needle
             else "nodeCondition" if "node" in needle else "events")
    at = text.find(needle)
    guard = text.rfind("{{- if .Values.kubernetes." + value + " }}", 0, at)
    if at < 0 or guard < 0 or "{{- end }}" in text[guard:at]:
        errors.append(f"chart {name}: {needle!r} is not under kubernetes.{value}")


def open_ifs(text, at):
    """The template conditions in force at `at`: each open {{- if }} whose
    then-branch holds it (an else branch holds it under no condition)."""
    stack = []
    for m in re.finditer(r"\{\{-? *(if|else if|else|end|range|with)\b([^}]*)\}\}", text[:at]):
        word, cond = m.group(1), m.group(2).strip()
        if word in ("if", "range", "with"):
            stack.append((cond if word == "if" else "", True))
        elif word in ("else", "else if") and stack:
            stack[-1] = ("", False)
        elif word == "end" and stack:
            stack.pop()
    return [c for c, then in stack if then]


# NVML (docs/kubernetes.md): off by default, and the runtime class, the
# privileged container and the host's library folder only when it is on.
if values["hal"]["nvml"].get("enabled") is not False:
    errors.append("the chart's hal.nvml.enabled must default to false")
ds_text = open(f"{chart}/templates/daemonset.yaml").read()
for needle in ("runtimeClassName:", "privileged: true", "--hal.nvml.library=", "NVIDIA_VISIBLE_DEVICES",
               "name: nvidia-lib"):
    at = ds_text.find(needle)
    if at < 0 or not any("hal.nvml.enabled" in c for c in open_ifs(ds_text, at)):
        errors.append(f"chart daemonset.yaml: {needle!r} is not under hal.nvml.enabled")
# The host's PID namespace (every host process) only when asked for, and
# only with NVML.
if values["hal"]["nvml"].get("processes") is not False:
    errors.append("the chart's hal.nvml.processes must default to false")
for needle in ("--hal.nvml.host-proc=", "hostPID: true"):
    at = ds_text.find(needle)
    conds = open_ifs(ds_text, at) if at >= 0 else []
    if at < 0 or not (any("hal.nvml.processes" in c for c in conds) and
                      any("hal.nvml.enabled" in c for c in conds)):
        errors.append(f"chart daemonset.yaml: {needle!r} is not under hal.nvml.enabled and processes")
# A node without the Runtime Kit (xdm.enabled false): no daemon socket
# mounted or named; the exporter is told so (--xdm.endpoint=).
if values["xdm"].get("enabled") is not True:
    errors.append("the chart's xdm.enabled must default to true")
for needle in ("--xdm.endpoint=unix://", "--controller.endpoint=unix://", "name: xdm-sockets"):
    at = ds_text.find(needle)
    if at < 0 or not any("xdm.enabled" in c for c in open_ifs(ds_text, at)):
        errors.append(f"chart daemonset.yaml: {needle!r} is not under xdm.enabled")
if "- --xdm.endpoint=\n" not in ds_text:
    errors.append("chart daemonset.yaml: xdm.enabled false does not pass --xdm.endpoint= (no daemon)")
if "--hal.nvml.host-proc" not in help_text:
    errors.append("the exporter has no --hal.nvml.host-proc (the chart's hal.nvml.processes names it)")
if "--hal.nvml.library" not in help_text:
    errors.append("the exporter has no --hal.nvml.library (the chart's hostPath mode names it)")
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
