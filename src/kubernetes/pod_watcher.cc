#include "kubernetes/pod_watcher.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <utility>

#include "common/json_depth.h"
#include "common/label.h"
#include "kubernetes/hami.h"

namespace xpu::kubernetes {
namespace {

using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;

// A watch that ends this soon with no event is a failure, not a normal end:
// without this, a server that closes at once would be asked in a tight loop.
constexpr std::chrono::seconds kShortestWatch{1};
constexpr double kBytesPerMib = 1024.0 * 1024.0;
constexpr const char* kUserAgent = "xpu-exporter/pod-watcher";

const std::string* StringAt(const Json& j, const char* a, const char* b) {
  if (!j.is_object() || !j.contains(a) || !j[a].is_object()) return nullptr;
  const Json& o = j[a];
  if (!o.contains(b) || !o[b].is_string()) return nullptr;
  return o[b].get_ptr<const std::string*>();
}

}  // namespace

bool OnPathTo(std::string_view path, std::string_view field, bool whole) {
  if (field.substr(0, path.size()) == path &&
      (field.size() == path.size() || field[path.size()] == '.'))
    return true;
  return whole && path.size() > field.size() && path.substr(0, field.size()) == field &&
         path[field.size()] == '.';
}

namespace {

// Whether the object-key path `path` (array levels skipped, "a.b.c") is one
// the watcher reads, or on the way to one. Pods come bare (a Pod), in a
// list (items.*) or in a watch event (object).
bool KeptPath(const std::string& path) {
  static const char* const kLeaves[] = {"metadata.resourceVersion",
                                        "metadata.continue",
                                        "metadata.name",
                                        "metadata.namespace",
                                        "metadata.uid",
                                        "metadata.labels",
                                        "metadata.annotations",
                                        "spec.containers.name",
                                        "status.phase",
                                        "status.containerStatuses.name",
                                        "status.containerStatuses.containerID",
                                        "status.initContainerStatuses.name",
                                        "status.initContainerStatuses.containerID",
                                        "status.ephemeralContainerStatuses.name",
                                        "status.ephemeralContainerStatuses.containerID"};
  static const char* const kRoots[] = {"", "items.", "object."};
  static const char* const kTop[] = {"kind", "type", "code", "reason", "message"};
  for (const char* t : kTop)
    if (path == t || path == std::string("object.") + t) return true;
  for (const char* root : kRoots) {
    for (const char* leaf : kLeaves) {
      const std::string full = std::string(root) + leaf;
      // Labels and annotations are kept whole.
      if (OnPathTo(path, full, full.ends_with("labels") || full.ends_with("annotations")))
        return true;
    }
  }
  return false;
}

}  // namespace

Json ParseKept(std::string_view text) { return ParseKeeping(text, KeptPath); }

Json ParseKeeping(std::string_view text, bool (*kept)(const std::string& path)) {
  // Deeper than any object of the API: refused before the parse, whose
  // callback below rebuilds the path at every key (a 16 MiB
  // "{"a":{"a":..." took hours).
  if (!JsonNestingWithin(text, kMaxJsonDepth)) return Json(Json::value_t::discarded);
  // The callback sees every container open (even inside a discarded
  // value) and every key with the depth of its container, so the object
  // path is kept here by depth; arrays add a level but no key.
  std::vector<std::string> keys;
  std::vector<bool> is_array;
  auto cb = [&](int depth, Json::parse_event_t event, Json& parsed) {
    const size_t d = static_cast<size_t>(depth);
    switch (event) {
      case Json::parse_event_t::object_start:
      case Json::parse_event_t::array_start:
        if (is_array.size() <= d) {
          is_array.resize(d + 1);
          keys.resize(d + 1);
        }
        is_array[d] = event == Json::parse_event_t::array_start;
        return true;
      case Json::parse_event_t::key: {
        if (d == 0 || d > keys.size()) return false;
        keys[d - 1] = parsed.get<std::string>();
        std::string path;
        for (size_t i = 0; i < d; ++i) {
          if (is_array[i]) continue;
          if (!path.empty()) path += '.';
          path += keys[i];
        }
        return kept(path);
      }
      default:
        return true;
    }
  };
  return Json::parse(text.begin(), text.end(), cb, /*allow_exceptions=*/false);
}

namespace {

// Each container's runtime id ("containerd://<id>" without its scheme) and
// name, from the statuses of the containers, init and ephemeral ones
// (bounded: kMaxContainersPerPod).
void ParseContainerIds(const Json& pod, std::vector<std::pair<std::string, std::string>>* out) {
  if (!pod.contains("status") || !pod["status"].is_object()) return;
  const Json& status = pod["status"];
  for (const char* list :
       {"containerStatuses", "initContainerStatuses", "ephemeralContainerStatuses"}) {
    if (!status.contains(list) || !status[list].is_array()) continue;
    for (const Json& c : status[list]) {
      if (out->size() >= kMaxContainersPerPod) return;
      if (!c.is_object() || !c.contains("containerID") || !c["containerID"].is_string() ||
          !c.contains("name") || !c["name"].is_string())
        continue;
      std::string id = c["containerID"].get<std::string>();
      if (const size_t scheme = id.find("://"); scheme != std::string::npos)
        id.erase(0, scheme + 3);
      std::string name = c["name"].get<std::string>();
      SanitizeLabelValue(&id, kMaxLabelValueBytes);
      SanitizeLabelValue(&name, kMaxLabelValueBytes);
      if (!id.empty()) out->emplace_back(std::move(id), std::move(name));
    }
  }
}

}  // namespace

Status ParsePod(const Json& pod, const LabelFilter& filter, PodRecord* out) {
  const std::string* ns = StringAt(pod, "metadata", "namespace");
  const std::string* name = StringAt(pod, "metadata", "name");
  if (ns == nullptr || name == nullptr)
    return Status::InvalidArgument("not a pod: no metadata.namespace and metadata.name");
  PodRecord r;
  r.namespace_ = *ns;
  r.name = *name;
  SanitizeLabelValue(&r.namespace_, kMaxLabelValueBytes);
  SanitizeLabelValue(&r.name, kMaxLabelValueBytes);
  const Json& meta = pod["metadata"];
  if (!filter.empty() && meta.contains("labels") && meta["labels"].is_object()) {
    for (const auto& [key, value] : meta["labels"].items()) {
      if (!value.is_string() || !filter.Allows(key)) continue;
      if (r.labels.size() >= kMaxLabelsPerPod) break;
      std::string v = value.get<std::string>();
      SanitizeLabelValue(&v, kMaxLabelValueBytes);
      r.labels.emplace_back(LabelFilter::ExportName(key), std::move(v));
    }
    std::sort(r.labels.begin(), r.labels.end());
    // Two names that export alike ("a.b", "a-b"): the first wins.
    r.labels.erase(std::unique(r.labels.begin(), r.labels.end(),
                               [](const auto& a, const auto& b) { return a.first == b.first; }),
                   r.labels.end());
  }
  if (const std::string* uid = StringAt(pod, "metadata", "uid"); uid != nullptr) r.uid = *uid;
  // A static pod's mirror: the kubelet runs the pod by the uid it made from
  // the manifest, which the mirror carries here; its own uid names nothing
  // on the node.
  if (meta.contains("annotations") && meta["annotations"].is_object()) {
    const Json& a = meta["annotations"];
    if (auto m = a.find(kMirrorAnnotation);
        m != a.end() && m->is_string() && !m->get_ref<const std::string&>().empty())
      r.uid = m->get<std::string>();
  }
  SanitizeLabelValue(&r.uid, kMaxLabelValueBytes);
  ParseContainerIds(pod, &r.containers);
  // A finished pod holds no device any more.
  const std::string* phase = StringAt(pod, "status", "phase");
  const bool finished = phase != nullptr && (*phase == "Succeeded" || *phase == "Failed");
  std::vector<std::string> containers;
  if (pod.contains("spec") && pod["spec"].is_object() && pod["spec"].contains("containers") &&
      pod["spec"]["containers"].is_array()) {
    for (const Json& c : pod["spec"]["containers"]) {
      std::string n = c.is_object() && c.contains("name") && c["name"].is_string()
                          ? c["name"].get<std::string>()
                          : std::string();
      SanitizeLabelValue(&n, kMaxLabelValueBytes);
      containers.push_back(std::move(n));
    }
  }
  if (meta.contains("annotations") && meta["annotations"].is_object()) {
    for (const auto& [key, value] : meta["annotations"].items()) {
      if (!hami::IsAllocatedAnnotation(key)) continue;
      std::vector<std::vector<hami::Grant>> grants;
      if (!value.is_string() || !hami::ParseAllocated(value.get<std::string>(), &grants).ok() ||
          grants.size() > std::max<size_t>(containers.size(), 1)) {
        r.bad_annotation = true;
        continue;
      }
      if (finished) continue;
      for (size_t i = 0; i < grants.size(); ++i) {
        for (const hami::Grant& g : grants[i]) {
          store::ContainerQuota q;
          q.uuid = g.uuid;
          q.namespace_ = r.namespace_;
          q.pod = r.name;
          q.container = i < containers.size() ? containers[i] : std::string();
          q.memory_bytes = g.memory_mib * static_cast<int64_t>(kBytesPerMib);
          q.core_ratio = static_cast<double>(g.cores) / 100.0;
          r.quotas.push_back(std::move(q));
        }
      }
    }
  }
  *out = std::move(r);
  return Status::Ok();
}

std::vector<store::DeviceShare> ParseNodeShares(const Json& node, int* bad) {
  std::vector<store::DeviceShare> out;
  if (!node.is_object() || !node.contains("metadata") || !node["metadata"].is_object() ||
      !node["metadata"].contains("annotations") || !node["metadata"]["annotations"].is_object())
    return out;
  for (const auto& [key, value] : node["metadata"]["annotations"].items()) {
    if (!hami::IsRegisterAnnotation(key)) continue;
    std::vector<hami::Registered> devices;
    if (!value.is_string() || !hami::ParseRegister(value.get<std::string>(), &devices).ok()) {
      ++*bad;
      continue;
    }
    for (const hami::Registered& d : devices) {
      if (out.size() >= hami::kMaxNodeDevices) break;
      store::DeviceShare s;
      s.uuid = d.uuid;
      s.type = d.type;
      s.split_count = d.split_count;
      s.memory_bytes = d.memory_mib * static_cast<int64_t>(kBytesPerMib);
      s.core_ratio = static_cast<double>(d.cores) / 100.0;
      s.healthy = d.healthy;
      out.push_back(std::move(s));
    }
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.uuid < b.uuid; });
  return out;
}

