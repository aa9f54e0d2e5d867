#include "sinks/node_reporter.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <random>
#include <set>
#include <stdexcept>
#include <thread>

#include "common/duration.h"
#include "kubernetes/pod_watcher.h"

namespace xpu::sinks {
namespace {

// A patch answers with the whole Node; a post with the Event.
constexpr size_t kMaxAnswerBytes = kubernetes::kMaxNodeBytes;
// How long one round may spend posting Events before the condition's turn.
constexpr std::chrono::seconds kEventBudget{5};

// An answer that retrying cannot change: the object is refused as it is.
bool Refused(const kubernetes::HttpResult& r) {
  return r.error.empty() && (r.status == 400 || r.status == 404 || r.status == 422);
}

// 409: an Event of that name exists: a retry of one the server had taken.
bool Created(const kubernetes::HttpResult& r) {
  return r.error.empty() && (r.status == 200 || r.status == 201 || r.status == 409);
}

std::string EventKey(const store::FaultRaise& r) {
  // The card by its address where the source knows it: named late, it is
  // the same card.
  return r.source + '|' + (r.bus_id.empty() ? "minor " + r.minor : r.bus_id) + '|' + r.fault.code;
}

}  // namespace

Backoff ApiBackoff(std::chrono::milliseconds first) {
  return Backoff(first, 2.0, first * 30, 0.2,
                 [gen = std::mt19937_64(std::random_device{}())]() mutable {
                   return std::uniform_real_distribution<double>(0, 1)(gen);
                 });
}

NodeReporter::NodeReporter(const kubernetes::KubernetesOptions& kubernetes, Options options,
                           std::string base_url, const store::HealthViewPort* registry,
                           prometheus::Registry* self_metrics)
    : kubernetes_(kubernetes),
      options_(std::move(options)),
      base_url_(std::move(base_url)),
      registry_(registry),
      cursor_(registry->raises().end()),
      patch_backoff_(ApiBackoff(options_.retry_first)),
      event_backoff_(ApiBackoff(options_.retry_first)),
      read_backoff_(ApiBackoff(options_.retry_first)),
      limiter_(options_.event_burst, options_.event_refill) {
  if (kubernetes_.node_name.empty())
    throw std::invalid_argument("the Node's condition and Events need the node name");
  if (options_.condition) {
    patches_ = &prometheus::BuildCounter()
                    .Name("xpu_kubernetes_node_condition_patches_total")
                    .Help(
                        "Patches of the Node's XpuDevicesHealthy condition, by result: ok, or "
                        "error (retried with backoff).")
                    .Register(*self_metrics);
    for (const char* r : {"ok", "error"}) patches_->Add({{"result", r}});
    synced_ = &prometheus::BuildGauge()
                   .Name("xpu_kubernetes_node_condition_synced")
                   .Help(
                       "Whether the Node's XpuDevicesHealthy condition is in step with the "
                       "fault views: 1 yes (or a change that is not worse waits its 30 s), 0 "
                       "not yet set or a patch is failing.")
                   .Register(*self_metrics)
                   .Add({});
  }
  if (options_.events) {
    events_ = &prometheus::BuildCounter()
                   .Name("xpu_kubernetes_events_total")
                   .Help(
                       "Node Events for fault raises at restart_card or worse, by result: sent, "
                       "error (a failed post, retried), suppressed (a repeat of a device's code "
                       "within 10 minutes, or over the rate limit) or dropped (refused, or "
                       "lost while the API server was unreachable).")
                   .Register(*self_metrics);
    for (const char* r : {"sent", "error", "suppressed", "dropped"}) events_->Add({{"result", r}});
  }
}

NodeReporter::~NodeReporter() { Stop(); }

NodeReporter::Handover NodeReporter::handover() const {
  Handover h;
  h.events = options_.events;
  h.condition = options_.condition;
  h.cursor = cursor_;
  h.queued = queued_;
  h.limiter = limiter_;
  h.last_event = last_event_;
  h.read_once = read_once_;
  h.node_uid = node_uid_;
  h.on_node = on_node_;
  h.on_node_transition = on_node_transition_;
  h.unanswered = unanswered_;
  h.differs_since = differs_since_;
  return h;
}

void NodeReporter::Seed(Handover h) {
  if (h.events && options_.events) {
    cursor_ = h.cursor;
    queued_ = std::move(h.queued);
    limiter_ = h.limiter;
    last_event_ = std::move(h.last_event);
  }
  if (h.condition && options_.condition) {
    read_once_ = h.read_once;
    node_uid_ = std::move(h.node_uid);
    on_node_ = std::move(h.on_node);
    on_node_transition_ = std::move(h.on_node_transition);
    unanswered_ = std::move(h.unanswered);
    differs_since_ = h.differs_since;
  }
}

void NodeReporter::Start() {
  // A registry kept over a reload may hold the last reporter's 1. Here, not
  // in the constructor: a reload builds its parts before anything that can
  // fail, and one that then fails changes nothing on the page.
  if (synced_ != nullptr) synced_->Set(0);
  spdlog::info("kubernetes: {}{}{} on node {}", options_.condition ? "node condition " : "",
               options_.condition ? kConditionType : "",
               options_.condition && options_.events ? " and Events"
               : options_.events                     ? "Events"
                                                     : "",
               kubernetes_.node_name);
  // Views published from here on count (settle_), before the thread runs.
  started_ = Clock::now();
  settle_.Begin(*registry_, started_);
  worker_.Start([this] { Loop(); }, "node-reporter");
}

void NodeReporter::Stop() { worker_.Stop(); }

void NodeReporter::Withdraw() { RemoveCondition(); }

void NodeReporter::RemoveCondition() {
  // Its thread has stopped: what it kept is this thread's now.
  if (!options_.condition) return;
  const kubernetes::ApiClient api(base_url_, kubernetes_.token_file, kubernetes_.ca_file,
                                  kubernetes_.insecure_http, "xpu-exporter/node-health");
  const auto deadline = Clock::now() + kWithdrawFor;
  const std::function<bool()> late = [deadline] { return Clock::now() >= deadline; };
  // Tried again while the budget lasts (a 5xx or a reset connection is
  // often gone within a second): one failed try would leave the condition
  // on the Node with no one to keep it. Not on a refusal (401, 403, 404:
  // asking again gets the same), nor past the budget where the server
  // asks for longer.
  Backoff backoff = ApiBackoff(std::chrono::milliseconds(250));
  kubernetes::HttpResult r;
  for (;;) {
    const auto left = std::chrono::ceil<std::chrono::seconds>(deadline - Clock::now());
    r = api.Send(
        "PATCH",
        "/api/v1/nodes/" + kubernetes::ApiClient::Escape(kubernetes_.node_name) + "/status",
        "application/strategic-merge-patch+json", ConditionRemovalPatch(), kMaxAnswerBytes,
        std::max(left, std::chrono::seconds(1)), late);
    const bool refused =
        r.error.empty() && r.status >= 400 && r.status < 500 && r.status != 408 && r.status != 429;
    if (r.ok() || refused || late()) break;
    const auto wait = kubernetes::RetryWait(&backoff, r.retry_after);
    if (Clock::now() + wait >= deadline) break;
    std::this_thread::sleep_for(wait);
  }
  if (r.ok()) {
    spdlog::info("kubernetes: node condition {} switched off: taken off node {}", kConditionType,
                 kubernetes_.node_name);
    return;
  }
  spdlog::warn(
      "kubernetes: node condition {} switched off, but it could not be taken off node "
      "{}: {}; remove it by hand",
      kConditionType, kubernetes_.node_name, Describe(r, "patch nodes/status"));
}

void NodeReporter::TakeOver(Part& old) {
  // Raises the old reporter had not read or sent yet go out from this one,
  // under the same rate limit; what it knew of the Node stays known.
  auto* o = dynamic_cast<NodeReporter*>(&old);
  if (o == nullptr) return;
  Seed(o->handover());
  // Events stay on, the condition is switched off: the old one's is taken
  // off the Node, as Withdraw does.
  if (!options_.condition) o->RemoveCondition();
}

void NodeReporter::Said(const std::string& what, bool ok, const kubernetes::HttpResult& r) {
  if (ok) {
    if (said_.ClearPrefix(what + ":") > 0) spdlog::info("kubernetes: {} works again", what);
    return;
  }
  const char* needs = what == "events"           ? "create events in default"
                      : what == "node condition" ? "patch nodes/status"
                                                 : "get nodes";
  if (said_.Raise(what + ":" + std::to_string(r.status)))
    spdlog::warn("kubernetes: {} failed: {}", what, Describe(r, needs));
}

void NodeReporter::ReadNode(const kubernetes::ApiClient& api) {
  const std::function<bool()> stopping = [this] { return worker_.stopping(); };
  kubernetes::HttpResult r =
      api.Get("/api/v1/nodes/" + kubernetes::ApiClient::Escape(kubernetes_.node_name),
              kubernetes::kMaxNodeBytes, kubernetes::kRequestTimeout, stopping);
  if (worker_.stopping()) return;
  const Clock::time_point now = Clock::now();
  NodeFacts facts;
  if (r.ok()) {
    if (Status s = ParseNodeFacts(r.body, &facts); !s.ok())
      r = kubernetes::HttpResult{r.status, {}, s.message()};
  }
  Said("node read", r.ok(), r);
  if (!r.ok()) {
    next_read_ = now + kubernetes::RetryWait(&read_backoff_, r.retry_after);
    return;
  }
  read_backoff_.Reset();
  next_read_ = now + kubernetes_.node_interval;
  read_once_ = true;
  node_uid_ = std::move(facts.uid);
  on_node_ = std::move(facts.condition);
  on_node_transition_ = std::move(facts.transition);
  unanswered_.reset();  // the Node says what was applied
}

void NodeReporter::SyncCondition(const kubernetes::ApiClient& api, Clock::time_point now) {
  const NodeCondition want = ConditionOf(registry_->Health());
  if (on_node_ == want) {
    differs_since_.reset();
    unanswered_.reset();  // what it wrote is no longer wanted: a later patch is a new change
    synced_->Set(1);
    return;
  }
  if (!read_once_ && now - started_ < options_.settle_limit) {
    // Not before the Node's own copy is known (a read failing at start must
    // not reset its transition time), unless reads keep failing; and the
    // views cannot be said to differ from a copy not known: the hold counts
    // from the first read (a fault flapping meanwhile is not seen to break
    // it), or from when reads are given up on.
    differs_since_.reset();
    return;
  }
  if (!differs_since_) differs_since_ = now;
  // Worse: at once. Anything else once the views have differed from the
  // Node for recover_hold without a break (whatever they say meanwhile):
  // a flapping fault does not patch the Node over and over, and a change
  // that keeps changing is not held for ever.
  const bool worse = !on_node_ || SeverityOf(want) > SeverityOf(*on_node_);
  if (!worse && now - *differs_since_ < options_.recover_hold) return;
  if (now < next_patch_) return;
  const std::string heartbeat = Rfc3339(std::chrono::system_clock::now());
  // The status kept: the time it last changed stays; a status whose patch
  // got no answer: the time that patch wrote (it may be on the Node).
  const std::string transition =
      on_node_ && on_node_->status == want.status && !on_node_transition_.empty()
          ? on_node_transition_
      : unanswered_ && unanswered_->first == want.status ? unanswered_->second
                                                         : heartbeat;
  const std::function<bool()> stopping = [this] { return worker_.stopping(); };
  const kubernetes::HttpResult r = api.Send(
      "PATCH", "/api/v1/nodes/" + kubernetes::ApiClient::Escape(kubernetes_.node_name) + "/status",
      "application/strategic-merge-patch+json", ConditionPatch(want, heartbeat, transition),
      kMaxAnswerBytes, kubernetes::kRequestTimeout, stopping);
  if (worker_.stopping()) return;
  Said("node condition", r.ok(), r);
  if (!r.ok()) {
    unanswered_.emplace(want.status, transition);
    synced_->Set(0);
    patches_->Add({{"result", "error"}}).Increment();
    next_patch_ = now + kubernetes::RetryWait(&patch_backoff_, r.retry_after);
    return;
  }
  patch_backoff_.Reset();
  spdlog::info("kubernetes: node condition {} is {} ({}): {}", kConditionType, want.status,
               want.reason, want.message);
  on_node_ = want;
  on_node_transition_ = transition;
  unanswered_.reset();
  differs_since_.reset();
  synced_->Set(1);
  patches_->Add({{"result", "ok"}}).Increment();
}

void NodeReporter::TakeRaises(Clock::time_point now) {
  uint64_t lost = 0;
  std::vector<store::FaultRaise> raises = registry_->raises().Since(&cursor_, &lost);
  if (lost > 0) events_->Add({{"result", "dropped"}}).Increment(static_cast<double>(lost));
  if (raises.empty()) return;
  // Every card of the inventory, named or not, as in the condition: one
  // --xdm.devices leaves out is not told of.
  std::set<std::string> buses, minors;
  for (const store::InventoryDevice& d : registry_->Inventory()) {
    if (!d.bus_id.empty()) buses.insert(d.bus_id);
    if (d.minor >= 0) minors.insert(std::to_string(d.minor));
  }
  for (store::FaultRaise& r : raises) {
    if (r.fault.level < store::kUnhealthyFaultLevel) continue;
    if (!(r.bus_id.empty() ? minors.count(r.minor) != 0 : buses.count(r.bus_id) != 0)) continue;
    const std::string key = EventKey(r);
    auto last = last_event_.find(key);
    if ((last != last_event_.end() && now - last->second < kEventRepeatWindow) ||
        !limiter_.Allow(now)) {
      events_->Add({{"result", "suppressed"}}).Increment();
      continue;
    }
    last_event_[key] = now;
    queued_.push_back(std::move(r));
    if (queued_.size() > kMaxQueuedEvents) {
      queued_.pop_front();
      events_->Add({{"result", "dropped"}}).Increment();
    }
  }
  // Bounded: keys whose window has passed go once there are many.
  if (last_event_.size() > 4096)
    std::erase_if(last_event_, [&](const auto& e) { return now - e.second >= kEventRepeatWindow; });
}

void NodeReporter::SendEvents(const kubernetes::ApiClient& api, Clock::time_point now) {
  const std::function<bool()> stopping = [this] { return worker_.stopping(); };
  while (!queued_.empty() && now >= next_event_ && !worker_.stopping() &&
         Clock::now() - now < kEventBudget) {
    // No more than what is left of the round's budget (a second at least):
    // a worse condition waits for the posts of a round, and an Events
    // endpoint throttled or hanging must not hold it for a request's 30 s. A
    // post cut short that the server took is a 409 when retried (its name
    // is the raise's own), counted as sent.
    const auto left = std::chrono::duration_cast<std::chrono::seconds>(
        kEventBudget - (Clock::now() - now) + std::chrono::milliseconds(999));
    const kubernetes::HttpResult r =
        api.Send("POST", "/api/v1/namespaces/default/events", "application/json",
                 EventBody(queued_.front(), kubernetes_.node_name, node_uid_), kMaxAnswerBytes,
                 std::clamp(left, std::chrono::seconds(1), kEventBudget), stopping);
    if (worker_.stopping()) return;
    Said("events", Created(r), r);
    if (Created(r) || Refused(r)) {
      events_->Add({{"result", Created(r) ? "sent" : "dropped"}}).Increment();
      queued_.pop_front();
      event_backoff_.Reset();
      continue;
    }
    events_->Add({{"result", "error"}}).Increment();
    next_event_ = now + kubernetes::RetryWait(&event_backoff_, r.retry_after);
  }
}

void NodeReporter::Loop() {
  const kubernetes::ApiClient api(base_url_, kubernetes_.token_file, kubernetes_.ca_file,
                                  kubernetes_.insecure_http, "xpu-exporter/node-health");
  next_read_ = next_patch_ = next_event_ = started_;
  do {
    if (Clock::now() >= next_read_) ReadNode(api);
    const Clock::time_point now = Clock::now();
    // The condition first: Events may wait on a slow server, it may not.
    if (options_.condition && settle_.Settled(*registry_, now)) {
      SyncCondition(api, now);
    } else {
      // Views not yet whole (a start, a reload's new sources) cannot be
      // said to have stayed apart from the Node: the hold starts anew.
      differs_since_.reset();
    }
    if (options_.events) {
      TakeRaises(now);
      SendEvents(api, now);
    }
  } while (worker_.SleepFor(options_.tick));
}

}  // namespace xpu::sinks
