#pragma once

#include <grpcpp/grpcpp.h>
#include <prometheus/registry.h>

#include <chrono>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "common/collector_metrics.h"
#include "common/worker.h"
#include "kubelet/podresources.grpc.pb.h"
#include "store/device_registry.h"

namespace xpu::kubelet {

// Limits on what a kubelet answer can make us hold (docs/reliability.md).
inline constexpr int kMaxMessageBytes = 4 * 1024 * 1024;
inline constexpr size_t kMaxPodAssignments = 4096;
inline constexpr size_t kMaxLabelBytes = 256;

// Which containers hold which of our devices, from one ListPodResources
// answer: a device ID matches a device whose UUID it equals, or starts with
// followed by a separator (shared devices are often advertised as
// "<uuid>-<n>" or "<uuid>::<n>"). Other resources (CPUs, NICs) are ignored.
// Names are made valid label values; at most kMaxPodAssignments. Pure; sorted
// by uuid, namespace, pod, container.
std::vector<store::PodAssignment> MatchPods(const v1::ListPodResourcesResponse& resp,
                                            const std::set<std::string>& uuids);

// The kubelet's PodResources socket (empty: no pod attribution) and how
// often to ask it; the defaults of --kubelet.*.
struct PodMapperOptions {
  std::string socket = "/var/lib/kubelet/pod-resources/kubelet.sock";
  std::chrono::milliseconds interval{10000};
};

// Polls the kubelet's PodResources API every `interval` on its own thread and
// publishes the matches to the DeviceRegistry (xpu_device_pod_info). When the
// socket does not exist (not a Kubernetes node) it does nothing and says so
// once. Start()/Stop() from the owning thread.
class PodMapper {
 public:
  PodMapper(std::string socket_path, std::chrono::milliseconds interval,
            store::DeviceRegistry* registry, prometheus::Registry* self_metrics);
  ~PodMapper();
  PodMapper(const PodMapper&) = delete;
  PodMapper& operator=(const PodMapper&) = delete;

  void Start();
  void Stop();
  // One poll; returns whether the kubelet answered. For tests.
  bool PollOnce();

 private:
  void Loop();

  const std::string socket_path_;
  const std::chrono::milliseconds interval_;
  store::DeviceRegistry* const registry_;
  // The collector's series exist only once the socket does: a node without a
  // kubelet must not show a failing collector.
  CollectorMetrics collectors_;
  std::unique_ptr<v1::PodResourcesLister::Stub> stub_;
  LogOnce said_;         // "absent", "error": logged until they clear
  bool polled_ = false;  // the socket existed at least once; poller-thread state
  InFlightCalls<grpc::ClientContext> calls_;
  Worker worker_;
};

}  // namespace xpu::kubelet
