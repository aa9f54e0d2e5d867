#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "common/status.h"
#include "models.h"
#include "xdm/api_outer.pb.h"

namespace xdmsim {

using xpu::CondVar;
using xpu::Mutex;
using xpu::MutexLock;

// What the kernel's PCI files would say of one device (docs/hal.md, the pci
// backend); changed through /control/pci.
struct PciState {
  bool present = true;  // on the bus
  bool driver_bound = true;
  std::string power_state = "D0";
  int link_width = 16, max_link_width = 16;
  std::string link_speed = "32.0 GT/s PCIe", max_link_speed = "32.0 GT/s PCIe";
  // The upstream port the card sits under (the slot): its maxima.
  int port_max_link_width = 16;
  std::string port_max_link_speed = "32.0 GT/s PCIe";
  // Idle power management: while set, the link runs at 2.5 GT/s whatever
  // link_speed says, as cards lower their link speed when idle.
  bool idle = false;
  // aer[severity][type] = count; severity correctable, nonfatal or fatal.
  std::map<std::string, std::map<std::string, uint64_t>> aer = {
      {"correctable", {{"BadDLLP", 0}, {"BadTLP", 0}, {"RxErr", 0}}},
      {"nonfatal", {{"CmpltTO", 0}, {"MalfTLP", 0}}},
      {"fatal", {{"DLP", 0}, {"SDES", 0}}}};
};

// What the hardware of one device would show through sysfs: the HAL's view.
struct HalDeviceView {
  int minor;
  std::string uuid;
  bool healthy;
  std::vector<std::string> fault_codes;  // sorted, "0x" + 8 upper-case hex digits
  std::string bus_id;                    // as ListGpuInfo reports it
  PciState pci;
};

// The PCI address ListGpuInfo reports for device `minor`.
std::string BusIdOf(int minor, int pci_domain = 0);

// The simulated node: devices of one model, their moving metrics, health, fault
// codes and allocations. Everything the gRPC services and the control API read
// or change lives here, behind one mutex, so each call sees and leaves a
// consistent state. Thread-safe: any thread may call any method.
class Fleet {
 public:
  // `links` < 0 means the model's own link count.
  // `pci_domain`: the PCI domain of the devices' bus ids (BusIdOf).
  Fleet(const ModelSpec& model, int count, uint64_t seed, int links, bool frozen = false,
        int pci_domain = 0);
  Fleet(const Fleet&) = delete;
  Fleet& operator=(const Fleet&) = delete;

  const ModelSpec& model() const { return model_; }

  // Advances every metric by `dt_ms` of simulated time, stamped `now_ms`.
  void Tick(int64_t now_ms, int64_t dt_ms);

  // Current samples, filtered by the request's minors and metric IDs (empty
  // filter = all). The sequence number counts ticks.
  xdm::api::ExporterDataResponse Data(const xdm::api::ExporterDataRequest& req) const;
  xdm::api::ListAndWatchResponse Devices() const;
  xdm::api::GpuInfoResponse GpuInfo(const xdm::api::GpuInfoRequest& req) const;
  xdm::api::AllocateResponse Allocate(const xdm::api::AllocateRequest& req);
  xdm::api::ReleaseResponse Release(const xdm::api::ReleaseRequest& req);
  std::vector<int32_t> Minors() const;
  // Allocation id -> the device UUIDs it holds (for the fake kubelet).
  std::map<std::string, std::vector<std::string>> AllocatedUuids() const;
  std::vector<HalDeviceView> HalView() const;
  // Replaces device `minor`'s PCI state (/control/pci).
  xpu::Status SetPci(int minor, const PciState& state);
  xpu::Status GetPci(int minor, PciState* state) const;
  uint64_t samples_served() const;
  int64_t last_tick_ms() const;
  // Increases whenever the device list or any device's health changes; a
  // ListAndWatch stream pushes when it moves.
  uint64_t devices_generation() const;

