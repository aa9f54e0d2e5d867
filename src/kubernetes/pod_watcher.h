#pragma once

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <string_view>
#include <vector>

#include "common/backoff.h"
#include "common/collector_metrics.h"
#include "common/part.h"
#include "common/status.h"
#include "common/worker.h"
#include "kubernetes/api_client.h"
#include "kubernetes/label_filter.h"
#include "kubernetes/options.h"
#include "store/ports.h"

// Pod metadata from the Kubernetes API server (docs/kubernetes.md): one
// list-then-watch of the pods on this node, and this node's object now and
// then, feeding pod labels and HAMi's shared-device quotas to the
// DeviceRegistry.
namespace xpu::kubernetes {

// Limits on what the API server can make us hold (docs/reliability.md).
inline constexpr size_t kMaxPods = 4096;  // on one node
// One list page, read whole before it is parsed (the parse keeps only the
// fields used: ParseKept): with the watch line and the node object, well
// inside the manifests' 128 MiB limit.
inline constexpr size_t kMaxListBytes = 16 << 20;
inline constexpr size_t kMaxEventBytes = 4 << 20;  // one watch line
inline constexpr size_t kMaxNodeBytes = 8 << 20;   // the node object
inline constexpr size_t kMaxLabelsPerPod = 64;
inline constexpr size_t kMaxContainersPerPod = 64;  // with their ids, from status
inline constexpr size_t kMaxLabelValueBytes = 256;
inline constexpr int kListPageSize = 100;  // pods a page (a node runs 110 at most by default)
// Pages one list may take (kListPageSize items each: past kMaxPods, and
// past any node's ResourceSlices): a server that hands out a `continue`
// for ever (a bug, a proxy replaying a page) ends the list as a failure,
// retried after its backoff, rather than asking for pages without end.
inline constexpr int kMaxListPages = 64;
inline constexpr int kWatchTimeoutSeconds = 240;  // the server ends a watch after this

// On a static pod's mirror: the uid the kubelet runs the static pod by.
inline constexpr char kMirrorAnnotation[] = "kubernetes.io/config.mirror";

// One pod as the exporter keeps it.
struct PodRecord {
  std::string namespace_, name;
  std::vector<std::pair<std::string, std::string>> labels;  // exported names, sorted
  std::vector<store::ContainerQuota> quotas;                // HAMi grants
  // The uid the kubelet runs the pod by (what its cgroup names):
  // metadata.uid, or a static pod's mirror's kMirrorAnnotation.
  std::string uid;
  // Each running container's runtime id and name (status.*containerStatuses):
  // what a process's cgroup names (the nvml backend's per-process memory).
  std::vector<std::pair<std::string, std::string>> containers;
  bool bad_annotation = false;  // a HAMi annotation did not parse (counted)
};

// A Pod object (JSON) to a record: allowlisted labels, and the grants of
// hami.io/*-devices-allocated joined to spec.containers by position.
// InvalidArgument when it is no pod (no metadata.namespace/name).
Status ParsePod(const nlohmann::json& pod, const LabelFilter& labels, PodRecord* out);

// Parses an API-server answer (a PodList, a watch event, a Pod, a Node, a
// Status) keeping only the fields the watcher reads: metadata's name,
// namespace, labels, annotations, resourceVersion and continue, the
// containers' names, the pod's phase, an event's type and a Status's code,
// reason and message. The rest (managedFields, the rest of status, volumes,
// env...: most of a pod's bytes)
// is never built into the DOM. A discarded (invalid) value when the text is
// not JSON, or nests deeper than kMaxJsonDepth.
nlohmann::json ParseKept(std::string_view text);
// The same parse with another choice of fields: `kept` is asked of each
// object key's path ("a.b.c", array levels skipped) and keeps the value
// when it says yes, asking again of the keys inside it.
nlohmann::json ParseKeeping(std::string_view text, bool (*kept)(const std::string& path));
// Arrays and objects nested in one answer of the API server, at most: its
// objects nest a dozen deep (a pod's managedFields the deepest); deeper is
// refused before it is parsed (common/json_depth.h says why).
inline constexpr int kMaxJsonDepth = 64;
// For such a `kept`: whether the object-key path `path` leads to `field` or
// is it ("a" and "a.b" for "a.b"), or, with `whole`, lies inside it.
bool OnPathTo(std::string_view path, std::string_view field, bool whole);

// The HAMi device register of a Node object (JSON); `bad` counts
// annotations that did not parse.
std::vector<store::DeviceShare> ParseNodeShares(const nlohmann::json& node, int* bad);

// One line of a watch stream.
struct WatchEvent {
  enum class Type { kAdded, kModified, kDeleted, kBookmark, kError, kInvalid };
  Type type = Type::kInvalid;
  nlohmann::json object;
  std::string resource_version;  // the object's metadata.resourceVersion
  int error_code = 0;            // kError: the Status object's code (410: Gone)
};
WatchEvent ParseEvent(std::string_view line);
// The same for another kind of object: `kept` as ParseKeeping's, which must
// keep "type", "object.metadata.resourceVersion" and "object.code".
WatchEvent ParseEvent(std::string_view line, bool (*kept)(const std::string& path));

// The base URL for the options: the flag's URL, or in-cluster for "auto"
// (KUBERNETES_SERVICE_HOST/PORT set, the token file present and the node
// name known), or empty: off. `why_off` says why auto found nothing. Reads
// the environment: call at start, from the main thread.
std::string ResolveApiServer(const KubernetesOptions& options, std::string* why_off);

// Watches this node's pods and reads its node object, each on its own
// thread, and publishes to the registry. Start()/Stop() from the owning
// thread; metrics are thread-safe.
class PodWatcher : public Part {
 public:
  // `labels` is options.pod_labels made by the configuration's validation
  // (LabelFilter::Make). Throws std::invalid_argument for options Validate
  // would refuse.
  PodWatcher(const KubernetesOptions& options, LabelFilter labels, std::string base_url,
             store::PodPort* registry, prometheus::Registry* self_metrics);
  ~PodWatcher() override;
  PodWatcher(const PodWatcher&) = delete;
  PodWatcher& operator=(const PodWatcher&) = delete;

