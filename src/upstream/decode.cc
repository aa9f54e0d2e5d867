#include "upstream/decode.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/wire_format_lite.h>
#include <limits.h>

#include <algorithm>
#include <cmath>
#include <deque>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>

#include "common/json_depth.h"
#include "common/label.h"

namespace xpu::upstream {
namespace {

constexpr size_t kMaxLabelBytes = 256;

bool Repair(std::string* s) { return SanitizeLabelValue(s, kMaxLabelBytes); }

std::string JoinJson(const nlohmann::json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_integer()) return std::to_string(v.get<int64_t>());
  if (v.is_array()) {
    std::string out;
    for (const auto& e : v) {
      if (!out.empty()) out += ",";
      out += JoinJson(e);
    }
    return out;
  }
  return v.dump();
}

// Checks size and nesting depth before any parser sees the text: nlohmann's
// parser is iterative, but dump() and our JoinJson recurse, and a 2 MB
// "[[[[..." once overflowed the stack (docs/reliability.md).
Status CheckJsonShape(const std::string& json) {
  if (json.size() > kMaxTopologyBytes)
    return Status::InvalidArgument("topology larger than " + std::to_string(kMaxTopologyBytes) +
                                   " bytes");
  if (!JsonNestingWithin(json, kMaxTopologyDepth))
    return Status::InvalidArgument("topology nested deeper than " +
                                   std::to_string(kMaxTopologyDepth));
  return Status::Ok();
}

}  // namespace

namespace {

// One sample of a message through the rules DecodeData states: selected,
// known (or kept), finite, a counter not negative, an instance only where
// the catalog has one; appended to `out` scaled.
class SampleRules {
 public:
  SampleRules(const catalog::Catalog& catalog, bool keep_unknown,
              const std::unordered_set<uint32_t>* excluded, const std::set<int32_t>* devices,
              std::vector<store::Sample>* out, DecodeStats* stats)
      : catalog_(catalog),
        keep_unknown_(keep_unknown),
        excluded_(excluded != nullptr && !excluded->empty() ? excluded : nullptr),
        devices_(devices != nullptr && !devices->empty() ? devices : nullptr),
        out_(out),
        stats_(stats) {}
  void Add(int32_t minor, uint32_t id, std::string_view instance, double v) {
    if ((excluded_ != nullptr && excluded_->count(id) != 0) ||
        (devices_ != nullptr && devices_->count(minor) == 0)) {
      ++stats_->excluded;
      return;
    }
    const catalog::Entry* e = catalog_.Find(id);
    if (e == nullptr) {
      ++stats_->unknown_id;
      if (!keep_unknown_) return;
    }
    if (!std::isfinite(v)) {
      stats_->invalid.Add(InvalidReason::kNonFinite);
      return;
    }
    if (e != nullptr && e->type == catalog::MetricType::kCounter && v < 0) {
      stats_->invalid.Add(InvalidReason::kNegativeCounter);
      return;
    }
    if (e != nullptr && e->instance_label.empty() && !instance.empty()) {
      stats_->invalid.Add(InvalidReason::kUnexpectedInstance);
      return;
    }
    store::Sample& s = out_->emplace_back();
    s.minor = minor;
    s.metric_id = id;
    s.instance = instance;
    if (!s.instance.empty() && Repair(&s.instance)) stats_->invalid.Add(InvalidReason::kBadLabel);
    s.value = e ? e->Apply(v) : v;
  }

 private:
  const catalog::Catalog& catalog_;
  const bool keep_unknown_;
  const std::unordered_set<uint32_t>* const excluded_;
  const std::set<int32_t>* const devices_;
  std::vector<store::Sample>* const out_;
  DecodeStats* const stats_;
};

using google::protobuf::internal::WireFormatLite;

// The wire's pieces as one protobuf input stream.
class WireInput {
 public:
  explicit WireInput(const WirePieces& wire) {
    for (std::string_view p : wire)
      arrays_.emplace_back(p.data(), static_cast<int>(std::min<size_t>(p.size(), INT_MAX)));
    for (auto& a : arrays_) streams_.push_back(&a);
    concat_.emplace(streams_.data(), static_cast<int>(streams_.size()));
  }
  google::protobuf::io::ZeroCopyInputStream* stream() { return &*concat_; }

