#include "hal/source_sampler.h"

#include <stdexcept>

namespace xpu::hal {

SourceSampler::SourceSampler(const Spec& spec, std::chrono::milliseconds interval,
                             store::HealthSourcePort* registry, prometheus::Registry* self_metrics)
    : source_(spec.source),
      interval_(interval),
      registry_(registry),
      up_gauge_(prometheus::BuildGauge()
                    .Name(spec.up_name)
                    .Help(spec.up_help)
                    .Register(*self_metrics)
                    .Add(spec.up_labels)) {
  if (interval_.count() <= 0)
    throw std::invalid_argument(std::string(source_) + " interval must be > 0");
}

void SourceSampler::Start() {
  registry_->OpenSource(source_, interval_);
  worker_.Start([this] { Run(); }, std::string("hal-") + source_);
}

void SourceSampler::Withdraw() { registry_->CloseSource(source_); }

void SourceSampler::Run() {
  // On the interval's grid (NextTick): every source ticks at the same
  // instants, one wake-up of an idle CPU for all; a sample that left less
  // than a quarter interval to the next instant is followed a quarter
  // interval after it, off the grid (no burst, no whole interval lost).
  auto tick = Worker::Clock::now();
  do {
    Tick();
  } while (worker_.SleepToTick(&tick, interval_));
}

void SourceSampler::Seeing() {
  up_.store(true);
  ever_seen_.store(true);
  up_gauge_.Set(1);
}

void SourceSampler::Blind(const std::string& why) {
  up_.store(false);
  up_gauge_.Set(0);
  registry_->SetSourceBlind(source_, why);
}

}  // namespace xpu::hal