WatchEvent ParseEvent(std::string_view line) { return ParseEvent(line, KeptPath); }

WatchEvent ParseEvent(std::string_view line, bool (*kept)(const std::string& path)) {
  WatchEvent e;
  Json j = ParseKeeping(line, kept);
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string() || !j.contains("object") ||
      !j["object"].is_object())
    return e;
  const std::string& type = j["type"].get_ref<const std::string&>();
  if (type == "ADDED")
    e.type = WatchEvent::Type::kAdded;
  else if (type == "MODIFIED")
    e.type = WatchEvent::Type::kModified;
  else if (type == "DELETED")
    e.type = WatchEvent::Type::kDeleted;
  else if (type == "BOOKMARK")
    e.type = WatchEvent::Type::kBookmark;
  else if (type == "ERROR")
    e.type = WatchEvent::Type::kError;
  else
    return e;
  e.object = std::move(j["object"]);
  if (const std::string* rv = StringAt(e.object, "metadata", "resourceVersion"))
    e.resource_version = *rv;
  if (e.type == WatchEvent::Type::kError)
    e.error_code = e.object.contains("code") && e.object["code"].is_number_integer()
                       ? e.object["code"].get<int>()
                       : 0;
  return e;
}

std::string ResolveApiServer(const KubernetesOptions& options, std::string* why_off) {
  if (options.api_server.empty()) {
    *why_off = "--kubernetes.api-server is empty";
    return {};
  }
  if (options.api_server != "auto") return options.api_server;
  // Read once at start, before any thread of ours sets the environment.
  const char* host = std::getenv("KUBERNETES_SERVICE_HOST");  // NOLINT(concurrency-mt-unsafe)
  const char* port = std::getenv("KUBERNETES_SERVICE_PORT");  // NOLINT(concurrency-mt-unsafe)
  if (host == nullptr || port == nullptr || *host == '\0' || *port == '\0') {
    *why_off = "not in a cluster (KUBERNETES_SERVICE_HOST/PORT unset)";
    return {};
  }
  std::error_code ec;
  if (!std::filesystem::exists(options.token_file, ec)) {
    *why_off = "no service-account token at " + options.token_file;
    return {};
  }
  if (options.node_name.empty()) {
    *why_off = "the node name is unknown (--kubernetes.node-name or NODE_NAME)";
    return {};
  }
  const std::string h = host;
  return "https://" + (h.find(':') != std::string::npos ? "[" + h + "]" : h) + ":" + port;
}

