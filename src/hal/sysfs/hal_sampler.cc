#include "hal/sysfs/hal_sampler.h"

#include <spdlog/spdlog.h>

#include <algorithm>

namespace xpu::hal {

HalSampler::HalSampler(std::unique_ptr<HalBackend> backend,
                       std::shared_ptr<const FaultCatalog> catalog,
                       std::chrono::milliseconds interval, store::HealthSourcePort* registry,
                       prometheus::Registry* self_metrics, store::ExemplarStore* exemplars,
                       prometheus::Registry* fault_metrics)
    : SourceSampler({store::kSourceSysfs,
                     "xpu_hal_up",
                     "Whether the last HAL sample could enumerate devices: 1 yes, 0 no.",
                     {{"backend", backend ? backend->name() : "none"}}},
                    interval, registry, self_metrics),
      backend_(std::move(backend)),
      duration_(prometheus::BuildGauge()
                    .Name("xpu_hal_sample_duration_seconds")
                    .Help("How long the last HAL sample took.")
                    .Register(*self_metrics)
                    .Add({})),
      read_errors_(prometheus::BuildCounter()
                       .Name("xpu_hal_read_errors_total")
                       .Help("HAL reads that failed or returned malformed data, by device.")
                       .Register(*self_metrics)),
      faults_(std::move(catalog), fault_metrics != nullptr ? fault_metrics : self_metrics,
              store::kSourceSysfs, registry, exemplars) {
  if (!backend_) throw std::invalid_argument("HalSampler needs a backend");
}

HalSampler::~HalSampler() { Stop(); }

void HalSampler::TakeOver(Part& old) {
  if (auto* o = dynamic_cast<HalSampler*>(&old)) SeedFaultState(o->fault_state());
}

std::optional<std::chrono::steady_clock::time_point> HalSampler::last_success() const {
  MutexLock lock(mu_);
  return last_success_;
}

void HalSampler::Warn(const std::string& key, const std::string& message) {
  if (logged_.Raise(key))
    spdlog::warn("HAL {}: {} (logged once until it clears)", backend_->name(), message);
}

void HalSampler::SampleOnce() {
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<HalDeviceId> ids;
  Status s = backend_->ListDevices(&ids);
  if (!s.ok()) {
    Warn("list", "cannot enumerate devices: " + s.message());
    Blind("cannot enumerate devices: " + s.message());
    duration_.Set(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    return;
  }
  if (logged_.Clear("list")) spdlog::info("HAL {}: enumerating devices again", backend_->name());
  store::DeviceViews views;
  // The driver's tree shows every card of its kind: one gone from it (its
  // vendor's, or one XDM lists) is not seen.
  views.coverage = store::Coverage::kListedAndKin;
  for (const HalDeviceId& id : ids) {
    store::DeviceView v;
    v.minor = id.minor;
    v.uuid = id.uuid;
    v.bus_id = id.bus_id;
    const std::string minor = std::to_string(id.minor);
    bool healthy = false;
    Status hs = backend_->ReadHealth(id.minor, &healthy);
    if (hs.ok()) {
      v.healthy = healthy;
      logged_.Clear("health" + minor);
    } else {
      read_errors_.Add({{"minor", minor}}).Increment();
      Warn("health" + minor, "device " + minor + ": " + hs.message());
    }
    std::vector<std::string> codes;
    Status fs = backend_->ReadFaultCodes(id.minor, &codes);
    std::set<std::string> active(codes.begin(), codes.end());
    if (fs.ok()) {
      logged_.Clear("faults" + minor);
    } else {
      // Keep what was active: a torn read is not a recovery. Nor is it
      // sight: no health on the page for the device, and it counts as not
      // seen; its kept faults and the health bit read now still count for
      // the condition (False stays False).
      v.seen = false;
      read_errors_.Add({{"minor", minor}}).Increment();
      Warn("faults" + minor, "device " + minor + ": " + fs.message());
      // Only the card's own: a minor that names another card now (its
      // device link moved) keeps nothing of the one it named.
      auto before = named_.find(id.minor);
      auto agree = [](const std::string& a, const std::string& b) {
        return a.empty() || b.empty() || a == b;  // unknown on either side: no evidence
      };
      const bool same_card = before == named_.end() || (agree(before->second.bus_id, id.bus_id) &&
                                                        agree(before->second.uuid, id.uuid));
      if (same_card) active = faults_.Previous(minor);
    }
    named_[id.minor] = id;
    v.faults = faults_.Update(minor, "device " + minor, minor, v.uuid, id.bus_id, active);
    views.devices.push_back(std::move(v));
  }
  faults_.EndSample();
  std::erase_if(named_, [&](const auto& n) {
    return std::none_of(ids.begin(), ids.end(),
                        [&](const HalDeviceId& id) { return id.minor == n.first; });
  });
  registry()->SetDeviceViews(store::kSourceSysfs, std::move(views));
  Seeing();
  {
    MutexLock lock(mu_);
    last_success_ = std::chrono::steady_clock::now();
  }
  duration_.Set(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

}  // namespace xpu::hal
