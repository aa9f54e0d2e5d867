#pragma once

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/registry.h>

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "hal/fault_catalog.h"
#include "hal/fault_events.h"
#include "hal/nvml/nvml_reader.h"
#include "hal/source_sampler.h"
#include "store/exemplars.h"
#include "store/ports.h"

namespace xpu::hal {

// The registry source name of the nvml backend's view.
inline constexpr const char* kSourceNvml = "nvml";

// One event NVML delivered (nvmlEventSetWait_v2): the card by NVML's
// index, the event type (nvml::kEventXidCriticalError...) and its data (the
// Xid).
struct NvmlEvent {
  unsigned index = 0;
  unsigned long long type = 0, data = 0;
};
// The event thread waits in slices this long, so that it sees a stop. An
// event ends a wait at once; a stopped listener is detached and holds
// nothing a stop waits for, so the slice is long: each one is a wake-up of
// an idle node.
inline constexpr unsigned kEventWaitMs = 5000;
// Events held for the sampler at most (a card that floods drops the oldest).
inline constexpr size_t kMaxPendingEvents = 1024;
// Containers whose memory one read attributes, on all cards together (the
// series of xpu_container_memory_used_bytes); more are counted as dropped.
inline constexpr size_t kMaxNvmlContainerRows = 1024;
// The fault code of an event, as the kernel-log backend names the same
// Xid (0x10DE0000 + Xid; a double-bit ECC event is Xid 48's), or "" for
// one that raises nothing.
std::string NvmlEventCode(const NvmlEvent& e);

// The nvml backend (docs/hal.md, "nvml"): every interval, reads every card
// through NVIDIA's library and publishes one DeviceViews: each card joined
// to XDM's list by bus id (named by NVML's UUID while XDM does not list it),
// lost cards unhealthy with nvidia_gpu_lost, the faults DeriveNvmlFaults
// gives, and the nvml families (NvmlFamilies).
//
// The reads run on a thread of their own (a reader that the sampler asks
// and waits for), so that a call the driver never answers holds that thread
// only: past the deadline the source says it is blind, and a sampler that
// stops leaves the reader to end when the call returns. A library that
// cannot be loaded or initialised makes the source blind, never healthy.
//
// Start()/Stop() from the owning thread; SampleOnce() for tests, not
// concurrently with a running sampler.
class NvmlSampler : public SourceSampler {
 public:
  struct Options {
    std::string library = "libnvidia-ml.so.1";  // --hal.nvml.library
    std::chrono::milliseconds interval{1000};
    // How often every card is read whole (--hal.gauge-interval): its
    // gauges, counters, links, MIG devices and processes, which change
    // slowly or are only shown; between, each interval reads only what
    // raises a fault (a lost card, row remaps, pages waiting to retire; Xids
    // come as events). At most the interval: every read whole.
    std::chrono::milliseconds gauge_interval{10000};
    // How long one read of every card may take; 0: the interval. A read
    // past it leaves the source blind: as hung while it goes on, as slow
    // once it answered late.
    std::chrono::milliseconds deadline{0};
    // As the kernel log's catalog says (kmsg_patterns.yaml), so that both
    // sources agree: how long an event's code stays active after its last
    // event, and the codes that are states (active for as long as the
    // sampler and its successors run: Xid 79's remedy is a reboot).
    std::chrono::milliseconds event_active_for{std::chrono::minutes(10)};
    std::vector<std::string> states;
    // The host's /proc (--hal.nvml.host-proc): each process on a card is
    // joined to its pod by its cgroup there. Empty: processes not joined.
    std::string host_proc;
    bool operator==(const Options&) const = default;
  };
  NvmlSampler(Options options, std::shared_ptr<const FaultCatalog> catalog,
              store::HealthSourcePort* registry, prometheus::Registry* self_metrics,
              store::ExemplarStore* exemplars = nullptr,
              prometheus::Registry* fault_metrics = nullptr);
  ~NvmlSampler() override;
  NvmlSampler(const NvmlSampler&) = delete;
  NvmlSampler& operator=(const NvmlSampler&) = delete;