PodWatcher::PodWatcher(const KubernetesOptions& options, LabelFilter labels, std::string base_url,
                       store::PodPort* registry, prometheus::Registry* self_metrics)
    : options_(options),
      base_url_(std::move(base_url)),
      labels_(std::move(labels)),
      registry_(registry),
      collectors_(*self_metrics),
      pods_gauge_(prometheus::BuildGauge()
                      .Name("xpu_kubernetes_pods")
                      .Help("Pods on this node in the API server's last word (watched).")
                      .Register(*self_metrics)
                      .Add({})),
      malformed_(prometheus::BuildCounter()
                     .Name("xpu_kubernetes_malformed_total")
                     .Help("API-server data that did not parse and was skipped: what is event, "
                           "pod, list, node, allocated_annotation or register_annotation.")
                     .Register(*self_metrics)),
      restarts_(prometheus::BuildCounter()
                    .Name("xpu_kubernetes_watch_restarts_total")
                    .Help("Pod watches ended and started again: reason is closed (the server's "
                          "timeout; resumed), gone (410: re-listed) or error (backed off).")
                    .Register(*self_metrics)),
      backoff_(std::chrono::seconds(1), 2.0, std::chrono::seconds(30), 0.2,
               [gen = std::mt19937_64(std::random_device{}())]() mutable {
                 return std::uniform_real_distribution<double>(0, 1)(gen);
               }) {
  if (options_.node_name.empty())
    throw std::invalid_argument("the API-server watch needs the node name");
  for (const char* what :
       {"event", "pod", "list", "node", "allocated_annotation", "register_annotation"})
    malformed_.Add({{"what", what}});
  for (const char* reason : {"closed", "gone", "error"}) restarts_.Add({{"reason", reason}});
}

