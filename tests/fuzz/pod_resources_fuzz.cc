// kubelet PodResources List answers through MatchPods: device-plugin IDs and
// DRA claims. The devices we know are taken from the answer itself (prefixes
// of its device IDs, and DRA device names as uuid and minor), so matches
// happen.
#include "exposition/text_format.h"
#include "fuzz_util.h"
#include "kubelet/pod_mapper.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  v1::ListPodResourcesResponse resp;
  if (!resp.ParseFromArray(data, static_cast<int>(size))) return 0;
  std::vector<xpu::kubelet::KnownDevice> devices = {{"", "0", ""}, {"GPU-0", "1", "0000:01:00.0"}};
  for (const auto& pod : resp.pod_resources())
    for (const auto& c : pod.containers()) {
      for (const auto& d : c.devices())
        for (const auto& id : d.device_ids())
          devices.push_back({id.substr(0, id.size() / 2), "2", ""});
      for (const auto& dr : c.dynamic_resources())
        for (const auto& r : dr.claim_resources()) devices.push_back({r.device_name(), "", ""});
    }
  static const xpu::kubelet::DraRule rule = [] {
    xpu::kubelet::DraRule r;
    if (!xpu::kubelet::DraRule::Make({}, {"{uuid}", "xpu-{minor}", "{bus_id}"}, &r).ok()) abort();
    return r;
  }();
  auto match = xpu::kubelet::MatchPods(resp, devices, rule);
  if (match.pods.size() > xpu::kubelet::kMaxPodAssignments) abort();
  std::string page;
  for (const auto& p : match.pods) {
    for (const std::string* v : {&p.pod, &p.container, &p.claim, &p.driver, &p.pool, &p.device}) {
      if (v->size() > xpu::kubelet::kMaxLabelBytes) abort();
      xpu::exposition::AppendLabelValue(*v, &page);
    }
  }
  if (page.find('\n') != std::string::npos) abort();  // escaped
  return 0;
}
