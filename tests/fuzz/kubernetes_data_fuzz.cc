// What the API server sends: a watch line (and the pod or node inside it)
// through ParseEvent, ParsePod and ParseNodeShares, the bytes as a Node read
// back for its condition (ParseNodeFacts), the raw bytes as HAMi annotation
// values and as a Retry-After header's value. Checks the limits hold, labels
// stay escaped, and what the Node condition is compared and patched with
// survives a round trip.
#include "exposition/text_format.h"
#include "fuzz_util.h"
#include "kubernetes/api_client.h"
#include "kubernetes/hami.h"
#include "kubernetes/pod_watcher.h"
#include "sinks/device_taints.h"
#include "sinks/node_health.h"

using namespace xpu::kubernetes;
using xpu::sinks::ConditionPatch;
using xpu::sinks::NodeFacts;
using xpu::sinks::ParseNodeFacts;
using Json = nlohmann::json;

// The DRA API's answers, as the device taints read them: a watch line or a
// list of ResourceSlices (kept parse and whole parse agree), a rule read
// back, an APIResourceList. What is kept stays in its limits, a card is
// named by at most one device, and a rule written from what was read reads
// back the same.
namespace {

void FuzzDeviceTaints(std::string_view in) {
  using namespace xpu::sinks;
  const WatchEvent e = ParseEvent(in, KeptSlicePath);
  std::map<std::string, Slice> slices;
  Slice s;
  if (ParseSlice(e.object, &s).ok()) {
    if (s.devices.size() > kMaxSliceDevices || s.name.size() > kMaxDraNameBytes ||
        s.driver.size() > kMaxDraNameBytes || s.pool.size() > kMaxDraNameBytes)
      abort();
    const Json whole = Json::parse(in, nullptr, false);
    Slice full;
    if (whole.is_object() && whole.contains("object") &&
        (!ParseSlice(whole["object"], &full).ok() || !(full == s)))
      abort();
    slices[s.name] = s;
  }
  const Json list = ParseKeeping(in, KeptSlicePath);
  if (list.is_object() && list.contains("items") && list["items"].is_array())
    for (const Json& item : list["items"])
      if (Slice one; ParseSlice(item, &one).ok() && slices.size() < kMaxSlices)
        slices[one.name] = std::move(one);
  const SliceIndex index(slices);
  static const xpu::kubelet::DraRule rule = [] {
    xpu::kubelet::DraRule r;
    if (!xpu::kubelet::DraRule::Make({}, {"{uuid}", "xpu-{minor}", "{bus_id}"}, &r).ok()) abort();
    return r;
  }();
  for (const auto& [name, slice] : slices) {
    for (const Slice::Device& d : slice.devices) {
      xpu::store::InventoryDevice card;
      card.key = card.bus_id = d.pci_bus_id;
      card.uuid = d.uuid;
      std::string why;
      auto found = index.Find(card, rule, &why);
      if (found && !index.Has(*found)) abort();
      if (!found && why.empty()) abort();
      if (found) {
        const std::string name_ = RuleName("node-a", *found);
        if (name_.empty() || name_.size() > 253) abort();
        Rule r;
        r.name = name_;
        r.device = *found;
        r.value = "reset_card";
        r.effect = "NoSchedule";
        r.bus_id = card.bus_id;
        Rule back;
        if (!ParseRule(Json::parse(RuleBody("v1", "node-a", r)), "node-a", &back).ok() ||
            !back.ours || back.device != r.device || back.bus_id != r.bus_id)
          abort();
      }
    }
  }
  Rule rule_read;
  if (ParseRule(ParseKeeping(in, KeptRulePath), "node-a", &rule_read).ok() &&
      (rule_read.name.size() > kMaxDraNameBytes || rule_read.value.size() > 63))
    abort();
  bool has = false;
  (void)ListsResource(in, "devicetaintrules", &has);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  static const LabelFilter filter = [] {
    LabelFilter f;
    if (!LabelFilter::Make({".*"}, &f).ok()) abort();
    return f;
  }();
  // The bytes as a Retry-After header's value: a wait within its bound.
  const std::chrono::seconds wait = ParseRetryAfter(in, std::chrono::system_clock::now());
  if (wait < std::chrono::seconds(0) || wait > kMaxRetryAfter) abort();
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
  FuzzDeviceTaints(in);
  return 0;
}