 private:
  std::deque<google::protobuf::io::ArrayInputStream> arrays_;  // not movable
  std::vector<google::protobuf::io::ZeroCopyInputStream*> streams_;
  std::optional<google::protobuf::io::ConcatenatingInputStream> concat_;
};

// What protobuf's parser takes, read as it reads it (its ParseContext, not
// CodedInputStream, which is laxer): a tag of at most five bytes, a length
// of at most five below 2 GiB, groups nested at most kGroupDepth deep.
constexpr int kGroupDepth = 100;

// The next tag (0 at the end of the input or of the pushed limit, or a tag
// of 0: ConsumedEntireMessage tells them apart); false for a longer one.
bool ReadTag(google::protobuf::io::CodedInputStream* in, uint32_t* tag) {
  const int at = in->CurrentPosition();
  *tag = in->ReadTag();
  return *tag == 0 || in->CurrentPosition() - at <= 5;
}

// protobuf keeps this much below 2 GiB (its parser's slop bytes).
constexpr uint64_t kMaxLength = INT_MAX - 16;

bool ReadLength(google::protobuf::io::CodedInputStream* in, int* length) {
  const int at = in->CurrentPosition();
  uint64_t v = 0;  // 64 bits: a 32-bit read would drop a fifth byte's high bits
  if (!in->ReadVarint64(&v) || in->CurrentPosition() - at > 5 || v > kMaxLength) return false;
  *length = static_cast<int>(v);
  return true;
}

// A field this decoder does not read, or a known one on another wire type
// (protobuf's parser keeps either as an unknown field): skipped, a group
// whole. False for what no message may hold: field number 0, wire types 6
// and 7, an end-group tag outside its group.
bool SkipOther(google::protobuf::io::CodedInputStream* in, uint32_t tag, int depth) {
  if (WireFormatLite::GetTagFieldNumber(tag) == 0) return false;
  uint64_t v = 0;
  int length = 0;
  switch (WireFormatLite::GetTagWireType(tag)) {
    case WireFormatLite::WIRETYPE_VARINT:
      return in->ReadVarint64(&v);
    case WireFormatLite::WIRETYPE_FIXED64:
      return in->Skip(8);
    case WireFormatLite::WIRETYPE_FIXED32:
      return in->Skip(4);
    case WireFormatLite::WIRETYPE_LENGTH_DELIMITED:
      return ReadLength(in, &length) && in->Skip(length);
    case WireFormatLite::WIRETYPE_START_GROUP: {
      if (depth <= 0) return false;
      for (;;) {
        uint32_t inner = 0;
        if (!ReadTag(in, &inner) || inner == 0) return false;
        if (WireFormatLite::GetTagWireType(inner) == WireFormatLite::WIRETYPE_END_GROUP)
          return WireFormatLite::GetTagFieldNumber(inner) == WireFormatLite::GetTagFieldNumber(tag);
        if (!SkipOther(in, inner, depth - 1)) return false;
      }
    }
    default:
      return false;
  }
}

// One MetricData (its limit pushed by the caller): its fields, the last of
// each kept, as protobuf's parser does.
bool ReadMetricData(google::protobuf::io::CodedInputStream* in, SampleRules* rules,
                    std::string* instance) {
  int32_t minor = 0;
  uint32_t id = 0;
  double value = 0;
  instance->clear();
  for (;;) {
    uint32_t tag = 0;
    if (!ReadTag(in, &tag)) return false;
    if (tag == 0) break;  // the end of the sub-message (or a tag of 0: checked below)
    const int wt = WireFormatLite::GetTagWireType(tag);
    uint64_t v = 0;
    switch (WireFormatLite::GetTagFieldNumber(tag)) {
      case 1:  // minor, int32
      case 2:  // metricId, uint32
      case 5:  // timestampMs, int64: not used
        if (wt != WireFormatLite::WIRETYPE_VARINT) break;
        if (!in->ReadVarint64(&v)) return false;
        if (WireFormatLite::GetTagFieldNumber(tag) == 1)
          minor = static_cast<int32_t>(static_cast<uint32_t>(v));
        if (WireFormatLite::GetTagFieldNumber(tag) == 2) id = static_cast<uint32_t>(v);
        continue;
      case 3: {  // instance, bytes
        if (wt != WireFormatLite::WIRETYPE_LENGTH_DELIMITED) break;
        int length = 0;
        if (!ReadLength(in, &length) || !in->ReadString(instance, length)) return false;
        continue;
      }
      case 4:  // value, double
        if (wt != WireFormatLite::WIRETYPE_FIXED64) break;
        if (!WireFormatLite::ReadPrimitive<double, WireFormatLite::TYPE_DOUBLE>(in, &value))
          return false;
        continue;
      default:
        break;
    }
    if (!SkipOther(in, tag, kGroupDepth - 1)) return false;
  }
  // Ended at its limit, not by a tag of 0 or the input's end before it.
  if (!in->ConsumedEntireMessage() || in->BytesUntilLimit() != 0) return false;
  rules->Add(minor, id, *instance, value);
  return true;
}

// Walks a serialized ExporterDataResponse: its stamps into `stamps`, each
// MetricData through `rules` (nullptr: only counted, its bytes skipped).
// False when the bytes are not a message protobuf's parser would take (with
// no rules, as far as its top level shows).
bool WalkData(const WirePieces& wire, DataStamps* stamps, SampleRules* rules) {
  WireInput input(wire);
  google::protobuf::io::CodedInputStream in(input.stream());
  // Bounded by what is there: a forged length must not make a string
  // reserve what the bytes do not hold.
  size_t total = 0;
  for (std::string_view p : wire) total += p.size();
  if (total > kMaxLength) return false;
  // One past the end: the input's own end is a message's end, its limit
  // hit would be an error.
  in.SetTotalBytesLimit(static_cast<int>(total) + 1);
  std::string instance;
  *stamps = DataStamps();
  for (;;) {
    uint32_t tag = 0;
    if (!ReadTag(&in, &tag)) return false;
    if (tag == 0) return in.ConsumedEntireMessage();
    const int wt = WireFormatLite::GetTagWireType(tag);
    uint64_t v = 0;
    switch (WireFormatLite::GetTagFieldNumber(tag)) {
      case 1: {  // dataList
        if (wt != WireFormatLite::WIRETYPE_LENGTH_DELIMITED) break;
        int length = 0;
        if (!ReadLength(&in, &length)) return false;
        ++stamps->samples;
        if (rules == nullptr) {
          if (!in.Skip(length)) return false;
          continue;
        }
        const auto limit = in.PushLimit(length);
        if (!ReadMetricData(&in, rules, &instance)) return false;
        in.PopLimit(limit);
        continue;
      }
      case 2:  // timestampMs, int64
      case 3:  // sequence, uint64
        if (wt != WireFormatLite::WIRETYPE_VARINT) break;
        if (!in.ReadVarint64(&v)) return false;
        if (WireFormatLite::GetTagFieldNumber(tag) == 2) {
          stamps->timestamp_ms = static_cast<int64_t>(v);
        } else {
          stamps->sequence = v;
        }
        continue;
      default:
        break;
    }
    if (!SkipOther(&in, tag, kGroupDepth)) return false;
  }
}

}  // namespace

