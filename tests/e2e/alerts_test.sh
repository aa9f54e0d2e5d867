#!/usr/bin/env bash
# Alerts and dashboards proven end to end with real processes:
# xdm-sim -> xpu-exporter -> prometheus (1 s scrapes, alerts/ loaded) ->
# prometheus-alertmanager -> a webhook receiver. A fault injected through
# xdm-sim reaches the receiver with the right labels, its clearing sends the
# resolved notification, and killing xdm-sim raises the upstream-down alert.
# In the same run every dashboard query and recording rule returns data.
source "$(dirname "$0")/lib.sh" "$1"
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
HERE="$(cd "$(dirname "$0")" && pwd)"

start_sim sim --interval 200ms --hal-root "$TMP/hal" --kubelet-socket "$TMP/kubelet.sock"
# A training job holding device 1, as the kubelet will report it.
curl -sf -XPOST "$CONTROL/control/allocate" -d '{"id":"trainjob-7f3a","devices":[{"minor":1}]}' >/dev/null ||
  fail "allocate"
# A kernel-log record for device 1 (<domain 0>:20:00.0): Xid 63, level none, so
# it shows on the dashboards' kmsg panels and changes no alert.
awk '{printf "3,1,%.0f,-;NVRM: Xid (PCI:0000:20:00): 63, pid=1, name=train, Row Remapper: New row marked for remapping, reset gpu to activate.\n", $1 * 1000000}' \
  /proc/uptime >"$TMP/kmsg.records"
start_exporter sim --collector.interval 200ms --hal sysfs,pci,kmsg --hal.root "$TMP/hal" --hal.interval 200ms \
  --hal.pci.sysfs-root "$TMP/hal/sys" --hal.kmsg.path "$TMP/kmsg.records" --hal.kmsg.user-records \
  --kubelet.pod-resources-socket "$TMP/kubelet.sock" --kubelet.interval 1s --kubernetes.node-name node-e2e
