#include "hal/nvml/nvml_sampler.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <optional>
#include <set>
#include <thread>
#include <utility>

#include "catalog/catalog.h"
#include "common/metric_family.h"
#include "common/mutex.h"
#include "common/worker.h"
#include "hal/nvml/nvml_lookout.h"
#include "hal/nvml/pod_cgroup.h"
#include "hal/pci_address.h"
#include "store/faults.h"

namespace xpu::hal {

// What the sampler and its reader thread share; the thread holds it as long
// as it runs, which may be longer than the sampler lives (a call that hangs).
struct NvmlSampler::Reader {
  Reader(std::string path, std::chrono::milliseconds retry)
      : library(std::move(path)), register_retry(retry) {}
  const std::string library;
  // How often the event thread registers again a card it could not.
  const std::chrono::milliseconds register_retry;
  Mutex mu;
  CondVar cv;
  bool started XPU_GUARDED_BY(mu) = false;  // the thread
  bool quit XPU_GUARDED_BY(mu) = false;
  bool asked XPU_GUARDED_BY(mu) = false;  // a read waits for the thread
  // The inventory's cards NVML may have (NVIDIA's, or of a vendor not
  // known), to ask for by address (ReadNvmlDevices).
  std::vector<std::string> ask XPU_GUARDED_BY(mu);
  bool health_only XPU_GUARDED_BY(mu) = false;     // the read asked: health only (not whole)
  bool answered_whole XPU_GUARDED_BY(mu) = false;  // the answer is of a whole read
  bool reading XPU_GUARDED_BY(mu) = false;         // the thread is in one
  bool done XPU_GUARDED_BY(mu) = false;            // an answer waits for the sampler
  uint64_t generation XPU_GUARDED_BY(mu) = 0;      // of the last read asked
  uint64_t answered XPU_GUARDED_BY(mu) = 0;        // the read the answer is of
  // How long the read the answer is of took; when the one going on began.
  std::chrono::steady_clock::duration took XPU_GUARDED_BY(mu){};
  std::chrono::steady_clock::time_point reading_since XPU_GUARDED_BY(mu);
  Status status XPU_GUARDED_BY(mu);
  std::vector<NvmlDevice> cards XPU_GUARDED_BY(mu);
  std::vector<std::string> missing XPU_GUARDED_BY(mu);
  bool listening XPU_GUARDED_BY(mu) = false;  // the event thread runs
  // nvmlEventSetCreate failed: no event thread before this (tried again
  // register_retry later, not at every read), said once until it works.
  std::optional<std::chrono::steady_clock::time_point> listen_after XPU_GUARDED_BY(mu);
  // Events the event thread took and the sampler has not (bounded: a card
  // that floods drops the oldest, counted).
  std::deque<NvmlEvent> events XPU_GUARDED_BY(mu);
  uint64_t events_dropped XPU_GUARDED_BY(mu) = 0;
  // What the event thread has to say, logged by the sampler: a detached
  // thread never logs itself (it may run while the process exits and
  // spdlog's registry is destroyed). A warning when `warn`.
  std::vector<std::pair<bool, std::string>> notes XPU_GUARDED_BY(mu);

