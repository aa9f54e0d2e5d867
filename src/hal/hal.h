#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "common/status.h"

namespace xpu::hal {

struct HalDeviceId {
  int32_t minor = 0;
  std::string uuid;    // empty if the backend could not read it
  std::string bus_id;  // canonical PCI address of its `device` link; empty without one
};

// A source of device health and fault codes read from the hardware (driver,
// sysfs, vendor library), independent of XDM. Failures are values: a backend
// never throws. Implementations are called from the HAL sampler thread only.
class HalBackend {
 public:
  virtual ~HalBackend() = default;
  virtual std::string name() const = 0;
  // Where it reads (a directory), if anywhere.
  virtual std::string root() const { return {}; }
  // The devices present. An error means the backend as a whole is unusable
  // this time (exported as xpu_hal_up 0).
  virtual Status ListDevices(std::vector<HalDeviceId>* out) = 0;
  // Per-device reads; an error affects that device only.
  virtual Status ReadHealth(int32_t minor, bool* healthy) = 0;
  // Active fault codes as written by the hardware (normalised by the caller).
  virtual Status ReadFaultCodes(int32_t minor, std::vector<std::string>* codes) = 0;
};

// Where and how often to sample the HAL; the defaults of --hal*.
struct HalOptions {
  std::string backend = "auto";  // auto | none | a list of BackendKinds' names
  std::string root = "/sys/class/xpu";
  // The pci backend: sysfs root (the host's /sys, mounted read-only in a
  // container), device classes and an optional vendor allowlist.
  std::string pci_root = "/sys";
  std::vector<std::string> pci_classes = {"0x0302", "0x0380", "0x1200", "0x0b40"};
  std::vector<std::string> pci_vendors;
  std::chrono::milliseconds interval{1000};
  // How often the facts that only change slowly or are only shown are
  // read (NVML's gauges, counters, links, MIG devices, processes); what
  // raises a fault is read each interval (docs/hal.md, "Cadences").
  std::chrono::milliseconds gauge_interval{10000};
  std::string fault_catalog_file;  // empty: the built-in fault catalog
  // The kmsg backend: the kernel log (or a file of records in its format),
  // its catalog, and whether records written from userspace count.
  std::string kmsg_path = "/dev/kmsg";
  std::string kmsg_catalog_file;  // empty: the built-in kmsg_patterns.yaml
  bool kmsg_user_records = false;
  // Where the kernel log's active states are kept across restarts
  // (kmsg-states.json in it); empty: not kept.
  std::string state_dir = "/var/lib/xpu-exporter";
  // The nvml backend: NVIDIA's library, opened at run time (a name dlopen
  // looks up, or a path).
  std::string nvml_library = "libnvidia-ml.so.1";
  std::string nvml_host_proc;  // empty: the processes on a card are not joined to pods
};

// What --hal selects (ParseHalSelection, hal/flags.h).
struct HalSelection {
  bool automatic = false;       // auto: each backend that finds devices
  std::set<std::string> names;  // the backends listed (BackendKinds' names)
  bool on(const std::string& name) const { return names.count(name) != 0; }
  bool operator==(const HalSelection&) const = default;
};

// Backend selection for --hal: "none", "sysfs", or "auto" (sysfs when `root`
// exists, else none). Returns nullptr for "none"; InvalidArgument for an
// unknown name.
Status MakeBackend(const std::string& kind, const std::string& root,
                   std::unique_ptr<HalBackend>* out);

}  // namespace xpu::hal
