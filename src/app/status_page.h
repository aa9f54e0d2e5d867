#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "sinks/device_tainter.h"
#include "store/views.h"
#include "upstream/xdm_client.h"

namespace xpu::app {

// One device as /status and the landing page show it: what XDM, the HAL, the
// store and the kubelet know of it. Absent values are nullopt.
struct DeviceReport {
  int32_t minor = -1;  // -1: no layer names it by a minor (yet)
  std::string bus_id;  // canonical; empty when no layer knows it
  std::string uuid;
  std::string model;
  std::optional<bool> xdm_healthy;
  // Every health source that sees (sysfs, pci, kmsg, nvml), by name: its
  // health of the device (nullopt: it could not read it) and its faults.
  struct SourceHealth {
    std::optional<bool> healthy;
    std::vector<store::ActiveFault> faults;
  };
  std::map<std::string, SourceHealth> sources;
  std::optional<double> seconds_since_sample;
  std::optional<double> utilization;  // ratio
  std::optional<double> memory_used_bytes;
  std::optional<double> memory_total_bytes;
  std::optional<double> temperature_celsius;
  std::vector<store::TopologyLevel> topology;
  std::vector<store::PodAssignment> pods;
};

// The exporter's state at one moment: built once per request by
// Exporter::Report(), then serialised (/status) or rendered (landing page).
struct StatusReport {
  std::string version;
  std::string revision;
  double uptime_seconds = 0;
  std::string xdm_endpoint;
  upstream::UpstreamState upstream;
  upstream::UpstreamInfo info;
  std::string hal_backend = "none";
  bool hal_up = false;
  std::optional<double> hal_seconds_since_sample;  // the oldest source's view
  // Each health source as the registry judges it (docs/hal.md, "The health model").
  struct Source {
    std::string name;
    std::string sight;  // seeing, blind, stale, not_yet; looking (not found yet, not judged)
    std::string why;
    std::optional<double> view_age_seconds;
  };
  std::vector<Source> sources;
  // Every card of the inventory, then devices only XDM's data names; by
  // minor, then bus address.
  std::vector<DeviceReport> devices;
  // The device taints' part, when it runs (--kubernetes.device-taints).
  std::optional<sinks::DeviceTainter::Report> device_taints;
};

// /status: the JSON document of docs/http-api.md.
std::string StatusJson(const StatusReport& report);

// The landing page: links, upstream mode, HAL, and one table row per device,
// all rendered here. Its script only swaps in the same parts of a freshly
// fetched page, so the formatting lives in this one place.
std::string LandingPageHtml(const StatusReport& report, const std::string& telemetry_path);

}  // namespace xpu::app