  // The event thread: registers every card for Xid and double-bit ECC
  // events (the Xid alone where a card refuses the pair), then waits for
  // them in slices of kEventWaitMs, so that it sees quit promptly; it ends
  // at quit. A card it could not register is tried again every
  // register_retry (its waits no longer than that meanwhile): a card left
  // deaf would read healthy through its Xids. A wait that fails at once
  // (not a timeout) is retried after a second, not spun, and said once
  // until a wait works again.
  static void Listen(const std::shared_ptr<Reader>& self,
                     const std::shared_ptr<const NvmlLibrary>& lib, unsigned count) {
    const NvmlLibrary::Api& a = lib->api();
    nvml::EventSet set = nullptr;
    if (const nvml::Return r = a.event_set_create(&set); r != nvml::kSuccess) {
      MutexLock lock(self->mu);
      // Said once until a set is made; tried again register_retry later
      // (before, a thread and this warning at every read, each second).
      if (!self->listen_after)
        self->notes.emplace_back(true, "no Xid events: nvmlEventSetCreate: " + lib->ErrorString(r) +
                                           " (tried again, said once)");
      self->listen_after = std::chrono::steady_clock::now() + self->register_retry;
      self->listening = false;
      return;
    }
    {
      MutexLock lock(self->mu);
      if (std::exchange(self->listen_after, std::nullopt))
        self->notes.emplace_back(false, "nvmlEventSetCreate works again");
    }
    std::map<nvml::Device, unsigned> index;
    std::set<unsigned> deaf;  // cards not registered yet
    size_t unsupported = 0;   // cards that have no events (not tried again)
    auto register_cards = [&](const std::set<unsigned>& cards) {
      for (unsigned i : cards) {
        nvml::Device h = nullptr;
        if (a.device_by_index(i, &h) != nvml::kSuccess) continue;
        nvml::Return r =
            a.register_events(h, nvml::kEventXidCriticalError | nvml::kEventDoubleBitEccError, set);
        if (r != nvml::kSuccess) r = a.register_events(h, nvml::kEventXidCriticalError, set);
        if (r == nvml::kSuccess) index[h] = i;
        if (r == nvml::kSuccess || r == nvml::kErrorNotSupported) deaf.erase(i);
        if (r == nvml::kErrorNotSupported) ++unsupported;
      }
    };
    for (unsigned i = 0; i < std::min(count, kMaxNvmlDevices); ++i) deaf.insert(i);
    register_cards(std::set<unsigned>(deaf));
    {
      MutexLock lock(self->mu);
      self->notes.emplace_back(
          !deaf.empty(),
          "listening for Xid and double-bit ECC events of " + std::to_string(index.size()) +
              " card(s)" +
              (unsupported == 0 ? std::string()
                                : "; " + std::to_string(unsupported) + " have none") +
              (deaf.empty() ? std::string()
                            : "; " + std::to_string(deaf.size()) +
                                  " could not be registered (tried again)"));
    }
    auto next_retry = std::chrono::steady_clock::now() + self->register_retry;
    bool wait_failing = false;
    for (;;) {
      {
        MutexLock lock(self->mu);
        if (self->quit) break;
      }
      if (!deaf.empty() && std::chrono::steady_clock::now() >= next_retry) {
        const size_t before = deaf.size();
        register_cards(std::set<unsigned>(deaf));
        next_retry = std::chrono::steady_clock::now() + self->register_retry;
        if (deaf.size() < before) {
          MutexLock lock(self->mu);
          self->notes.emplace_back(
              false, "listening for events of " + std::to_string(index.size()) + " card(s) now");
        }
      }
      const unsigned wait_ms = deaf.empty()
                                   ? kEventWaitMs
                                   : static_cast<unsigned>(std::clamp<int64_t>(
                                         self->register_retry.count(), 1, int64_t{kEventWaitMs}));
      nvml::EventData data{};
      const nvml::Return r =
          index.empty() ? nvml::kErrorNotFound : a.event_set_wait(set, &data, wait_ms);
      MutexLock lock(self->mu);
      if (r != nvml::kErrorTimeout && r != nvml::kSuccess && !index.empty() && !wait_failing) {
        wait_failing = true;
        self->notes.emplace_back(
            true, "waiting for events failed: " + lib->ErrorString(r) + " (retried each second)");
      } else if ((r == nvml::kSuccess || r == nvml::kErrorTimeout) && wait_failing) {
        wait_failing = false;
        self->notes.emplace_back(false, "waiting for events works again");
      }
      if (r == nvml::kSuccess) {
        auto it = index.find(data.device);
        if (it == index.end()) continue;
        if (self->events.size() >= kMaxPendingEvents) {
          self->events.pop_front();
          ++self->events_dropped;
        }
        self->events.push_back({it->second, data.event_type, data.event_data});
      } else if (r != nvml::kErrorTimeout) {
        // Nothing to wait on (no card registered yet) waits its retry.
        self->cv.WaitFor(lock, index.empty() ? std::min<std::chrono::milliseconds>(
                                                   self->register_retry, std::chrono::seconds(1))
                                             : std::chrono::seconds(1));
      }
    }
    a.event_set_free(set);
  }

