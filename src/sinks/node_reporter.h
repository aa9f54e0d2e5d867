#pragma once

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include <chrono>
#include <deque>
#include <map>
#include <optional>
#include <string>

#include "common/backoff.h"
#include "common/part.h"
#include "common/worker.h"
#include "kubernetes/api_client.h"
#include "kubernetes/options.h"
#include "sinks/node_health.h"
#include "store/ports.h"

namespace xpu::sinks {

// Hands the devices' health to Kubernetes (docs/kubernetes.md, "Device
// health on the Node"), both opt-in: with `condition`, keeps the Node
// condition XpuDevicesHealthy as the fault views say (ConditionOf), patched
// on the Node's status only when what the Node carries differs (a worse
// condition at once, any other once it has held recover_hold); with
// `events`, posts one Event on the Node per live raise at restart_card or
// worse, but one per device and code per kEventRepeatWindow, through
// EventLimiter. It reads the registry once a second and its Node every
// node_interval (its uid, and its copy of the condition, so a restart
// patches nothing that is already right and a condition someone else
// changed is set back). A failing call is retried with backoff and counted.
// Owns its thread: Start()/Stop() from the owning thread; the rest is the
// thread's. Its metrics are thread-safe.
// The wait after a failed call to the API server, for the parts that write
// there: `first`, doubled at each failure in a row, at most 30 times it, with
// 20% jitter.
Backoff ApiBackoff(std::chrono::milliseconds first);

class NodeReporter : public Part {
 public:
  struct Options {
    bool condition = false;
    bool events = false;
    FaultSources sources;  // which backends run (ConditionOf; what to wait for)
    // How long the first condition waits for the running backends to have
    // published once (a backend that never does must not hold it for ever).
    std::chrono::milliseconds settle_limit{120000};
    // A change to a condition no worse than the Node's is patched once it
    // has held this long (SeverityOf).
    std::chrono::milliseconds recover_hold{30000};
    // The Events' token bucket (node_health.h).
    int event_burst = kEventBurst;
    std::chrono::seconds event_refill = kEventRefill;
    // No flag sets these two; a test shortens them rather than wait out
    // real seconds. How often the views are read (a round):
    std::chrono::milliseconds tick{1000};
    // The wait after a failed call to the API server: doubled at each
    // failure in a row, at most 30 times this, with jitter.
    std::chrono::milliseconds retry_first{1000};
    bool operator==(const Options&) const = default;
  };
  // `kubernetes` gives the node, the credentials and node_interval. Throws
  // std::invalid_argument without a node name.
  NodeReporter(const kubernetes::KubernetesOptions& kubernetes, Options options,
               std::string base_url, const store::HealthViewPort* registry,
               prometheus::Registry* self_metrics);
  ~NodeReporter() override;
  NodeReporter(const NodeReporter&) = delete;
  NodeReporter& operator=(const NodeReporter&) = delete;

  // What a reload's new reporter takes over from the old one (after its
  // Stop, before Start), each half only where both have that feature on.
  // Events: where it stopped reading the raises, the Events allowed and not
  // yet accepted, the rate limit's state and the last Event of each device
  // and code (without them: the newest raise, a full bucket). The condition:
  // what the Node carries and since when a change waits, so a reload
  // neither restarts a hold nor waits for a read of the Node again.
  struct Handover {
    bool events = false, condition = false;  // which half it carries
    uint64_t cursor = 0;
    std::deque<store::FaultRaise> queued;
    EventLimiter limiter{kEventBurst, kEventRefill};
    std::map<std::string, std::chrono::steady_clock::time_point> last_event;
    bool read_once = false;
    std::string node_uid;
    std::optional<NodeCondition> on_node;
    std::string on_node_transition;
    std::optional<std::pair<std::string, std::string>> unanswered;
    std::optional<std::chrono::steady_clock::time_point> differs_since;
  };
  Handover handover() const;
  void Seed(Handover h);
  void Start() override;
  void Stop() override;
  // Part, after Stop: a reload switched it off; a condition it kept is
  // taken off the Node (kWithdrawFor at most, the reload waiting): no one
  // would keep it true, and a card repaired since would leave it False. An
  // exporter that stops leaves it (a restart patches it again).
  void Withdraw() override;
  static constexpr std::chrono::seconds kWithdrawFor{5};
  // Part: the raises the reporter it replaces had not sent yet and what it
  // knew of the Node (Seed).
  void TakeOver(Part& old) override;
  // What it was built with. Any thread, while it lives.
  const Options& options() const { return options_; }
  const kubernetes::KubernetesOptions& kubernetes() const { return kubernetes_; }
  const std::string& base_url() const { return base_url_; }

 private:
  using Clock = std::chrono::steady_clock;
  void Loop();
  void ReadNode(const kubernetes::ApiClient& api);
  void SyncCondition(const kubernetes::ApiClient& api, Clock::time_point now);
  void TakeRaises(Clock::time_point now);
  // The condition taken off the Node, when this reporter kept one.
  void RemoveCondition();
  void SendEvents(const kubernetes::ApiClient& api, Clock::time_point now);
  void Said(const std::string& what, bool ok, const kubernetes::HttpResult& r);

  const kubernetes::KubernetesOptions kubernetes_;
  const Options options_;
  const std::string base_url_;
  const store::HealthViewPort* const registry_;
  // Only what is on is on the page (a condition never asked for is not
  // "unsynced").
  prometheus::Family<prometheus::Counter>* patches_ = nullptr;
  prometheus::Gauge* synced_ = nullptr;
  prometheus::Family<prometheus::Counter>* events_ = nullptr;
  LogOnce said_;
  // Set by Start, before the thread runs.
  Clock::time_point started_;
  SettleWait settle_{options_.sources, options_.settle_limit};  // the first condition waits
  // The thread's state.
  uint64_t cursor_ = 0;
  bool read_once_ = false;                // a read of the Node worked
  std::string node_uid_;                  // from the last read; empty until one worked
  std::optional<NodeCondition> on_node_;  // what the Node carries, as far as we know
  std::string on_node_transition_;        // its lastTransitionTime
  // A patch that got no good answer: its status and transition time. The
  // server may have applied it (an answer lost to a timeout or a proxy), so
  // a retry of that status writes the same time until the Node is read.
  std::optional<std::pair<std::string, std::string>> unanswered_;
  // Since when the views have said something else than the Node (a change
  // that is not worse is patched once this is recover_hold old).
  std::optional<Clock::time_point> differs_since_;
  Clock::time_point next_read_, next_patch_, next_event_;
  Backoff patch_backoff_, event_backoff_, read_backoff_;
  EventLimiter limiter_;
  std::deque<store::FaultRaise> queued_;                 // allowed, not yet accepted
  std::map<std::string, Clock::time_point> last_event_;  // by source, device and code
  Worker worker_;
};

}  // namespace xpu::sinks