void DecodeData(const xdm::api::ExporterDataResponse& msg, const catalog::Catalog& catalog,
                bool keep_unknown, std::vector<store::Sample>* out, DecodeStats* stats,
                const std::unordered_set<uint32_t>* excluded, const std::set<int32_t>* devices) {
  out->clear();
  out->reserve(static_cast<size_t>(msg.datalist_size()));
  SampleRules rules(catalog, keep_unknown, excluded, devices, out, stats);
  for (const auto& d : msg.datalist()) rules.Add(d.minor(), d.metricid(), d.instance(), d.value());
}

Status ReadDataStamps(const WirePieces& wire, DataStamps* out) {
  if (!WalkData(wire, out, nullptr)) {
    *out = DataStamps();
    return Status::InvalidArgument("ExporterDataResponse: the bytes do not parse");
  }
  return Status::Ok();
}

Status DecodeDataWire(const WirePieces& wire, const catalog::Catalog& catalog, bool keep_unknown,
                      std::vector<store::Sample>* out, DecodeStats* stats, DataStamps* stamps,
                      const std::unordered_set<uint32_t>* excluded,
                      const std::set<int32_t>* devices) {
  out->clear();
  DecodeStats counted;
  SampleRules rules(catalog, keep_unknown, excluded, devices, out, &counted);
  if (!WalkData(wire, stamps, &rules)) {
    out->clear();
    *stamps = DataStamps();
    return Status::InvalidArgument("ExporterDataResponse: the bytes do not parse");
  }
  stats->unknown_id += counted.unknown_id;
  stats->excluded += counted.excluded;
  stats->invalid.Merge(counted.invalid);
  return Status::Ok();
}