  // The thread: opens the library at its first read (dlopen and
  // nvmlInit_v2 may hang too), then reads whenever asked, until quit.
  static void Run(const std::shared_ptr<Reader>& self) {
    std::shared_ptr<const NvmlLibrary> lib;
    MutexLock lock(self->mu);
    for (;;) {
      while (!self->asked && !self->quit) self->cv.Wait(lock);
      if (self->quit) return;
      self->asked = false;
      self->reading = true;
      const uint64_t generation = self->generation;
      const auto began = std::chrono::steady_clock::now();
      self->reading_since = began;
      const std::vector<std::string> ask = self->ask;
      const bool health_only = self->health_only;
      lock.Unlock();
      std::vector<NvmlDevice> cards;
      std::vector<std::string> missing;
      Status s = lib ? Status::Ok() : NvmlLibrary::Open(self->library, &lib);
      if (s.ok()) {
        missing = lib->missing();
        s = ReadNvmlDevices(*lib, &cards, ask, health_only);
      }
      lock.Lock();
      if (s.ok() && !cards.empty() && !self->listening &&
          (!self->listen_after || std::chrono::steady_clock::now() >= *self->listen_after) &&
          lib->api().event_set_create != nullptr && lib->api().register_events != nullptr &&
          lib->api().event_set_wait != nullptr && lib->api().event_set_free != nullptr) {
        self->listening = true;
        std::thread([self, lib, n = static_cast<unsigned>(cards.size())] {
          NameThisThread("nvml-events");
          Listen(self, lib, n);
        }).detach();
      }
      self->reading = false;
      self->done = true;
      self->answered = generation;
      self->took = std::chrono::steady_clock::now() - began;
      self->answered_whole = !health_only;
      self->status = std::move(s);
      self->cards = std::move(cards);
      self->missing = std::move(missing);
      // Told with the lock let go: a sampler woken under it would wake
      // only to wait for it (two wake-ups a read, not one).
      lock.Unlock();
      self->cv.NotifyAll();
      lock.Lock();
    }
  }
};

NvmlSampler::NvmlSampler(Options options, std::shared_ptr<const FaultCatalog> catalog,
                         store::HealthSourcePort* registry, prometheus::Registry* self_metrics,
                         store::ExemplarStore* exemplars, prometheus::Registry* fault_metrics)
    : SourceSampler({kSourceNvml,
                     "xpu_nvml_up",
                     "Whether the last read of every card through NVML (--hal=nvml) succeeded "
                     "within its deadline.",
                     {}},
                    options.interval, registry, self_metrics),
      options_(std::move(options)),
      cadence_(options_.interval, options_.gauge_interval),
      reader_(std::make_shared<Reader>(options_.library, options_.gauge_interval)),
      faults_(std::move(catalog), fault_metrics != nullptr ? fault_metrics : self_metrics,
              kSourceNvml, registry, exemplars),
      read_errors_(prometheus::BuildCounter()
                       .Name("xpu_nvml_read_errors_total")
                       .Help("NVML calls that failed for another reason than \"not supported\" "
                             "or a lost GPU, by card.")
                       .Register(*self_metrics)),
      missing_(prometheus::BuildGauge()
                   .Name("xpu_nvml_missing_functions")
                   .Help("NVML functions the driver's library lacks (an older driver); what "
                         "needs them is not read. Always 1.")
                   .Register(*self_metrics)),
      processes_(prometheus::BuildGauge()
                     .Name("xpu_nvml_processes")
                     .Help("Compute processes on the NVIDIA cards at the last read, by what "
                           "their cgroup in --hal.nvml.host-proc said: pod (in a pod's cgroup; "
                           "named on the page only for a pod the API server's watch gives), "
                           "not_a_pod, unreadable (no such process there, or its cgroup file "
                           "could not be read), dropped (past the bound of containers), off "
                           "(--hal.nvml.host-proc not set), no_memory_value (NVML gave no "
                           "memory figure).")
                     .Register(*self_metrics)),
      read_duration_(prometheus::BuildGauge()
                         .Name("xpu_nvml_read_duration_seconds")
                         .Help("How long the last whole read of every card through NVML took, "
                               "within its deadline (--hal.interval) or past it, or, while none "
                               "answers, how long the read going on has taken: a read past the "
                               "deadline leaves the source blind, as slow or as hung.")
                         .Register(*self_metrics)) {}

NvmlSampler::~NvmlSampler() {
  Stop();
  MutexLock lock(reader_->mu);
  reader_->quit = true;  // the thread ends now, or when a call that hangs returns
  reader_->cv.NotifyAll();
}

void NvmlSampler::TakeOver(Part& old) {
  auto* o = dynamic_cast<NvmlSampler*>(&old);
  if (auto* lookout = dynamic_cast<NvmlLookout*>(&old)) {
    registry()->SetLooking(kSourceNvml, "");  // --hal=nvml now: runs, looks no more
    o = lookout->sampler();
  }
  if (o == nullptr) return;
  SeenBefore(o->ever_seen());
  faults_.Seed(o->fault_state());
  identities_ = o->identities();
  event_seen_ = o->event_seen_;
  last_whole_ = o->last_whole_;
  cadence_.TakeLast(o->cadence_);
  if (o->options_.library == options_.library) {
    // The same library: its reader goes on here (its library, its event
    // listener with its event set), so every event the driver reports
    // across the reload is delivered to this sampler, and NVML is not
    // asked to start again. The old sampler quits the unused one.
    std::swap(reader_, o->reader_);
    return;
  }
  // Another library: the events the old reader took and its sampler had
  // not yet are raised here (a reload between an Xid and the next sample
  // must not lose it). One lock at a time, never both.
  std::deque<NvmlEvent> pending;
  {
    MutexLock lock(o->reader_->mu);
    pending.swap(o->reader_->events);
  }
  if (!pending.empty()) {
    MutexLock lock(reader_->mu);
    reader_->events.insert(reader_->events.begin(), pending.begin(), pending.end());
    while (reader_->events.size() > kMaxPendingEvents) reader_->events.pop_front();
  }
}

void NvmlSampler::KeepOrFill(bool whole, std::vector<NvmlDevice>* cards) {
  const auto now = std::chrono::steady_clock::now();
  if (whole) {
    last_whole_ = *cards;
    cadence_.ReadWhole(now);
    return;
  }
  // A health-only read: each card's slow facts from its last whole read,
  // while that is younger than kStaleIntervals of their cadence (else
  // they are no evidence, and left out).
  if (!cadence_.Fresh(now)) return;
  for (NvmlDevice& c : *cards) {
    for (const NvmlDevice& w : last_whole_)
      if (w.index == c.index && w.uuid == c.uuid && w.bus_id == c.bus_id) KeepSlowFacts(w, &c);
  }
}

bool NvmlSampler::SampleOnce() {
  std::vector<std::string> ask;
  for (const store::InventoryDevice& d : registry()->Inventory())
    if (!d.bus_id.empty() && (d.vendor.empty() || d.vendor == "0x10de")) ask.push_back(d.bus_id);
  using Clock = std::chrono::steady_clock;
  const std::chrono::milliseconds limit =
      options_.deadline.count() > 0 ? options_.deadline : interval();
  const auto deadline = Clock::now() + limit;
  // How long a read took that answered after a sample gave up on it (NVML
  // is slow, not hung), and how long the read going on has taken.
  std::optional<Clock::duration> late, in_flight;
  Clock::duration took{};
  Status status;
  std::vector<NvmlDevice> cards;
  std::vector<std::string> missing;
  std::vector<NvmlEvent> events;
  bool answered = false;
  bool whole = false;
  {
    Reader& r = *reader_;
    MutexLock lock(r.mu);
    if (!r.started) {
      r.started = true;
      std::thread([reader = reader_] {
        NameThisThread("nvml-read");
        Reader::Run(reader);
      }).detach();
    }
    if (r.done) late = r.took;
    r.done = false;  // an answer still here is late, to a read an earlier sample gave up on
    uint64_t want = 0;
    if (!r.asked && !r.reading && !r.done) {
      r.asked = true;
      r.ask = std::move(ask);
      r.health_only = !cadence_.WholeDue(Clock::now());
      if (!r.health_only) cadence_.Tried(Clock::now());
      want = ++r.generation;
      lock.Unlock();  // as the reader tells its answer
      r.cv.NotifyAll();
      lock.Lock();
    }
    while (!(r.done && r.answered == want && want != 0) && !worker().stopping() &&
           Clock::now() < deadline)
      r.cv.WaitFor(lock, std::chrono::milliseconds(50));
    for (const auto& [warn, text] : r.notes) {
      if (warn) {
        spdlog::warn("HAL nvml: {}", text);
      } else {
        spdlog::info("HAL nvml: {}", text);
      }
    }
    r.notes.clear();
    if (r.done && r.answered == want && want != 0) {
      answered = true;
      took = r.took;
      r.done = false;
      status = std::move(r.status);
      whole = r.answered_whole;
      cards = std::move(r.cards);
      missing = std::move(r.missing);
      if (status.ok()) {  // a failed read leaves them for the next good one
        events.assign(r.events.begin(), r.events.end());
        r.events.clear();
      }
    } else if (r.done) {
      late = r.took;  // the read an earlier sample gave up on, answered while this one waited
    } else if (r.reading || r.asked) {
      in_flight = r.reading ? Clock::now() - r.reading_since : Clock::duration{};
    }
  }
  if (!answered) {
    Blind(WhyUnanswered(limit, late, in_flight));
    return false;
  }
  slow_read_.reset();
  read_duration_.Add({}).Set(std::chrono::duration<double>(took).count());
  const bool was_slow = logged_.Clear("slow");
  if (logged_.Clear("hang") || was_slow) spdlog::info("HAL nvml: NVML answers again");
  if (!status.ok()) {
    if (logged_.Raise("read"))
      spdlog::warn("HAL nvml: {}; NVIDIA cards are not seen", status.message());
    Blind(status.message());
    return false;
  }
  if (logged_.Clear("read"))
    spdlog::info("HAL nvml: reading NVIDIA cards through {}", options_.library);
  for (const std::string& m : missing) {
    missing_.Add({{"function", m}}).Set(1);
    if (logged_.Raise("missing " + m))
      spdlog::info("HAL nvml: {} lacks {}: what needs it is not read", options_.library, m);
  }
  KeepOrFill(whole, &cards);
  Publish(std::move(cards), events);
  return true;
}

std::string NvmlSampler::WhyUnanswered(
    std::chrono::milliseconds limit, std::optional<std::chrono::steady_clock::duration> late,
    std::optional<std::chrono::steady_clock::duration> in_flight) {
  const auto ms = [](std::chrono::steady_clock::duration d) {
    return std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(d).count());
  };
  if (late) slow_read_ = *late;
  // The gauge: the late read's time, or the one going on's so far if longer.
  const auto shown = std::max(late.value_or(std::chrono::steady_clock::duration{}),
                              in_flight.value_or(std::chrono::steady_clock::duration{}));
  if (late || in_flight) read_duration_.Add({}).Set(std::chrono::duration<double>(shown).count());
  // Slow while reads have answered late and the one going on has not run
  // far longer than they took; a read past that, or before any late
  // answer, hangs. The reason holds no figure that changes from read to
  // read: the Node condition carries it, and a new text is a new patch.
  const bool slow = slow_read_ && (!in_flight || *in_flight <= 2 * *slow_read_ + limit);
  if (slow) {
    std::string why = "NVML answers, but past the " + ms(limit) +
                      " ms deadline: slow, not hung (xpu_nvml_read_duration_seconds says "
                      "how long a read takes; the deadline is --hal.interval, and a longer "
                      "one lets reads finish)";
    (void)logged_.Clear("hang");
    if (logged_.Raise("slow"))
      spdlog::warn("HAL nvml: {}; the last read took {} ms", why, ms(*slow_read_));
    return why;
  }
  std::string why = "NVML did not answer within " + ms(limit) + " ms (a call hangs)";
  (void)logged_.Clear("slow");
  if (logged_.Raise("hang")) spdlog::warn("HAL nvml: {}", why);
  return why;
}

