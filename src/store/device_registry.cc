#include "store/device_registry.h"

#include <algorithm>
#include <charconv>
#include <map>
#include <string>

#include "common/metric_family.h"
#include "hal/pci_address.h"
#include "store/pci_families.h"

namespace xpu::store {
namespace {

constexpr size_t kNone = static_cast<size_t>(-1);

// A family's samples of the chosen devices only (--xdm.devices): a sample
// without a minor, or of a device not named, is no chosen device's.
void KeepChosen(const std::set<int32_t>& chosen, std::vector<prometheus::MetricFamily>* families) {
  if (chosen.empty()) return;
  for (prometheus::MetricFamily& family : *families) {
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

std::string MinorLabel(int32_t minor) { return minor >= 0 ? std::to_string(minor) : ""; }

// The one join (DeviceRegistry::Inventory): cards found by their bus
// address, else their minor, else their uuid; what a layer knows is added to
// the card it names.
class InventoryBuilder {
 public:
  size_t Find(const std::string& bus, int32_t minor, const std::string& uuid) const {
    if (!bus.empty()) {
      auto it = by_bus_.find(bus);
      // A card with an address is another card than one at another address.
      if (it != by_bus_.end()) return it->second;
    }
    if (minor >= 0)
      if (auto it = by_minor_.find(minor); it != by_minor_.end() && Fits(it->second, bus))
        return it->second;
    if (!uuid.empty())
      if (auto it = by_uuid_.find(uuid); it != by_uuid_.end() && Fits(it->second, bus))
        return it->second;
    return kNone;
  }
  // Whether a card is named by `minor` or by `uuid` already.
  bool Knows(int32_t minor, const std::string& uuid) const {
    return (minor >= 0 && by_minor_.count(minor) != 0) ||
           (!uuid.empty() && by_uuid_.count(uuid) != 0);
  }
  // Finds the card or adds it; fills in what it lacks.
  size_t Name(const std::string& bus, int32_t minor, const std::string& uuid,
              const std::string& model) {
    if (bus.empty() && minor < 0 && uuid.empty()) return kNone;  // names nothing
    size_t i = Find(bus, minor, uuid);
    if (i == kNone) {
      i = devices.size();
      devices.emplace_back();
    }
    InventoryDevice& d = devices[i];
    if (d.bus_id.empty() && !bus.empty()) by_bus_[d.bus_id = bus] = i;
    if (d.minor < 0 && minor >= 0 && by_minor_.count(minor) == 0) by_minor_[d.minor = minor] = i;
    if (d.uuid.empty() && !uuid.empty() && by_uuid_.count(uuid) == 0) by_uuid_[d.uuid = uuid] = i;
    if (d.model.empty()) d.model = model;
    return i;
  }
  std::vector<InventoryDevice> devices;

 private:
  bool Fits(size_t i, const std::string& bus) const {
    return bus.empty() || devices[i].bus_id.empty() || devices[i].bus_id == bus;
  }
  std::map<std::string, size_t> by_bus_;
  std::map<int32_t, size_t> by_minor_;
  std::map<std::string, size_t> by_uuid_;
};

// The views of one source that name the same card (two sysfs devices whose
// `device` links name one address, a daemon listing two minors at one
// address) as one, from the first: each fault once, the worse health, seen
// only where each was, the events and the memory of all. A view that was
// read and says the card is bad is sight enough of that: another's failed
// read does not hide it. The page has one series a card and a source, and
// the Node condition judges what the page shows.
DeviceView MergeViews(const std::vector<const DeviceView*>& views) {
  DeviceView m = *views.front();
  auto seen_bad = [](const DeviceView& d) {
    return d.seen && HealthWithFaults(d.healthy, d.faults) == std::optional<bool>(false);
  };
  bool bad = seen_bad(m);
  for (auto v = views.begin() + 1; v != views.end(); ++v) {
    const DeviceView& d = **v;
    for (const ActiveFault& fault : d.faults) AddFault(&m.faults, fault);
    m.healthy = WorseHealth(m.healthy, d.healthy);
    m.seen = m.seen && d.seen;
    bad = bad || seen_bad(d);
    for (const DeviceView::Events& e : d.events) {
      auto it = std::find_if(m.events.begin(), m.events.end(),
                             [&](const DeviceView::Events& x) { return x.code == e.code; });
      if (it == m.events.end()) {
        m.events.push_back(e);
      } else {
        it->count += e.count;
      }
    }
    m.containers.insert(m.containers.end(), d.containers.begin(), d.containers.end());
  }
  if (bad) {
    m.seen = true;
    m.healthy = false;
  }
  return m;
}

// What a source's devices that name one card say of it into `d` (as
// MergeViews has them): what it read of the card's health this sample (a
// health bit read while its faults could not be) and its faults; seen: read
// this sample, and judged (health read, or a card-level fault that judges it).
void JoinListed(const std::vector<const DeviceView*>& listed, SourceView::Device* d) {
  DeviceView m = listed.size() == 1 ? DeviceView{} : MergeViews(listed);
  const DeviceView& v = listed.size() == 1 ? *listed.front() : m;
  d->faults = v.faults;
  d->healthy = v.healthy;
  d->seen = v.seen && HealthWithFaults(v.healthy, v.faults).has_value();
}

// Whether a source's view `v` answers for card `d` it does not list; `kin`:
// the vendors of the cards it lists.
bool Covers(const DeviceViews& v, const InventoryDevice& d, const std::set<std::string>& kin) {
  switch (v.coverage) {
    case Coverage::kListed:
      return !v.vendor.empty() && d.vendor == v.vendor &&
             (v.driver.empty() || d.driver.empty() || d.driver == v.driver);
    case Coverage::kListedAndKin:
      return kin.empty() ? d.xdm : !d.vendor.empty() && kin.count(d.vendor) != 0;
    case Coverage::kAddressedSilent:
      return !d.bus_id.empty();
  }
  return false;
}

}  // namespace

struct DeviceRegistry::Joined {
  std::vector<InventoryDevice> inventory;
  std::map<std::string, size_t> by_bus;
  std::map<int32_t, size_t> by_minor;
  std::map<std::string, size_t> by_uuid;
  // Each fresh source's view, its devices' inventory indexes (kNone: not a
  // card of the inventory, or not chosen).
  struct Source {
    const std::string* name;
    const DeviceViews* views;
    std::vector<size_t> at;
  };
  std::vector<Source> sources;
  // The pci source's view, each function named from the inventory (its
  // families), chosen ones only; empty while it is not fresh.
  std::vector<PciDeviceView> pci;
  // The card a source names: by its address when it gives one, else by its
  // minor, else by its uuid.
  size_t Find(const std::string& bus, int32_t minor, const std::string& uuid) const {
    if (!bus.empty()) {
      auto it = by_bus.find(bus);
      return it == by_bus.end() ? kNone : it->second;
    }
    if (minor >= 0)
      if (auto it = by_minor.find(minor); it != by_minor.end()) return it->second;
    if (!uuid.empty())
      if (auto it = by_uuid.find(uuid); it != by_uuid.end()) return it->second;
    return kNone;
  }
};

const DeviceRegistry::Joined& DeviceRegistry::JoinLocked() const {
  // Made again only when a setter changed what it is made from, or a
  // source's view went stale: a scrape of an unchanged node reuses it.
  uint64_t fresh = 0;
  size_t bit = 0;
  for (const auto& [name, state] : sources_) {
    if (FreshLocked(name)) fresh |= uint64_t{1} << std::min<size_t>(bit, 63);
    ++bit;
  }
  if (joined_ && joined_gen_ == gen_ && joined_fresh_ == fresh) return *joined_;
  InventoryBuilder b;
  // No layer's absence removes a card: a source blind or stale since names
  // the cards it last named (judged Unknown by its sight, and by what the
  // sources that still see say of them). The bus's last view stays the
  // bus's, its driver and vendor as last read.
  // 1. The bus: every accelerator function the pci source found, lost or not.
  const bool pci_fresh = FreshLocked(kSourcePci);
  for (const PciDeviceView& p : pci_) {
    const size_t i = b.Name(p.bus_id, -1, "", "");
    b.devices[i].vendor = p.vendor;
    b.devices[i].driver = p.driver;
    b.devices[i].present = p.present;
    b.devices[i].port = p.port;
  }
  // 2. XDM's list names them (a device it lists off the bus is one still).
  for (const DeviceInfo& d : xdm_raw_)
    if (const size_t i = b.Name(hal::CanonicalPciAddress(d.bus_id), d.minor, d.uuid, d.model);
        i != kNone)
      b.devices[i].xdm = true;
  // 3. The sources that name cards themselves (the sysfs tree, NVML): the
  // fresh ones first; a stale one fills in the card it finds, and adds one
  // only where no one names its minor or uuid (the card it named may have
  // moved: no ghost at the old address).
  for (const bool fresh : {true, false})
    for (const auto& [source, views] : views_) {
      if (views.coverage == Coverage::kAddressedSilent || FreshLocked(source) != fresh) continue;
      for (const DeviceView& v : views.devices)
        if (fresh || b.Find(v.bus_id, v.minor, v.uuid) != kNone || !b.Knows(v.minor, v.uuid))
          b.Name(v.bus_id, v.minor, v.uuid, v.model);
    }
  auto j = std::make_shared<Joined>();
  j->inventory = std::move(b.devices);
  if (!filter_.empty()) {  // a loop, not a lambda: the analysis sees the lock held here
    std::vector<InventoryDevice> chosen;
    for (InventoryDevice& d : j->inventory)
      if (filter_.count(d.minor) != 0) chosen.push_back(std::move(d));
    j->inventory = std::move(chosen);
  }
  for (size_t i = 0; i < j->inventory.size(); ++i) {
    InventoryDevice& d = j->inventory[i];
    d.key = !d.bus_id.empty() ? d.bus_id
            : d.minor >= 0    ? "minor/" + std::to_string(d.minor)
                              : "uuid/" + d.uuid;
    if (!d.bus_id.empty()) j->by_bus.emplace(d.bus_id, i);
    if (d.minor >= 0) j->by_minor.emplace(d.minor, i);
    if (!d.uuid.empty()) j->by_uuid.emplace(d.uuid, i);
  }
  for (const auto& [source, views] : views_) {
    if (!FreshLocked(source)) continue;
    Joined::Source s{&source, &views, {}};
    const bool silent = views.coverage == Coverage::kAddressedSilent;
    for (const DeviceView& v : views.devices)
      s.at.push_back(silent && v.bus_id.empty() ? kNone
                     : silent                   ? j->Find(v.bus_id, -1, "")
                                                : j->Find(v.bus_id, v.minor, v.uuid));
    j->sources.push_back(std::move(s));
  }
  if (pci_fresh)
    for (const PciDeviceView& p : pci_) {
      const size_t i = j->Find(p.bus_id, -1, "");
      if (i == kNone) continue;  // not chosen
      j->pci.push_back(p);
      j->pci.back().minor = MinorLabel(j->inventory[i].minor);
      j->pci.back().uuid = j->inventory[i].uuid;
    }
  joined_ = std::move(j);
  joined_gen_ = gen_;
  joined_fresh_ = fresh;
  return *joined_;
}

bool DeviceRegistry::SetXdmDevices(std::vector<DeviceInfo> devices) {
  MutexLock lock(mu_);
  if (known_ && devices == xdm_raw_) return false;  // the same list pushed again
  ++gen_;
  xdm_raw_ = std::move(devices);
  return RefilterLocked();
}

bool DeviceRegistry::RefilterLocked() {
  std::vector<DeviceInfo> devices = xdm_raw_;
  if (!filter_.empty()) {
    std::vector<DeviceInfo> chosen;
    for (DeviceInfo& d : devices)
      if (filter_.count(d.minor) != 0) chosen.push_back(std::move(d));
    devices = std::move(chosen);
  }
  if (known_ && devices == devices_) return false;
  devices_ = std::move(devices);
  known_ = true;
  if (listener_) listener_(devices_);
  return true;
}

void DeviceRegistry::SetDeviceFilter(std::set<int32_t> minors) {
  MutexLock lock(mu_);
  ++gen_;
  filter_ = std::move(minors);
  if (known_) RefilterLocked();
  // Views are filtered as they are joined; the sources' own families now.
  for (auto& [source, families] : families_) {
    if (filter_.empty()) break;  // every device: nothing to take out
    auto chosen = std::make_shared<std::vector<prometheus::MetricFamily>>(*families);
    KeepChosen(filter_, chosen.get());
    families = std::move(chosen);
  }
}

void DeviceRegistry::OnXdmDevicesChanged(DevicesListener listener) {
  MutexLock lock(mu_);
  listener_ = std::move(listener);
}

std::vector<DeviceInfo> DeviceRegistry::Devices() const {
  MutexLock lock(mu_);
  return devices_;
}

std::vector<InventoryDevice> DeviceRegistry::Inventory() const {
  MutexLock lock(mu_);
  return JoinLocked().inventory;
}

void DeviceRegistry::SetXdmLive(bool live) {
  MutexLock lock(mu_);
  xdm_live_ = live;
}

bool DeviceRegistry::XdmLive() const {
  MutexLock lock(mu_);
  return xdm_live_;
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
  ++gen_;
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
  ++gen_;
  sources_.erase(source);
  if (source == kSourcePci) pci_.clear();
  views_.erase(source);
  kin_.erase(source);
  families_.erase(source);
}

void DeviceRegistry::SetLooking(const std::string& source, std::string why) {
  MutexLock lock(mu_);
  if (why.empty()) {
    looking_.erase(source);
  } else {
    looking_[source] = std::move(why);
  }
}

std::map<std::string, std::string> DeviceRegistry::Looking() const {
  MutexLock lock(mu_);
  return looking_;
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
  return SourceViewsLocked(JoinLocked());
}

HealthPicture DeviceRegistry::Health() const {
  MutexLock lock(mu_);
  const Joined& j = JoinLocked();  // one join for both (freshness is read as it is made)
  return {SourceViewsLocked(j), j.inventory, InventoryKnownLocked()};
}

void DeviceRegistry::NoteKin(const Joined& j, const std::string& source,
                             std::set<std::string>* kin) {
  for (const Joined::Source& s : j.sources) {
    if (*s.name != source) continue;
    for (const size_t at : s.at)
      if (at != kNone && !j.inventory[at].vendor.empty()) kin->insert(j.inventory[at].vendor);
  }
}

void DeviceRegistry::NoteKinLocked(const std::string& source) {
  // Only a view that answers for its kin needs it (no join made for others).
  auto it = views_.find(source);
  if (it != views_.end() && it->second.coverage == Coverage::kListedAndKin)
    NoteKin(JoinLocked(), source, &kin_[source]);
}

std::vector<SourceView> DeviceRegistry::SourceViewsLocked(const Joined& j) const {
  std::vector<SourceView> out;
  for (const auto& [name, state] : sources_) {
    SourceView v;
    v.source = name;
    v.sight = SightLocked(name);
    v.why = state.why;
    auto vs = views_.find(name);
    v.needs_inventory = vs != views_.end() && vs->second.coverage == Coverage::kAddressedSilent;
    const Joined::Source* s = nullptr;
    for (const Joined::Source& js : j.sources)
      if (*js.name == name) s = &js;
    if (s != nullptr) {
      // Two of its devices may name one card (two minors linked to one
      // function, XDM listing two minors at one address): both count.
      std::map<size_t, std::vector<const DeviceView*>> listed;
      // The vendors of the cards it lists, and has listed since it opened.
      std::set<std::string>& kin = kin_[name];
      for (size_t i = 0; i < s->at.size(); ++i) {
        if (s->at[i] == kNone) continue;
        listed[s->at[i]].push_back(&s->views->devices[i]);
      }
      NoteKin(j, name, &kin);
      const bool silent = s->views->coverage == Coverage::kAddressedSilent;
      for (size_t i = 0; i < j.inventory.size(); ++i) {
        const InventoryDevice& card = j.inventory[i];
        auto l = listed.find(i);
        if (l == listed.end() && !Covers(*s->views, card, kin)) continue;
        SourceView::Device d{card.key, card.minor, card.bus_id, {}, true, {}};
        if (l != listed.end()) {
          JoinListed(l->second, &d);
        } else {
          d.seen = silent;  // the log says nothing of a healthy card
          if (silent) d.healthy = true;
        }
        v.devices.push_back(std::move(d));
      }
    }
    out.push_back(std::move(v));
  }
  return out;
}

FaultViewsSet DeviceRegistry::fault_views_set() const {
  MutexLock lock(mu_);
  FaultViewsSet set = views_set_;
  set.devices_known = known_;
  set.inventory_known = InventoryKnownLocked();
  return set;
}

bool DeviceRegistry::InventoryKnownLocked() const {
  if (known_) return true;
  // Minors chosen: a card is in the inventory only once a layer names its
  // minor (the bus names none), and until one has named a chosen one, no
  // card is known.
  for (const auto& [source, views] : views_) {
    if (views.coverage == Coverage::kAddressedSilent) continue;
    if (filter_.empty()) return true;
    for (const DeviceView& v : views.devices)
      if (filter_.count(v.minor) != 0) return true;
  }
  return false;
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

std::string DeviceRegistry::MinorOfLocked(const Joined& j, const std::string& uuid) const {
  for (const DeviceInfo& d : devices_)
    if (d.uuid == uuid) return std::to_string(d.minor);
  for (const InventoryDevice& d : j.inventory)
    if (!uuid.empty() && d.uuid == uuid) return MinorLabel(d.minor);
  return {};
}

std::vector<PodAssignment> DeviceRegistry::PodAssignments() const {
  MutexLock lock(mu_);
  return pods_;
}

void DeviceRegistry::SetPciDevices(std::vector<PciDeviceView> devices,
                                   std::vector<std::string> absent) {
  MutexLock lock(mu_);
  ++views_set_.views[kSourcePci];
  // The same view again (an idle node, each interval): seen, and the join
  // and its families kept.
  if (views_.count(kSourcePci) != 0 && devices == pci_ && absent == pci_absent_) {
    SeenLocked(kSourcePci);
    return;
  }
  ++gen_;
  DeviceViews views;
  views.coverage = Coverage::kListed;  // its functions, lost ones included
  for (const PciDeviceView& p : devices) {
    DeviceView v;
    v.bus_id = p.bus_id;
    v.healthy = true;  // the bus judges a card by its faults alone
    v.faults = p.faults;
    v.seen = p.seen;
    views.devices.push_back(std::move(v));
  }
  for (const std::string& bus_id : absent) {
    DeviceView v;
    v.bus_id = bus_id;
    v.healthy = true;
    v.seen = false;
    views.devices.push_back(std::move(v));
  }
  pci_ = std::move(devices);
  pci_absent_ = std::move(absent);
  views_[kSourcePci] = std::move(views);
  SeenLocked(kSourcePci);
}

void DeviceRegistry::SetDeviceViews(const std::string& source, DeviceViews views) {
  MutexLock lock(mu_);
  ++views_set_.views[source];
  if (SameViewsLocked(source, views)) {
    SeenLocked(source);
    return;
  }
  // The vendors of the cards it listed until now are its kin, whether or
  // not a reader joined that view (the join is made once a change).
  NoteKinLocked(source);
  ++gen_;
  // Lent to the page in its order (FamilyLender): a source's own families
  // put in it here, once a publish; kept ones are in it already.
  if (!views.kept_families)
    for (prometheus::MetricFamily& f : views.families) PutInPageOrder(&f);
  std::shared_ptr<const std::vector<prometheus::MetricFamily>> families =
      views.kept_families ? std::move(views.kept_families)
                          : std::make_shared<const std::vector<prometheus::MetricFamily>>(
                                std::move(views.families));
  if (!filter_.empty()) {
    auto chosen = std::make_shared<std::vector<prometheus::MetricFamily>>(*families);
    KeepChosen(filter_, chosen.get());
    families = std::move(chosen);
  }
  families_[source] = std::move(families);
  views.families.clear();
  views.kept_families.reset();
  views_[source] = std::move(views);
  SeenLocked(source);
}

bool DeviceRegistry::SameViewsLocked(const std::string& source, const DeviceViews& views) const {
  const auto v = views_.find(source);
  const auto f = families_.find(source);
  if (v == views_.end() || f == families_.end()) return false;
  const DeviceViews& was = v->second;
  // The families: none on either side, or the very ones kept (a filter
  // copies them: then not known to be the same).
  const bool same_families = views.kept_families
                                 ? filter_.empty() && views.kept_families == f->second
                                 : views.families.empty() && f->second->empty();
  return same_families && views.coverage == was.coverage && views.vendor == was.vendor &&
         views.driver == was.driver && views.devices == was.devices;
}

std::map<std::string, std::vector<DeviceView>> DeviceRegistry::SeenDeviceViews() const {
  MutexLock lock(mu_);
  const Joined& j = JoinLocked();
  std::map<std::string, std::vector<DeviceView>> out;
  for (const Joined::Source& s : j.sources) {
    if (SightLocked(*s.name) != Sight::kSeeing) continue;
    std::vector<DeviceView>& devices = out[*s.name];
    std::set<size_t> listed;
    for (size_t i = 0; i < s.at.size(); ++i) {
      if (s.at[i] == kNone) continue;
      const InventoryDevice& card = j.inventory[s.at[i]];
      DeviceView v = s.views->devices[i];
      v.minor = card.minor;
      v.uuid = card.uuid.empty() ? v.uuid : card.uuid;
      v.bus_id = card.bus_id;
      listed.insert(s.at[i]);
      devices.push_back(std::move(v));
    }
    if (s.views->coverage != Coverage::kAddressedSilent) continue;
    for (size_t i = 0; i < j.inventory.size(); ++i) {
      if (listed.count(i) != 0 || j.inventory[i].bus_id.empty()) continue;
      DeviceView v;
      v.minor = j.inventory[i].minor;
      v.uuid = j.inventory[i].uuid;
      v.bus_id = j.inventory[i].bus_id;
      v.healthy = true;
      devices.push_back(std::move(v));
    }
  }
  return out;
}

std::vector<std::string> DeviceRegistry::SeeingSources() const {
  MutexLock lock(mu_);
  std::vector<std::string> out;
  for (const auto& [name, state] : sources_)
    if (SightLocked(name) == Sight::kSeeing) out.push_back(name);
  return out;
}

std::vector<DeviceRegistry::SourceStatus> DeviceRegistry::SourceStatuses() const {
  MutexLock lock(mu_);
  const auto now = NowLocked();
  std::vector<SourceStatus> out;
  for (const auto& [name, state] : sources_) {
    SourceStatus s{name, SightLocked(name), state.why, std::nullopt};
    if (state.seen_at) s.view_age = now - *state.seen_at;
    out.push_back(std::move(s));
  }
  return out;
}

std::vector<PciDeviceView> DeviceRegistry::PciDevices() const {
  MutexLock lock(mu_);
  return JoinLocked().pci;
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
                "A fault code a health source reports active on a device, with its catalog level; "
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

namespace {

// A card's identity labels on every health and fault series.
MetricLabels CardLabels(const InventoryDevice& card, const std::string& uuid) {
  return {{"minor", MinorLabel(card.minor)},
          {"uuid", card.uuid.empty() ? uuid : card.uuid},
          {"bus_id", card.bus_id}};
}

MetricLabels With(MetricLabels labels,
                  std::initializer_list<prometheus::ClientMetric::Label> more) {
  labels.insert(labels.end(), more);
  return labels;
}

// One card's active faults from `source` (fault_active, fault_level).
void WriteDeviceFaults(prometheus::MetricFamily* active, prometheus::MetricFamily* level,
                       const MetricLabels& card, const std::vector<ActiveFault>& faults,
                       const std::string& source) {
  for (const ActiveFault& a : faults)
    active->metric.push_back(GaugeSample(
        With(card, {{"code", a.code}, {"level", a.level_name}, {"source", source}}), 1));
  level->metric.push_back(GaugeSample(With(card, {{"source", source}}), WorstLevel(faults)));
}

}  // namespace

void DeviceRegistry::WriteIdentityLocked(const Joined& j, Families* f) const {
  for (const DeviceInfo& d : devices_) {
    const std::string minor = std::to_string(d.minor);
    MetricLabels labels = {{"minor", minor}};
    for (const DeviceInfoLabel& l : kDeviceInfoLabels) labels.push_back({l.name, l.format(d)});
    // The address as every other family writes it (the rules key cards by
    // it): the inventory's, canonical, where any layer knows it; else XDM's
    // own text.
    const size_t i = j.Find("", d.minor, "");
    const std::string bus = i == kNone ? "" : j.inventory[i].bus_id;
    for (prometheus::ClientMetric::Label& l : labels)
      if (l.name == "bus_id" && !bus.empty()) l.value = bus;
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
    if (!xdm_live_) continue;
    f->health.metric.push_back(
        GaugeSample({{"minor", minor}, {"uuid", d.uuid}, {"bus_id", bus}, {"source", "xdm"}},
                    d.health == "Healthy"));
  }
}

void DeviceRegistry::WriteViewsLocked(const Joined& j, Families* f, Lent* lent) const {
  for (const Joined::Source& s : j.sources) {
    const std::string& source = *s.name;
    const bool seeing = SightLocked(source) == Sight::kSeeing;
    std::vector<uint32_t> views_of(j.inventory.size());  // listed: > 0
    for (size_t at : s.at)
      if (at != kNone) ++views_of[at];
    std::vector<bool> written(j.inventory.size());
    for (size_t i = 0; i < s.at.size(); ++i) {
      if (s.at[i] == kNone || written[s.at[i]]) continue;
      written[s.at[i]] = true;
      DeviceView merged;
      if (views_of[s.at[i]] > 1) {
        std::vector<const DeviceView*> same;
        for (size_t k = i; k < s.at.size(); ++k)
          if (s.at[k] == s.at[i]) same.push_back(&s.views->devices[k]);
        merged = MergeViews(same);
      }
      const DeviceView& d = views_of[s.at[i]] > 1 ? merged : s.views->devices[i];
      const InventoryDevice& card = j.inventory[s.at[i]];
      const MetricLabels labels = CardLabels(card, d.uuid);
      WriteDeviceFaults(&f->active, &f->level, labels, d.faults, source);
      // Health follows the worst active fault too, as every source's does;
      // a card it could not read has none.
      if (const std::optional<bool> healthy =
              HealthWithFaults(d.seen ? d.healthy : std::nullopt, d.faults);
          seeing && healthy)
        f->health.metric.push_back(GaugeSample(With(labels, {{"source", source}}), *healthy));
      for (const DeviceView::Events& e : d.events)
        f->events.metric.push_back(CounterSample(
            With(labels, {{"code", e.code}, {"level", e.level_name}, {"source", source}}),
            static_cast<double>(e.count)));
      if (seeing) WriteContainerMemoryLocked(f, card, d, source);
    }
    // A silent source judges every card with an address it says nothing of:
    // healthy, no fault.
    if (s.views->coverage == Coverage::kAddressedSilent) {
      for (size_t i = 0; i < j.inventory.size(); ++i) {
        if (views_of[i] > 0 || j.inventory[i].bus_id.empty()) continue;
        const MetricLabels labels = CardLabels(j.inventory[i], "");
        WriteDeviceFaults(&f->active, &f->level, labels, {}, source);
        if (seeing) f->health.metric.push_back(GaugeSample(With(labels, {{"source", source}}), 1));
      }
    }
    if (auto it = families_.find(source); it != families_.end() && !it->second->empty())
      lent->push_back(it->second);
  }
}

// A container's memory on the device, for a pod the API server gave (its
// uid) and a container it alone names; any other is no one the page can name.
void DeviceRegistry::WriteContainerMemoryLocked(Families* f, const InventoryDevice& card,
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
    f->mem_used.metric.push_back(GaugeSample({{"minor", MinorLabel(card.minor)},
                                              {"uuid", card.uuid.empty() ? d.uuid : card.uuid},
                                              {"namespace", pod->namespace_},
                                              {"pod", pod->pod},
                                              {"container", *container},
                                              {"source", source}},
                                             static_cast<double>(m.bytes)));
  }
}

void DeviceRegistry::WritePodsLocked(const Joined& j, Families* f) const {
  for (const PodAssignment& p : pods_) {
    const std::string minor = MinorOfLocked(j, p.uuid);
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

void DeviceRegistry::WriteSharesLocked(const Joined& j, Families* f) const {
  for (const ContainerQuota& q : quotas_) {
    std::vector<prometheus::ClientMetric::Label> l = {{"minor", MinorOfLocked(j, q.uuid)},
                                                      {"uuid", q.uuid},
                                                      {"namespace", q.namespace_},
                                                      {"pod", q.pod},
                                                      {"container", q.container}};
    if (q.memory_bytes > 0)
      f->mem_limit.metric.push_back(GaugeSample(l, static_cast<double>(q.memory_bytes)));
    if (q.core_ratio > 0) f->core_limit.metric.push_back(GaugeSample(l, q.core_ratio));
  }
  for (const DeviceShare& d : shares_) {
    std::vector<prometheus::ClientMetric::Label> l = {{"minor", MinorOfLocked(j, d.uuid)},
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
  Lent lent;
  std::vector<prometheus::MetricFamily> out = CollectLending(&lent);
  for (const auto& families : lent) out.insert(out.end(), families->begin(), families->end());
  return out;
}

std::vector<prometheus::MetricFamily> DeviceRegistry::CollectLending(Lent* lent) const {
  MutexLock lock(mu_);
  const Joined& j = JoinLocked();
  Families f;
  WriteIdentityLocked(j, &f);
  WritePodsLocked(j, &f);
  WriteSharesLocked(j, &f);
  WriteSourcesLocked(&f);
  WriteViewsLocked(j, &f, lent);
  std::vector<prometheus::MetricFamily> out;
  for (prometheus::MetricFamily* family :
       {&f.pods, &f.mem_limit, &f.mem_used, &f.core_limit, &f.split, &f.shared_mem, &f.shared_cores,
        &f.shared_health, &f.active, &f.events, &f.level, &f.info, &f.topo, &f.health, &f.source_up,
        &f.source_age}) {
    if (!family->metric.empty()) out.push_back(std::move(*family));
  }
  if (FreshLocked(kSourcePci)) {
    // Made once a join: a scrape of an unchanged bus writes them where they
    // lie.
    if (!pci_families_ || pci_families_gen_ != joined_gen_ ||
        pci_families_fresh_ != joined_fresh_) {
      std::vector<prometheus::MetricFamily> families = PciFamilies(j.pci);
      for (prometheus::MetricFamily& family : families) PutInPageOrder(&family);
      pci_families_ =
          std::make_shared<const std::vector<prometheus::MetricFamily>>(std::move(families));
      pci_families_gen_ = joined_gen_;
      pci_families_fresh_ = joined_fresh_;
    }
    if (!pci_families_->empty()) lent->push_back(pci_families_);
  } else {
    pci_families_.reset();
  }
  return out;
}

}  // namespace xpu::store