Status ParseTopology(const std::string& json, std::vector<store::TopologyLevel>* out) {
  out->clear();
  if (Status s = CheckJsonShape(json); !s.ok()) return s;
  nlohmann::json j = nlohmann::json::parse(json, nullptr, false);
  if (j.is_discarded()) return Status::InvalidArgument("topology is not JSON");
  if (!j.is_object() || !j.contains("levels") || !j["levels"].is_array())
    return Status::InvalidArgument("topology lacks a \"levels\" array");
  if (j["levels"].size() > kMaxTopologyLevels)
    return Status::InvalidArgument("topology has more than " + std::to_string(kMaxTopologyLevels) +
                                   " levels");
  std::vector<store::TopologyLevel> levels;
  for (const auto& l : j["levels"]) {
    if (!l.is_object() || !l.contains("level") || !l["level"].is_number_integer())
      return Status::InvalidArgument("topology level without an integer \"level\"");
    store::TopologyLevel t;
    t.level = l["level"].get<int>();
    if (l.contains("name") && l["name"].is_string()) t.name = l["name"].get<std::string>();
    const std::string topo_key = "topo" + std::to_string(t.level);
    if (l.contains(topo_key)) t.group = JoinJson(l[topo_key]);
    if (l.contains("peers")) t.peers = JoinJson(l["peers"]);
    Repair(&t.name);
    Repair(&t.group);
    Repair(&t.peers);
    levels.push_back(std::move(t));
  }
  std::sort(levels.begin(), levels.end(),
            [](const store::TopologyLevel& a, const store::TopologyLevel& b) {
              return a.level < b.level;
            });
  *out = std::move(levels);
  return Status::Ok();
}

std::vector<store::DeviceInfo> DecodeDevices(const xdm::api::ListAndWatchResponse& devices,
                                             const xdm::api::GpuInfoResponse& gpu_info,
                                             size_t max_devices, DeviceDecodeStats* stats) {
  std::map<int32_t, const xdm::api::GpuInfo*> info;
  for (const auto& g : gpu_info.gpuinfos()) info[g.minor()] = &g;
  std::map<int32_t, store::DeviceInfo> out;
  for (const auto& d : devices.devices()) {
    if (out.count(d.minor()) > 0) {
      stats->Add(InvalidReason::kDuplicateMinor);
      continue;
    }
    store::DeviceInfo di;
    di.minor = d.minor();
    di.uuid = d.id();
    di.model = d.type();
    di.health = d.health();
    di.total_memory_mib = d.totalmemory();
    auto it = info.find(d.minor());
    if (it != info.end()) {
      const xdm::api::GpuInfo& g = *it->second;
      if (di.uuid.empty()) di.uuid = g.uuid();
      if (!g.model().empty()) di.model = g.model();
      di.driver_version = g.driverversion();
      di.firmware_version = g.firmwareversion();
      di.bus_id = g.busid();
      di.serial = g.serial();
      di.numa_node = g.numanode();
      di.mig_capable = g.migcapable();
      if (di.total_memory_mib == 0) di.total_memory_mib = g.totalmemory();
    }
    if (Repair(&di.health)) stats->Add(InvalidReason::kBadLabel);
    for (const store::DeviceInfoLabel& l : store::kDeviceInfoLabels) {
      if (l.text != nullptr && Repair(&(di.*l.text))) stats->Add(InvalidReason::kBadLabel);
    }
    auto topo = d.extenderresources().find("topology");
    if (topo != d.extenderresources().end()) {
      Status s = ParseTopology(topo->second, &di.topology);
      if (!s.ok()) {
        stats->Add(InvalidReason::kBadTopology);
        di.topology_error = s.message();
      }
    }
    out.emplace(di.minor, std::move(di));
  }
  std::vector<store::DeviceInfo> list;
  for (auto& [minor, di] : out) {
    if (list.size() >= max_devices) {
      stats->Add(InvalidReason::kDeviceCap);
      continue;
    }
    list.push_back(std::move(di));
  }
  return list;
}

}  // namespace xpu::upstream