std::string NvmlEventCode(const NvmlEvent& e) {
  unsigned long long xid = 0;
  if ((e.type & nvml::kEventXidCriticalError) != 0) {
    xid = e.data;
  } else if ((e.type & nvml::kEventDoubleBitEccError) != 0) {
    xid = 48;  // NVIDIA's Xid for a double-bit ECC error
  }
  if (xid == 0 || xid > 0xFFFF) return "";
  char code[16];
  std::snprintf(code, sizeof code, "0x%08llX", 0x10DE0000ULL + xid);
  return code;
}

std::set<std::string> NvmlSampler::EventCodes(unsigned index,
                                              std::chrono::steady_clock::time_point now) const {
  std::set<std::string> codes;
  auto it = event_seen_.find(index);
  if (it == event_seen_.end()) return codes;
  for (const auto& [code, when] : it->second) {
    const bool state =
        std::find(options_.states.begin(), options_.states.end(), code) != options_.states.end();
    if (state || now - when < options_.event_active_for) codes.insert(code);
  }
  return codes;
}

void NvmlSampler::NameLostCards(std::vector<NvmlDevice>* cards) {
  // A lost card says nothing of itself (or only the address it was found
  // at): named by what it was at its index, and what is new is kept.
  std::set<std::string> named;
  for (NvmlDevice& c : *cards) {
    if (c.asked) continue;
    Identity& known = identities_[c.index];
    // Its uuid only where its address is the one it had (not where the
    // handle found it at another: the driver numbered its cards anew).
    if (c.uuid.empty() && (c.bus_id.empty() || known.bus_id.empty() || c.bus_id == known.bus_id))
      c.uuid = known.uuid;
    if (c.bus_id.empty()) c.bus_id = known.bus_id;
    known = {c.uuid, c.bus_id};
    if (!c.bus_id.empty()) named.insert(c.bus_id);
  }
  // A card found lost by its address is one of those named so, or one that
  // was lost before it was ever named: it takes the place of such a nameless
  // one (which of them is not known, and they say nothing but "lost").
  std::erase_if(*cards, [&](const NvmlDevice& c) { return c.asked && named.count(c.bus_id) != 0; });
  size_t unnamed_asked = 0;
  for (const NvmlDevice& c : *cards) unnamed_asked += c.asked ? 1 : 0;
  std::erase_if(*cards, [&](const NvmlDevice& c) {
    const bool nameless = c.lost && !c.asked && c.bus_id.empty() && c.uuid.empty();
    if (!nameless || unnamed_asked == 0) return false;
    --unnamed_asked;
    return true;
  });
}

