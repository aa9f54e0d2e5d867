#!/usr/bin/env python3
"""Writes the Grafana dashboards in dashboards/ from the panel lists below.

The JSON files are committed (Grafana imports them as they are); edit this
script and re-run it rather than editing the JSON by hand:
    python3 tools/gen_dashboards.py
(tests/dashboards checks that the committed files are its output.)
Every panel uses the ${datasource} variable, sets a unit, and filters by the
$node and $device variables where it shows device series.
"""
import json
import os

DS = {"type": "prometheus", "uid": "${datasource}"}
N = 'instance=~"$node"'
ND = 'instance=~"$node",minor=~"$device"'


def variables(device_multi=True):
    return {"list": [
        {"name": "datasource", "label": "Data source", "type": "datasource",
         "query": "prometheus", "current": {}, "hide": 0, "refresh": 1},
        {"name": "node", "label": "Node", "type": "query", "datasource": DS,
         "definition": "label_values(xpu_device_info, instance)",
         "query": {"query": "label_values(xpu_device_info, instance)", "refId": "node"},
         "multi": True, "includeAll": True, "current": {}, "refresh": 2, "sort": 1},
        {"name": "device", "label": "Device (minor)", "type": "query", "datasource": DS,
         "definition": 'label_values(xpu_device_info{instance=~"$node"}, minor)',
         "query": {"query": 'label_values(xpu_device_info{instance=~"$node"}, minor)',
                   "refId": "device"},
         "multi": device_multi, "includeAll": device_multi, "current": {}, "refresh": 2,
         "sort": 3},
    ]}


def rollup_variables():
    """cluster and node of the recorded series (a central store may hold no
    device series); All matches an absent cluster label too."""
    def var(name, label, query):
        return {"name": name, "label": label, "type": "query", "datasource": DS,
                "definition": query, "query": {"query": query, "refId": name},
                "multi": True, "includeAll": True, "allValue": ".*", "current": {},
                "refresh": 2, "sort": 1}
    return {"list": [
        {"name": "datasource", "label": "Data source", "type": "datasource",
         "query": "prometheus", "current": {}, "hide": 0, "refresh": 1},
        var("cluster", "Cluster", "label_values(cluster:xpu_devices:count, cluster)"),
        var("node", "Node",
            'label_values(cluster_instance:xpu_devices:count{cluster=~"$cluster"}, instance)'),
    ]}


class Board:
    def __init__(self, uid, title, description, device_multi=True, rollups=False):
        self.uid, self.title, self.description = uid, title, description
        self.device_multi = device_multi
        # A rollup board reads recorded series only (tests/dashboards lints it).
        self.rollups = rollups
        self.panels = []
        self.x = self.y = 0

    def panel(self, kind, title, unit, targets, w=12, h=8, description="", options=None):
        if self.x + w > 24:
            self.x, self.y = 0, self.y + h
        p = {
            "id": len(self.panels) + 1,
            "type": kind,
            "title": title,
            "description": description,
            "datasource": DS,
            "gridPos": {"x": self.x, "y": self.y, "w": w, "h": h},
            "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
            "targets": [
                {"refId": chr(ord("A") + i), "datasource": DS, "expr": expr,
                 "legendFormat": legend, "instant": kind in ("table", "stat", "bargauge")}
                for i, (expr, legend) in enumerate(targets)
            ],
        }
        if kind == "table":
            p["targets"][0]["format"] = "table"
        if options:
            p["options"] = options
        self.panels.append(p)
        self.x += w

    def write(self, path):
        board = {
            "uid": self.uid, "title": self.title, "description": self.description,
            "tags": ["xpu", "xpu-exporter"] + (["rollups"] if self.rollups else []),
            "schemaVersion": 39, "version": 1,
            "editable": True, "graphTooltip": 1, "refresh": "1m" if self.rollups else "30s",
            "time": {"from": "now-6h" if self.rollups else "now-1h", "to": "now"},
            "timezone": "browser",
            "templating": rollup_variables() if self.rollups else variables(self.device_multi),
            "annotations": {"list": []},
            "links": [{"title": "xPU dashboards", "type": "dashboards", "tags": ["xpu"],
                       "asDropdown": True}],
            "panels": self.panels,
        }
        with open(path, "w") as f:
            json.dump(board, f, indent=2)
            f.write("\n")


