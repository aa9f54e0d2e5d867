#include "app/parts.h"

#include <spdlog/spdlog.h>

#include "hal/hal_sampler.h"
#include "hal/kmsg_sampler.h"
#include "hal/nvml_sampler.h"
#include "hal/pci_sampler.h"
#include "kubelet/pod_mapper.h"
#include "kubernetes/pod_watcher.h"
#include "sinks/node_reporter.h"

namespace xpu::app {
namespace {

// --hal=sysfs, or auto where the root exists.
Status MakeSysfs(const PartContext& c, std::unique_ptr<Part>* out) {
  const hal::HalOptions& o = c.cfg.hal;
  const hal::HalSelection& sel = c.cfg.parsed->hal;
  std::unique_ptr<hal::HalBackend> backend;
  if (sel.automatic || sel.sysfs) {
    if (Status s = hal::MakeBackend(sel.sysfs ? "sysfs" : "auto", o.root, &backend); !s.ok())
      return s;
  }
  if (!backend) {
    spdlog::info("HAL sysfs backend off (--hal={}, {})", o.backend, o.root);
    return Status::Ok();
  }
  spdlog::info("HAL backend {} at {}, every {} ms", backend->name(), o.root, o.interval.count());
  *out = std::make_unique<hal::HalSampler>(std::move(backend), c.files.faults, o.interval,
                                           c.devices, c.metrics, c.exemplars, c.shared_metrics);
  return Status::Ok();
}

// --hal=pci, or auto where the tree has a device to watch.
Status MakePci(const PartContext& c, std::unique_ptr<Part>* out) {
  const hal::HalOptions& o = c.cfg.hal;
  const hal::HalSelection& sel = c.cfg.parsed->hal;
  if (!sel.automatic && !sel.pci) return Status::Ok();
  hal::PciScanner scanner(o.pci_root, c.cfg.parsed->pci_filter);
  std::vector<hal::PciDevice> found;
  const bool usable = scanner.Scan(&found).ok();
  if (!sel.pci && (!usable || found.empty())) return Status::Ok();
  spdlog::info("HAL backend pci at {}: {} device(s), every {} ms", o.pci_root, found.size(),
               o.interval.count());
  *out = std::make_unique<hal::PciSampler>(std::move(scanner), c.files.faults, o.interval,
                                           c.devices, c.metrics, c.exemplars, c.shared_metrics);
  return Status::Ok();
}

// --hal=kmsg, or auto where the kernel log can be read (CAP_SYSLOG under
// dmesg_restrict).
Status MakeKmsg(const PartContext& c, std::unique_ptr<Part>* out) {
  const hal::HalOptions& o = c.cfg.hal;
  const hal::HalSelection& sel = c.cfg.parsed->hal;
  const bool readable = sel.automatic && hal::KmsgReadable(o.kmsg_path);
  if (sel.automatic && !readable)
    spdlog::info("HAL kmsg backend off: {} cannot be read (--hal=kmsg would retry)", o.kmsg_path);
  if (!sel.kmsg && !readable) return Status::Ok();
  spdlog::info("HAL backend kmsg at {}", o.kmsg_path);
  *out = std::make_unique<hal::KmsgSampler>(
      hal::KmsgSampler::Options{o.kmsg_path, o.kmsg_user_records, o.interval,
                                o.state_dir.empty() ? "" : o.state_dir + "/kmsg-states.json"},
      c.files.kmsg, c.files.faults, c.devices, c.metrics, c.exemplars);
  return Status::Ok();
}

// --hal=nvml, or auto where NVIDIA's library loads and lists a card (asked
// with the interval as deadline: a driver that hangs leaves it off).
Status MakeNvml(const PartContext& c, std::unique_ptr<Part>* out) {
  const hal::HalOptions& o = c.cfg.hal;
  const hal::HalSelection& sel = c.cfg.parsed->hal;
  if (!sel.automatic && !sel.nvml) return Status::Ok();
  if (!sel.nvml) {
    std::string why;
    if (!hal::NvmlFindsCards(o.nvml_library, o.interval, &why)) {
      spdlog::info("HAL nvml backend off: {} (--hal=nvml would retry)", why);
      return Status::Ok();
    }
    spdlog::info("HAL nvml: {}", why);
  }
  spdlog::info("HAL backend nvml through {}, every {} ms", o.nvml_library, o.interval.count());
  hal::NvmlSampler::Options options;
  options.library = o.nvml_library;
  options.interval = o.interval;
  options.host_proc = o.nvml_host_proc;
  if (c.files.kmsg) {  // Xid events as the kernel log's catalog names them: both sources agree
    options.event_active_for = c.files.kmsg->event_active_for();
    options.states = c.files.kmsg->states();
  }
  *out = std::make_unique<hal::NvmlSampler>(std::move(options), c.files.faults, c.devices,
                                            c.metrics, c.exemplars, c.shared_metrics);
  return Status::Ok();
}

// The kubelet's PodResources: off when its socket flag is empty.
Status MakePods(const PartContext& c, std::unique_ptr<Part>* out) {
  if (c.cfg.kubelet.socket.empty()) return Status::Ok();
  *out =
      std::make_unique<kubelet::PodMapper>(c.cfg.kubelet, c.cfg.parsed->dra, c.devices, c.metrics);
  return Status::Ok();
}

// The API server's pod watch: where an API server is used.
Status MakeWatcher(const PartContext& c, std::unique_ptr<Part>* out) {
  std::string why_off;
  const std::string api = kubernetes::ResolveApiServer(c.cfg.kubernetes, &why_off);
  if (api.empty()) {
    spdlog::info("kubernetes: no API-server watch: {}", why_off);
    return Status::Ok();
  }
  *out = std::make_unique<kubernetes::PodWatcher>(c.cfg.kubernetes, c.cfg.parsed->labels, api,
                                                  c.devices, c.metrics);
  return Status::Ok();
}

// The Node's condition and Events, when asked for and an API server is used.
Status MakeReporter(const PartContext& c, std::unique_ptr<Part>* out) {
  const sinks::NodeHealthOptions& nh = c.cfg.node_health;
  if (!nh.condition && !nh.events) return Status::Ok();
  std::string why_off;
  const std::string api = kubernetes::ResolveApiServer(c.cfg.kubernetes, &why_off);
  if (api.empty()) {
    spdlog::warn("kubernetes: no node condition or Events: {}", why_off);
    return Status::Ok();
  }
  sinks::NodeReporter::Options o;
  o.condition = nh.condition;
  o.events = nh.events;
  o.recover_hold = nh.hold;
  for (const PartKind& k : PartTable())  // the health sources that run
    if (k.health_source != nullptr && c.on(k.name)) o.sources.insert(k.health_source);
  *out = std::make_unique<sinks::NodeReporter>(c.cfg.kubernetes, o, api, c.devices, c.metrics);
  return Status::Ok();
}

// The catalogs' files are read again on each reload: their contents may have
// changed.
bool HalFilesNamed(const Config& cfg) {
  return !cfg.hal.fault_catalog_file.empty() || !cfg.hal.kmsg_catalog_file.empty();
}

// The Node reporter's settings changed: a condition switched off leaves no
// gauge behind.
bool NodeHealthChanged(const Config& running, const Config& next) {
  return !(running.node_health == next.node_health);
}

}  // namespace

const std::vector<PartKind>& PartTable() {
  static const std::vector<PartKind> table = {
      {"hal", Applier::kHal, HalFilesNamed, {}, nullptr, MakeSysfs, store::kSourceSysfs},
      {"pci", Applier::kHal, HalFilesNamed, {}, nullptr, MakePci, store::kSourcePci},
      {"kmsg", Applier::kHal, HalFilesNamed, {}, nullptr, MakeKmsg, store::kSourceKmsg},
      {"nvml", Applier::kHal, HalFilesNamed, {}, nullptr, MakeNvml, hal::kSourceNvml},
      {"kubelet", Applier::kPods, nullptr, {}, nullptr, MakePods},
      {"apiserver", Applier::kWatcher, nullptr, {}, nullptr, MakeWatcher},
      // It names the HAL backends that run and uses the API server's settings.
      {"nodehealth",
       Applier::kNodeHealth,
       nullptr,
       {kHealthSources, "apiserver"},
       NodeHealthChanged,
       MakeReporter},
  };
  return table;
}

}  // namespace xpu::app
