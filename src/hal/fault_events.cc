#include "hal/fault_events.h"

#include <spdlog/spdlog.h>

namespace xpu::hal {

FaultEvents::FaultEvents(std::shared_ptr<const FaultCatalog> catalog,
                         prometheus::Registry* self_metrics)
    : catalog_(std::move(catalog)),
      events_(prometheus::BuildCounter()
                  .Name("xpu_device_fault_events_total")
                  .Help("Times a fault code was raised on a device (seen active after not being "
                        "active), by code and catalog level.")
                  .Register(*self_metrics)),
      unknown_codes_(prometheus::BuildCounter()
                         .Name("xpu_hal_unknown_fault_codes_total")
                         .Help("Raises of fault codes that the fault catalog does not know.")
                         .Register(*self_metrics)
                         .Add({})) {}

std::vector<store::ActiveFault> FaultEvents::Update(const std::string& key, const std::string& name,
                                                    const std::string& minor,
                                                    const std::string& uuid,
                                                    const std::set<std::string>& codes) {
  const std::set<std::string> before = Previous(key);
  std::vector<store::ActiveFault> out;
  for (const std::string& code : codes) {
    const FaultInfo info = catalog_->Lookup(code);
    if (before.count(code) == 0) {
      events_
          .Add({{"minor", minor},
                {"uuid", uuid},
                {"code", info.code},
                {"level", LevelName(info.level)}})
          .Increment();
      if (!info.known) unknown_codes_.Increment();
      spdlog::warn("{} fault {} raised: {} ({}; {})", name, info.code, info.name,
                   LevelName(info.level), info.action);
    }
    out.push_back({info.code, info.name, static_cast<int>(info.level), LevelName(info.level),
                   info.description, info.action, info.known});
  }
  for (const std::string& code : before) {
    if (codes.count(code) == 0) spdlog::info("{} fault {} cleared", name, code);
  }
  now_[key] = codes;
  return out;
}

std::set<std::string> FaultEvents::Previous(const std::string& key) const {
  auto it = active_.find(key);
  return it == active_.end() ? std::set<std::string>() : it->second;
}

void FaultEvents::EndSample() {
  active_ = std::move(now_);
  now_.clear();
}

}  // namespace xpu::hal