void NvmlSampler::Publish(std::vector<NvmlDevice> cards, const std::vector<NvmlEvent>& events) {
  const auto now = std::chrono::steady_clock::now();
  for (const NvmlEvent& e : events) {
    const std::string code = NvmlEventCode(e);
    if (code.empty()) continue;
    const bool active = EventCodes(e.index, now).count(code) != 0;
    event_seen_[e.index][code] = now;
    if (!active)  // logged as it becomes active, not at each repeat
      spdlog::warn("HAL nvml: card {} reported {} (NVML event {:#x}, data {})", e.index, code,
                   e.type, e.data);
  }
  // Codes no longer active are forgotten (the map stays as small as what is active).
  for (auto it = event_seen_.begin(); it != event_seen_.end();) {
    const std::set<std::string> active = EventCodes(it->first, now);
    std::erase_if(it->second, [&](const auto& kv) { return active.count(kv.first) == 0; });
    it = it->second.empty() ? event_seen_.erase(it) : std::next(it);
  }
  // Each card as the inventory names it (XDM's minor, uuid and model where
  // it lists the card), by its address.
  std::map<std::string, store::InventoryDevice> named;
  for (store::InventoryDevice& d : registry()->Inventory())
    if (!d.bus_id.empty()) named[d.bus_id] = std::move(d);
  store::DeviceViews views;
  std::vector<NvmlJoined> joined;
  std::map<std::string, double> outcomes = {{"pod", 0},        {"not_a_pod", 0},
                                            {"unreadable", 0}, {"dropped", 0},
                                            {"off", 0},        {"no_memory_value", 0}};
  size_t container_rows = 0;
  NameLostCards(&cards);
  for (const NvmlDevice& c : cards) {
    NvmlJoined j{&c, "", c.uuid, c.name};
    store::DeviceView v;
    v.bus_id = c.bus_id;
    v.model = c.name;
    if (auto it = named.find(c.bus_id); it != named.end() && !c.bus_id.empty()) {
      const store::InventoryDevice& card = it->second;
      if (card.minor >= 0) j.minor = std::to_string(card.minor);
      if (!card.uuid.empty()) j.uuid = card.uuid;
      if (!card.model.empty()) j.model = card.model;
    }
    v.uuid = j.uuid;
    // A lost card is unhealthy; one whose handle could not be had is not seen.
    if (c.lost) {
      v.healthy = false;
    } else if (!c.unreadable) {
      v.healthy = true;
    }
    const std::string key = !c.bus_id.empty() ? c.bus_id : "card " + std::to_string(c.index);
    std::set<std::string> codes = EventCodes(c.index, now);
    for (std::string& code : DeriveNvmlFaults(c)) codes.insert(std::move(code));
    // A read that failed is no recovery: the faults last read stay, and the
    // card is not seen.
    if (c.unreadable) {
      for (const std::string& code : faults_.Previous(key)) codes.insert(code);
      v.seen = false;
    }
    v.faults = faults_.Update(key, "NVIDIA GPU " + key, j.minor, v.uuid, c.bus_id, codes);
    if (!c.errors.empty()) {
      read_errors_.Add({{"bus_id", c.bus_id}}).Increment(static_cast<double>(c.errors.size()));
      if (logged_.Raise("errors " + key))
        spdlog::warn("HAL nvml: {}: {} (logged once)", key, c.errors.front());
    } else if (logged_.Clear("errors " + key)) {
      spdlog::info("HAL nvml: {} reads cleanly again", key);
    }
    v.containers = ContainersOf(c, &outcomes, &container_rows);
    views.devices.push_back(std::move(v));
    joined.push_back(std::move(j));
  }
  for (const auto& [outcome, n] : outcomes) processes_.Add({{"cgroup", outcome}}).Set(n);
  faults_.EndSample();
  // The families only when what they are made of changed (a whole read, a
  // fault, a card named anew): between whole reads the same are kept.
  std::vector<FamiliesOf> of;
  of.reserve(joined.size());
  for (const NvmlJoined& j : joined) of.push_back({*j.card, j.minor, j.uuid, j.model});
  if (!families_ || of != families_of_) {
    std::vector<prometheus::MetricFamily> families = NvmlFamilies(joined);
    // Lent to the page as they are (FamilyLender): in its order once here,
    // not copied and sorted at every scrape (link "10" comes before "2").
    for (prometheus::MetricFamily& f : families) PutInPageOrder(&f);
    families_ = std::make_shared<const std::vector<prometheus::MetricFamily>>(std::move(families));
    families_of_ = std::move(of);
  }
  views.kept_families = families_;
  // NVML answers for NVIDIA's cards: one of the inventory it does not list
  // (nor find by its address) is not seen.
  views.coverage = store::Coverage::kListed;
  views.vendor = "0x10de";
  views.driver = "nvidia";  // not a card passed through to a VM (vfio-pci)
  registry()->SetDeviceViews(kSourceNvml, std::move(views));
  Seeing();
}

