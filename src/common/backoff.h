#pragma once

#include <chrono>
#include <functional>

namespace xpu {

// Exponential backoff for reconnecting (ExporterDataStream, the API-server
// watch), as the XDM // reference recommends: 1 s, x2, at most 30 s. Each wait is the base times a
// uniform factor in [1 - jitter, 1 + jitter], then capped at `max` (so at the
// cap the jitter only shortens the wait). Reset() after a message arrives.
// Not thread-safe: owned by the thread that reconnects.
class Backoff {
 public:
  using Ms = std::chrono::milliseconds;
  // `uniform01` returns values in [0, 1); injected so tests are exact.
  Backoff(Ms initial, double multiplier, Ms max, double jitter, std::function<double()> uniform01);

  // The next wait; advances the base.
  Ms Next();
  void Reset() { base_ = initial_; }
  Ms base() const { return base_; }

 private:
  const Ms initial_;
  const double multiplier_;
  const Ms max_;
  const double jitter_;
  std::function<double()> uniform01_;
  Ms base_;
};

// A uniform source in [0, 1) for Backoff that backoffs on several threads
// may share (copies of one std::function): each thread draws from its own
// engine, seeded from std::random_device. Thread-safe.
std::function<double()> SharedUniform01();

}  // namespace xpu
