#include "upstream/decode.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>

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
  int depth = 0;
  bool in_string = false;
  bool escaped = false;
  for (char c : json) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxTopologyDepth)
        return Status::InvalidArgument("topology nested deeper than " +
                                       std::to_string(kMaxTopologyDepth));
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return Status::Ok();
}

}  // namespace

void DecodeData(const xdm::api::ExporterDataResponse& msg, const catalog::Catalog& catalog,
                bool keep_unknown, std::vector<store::Sample>* out, DecodeStats* stats,
                const std::unordered_set<uint32_t>* excluded, const std::set<int32_t>* devices) {
  out->clear();
  out->reserve(static_cast<size_t>(msg.datalist_size()));
  const bool select = excluded != nullptr && !excluded->empty();
  const bool subset = devices != nullptr && !devices->empty();
  for (const auto& d : msg.datalist()) {
    if ((select && excluded->count(d.metricid()) != 0) ||
        (subset && devices->count(d.minor()) == 0)) {
      ++stats->excluded;
      continue;
    }
    const catalog::Entry* e = catalog.Find(d.metricid());
    if (e == nullptr) {
      ++stats->unknown_id;
      if (!keep_unknown) continue;
    }
    const double v = d.value();
    if (!std::isfinite(v)) {
      stats->invalid.Add(InvalidReason::kNonFinite);
      continue;
    }
    if (e != nullptr && e->type == catalog::MetricType::kCounter && v < 0) {
      stats->invalid.Add(InvalidReason::kNegativeCounter);
      continue;
    }
    if (e != nullptr && e->instance_label.empty() && !d.instance().empty()) {
      stats->invalid.Add(InvalidReason::kUnexpectedInstance);
      continue;
    }
    store::Sample& s = out->emplace_back();
    s.minor = d.minor();
    s.metric_id = d.metricid();
    s.instance = d.instance();
    if (!s.instance.empty() && Repair(&s.instance)) stats->invalid.Add(InvalidReason::kBadLabel);
    s.value = e ? e->Apply(v) : v;
  }
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
