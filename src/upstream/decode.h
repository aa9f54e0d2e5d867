#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "catalog/catalog.h"
#include "store/metric_store.h"
#include "store/views.h"
#include "upstream/invalid_reason.h"
#include "xdm/api_outer.pb.h"

namespace xpu::upstream {

// What decoding had to drop or repair: counted by the caller into
// xpu_exporter_invalid_samples_total{reason} and logged once per reason.
struct DecodeStats {
  size_t unknown_id = 0;  // metric ID not in the catalog (its own counter)
  // kNonFinite, kNegativeCounter, kBadLabel (instance repaired), and
  // kUnexpectedInstance: an instance on a metric whose catalog entry has none
  // would render as a second sample with the label set of the first.
  InvalidCounts invalid;
  size_t excluded = 0;  // families or devices not selected (--metrics.*, --xdm.devices)
  bool operator==(const DecodeStats&) const = default;
};

// Limits on what one upstream message may make the exporter hold
// (docs/reliability.md). A topology beyond them is rejected as malformed.
inline constexpr size_t kMaxTopologyBytes = size_t{64} * 1024;
inline constexpr int kMaxTopologyDepth = 16;
inline constexpr size_t kMaxTopologyLevels = 16;

// Turns one ExporterGetDataList/ExporterDataStream message into scaled
// samples. Unknown IDs are kept only when `keep_unknown` (unscaled); IDs in
// `excluded` (families not selected), and samples of minors outside a
// non-empty `devices` (--xdm.devices), are dropped first. Pure.
void DecodeData(const xdm::api::ExporterDataResponse& msg, const catalog::Catalog& catalog,
                bool keep_unknown, std::vector<store::Sample>* out, DecodeStats* stats,
                const std::unordered_set<uint32_t>* excluded = nullptr,
                const std::set<int32_t>* devices = nullptr);

// An ExporterDataResponse as it came off the wire: its bytes, in pieces
// (gRPC's slices), never made into a message. At 100,000 samples the
// message's objects and strings were 18 MB held beside the bytes
// (docs/benchmarks.md).
using WirePieces = std::vector<std::string_view>;
struct DataStamps {
  int64_t timestamp_ms = 0;
  uint64_t sequence = 0;
  size_t samples = 0;  // MetricData entries
};
// The message's stamps and how many samples it carries, its samples
// skipped by their lengths (a tenth of a decode): what ordering needs before
// a decode is worth it. InvalidArgument when its top level does not parse
// (what is inside a sample is DecodeDataWire's to find). Pure.
Status ReadDataStamps(const WirePieces& wire, DataStamps* out);
// DecodeData of the message the bytes are, read from them directly, and the
// message's stamps. Bytes protobuf's parser would refuse are refused:
// InvalidArgument, `out` empty, `stats` as they were. Pure.
Status DecodeDataWire(const WirePieces& wire, const catalog::Catalog& catalog, bool keep_unknown,
                      std::vector<store::Sample>* out, DecodeStats* stats, DataStamps* stamps,
                      const std::unordered_set<uint32_t>* excluded = nullptr,
                      const std::set<int32_t>* devices = nullptr);

// Parses extenderResources["topology"]. Errors describe what is malformed;
// `out` is left empty then.
Status ParseTopology(const std::string& json, std::vector<store::TopologyLevel>* out);

// kBadLabel, kBadTopology, kDuplicateMinor and kDeviceCap (devices beyond
// `max_devices`, dropped).
using DeviceDecodeStats = InvalidCounts;

// Merges a ListAndWatch push with the last ListGpuInfo answer (may be empty),
// one DeviceInfo per minor of the ListAndWatch push, sorted by minor, at most
// `max_devices` of them (the lowest minors). Pure.
std::vector<store::DeviceInfo> DecodeDevices(const xdm::api::ListAndWatchResponse& devices,
                                             const xdm::api::GpuInfoResponse& gpu_info,
                                             size_t max_devices, DeviceDecodeStats* stats);

}  // namespace xpu::upstream
