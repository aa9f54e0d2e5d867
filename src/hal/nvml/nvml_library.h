#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "hal/nvml/nvml_api.h"

namespace xpu::hal {

// NVIDIA's Management Library, opened at run time (docs/hal.md, "nvml"):
// every function the backend calls is looked up on its own, so a library
// of an older driver that lacks one disables only what needs it (missing()
// names them). Opened once per path for the life of the process (never
// closed: the driver's library is not made to be unloaded) and initialised
// with nvmlInit_v2 once. Thread-safe: NVML's functions may be called from
// any thread; this object is immutable once opened.
class NvmlLibrary {
 public:
  // The functions, null where the library lacks them.
  struct Api {
    nvml::InitFn init = nullptr;
    nvml::ErrorStringFn error_string = nullptr;
    nvml::SystemGetDriverVersionFn driver_version = nullptr;
    nvml::DeviceGetCountFn device_count = nullptr;
    nvml::DeviceGetHandleByIndexFn device_by_index = nullptr;
    nvml::DeviceGetStringFn name = nullptr;
    nvml::DeviceGetStringFn uuid = nullptr;
    nvml::DeviceGetPciInfoFn pci_info = nullptr;
    nvml::DeviceGetTemperatureFn temperature = nullptr;
    nvml::DeviceGetUintFn power_usage = nullptr;
    nvml::DeviceGetUllFn total_energy = nullptr;
    nvml::DeviceGetMemoryInfoFn memory_info = nullptr;
    nvml::DeviceGetMemoryInfoV2Fn memory_info_v2 = nullptr;  // drivers from R510
    nvml::DeviceGetHandleByPciBusIdFn device_by_bus_id = nullptr;
    nvml::DeviceGetUtilizationRatesFn utilization = nullptr;
    nvml::DeviceGetEnableStatePairFn ecc_mode = nullptr;
    nvml::DeviceGetTotalEccErrorsFn total_ecc_errors = nullptr;
    nvml::DeviceGetRetiredPagesFn retired_pages = nullptr;
    nvml::DeviceGetEnableStateFn retired_pages_pending = nullptr;
    nvml::DeviceGetRemappedRowsFn remapped_rows = nullptr;
    nvml::DeviceGetUllFn clocks_event_reasons = nullptr;  // or the older throttle reasons
    nvml::DeviceGetNvLinkStateFn nvlink_state = nullptr;
    nvml::DeviceGetNvLinkErrorCounterFn nvlink_error_counter = nullptr;
    nvml::DeviceGetUintFn pcie_replay_counter = nullptr;
    nvml::DeviceGetMigModeFn mig_mode = nullptr;
    nvml::DeviceGetUintFn max_mig_device_count = nullptr;
    nvml::DeviceGetMigDeviceHandleByIndexFn mig_device_by_index = nullptr;
    nvml::DeviceGetUintFn gpu_instance_id = nullptr;
    nvml::DeviceGetUintFn compute_instance_id = nullptr;
    nvml::DeviceGetProcessesFn compute_processes = nullptr;
    nvml::EventSetCreateFn event_set_create = nullptr;
    nvml::DeviceRegisterEventsFn register_events = nullptr;
    nvml::EventSetWaitFn event_set_wait = nullptr;
    nvml::EventSetFreeFn event_set_free = nullptr;
  };

  // The library at `path` (a name such as "libnvidia-ml.so.1" is searched
  // as dlopen searches), opened and initialised, or the one this process
  // opened already. NotFound: it cannot be loaded (no driver here);
  // Unavailable: it loaded but nvmlInit_v2 failed (the driver is not
  // running), with NVML's own words.
  static Status Open(const std::string& path, std::shared_ptr<const NvmlLibrary>* out);

  const Api& api() const { return api_; }
  const std::string& path() const { return path_; }
  // The functions the backend calls that this library lacks, by name.
  const std::vector<std::string>& missing() const { return missing_; }
  // NVML's text for a return code ("GPU is lost"), or the number.
  std::string ErrorString(nvml::Return r) const;

 private:
  NvmlLibrary() = default;
  std::string path_;
  Api api_;
  std::vector<std::string> missing_;
};

}  // namespace xpu::hal
