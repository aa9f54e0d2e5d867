#include "models.h"

#include <algorithm>
#include <cctype>
#include <nlohmann/json.hpp>

namespace xdmsim {
namespace {

using OrderedJson = nlohmann::ordered_json;

const std::vector<ModelSpec>& Models() {
  static const std::vector<ModelSpec> models = {
      {"PPU-810E", "PPU-", 98304, 70, 400, 1700, 800, 1600, 7, false, "1.5.2", "2.3.0",
       TopologyKind::kIcnLink810E},
      {"PPU-M890P", "PPU-", 65536, 60, 350, 1500, 700, 1400, 0, false, "1.5.2", "2.3.0",
       TopologyKind::kPcieM890P},
      {"A100-SXM4-80GB", "GPU-", 81920, 60, 400, 1410, 210, 1593, 12, true, "535.161.08",
       "92.00.36.00.01", TopologyKind::kPcieNvSwitch},
      {"H800-SXM5-80GB", "GPU-", 81559, 70, 700, 1980, 345, 2619, 8, true, "535.161.08",
       "96.00.74.00.0B", TopologyKind::kPcieNvSwitch},
  };
  return models;
}

std::string Lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

OrderedJson Range(int first, int count) {
  OrderedJson a = OrderedJson::array();
  for (int i = first; i < first + count; ++i) a.push_back(i);
  return a;
}

OrderedJson Level(int level, const char* name, OrderedJson topo, OrderedJson peers) {
  OrderedJson j;
  j["level"] = level;
  j["name"] = name;
  j["topo" + std::to_string(level)] = std::move(topo);
  if (!peers.is_null()) j["peers"] = std::move(peers);
  return j;
}

// 810E: icnLink pairs (0,3), (1,2), (4,7), (5,6) ...; groups of 4; all 8 linked.
// PCIe peers of a NUMA node include the node's four RDMA NICs, which the
// reference numbers after the cards (8..11 for the first NUMA node of 8 cards).
OrderedJson Topology810E(int minor, int count) {
  const int quad = minor / 4;
  const int base = quad * 4;
  const int pos = minor % 4;
  const int partner = base + (pos == 0 ? 3 : pos == 3 ? 0 : pos == 1 ? 2 : 1);
  const int pair_index = quad * 2 + ((pos == 0 || pos == 3) ? 0 : 1);
  const int quad_size = std::min(4, count - base);
  OrderedJson pair = OrderedJson::array({std::min(minor, partner), std::max(minor, partner)});
  if (partner >= count) pair = OrderedJson::array({minor});
  OrderedJson numa_peers = Range(base, quad_size);
  const int nic_base = std::max(count, 8);
  for (int i = 0; i < 4; ++i) numa_peers.push_back(nic_base + quad * 4 + i);
  OrderedJson levels = OrderedJson::array();
  levels.push_back(Level(1, "icnLink2", OrderedJson::array({pair_index}), pair));
  levels.push_back(Level(2, "icnLink4", OrderedJson::array({quad}), Range(base, quad_size)));
  levels.push_back(Level(3, "icnLink8", OrderedJson::array({minor / 8}),
                         Range((minor / 8) * 8, std::min(8, count - (minor / 8) * 8))));
  levels.push_back(
      Level(4, "pcieSwitches", OrderedJson::array({4 + quad}), Range(base, quad_size)));
  levels.push_back(Level(5, "numaNodes", OrderedJson::array({1 + quad}), numa_peers));
  levels.push_back(Level(6, "cpuSockets", OrderedJson::array({quad / 2}), OrderedJson()));
  levels.push_back(Level(21, "leafSwitch", "ASW-VM-SQA-G10-P2-S25", OrderedJson()));
  levels.push_back(Level(22, "pointOfDelivery", "VM-SQA-G10-P2", OrderedJson()));
  return OrderedJson{{"levels", levels}};
}

// PCIe-only layout (M890P example): two cards per switch and NUMA node, four per
// CPU socket; rack and network layers are identifiers.
OrderedJson TopologyPcie(int minor, int count, bool hypernode) {
  const int pair = minor / 2;
  const int quad = minor / 4;
  OrderedJson levels = OrderedJson::array();
  levels.push_back(Level(1, "pcieSwitches", OrderedJson::array({pair}),
                         Range(pair * 2, std::min(2, count - pair * 2))));
  levels.push_back(Level(2, "numaNodes", OrderedJson::array({pair}),
                         Range(pair * 2, std::min(2, count - pair * 2))));
  levels.push_back(Level(3, "cpuSockets", OrderedJson::array({quad}),
                         Range(quad * 4, std::min(4, count - quad * 4))));
  if (hypernode) levels.push_back(Level(11, "hyperNode", "hypernode-001", OrderedJson()));
  levels.push_back(Level(21, "leafSwitch", "asw-001", OrderedJson()));
  levels.push_back(Level(22, "pointOfDelivery", "pod-g13-p1", OrderedJson()));
  return OrderedJson{{"levels", levels}};
}

}  // namespace

const std::vector<MetricInfo>& AllMetrics() {
  static const std::vector<MetricInfo> metrics = {
      {kUtilization, "utilization", "percent", false},
      {kMemoryUsed, "memory_used", "MiB", false},
      {kMemoryTotal, "memory_total", "MiB", false},
      {kTemperature, "temperature", "celsius", false},
      {kMemoryTemperature, "memory_temperature", "celsius", false},
      {kPower, "power", "W", false},
      {kEnergy, "energy", "mJ", false},
      {kCoreClock, "core_clock", "MHz", false},
      {kMemoryClock, "memory_clock", "MHz", false},
      {kEccCorrectable, "ecc_correctable", "count", false},
      {kEccUncorrectable, "ecc_uncorrectable", "count", false},
      {kPcieTxBytes, "pcie_tx", "bytes", false},
      {kPcieRxBytes, "pcie_rx", "bytes", false},
      {kLinkTxBytes, "link_tx", "bytes", true},
      {kLinkRxBytes, "link_rx", "bytes", true},
      {kLinkUp, "link_up", "bool", true},
      {kMemoryBandwidthUtil, "memory_bandwidth_utilization", "percent", false},
      {kPcieReplays, "pcie_replays", "count", false},
  };
  return metrics;
}

const ModelSpec* FindModel(const std::string& name) {
  for (const ModelSpec& m : Models()) {
    if (Lower(m.name) == Lower(name)) return &m;
  }
  return nullptr;
}

std::vector<std::string> ModelNames() {
  std::vector<std::string> names;
  for (const ModelSpec& m : Models()) names.push_back(m.name);
  return names;
}

std::string TopologyJson(const ModelSpec& model, int minor, int count) {
  switch (model.topology) {
    case TopologyKind::kIcnLink810E:
      return Topology810E(minor, count).dump();
    case TopologyKind::kPcieM890P:
      return TopologyPcie(minor, count, true).dump();
    case TopologyKind::kPcieNvSwitch:
      return TopologyPcie(minor, count, false).dump();
  }
  return "{}";
}

}  // namespace xdmsim
