#include "common/backoff.h"

#include <algorithm>
#include <random>
#include <stdexcept>

namespace xpu {

Backoff::Backoff(Ms initial, double multiplier, Ms max, double jitter,
                 std::function<double()> uniform01)
    : initial_(initial),
      multiplier_(multiplier),
      max_(max),
      jitter_(jitter),
      uniform01_(std::move(uniform01)),
      base_(initial) {
  if (initial.count() <= 0 || max < initial || multiplier < 1 || jitter < 0 || jitter >= 1 ||
      !uniform01_)
    throw std::invalid_argument(
        "Backoff: need 0 < initial <= max, multiplier >= 1, 0 <= jitter < 1");
}

Backoff::Ms Backoff::Next() {
  const double factor = 1.0 + jitter_ * (2.0 * uniform01_() - 1.0);
  const auto wait = Ms(static_cast<int64_t>(static_cast<double>(base_.count()) * factor));
  const double next = static_cast<double>(base_.count()) * multiplier_;
  base_ = next >= static_cast<double>(max_.count()) ? max_ : Ms(static_cast<int64_t>(next));
  return std::min(wait, max_);
}

std::function<double()> SharedUniform01() {
  return [] {
    thread_local std::mt19937_64 engine(std::random_device{}());
    return std::uniform_real_distribution<double>(0, 1)(engine);
  };
}

}  // namespace xpu
