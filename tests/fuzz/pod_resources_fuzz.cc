// kubelet PodResources List answers through MatchPods. The device UUIDs we
// know are taken from the answer itself (prefixes of its device IDs), so
// matches happen.
#include "exposition/text_format.h"
#include "fuzz_util.h"
#include "kubelet/pod_mapper.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  v1::ListPodResourcesResponse resp;
  if (!resp.ParseFromArray(data, static_cast<int>(size))) return 0;
  std::set<std::string> uuids = {"", "GPU-0"};
  for (const auto& pod : resp.pod_resources())
    for (const auto& c : pod.containers())
      for (const auto& d : c.devices())
        for (const auto& id : d.device_ids()) uuids.insert(id.substr(0, id.size() / 2));
  auto pods = xpu::kubelet::MatchPods(resp, uuids);
  if (pods.size() > xpu::kubelet::kMaxPodAssignments) abort();
  std::string page;
  for (const auto& p : pods) {
    xpu::exposition::AppendLabelValue(p.pod, &page);
    xpu::exposition::AppendLabelValue(p.container, &page);
  }
  if (page.find('\n') != std::string::npos) abort();  // escaped
  return 0;
}
