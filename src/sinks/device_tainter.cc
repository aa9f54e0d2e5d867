#include "sinks/device_tainter.h"

#include <spdlog/spdlog.h>

#include <random>
#include <set>
#include <stdexcept>
#include <thread>

#include "kubernetes/pod_watcher.h"
#include "sinks/node_reporter.h"

namespace xpu::sinks {
namespace {

using Json = nlohmann::json;

// How bad a rule's taint is: its level, NoExecute above NoSchedule above None.
int Weight(const std::string& value, const std::string& effect) {
  static const char* const kLevels[] = {"restart_card", "reset_card", "isolate_after_job",
                                        "isolate_card"};
  int level = 0;
  for (int i = 0; i < 4; ++i)
    if (value == kLevels[i]) level = i + 1;
  const int e = effect == "NoExecute" ? 2 : effect == "NoSchedule" ? 1 : 0;
  return e * 10 + level;
}

// An answer retrying cannot change until someone does (RBAC, a validating
// policy, an object the server will not take).
bool RefusedStatus(const kubernetes::HttpResult& r) {
  return r.error.empty() &&
         (r.status == 400 || r.status == 401 || r.status == 403 || r.status == 422);
}

// A card's rule's states on the page.
constexpr const char* kTaintStates[] = {"written", "pending", "refused", "no_api", "unmapped"};

bool Success(const kubernetes::HttpResult& r) {
  return r.error.empty() && r.status >= 200 && r.status < 300;
}

store::InventoryDevice CardOf(const CardVerdict& v) {
  store::InventoryDevice d;
  d.key = v.key;
  d.bus_id = v.bus_id;
  d.minor = v.minor;
  d.uuid = v.uuid;
  return d;
}

}  // namespace

DeviceTainter::DeviceTainter(const kubernetes::KubernetesOptions& kubernetes, Options options,
                             kubelet::DraRule dra, std::string base_url,
                             const store::HealthViewPort* registry,
                             prometheus::Registry* self_metrics)
    : kubernetes_(kubernetes),
      options_(std::move(options)),
      dra_(std::move(dra)),
      base_url_(std::move(base_url)),
      registry_(registry),
      write_backoff_(ApiBackoff(options_.retry_first)),
      read_backoff_(ApiBackoff(options_.retry_first)),
      list_backoff_(ApiBackoff(options_.retry_first)) {
  if (kubernetes_.node_name.empty())
    throw std::invalid_argument("device taints need the node name");
  if (options_.effect != "NoSchedule" && options_.effect != "None")
    throw std::invalid_argument("device taints: the effect is NoSchedule or None");
  writes_ = &prometheus::BuildCounter()
                 .Name("xpu_kubernetes_device_taint_writes_total")
                 .Help(
                     "Writes of DeviceTaintRules, by op (create, update, delete) and result: ok, "
                     "error (retried with backoff) or refused (403, 422, or a name held by a "
                     "rule this exporter did not make).")
                 .Register(*self_metrics);
  for (const char* op : {"create", "update", "delete"})
    for (const char* r : {"ok", "error", "refused"}) writes_->Add({{"op", op}, {"result", r}});
  states_ =
      &prometheus::BuildGauge()
           .Name("xpu_kubernetes_device_taint_state")
           .Help(
               "Each card that has or needed a DeviceTaintRule, by bus_id and state (1 for the one "
               "it is in, 0 for the others; all 0 once it needs none): "
               "written, pending (waits its hold, a retry, or the slices), refused, no_api "
               "(no version serves the rules) or unmapped (no device in the node's "
               "ResourceSlices names the card).")
           .Register(*self_metrics);
}

DeviceTainter::~DeviceTainter() { Stop(); }

void DeviceTainter::Start() {
  spdlog::info("kubernetes: device taints ({}{}) on node {}", options_.effect,
               options_.evict_level > 0
                   ? ", NoExecute from level " + std::to_string(options_.evict_level)
                   : "",
               kubernetes_.node_name);
  settle_.Begin(*registry_, Clock::now());  // views published from here on count
  worker_.Start([this] { RuleLoop(); }, "device-taints");
  worker_.Start([this] { SliceLoop(); }, "dra-slices");
}

void DeviceTainter::Stop() { worker_.Stop(); }

void DeviceTainter::Withdraw() {
  // Its threads have stopped: what they kept is this thread's now.
  std::string version;
  {
    MutexLock lock(mu_);
    version = rule_version_;
  }
  const kubernetes::ApiClient api(base_url_, kubernetes_.token_file, kubernetes_.ca_file,
                                  kubernetes_.insecure_http, "xpu-exporter/device-taints");
  const auto deadline = Clock::now() + kWithdrawFor;
  const std::function<bool()> late = [deadline] { return Clock::now() >= deadline; };
  // Not discovered yet (the server down since the start): rules of an
  // earlier run, or a create cut short, may be there all the same.
  if (version.empty() && Discover(api, late)) {
    MutexLock lock(mu_);
    version = rule_version_;
  }
  if (version.empty()) return;
  // Listed again, whatever rules_ holds: a write that ended as the threads
  // stopped is in the list (not in rules_; before, a tainter that knew of
  // none returned here and left it), and each version is the one to
  // delete. A list that fails leaves what rules_ knows.
  (void)ListRules(api, late);
  // Each rule tried again while the budget lasts (a 5xx or a reset
  // connection is often gone within a second): a rule left behind taints
  // its device with no one to take it off. A 409 (changed since read) lists
  // again for its version; a refusal (401, 403) is not asked again.
  Backoff backoff = ApiBackoff(std::chrono::milliseconds(250));
  const size_t ours = rules_.size();
  size_t deleted = 0;
  std::map<std::string, std::string> failed;  // name -> why, of the last pass
  std::chrono::seconds asked{0};              // the longest Retry-After of the pass
  for (;;) {
    failed.clear();
    bool changed = false, retry = false;
    for (auto it = rules_.begin(); it != rules_.end();) {
      const auto& [name, rule] = *it;
      if (late()) {
        failed[name] = "no time left";
        ++it;
        continue;
      }
      const Json options = {{"kind", "DeleteOptions"},
                            {"apiVersion", "v1"},
                            {"preconditions", {{"resourceVersion", rule.resource_version}}}};
      const kubernetes::HttpResult r = api.Send(
          "DELETE", RulesPath() + "/" + kubernetes::ApiClient::Escape(name), "application/json",
          options.dump(), kubernetes::kMaxNodeBytes, options_.request_timeout, late);
      if (r.error.empty() && (Success(r) || r.status == 404)) {
        Count("delete", "ok");
        ++deleted;
        it = rules_.erase(it);
        continue;
      }
      Count("delete", "error");
      asked = std::max(asked, r.retry_after);
      changed = changed || (r.error.empty() && r.status == 409);
      retry = retry || !r.error.empty() || r.status == 408 || r.status == 409 || r.status == 429 ||
              r.status >= 500;
      failed[name] = kubernetes::Describe(r, "delete");
      ++it;
    }
    if (failed.empty() || !retry || late()) break;
    const auto wait = kubernetes::RetryWait(&backoff, std::exchange(asked, {}));
    if (Clock::now() + wait >= deadline) break;
    std::this_thread::sleep_for(wait);
    if (changed) (void)ListRules(api, late);  // the versions to delete now
  }
  std::string left;
  for (const auto& [name, why] : failed)
    if (left.size() < 512) left += (left.empty() ? "" : "; ") + name + " (" + why + ")";
  if (left.empty()) {
    spdlog::info("kubernetes: device taints switched off: deleted its {} rule(s)", deleted);
  } else {
    spdlog::warn("kubernetes: device taints switched off: deleted {} of its {} rule(s); left: {}",
                 deleted, std::max(ours, deleted + failed.size()), left);
  }
  rules_.clear();
}

void DeviceTainter::TakeOver(Part& old) {
  auto* o = dynamic_cast<DeviceTainter*>(&old);
  if (o == nullptr) return;
  // Its threads have stopped. The cards on the page stay ours to set back
  // (the registry of metrics is kept over a rebuild); what it knew of the
  // server only where it is the same server and node.
  shown_ = o->shown_;
  if (o->base_url_ != base_url_ || o->kubernetes_.node_name != kubernetes_.node_name) return;
  listed_ = o->listed_;
  rules_ = o->rules_;
  differs_since_ = o->differs_since_;
  foreign_ = o->foreign_;
  refused_ = o->refused_;
  MutexLock a(mu_);
  MutexLock b(o->mu_);
  rule_version_ = o->rule_version_;
  slice_version_ = o->slice_version_;
  api_ = o->api_;
  discovered_ = o->discovered_;
}

DeviceTainter::Report DeviceTainter::report() const {
  MutexLock lock(mu_);
  return report_;
}

std::string DeviceTainter::RulesPath() const {
  MutexLock lock(mu_);
  return std::string("/apis/") + kResourceGroup + "/" + rule_version_ + "/devicetaintrules";
}

void DeviceTainter::Count(const std::string& op, const char* result) {
  writes_->Add({{"op", op}, {"result", result}}).Increment();
}

bool DeviceTainter::Discover(const kubernetes::ApiClient& api) {
  return Discover(api, [this] { return worker_.stopping(); });
}

bool DeviceTainter::Discover(const kubernetes::ApiClient& api,
                             const std::function<bool()>& stopping) {
  // Each version's resource list, asked once (v1 and v1beta2 are asked of
  // both resources).
  std::map<std::string, kubernetes::HttpResult> answers;
  auto serves = [&](const char* version, const char* resource, bool* out) -> bool {
    auto [it, asked] = answers.try_emplace(version);
    if (asked)
      it->second = api.Get(std::string("/apis/") + kResourceGroup + "/" + version, size_t{1} << 20,
                           options_.request_timeout, stopping);
    const kubernetes::HttpResult& r = it->second;
    if (r.error.empty() && r.status == 404) {  // the version is not served
      *out = false;
      return true;
    }
    if (!r.ok()) {
      if (said_.Raise("discovery"))
        spdlog::warn("kubernetes: device taints: discovery of {}/{} failed: {}", kResourceGroup,
                     version, kubernetes::Describe(r, "get on /apis (any authenticated user)"));
      return false;
    }
    if (Status s = ListsResource(r.body, resource, out); !s.ok()) {
      if (said_.Raise("discovery"))
        spdlog::warn("kubernetes: device taints: {}/{}: {}", kResourceGroup, version, s.message());
      return false;
    }
    return true;
  };
  // The newest of `versions` that serves `resource` into `*out` ("" when
  // none does); false when discovery failed (nothing is concluded).
  auto newest = [&](const auto& versions, const char* resource, std::string* out) {
    for (const char* v : versions) {
      bool has = false;
      if (!serves(v, resource, &has)) return false;
      if (has) {
        *out = v;
        break;
      }
    }
    return true;
  };
  std::string rules, slices;
  if (!newest(kRuleVersions, "devicetaintrules", &rules) ||
      !newest(kSliceVersions, "resourceslices", &slices))
    return false;
  said_.Clear("discovery");
  std::string api_text =
      rules.empty() ? std::string("no version of ") + kResourceGroup +
                          " serves DeviceTaintRules (they need Kubernetes 1.33 or later with "
                          "the DRADeviceTaints gate, or 1.36 with the v1beta2 API enabled): no "
                          "rule is written; the Node condition still says the node's health"
                    : std::string("DeviceTaintRules in ") + kResourceGroup + "/" + rules;
  if (slices.empty())
    api_text += std::string("; no version of ") + kResourceGroup + " serves ResourceSlices";
  bool changed;
  {
    MutexLock lock(mu_);
    changed = !discovered_ || rule_version_ != rules || slice_version_ != slices;
    rule_version_ = rules;
    slice_version_ = slices;
    api_ = api_text;
    discovered_ = true;
  }
  if (changed) {
    if (rules.empty() || slices.empty())
      spdlog::warn("kubernetes: device taints: {}", api_text);
    else
      spdlog::info("kubernetes: device taints: {}, ResourceSlices in {}", api_text, slices);
    listed_ = false;
  }
  return true;
}

bool DeviceTainter::ListRules(const kubernetes::ApiClient& api) {
  return ListRules(api, [this] { return worker_.stopping(); });
}

bool DeviceTainter::ListRules(const kubernetes::ApiClient& api,
                              const std::function<bool()>& stopping) {
  const std::string selector = std::string(kManagedByLabel) + "=" + kManagedByValue + "," +
                               kNodeLabel + "=" + NodeLabelValue(kubernetes_.node_name);
  const kubernetes::HttpResult r =
      api.Get(RulesPath() + "?labelSelector=" + kubernetes::ApiClient::Escape(selector),
              kubernetes::kMaxListBytes, options_.request_timeout, stopping);
  if (!r.ok()) {
    if (said_.Raise("rules:" + std::to_string(r.status)))
      spdlog::warn("kubernetes: device taints: listing this node's rules failed: {}",
                   kubernetes::Describe(r, "list on devicetaintrules"));
    if (r.error.empty() && r.status == 404) {
      // The version went away: ask again now, and write nothing meanwhile.
      listed_ = false;
      next_discovery_ = Clock::now();
      MutexLock lock(mu_);
      discovered_ = false;
    }
    return false;
  }
  const Json list = kubernetes::ParseKeeping(r.body, KeptRulePath);
  if (!list.is_object() || !list.contains("items") || !list["items"].is_array()) {
    if (said_.Raise("rules:parse"))
      spdlog::warn("kubernetes: device taints: the rule list is not a DeviceTaintRuleList");
    return false;
  }
  std::map<std::string, Rule> rules;
  for (const Json& item : list["items"]) {
    Rule rule;
    // Only ours: the selector is the server's word, the annotation ours.
    if (!ParseRule(item, kubernetes_.node_name, &rule).ok() || !rule.ours) continue;
    if (rules.size() >= kMaxRules) break;
    rules[rule.name] = std::move(rule);
  }
  said_.ClearPrefix("rules:");
  rules_ = std::move(rules);
  // A name another agent held may be free now: tried again (a 409 again
  // finds it held again).
  foreign_.clear();
  said_.ClearPrefix("foreign:");
  listed_ = true;
  return true;
}

DeviceTainter::Outcome DeviceTainter::Write(const kubernetes::ApiClient& api, const std::string& op,
                                            const Rule& rule, std::string* why) {
  const std::function<bool()> stopping = [this] { return worker_.stopping(); };
  std::string version;
  {
    MutexLock lock(mu_);
    version = rule_version_;
  }
  const std::string one = RulesPath() + "/" + kubernetes::ApiClient::Escape(rule.name);
  kubernetes::HttpResult r;
  if (op == "create") {
    r = api.Send("POST", RulesPath(), "application/json",
                 RuleBody(version, kubernetes_.node_name, rule), kubernetes::kMaxNodeBytes,
                 options_.request_timeout, stopping);
  } else if (op == "update") {
    r = api.Send("PUT", one, "application/json", RuleBody(version, kubernetes_.node_name, rule),
                 kubernetes::kMaxNodeBytes, options_.request_timeout, stopping);
  } else {
    // Only the object we read: one changed since (by anyone) is 409.
    const Json options = {{"kind", "DeleteOptions"},
                          {"apiVersion", "v1"},
                          {"preconditions", {{"resourceVersion", rule.resource_version}}}};
    r = api.Send("DELETE", one, "application/json", options.dump(), kubernetes::kMaxNodeBytes,
                 options_.request_timeout, stopping);
  }
  if (worker_.stopping()) return Outcome::kFailed;
  if (Success(r) || (op == "delete" && r.error.empty() && r.status == 404)) {
    Count(op, "ok");
    write_backoff_.Reset();
    if (said_.ClearPrefix("write:" + rule.name + ":") > 0)
      spdlog::info("kubernetes: device taints: {} of {} works again", op, rule.name);
    if (op == "delete") {
      rules_.erase(rule.name);
      spdlog::info("kubernetes: device taints: deleted {} ({})", rule.name, rule.bus_id);
      return Outcome::kOk;
    }
    Rule written = rule;
    Rule answer;
    const Json j = kubernetes::ParseKeeping(r.body, KeptRulePath);
    if (ParseRule(j, kubernetes_.node_name, &answer).ok())
      written.resource_version = answer.resource_version;
    else
      listed_ = false;  // its resourceVersion is not known: list again
    written.ours = true;
    rules_[rule.name] = written;
    spdlog::info("kubernetes: device taints: {} {} ({}={}:{}) for {}",
                 op == "create" ? "created" : "updated", rule.name, kTaintKey, rule.value,
                 rule.effect, rule.bus_id);
    return Outcome::kOk;
  }
  *why = kubernetes::Describe(r, op + " on devicetaintrules");
  if (r.error.empty() && r.status == 409) {
    // create: a rule of that name exists; update, delete: it changed since
    // it was read. List again; a name held by a rule not ours is left alone.
    listed_ = false;
    if (op == "create") {
      const kubernetes::HttpResult got =
          api.Get(one, kubernetes::kMaxNodeBytes, options_.request_timeout, stopping);
      Rule there;
      if (got.ok() &&
          ParseRule(kubernetes::ParseKeeping(got.body, KeptRulePath), kubernetes_.node_name, &there)
              .ok() &&
          !there.ours) {
        Count(op, "refused");
        listed_ = true;  // the list would not show it
        *why = "a DeviceTaintRule named " + rule.name + " exists that this exporter did not make";
        foreign_[rule.name] = *why;
        if (said_.Raise("foreign:" + rule.name))
          spdlog::warn("kubernetes: device taints: {}; it is left alone", *why);
        return Outcome::kRefused;
      }
    }
    Count(op, "error");
    return Outcome::kFailed;
  }
  if (r.error.empty() && r.status == 404 && op == "update") {
    Count(op, "error");
    rules_.erase(rule.name);  // gone meanwhile: created next round
    return Outcome::kFailed;
  }
  const bool refused = RefusedStatus(r);
  Count(op, refused ? "refused" : "error");
  // No answer, or a 5xx: the server may have done it all the same (a
  // delete applied whose answer was lost). What rules_ holds is not known
  // to be so: listed again before it is trusted (before, a fault back
  // within the backoff found its deleted rule "written" until the next
  // list, a node interval later).
  if (!refused && (!r.error.empty() || r.status >= 500)) listed_ = false;
  // Said once per rule and answer until that rule is written.
  if (said_.Raise("write:" + rule.name + ":" + op + ":" + std::to_string(r.status)))
    spdlog::warn("kubernetes: device taints: {} of {} failed: {}", op, rule.name, *why);
  return refused ? Outcome::kRefused : Outcome::kFailed;
}

bool DeviceTainter::IsStale(const Round& round, const SliceIndex& index,
                            const std::set<std::string>& known_healthy, const Rule& rule) const {
  if (round.wanted.count(rule.name) != 0) return false;
  const bool listed = index.Has(rule.device);
  const bool gone =
      !listed && index.HasDriver(rule.device.driver) && round.not_healthy.count(rule.bus_id) == 0;
  const bool not_its_card =
      listed && !rule.bus_id.empty() &&
      (known_healthy.count(rule.bus_id) != 0 || round.mapped.count(rule.bus_id) != 0);
  return gone || not_its_card;
}

void DeviceTainter::DeleteStale(Round& round, const SliceIndex& index) {
  // Rules of ours no card stands for this round, deleted after the hold:
  // - its device no longer in the node's slices, read whole (a card gone, a
  //   device renamed), unless the card it stood for is faulted or not known
  //   healthy (a driver that drops such a device from its slices) or its
  //   driver has no slice here now (a driver restarting);
  // - its device still listed but no longer naming the card it stood for
  //   (another address, a reload's device-name rule), once that card is in
  //   the inventory and known healthy, or named by another device now (its
  //   rule is that one's). A device still listed whose card the inventory
  //   lost, or is faulted and named by none, keeps its rule: nothing says it
  //   recovered.
  // No slices at all is no evidence either (a driver restarting).
  if (index.empty() || !index.incomplete().empty()) return;
  std::set<std::string> known_healthy;  // cards of the inventory
  for (const CardReport& c : round.rep.cards)
    if (!c.bus_id.empty() && round.not_healthy.count(c.bus_id) == 0) known_healthy.insert(c.bus_id);
  std::vector<Rule> stale;
  // A rule stale no more (its card faulted, its device back) starts its
  // stale hold again when it is stale again; a round that cannot judge
  // (above) keeps the holds as they are.
  std::erase_if(differs_since_, [&](const auto& e) {
    if (e.second.target != "stale") return false;
    auto r = rules_.find(e.first);
    return r == rules_.end() || !IsStale(round, index, known_healthy, r->second);
  });
  for (const auto& [name, rule] : rules_) {
    if (IsStale(round, index, known_healthy, rule)) stale.push_back(rule);
  }
  for (const Rule& rule : stale) {
    round.rep.stale.push_back(rule.name);
    const Clock::time_point since = Since(rule.name, "stale", round.now);
    if (round.now - since < options_.hold || round.write_failed) continue;
    if (auto r = refused_.find(rule.name); r != refused_.end() && round.now < r->second.retry)
      continue;
    WriteNow(round, "delete", rule, nullptr);
  }
}

void DeviceTainter::Prune(const std::set<std::string>& wanted) {
  // What is kept by name: only names a card stands for or a rule holds.
  auto known_name = [&](const std::string& name) {
    return wanted.count(name) != 0 || rules_.count(name) != 0;
  };
  std::erase_if(differs_since_, [&](const auto& e) { return !known_name(e.first); });
  std::erase_if(refused_, [&](const auto& e) { return !known_name(e.first); });
  std::erase_if(last_error_, [&](const auto& e) { return !known_name(e.first); });
  // The log's "said once" keys of a name no longer known go with it: device
  // names come from the server, and a driver that renames its devices must
  // not grow them without end.
  for (const char* prefix : {"write:", "foreign:"})
    said_.ClearPrefixIf(prefix, [&](std::string_view rest) {
      return !known_name(std::string(rest.substr(0, rest.find(':'))));
    });
}

void DeviceTainter::ShowStates(const Report& rep) {
  // Each card that has had a rule or needed one, every state, 1 for the
  // one it is in (0 for all once it needs none): a state series never
  // vanishes under a query, and there are at most five per card.
  std::map<std::string, std::string> now_in;
  for (const CardReport& c : rep.cards)
    if (!c.state.empty()) now_in[c.bus_id.empty() ? c.key : c.bus_id] = c.state;
  for (const auto& [card, state] : now_in) shown_.insert(card);
  for (const std::string& card : shown_) {
    auto it = now_in.find(card);
    for (const char* state : kTaintStates)
      states_->Add({{"bus_id", card}, {"state", state}})
          .Set(it != now_in.end() && it->second == state ? 1 : 0);
  }
}

DeviceTainter::Clock::time_point DeviceTainter::Since(const std::string& name,
                                                      const std::string& target,
                                                      Clock::time_point now) {
  auto [it, added] = differs_since_.try_emplace(name, Differs{target, now});
  if (!added && it->second.target != target) it->second = Differs{target, now};
  return it->second.since;
}

bool DeviceTainter::WriteNow(Round& round, const std::string& op, const Rule& rule,
                             CardReport* card) {
  std::string why;
  const Outcome o = Write(round.api, op, rule, &why);
  if (o == Outcome::kOk) {
    differs_since_.erase(rule.name);
    refused_.erase(rule.name);
    last_error_.erase(rule.name);
    return true;
  }
  if (o == Outcome::kRefused) {  // this rule waits its own backoff
    Refusal& r = refused_[rule.name];
    r.wait = r.wait.count() == 0 ? options_.retry_first
                                 : std::min<Clock::duration>(r.wait * 2, options_.retry_first * 30);
    r.retry = round.now + r.wait;
    r.why = why;
    if (card != nullptr) {
      card->state = "refused";
      card->why = why;
    }
    return false;
  }
  // The server is in trouble: the round's writes stop, the shared backoff.
  last_error_[rule.name] = why;
  next_write_ = round.now + kubernetes::RetryWait(&write_backoff_, round.api.last_retry_after());
  round.write_failed = true;
  if (card != nullptr) {
    card->state = "pending";
    card->why = why;
  }
  return false;
}

DeviceTainter::Plan DeviceTainter::PlanFor(Round& round, const SliceIndex& index,
                                           const CardVerdict& v) {
  Plan p;
  p.card.bus_id = v.bus_id;
  p.card.key = v.key;
  if (round.rep.slices_read)
    p.card.device = index.Find(CardOf(v), dra_, &p.why);
  else
    p.why = round.rep.slice_version.empty()  ? "no version of resource.k8s.io serves ResourceSlices"
            : !round.rep.slice_error.empty() ? round.rep.slice_error
                                             : "the node's ResourceSlices are not read yet";
  p.card.unmapped = p.card.device ? "" : p.why;
  if (p.card.device) {
    p.want.name = RuleName(kubernetes_.node_name, *p.card.device);
    p.want.device = *p.card.device;
    p.want.bus_id = v.bus_id;
    round.wanted.insert(p.want.name);
    round.mapped.insert(v.bus_id);
    auto it = rules_.find(p.want.name);
    if (it != rules_.end()) p.have = &it->second;
  }
  // Health unknown, and the card named by another device than its rule's
  // (a new generation of its slices renamed it): the heaviest taint a rule
  // of ours holds for the card is wanted on the device that names it now.
  // Before, the old rule went as stale and none was written: the card lost
  // its taint while nothing said it recovered.
  const Rule* carried = nullptr;
  if (v.level == 0 && !v.known && p.card.device && p.have == nullptr && !v.bus_id.empty())
    for (const auto& [name, rule] : rules_)
      if (rule.bus_id == v.bus_id && name != p.want.name &&
          (carried == nullptr ||
           Weight(rule.value, rule.effect) > Weight(carried->value, carried->effect)))
        carried = &rule;
  if (carried != nullptr) {
    p.carried = true;
    p.want.value = carried->value;
    p.want.effect = carried->effect;
    p.card.rule = p.want.name;
    p.card.value = p.want.value;
    p.card.effect = p.want.effect;
    p.card.why = "health unknown (" + v.unknown + "): the taint of " + carried->name +
                 " kept on the device that names the card now";
  } else if (v.level > 0) {
    p.want.value = v.level_name;
    p.want.effect = EffectOf(v.level, options_.effect, options_.evict_level);
    p.card.rule = p.want.name;
    p.card.value = p.want.value;
    p.card.effect = p.want.effect;
    p.card.why = v.why + (v.known ? "" : "; health not wholly known (" + v.unknown + ")");
  } else if (p.have != nullptr) {
    p.card.rule = p.have->name;
    p.card.value = p.have->value;
    p.card.effect = p.have->effect;
    p.card.why =
        v.known ? "healthy: deleted once it has held" : "health unknown (" + v.unknown + "): kept";
  }
  return p;
}

// Why a card's rule cannot be written this round at all, as its state and
// why; empty when it can.
std::pair<std::string, std::string> DeviceTainter::Blocked(const Round& round, const CardVerdict& v,
                                                           const Plan& p) const {
  const std::string& version = round.rep.rule_version;
  if (v.level > 0 && !p.card.device)  // unmapped once the slices are read
    return {round.rep.slices_read ? "unmapped" : "pending", p.why};
  if (version.empty()) return {"no_api", p.card.why};
  if (auto f = foreign_.find(p.want.name); f != foreign_.end()) return {"refused", f->second};
  if ((v.level > 0 || p.carried) && !VersionHasEffect(version, p.want.effect))
    return {"refused", version + " has no effect " + p.want.effect};
  if (!round.can_write) return {"pending", "this node's rules are not listed yet"};
  return {};
}

void DeviceTainter::Act(Round& round, const CardVerdict& v, Plan& p) {
  CardReport& card = p.card;
  const bool wants_taint = v.level > 0 || p.carried;
  const std::string now_wants = wants_taint ? p.want.value + ":" + p.want.effect
                                : v.known   ? "delete"
                                            : "";
  if (!card.device) {
    // No device names the card this round (its slice gone, a list that
    // failed): what it wants still restarts the holds of the rules that
    // stand for it, so a fault and a recovery meanwhile are not lost. A
    // stale rule's hold restarts while the card is not known healthy.
    for (const auto& [name, rule] : rules_) {
      if (rule.bus_id.empty() || rule.bus_id != v.bus_id) continue;
      auto d = differs_since_.find(name);
      if (d == differs_since_.end()) continue;
      const bool restart =
          d->second.target == "stale" ? now_wants != "delete" : d->second.target != now_wants;
      if (restart) differs_since_.erase(d);
    }
  }
  if (!wants_taint && p.have == nullptr) {  // nothing wanted, nothing there
    if (card.device) differs_since_.erase(p.want.name);
    return;
  }
  // A wish other than the one timed (a fault back while the rule could
  // not be written) starts its hold again.
  if (auto d = differs_since_.find(p.want.name); d != differs_since_.end()) {
    if (d->second.target != now_wants) differs_since_.erase(d);
  }
  if (auto [state, why] = Blocked(round, v, p); !state.empty()) {
    card.state = state;
    card.why = why;
    return;
  }
  // What it wants done: create, update, delete, or keep as it is. Unknown
  // health changes a rule only for the worse: a blind source removes or
  // weakens no taint.
  std::string op;
  bool at_once = false;
  Rule want = p.want;
  if (wants_taint && p.have == nullptr) {
    op = "create";
    at_once = true;
  } else if (v.level > 0 && (p.have->value != want.value || p.have->effect != want.effect)) {
    at_once = Weight(want.value, want.effect) > Weight(p.have->value, p.have->effect);
    if (at_once || v.known) op = "update";
    want.resource_version = p.have->resource_version;
  } else if (v.level == 0 && v.known) {
    op = "delete";
    want = *p.have;
  }
  card.state = p.have != nullptr ? "written" : "pending";
  if (op.empty()) {
    differs_since_.erase(want.name);
    if (p.have != nullptr) {  // what is on the server, kept
      card.value = p.have->value;
      card.effect = p.have->effect;
    }
    return;
  }
  // Better (a delete, a weaker taint) waits until every running source has
  // read: the others' healthy is no evidence of a recovery while one that
  // may see the fault has not spoken; its hold starts after that.
  if (!at_once && !round.settled) {
    differs_since_.erase(want.name);  // a hold handed over by a reload starts again
    card.why = (v.known ? "healthy" : "health unknown") +
               std::string(": kept, not every source has read since the start");
    return;
  }
  const Clock::time_point since =
      Since(want.name, op == "delete" ? op : want.value + ":" + want.effect, round.now);
  if (!at_once && round.now - since < options_.hold) return;
  // A refused rule says so, and why, through its own backoff and the
  // shared one.
  if (auto r = refused_.find(want.name);
      r != refused_.end() && (round.now < r->second.retry || round.write_failed)) {
    card.state = "refused";
    card.why = r->second.why;
    return;
  }
  if (round.write_failed) {
    card.state = "pending";
    if (auto e = last_error_.find(want.name); e != last_error_.end())
      card.why = "retried: " + e->second;
    return;
  }
  if (WriteNow(round, op, want, &card)) {
    card.state = op == "delete" ? "" : "written";
    if (op == "delete") card.rule.clear();
  }
}

void DeviceTainter::Reconcile(const kubernetes::ApiClient& api, Clock::time_point now) {
  // Transport errors and 5xx stop the round's writes (the server is in
  // trouble); a refusal holds back only its own rule.
  Round round{api, now, {}, false, false, false, false, {}, {}, {}};
  round.write_failed = now < next_write_;
  round.settled = settle_.Settled(*registry_, now);
  // The hold of a deletion starts once every source has read: a stale
  // rule's too (a reload hands the holds over).
  if (!round.settled)
    std::erase_if(differs_since_, [](const auto& e) { return e.second.target == "stale"; });
  std::shared_ptr<const SliceIndex> indexed;
  {
    MutexLock lock(mu_);
    round.rep.rule_version = rule_version_;
    round.rep.slice_version = slice_version_;
    round.rep.api = api_;
    if (!index_ || index_gen_ != slices_gen_) {
      index_ = std::make_shared<const SliceIndex>(slices_);
      index_gen_ = slices_gen_;
    }
    indexed = index_;
    round.rep.slices = slices_.size();
    round.rep.slices_read = slices_read_;
    round.slices_cut = slices_cut_;
    round.rep.slice_error = slice_error_;
  }
  round.can_write = !round.rep.rule_version.empty() && listed_;
  const SliceIndex& index = *indexed;
  const store::HealthPicture health = registry_->Health();
  const std::vector<CardVerdict> verdicts = VerdictsOf(health.views, health.inventory);
  for (const CardVerdict& v : verdicts)
    if (v.level > 0 || !v.known) round.not_healthy.insert(v.bus_id);
  for (const CardVerdict& v : verdicts) {
    Plan p = PlanFor(round, index, v);
    Act(round, v, p);
    round.rep.cards.push_back(std::move(p.card));
  }
  if (round.can_write && round.settled && round.rep.slices_read && !round.slices_cut)
    DeleteStale(round, index);
  Prune(round.wanted);
  round.rep.names_kept = differs_since_.size() + refused_.size() + last_error_.size() +
                         said_.CountPrefix("write:") + said_.CountPrefix("foreign:");
  ShowStates(round.rep);
  round.rep.rounds = ++rounds_;
  MutexLock lock(mu_);
  report_ = std::move(round.rep);
}

void DeviceTainter::RuleLoop() {
  const kubernetes::ApiClient api(base_url_, kubernetes_.token_file, kubernetes_.ca_file,
                                  kubernetes_.insecure_http, "xpu-exporter/device-taints");
  next_discovery_ = next_write_ = next_list_ = list_retry_ = Clock::now();
  do {
    Clock::time_point now = Clock::now();
    bool discovered, serves;
    {
      MutexLock lock(mu_);
      discovered = discovered_;
      serves = !rule_version_.empty();
      if (std::exchange(rediscover_now_, false)) next_discovery_ = std::min(next_discovery_, now);
    }
    // Discovery: at start, after a failure (with backoff), and now and then
    // while no version serves the rules (a cluster upgraded under us).
    if ((!discovered || !serves) && now >= next_discovery_) {
      if (Discover(api)) {
        read_backoff_.Reset();
        next_discovery_ = now + options_.rediscover;
      } else {
        next_discovery_ = now + kubernetes::RetryWait(&read_backoff_, api.last_retry_after());
      }
      MutexLock lock(mu_);
      discovered = discovered_;
      serves = !rule_version_.empty();
    }
    // This node's rules: at start, after a conflict, and every node
    // interval (someone may have deleted one).
    now = Clock::now();
    if (discovered && serves && now >= list_retry_ && (!listed_ || now >= next_list_)) {
      if (ListRules(api)) {
        list_backoff_.Reset();
        next_list_ = now + kubernetes_.node_interval;
      } else {
        list_retry_ = now + kubernetes::RetryWait(&list_backoff_, api.last_retry_after());
      }
    }
    if (worker_.stopping()) break;
    Reconcile(api, Clock::now());
  } while (worker_.SleepFor(options_.tick));
}

bool DeviceTainter::ListSlices(const kubernetes::ApiClient& api, const std::string& version,
                               std::string* rv) {
  const std::function<bool()> stopping = [this] { return worker_.stopping(); };
  const std::string base = std::string("/apis/") + kResourceGroup + "/" + version +
                           "/resourceslices?fieldSelector=" +
                           kubernetes::ApiClient::Escape("spec.nodeName=" + kubernetes_.node_name);
  std::map<std::string, Slice> slices;
  std::string cont;
  size_t bad = 0;
  bool cut = false;
  int pages = 0;
  do {
    if (++pages > kubernetes::kMaxListPages) {
      if (said_.Raise("slices:pages"))
        spdlog::warn(
            "kubernetes: device taints: the ResourceSlice list did not end within {} pages",
            kubernetes::kMaxListPages);
      MutexLock lock(mu_);
      slice_error_ = "the node's ResourceSlice list did not end within " +
                     std::to_string(kubernetes::kMaxListPages) + " pages";
      return false;
    }
    const kubernetes::HttpResult r =
        api.Get(base + "&limit=" + std::to_string(kubernetes::kListPageSize) +
                    (cont.empty() ? "" : "&continue=" + kubernetes::ApiClient::Escape(cont)),
                kubernetes::kMaxListBytes, options_.request_timeout, stopping);
    if (!r.ok()) {
      const std::string why = kubernetes::Describe(r, "list on resourceslices");
      if (said_.Raise("slices:" + std::to_string(r.status)))
        spdlog::warn("kubernetes: device taints: listing this node's ResourceSlices failed: {}",
                     why);
      MutexLock lock(mu_);
      slice_error_ = "listing the node's ResourceSlices failed: " + why;
      // The version went away (a cluster upgraded under us): the rule
      // thread discovers again (before, nothing did, and the slices stayed
      // unread until a restart).
      if (r.error.empty() && r.status == 404) {
        discovered_ = false;
        rediscover_now_ = true;
      }
      return false;
    }
    const Json list = kubernetes::ParseKeeping(r.body, KeptSlicePath);
    if (!list.is_object() || !list.contains("items") || !list["items"].is_array()) {
      if (said_.Raise("slices:parse"))
        spdlog::warn("kubernetes: device taints: the ResourceSlice list is not a list");
      MutexLock lock(mu_);
      slice_error_ = "the node's ResourceSlice list is not a ResourceSliceList";
      return false;
    }
    for (const Json& item : list["items"]) {
      Slice s;
      if (!ParseSlice(item, &s).ok()) {
        ++bad;
        continue;
      }
      if (slices.size() >= kMaxSlices) {
        cut = true;
        break;
      }
      slices[s.name] = std::move(s);
    }
    cont.clear();
    if (list.contains("metadata") && list["metadata"].is_object()) {
      const Json& m = list["metadata"];
      if (m.contains("continue") && m["continue"].is_string()) cont = m["continue"];
      if (m.contains("resourceVersion") && m["resourceVersion"].is_string())
        *rv = m["resourceVersion"];
    }
    // Cut: the rest are not read (below), nor its pages asked for.
  } while (!cut && !cont.empty() && !worker_.stopping());
  if (bad > 0 && said_.Raise("slices:bad"))
    spdlog::warn("kubernetes: device taints: {} ResourceSlice(s) of this node did not parse", bad);
  said_.ClearPrefix("slices:");
  if (cut && said_.Raise("slices:cut"))
    spdlog::warn(
        "kubernetes: device taints: this node has more than {} ResourceSlices; the rest "
        "are not read, and no rule is taken for stale",
        kMaxSlices);
  MutexLock lock(mu_);
  slices_ = std::move(slices);
  ++slices_gen_;
  slices_read_ = true;
  slices_cut_ = cut;
  slice_error_.clear();
  return true;
}

DeviceTainter::WatchEnd DeviceTainter::WatchSlices(const kubernetes::ApiClient& api,
                                                   const std::string& version, std::string* rv) {
  const std::function<bool()> stopping = [this] { return worker_.stopping(); };
  bool gone = false, error_event = false, non_events = false;
  const Clock::time_point t0 = Clock::now();
  const std::string path = std::string("/apis/") + kResourceGroup + "/" + version +
                           "/resourceslices?fieldSelector=" +
                           kubernetes::ApiClient::Escape("spec.nodeName=" + kubernetes_.node_name) +
                           "&watch=true&allowWatchBookmarks=true&timeoutSeconds=" +
                           std::to_string(kubernetes::kWatchTimeoutSeconds) +
                           "&resourceVersion=" + kubernetes::ApiClient::Escape(*rv);
  const kubernetes::HttpResult r = api.Stream(
      path, kubernetes::kMaxEventBytes, std::chrono::seconds(kubernetes::kWatchTimeoutSeconds + 30),
      [](long) {},
      [&](std::string_view line) {
        const kubernetes::WatchEvent e = kubernetes::ParseEvent(line, KeptSlicePath);
        using T = kubernetes::WatchEvent::Type;
        if (e.type == T::kError) {
          gone = e.error_code == 410;
          error_event = !gone;
          return false;
        }
        // A line that is no event (a proxy's page, a Status object) is
        // not one: a watch of only those has watched nothing.
        if (e.type == T::kInvalid) {
          non_events = true;
          return true;
        }
        if (!e.resource_version.empty()) *rv = e.resource_version;
        if (e.type != T::kAdded && e.type != T::kModified && e.type != T::kDeleted) return true;
        Slice s;
        if (!ParseSlice(e.object, &s).ok()) return true;
        MutexLock lock(mu_);
        if (e.type == T::kDeleted) {
          slices_.erase(s.name);
        } else if (slices_.size() < kMaxSlices || slices_.count(s.name) != 0) {
          slices_[s.name] = std::move(s);
        } else {
          slices_cut_ = true;
          return true;
        }
        ++slices_gen_;
        return true;
      },
      stopping);
  if (worker_.stopping()) return WatchEnd::kStopped;
  if (non_events && said_.Raise("slices:watch-lines"))
    spdlog::warn(
        "kubernetes: device taints: the ResourceSlice watch sent lines that are no watch event "
        "(said once until a list works)");
  // A watch that ended within a second of its start, whatever it sent (an
  // event and the end, a 410 at once: a broken server or a proxy that cuts
  // it), waits its backoff before the list and watch are asked again: a
  // server answering at once must not be asked as fast as it answers.
  const bool at_once = Clock::now() - t0 < std::chrono::seconds(1);
  if (gone || (r.error.empty() && r.status == 410))
    return at_once ? WatchEnd::kFailed : WatchEnd::kGone;
  // Any other ERROR event, a failed answer, or a watch that closed at once
  // (with no event: a proxy's own page) waits its backoff, then lists again.
  if (error_event || !r.error.empty() || r.status != 200 || at_once) return WatchEnd::kFailed;
  return WatchEnd::kClosed;
}

void DeviceTainter::SliceLoop() {
  const kubernetes::ApiClient api(base_url_, kubernetes_.token_file, kubernetes_.ca_file,
                                  kubernetes_.insecure_http, "xpu-exporter/device-taints");
  Backoff backoff = ApiBackoff(options_.retry_first);
  while (!worker_.stopping()) {
    std::string version;
    {
      MutexLock lock(mu_);
      version = slice_version_;
    }
    if (version.empty()) {  // not discovered yet, or not served
      if (!worker_.SleepFor(options_.tick)) return;
      continue;
    }
    std::string rv;
    if (!ListSlices(api, version, &rv)) {
      {
        MutexLock lock(mu_);
        slices_read_ = false;
      }
      if (!worker_.SleepFor(kubernetes::RetryWait(&backoff, api.last_retry_after()))) return;
      continue;
    }
    // Watch from the list's version until it cannot go on; a closed watch
    // resumes, an expired one (410) lists again. The backoff starts over
    // only after a watch that worked (a list that works before a watch that
    // fails at once must not keep it at its first step).
    for (;;) {
      const WatchEnd end = WatchSlices(api, version, &rv);
      if (end == WatchEnd::kStopped) return;
      if (end == WatchEnd::kClosed) {
        backoff.Reset();
        continue;
      }
      if (end == WatchEnd::kFailed &&
          !worker_.SleepFor(kubernetes::RetryWait(&backoff, api.last_retry_after())))
        return;
      break;
    }
  }
}

}  // namespace xpu::sinks
