#include "store/device_registry.h"

#include <algorithm>
#include <charconv>
#include <map>
#include <string>

#include "common/metric_family.h"
#include "store/pci_families.h"

namespace xpu::store {
namespace {

int32_t MinorOfView(const DeviceInfo& d) { return d.minor; }
int32_t MinorOfView(const HalDeviceView& d) { return d.minor; }
int32_t MinorOfView(const DeviceView& d) { return d.minor; }
// A PCI function not joined to a device has no minor.
int32_t MinorOfView(const PciDeviceView& d) {
  return d.minor.empty() ? -1 : static_cast<int32_t>(std::stol(d.minor));
}

// Keeps the views of the chosen devices (--collector.devices); every one when
// none is chosen.
template <typename View>
void KeepChosen(const std::set<int32_t>& chosen, std::vector<View>* views) {
  if (chosen.empty()) return;
  std::erase_if(*views, [&](const View& v) { return chosen.count(MinorOfView(v)) == 0; });
}

// A DeviceViews with only the chosen devices, and only their samples in its
// families (a sample without a minor, or of a device not joined, is no
// chosen device's).
void KeepChosen(const std::set<int32_t>& chosen, DeviceViews* views) {
  if (chosen.empty()) return;
  KeepChosen(chosen, &views->devices);
  for (prometheus::MetricFamily& family : views->families) {
    std::erase_if(family.metric, [&](const prometheus::ClientMetric& m) {
      for (const prometheus::ClientMetric::Label& l : m.label) {
        if (l.name != "minor") continue;
        int32_t minor = -1;
        const auto [end, ec] =
            std::from_chars(l.value.data(), l.value.data() + l.value.size(), minor);
        return ec != std::errc() || end != l.value.data() + l.value.size() ||
               chosen.count(minor) == 0;
      }
      return true;
    });
  }
}

// The merged views in order, health following the worst active fault.
std::vector<HalDeviceView> MergedOf(std::map<int32_t, HalDeviceView>* merged) {
  std::vector<HalDeviceView> out;
  for (auto& [minor, h] : *merged) {
    h.healthy = HealthWithFaults(h.healthy, h.faults);
    out.push_back(std::move(h));
  }
  return out;
}

}  // namespace

bool DeviceRegistry::SetXdmDevices(std::vector<DeviceInfo> devices) {
  MutexLock lock(mu_);
  xdm_raw_ = std::move(devices);
  return RefilterLocked();
}

bool DeviceRegistry::RefilterLocked() {
  std::vector<DeviceInfo> devices = xdm_raw_;
  KeepChosen(filter_, &devices);
  if (known_ && devices == devices_) return false;
  devices_ = std::move(devices);
  known_ = true;
  if (listener_) listener_(devices_);
  return true;
}

void DeviceRegistry::SetDeviceFilter(std::set<int32_t> minors) {
  MutexLock lock(mu_);
  filter_ = std::move(minors);
  if (known_) RefilterLocked();
  // The HAL's and PCI's views now; their next samples filter too.
  KeepChosen(filter_, &hal_);
  KeepChosen(filter_, &pci_);
  for (auto& [source, views] : views_) KeepChosen(filter_, &views);
}

void DeviceRegistry::OnXdmDevicesChanged(DevicesListener listener) {
  MutexLock lock(mu_);
  listener_ = std::move(listener);
}

std::vector<DeviceInfo> DeviceRegistry::Devices() const {
  MutexLock lock(mu_);
  return devices_;
}

void DeviceRegistry::SetXdmLive(bool live) {
  MutexLock lock(mu_);
  xdm_live_ = live;
}

void DeviceRegistry::SetHalDevices(std::vector<HalDeviceView> devices) {
  MutexLock lock(mu_);
  KeepChosen(filter_, &devices);
  hal_ = std::move(devices);
  ++views_set_.hal;
  SeenLocked(kSourceSysfs);
}

void DeviceRegistry::SetClock(Clock clock) {
  MutexLock lock(mu_);
  clock_ = std::move(clock);
}

std::chrono::steady_clock::time_point DeviceRegistry::NowLocked() const {
  return clock_ ? clock_() : std::chrono::steady_clock::now();
}

void DeviceRegistry::OpenSource(const std::string& source, std::chrono::milliseconds interval) {
  MutexLock lock(mu_);
  sources_[source].interval = interval;
}

void DeviceRegistry::SetSourceBlind(const std::string& source, std::string why) {
  MutexLock lock(mu_);
  SourceState& s = sources_[source];
  s.blind = true;
  s.why = std::move(why);
}

void DeviceRegistry::CloseSource(const std::string& source) {
  MutexLock lock(mu_);
  sources_.erase(source);
  if (source == kSourceSysfs) hal_.clear();
  if (source == kSourcePci) pci_.clear();
  if (source == kSourceKmsg) kmsg_.clear();
  views_.erase(source);
}

void DeviceRegistry::SeenLocked(const std::string& source) {
  SourceState& s = sources_[source];
  s.blind = false;
  s.why.clear();
  s.seen_at = NowLocked();
}

bool DeviceRegistry::FreshLocked(const std::string& source) const {
  auto it = sources_.find(source);
  if (it == sources_.end() || !it->second.seen_at) return false;
  return NowLocked() - *it->second.seen_at <= kStaleIntervals * it->second.interval;
}

Sight DeviceRegistry::SightLocked(const std::string& source) const {
  auto it = sources_.find(source);
  if (it == sources_.end()) return Sight::kNotYet;
  if (it->second.blind) return Sight::kBlind;
  if (!it->second.seen_at) return Sight::kNotYet;
  return FreshLocked(source) ? Sight::kSeeing : Sight::kStale;
}

std::vector<SourceView> DeviceRegistry::SourceViews() const {
  MutexLock lock(mu_);
  std::map<int32_t, std::string> bus_of;
  for (const DeviceInfo& d : devices_) bus_of[d.minor] = d.bus_id;
  std::vector<SourceView> out;
  for (const auto& [name, state] : sources_) {
    SourceView v;
    v.source = name;
    v.sight = SightLocked(name);
    v.why = state.why;
    v.joins_device_list = name != kSourceSysfs;
    if (name == kSourceSysfs) {
      for (const HalDeviceView& h : hal_)  // a device whose faults could not be read is not seen
        if (h.faults_read) v.devices.push_back({h.minor, bus_of[h.minor], h.faults});
    } else if (name == kSourcePci) {
      for (const PciDeviceView& p : pci_)
        v.devices.push_back({p.minor.empty() ? -1 : std::stoi(p.minor), p.bus_id, p.faults});
    } else if (name == kSourceKmsg) {
      for (const KmsgDeviceView& k : kmsg_) v.devices.push_back({k.minor, k.bus_id, k.faults});
    } else if (auto it = views_.find(name); it != views_.end()) {
      // It names its devices itself: they count without XDM's list.
      v.joins_device_list = false;
      // A device whose health it could not read is not seen, unless a
      // card-level fault it shows all the same judges it.
      for (const DeviceView& d : it->second.devices)
        if (HealthWithFaults(d.healthy, d.faults))
          v.devices.push_back({d.minor, d.bus_id, d.faults});
    }
    out.push_back(std::move(v));
  }
  return out;
}

DeviceRegistry::FaultViewsSet DeviceRegistry::fault_views_set() const {
  MutexLock lock(mu_);
  FaultViewsSet set = views_set_;
  set.devices_known = known_;
  return set;
}

std::vector<HalDeviceView> DeviceRegistry::HalDevices() const {
  MutexLock lock(mu_);
  return MergedHalLocked();
}

std::vector<HalDeviceView> DeviceRegistry::MergedHalLocked() const {
  std::map<int32_t, HalDeviceView> merged;
  if (FreshLocked(kSourceSysfs))
    for (const HalDeviceView& h : hal_) merged[h.minor] = h;
  if (!FreshLocked(kSourcePci)) return MergedOf(&merged);
  for (const PciDeviceView& p : pci_) {
    if (p.minor.empty()) continue;  // not joined to a device XDM lists
    const int32_t minor = std::stoi(p.minor);
    auto [it, fresh] = merged.try_emplace(minor);
    HalDeviceView& h = it->second;
    if (fresh) {
      h.minor = minor;
      h.uuid = p.uuid;
      h.healthy = true;
    }
    for (const ActiveFault& f : p.faults) {
      if (std::find(h.faults.begin(), h.faults.end(), f) == h.faults.end()) h.faults.push_back(f);
    }
  }
  return MergedOf(&merged);
}

void DeviceRegistry::SetPodAssignments(std::vector<PodAssignment> pods) {
  MutexLock lock(mu_);
  pods_ = std::move(pods);
}

void DeviceRegistry::SetPodMetadata(std::vector<PodMetadata> pods) {
  MutexLock lock(mu_);
  pod_labels_.clear();
  pod_uids_.clear();
  // Every pod that claims a uid is kept: two may (any pod may carry a
  // static pod's mirror annotation), and a container is named only where
  // one of them alone lists its id.
  for (PodMetadata& p : pods) {
    if (!p.uid.empty())
      pod_uids_[p.uid].push_back({p.namespace_, p.pod, {p.containers.begin(), p.containers.end()}});
    if (!p.labels.empty())
      pod_labels_[{std::move(p.namespace_), std::move(p.pod)}] = std::move(p.labels);
  }
}

void DeviceRegistry::SetContainerQuotas(std::vector<ContainerQuota> quotas) {
  MutexLock lock(mu_);
  quotas_ = std::move(quotas);
}

void DeviceRegistry::SetDeviceShares(std::vector<DeviceShare> shares) {
  MutexLock lock(mu_);
  shares_ = std::move(shares);
}

std::string DeviceRegistry::MinorOfLocked(const std::string& uuid) const {
  for (const DeviceInfo& d : devices_)
    if (d.uuid == uuid) return std::to_string(d.minor);
  for (const HalDeviceView& h : hal_)
    if (h.uuid == uuid) return std::to_string(h.minor);
  return {};
}

std::vector<PodAssignment> DeviceRegistry::PodAssignments() const {
  MutexLock lock(mu_);
  return pods_;
}

void DeviceRegistry::SetPciDevices(std::vector<PciDeviceView> devices) {
  // With a subset chosen, a PCI function counts only when joined to one of it.
  MutexLock lock(mu_);
  KeepChosen(filter_, &devices);
  pci_ = std::move(devices);
  if (known_) ++views_set_.pci;
  SeenLocked(kSourcePci);
}

void DeviceRegistry::SetKmsgDevices(std::optional<std::vector<KmsgDeviceView>> devices) {
  if (!devices) return CloseSource(kSourceKmsg);
  MutexLock lock(mu_);
  if (!filter_.empty()) {  // a subset chosen: only its devices
    std::vector<KmsgDeviceView> chosen;
    for (KmsgDeviceView& d : *devices)
      if (filter_.count(d.minor) != 0) chosen.push_back(std::move(d));
    devices = std::move(chosen);
  }
  if (known_) ++views_set_.kmsg;
  kmsg_ = std::move(*devices);
  SeenLocked(kSourceKmsg);
}

void DeviceRegistry::SetDeviceViews(const std::string& source, DeviceViews views) {
  MutexLock lock(mu_);
  KeepChosen(filter_, &views);
  ++views_set_.others[source];
  views_[source] = std::move(views);
  SeenLocked(source);
}

std::map<std::string, std::vector<DeviceView>> DeviceRegistry::SeenDeviceViews() const {
  MutexLock lock(mu_);
  std::map<std::string, std::vector<DeviceView>> out;
  for (const auto& [source, views] : views_)
    if (SightLocked(source) == Sight::kSeeing) out[source] = views.devices;
  return out;
}

std::vector<KmsgDeviceView> DeviceRegistry::KmsgDevices() const {
  MutexLock lock(mu_);
  return FreshLocked(kSourceKmsg) ? kmsg_ : std::vector<KmsgDeviceView>{};
}

std::vector<PciDeviceView> DeviceRegistry::PciDevices() const {
  MutexLock lock(mu_);
  return FreshLocked(kSourcePci) ? pci_ : std::vector<PciDeviceView>{};
}

std::optional<double> PciDeviceView::capable_link_speed() const {
  if (max_link_speed && port_max_link_speed) return std::min(*max_link_speed, *port_max_link_speed);
  return max_link_speed;
}

std::optional<int> PciDeviceView::capable_link_width() const {
  if (max_link_width && port_max_link_width) return std::min(*max_link_width, *port_max_link_width);
  return max_link_width;
}

struct DeviceRegistry::Families {
  prometheus::MetricFamily info = NewFamily(
      "xpu_device_info",
      "Static information about a device from XDM (ListAndWatch, ListGpuInfo); always 1.");
  prometheus::MetricFamily topo =
      NewFamily("xpu_device_topology_info",
                "One series per topology level of a device (ListAndWatch "
                "extenderResources topology), nearest level first; always 1.");
  prometheus::MetricFamily health =
      NewFamily("xpu_device_health", "Device health as each source sees it: 1 healthy, 0 not.");
  prometheus::MetricFamily active =
      NewFamily("xpu_device_fault_active",
                "A fault code the HAL reports active on a device, with its catalog level; "
                "always 1 while active.");
  prometheus::MetricFamily events =
      NewFamily("xpu_device_fault_events_total", kFaultEventsHelp, prometheus::MetricType::Counter);
  prometheus::MetricFamily level =
      NewFamily("xpu_device_fault_level",
                "Most severe active fault level on a device (0 none, 1 retry_request, "
                "2 restart_job, 3 restart_card, 4 reset_card, 5 isolate_after_job, "
                "6 isolate_card).");
  prometheus::MetricFamily pods =
      NewFamily("xpu_device_pod_info",
                "A container that the kubelet reports holding a device (PodResources "
                "API: device plugin resource, or DRA claim, driver, pool and device); "
                "always 1. Join on uuid to attribute device metrics to pods.");
  prometheus::MetricFamily mem_limit =
      NewFamily("xpu_container_memory_limit_bytes",
                "Device memory a container may use on a shared device (HAMi's grant "
                "in the pod annotation hami.io/*-devices-allocated).");
  prometheus::MetricFamily mem_used = NewFamily(
      "xpu_container_memory_used_bytes",
      "Device memory a container's processes hold on a device, as the source reads the "
      "device's processes (nvml), each joined to its pod by its cgroup (--hal.nvml.host-proc); "
      "only for pods the API server's watch gives.");
  prometheus::MetricFamily core_limit =
      NewFamily("xpu_container_core_limit_ratio",
                "Share of a shared device's cores a container may use (HAMi's "
                "grant), 0..1.");
  prometheus::MetricFamily split = NewFamily(
      "xpu_device_split_count", "How many containers may share the device (HAMi's node register).");
  prometheus::MetricFamily shared_mem =
      NewFamily("xpu_device_shared_memory_bytes", "Device memory HAMi's device plugin shares out.");
  prometheus::MetricFamily shared_cores =
      NewFamily("xpu_device_shared_core_ratio",
                "Share of the device's cores HAMi's device plugin shares out, 0..1.");
  prometheus::MetricFamily shared_health = NewFamily(
      "xpu_device_shared_healthy", "Whether HAMi's device plugin registered the device healthy.");
  prometheus::MetricFamily source_up =
      NewFamily("xpu_exporter_source_up",
                "Whether a health source can see now: 1 its last view is fresh and its last try "
                "read the hardware; 0 it is blind, its view stale, or none came yet (its device "
                "health series are then withdrawn).");
  prometheus::MetricFamily source_age =
      NewFamily("xpu_exporter_source_view_age_seconds",
                "How old a health source's last view is (absent before the first).");
};

void DeviceRegistry::WriteIdentityLocked(Families* f) const {
  for (const DeviceInfo& d : devices_) {
    const std::string minor = std::to_string(d.minor);
    MetricLabels labels = {{"minor", minor}};
    for (const DeviceInfoLabel& l : kDeviceInfoLabels) labels.push_back({l.name, l.format(d)});
    f->info.metric.push_back(GaugeSample(std::move(labels), 1));
    for (const TopologyLevel& t : d.topology) {
      f->topo.metric.push_back(GaugeSample({{"minor", minor},
                                            {"uuid", d.uuid},
                                            {"level", std::to_string(t.level)},
                                            {"name", t.name},
                                            {"group", t.group},
                                            {"peers", t.peers}},
                                           1));
    }
    if (xdm_live_)
      f->health.metric.push_back(GaugeSample(
          {{"minor", minor}, {"uuid", d.uuid}, {"source", "xdm"}}, d.health == "Healthy"));
  }
}

namespace {

// One device's active faults from `source` (fault_active, fault_level).
void WriteDeviceFaults(prometheus::MetricFamily* active, prometheus::MetricFamily* level,
                       const std::string& minor, const std::string& uuid,
                       const std::vector<ActiveFault>& faults, const char* source) {
  for (const ActiveFault& a : faults) {
    active->metric.push_back(GaugeSample({{"minor", minor},
                                          {"uuid", uuid},
                                          {"code", a.code},
                                          {"level", a.level_name},
                                          {"source", source}},
                                         1));
  }
  level->metric.push_back(
      GaugeSample({{"minor", minor}, {"uuid", uuid}, {"source", source}}, WorstLevel(faults)));
}

}  // namespace

void DeviceRegistry::WriteFaultsLocked(Families* f) const {
  // The merged "hal" health says nothing while either of its sources that
  // is open cannot see.
  bool seeing = true;
  for (const char* source : {kSourceSysfs, kSourcePci})
    if (sources_.count(source) != 0 && SightLocked(source) != Sight::kSeeing) seeing = false;
  for (const HalDeviceView& h : MergedHalLocked()) {
    const std::string minor = std::to_string(h.minor);
    if (h.healthy && seeing)
      f->health.metric.push_back(
          GaugeSample({{"minor", minor}, {"uuid", h.uuid}, {"source", "hal"}}, *h.healthy ? 1 : 0));
    WriteDeviceFaults(&f->active, &f->level, minor, h.uuid, h.faults, "hal");
  }
}

void DeviceRegistry::WriteKmsgLocked(Families* f) const {
  if (!FreshLocked(kSourceKmsg)) return;
  const bool seeing = SightLocked(kSourceKmsg) == Sight::kSeeing;
  for (const KmsgDeviceView& k : kmsg_) {
    const std::string minor = std::to_string(k.minor);
    WriteDeviceFaults(&f->active, &f->level, minor, k.uuid, k.faults, "kmsg");
    // The log judges every card it names: healthy unless a fault says not.
    if (seeing)
      f->health.metric.push_back(
          GaugeSample({{"minor", minor}, {"uuid", k.uuid}, {"source", "kmsg"}},
                      *HealthWithFaults(true, k.faults)));
    for (const KmsgDeviceView::Events& e : k.events) {
      f->events.metric.push_back(CounterSample({{"minor", minor},
                                                {"uuid", k.uuid},
                                                {"code", e.code},
                                                {"level", e.level_name},
                                                {"source", "kmsg"}},
                                               static_cast<double>(e.count)));
    }
  }
}

void DeviceRegistry::WriteViewsLocked(Families* f,
                                      std::vector<prometheus::MetricFamily>* out) const {
  for (const auto& [source, views] : views_) {
    if (!FreshLocked(source)) continue;
    const bool seeing = SightLocked(source) == Sight::kSeeing;
    for (const DeviceView& d : views.devices) {
      const std::string minor = d.minor >= 0 ? std::to_string(d.minor) : "";
      WriteDeviceFaults(&f->active, &f->level, minor, d.uuid, d.faults, source.c_str());
      // Health follows the worst active fault too, as every source's does.
      if (const std::optional<bool> healthy = HealthWithFaults(d.healthy, d.faults);
          seeing && healthy)
        f->health.metric.push_back(
            GaugeSample({{"minor", minor}, {"uuid", d.uuid}, {"source", source}}, *healthy));
      if (seeing) WriteContainerMemoryLocked(f, minor, d, source);
    }
    out->insert(out->end(), views.families.begin(), views.families.end());
  }
}

// A container's memory on the device, for a pod the API server gave (its
// uid) and a container it alone names; any other is no one the page can name.
void DeviceRegistry::WriteContainerMemoryLocked(Families* f, const std::string& minor,
                                                const DeviceView& d,
                                                const std::string& source) const {
  for (const ContainerMemory& m : d.containers) {
    const auto claimants = pod_uids_.find(m.pod_uid);
    if (claimants == pod_uids_.end()) continue;
    const PodByUid* pod = nullptr;
    const std::string* container = nullptr;
    int naming = 0;  // claimants that list the id: named only when one does
    for (const PodByUid& p : claimants->second) {
      if (const auto c = p.containers.find(m.container_id); c != p.containers.end()) {
        pod = &p;
        container = &c->second;
        ++naming;
      }
    }
    if (naming != 1) continue;
    f->mem_used.metric.push_back(GaugeSample({{"minor", minor},
                                              {"uuid", d.uuid},
                                              {"namespace", pod->namespace_},
                                              {"pod", pod->pod},
                                              {"container", *container},
                                              {"source", source}},
                                             static_cast<double>(m.bytes)));
  }
}

void DeviceRegistry::WritePodsLocked(Families* f) const {
  for (const PodAssignment& p : pods_) {
    const std::string minor = MinorOfLocked(p.uuid);
    std::vector<prometheus::ClientMetric::Label> labels = {{"minor", minor},
                                                           {"uuid", p.uuid},
                                                           {"namespace", p.namespace_},
                                                           {"pod", p.pod},
                                                           {"container", p.container}};
    // Device plugin rows have a resource, DRA rows the claim's names; an
    // empty label is no label to Prometheus, so it is left out.
    for (const auto& [name, value] : {std::pair{"resource", &p.resource},
                                      {"claim", &p.claim},
                                      {"driver", &p.driver},
                                      {"pool", &p.pool},
                                      {"device", &p.device}})
      if (!value->empty()) labels.push_back({name, *value});
    // The API server's allowlisted pod labels, when it is watched.
    if (auto it = pod_labels_.find({p.namespace_, p.pod}); it != pod_labels_.end())
      for (const auto& [name, value] : it->second) labels.push_back({name, value});
    f->pods.metric.push_back(GaugeSample(std::move(labels), 1));
  }
}

void DeviceRegistry::WriteSharesLocked(Families* f) const {
  for (const ContainerQuota& q : quotas_) {
    std::vector<prometheus::ClientMetric::Label> l = {{"minor", MinorOfLocked(q.uuid)},
                                                      {"uuid", q.uuid},
                                                      {"namespace", q.namespace_},
                                                      {"pod", q.pod},
                                                      {"container", q.container}};
    if (q.memory_bytes > 0)
      f->mem_limit.metric.push_back(GaugeSample(l, static_cast<double>(q.memory_bytes)));
    if (q.core_ratio > 0) f->core_limit.metric.push_back(GaugeSample(l, q.core_ratio));
  }
  for (const DeviceShare& d : shares_) {
    std::vector<prometheus::ClientMetric::Label> l = {{"minor", MinorOfLocked(d.uuid)},
                                                      {"uuid", d.uuid}};
    f->split.metric.push_back(GaugeSample(l, static_cast<double>(d.split_count)));
    f->shared_mem.metric.push_back(GaugeSample(l, static_cast<double>(d.memory_bytes)));
    f->shared_cores.metric.push_back(GaugeSample(l, d.core_ratio));
    f->shared_health.metric.push_back(GaugeSample(l, d.healthy ? 1 : 0));
  }
}

void DeviceRegistry::WriteSourcesLocked(Families* f) const {
  const auto now = NowLocked();
  for (const auto& [name, state] : sources_) {
    f->source_up.metric.push_back(
        GaugeSample({{"source", name}}, SightLocked(name) == Sight::kSeeing ? 1 : 0));
    if (state.seen_at)
      f->source_age.metric.push_back(GaugeSample(
          {{"source", name}}, std::chrono::duration<double>(now - *state.seen_at).count()));
  }
}

std::vector<prometheus::MetricFamily> DeviceRegistry::Collect() const {
  MutexLock lock(mu_);
  Families f;
  WriteIdentityLocked(&f);
  WriteFaultsLocked(&f);
  WriteKmsgLocked(&f);
  WritePodsLocked(&f);
  WriteSharesLocked(&f);
  WriteSourcesLocked(&f);
  std::vector<prometheus::MetricFamily> views;
  WriteViewsLocked(&f, &views);
  std::vector<prometheus::MetricFamily> out;
  for (prometheus::MetricFamily* family :
       {&f.pods, &f.mem_limit, &f.mem_used, &f.core_limit, &f.split, &f.shared_mem, &f.shared_cores,
        &f.shared_health, &f.active, &f.events, &f.level, &f.info, &f.topo, &f.health, &f.source_up,
        &f.source_age}) {
    if (!family->metric.empty()) out.push_back(std::move(*family));
  }
  if (FreshLocked(kSourcePci)) {
    for (prometheus::MetricFamily& family : PciFamilies(pci_)) out.push_back(std::move(family));
  }
  for (prometheus::MetricFamily& family : views) out.push_back(std::move(family));
  return out;
}

}  // namespace xpu::store
