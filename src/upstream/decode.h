#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "catalog/catalog.h"
#include "store/device_registry.h"
#include "store/metric_store.h"
#include "xdm/api_outer.pb.h"

namespace xpu::upstream {

// What decoding had to drop or repair. Counted by the caller into
// xpu_exporter_invalid_samples_total{reason} and logged once per reason.
struct DecodeStats {
  size_t unknown_id = 0;        // metric ID not in the catalog
  size_t non_finite = 0;        // NaN or +-Inf value
  size_t negative_counter = 0;  // counter below zero
  size_t bad_instance = 0;      // instance label repaired (invalid UTF-8, too long)
  // An instance on a metric whose catalog entry has no instance label: it
  // would render as a second sample with the label set of the first.
  size_t unexpected_instance = 0;
};

// Limits on what one upstream message may make the exporter hold
// (docs/reliability.md). A topology beyond them is rejected as malformed.
inline constexpr size_t kMaxTopologyBytes = 64 * 1024;
inline constexpr int kMaxTopologyDepth = 16;
inline constexpr size_t kMaxTopologyLevels = 16;

// Turns one ExporterGetDataList/ExporterDataStream message into scaled
// samples. Unknown IDs are kept only when `keep_unknown` (unscaled). Pure.
void DecodeData(const xdm::api::ExporterDataResponse& msg, const catalog::Catalog& catalog,
                bool keep_unknown, std::vector<store::Sample>* out, DecodeStats* stats);

// Parses extenderResources["topology"]. Errors describe what is malformed;
// `out` is left empty then.
Status ParseTopology(const std::string& json, std::vector<store::TopologyLevel>* out);

struct DeviceDecodeStats {
  size_t repaired_labels = 0;  // strings cut or with invalid UTF-8 replaced
  size_t bad_topology = 0;
  size_t duplicate_minor = 0;
  size_t over_device_cap = 0;  // devices beyond `max_devices`, dropped
};

// Merges a ListAndWatch push with the last ListGpuInfo answer (may be empty),
// one DeviceInfo per minor of the ListAndWatch push, sorted by minor, at most
// `max_devices` of them (the lowest minors). Pure.
std::vector<store::DeviceInfo> DecodeDevices(const xdm::api::ListAndWatchResponse& devices,
                                             const xdm::api::GpuInfoResponse& gpu_info,
                                             size_t max_devices, DeviceDecodeStats* stats);

}  // namespace xpu::upstream
