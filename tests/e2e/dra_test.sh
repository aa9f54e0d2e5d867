#!/usr/bin/env bash
# DRA attribution end to end: xdm-sim's stand-in kubelet serves DRA claims
# (PodResources v1 dynamic_resources) beside device-plugin allocations; the
# exporter maps a claim's device to ours by --kubelet.dra.device-names and
# --kubelet.dra.drivers, exports it on xpu_device_pod_info, counts devices
# it cannot place, and withdraws a claim's row when the pod goes.
source "$(dirname "$0")/lib.sh" "$1"
start_sim sim --interval 100ms --kubelet-socket "$TMP/kubelet.sock"
start_exporter sim --collector.interval 100ms --hal none --kubelet.pod-resources-socket "$TMP/kubelet.sock" \
  --kubelet.interval 100ms --kubelet.dra.drivers 'xpu\.lingjun\.com' \
  --kubelet.dra.device-names 'xpu-{minor}' --kubelet.dra.device-names '{uuid}'
post() { curl -sf -XPOST "$CONTROL/control/$1" -d "$2" >/dev/null || fail "control/$1 $2"; }

post allocate '{"id":"plugin-pod-1","devices":[{"minor":1}]}'
post claim '{"pod":"train-0","namespace":"ml","container":"trainer","claim":"gpus","driver":"xpu.lingjun.com","pool":"node-a","device":"xpu-3"}'
post claim '{"pod":"infer-0","namespace":"ml","claim":"one","driver":"xpu.lingjun.com","pool":"node-a","cdi":["lingjun.com/xpu=xpu-5"]}'
post claim '{"pod":"lost-0","claim":"c","driver":"xpu.lingjun.com","pool":"node-a","device":"xpu-99"}'
post claim '{"pod":"nic-0","claim":"c","driver":"rdma.example.com","pool":"node-a","device":"xpu-2"}'
post claim '{"pod":"bare-0","driver":"xpu.lingjun.com"}'

wait_for 10 has_metric 'xpu_device_pod_info{minor="3",uuid="[^"]*",namespace="ml",pod="train-0",container="trainer",claim="gpus",driver="xpu.lingjun.com",pool="node-a",device="xpu-3"} 1' ||
  fail "claim by device name not attributed: $(grep pod_info "$TMP/page" 2>/dev/null; scrape | grep pod_info)"
wait_for 10 has_metric 'xpu_device_pod_info{minor="5",uuid="[^"]*",namespace="ml",pod="infer-0",container="main",claim="one",driver="xpu.lingjun.com",pool="node-a"} 1' ||
  fail "claim by CDI name not attributed: $(scrape | grep pod_info)"
has_metric 'xpu_device_pod_info{minor="1",uuid="[^"]*",namespace="default",pod="alloc-plugin-p",container="main",resource="lingjun.com/xpu"} 1' ||
  fail "device plugin row lost beside DRA: $(scrape | grep pod_info)"
scrape | grep -q 'pod="nic-0"' && fail "another driver's claim was attributed"
# xpu-99 names no device; bare-0 names none at all; nic-0 is not our driver.
# (Each POST above lands between two kubelet polls: wait for the poll that saw them all.)
wait_for 10 has_metric 'xpu_kubelet_dra_unmatched_devices 2' || fail "unmatched DRA devices: $(scrape | grep dra_unmatched)"
grep -q "DRA device(s) name none of ours" "$TMP/exporter.log" || fail "unmatched devices not logged"

# Claims come and go with their pods.
curl -sf -XDELETE "$CONTROL/control/claim?pod=train-0" >/dev/null || fail "delete claim"
wait_for 10 bash -c "! curl -sf '$URL/metrics' | grep -q 'pod=\"train-0\"'" || fail "deleted claim still exported"
curl -sf -XDELETE "$CONTROL/control/claim?pod=lost-0" >/dev/null || fail "delete claim"
curl -sf -XDELETE "$CONTROL/control/claim?pod=bare-0" >/dev/null || fail "delete claim"
wait_for 10 has_metric 'xpu_kubelet_dra_unmatched_devices 0' || fail "unmatched count did not fall"
curl -sf "$URL/status" | python3 -c '
import json, sys
s = json.load(sys.stdin)
claims = [p for d in s["devices"] for p in d["pods"] if p.get("claim")]
assert [(p["pod"], p["driver"]) for p in claims] == [("infer-0", "xpu.lingjun.com")], claims
' || fail "/status does not list the claim"
curl -sf "$URL/metrics" | promtool check metrics || fail "promtool check metrics"
check_families
echo "dra test passed"
