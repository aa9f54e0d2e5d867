#include "store/faults.h"

#include <algorithm>
#include <utility>

namespace xpu::store {

void AddFault(std::vector<ActiveFault>* faults, ActiveFault fault) {
  for (const ActiveFault& f : *faults)
    if (f.code == fault.code) return;
  faults->push_back(std::move(fault));
}

int WorstLevel(const std::vector<ActiveFault>& faults) {
  int worst = 0;
  for (const ActiveFault& f : faults) worst = std::max(worst, f.level);
  return worst;
}

std::optional<bool> HealthWithFaults(std::optional<bool> judged,
                                     const std::vector<ActiveFault>& faults) {
  if (WorstLevel(faults) >= kUnhealthyFaultLevel) return false;
  return judged;
}

const char* SightName(Sight s) {
  switch (s) {
    case Sight::kSeeing:
      return "seeing";
    case Sight::kBlind:
      return "blind";
    case Sight::kStale:
      return "stale";
    case Sight::kNotYet:
      return "not_yet";
  }
  return "not_yet";
}

void FaultRaises::Add(FaultRaise raise) {
  MutexLock lock(mu_);
  ring_.push_back(std::move(raise));
  if (ring_.size() > kCapacity) ring_.pop_front();
  ++next_;
}

uint64_t FaultRaises::end() const {
  MutexLock lock(mu_);
  return next_;
}

std::vector<FaultRaise> FaultRaises::Since(uint64_t* cursor, uint64_t* lost) const {
  MutexLock lock(mu_);
  const uint64_t oldest = next_ - ring_.size();  // the cursor of ring_.front()
  if (lost != nullptr) *lost = *cursor < oldest ? oldest - *cursor : 0;
  const uint64_t from = std::max(std::min(*cursor, next_), oldest);
  *cursor = next_;
  return {ring_.begin() + static_cast<std::ptrdiff_t>(from - oldest), ring_.end()};
}

}  // namespace xpu::store
