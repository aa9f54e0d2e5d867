#include "hal/nvml/nvml_lookout.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>
#include <thread>

#include "common/mutex.h"
#include "common/worker.h"
#include "hal/nvml/nvml_library.h"

namespace xpu::hal {

// One probe in flight at most: its thread writes the answer here.
struct NvmlLookout::Probe {
  Mutex mu;
  CondVar cv;
  bool running XPU_GUARDED_BY(mu) = false;
  bool answered XPU_GUARDED_BY(mu) = false;
  bool found XPU_GUARDED_BY(mu) = false;
  std::string why XPU_GUARDED_BY(mu);

  // Asks the library (unless a probe is still in its call) and waits up to
  // `deadline` for an answer, or until `worker` stops; whether NVML lists a
  // card, and why not.
  static bool Ask(const std::shared_ptr<Probe>& self, const std::string& library,
                  std::chrono::milliseconds deadline, const Worker& worker, std::string* why) {
    MutexLock lock(self->mu);
    if (!self->running) {
      self->running = true;
      self->answered = false;
      std::thread([self, library] {
        NameThisThread("nvml-probe");
        std::shared_ptr<const NvmlLibrary> lib;
        Status s = NvmlLibrary::Open(library, &lib);
        unsigned count = 0;
        if (s.ok() && lib->api().device_count != nullptr) {
          if (const nvml::Return r = lib->api().device_count(&count); r != nvml::kSuccess)
            s = Status::Unavailable("nvmlDeviceGetCount_v2: " + lib->ErrorString(r));
        }
        MutexLock answer(self->mu);
        self->running = false;
        self->answered = true;
        self->found = s.ok() && count > 0;
        self->why = !s.ok()     ? s.message()
                    : count > 0 ? std::to_string(count) + " card(s) through " + library
                                : library + " lists no card";
        self->cv.NotifyAll();
      }).detach();
    }
    const auto until = std::chrono::steady_clock::now() + deadline;
    while (!self->answered && !worker.stopping() && std::chrono::steady_clock::now() < until)
      self->cv.WaitFor(lock, std::chrono::milliseconds(50));
    if (!self->answered) {
      *why = library + " did not answer within " + std::to_string(deadline.count()) +
             " ms (asked again once it does)";
      return false;
    }
    self->answered = false;  // taken
    *why = self->why;
    return self->found;
  }
};

namespace {

// One probe per library in the process: a reload's lookout asks the probe
// its predecessor left (maybe still in a call that hangs), never a second.
// Never destroyed (a probe's thread may outlive every lookout). Any thread.
class Probes {
 public:
  static std::shared_ptr<NvmlLookout::Probe> Of(const std::string& library) {
    static Probes* const table = new Probes();
    MutexLock lock(table->mu_);
    std::shared_ptr<NvmlLookout::Probe>& p = table->probes_[library];
    if (!p) p = std::make_shared<NvmlLookout::Probe>();
    return p;
  }

 private:
  Mutex mu_;
  std::map<std::string, std::shared_ptr<NvmlLookout::Probe>> probes_ XPU_GUARDED_BY(mu_);
};

}  // namespace

NvmlLookout::NvmlLookout(Build build)
    : build_(std::move(build)), probe_(Probes::Of(build_.options.library)) {}

Part* NvmlLookout::Working() {
  NvmlSampler* s = running_.load(std::memory_order_acquire);
  return s != nullptr ? static_cast<Part*>(s) : this;
}

NvmlLookout::~NvmlLookout() { Stop(); }

void NvmlLookout::Found() {
  sampler_ =
      std::make_unique<NvmlSampler>(build_.options, build_.catalog, build_.registry,
                                    build_.self_metrics, build_.exemplars, build_.fault_metrics);
}

void NvmlLookout::Start() {
  if (sampler_) {  // taken over: found already
    sampler_->Start();
    running_.store(sampler_.get(), std::memory_order_release);
    return;
  }
  build_.registry->SetLooking(kSourceNvml, "looking for " + build_.options.library);
  worker_.Start([this] { Loop(); }, "nvml-lookout");
}

void NvmlLookout::Loop() {
  const auto began = std::chrono::steady_clock::now();
  const std::chrono::milliseconds interval = build_.options.interval;
  std::chrono::milliseconds gap = interval;
  std::string said;
  do {
    std::string why;
    if (Probe::Ask(probe_, build_.options.library, interval, worker_, &why)) {
      spdlog::info("HAL nvml: {}; reading them every {} ms", why, interval.count());
      build_.registry->SetLooking(kSourceNvml, "");
      Found();
      sampler_->Start();
      running_.store(sampler_.get(), std::memory_order_release);
      return;
    }
    if (why != said)
      spdlog::info("HAL nvml: not found yet ({}); looked for again in the background", why);
    said = why;
    build_.registry->SetLooking(kSourceNvml, why);
    if (std::chrono::steady_clock::now() - began >= kEagerFor)
      gap = std::min<std::chrono::milliseconds>(gap * 2, kMaxProbeGap);
  } while (worker_.SleepFor(gap));
}

void NvmlLookout::Stop() {
  worker_.Stop();
  if (sampler_) sampler_->Stop();
}

void NvmlLookout::TakeOver(Part& old) {
  Part* ran = &old;
  if (auto* lookout = dynamic_cast<NvmlLookout*>(&old)) ran = lookout->sampler();
  auto* sampler = dynamic_cast<NvmlSampler*>(ran);
  // Found only where that sampler read this library and saw (--hal=nvml's
  // may have been blind all along): else this one looks.
  if (sampler == nullptr || sampler->options().library != build_.options.library ||
      !sampler->ever_seen())
    return;
  Found();
  sampler_->TakeOver(*ran);
}

void NvmlLookout::Withdraw() {
  build_.registry->SetLooking(kSourceNvml, "");
  if (sampler_) sampler_->Withdraw();
}

}  // namespace xpu::hal