PodWatcher::~PodWatcher() { Stop(); }

void PodWatcher::Start() {
  spdlog::info("kubernetes: watching pods on node {} at {}", options_.node_name, base_url_);
  worker_.Start([this] { WatchLoop(); }, "pod-watch");
  worker_.Start([this] { NodeLoop(); }, "node-watch");
}

void PodWatcher::Stop() { worker_.Stop(); }

void PodWatcher::Withdraw() {
  registry_->SetPodMetadata({});
  registry_->SetContainerQuotas({});
  registry_->SetDeviceShares({});
}

std::string PodWatcher::PodsPath() const {
  return "/api/v1/pods?fieldSelector=" + ApiClient::Escape("spec.nodeName=" + options_.node_name);
}

void PodWatcher::Failed(const std::string& what, const HttpResult& r) {
  collectors_.Record(what == "node" ? "apiserver_node" : "apiserver_pods", false,
                     Clock::duration::zero());
  if (said_.Raise(what + ":" + std::to_string(r.status)))
    spdlog::warn("kubernetes: {} failed: {}", what,
                 Describe(r, "get/list/watch pods and get nodes"));
}

void PodWatcher::Recovered(const std::string& what) {
  if (said_.ClearPrefix(what + ":") > 0) spdlog::info("kubernetes: {} works again", what);
}

std::chrono::milliseconds PodWatcher::Wait() {
  return RetryWait(&backoff_, std::exchange(server_wait_, std::chrono::seconds(0)));
}

