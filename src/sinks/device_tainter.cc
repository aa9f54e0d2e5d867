#include "sinks/device_tainter.h"

#include <spdlog/spdlog.h>

#include <random>
#include <set>
#include <stdexcept>

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
      read_backoff_(ApiBackoff(options_.retry_first)) {
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
  worker_.Start([this] { RuleLoop(); }, "device-taints");
  worker_.Start([this] { SliceLoop(); }, "dra-slices");
}

void DeviceTainter::Stop() { worker_.Stop(); }

void DeviceTainter::TakeOver(Part& old) {
  auto* o = dynamic_cast<DeviceTainter*>(&old);
  if (o == nullptr) return;
  // Its threads have stopped: what it knew of the server is ours.
  listed_ = o->listed_;
  rules_ = o->rules_;
  differs_since_ = o->differs_since_;
  foreign_ = o->foreign_;
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
  const std::function<bool()> stopping = [this] { return worker_.stopping(); };
  std::string rules, slices;
  std::set<std::string> asked;
  auto serves = [&](const char* version, const char* resource, bool* out) -> bool {
    const kubernetes::HttpResult r = api.Get(std::string("/apis/") + kResourceGroup + "/" + version,
                                             size_t{1} << 20, options_.request_timeout, stopping);
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
  for (const char* v : kRuleVersions) {
    bool has = false;
    if (!serves(v, "devicetaintrules", &has)) return false;
    if (has) {
      rules = v;
      break;
    }
  }
  for (const char* v : kSliceVersions) {
    bool has = false;
    if (!serves(v, "resourceslices", &has)) return false;
    if (has) {
      slices = v;
      break;
    }
  }
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
  const std::function<bool()> stopping = [this] { return worker_.stopping(); };
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
      MutexLock lock(mu_);
      discovered_ = false;  // the version went away: ask again
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
  listed_ = true;
  return true;
}

bool DeviceTainter::Write(const kubernetes::ApiClient& api, const std::string& op, const Rule& rule,
                          CardReport* card) {
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
  if (worker_.stopping()) return false;
  const Clock::time_point now = Clock::now();
  if (Success(r) || (op == "delete" && r.error.empty() && r.status == 404)) {
    Count(op, "ok");
    write_backoff_.Reset();
    if (said_.ClearPrefix("write:") > 0)
      spdlog::info("kubernetes: device taints: writes work again");
    if (op == "delete") {
      rules_.erase(rule.name);
      spdlog::info("kubernetes: device taints: deleted {}", rule.name);
      return true;
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
    return true;
  }
  if (r.error.empty() && r.status == 409) {
    // create: a rule of that name exists; update, delete: it changed since
    // it was read. Either way list again; one that is not ours is left alone.
    Count(op, op == "create" ? "refused" : "error");
    // Listed again, unless the name is held by a rule not ours (the list
    // would not show it, and the next create would meet it again).
    listed_ = false;
    if (op == "create") {
      const kubernetes::HttpResult got =
          api.Get(one, kubernetes::kMaxNodeBytes, options_.request_timeout, stopping);
      Rule there;
      if (got.ok() &&
          ParseRule(kubernetes::ParseKeeping(got.body, KeptRulePath), kubernetes_.node_name, &there)
              .ok() &&
          !there.ours) {
        listed_ = true;
        foreign_[rule.name] =
            "a DeviceTaintRule named " + rule.name + " exists that this exporter did not make";
        if (said_.Raise("foreign:" + rule.name))
          spdlog::warn("kubernetes: device taints: {}; it is left alone", foreign_[rule.name]);
      }
    }
    next_write_ = now + write_backoff_.Next();
    return false;
  }
  if (r.error.empty() && r.status == 404 && op == "update") {
    Count(op, "error");
    rules_.erase(rule.name);  // gone meanwhile: created next round
    return false;
  }
  const bool refused = RefusedStatus(r);
  Count(op, refused ? "refused" : "error");
  if (card != nullptr) {
    card->state = refused ? "refused" : "pending";
    card->why = kubernetes::Describe(r, op + " on devicetaintrules");
  }
  if (said_.Raise("write:" + op + ":" + std::to_string(r.status)))
    spdlog::warn("kubernetes: device taints: {} of {} failed: {}", op, rule.name,
                 kubernetes::Describe(r, op + " on devicetaintrules"));
  next_write_ = now + write_backoff_.Next();
  return false;
}

void DeviceTainter::Reconcile(const kubernetes::ApiClient& api, Clock::time_point now) {
  Report rep;
  std::map<std::string, Slice> slices;
  bool slices_read;
  {
    MutexLock lock(mu_);
    rep.rule_version = rule_version_;
    rep.slice_version = slice_version_;
    rep.api = api_;
    slices = slices_;
    slices_read = slices_read_;
    rep.slice_error = slice_error_;
  }
  rep.slices_read = slices_read;
  rep.slices = slices.size();
  const SliceIndex index(slices);
  const std::vector<CardVerdict> verdicts =
      VerdictsOf(registry_->SourceViews(), registry_->Inventory());
  const bool can_write = !rep.rule_version.empty() && listed_;
  std::set<std::string> wanted;  // names a card stands for
  bool write_failed = now < next_write_;
  for (const CardVerdict& v : verdicts) {
    CardReport card;
    card.bus_id = v.bus_id;
    card.key = v.key;
    std::string why;
    if (slices_read)
      card.device = index.Find(CardOf(v), dra_, &why);
    else
      why = rep.slice_version.empty()  ? "no version of resource.k8s.io serves ResourceSlices"
            : !rep.slice_error.empty() ? rep.slice_error
                                       : "the node's ResourceSlices are not read yet";
    card.unmapped = card.device ? "" : why;
    const Rule* have = nullptr;
    Rule want;
    if (card.device) {
      want.name = RuleName(kubernetes_.node_name, *card.device);
      want.device = *card.device;
      want.bus_id = v.bus_id;
      wanted.insert(want.name);
      auto it = rules_.find(want.name);
      if (it != rules_.end()) have = &it->second;
    }
    if (v.level > 0) {
      want.value = v.level_name;
      want.effect = EffectOf(v.level, options_.effect, options_.evict_level);
      card.rule = want.name;
      card.value = want.value;
      card.effect = want.effect;
      card.why = v.why;
    } else if (have != nullptr) {
      card.rule = have->name;
      card.value = have->value;
      card.effect = have->effect;
      card.why =
          v.known ? "healthy: deleted once it has held" : "health unknown (" + v.why + "): kept";
    }
    // What it wants done: nothing (no fault and no rule, or unknown health
    // with none), create, update, delete, or keep as it is.
    if (v.level == 0 && have == nullptr) {
      if (card.device) differs_since_.erase(want.name);
      rep.cards.push_back(std::move(card));
      continue;
    }
    if (v.level > 0 && !card.device) {
      // Unmapped once the slices are read; until then it waits for them.
      card.state = slices_read ? "unmapped" : "pending";
      card.why = why;
      rep.cards.push_back(std::move(card));
      continue;
    }
    if (rep.rule_version.empty()) {
      card.state = "no_api";
      rep.cards.push_back(std::move(card));
      continue;
    }
    if (auto f = foreign_.find(want.name); f != foreign_.end()) {
      card.state = "refused";
      card.why = f->second;
      rep.cards.push_back(std::move(card));
      continue;
    }
    if (v.level > 0 && !VersionHasEffect(rep.rule_version, want.effect)) {
      card.state = "refused";
      card.why = rep.rule_version + " has no effect " + want.effect;
      rep.cards.push_back(std::move(card));
      continue;
    }
    if (!can_write) {
      card.state = "pending";
      card.why = "this node's rules are not listed yet";
      rep.cards.push_back(std::move(card));
      continue;
    }
    std::string op;
    bool at_once = false;
    if (v.level > 0) {
      if (have == nullptr) {
        op = "create";
        at_once = true;
      } else if (have->value != want.value || have->effect != want.effect) {
        op = "update";
        at_once = Weight(want.value, want.effect) > Weight(have->value, have->effect);
        want.resource_version = have->resource_version;
      }
    } else if (v.known) {
      op = "delete";
      want = *have;
    } else {
      differs_since_.erase(have->name);  // unknown: a blind source removes no taint
    }
    if (op.empty()) {
      differs_since_.erase(want.name);
      card.state = "written";
      rep.cards.push_back(std::move(card));
      continue;
    }
    auto since = differs_since_.emplace(want.name, now).first->second;
    card.state = have != nullptr ? "written" : "pending";
    if (!at_once && now - since < options_.hold) {
      rep.cards.push_back(std::move(card));
      continue;
    }
    if (write_failed) {
      card.state = "pending";
      rep.cards.push_back(std::move(card));
      continue;
    }
    if (Write(api, op, want, &card)) {
      differs_since_.erase(want.name);
      card.state = op == "delete" ? "" : "written";
      if (op == "delete") card.rule.clear();
    } else {
      write_failed = true;
      if (card.state == "written") card.state = "pending";
    }
    rep.cards.push_back(std::move(card));
  }
  // Rules of ours no card stands for (a card gone, a device renamed): once
  // the slices are read whole, deleted after the hold.
  if (can_write && slices_read && index.incomplete().empty()) {
    std::vector<Rule> stale;
    for (const auto& [name, rule] : rules_)
      if (wanted.count(name) == 0) stale.push_back(rule);
    for (const Rule& rule : stale) {
      rep.stale.push_back(rule.name);
      auto since = differs_since_.emplace(rule.name, now).first->second;
      if (now - since < options_.hold || write_failed) continue;
      if (Write(api, "delete", rule, nullptr))
        differs_since_.erase(rule.name);
      else
        write_failed = true;
    }
  }
  // The page: each card that has had a rule or needed one, every state,
  // 1 for the one it is in (0 for all once it needs none): a state series
  // never vanishes under a query, and there are at most five per card.
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
  rep.rounds = ++rounds_;
  MutexLock lock(mu_);
  report_ = std::move(rep);
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
    }
    // Discovery: at start, after a failure (with backoff), and now and then
    // while no version serves the rules (a cluster upgraded under us).
    if ((!discovered || !serves) && now >= next_discovery_) {
      if (Discover(api)) {
        read_backoff_.Reset();
        next_discovery_ = now + options_.rediscover;
      } else {
        next_discovery_ = now + read_backoff_.Next();
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
        read_backoff_.Reset();
        next_list_ = now + kubernetes_.node_interval;
      } else {
        list_retry_ = now + read_backoff_.Next();
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
  do {
    const kubernetes::HttpResult r =
        api.Get(base + "&limit=100" +
                    (cont.empty() ? "" : "&continue=" + kubernetes::ApiClient::Escape(cont)),
                kubernetes::kMaxListBytes, options_.request_timeout, stopping);
    if (!r.ok()) {
      const std::string why = kubernetes::Describe(r, "list on resourceslices");
      if (said_.Raise("slices:" + std::to_string(r.status)))
        spdlog::warn("kubernetes: device taints: listing this node's ResourceSlices failed: {}",
                     why);
      MutexLock lock(mu_);
      slice_error_ = "listing the node's ResourceSlices failed: " + why;
      return false;
    }
    const Json list = kubernetes::ParseKeeping(r.body, KeptSlicePath);
    if (!list.is_object() || !list.contains("items") || !list["items"].is_array()) {
      if (said_.Raise("slices:parse"))
        spdlog::warn("kubernetes: device taints: the ResourceSlice list is not a list");
      return false;
    }
    for (const Json& item : list["items"]) {
      Slice s;
      if (!ParseSlice(item, &s).ok()) {
        ++bad;
        continue;
      }
      if (slices.size() >= kMaxSlices) break;
      slices[s.name] = std::move(s);
    }
    cont.clear();
    if (list.contains("metadata") && list["metadata"].is_object()) {
      const Json& m = list["metadata"];
      if (m.contains("continue") && m["continue"].is_string()) cont = m["continue"];
      if (m.contains("resourceVersion") && m["resourceVersion"].is_string())
        *rv = m["resourceVersion"];
    }
  } while (!cont.empty() && !worker_.stopping());
  if (bad > 0 && said_.Raise("slices:bad"))
    spdlog::warn("kubernetes: device taints: {} ResourceSlice(s) of this node did not parse", bad);
  said_.ClearPrefix("slices:");
  MutexLock lock(mu_);
  slices_ = std::move(slices);
  slices_read_ = true;
  slice_error_.clear();
  return true;
}

DeviceTainter::WatchEnd DeviceTainter::WatchSlices(const kubernetes::ApiClient& api,
                                                   const std::string& version, std::string* rv) {
  const std::function<bool()> stopping = [this] { return worker_.stopping(); };
  bool gone = false;
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
          return false;
        }
        if (!e.resource_version.empty()) *rv = e.resource_version;
        if (e.type != T::kAdded && e.type != T::kModified && e.type != T::kDeleted) return true;
        Slice s;
        if (!ParseSlice(e.object, &s).ok()) return true;
        MutexLock lock(mu_);
        if (e.type == T::kDeleted)
          slices_.erase(s.name);
        else if (slices_.size() < kMaxSlices || slices_.count(s.name) != 0)
          slices_[s.name] = std::move(s);
        return true;
      },
      stopping);
  if (worker_.stopping()) return WatchEnd::kStopped;
  if (gone) return WatchEnd::kGone;
  if (!r.error.empty() || r.status != 200) return WatchEnd::kFailed;
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
      if (!worker_.SleepFor(backoff.Next())) return;
      continue;
    }
    backoff.Reset();
    // Watch from the list's version until it cannot go on; a closed watch
    // resumes, an expired one (410) lists again.
    for (;;) {
      const WatchEnd end = WatchSlices(api, version, &rv);
      if (end == WatchEnd::kStopped) return;
      if (end == WatchEnd::kClosed) continue;
      if (end == WatchEnd::kFailed && !worker_.SleepFor(backoff.Next())) return;
      break;
    }
  }
}

}  // namespace xpu::sinks