def fleet():
    b = Board("xpu-fleet-overview", "xPU fleet overview",
              "Every node and device: utilization, memory, temperature, power, health, faults.")
    b.panel("stat", "Devices", "none", [(f"sum(node:xpu_devices:count{{{N}}})", "devices")], w=6, h=4)
    b.panel("stat", "Unhealthy devices", "none",
            [(f"sum(node:xpu_devices_unhealthy:count{{{N}}})", "unhealthy")], w=6, h=4)
    b.panel("stat", "Active faults", "none",
            [(f"count(xpu_device_fault_active{{{N}}}) or vector(0)", "faults")], w=6, h=4)
    b.panel("stat", "Fleet utilization", "percentunit",
            [("fleet:xpu_utilization_ratio:avg", "utilization")], w=6, h=4)
    b.panel("timeseries", "Utilization by node", "percentunit",
            [(f"node:xpu_utilization_ratio:avg{{{N}}}", "{{instance}}")])
    b.panel("timeseries", "Memory used by node", "bytes",
            [(f"node:xpu_memory_used_bytes:sum{{{N}}}", "{{instance}} used"),
             (f"node:xpu_memory_total_bytes:sum{{{N}}}", "{{instance}} total")])
    b.panel("timeseries", "Power by node", "watt",
            [(f"node:xpu_power_watts:sum{{{N}}}", "{{instance}}")])
    b.panel("timeseries", "Temperature by device", "celsius",
            [(f"xpu_temperature_celsius{{{ND}}}", "{{instance}} xpu{{minor}}")])
    b.panel("timeseries", "Utilization by device", "percentunit",
            [(f"xpu_utilization_ratio{{{ND}}}", "{{instance}} xpu{{minor}}")])
    b.panel("timeseries", "Memory utilization by device", "percentunit",
            [(f"xpu_memory_used_bytes{{{ND}}} / xpu_memory_total_bytes{{{ND}}}",
              "{{instance}} xpu{{minor}}")])
    b.panel("table", "Device health (0 = unhealthy in at least one source)", "bool_yes_no",
            [(f"min by (instance, bus_id, minor, uuid) (xpu_device_health{{{ND}}})", "")])
    b.panel("table", "Active faults", "none",
            [(f"xpu_device_fault_active{{{ND}}}", "")],
            description="Fault codes the HAL reports active, with their catalog level.")
    b.panel("bargauge", "Busiest devices", "percentunit",
            [(f"topk(10, xpu_utilization_ratio{{{N}}})", "{{instance}} xpu{{minor}}")])
    b.panel("timeseries", "Worst fault level by device", "none",
            [(f"max by (instance, bus_id, minor) (xpu_device_fault_level{{{ND}}})",
              "{{instance}} {{bus_id}} xpu{{minor}}")],
            description="0 none, 1 retry_request, 2 restart_job, 3 restart_card, 4 reset_card, "
                        "5 isolate_after_job, 6 isolate_card")
    return b


C = 'cluster=~"$cluster"'
CI = 'cluster=~"$cluster",instance=~"$node"'