void PodWatcher::WatchLoop() {
  bool need_list = true;
  while (!worker_.stopping()) {
    if (need_list) {
      if (!List()) {
        if (!worker_.SleepFor(Wait())) return;
        continue;
      }
      need_list = false;
    }
    const WatchEnd end = Watch();
    switch (end) {
      case WatchEnd::kStopped:
        return;
      case WatchEnd::kClosed:
        restarts_.Add({{"reason", "closed"}}).Increment();
        backoff_.Reset();
        break;
      case WatchEnd::kGone:
      case WatchEnd::kGoneAtOnce:
        restarts_.Add({{"reason", "gone"}}).Increment();
        spdlog::info("kubernetes: resourceVersion {} expired (410 Gone); listing again",
                     resource_version_);
        need_list = true;
        if (end == WatchEnd::kGoneAtOnce && !worker_.SleepFor(Wait())) return;
        break;
      case WatchEnd::kFailed:
        restarts_.Add({{"reason", "error"}}).Increment();
        if (!worker_.SleepFor(Wait())) return;
        break;
    }
  }
}

bool PodWatcher::List() {
  const ApiClient client(base_url_, options_.token_file, options_.ca_file, options_.insecure_http,
                         kUserAgent);
  const std::function<bool()> stopping = [this] { return worker_.stopping(); };
  const auto t0 = Clock::now();
  std::map<std::pair<std::string, std::string>, PodRecord> pods;
  std::string rv, cont;
  bool limited = false;
  int pages = 0;
  do {
    if (++pages > kMaxListPages) {
      malformed_.Add({{"what", "list"}}).Increment();
      Failed("list", HttpResult{200,
                                {},
                                "the pod list did not end within " + std::to_string(kMaxListPages) +
                                    " pages"});
      return false;
    }
    std::string path = PodsPath() + "&limit=" + std::to_string(kListPageSize);
    if (!cont.empty()) path += "&continue=" + ApiClient::Escape(cont);
    HttpResult r = client.Get(path, kMaxListBytes, kRequestTimeout, stopping);
    if (worker_.stopping()) return false;
    if (!r.ok()) {
      spdlog::debug("kubernetes: list failed: HTTP {} {}", r.status, r.error);
      server_wait_ = r.retry_after;
      Failed("list", r);
      return false;
    }
    Json j = ParseKept(r.body);
    r.body = std::string();  // the page's text goes before its pods are read
    if (!j.is_object() || !j.contains("items") || !j["items"].is_array()) {
      malformed_.Add({{"what", "list"}}).Increment();
      Failed("list", HttpResult{r.status, {}, "the answer is not a PodList"});
      return false;
    }
    if (rv.empty())
      if (const std::string* v = StringAt(j, "metadata", "resourceVersion")) rv = *v;
    const std::string* c = StringAt(j, "metadata", "continue");
    cont = c != nullptr ? *c : std::string();
    for (const Json& item : j["items"]) {
      PodRecord rec;
      if (!ParsePod(item, labels_, &rec).ok()) {
        malformed_.Add({{"what", "pod"}}).Increment();
        continue;
      }
      if (rec.bad_annotation) malformed_.Add({{"what", "allocated_annotation"}}).Increment();
      if (pods.size() >= kMaxPods) {
        limited = true;
        continue;
      }
      auto key = std::make_pair(rec.namespace_, rec.name);
      pods[key] = std::move(rec);
    }
  } while (!cont.empty() && !worker_.stopping());
  if (limited && said_.Raise("pod-limit"))
    spdlog::warn("kubernetes: more than {} pods on node {}; the rest are ignored", kMaxPods,
                 options_.node_name);
  pods_ = std::move(pods);
  resource_version_ = rv;
  spdlog::debug("kubernetes: listed {} pods at resourceVersion {}", pods_.size(), rv);
  collectors_.Record("apiserver_pods", true, Clock::now() - t0);
  Recovered("list");
  Publish();
  return true;
}