std::vector<store::ContainerMemory> NvmlSampler::ContainersOf(
    const NvmlDevice& card, std::map<std::string, double>* outcomes, size_t* rows) {
  std::map<std::pair<std::string, std::string>, uint64_t> sums;
  for (const NvmlProcess& p : card.processes) {
    if (p.used_bytes == nvml::kValueNotAvailable) {  // WDDM, or MIG without the privilege
      ++(*outcomes)["no_memory_value"];
      continue;
    }
    if (options_.host_proc.empty()) {
      ++(*outcomes)["off"];
      continue;
    }
    PodCgroup cg;
    bool in_pod = false;
    std::string why;
    if (!ReadPodCgroup(options_.host_proc, p.pid, &cg, &in_pod, &why)) {
      // A process that ended since the read is usual; a /proc that is not
      // the host's (no hostPID, no mount) leaves every one unreadable: said
      // once, and counted.
      ++(*outcomes)["unreadable"];
      if (logged_.Raise("proc " + options_.host_proc))
        spdlog::info(
            "HAL nvml: {} (if every process is unreadable, --hal.nvml.host-proc is "
            "not the host's /proc)",
            why);
      continue;
    }
    if (!in_pod) {
      ++(*outcomes)["not_a_pod"];
      continue;
    }
    auto it = sums.find({cg.pod_uid, cg.container_id});
    if (it == sums.end()) {
      if (*rows >= kMaxNvmlContainerRows) {
        ++(*outcomes)["dropped"];
        continue;
      }
      ++*rows;
      it = sums.emplace(std::pair{std::move(cg.pod_uid), std::move(cg.container_id)}, 0).first;
    }
    it->second += p.used_bytes;
    ++(*outcomes)["pod"];
  }
  std::vector<store::ContainerMemory> out;
  out.reserve(sums.size());
  for (auto& [key, bytes] : sums) out.push_back({key.first, key.second, bytes});
  return out;
}