def rollups():
    b = Board("xpu-fleet-rollups", "xPU fleet rollups (recorded)",
              "The fleet from the recording rules of alerts/xpu-fleet.rules.yml only: a central "
              "store (VictoriaMetrics, Mimir, Thanos) that keeps a few series per node answers it.",
              rollups=True)
    b.panel("stat", "Devices", "none", [(f"sum(cluster:xpu_devices:count{{{C}}})", "devices")],
            w=6, h=4, description="Devices in the selected clusters.")
    b.panel("stat", "Devices by health", "none",
            [(f"sum by (health) (cluster_health:xpu_devices:count{{{C}}})", "{{health}}")],
            w=6, h=4, description="Healthy: every source that sees says healthy; unhealthy: one "
            "says not; unknown: no source sees it (never counted healthy).")
    b.panel("stat", "Devices with a card-level fault", "none",
            [(f"sum(cluster:xpu_devices_card_fault:count{{{C}}})", "devices")], w=6, h=4,
            description="Devices with an active fault at restart_card or worse.")
    b.panel("stat", "Nodes with a card-level fault", "none",
            [(f"sum(cluster:xpu_nodes_with_card_fault:count{{{C}}})", "nodes")], w=6, h=4,
            description="Nodes with at least one device at restart_card or worse.")
    b.panel("timeseries", "Devices by health", "none",
            [(f"cluster_health:xpu_devices:count{{{C}}}", "{{cluster}} {{health}}")],
            description="Per cluster and health state.")
    b.panel("timeseries", "Power by cluster", "watt",
            [(f"cluster:xpu_energy_joules:rate5m{{{C}}}", "{{cluster}}")],
            description="Energy counters' rate over 5 minutes: watts.")
    b.panel("timeseries", "Utilization by model", "percentunit",
            [(f"cluster_model:xpu_utilization_ratio:avg{{{C}}}", "{{cluster}} {{model}}")],
            description="Mean compute utilization of each model's devices.")
    b.panel("timeseries", "Memory used by model", "percentunit",
            [(f"cluster_model:xpu_memory_used_bytes:sum{{{C}}} / "
              f"cluster_model:xpu_memory_total_bytes:sum{{{C}}}", "{{cluster}} {{model}}")],
            description="Device memory in use over device memory, per model.")
    b.panel("table", "Nodes with the most card-level faults", "none",
            [(f"topk(20, cluster_instance:xpu_devices_card_fault:count{{{CI}}})", "{{instance}}")],
            description="Nodes ranked by devices at restart_card or worse.")
    b.panel("timeseries", "Utilization by node (busiest 20)", "percentunit",
            [(f"topk(20, cluster_instance:xpu_utilization_ratio:avg{{{CI}}})", "{{instance}}")],
            description="Mean utilization of each node's devices.")
    b.panel("timeseries", "Power by node (highest 20)", "watt",
            [(f"topk(20, cluster_instance:xpu_energy_joules:rate5m{{{CI}}})", "{{instance}}")],
            description="Each node's devices' energy rate over 5 minutes.")
    b.panel("timeseries", "Memory used by node (highest 20)", "bytes",
            [(f"topk(20, cluster_instance:xpu_memory_used_bytes:sum{{{CI}}})", "{{instance}}")],
            description="Device memory in use on each node.")
    return b