PodWatcher::WatchEnd PodWatcher::Watch() {
  const ApiClient client(base_url_, options_.token_file, options_.ca_file, options_.insecure_http,
                         kUserAgent);
  const std::string path = PodsPath() + "&watch=true&allowWatchBookmarks=true&resourceVersion=" +
                           ApiClient::Escape(resource_version_) +
                           "&timeoutSeconds=" + std::to_string(kWatchTimeoutSeconds);
  const auto t0 = Clock::now();
  bool gone = false;
  bool error_event = false;
  int events = 0;
  HttpResult r = client.Stream(
      path, kMaxEventBytes, std::chrono::seconds(kWatchTimeoutSeconds + 30),
      [&](long status) {
        if (status != 200) return;
        collectors_.Record("apiserver_pods", true, Clock::now() - t0);
        Recovered("watch");
      },
      [&](std::string_view line) {
        WatchEvent e = ParseEvent(line);
        switch (e.type) {
          case WatchEvent::Type::kInvalid:
            malformed_.Add({{"what", "event"}}).Increment();
            return true;
          case WatchEvent::Type::kError:
            gone = e.error_code == 410;
            error_event = !gone;
            return false;
          default:
            ++events;
            return ApplyEvent(e);
        }
      },
      [this] { return worker_.stopping(); });
  spdlog::debug("kubernetes: watch from {} ended: HTTP {}, {} events{}{}", resource_version_,
                r.status, events, r.error.empty() ? "" : ", ", r.error);
  if (worker_.stopping()) return WatchEnd::kStopped;
  // A watch that ended within kShortestWatch of its start, whatever it sent
  // (an event and the end; a 410 at once, from a server that keeps no
  // version), waits its backoff: a server that answers at once must not be
  // asked as fast as it answers.
  const bool at_once = Clock::now() - t0 < kShortestWatch;
  if (gone || r.status == 410) return at_once ? WatchEnd::kGoneAtOnce : WatchEnd::kGone;
  if (error_event) r.error = "the watch sent an ERROR event";
  if (r.status != 200 || !r.error.empty()) {
    server_wait_ = r.retry_after;
    Failed("watch", r);
    return WatchEnd::kFailed;
  }
  if (at_once) return WatchEnd::kFailed;
  return WatchEnd::kClosed;
}

bool PodWatcher::ApplyEvent(const WatchEvent& e) {
  if (!e.resource_version.empty()) resource_version_ = e.resource_version;
  if (e.type == WatchEvent::Type::kBookmark) return true;
  PodRecord rec;
  if (!ParsePod(e.object, labels_, &rec).ok()) {
    malformed_.Add({{"what", "pod"}}).Increment();
    return true;
  }
  if (rec.bad_annotation) malformed_.Add({{"what", "allocated_annotation"}}).Increment();
  auto key = std::make_pair(rec.namespace_, rec.name);
  if (e.type == WatchEvent::Type::kDeleted) {
    pods_.erase(key);
  } else if (pods_.count(key) != 0 || pods_.size() < kMaxPods) {
    pods_[key] = std::move(rec);
  } else if (said_.Raise("pod-limit")) {
    spdlog::warn("kubernetes: more than {} pods on node {}; the rest are ignored", kMaxPods,
                 options_.node_name);
  }
  Publish();
  return true;
}

void PodWatcher::Publish() {
  std::vector<store::PodMetadata> meta;
  std::vector<store::ContainerQuota> quotas;
  for (const auto& [key, p] : pods_) {
    if (!p.labels.empty() || !p.uid.empty())
      meta.push_back({p.namespace_, p.name, p.labels, p.uid, p.containers});
    quotas.insert(quotas.end(), p.quotas.begin(), p.quotas.end());
  }
  registry_->SetPodMetadata(std::move(meta));
  registry_->SetContainerQuotas(std::move(quotas));
  pods_gauge_.Set(static_cast<double>(pods_.size()));
}

void PodWatcher::NodeLoop() {
  const ApiClient client(base_url_, options_.token_file, options_.ca_file, options_.insecure_http,
                         kUserAgent);
  const std::function<bool()> stopping = [this] { return worker_.stopping(); };
  do {
    const auto t0 = Clock::now();
    HttpResult r = client.Get("/api/v1/nodes/" + ApiClient::Escape(options_.node_name),
                              kMaxNodeBytes, kRequestTimeout, stopping);
    if (worker_.stopping()) return;
    if (!r.ok()) {
      Failed("node", r);
      continue;
    }
    Json j = ParseKept(r.body);
    if (!j.is_object()) {
      malformed_.Add({{"what", "node"}}).Increment();
      Failed("node", HttpResult{r.status, {}, "the answer is not a Node"});
      continue;
    }
    int bad = 0;
    registry_->SetDeviceShares(ParseNodeShares(j, &bad));
    if (bad > 0) malformed_.Add({{"what", "register_annotation"}}).Increment(bad);
    collectors_.Record("apiserver_node", true, Clock::now() - t0);
    Recovered("node");
  } while (worker_.SleepFor(options_.node_interval));
}

}  // namespace xpu::kubernetes
