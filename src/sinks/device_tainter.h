#pragma once

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/backoff.h"
#include "common/mutex.h"
#include "common/part.h"
#include "common/worker.h"
#include "kubelet/pod_mapper.h"
#include "kubernetes/api_client.h"
#include "kubernetes/options.h"
#include "sinks/device_taints.h"
#include "sinks/node_health.h"
#include "store/ports.h"

namespace xpu::sinks {

// Hands each card's health to the scheduler (docs/kubernetes.md, "Device
// taints"), opt-in: one DeviceTaintRule per faulted card, selecting the DRA
// device that names it in this node's ResourceSlices, with the taint
// kTaintKey=<worst level>. A rule is written within a round of the fault
// (two when a write fails once), updated at once when the level gets worse
// and after `hold` when it gets better, deleted once the card has been
// healthy for `hold`, and left as it is while the card's health is unknown.
// It finds the API by discovery (the newest version serving the rules), lists
// its own rules by label at start (a restart adopts them, and deletes the
// stale ones after the hold) and never touches a rule without its labels.
// Switched off by a reload, it deletes the rules it holds (Withdraw): a
// taint no one keeps would stay on a card that has since been repaired.
// Two threads of its own: "device-taints" (discovery, the rules) and
// "dra-slices" (a list-then-watch of the node's ResourceSlices). Start()/
// Stop()/TakeOver()/Withdraw() from the owning thread; report() and the
// metrics from any thread.
class DeviceTainter : public Part {
 public:
  struct Options {
    std::string effect = "NoSchedule";  // or "None": seen, not acted on
    int evict_level = 0;                // NoExecute from this level (0: never)
    std::chrono::milliseconds hold{30000};
    // The health sources that run: no rule is deleted or weakened until
    // each has published once, or settle_limit has passed (SettleWait).
    FaultSources sources;
    std::chrono::milliseconds settle_limit{120000};
    // No flag sets these; a test shortens them. A round:
    std::chrono::milliseconds tick{1000};
    // The first wait after a failed call (doubled, at most 30 times this).
    std::chrono::milliseconds retry_first{1000};
    std::chrono::seconds request_timeout = kubernetes::kRequestTimeout;
    // How often discovery is read again while no version serves the rules.
    std::chrono::milliseconds rediscover{300000};
    bool operator==(const Options&) const = default;
  };
  DeviceTainter(const kubernetes::KubernetesOptions& kubernetes, Options options,
                kubelet::DraRule dra, std::string base_url, const store::HealthViewPort* registry,
                prometheus::Registry* self_metrics);
  ~DeviceTainter() override;
  DeviceTainter(const DeviceTainter&) = delete;
  DeviceTainter& operator=(const DeviceTainter&) = delete;

  void Start() override;
  void Stop() override;
  // Part: the rules the one it replaces knew, and since when each waits.
  void TakeOver(Part& old) override;
  // Part, after Stop: lists this node's rules of ours again (a write cut
  // short by the stop may have made one; where no version was discovered
  // yet, discovers first) and deletes them, each at the version listed (a
  // failed delete, or one that finds its rule changed, tried again), for
  // kWithdrawFor at most; the reload waits for it. An exporter that stops
  // keeps them (a restart adopts them).
  void Withdraw() override;
  static constexpr std::chrono::seconds kWithdrawFor{5};

  // What /status shows.
  struct CardReport {
    std::string bus_id, key;
    std::optional<DraDevice> device;  // what names it in the slices
    std::string unmapped;             // why nothing does
    std::string state;                // "", written, pending, refused, no_api, unmapped
    std::string why;
    std::string rule, effect, value;  // the rule wanted or written
  };
  struct Report {
    std::string rule_version;   // empty: none serves DeviceTaintRules
    std::string slice_version;  // empty: none serves ResourceSlices
    std::string api;            // what discovery found, for people
    bool slices_read = false;
    std::string slice_error;  // why the last list failed
    size_t slices = 0;
    std::vector<CardReport> cards;
    std::vector<std::string> stale;  // rules of ours no card stands for
    uint64_t rounds = 0;             // rounds done since Start
    // Entries of the per-name maps (hold timers, refusals, errors) and the
    // log's said-once keys after the round's pruning: a few for each name a
    // card stands for or a rule holds, however often the names change.
    size_t names_kept = 0;
  };
  Report report() const;
  const Options& options() const { return options_; }

