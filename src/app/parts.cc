#include "app/parts.h"

#include <spdlog/spdlog.h>

#include "hal/backend.h"
#include "kubelet/pod_mapper.h"
#include "kubernetes/pod_watcher.h"
#include "sinks/device_tainter.h"
#include "sinks/node_reporter.h"

namespace xpu::app {
namespace {

// A HAL backend's factory (hal::BackendKind::make) from the exporter's
// context.
Status MakeHal(const hal::BackendKind& kind, const PartContext& c, std::unique_ptr<Part>* out) {
  return kind.make(
      hal::BackendContext{c.cfg.hal, c.cfg.parsed->hal, c.cfg.parsed->pci_filter, c.files.faults,
                          c.files.kmsg, c.devices, c.exemplars, c.shared_metrics, c.metrics},
      out);
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

// A DeviceTaintRule per faulted card, when asked for and an API server is
// used.
Status MakeTainter(const PartContext& c, std::unique_ptr<Part>* out) {
  const sinks::NodeHealthOptions& nh = c.cfg.node_health;
  if (!nh.device_taints) return Status::Ok();
  std::string why_off;
  const std::string api = kubernetes::ResolveApiServer(c.cfg.kubernetes, &why_off);
  if (api.empty()) {
    spdlog::warn("kubernetes: no device taints: {}", why_off);
    return Status::Ok();
  }
  sinks::DeviceTainter::Options o;
  o.effect = nh.taint_effect;
  o.evict_level = c.cfg.parsed->taint_evict_level;
  o.hold = nh.hold;
  for (const PartKind& k : PartTable())  // the health sources that run
    if (k.health_source != nullptr && c.on(k.name)) o.sources.insert(k.health_source);
  *out = std::make_unique<sinks::DeviceTainter>(c.cfg.kubernetes, o, c.cfg.parsed->dra, api,
                                                c.devices, c.metrics);
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
  static const std::vector<PartKind> table = [] {
    std::vector<PartKind> t;
    // Every HAL backend (src/hal/backends.cc): a health source each.
    for (const hal::BackendKind& k : hal::BackendKinds())
      t.push_back(
          {k.part,
           Applier::kHal,
           HalFilesNamed,
           {},
           nullptr,
           [&k](const PartContext& c, std::unique_ptr<Part>* out) { return MakeHal(k, c, out); },
           k.name});
    t.push_back({"kubelet", Applier::kPods, nullptr, {}, nullptr, MakePods});
    t.push_back({"apiserver", Applier::kWatcher, nullptr, {}, nullptr, MakeWatcher});
    // It names the health sources that run and uses the API server's settings.
    t.push_back({"nodehealth",
                 Applier::kNodeHealth,
                 nullptr,
                 {kHealthSources, "apiserver"},
                 NodeHealthChanged,
                 MakeReporter});
    // It reads the health sources' views and the kubelet's DRA names.
    t.push_back({"devicetaints",
                 Applier::kNodeHealth,
                 nullptr,
                 {kHealthSources, "apiserver", "kubelet"},
                 NodeHealthChanged,
                 MakeTainter});
    return t;
  }();
  return table;
}

}  // namespace xpu::app