namespace {

// The clock-event reasons by the label an alert names.
struct Reason {
  unsigned long long bit;
  const char* name;
};
constexpr Reason kReasons[] = {
    {nvml::kClocksEventGpuIdle, "gpu_idle"},
    {nvml::kClocksEventApplicationsClocksSetting, "applications_clocks_setting"},
    {nvml::kClocksEventSwPowerCap, "sw_power_cap"},
    {nvml::kClocksEventHwSlowdown, "hw_slowdown"},
    {nvml::kClocksEventSyncBoost, "sync_boost"},
    {nvml::kClocksEventSwThermalSlowdown, "sw_thermal_slowdown"},
    {nvml::kClocksEventHwThermalSlowdown, "hw_thermal_slowdown"},
    {nvml::kClocksEventHwPowerBrakeSlowdown, "hw_power_brake_slowdown"},
};

// The gauges XDM reports too, as XDM's families (NvmlFamilies says how the
// page writes them): the built-in catalog's entries by XDM metric ID.
std::vector<prometheus::MetricFamily> XdmFamilies(const std::vector<NvmlJoined>& cards) {
  struct Gauge {
    uint32_t xdm_id;
    std::function<std::optional<double>(const NvmlDevice&)> value;
  };
  auto opt = [](const auto& v) -> std::optional<double> {
    if (!v) return std::nullopt;
    return static_cast<double>(*v);
  };
  const Gauge gauges[] = {
      {1,
       [](const NvmlDevice& c) -> std::optional<double> {
         if (!c.gpu_utilization) return std::nullopt;
         return *c.gpu_utilization / 100.0;
       }},
      {2, [&opt](const NvmlDevice& c) { return opt(c.memory_used_bytes); }},
      {3, [&opt](const NvmlDevice& c) { return opt(c.memory_total_bytes); }},
      {4, [&opt](const NvmlDevice& c) { return opt(c.temperature_celsius); }},
      {6, [&opt](const NvmlDevice& c) { return opt(c.power_watts); }},
      {7, [&opt](const NvmlDevice& c) { return opt(c.energy_joules); }},
  };
  const std::shared_ptr<const catalog::Catalog> builtin = catalog::Catalog::Builtin();
  std::vector<prometheus::MetricFamily> out;
  for (const Gauge& g : gauges) {
    const catalog::Entry* e = builtin->Find(g.xdm_id);
    if (e == nullptr) continue;
    const bool counter = e->type == catalog::MetricType::kCounter;
    auto f = NewFamily(e->name, e->help,
                       counter ? prometheus::MetricType::Counter : prometheus::MetricType::Gauge);
    for (const NvmlJoined& j : cards) {
      const std::optional<double> v = g.value(*j.card);
      if (!v) continue;
      const MetricLabels l = {{"minor", j.minor}, {"uuid", j.uuid}, {"model", j.model}};
      f.metric.push_back(counter ? CounterSample(l, *v) : GaugeSample(l, *v));
    }
    out.push_back(std::move(f));
  }
  return out;
}

}  // namespace

namespace {

// The driver's and firmware's reservation, apart from what is used (what
// nvidia-smi shows as Reserved): where the second memory version answers.
prometheus::MetricFamily ReservedMemoryFamily(const std::vector<NvmlJoined>& cards) {
  auto reserved = NewFamily("xpu_nvml_memory_reserved_bytes",
                            "Device memory the driver and firmware reserve for themselves "
                            "(nvmlDeviceGetMemoryInfo_v2; not in xpu_memory_used_bytes, as "
                            "nvidia-smi shows Used and Reserved apart).");
  for (const NvmlJoined& j : cards)
    if (j.card->memory_reserved_bytes)
      reserved.metric.push_back(
          GaugeSample({{"minor", j.minor}, {"uuid", j.uuid}, {"bus_id", j.card->bus_id}},
                      static_cast<double>(*j.card->memory_reserved_bytes)));
  return reserved;
}

}  // namespace