  // Control API. Each returns NotFound for an unknown minor, InvalidArgument
  // for a malformed code.
  xpu::Status RaiseFault(int minor, const std::string& code);
  // Clears one code, or all of them when `code` is empty.
  xpu::Status ClearFault(int minor, const std::string& code);
  xpu::Status SetHealth(int minor, bool healthy);
  xpu::Status AddEccErrors(int minor, uint64_t correctable, uint64_t uncorrectable);
  // Devices 0..count-1 exist afterwards; new ones start healthy, removed ones
  // lose their faults and allocations.
  xpu::Status SetCount(int count);
  // Garbage mode: every data answer also carries hostile samples (NaN, +Inf,
  // a negative counter, an unknown ID, a duplicate, an instance with quotes,
  // backslashes, a newline and invalid UTF-8), and device 0's model string is
  // 1 MiB of the same. For testing the exporter's defences.
  void SetGarbage(bool on);
  // Every ListAndWatch message carries an extenderResources key that is
  // not UTF-8: bytes a proto3 parser refuses whole (a map's string key).
  // For testing that a list that does not parse ends its call.
  void SetListUnparsable(bool on);

 private:
  struct LinkState {
    double tx_bytes = 0, rx_bytes = 0;
    bool up = true;
  };
  struct Device {
    int minor;
    std::string uuid;
    std::string serial;
    bool healthy = true;
    std::set<std::string> faults;
    std::mt19937_64 rng;
    double util = 0, mem_used_mib = 0, temp = 0, mem_temp = 0, power = 0, energy_mj = 0;
    double core_mhz = 0, mem_bw_util = 0;
    double ecc_corr = 0, ecc_uncorr = 0, pcie_tx = 0, pcie_rx = 0, pcie_replays = 0;
    std::vector<LinkState> links;
    // Allocated shares: core percent, memory GiB, MIG slices, whole-card owners.
    uint32_t core_used = 0, memory_used_gib = 0, slices_used = 0;
    bool exclusive = false;
    PciState pci;
  };
  struct Allocation {
    std::vector<xdm::api::AllocatedDevice> devices;
  };

  Device MakeDevice(int minor) const;
  Device* FindLocked(int minor) XPU_REQUIRES(mu_);
  std::string ModelNameLocked(const Device& d) const XPU_REQUIRES(mu_);
  void GiveBackLocked(const xdm::api::AllocatedDevice& a) XPU_REQUIRES(mu_);
  void AppendSamples(const Device& d, const std::set<uint32_t>& ids,
                     xdm::api::ExporterDataResponse* out) const XPU_REQUIRES(mu_);
  std::string CheckFits(const Device& d, const xdm::api::DeviceRequest& r) const;
  // Allocate's three steps. A refusal is an AllocateResponse status and why.
  struct Refusal {
    int status;
    std::string message;
  };
  std::optional<Refusal> ValidateLocked(const xdm::api::AllocateRequest& req) XPU_REQUIRES(mu_);
  // Picks a device (minor) for each requested one: the named one, else the
  // first that fits and is not picked yet.
  std::optional<Refusal> PlaceLocked(const xdm::api::AllocateRequest& req,
                                     std::vector<int32_t>* chosen) XPU_REQUIRES(mu_);
  void CommitLocked(const xdm::api::AllocateRequest& req, const std::vector<int32_t>& chosen,
                    xdm::api::AllocateResponse* resp) XPU_REQUIRES(mu_);

  const ModelSpec model_;
  const uint64_t seed_;
  const int links_;
  const bool frozen_;  // metrics keep their initial values (golden tests)
  const int pci_domain_;

  mutable Mutex mu_;
  // State below is protected by mu_.
  std::vector<Device> devices_ XPU_GUARDED_BY(mu_);  // sorted by minor
  std::map<std::string, Allocation> allocations_ XPU_GUARDED_BY(mu_);
  uint64_t sequence_ XPU_GUARDED_BY(mu_) = 0;
  int64_t last_tick_ms_ XPU_GUARDED_BY(mu_) = 0;
  uint64_t devices_generation_ XPU_GUARDED_BY(mu_) = 1;
  mutable uint64_t samples_served_ XPU_GUARDED_BY(mu_) = 0;
  bool garbage_ XPU_GUARDED_BY(mu_) = false;
  bool list_unparsable_ XPU_GUARDED_BY(mu_) = false;
};

}  // namespace xdmsim
