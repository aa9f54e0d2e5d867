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
};

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
};

// Merges a ListAndWatch push with the last ListGpuInfo answer (may be empty),
// one DeviceInfo per minor of the ListAndWatch push, sorted by minor. Pure.
std::vector<store::DeviceInfo> DecodeDevices(const xdm::api::ListAndWatchResponse& devices,
                                      const xdm::api::GpuInfoResponse& gpu_info,
                                      DeviceDecodeStats* stats);

}  // namespace xpu::upstream
