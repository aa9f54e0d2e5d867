#include "hal/fault_events.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <optional>

namespace xpu::hal {
namespace {

// What a rate-limited line adds: how many like it were not logged (every
// raise is still counted in xpu_device_fault_events_total).
std::string HeldBack(uint64_t n, const char* what) {
  if (n == 0) return "";
  return " (" + std::to_string(n) + " more " + what +
         " of this code on this device since the last line, not logged)";
}

}  // namespace

FaultEvents::FaultEvents(std::shared_ptr<const FaultCatalog> catalog,
                         prometheus::Registry* self_metrics, std::string source,
                         store::HealthSourcePort* registry, store::ExemplarStore* exemplars)
    : catalog_(std::move(catalog)),
      source_(std::move(source)),
      registry_(registry),
      exemplars_(exemplars),
      events_(prometheus::BuildCounter()
                  .Name("xpu_device_fault_events_total")
                  .Help(store::kFaultEventsHelp)
                  .Register(*self_metrics)),
      unknown_codes_(prometheus::BuildCounter()
                         .Name("xpu_hal_unknown_fault_codes_total")
                         .Help("Raises of fault codes that the fault catalog does not know.")
                         .Register(*self_metrics)
                         .Add({})) {}

std::vector<store::ActiveFault> FaultEvents::Update(const std::string& key, const std::string& name,
                                                    const std::string& minor,
                                                    const std::string& uuid,
                                                    const std::string& bus_id,
                                                    const std::set<std::string>& codes) {
  const std::set<std::string> before = Previous(key);
  std::vector<store::ActiveFault> out;
  for (const std::string& code : codes) {
    const FaultInfo info = catalog_->Lookup(code);
    if (before.count(code) == 0) {
      events_
          .Add({{"minor", minor},
                {"uuid", uuid},
                {"bus_id", bus_id},
                {"code", info.code},
                {"level", LevelName(info.level)},
                {"source", source_}})
          .Increment();
      if (registry_ != nullptr)
        NoteRaise(
            registry_, exemplars_,
            {source_, minor, uuid, bus_id, ActiveFaultOf(info), std::chrono::system_clock::now()},
            live_);
      if (!info.known) unknown_codes_.Increment();
      uint64_t held = 0;
      if (log_limit_.Allow("raise " + key + " " + info.code, LogLimiter::Clock::now(), &held)) {
        spdlog::warn("{} fault {} raised: {} ({}; {}){}", name, info.code, info.name,
                     LevelName(info.level), info.action, HeldBack(held, "raises"));
      }
    }
    out.push_back(ActiveFaultOf(info));
  }
  for (const std::string& code : before) {
    uint64_t held = 0;
    if (codes.count(code) == 0 &&
        log_limit_.Allow("clear " + key + " " + code, LogLimiter::Clock::now(), &held))
      spdlog::info("{} fault {} cleared{}", name, code, HeldBack(held, "clears"));
  }
  now_[key] = codes;
  return out;
}

store::ActiveFault ActiveFaultOf(const FaultInfo& info) {
  return {
      info.code,   info.name, static_cast<int>(info.level), LevelName(info.level), info.description,
      info.action, info.known};
}

namespace {

void LeaveFaultExemplar(const store::HealthSourcePort& registry, store::ExemplarStore* exemplars,
                        const store::FaultRaise& raise) {
  if (exemplars == nullptr || raise.uuid.empty()) return;
  // The first (in name order) of the containers holding the device.
  std::optional<store::PodAssignment> holder;
  for (store::PodAssignment& p : registry.PodAssignments()) {
    if (p.uuid == raise.uuid && (!holder || p < *holder)) holder = std::move(p);
  }
  if (!holder) return;
  store::Exemplar e;
  e.labels = {{"namespace", holder->namespace_}, {"pod", holder->pod}};
  if (!holder->container.empty()) e.labels.emplace_back("container", holder->container);
  e.timestamp = std::chrono::duration<double>(raise.at.time_since_epoch()).count();
  // Over the 128-rune limit: without the container, then not at all.
  if (!store::ExemplarStore::Fits(e) && e.labels.size() > 2) e.labels.pop_back();
  exemplars->Set("xpu_device_fault_events_total",
                 {{"minor", raise.minor},
                  {"uuid", raise.uuid},
                  {"bus_id", raise.bus_id},
                  {"code", raise.fault.code},
                  {"level", raise.fault.level_name},
                  {"source", raise.source}},
                 std::move(e));
}

}  // namespace

void NoteRaise(store::HealthSourcePort* registry, store::ExemplarStore* exemplars,
               store::FaultRaise raise, bool live) {
  LeaveFaultExemplar(*registry, exemplars, raise);
  if (live) registry->raises().Add(std::move(raise));
}

std::set<std::string> FaultEvents::Previous(const std::string& key) const {
  auto it = active_.find(key);
  return it == active_.end() ? std::set<std::string>() : it->second;
}

void FaultEvents::EndSample() {
  active_ = std::move(now_);
  now_.clear();
  live_ = true;
}

}  // namespace xpu::hal