  // Part: the active faults of the sampler it replaces (an NvmlSampler, or
  // the one an NvmlLookout ran) and, on the same library, its reader: the
  // library stays initialised and its event listener goes on, so no Xid
  // the driver reports across a reload is lost.
  void TakeOver(Part& old) override;
  // One sample: false if the source could not see.
  bool SampleOnce();
  const Options& options() const { return options_; }
  FaultEvents::State fault_state() const { return faults_.state(); }
  const std::shared_ptr<const FaultCatalog>& fault_catalog() const { return faults_.catalog(); }
  // Each card's identity as last read, by NVML's index: a lost card answers
  // nothing, so it is named by what it was (its index is stable while the
  // driver stays loaded).
  struct Identity {
    std::string uuid, bus_id;
  };
  std::map<unsigned, Identity> identities() const { return identities_; }

 private:
  struct Reader;
  void Tick() override { (void)SampleOnce(); }
  void Publish(std::vector<NvmlDevice> cards, const std::vector<NvmlEvent>& events);
  // Names each lost card by what it was at its index (identities_), and
  // merges the cards found lost by address (NvmlDevice::asked) into them.
  void NameLostCards(std::vector<NvmlDevice>* cards);
  // Why a sample got no answer in time: slow (reads answer, late) or a hang;
  // keeps slow_read_ and the duration gauge.
  std::string WhyUnanswered(std::chrono::milliseconds limit,
                            std::optional<std::chrono::steady_clock::duration> late,
                            std::optional<std::chrono::steady_clock::duration> in_flight);
  // After a whole read, keeps it; after a health-only one, gives each card
  // its slow facts from the last whole read (while those are fresh).
  void KeepOrFill(bool whole, std::vector<NvmlDevice>* cards);
  // The last whole read (when: cadence_); sampler-thread state.
  std::vector<NvmlDevice> last_whole_;
  // What the last families were made of, and they: the same cards, read the
  // same, publish the same families (kept_families), not built again.
  struct FamiliesOf {
    NvmlDevice card;
    std::string minor, uuid, model;
    bool operator==(const FamiliesOf&) const = default;
  };
  std::vector<FamiliesOf> families_of_;
  std::shared_ptr<const std::vector<prometheus::MetricFamily>> families_;
  // The codes the events raised that are active now, for card `index`.
  std::set<std::string> EventCodes(unsigned index, std::chrono::steady_clock::time_point now) const;

  const Options options_;
  GaugeCadence cadence_;                     // sampler-thread state, from options_
  std::shared_ptr<Reader> reader_;           // shared with its thread, which may outlive this
  FaultEvents faults_;                       // sampler-thread state
  std::map<unsigned, Identity> identities_;  // sampler-thread state
  // When each card's event codes were last raised, by NVML's index and
  // code; sampler-thread state, handed over on a reload.
  std::map<unsigned, std::map<std::string, std::chrono::steady_clock::time_point>> event_seen_;
  prometheus::Family<prometheus::Counter>& read_errors_;
  prometheus::Family<prometheus::Gauge>& missing_;
  // The processes on the cards last read, by what their cgroup said.
  prometheus::Family<prometheus::Gauge>& processes_;
  // The last read's duration, or the one going on's when no answer came
  // (no series before either).
  prometheus::Family<prometheus::Gauge>& read_duration_;
  // How long the last late answer's read took, until a read answers in
  // time; sampler-thread state.
  std::optional<std::chrono::steady_clock::duration> slow_read_;
  // Each card's processes summed by container (those in a pod's cgroup),
  // and counted into processes_ by outcome.
  std::vector<store::ContainerMemory> ContainersOf(const NvmlDevice& card,
                                                   std::map<std::string, double>* outcomes,
                                                   size_t* rows);
  LogOnce logged_;
};

// One card as the view writes it: what NVML read, and the minor and uuid
// it is joined to (XDM's when XDM lists its bus id).
struct NvmlJoined {
  const NvmlDevice* card;
  std::string minor;  // "" while XDM does not list it
  std::string uuid;
  std::string model;  // XDM's model, or NVML's name while XDM does not list it
};

// The nvml backend's own families (docs/metrics.md): ECC counts, retired
// pages, row remaps, clock-event reasons, NVLink state and errors, PCIe
// replays, MIG mode and devices; each series with minor, uuid and bus_id.
// Then the gauges XDM also reports (temperature, power, energy, memory,
// utilization), under the built-in catalog's names, help and labels (minor,
// uuid, model): the page writes them into XDM's families only for the cards
// XDM gives no sample of that family for (exposition::SnapshotWriter::FillIns),
// so a family is never written twice and XDM's value stands where it has one.
std::vector<prometheus::MetricFamily> NvmlFamilies(const std::vector<NvmlJoined>& cards);

}  // namespace xpu::hal
