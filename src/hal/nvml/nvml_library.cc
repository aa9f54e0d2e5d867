#include "hal/nvml/nvml_library.h"

#include <dlfcn.h>

#include <map>
#include <utility>

#include "common/mutex.h"

namespace xpu::hal {
namespace {

// Each function by the first of its names the library exports (a newer
// name first, the older one it replaced after).
template <typename Fn>
void Bind(void* handle, std::initializer_list<const char*> names, Fn* fn,
          std::vector<std::string>* missing) {
  for (const char* name : names) {
    if (void* sym = dlsym(handle, name)) {
      *fn = reinterpret_cast<Fn>(sym);  // NOLINT: dlsym's result is the function
      return;
    }
  }
  missing->push_back(*names.begin());
}

// The libraries this process opened, by path: NVML is initialised once and
// never unloaded. Any thread.
class OpenedNvml {
 public:
  std::shared_ptr<const NvmlLibrary> Find(const std::string& path) {
    MutexLock lock(mu_);
    auto it = opened_.find(path);
    return it != opened_.end() ? it->second : nullptr;
  }
  // The one kept for `path`: `lib`, or one another thread kept first.
  std::shared_ptr<const NvmlLibrary> Keep(const std::string& path,
                                          std::shared_ptr<const NvmlLibrary> lib) {
    MutexLock lock(mu_);
    return opened_.emplace(path, std::move(lib)).first->second;
  }
  static OpenedNvml& Get() {
    static OpenedNvml* const table = new OpenedNvml();  // never destroyed: used at exit
    return *table;
  }

 private:
  Mutex mu_;
  std::map<std::string, std::shared_ptr<const NvmlLibrary>> opened_ XPU_GUARDED_BY(mu_);
};

}  // namespace

Status NvmlLibrary::Open(const std::string& path, std::shared_ptr<const NvmlLibrary>* out) {
  if ((*out = OpenedNvml::Get().Find(path))) return Status::Ok();
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    // glibc keeps dlerror's text per thread.
    const char* why = dlerror();  // NOLINT(concurrency-mt-unsafe)
    return Status::NotFound("NVML library " + path +
                            " cannot be loaded: " + (why != nullptr ? why : "unknown error"));
  }
  std::shared_ptr<NvmlLibrary> lib(new NvmlLibrary());
  lib->path_ = path;
  Api& a = lib->api_;
  std::vector<std::string>* m = &lib->missing_;
  Bind(handle, {"nvmlInit_v2", "nvmlInit"}, &a.init, m);
  Bind(handle, {"nvmlErrorString"}, &a.error_string, m);
  Bind(handle, {"nvmlSystemGetDriverVersion"}, &a.driver_version, m);
  Bind(handle, {"nvmlDeviceGetCount_v2", "nvmlDeviceGetCount"}, &a.device_count, m);
  Bind(handle, {"nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByIndex"}, &a.device_by_index,
       m);
  Bind(handle, {"nvmlDeviceGetName"}, &a.name, m);
  Bind(handle, {"nvmlDeviceGetUUID"}, &a.uuid, m);
  Bind(handle, {"nvmlDeviceGetPciInfo_v3", "nvmlDeviceGetPciInfo_v2"}, &a.pci_info, m);
  Bind(handle, {"nvmlDeviceGetTemperature"}, &a.temperature, m);
  Bind(handle, {"nvmlDeviceGetPowerUsage"}, &a.power_usage, m);
  Bind(handle, {"nvmlDeviceGetTotalEnergyConsumption"}, &a.total_energy, m);
  Bind(handle, {"nvmlDeviceGetMemoryInfo"}, &a.memory_info, m);
  Bind(handle, {"nvmlDeviceGetMemoryInfo_v2"}, &a.memory_info_v2, m);
  Bind(handle, {"nvmlDeviceGetHandleByPciBusId_v2", "nvmlDeviceGetHandleByPciBusId"},
       &a.device_by_bus_id, m);
  Bind(handle, {"nvmlDeviceGetUtilizationRates"}, &a.utilization, m);
  Bind(handle, {"nvmlDeviceGetEccMode"}, &a.ecc_mode, m);
  Bind(handle, {"nvmlDeviceGetTotalEccErrors"}, &a.total_ecc_errors, m);
  Bind(handle, {"nvmlDeviceGetRetiredPages"}, &a.retired_pages, m);
  Bind(handle, {"nvmlDeviceGetRetiredPagesPendingStatus"}, &a.retired_pages_pending, m);
  Bind(handle, {"nvmlDeviceGetRemappedRows"}, &a.remapped_rows, m);
  Bind(handle,
       {"nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"},
       &a.clocks_event_reasons, m);
  Bind(handle, {"nvmlDeviceGetNvLinkState"}, &a.nvlink_state, m);
  Bind(handle, {"nvmlDeviceGetNvLinkErrorCounter"}, &a.nvlink_error_counter, m);
  Bind(handle, {"nvmlDeviceGetPcieReplayCounter"}, &a.pcie_replay_counter, m);
  Bind(handle, {"nvmlDeviceGetMigMode"}, &a.mig_mode, m);
  Bind(handle, {"nvmlDeviceGetMaxMigDeviceCount"}, &a.max_mig_device_count, m);
  Bind(handle, {"nvmlDeviceGetMigDeviceHandleByIndex"}, &a.mig_device_by_index, m);
  Bind(handle, {"nvmlDeviceGetGpuInstanceId"}, &a.gpu_instance_id, m);
  Bind(handle, {"nvmlDeviceGetComputeInstanceId"}, &a.compute_instance_id, m);
  Bind(handle,
       {"nvmlDeviceGetComputeRunningProcesses_v2", "nvmlDeviceGetComputeRunningProcesses_v3"},
       &a.compute_processes, m);
  Bind(handle, {"nvmlEventSetCreate"}, &a.event_set_create, m);
  Bind(handle, {"nvmlDeviceRegisterEvents"}, &a.register_events, m);
  Bind(handle, {"nvmlEventSetWait_v2"}, &a.event_set_wait, m);
  Bind(handle, {"nvmlEventSetFree"}, &a.event_set_free, m);
  if (a.init == nullptr || a.device_count == nullptr || a.device_by_index == nullptr) {
    return Status::NotFound("NVML library " + path +
                            " lacks nvmlInit_v2, nvmlDeviceGetCount_v2 or "
                            "nvmlDeviceGetHandleByIndex_v2: not NVML");
  }
  if (const nvml::Return r = a.init(); r != nvml::kSuccess)
    return Status::Unavailable("nvmlInit_v2 failed: " + lib->ErrorString(r));
  // Two threads that opened it at once: dlopen counts references and NVML
  // counts its inits, so the second is harmless; one is kept.
  *out = OpenedNvml::Get().Keep(path, std::move(lib));
  return Status::Ok();
}

std::string NvmlLibrary::ErrorString(nvml::Return r) const {
  const char* text = api_.error_string != nullptr ? api_.error_string(r) : nullptr;
  std::string out = text != nullptr ? text : "";
  return out.empty() ? "NVML error " + std::to_string(r) : out + " (" + std::to_string(r) + ")";
}

}  // namespace xpu::hal
