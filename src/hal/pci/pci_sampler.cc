#include "hal/pci/pci_sampler.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <set>

namespace xpu::hal {

std::vector<std::string> DerivePciFaults(const store::PciDeviceView& v) {
  std::vector<std::string> codes;
  if (!v.present) return {kFaultDeviceLost};
  if (v.driver.empty()) codes.push_back(kFaultDriverUnbound);
  // In D3cold the link is off with the power (its config space reads all
  // ones): the power state's doing, a fault of its own when a driver holds
  // the card, not a link that failed.
  const bool down =
      v.power_state != "D3cold" && ((v.current_link_width && *v.current_link_width == 0) ||
                                    (v.max_link_speed && !v.current_link_speed));
  if (down) {
    codes.push_back(kFaultLinkDown);
  } else if (v.narrow_samples >= kNarrowSamplesForFault) {
    codes.push_back(kFaultLinkDowntrained);
  }
  // Any fatal counter, or a fatal total above the lines' sum (an event the
  // kernel counted without its status bits).
  bool fatal = v.aer_fatal_unattributed > 0;
  for (const store::PciDeviceView::Aer& a : v.aer)
    fatal = fatal || (a.severity == "fatal" && a.count > 0);
  if (fatal) codes.push_back(kFaultAerFatal);
  if (v.power_state == "D3cold" && !v.driver.empty()) codes.push_back(kFaultUnexpectedD3cold);
  std::sort(codes.begin(), codes.end());
  return codes;
}

void PciTracker::Retain(const PciFilter& filter) {
  std::erase_if(tracks_, [&](const auto& t) {
    return !filter.Matches(t.second.class_code, t.second.vendor);
  });
}

bool PciTracker::SameFunction(const Track& t, const PciDevice& d) {
  return d.vendor == t.vendor && d.class_code == t.class_code &&
         (d.device == 0 || t.device == 0 || d.device == t.device);
}

std::vector<store::PciDeviceView> PciTracker::Update(const std::vector<PciDevice>& scan) {
  std::map<std::string, const PciDevice*> seen;
  for (const PciDevice& d : scan) seen[d.address] = &d;
  for (const auto& [address, d] : seen) tracks_.try_emplace(address);
  // Devices that left are remembered (present 0, their resets), but a tree
  // whose addresses keep changing must not grow this without bound.
  for (auto it = tracks_.begin(); tracks_.size() > max_tracked_ && it != tracks_.end();)
    it = seen.count(it->first) ? std::next(it) : tracks_.erase(it);
  std::vector<store::PciDeviceView> out;
  replaced_.clear();
  for (auto& [address, t] : tracks_) {
    auto it = seen.find(address);
    // Another function at the address (a card replaced): a track of its
    // own, none of the old card's view, resets or binding carried over.
    if (it != seen.end() && !t.last.bus_id.empty() && !SameFunction(t, *it->second)) {
      t = Track{};
      replaced_.insert(address);
    }
    store::PciDeviceView v;
    if (it == seen.end()) {
      v = t.last;  // gone: keep what identifies it
      v.present = false;
    } else if (it->second->unread && !t.last.bus_id.empty()) {
      // There, and not read whole: the last scan's view, not seen. Nothing
      // of it moves on (no narrow scan counted, no loss, no reset).
      v = t.last;
      v.present = true;
      v.seen = false;
      out.push_back(std::move(v));
      continue;
    } else {
      const PciDevice& d = *it->second;
      t.class_code = d.class_code;
      t.vendor = d.vendor;
      if (d.device != 0) t.device = d.device;
      v.bus_id = address;
      char vendor[16];
      std::snprintf(vendor, sizeof vendor, "0x%04x", d.vendor);
      v.vendor = vendor;
      v.driver = d.driver;
      v.power_state = d.power_state;
      v.current_link_speed = d.current_link_speed;
      v.max_link_speed = d.max_link_speed;
      v.current_link_width = d.current_link_width;
      v.max_link_width = d.max_link_width;
      v.port = d.port;
      v.port_max_link_speed = d.port_max_link_speed;
      v.port_max_link_width = d.port_max_link_width;
      const auto capable = v.capable_link_width();
      const bool narrow = v.current_link_width && capable && *v.current_link_width > 0 &&
                          *v.current_link_width < *capable;
      t.narrow = narrow ? t.narrow + 1 : 0;
      v.narrow_samples = t.narrow;
      for (const PciAer& a : d.aer) v.aer.push_back({a.severity, a.type, a.count});
      v.aer_fatal_unattributed = d.aer_fatal_unattributed;
      for (const PciSensor& s : d.hwmon) v.hwmon.push_back({s.kind, s.sensor, s.value});
    }
    const bool up = v.present && !v.driver.empty();
    if (t.up && !up) t.lost = true;
    if (t.lost && up) {
      ++t.resets;
      t.lost = false;
    }
    t.up = up;
    t.bound_once = t.bound_once || up;
    v.bound_before = t.bound_once;
    v.resets_observed = t.resets;
    // A card not read whole at its first scan: what was read, not seen.
    v.seen = !(it != seen.end() && it->second->unread);
    t.last = v;
    t.last.seen = true;
    out.push_back(std::move(v));
  }
  return out;
}

PciSampler::PciSampler(PciScanner scanner, std::shared_ptr<const FaultCatalog> catalog,
                       std::chrono::milliseconds interval, std::chrono::milliseconds gauge_interval,
                       store::HealthSourcePort* registry, prometheus::Registry* self_metrics,
                       store::ExemplarStore* exemplars, prometheus::Registry* fault_metrics)
    : SourceSampler({store::kSourcePci,
                     "xpu_hal_pci_up",
                     "Whether the last scan of the PCI tree (--hal=pci) succeeded.",
                     {}},
                    interval, registry, self_metrics),
      scanner_(std::move(scanner)),
      cadence_(interval, gauge_interval),
      file_errors_(prometheus::BuildCounter()
                       .Name("xpu_hal_pci_file_errors_total")
                       .Help("PCI sysfs files that exist but could not be read or parsed.")
                       .Register(*self_metrics)
                       .Add({})),
      faults_(std::move(catalog), fault_metrics != nullptr ? fault_metrics : self_metrics,
              store::kSourcePci, registry, exemplars) {}

void PciSampler::TakeOver(Part& old) {
  if (auto* o = dynamic_cast<PciSampler*>(&old)) {
    SeedFaultState(o->fault_state());
    // The cards it tracked go on where the tree is the same, less those
    // this one no longer looks for (not lost cards: not looked for); a
    // card lost or unbound before the reload stays so. Another tree starts
    // afresh.
    if (o->scanner().root() == scanner_.root()) {
      PciTracker tracker = o->tracker_state();
      if (!(o->scanner().filter() == scanner_.filter())) tracker.Retain(scanner_.filter());
      SeedTracker(std::move(tracker));
    }
  }
}

bool PciSampler::KeepOrFill(bool whole, std::chrono::steady_clock::time_point now,
                            std::vector<PciDevice>* scan) {
  // Both sorted by address.
  auto w = last_whole_.begin();
  auto match = [&](const PciDevice& d) -> const PciDevice* {
    while (w != last_whole_.end() && w->address < d.address) ++w;
    return w != last_whole_.end() && SamePciFunction(*w, d) ? &*w : nullptr;
  };
  if (whole) {
    // A slow fact that exists but failed to read (d.errors) keeps the
    // value of the last whole scan: one bad read is not ten seconds blind.
    for (PciDevice& d : *scan) {
      const PciDevice* before = d.errors.empty() ? nullptr : match(d);
      if (before == nullptr) continue;
      if (!d.max_link_speed) d.max_link_speed = before->max_link_speed;
      if (!d.max_link_width) d.max_link_width = before->max_link_width;
      if (!d.port_max_link_speed) d.port_max_link_speed = before->port_max_link_speed;
      if (!d.port_max_link_width) d.port_max_link_width = before->port_max_link_width;
      if (d.port.empty()) d.port = before->port;
    }
    last_whole_ = *scan;
    cadence_.ReadWhole(now);
    return true;
  }
  if (!cadence_.Fresh(now)) return false;
  for (PciDevice& d : *scan) {
    const PciDevice* before = match(d);
    if (before == nullptr) return false;
    KeepSlowPciFacts(*before, &d);
  }
  return true;
}

bool PciSampler::SampleOnce() {
  std::vector<PciDevice> scan;
  const auto now = std::chrono::steady_clock::now();
  const bool whole = cadence_.WholeDue(now);
  if (Status s =
          scanner_.Scan(&scan, whole ? PciScanDepth::kWhole : PciScanDepth::kFaults, &scan_cache_);
      !s.ok()) {
    Blind(s.message());
    if (logged_.Raise("scan"))
      spdlog::warn("HAL pci: {} (logged once until it clears)", s.message());
    return false;
  }
  if (logged_.Clear("scan")) spdlog::info("HAL pci: scanning {} again", scanner_.root());
  // A card new or replaced since the last whole scan: whole at once, so
  // that its link is judged against its own maxima from its first sample.
  if (!KeepOrFill(whole, now, &scan)) {
    if (Status s = scanner_.Scan(&scan, PciScanDepth::kWhole, &scan_cache_); !s.ok()) {
      Blind(s.message());
      return false;
    }
    KeepOrFill(true, now, &scan);
  }
  Seeing();
  for (const PciDevice& d : scan) {
    if (d.errors.empty()) continue;
    file_errors_.Increment(static_cast<double>(d.errors.size()));
    if (logged_.Raise("file " + d.address))
      spdlog::warn("HAL pci: {}: {} (logged once)", d.address, d.errors.front());
  }
  std::vector<store::PciDeviceView> views = tracker_.Update(scan);
  // Each card as the inventory names it so far (its raises' labels).
  std::map<std::string, store::InventoryDevice> named;
  for (store::InventoryDevice& d : registry()->Inventory())
    if (!d.bus_id.empty()) named[d.bus_id] = std::move(d);
  for (store::PciDeviceView& v : views) {
    // Not read whole this scan: the faults it had, none derived from what
    // could not be read (a failed read is no recovery, and no fault).
    std::vector<std::string> codes;
    if (v.seen) {
      codes = DerivePciFaults(v);
    } else if (tracker_.replaced().count(v.bus_id) == 0) {  // not another card's
      for (const std::string& code : faults_.Previous(v.bus_id)) codes.push_back(code);
    }
    const store::InventoryDevice& card = named[v.bus_id];
    // Never bound since the exporter started, and no layer names it: a
    // function left unbound on purpose (a co-processor with no driver
    // loaded), not a card that lost its driver.
    if (!v.bound_before && card.minor < 0 && card.uuid.empty())
      std::erase(codes, std::string(kFaultDriverUnbound));
    v.faults = faults_.Update(v.bus_id, "PCI device " + v.bus_id,
                              card.minor >= 0 ? std::to_string(card.minor) : "", card.uuid,
                              v.bus_id, {codes.begin(), codes.end()});
  }
  faults_.EndSample();
  // The cards the daemon names at an address the bus does not show at all
  // (a card that fell off before the exporter started; a daemon that names
  // a card wrongly): not seen, as the bus is the inventory. A function the
  // bus shows but does not watch (another class) is not judged.
  std::set<std::string> tracked;
  for (const store::PciDeviceView& v : views) tracked.insert(v.bus_id);
  std::vector<std::string> absent;
  for (const auto& [bus_id, card] : named)
    if (card.xdm && scan_cache_.listed.count(bus_id) == 0 && tracked.count(bus_id) == 0)
      absent.push_back(bus_id);
  registry()->SetPciDevices(std::move(views), std::move(absent));
  return true;
}

}  // namespace xpu::hal