 private:
  using Clock = std::chrono::steady_clock;
  void RuleLoop();
  void SliceLoop();
  bool Discover(const kubernetes::ApiClient& api);
  bool Discover(const kubernetes::ApiClient& api, const std::function<bool()>& stopping);
  bool ListRules(const kubernetes::ApiClient& api);
  bool ListRules(const kubernetes::ApiClient& api, const std::function<bool()>& stopping);
  // One round: each card's verdict against its rule (PlanFor: what names
  // the card and what it wants; Act: what is done), then the stale rules,
  // the per-name maps pruned to the names in use, the page's states.
  struct Round {
    const kubernetes::ApiClient& api;
    Clock::time_point now;
    Report rep;
    bool slices_cut = false;
    bool can_write = false;             // a version serves the rules, and ours are listed
    bool write_failed = false;          // the round's writes stopped (the shared backoff)
    bool settled = false;               // every running source has read (SettleWait)
    std::set<std::string> wanted;       // the rule names a card stands for
    std::set<std::string> not_healthy;  // cards (bus ids) faulted or of unknown health
    std::set<std::string> mapped;       // cards (bus ids) a device names
  };
  struct Plan {
    CardReport card;
    Rule want;                   // the rule this card stands for (its name, device)
    const Rule* have = nullptr;  // ours of that name, as listed or written
    // Health unknown and no rule of that name: the taint a rule of ours
    // holds for the card under another device (renamed since) is wanted
    // here, as unknown health weakens no taint.
    bool carried = false;
    std::string why;  // why no device names the card
  };
  void Reconcile(const kubernetes::ApiClient& api, Clock::time_point now);
  Plan PlanFor(Round& round, const SliceIndex& index, const CardVerdict& v);
  std::pair<std::string, std::string> Blocked(const Round& round, const CardVerdict& v,
                                              const Plan& p) const;
  void Act(Round& round, const CardVerdict& v, Plan& p);
  // Write(), then what it did kept: a refusal's own backoff, or the shared
  // one; false when it did not take.
  bool WriteNow(Round& round, const std::string& op, const Rule& rule, CardReport* card);
  // Whether `rule` (ours) stands for no card this round (DeleteStale says
  // when); `known_healthy`: the inventory's cards known healthy.
  bool IsStale(const Round& round, const SliceIndex& index,
               const std::set<std::string>& known_healthy, const Rule& rule) const;
  void DeleteStale(Round& round, const SliceIndex& index);
  void Prune(const std::set<std::string>& wanted);
  void ShowStates(const Report& rep);
  // One write. kRefused: the server will not take it as it is (403, 422, a
  // name held by another's rule): that rule waits its own backoff.
  // kFailed: the server is in trouble (no answer, 5xx, a conflict): the
  // round's writes stop, with the shared backoff. `why` says what failed.
  enum class Outcome { kOk, kRefused, kFailed };
  Outcome Write(const kubernetes::ApiClient& api, const std::string& op, const Rule& rule,
                std::string* why);
  bool ListSlices(const kubernetes::ApiClient& api, const std::string& version, std::string* rv);
  enum class WatchEnd { kClosed, kGone, kFailed, kStopped };
  WatchEnd WatchSlices(const kubernetes::ApiClient& api, const std::string& version,
                       std::string* rv);
  void Count(const std::string& op, const char* result);
  std::string RulesPath() const;

  const kubernetes::KubernetesOptions kubernetes_;
  const Options options_;
  const kubelet::DraRule dra_;
  const std::string base_url_;
  const store::HealthViewPort* const registry_;
  prometheus::Family<prometheus::Counter>* writes_;
  prometheus::Family<prometheus::Gauge>* states_;
  LogOnce said_;

  mutable Mutex mu_;
  // Discovery's answer (the rule thread writes, the slice thread reads).
  std::string rule_version_ XPU_GUARDED_BY(mu_);
  std::string slice_version_ XPU_GUARDED_BY(mu_);
  std::string api_ XPU_GUARDED_BY(mu_);
  bool discovered_ XPU_GUARDED_BY(mu_) = false;
  // The slice thread found its version gone (a list answered 404): the rule
  // thread discovers at its next round, not at its next rediscovery.
  bool rediscover_now_ XPU_GUARDED_BY(mu_) = false;
  // The node's slices by name (the slice thread writes), and whether a list
  // has been read since it last failed.
  std::map<std::string, Slice> slices_ XPU_GUARDED_BY(mu_);
  uint64_t slices_gen_ XPU_GUARDED_BY(mu_) = 0;  // one more at each change of slices_
  // The index of slices_ as of index_gen_, made again (under mu_, nothing
  // copied) only when they changed: the rule thread's, as each round's.
  std::shared_ptr<const SliceIndex> index_ XPU_GUARDED_BY(mu_);
  uint64_t index_gen_ XPU_GUARDED_BY(mu_) = 0;
  bool slices_read_ XPU_GUARDED_BY(mu_) = false;
  std::string slice_error_ XPU_GUARDED_BY(mu_);
  bool slices_cut_ XPU_GUARDED_BY(mu_) = false;  // more slices than kMaxSlices
  Report report_ XPU_GUARDED_BY(mu_);

  // The rule thread's (Begin by Start, before it runs).
  SettleWait settle_{options_.sources, options_.settle_limit};
  bool listed_ = false;                // rules_ is what the server has
  std::map<std::string, Rule> rules_;  // ours, by name
  // Since when each rule has wanted the change it wants now (`target`:
  // "delete", "stale", or the taint it should carry); a round that wants
  // another starts it again, so a hold counts only an unbroken wish.
  struct Differs {
    std::string target;
    Clock::time_point since;
  };
  std::map<std::string, Differs> differs_since_;  // by rule name
  // Since when `name` has wanted `target`.
  Clock::time_point Since(const std::string& name, const std::string& target,
                          Clock::time_point now);
  std::map<std::string, std::string> foreign_;  // names held by a rule not ours: why
  // Rules the server refused, each waiting its own backoff, and why; the
  // last failure of each rule waiting for the shared one.
  struct Refusal {
    std::string why;
    Clock::time_point retry;
    Clock::duration wait{0};
  };
  std::map<std::string, Refusal> refused_;
  std::map<std::string, std::string> last_error_;
  std::set<std::string> shown_;  // the cards with states on the page
  uint64_t rounds_ = 0;
  Clock::time_point next_discovery_, next_write_, next_list_, list_retry_;
  // Writes; discovery; this node's rule list (apart: a list that fails
  // after a discovery that works must still back off).
  Backoff write_backoff_, read_backoff_, list_backoff_;
  Worker worker_;  // both threads
};

}  // namespace xpu::sinks
