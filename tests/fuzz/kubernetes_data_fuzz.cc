// What the API server sends: a watch line (and the pod or node inside it)
// through ParseEvent, ParsePod and ParseNodeShares, the bytes as a Node read
// back for its condition (ParseNodeFacts), and the raw bytes as HAMi
// annotation values. Checks the limits hold, labels stay escaped, and what
// the Node condition is compared and patched with survives a round trip.
#include "exposition/text_format.h"
#include "fuzz_util.h"
#include "kubernetes/hami.h"
#include "kubernetes/pod_watcher.h"
#include "sinks/node_health.h"

using namespace xpu::kubernetes;
using xpu::sinks::ConditionPatch;
using xpu::sinks::NodeFacts;
using xpu::sinks::ParseNodeFacts;
using Json = nlohmann::json;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  static const LabelFilter filter = [] {
    LabelFilter f;
    if (!LabelFilter::Make({".*"}, &f).ok()) abort();
    return f;
  }();
  WatchEvent e = ParseEvent(in);
  PodRecord r;
  if (ParsePod(e.object, filter, &r).ok()) {
    if (r.labels.size() > kMaxLabelsPerPod) abort();
    std::string page;
    for (const auto& [name, value] : r.labels) {
      if (value.size() > kMaxLabelValueBytes) abort();
      for (char c : name)
        if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') abort();
      xpu::exposition::AppendLabelValue(value, &page);
    }
    for (const auto& q : r.quotas) xpu::exposition::AppendLabelValue(q.uuid, &page);
    if (r.containers.size() > xpu::kubernetes::kMaxContainersPerPod) abort();
    for (const auto& [id, name] : r.containers) {
      if (id.empty() || id.size() > kMaxLabelValueBytes || name.size() > kMaxLabelValueBytes)
        abort();
      xpu::exposition::AppendLabelValue(name, &page);
    }
    if (page.find('\n') != std::string::npos) abort();
  }
  // ParseEvent keeps only the fields the watcher reads (ParseKept): what it
  // reads must come out the same as from the whole document.
  const nlohmann::json whole = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (whole.is_object() && whole.contains("object") && whole["object"].is_object() &&
      e.object.is_object()) {
    PodRecord full;
    const bool full_ok = ParsePod(whole["object"], filter, &full).ok();
    PodRecord kept;
    const bool kept_ok = ParsePod(e.object, filter, &kept).ok();
    if (full_ok != kept_ok) abort();
    if (full_ok && (full.namespace_ != kept.namespace_ || full.name != kept.name ||
                    full.labels != kept.labels || full.quotas.size() != kept.quotas.size() ||
                    full.uid != kept.uid || full.containers != kept.containers ||
                    full.bad_annotation != kept.bad_annotation))
      abort();
    int bad_full = 0, bad_kept = 0;
    if (ParseNodeShares(whole["object"], &bad_full).size() !=
            ParseNodeShares(e.object, &bad_kept).size() ||
        bad_full != bad_kept)
      abort();
  }
  int bad = 0;
  if (ParseNodeShares(e.object, &bad).size() > hami::kMaxNodeDevices * 64) abort();
  std::vector<std::vector<hami::Grant>> grants;
  if (hami::ParseAllocated(in, &grants).ok()) {
    if (grants.size() > hami::kMaxContainers) abort();
    for (const auto& c : grants)
      if (c.size() > hami::kMaxDevicesPerContainer) abort();
  }
  NodeFacts facts;
  if (ParseNodeFacts(in, &facts).ok() && facts.condition) {
    // The condition read back, patched again: the same condition reads back.
    Json node = {{"kind", "Node"}, {"metadata", {{"uid", facts.uid}}}};
    node["status"] = Json::parse(ConditionPatch(*facts.condition, "t", facts.transition))["status"];
    NodeFacts again;
    if (!ParseNodeFacts(node.dump(-1, ' ', false, Json::error_handler_t::replace), &again).ok())
      abort();
    // (The parse admits only valid UTF-8, so nothing is replaced on the way.)
    if (again.condition != facts.condition) abort();
  }
  std::vector<hami::Registered> devices;
  if (hami::ParseRegister(in, &devices).ok() && devices.size() > hami::kMaxNodeDevices) abort();
  return 0;
}
