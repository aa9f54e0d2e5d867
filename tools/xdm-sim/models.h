#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace xdmsim {

// Metric IDs that xdm-sim serves, in XDM's native units. The exporter's catalog
// (src/catalog/metrics.yaml) maps each to a Prometheus name; the table with
// units is in docs/upstream-api.md. Keep the three in step.
enum MetricId : uint32_t {
  kUtilization = 1,           // percent 0..100
  kMemoryUsed = 2,            // MiB
  kMemoryTotal = 3,           // MiB
  kTemperature = 4,           // degrees Celsius (die)
  kMemoryTemperature = 5,     // degrees Celsius (HBM)
  kPower = 6,                 // watts
  kEnergy = 7,                // millijoules since driver load (counter)
  kCoreClock = 8,             // MHz
  kMemoryClock = 9,           // MHz
  kEccCorrectable = 10,       // errors since driver load (counter)
  kEccUncorrectable = 11,     // errors since driver load (counter)
  kPcieTxBytes = 12,          // bytes (counter)
  kPcieRxBytes = 13,          // bytes (counter)
  kLinkTxBytes = 14,          // bytes per interconnect link (counter), instance = link
  kLinkRxBytes = 15,          // bytes per interconnect link (counter), instance = link
  kLinkUp = 16,               // 1 up, 0 down, instance = link
  kMemoryBandwidthUtil = 17,  // percent 0..100
  kPcieReplays = 18,          // PCIe replay events (counter)
};

struct MetricInfo {
  MetricId id;
  const char* name;
  const char* unit;
  bool per_link;
};
const std::vector<MetricInfo>& AllMetrics();

enum class TopologyKind { kIcnLink810E, kPcieM890P, kPcieNvSwitch };

// A device model the simulator can pretend to be.
struct ModelSpec {
  std::string name;
  std::string uuid_prefix;  // "GPU-" or "PPU-"
  uint64_t memory_mib;
  double idle_watts;
  double max_watts;
  double max_core_mhz;
  double idle_core_mhz;
  double memory_mhz;
  int links;  // interconnect links per device
  bool mig_capable;
  std::string driver_version;
  std::string firmware_version;
  TopologyKind topology;
};

// Known models; names are matched case-insensitively. Returns nullptr if unknown.
const ModelSpec* FindModel(const std::string& name);
std::vector<std::string> ModelNames();

// Topology JSON ({"levels":[...]}, reference section 3.4) of device `minor` on a
// node of `count` devices of `model`.
std::string TopologyJson(const ModelSpec& model, int minor, int count);

}  // namespace xdmsim