EXP_ADDR=${URL#http://}
wait_for 10 has_metric 'xpu_device_info{minor="1"' || fail "exporter has no devices"
wait_for 10 has_metric 'xpu_device_pod_info{minor="1",.*pod="alloc-trainjob"' || fail "no pod attribution"

# Webhook receiver.
python3 "$HERE/webhook_receiver.py" "$TMP/notifications" 0 "$TMP/hook.port" &
PIDS+=($!)
wait_for 10 test -s "$TMP/hook.port" || fail "webhook receiver did not start"
HOOK_PORT=$(cat "$TMP/hook.port")

# Alertmanager: notify at once, resolved notifications on.
AM_PORT=$(free_port)
cat >"$TMP/alertmanager.yml" <<YML
route:
  receiver: hook
  group_by: [alertname, instance, minor, code]
  group_wait: 1s
  group_interval: 1s
  repeat_interval: 1h
receivers:
  - name: hook
    webhook_configs:
      - url: http://127.0.0.1:$HOOK_PORT/
        send_resolved: true
YML
amtool check-config "$TMP/alertmanager.yml" >/dev/null || fail "alertmanager config"
prometheus-alertmanager --config.file "$TMP/alertmanager.yml" --storage.path "$TMP/am" \
  --web.listen-address "127.0.0.1:$AM_PORT" --cluster.listen-address "" \
  >"$TMP/am.log" 2>&1 &
PIDS+=($!)
wait_for 20 curl -sf "http://127.0.0.1:$AM_PORT/-/ready" || fail "alertmanager not ready: $(tail -5 "$TMP/am.log")"

# Prometheus scraping every second, evaluating every second, our rules loaded.
PROM_PORT=$(free_port)
cat >"$TMP/prometheus.yml" <<YML
global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files:
  - $ROOT/alerts/xpu-exporter.rules.yml
  - $ROOT/alerts/xpu-fleet.rules.yml
alerting:
  alertmanagers:
    - static_configs:
        - targets: ["127.0.0.1:$AM_PORT"]
scrape_configs:
  - job_name: xpu-exporter
    static_configs:
      - targets: ["$EXP_ADDR"]
YML
promtool check config "$TMP/prometheus.yml" >/dev/null || fail "prometheus config"
prometheus --config.file "$TMP/prometheus.yml" --storage.tsdb.path "$TMP/tsdb" \
  --web.listen-address "127.0.0.1:$PROM_PORT" >"$TMP/prom.log" 2>&1 &
PIDS+=($!)
PROM="http://127.0.0.1:$PROM_PORT"
wait_for 30 curl -sf "$PROM/-/ready" || fail "prometheus not ready: $(tail -5 "$TMP/prom.log")"
wait_for 30 bash -c "curl -sf '$PROM/api/v1/query?query=up%7Bjob%3D%22xpu-exporter%22%7D%3D%3D1' | grep -q '\"value\"'" ||
  fail "prometheus does not scrape the exporter"

# 1. A critical fault reaches the receiver with the right labels (the card
# by its bus address: minor 1 is at 0000:20:00.0 in the simulator's tree).
curl -sf -XPOST "$CONTROL/control/fault" -d '{"minor":1,"code":"0x80E18400"}' >/dev/null
wait_for 60 python3 "$HERE/check_notifications.py" "$TMP/notifications" firing \
  alertname=XpuDeviceFaultCritical severity=critical bus_id=0000:20:00.0 code=0x80E18400 level=reset_card \
  "instance=$EXP_ADDR" job=xpu-exporter ||
  fail "no firing XpuDeviceFaultCritical notification: $(cat "$TMP/notifications" 2>/dev/null)"
echo "fault alert delivered"
# The same fault on a device a pod holds: one alert for that pod, routable by
# namespace, with the pod and the node.
wait_for 60 python3 "$HERE/check_notifications.py" "$TMP/notifications" firing \
  alertname=XpuFaultedDeviceInUse severity=critical minor=1 namespace=default 'pod=alloc-trainjob' \
  container=main node=node-e2e 'uuid=PPU-.+' ||
  fail "no XpuFaultedDeviceInUse notification with namespace, pod and node: $(cat "$TMP/notifications")"
echo "fault alert with namespace, pod and node delivered"
# docs/kubernetes.md's PromQL answers from the real Prometheus (at a 1 s
# subquery step: this run is younger than the docs' 1 m step).
for q in 'max by (namespace, pod, container, uuid, instance) (max_over_time(((max by (instance, uuid) (xpu_device_fault_level) >= 3) * on (instance, uuid) group_right xpu_device_pod_info)[1d:1m]))' \
  'sum by (namespace) (sum_over_time(((count by (instance, uuid, namespace) (xpu_device_pod_info) > bool 0) * on (instance, uuid) group_left () (max by (instance, uuid) (xpu_utilization_ratio) < bool 0.05))[1d:1m])) / 60'; do
  curl -sf "$PROM/api/v1/query" --data-urlencode "query=${q//:1m]/:1s]}" | python3 -c '
import json, sys
r = json.load(sys.stdin)["data"]["result"]
assert any(s["metric"].get("namespace") == "default" for s in r), r
' || fail "docs/kubernetes.md query returned no data for namespace default: $q"
done

# 2. While the fault is active, every dashboard query and recording rule has data.
python3 "$HERE/query_dashboards.py" "$PROM" "$ROOT" "$EXP_ADDR" 1 || fail "dashboard queries"

# 3. Clearing the fault sends the resolved notification.
curl -sf -XDELETE "$CONTROL/control/fault?minor=1" >/dev/null
wait_for 60 python3 "$HERE/check_notifications.py" "$TMP/notifications" resolved \
  alertname=XpuDeviceFaultCritical bus_id=0000:20:00.0 code=0x80E18400 ||
  fail "no resolved notification"
echo "resolved notification delivered"

# 4. XDM killed: upstream-down fires (for: 30s).
kill "$SIM_PID"
wait_for 90 python3 "$HERE/check_notifications.py" "$TMP/notifications" firing \
  alertname=XpuUpstreamDown severity=critical "instance=$EXP_ADDR" ||
  fail "no XpuUpstreamDown notification"
echo "upstream-down alert delivered"