  void Start() override;
  void Stop() override;
  // Part: switched off, the pods' metadata, quotas and shares leave the
  // registry.
  void Withdraw() override;
  // What it was built with. Any thread, while the watcher lives.
  const KubernetesOptions& options() const { return options_; }
  const std::string& base_url() const { return base_url_; }

 private:
  // How a watch ended; kGoneAtOnce: 410 within kShortestWatch (listed again after the backoff).
  enum class WatchEnd { kClosed, kGone, kGoneAtOnce, kFailed, kStopped };
  void WatchLoop();
  void NodeLoop();
  bool List();
  WatchEnd Watch();
  // The wait after a failed list or watch: the backoff's, or the server's
  // Retry-After where longer (RetryWait). Watch thread.
  std::chrono::milliseconds Wait();
  bool ApplyEvent(const WatchEvent& e);  // false: the watch must end (410)
  void Upsert(PodRecord r);
  void Publish();
  // A failing call: the collector fails, and the problem is logged once per
  // call and status. Recovered(): the call works again (logged once).
  void Failed(const std::string& what, const HttpResult& r);
  void Recovered(const std::string& what);
  std::string PodsPath() const;

  const KubernetesOptions options_;
  const std::string base_url_;
  LabelFilter labels_;
  store::PodPort* const registry_;
  CollectorMetrics collectors_;
  prometheus::Gauge& pods_gauge_;
  prometheus::Family<prometheus::Counter>& malformed_;
  prometheus::Family<prometheus::Counter>& restarts_;
  LogOnce said_;
  // Watch-thread state.
  std::map<std::pair<std::string, std::string>, PodRecord> pods_;
  std::string resource_version_;
  Backoff backoff_;
  // What the last failed list or watch's server asked to wait (Retry-After).
  std::chrono::seconds server_wait_{0};
  Worker worker_;
};

}  // namespace xpu::kubernetes