def device():
    b = Board("xpu-device-detail", "xPU device detail",
              "One device over time: load, memory, thermals, power, errors, faults, topology, "
              "interconnect and PCIe.", device_multi=False)
    b.panel("timeseries", "Utilization", "percentunit",
            [(f"xpu_utilization_ratio{{{ND}}}", "compute"),
             (f"xpu_memory_bandwidth_utilization_ratio{{{ND}}}", "memory bandwidth")])
    b.panel("timeseries", "Memory", "bytes",
            [(f"xpu_memory_used_bytes{{{ND}}}", "used"), (f"xpu_memory_total_bytes{{{ND}}}", "total")])
    b.panel("timeseries", "Temperature", "celsius",
            [(f"xpu_temperature_celsius{{{ND}}}", "die"),
             (f"xpu_memory_temperature_celsius{{{ND}}}", "memory")])
    b.panel("timeseries", "Power", "watt",
            [(f"xpu_power_watts{{{ND}}}", "draw"),
             (f"rate(xpu_energy_joules_total{{{ND}}}[$__rate_interval])", "from energy counter")])
    b.panel("timeseries", "Clocks", "hertz",
            [(f"xpu_core_clock_hertz{{{ND}}}", "core"), (f"xpu_memory_clock_hertz{{{ND}}}", "memory")])
    b.panel("timeseries", "ECC errors", "none",
            [(f"increase(xpu_ecc_correctable_errors_total{{{ND}}}[$__rate_interval])", "correctable"),
             (f"increase(xpu_ecc_uncorrectable_errors_total{{{ND}}}[$__rate_interval])", "uncorrectable")])
    b.panel("timeseries", "PCIe throughput", "Bps",
            [(f"rate(xpu_pcie_transmit_bytes_total{{{ND}}}[$__rate_interval])", "transmit"),
             (f"rate(xpu_pcie_receive_bytes_total{{{ND}}}[$__rate_interval])", "receive"),
             (f"rate(xpu_pcie_replays_total{{{ND}}}[$__rate_interval])", "replays/s")])
    b.panel("timeseries", "PCIe link width (pci backend)", "none",
            [(f"xpu_pcie_link_width_lanes{{{ND}}}", "{{bound}} lanes")],
            description="Lanes the link trained to and can train to; current below max means a "
                        "downtrained link (fault 0xFC000001).")
    b.panel("timeseries", "PCIe link speed (pci backend)", "none",
            [(f"xpu_pcie_link_speed_transfers_per_second{{{ND}}} / 1000000000", "{{bound}} GT/s")])
    b.panel("timeseries", "PCIe AER errors", "none",
            [(f"sum by (severity) (increase(xpu_pcie_aer_errors_total{{{ND}}}[$__rate_interval]))",
              "{{severity}}")])
    b.panel("timeseries", "PCI driver bound and resets observed", "none",
            [(f"xpu_pci_driver_bound{{{ND}}}", "driver {{driver}} bound"),
             (f"xpu_device_resets_observed_total{{{ND}}}", "resets observed")])
    b.panel("timeseries", "Interconnect throughput by link", "Bps",
            [(f"rate(xpu_link_transmit_bytes_total{{{ND}}}[$__rate_interval])", "link {{link}} tx"),
             (f"rate(xpu_link_receive_bytes_total{{{ND}}}[$__rate_interval])", "link {{link}} rx")])
    b.panel("table", "Interconnect links up", "bool_yes_no", [(f"xpu_link_up{{{ND}}}", "")])
    b.panel("timeseries", "Health by source", "bool_yes_no",
            [(f"xpu_device_health{{{ND}}}", "{{source}}")])
    b.panel("table", "Active faults", "none", [(f"xpu_device_fault_active{{{ND}}}", "")])
    b.panel("timeseries", "Fault level and raises, by source (sysfs, pci, kmsg, nvml)", "none",
            [(f"xpu_device_fault_level{{{ND}}}", "level ({{source}})"),
             (f"sum by (source) (increase(xpu_device_fault_events_total{{{ND}}}[$__rate_interval]))",
              "raises ({{source}})")])
    b.panel("table", "Kernel-log faults (kmsg)", "none",
            [(f'xpu_device_fault_active{{{ND},source="kmsg"}}', "")])
    b.panel("table", "Pods holding this device (kubelet)", "none",
            [(f"xpu_device_pod_info{{{ND}}}", "")], w=24, h=5)
    b.panel("table", "Topology levels", "none", [(f"xpu_device_topology_info{{{ND}}}", "")], w=24)
    b.panel("table", "Device info", "none", [(f"xpu_device_info{{{ND}}}", "")], w=24, h=5)
    return b