std::vector<prometheus::MetricFamily> NvmlFamilies(const std::vector<NvmlJoined>& cards) {
  using prometheus::MetricType;
  auto ecc = NewFamily("xpu_nvml_ecc_errors_total",
                       "ECC errors NVML counted on the card, by error (corrected, uncorrected) "
                       "and scope (volatile: since the driver loaded; aggregate: the card's life).",
                       MetricType::Counter);
  auto retired = NewFamily("xpu_nvml_retired_pages",
                           "Memory pages the card retired, by cause (single_bit: many corrected "
                           "errors; double_bit: an uncorrected one).");
  auto retire_pending = NewFamily("xpu_nvml_page_retirement_pending",
                                  "Whether pages wait to be retired at the next GPU reset.");
  auto remapped = NewFamily("xpu_nvml_remapped_rows",
                            "Memory rows the card remapped, by the error that caused it "
                            "(corrected, uncorrected).");
  auto remap_pending = NewFamily("xpu_nvml_row_remap_pending",
                                 "Whether a row remap waits for a GPU reset to take effect.");
  auto remap_failure =
      NewFamily("xpu_nvml_row_remap_failure", "Whether a row remap failed (no spare row left).");
  auto clocks = NewFamily("xpu_nvml_clock_event_active",
                          "Whether a reason holds the card's clocks down now (NVML's clock-event, "
                          "formerly throttle, reasons): 1 active, 0 not.");
  auto link_up = NewFamily("xpu_nvml_nvlink_up", "Whether the NVLink is active: 1 yes, 0 no.");
  auto link_errors = NewFamily("xpu_nvml_nvlink_errors_total",
                               "NVLink data-link errors, by counter (replay, recovery, crc_flit, "
                               "crc_data).",
                               MetricType::Counter);
  auto replays = NewFamily("xpu_nvml_pcie_replays_total", "PCIe replays the card counted.",
                           MetricType::Counter);
  auto mig = NewFamily("xpu_nvml_mig_enabled", "Whether MIG mode is on: 1 yes, 0 no.");
  auto mig_info = NewFamily("xpu_nvml_mig_device_info",
                            "A MIG device on the card: its own UUID (the kubelet's name for it), "
                            "GPU and compute instance. Always 1.");
  auto mig_memory = NewFamily("xpu_nvml_mig_memory_used_bytes", "Memory used on a MIG device.");
  for (const NvmlJoined& j : cards) {
    const NvmlDevice& c = *j.card;
    const MetricLabels id = {{"minor", j.minor}, {"uuid", j.uuid}, {"bus_id", c.bus_id}};
    auto with = [&id](std::initializer_list<prometheus::ClientMetric::Label> more) {
      MetricLabels l = id;
      l.insert(l.end(), more);
      return l;
    };
    for (const auto& [value, error, scope] :
         {std::tuple{&c.ecc_volatile_corrected, "corrected", "volatile"},
          {&c.ecc_volatile_uncorrected, "uncorrected", "volatile"},
          {&c.ecc_aggregate_corrected, "corrected", "aggregate"},
          {&c.ecc_aggregate_uncorrected, "uncorrected", "aggregate"}})
      if (*value)
        ecc.metric.push_back(CounterSample(with({{"error", error}, {"scope", scope}}),
                                           static_cast<double>(**value)));
    if (c.retired_pages_single_bit)
      retired.metric.push_back(
          GaugeSample(with({{"cause", "single_bit"}}), *c.retired_pages_single_bit));
    if (c.retired_pages_double_bit)
      retired.metric.push_back(
          GaugeSample(with({{"cause", "double_bit"}}), *c.retired_pages_double_bit));
    if (c.retirement_pending)
      retire_pending.metric.push_back(GaugeSample(id, *c.retirement_pending ? 1 : 0));
    if (c.remap) {
      remapped.metric.push_back(GaugeSample(with({{"error", "corrected"}}), c.remap->corrected));
      remapped.metric.push_back(
          GaugeSample(with({{"error", "uncorrected"}}), c.remap->uncorrected));
      remap_pending.metric.push_back(GaugeSample(id, c.remap->pending ? 1 : 0));
      remap_failure.metric.push_back(GaugeSample(id, c.remap->failure ? 1 : 0));
    }
    if (c.clocks_event_reasons)
      for (const Reason& r : kReasons)
        clocks.metric.push_back(
            GaugeSample(with({{"reason", r.name}}), (*c.clocks_event_reasons & r.bit) != 0));
    for (const NvmlLink& l : c.nvlinks) {
      const std::string link = std::to_string(l.link);
      link_up.metric.push_back(GaugeSample(with({{"link", link}}), l.active ? 1 : 0));
      for (const auto& [value, counter] : {std::pair{&l.replay, "replay"},
                                           {&l.recovery, "recovery"},
                                           {&l.crc_flit, "crc_flit"},
                                           {&l.crc_data, "crc_data"}})
        if (*value)
          link_errors.metric.push_back(CounterSample(with({{"link", link}, {"counter", counter}}),
                                                     static_cast<double>(**value)));
    }
    if (c.pcie_replays) replays.metric.push_back(CounterSample(id, *c.pcie_replays));
    if (c.mig_enabled) mig.metric.push_back(GaugeSample(id, *c.mig_enabled ? 1 : 0));
    for (const NvmlMigDevice& m : c.mig) {
      const MetricLabels ml = with({{"mig_uuid", m.uuid},
                                    {"gpu_instance", std::to_string(m.gpu_instance)},
                                    {"compute_instance", std::to_string(m.compute_instance)}});
      mig_info.metric.push_back(GaugeSample(ml, 1));
      if (m.memory_used_bytes)
        mig_memory.metric.push_back(
            GaugeSample(with({{"mig_uuid", m.uuid}}), static_cast<double>(*m.memory_used_bytes)));
    }
  }
  std::vector<prometheus::MetricFamily> out;
  for (auto* f : {&ecc, &retired, &retire_pending, &remapped, &remap_pending, &remap_failure,
                  &clocks, &link_up, &link_errors, &replays, &mig, &mig_info, &mig_memory})
    if (!f->metric.empty()) out.push_back(std::move(*f));
  if (prometheus::MetricFamily reserved = ReservedMemoryFamily(cards); !reserved.metric.empty())
    out.push_back(std::move(reserved));
  for (prometheus::MetricFamily& f : XdmFamilies(cards))
    if (!f.metric.empty()) out.push_back(std::move(f));
  return out;
}

}  // namespace xpu::hal