def exporter():
    b = Board("xpu-exporter-health", "xPU exporter health",
              "xpu-exporter itself: upstream mode, reconnects, staleness, scrape time, "
              "collector success, HAL.")
    b.panel("stat", "Upstream mode", "none",
            [(f'max by (instance, mode) (xpu_exporter_upstream_mode{{{N}}}) == 1', "{{instance}} {{mode}}")],
            w=8, h=4)
    b.panel("stat", "Upstream up", "bool_yes_no",
            [(f"xpu_exporter_upstream_up{{{N}}}", "{{instance}}")], w=8, h=4)
    b.panel("stat", "Exporter scraped", "bool_yes_no",
            [(f'up{{job="xpu-exporter",{N}}}', "{{instance}}")], w=8, h=4)
    b.panel("timeseries", "Stream reconnects", "none",
            [(f"increase(xpu_exporter_stream_reconnects_total{{{N}}}[$__rate_interval])", "{{instance}}")])
    b.panel("timeseries", "Age of the last sample", "s",
            [(f"time() - xpu_exporter_last_sample_timestamp_seconds{{{N}}}", "{{instance}}")])
    b.panel("timeseries", "Scrape time", "s",
            [(f"xpu_exporter_scrape_duration_seconds{{{N}}}", "{{instance}} render"),
             (f'scrape_duration_seconds{{job="xpu-exporter",{N}}}', "{{instance}} as Prometheus sees it")])
    b.panel("timeseries", "Polling while the stream is down", "reqps",
            [(f"rate(xpu_exporter_poll_requests_total{{{N}}}[$__rate_interval])", "{{instance}} polls"),
             (f"rate(xpu_exporter_poll_failures_total{{{N}}}[$__rate_interval])", "{{instance}} failures")])
    b.panel("table", "Collector success", "bool_yes_no",
            [(f"xpu_exporter_collector_success{{{N}}}", "")])
    b.panel("timeseries", "Collector duration", "s",
            [(f"xpu_exporter_collector_duration_seconds{{{N}}}", "{{instance}} {{collector}}")])
    b.panel("timeseries", "Series held and dropped", "none",
            [(f"xpu_exporter_series{{{N}}}", "{{instance}} series"),
             (f"increase(xpu_exporter_series_dropped_total{{{N}}}[$__rate_interval])", "{{instance}} dropped")])
    b.panel("timeseries", "Bad upstream data", "none",
            [(f"sum by (instance, reason) (increase(xpu_exporter_invalid_samples_total{{{N}}}[$__rate_interval]))",
              "{{instance}} {{reason}}"),
             (f"increase(xpu_exporter_unknown_metric_samples_total{{{N}}}[$__rate_interval])",
              "{{instance}} unknown ids")])
    b.panel("timeseries", "HAL", "s",
            [(f"xpu_hal_sample_duration_seconds{{{N}}}", "{{instance}} sample time")])
    b.panel("stat", "HAL up", "bool_yes_no", [(f"xpu_hal_up{{{N}}}", "{{instance}} {{backend}}")], w=8, h=4)
    b.panel("stat", "HAL read errors (range)", "none",
            [(f"sum(increase(xpu_hal_read_errors_total{{{N}}}[$__range])) or vector(0)", "errors")], w=8, h=4)
    b.panel("table", "Exporter build", "none", [(f"xpu_exporter_build_info{{{N}}}", "")], w=8, h=4)
    b.panel("timeseries", "HTTP: workers, refusals and deadline cuts", "short",
            [(f"xpu_exporter_http_workers_busy{{{N}}}", "{{instance}} busy"),
             (f"xpu_exporter_http_workers{{{N}}}", "{{instance}} workers"),
             (f"sum by (instance, reason) (rate(xpu_exporter_http_requests_refused_total{{{N}}}[5m]))",
              "{{instance}} refused {{reason}}"),
             (f"sum by (instance, reason) (rate(xpu_exporter_http_connections_cut_total{{{N}}}[5m]))",
              "{{instance}} cut {{reason}}")],
            w=16, h=6,
            description="Workers busy of all (reserved probe workers included), requests refused "
                        "(503 capacity, 429 password-check throttle) and connections cut at a "
                        "deadline, per second. Refusals for capacity raise XpuExporterHttpSaturated.")
    return b


if __name__ == "__main__":
    import sys
    # An other folder (tests/dashboards: the committed JSON is this output).
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "dashboards")
    for board, name in ((fleet(), "xpu-fleet-overview.json"), (device(), "xpu-device-detail.json"),
                        (exporter(), "xpu-exporter-health.json"),
                        (rollups(), "xpu-fleet-rollups.json")):
        board.write(os.path.join(out, name))
        print("wrote", name, len(board.panels), "panels")
