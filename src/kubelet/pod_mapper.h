#pragma once

#include <grpcpp/grpcpp.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include <chrono>
#include <memory>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "common/collector_metrics.h"
#include "common/part.h"
#include "common/status.h"
#include "common/worker.h"
#include "kubelet/podresources.grpc.pb.h"
#include "store/ports.h"

namespace xpu::kubelet {

// Limits on what a kubelet answer can make us hold (docs/reliability.md).
inline constexpr int kMaxMessageBytes = 4 * 1024 * 1024;
inline constexpr size_t kMaxPodAssignments = 4096;
inline constexpr size_t kMaxLabelBytes = 256;

// One of our devices as a kubelet answer may name it.
struct KnownDevice {
  std::string uuid;
  std::string minor;   // decimal
  std::string bus_id;  // canonical PCI address when known
};

// How a DRA claim's device is taken to be one of ours (docs/kubernetes.md):
// its driver must match one of `drivers` (whole-string regexes; none: any
// driver), and its device name, or the name part of one of its CDI devices
// ("vendor.com/class=NAME"), must equal one of `names` rendered for the
// device, where {uuid}, {minor} and {bus_id} stand for its identities.
class DraRule {
 public:
  // InvalidArgument for a bad regex, an unknown {field} or a template that
  // names none.
  static Status Make(const std::vector<std::string>& drivers, const std::vector<std::string>& names,
                     DraRule* out);
  bool DriverMatches(const std::string& driver) const;
  // The device `name` denotes, or nullptr.
  const KnownDevice* Find(const std::string& name, const std::vector<KnownDevice>& devices) const;

 private:
  std::vector<std::regex> drivers_;
  std::vector<std::string> names_;
};

// What one ListPodResources answer says of our devices.
struct PodMatch {
  // Sorted by uuid, namespace, pod, container, claim...; at most
  // kMaxPodAssignments; names made valid label values.
  std::vector<store::PodAssignment> pods;
  // DRA devices of a matching driver that name none of ours (a rule that
  // does not fit the driver, or a device we do not know yet).
  size_t dra_unmatched = 0;
};

// Which containers hold which of our devices. Device plugin: a device ID
// matches a device whose UUID it equals, or starts with followed by a
// separator (shared devices are often advertised as "<uuid>-<n>" or
// "<uuid>::<n>"). DRA: by `rule`. Other resources (CPUs, NICs, other
// drivers' claims) are ignored. Pure.
PodMatch MatchPods(const v1::ListPodResourcesResponse& resp,
                   const std::vector<KnownDevice>& devices, const DraRule& rule);

// The kubelet's PodResources socket (empty: no pod attribution), how often
// to ask it, and the DRA rule; the defaults of --kubelet.*.
struct PodMapperOptions {
  std::string socket = "/var/lib/kubelet/pod-resources/kubelet.sock";
  std::chrono::milliseconds interval{10000};
  std::vector<std::string> dra_drivers;  // regexes; empty: any driver
  std::vector<std::string> dra_device_names = {"{uuid}", "xpu-{minor}"};
  bool operator==(const PodMapperOptions&) const = default;
};

// Polls the kubelet's PodResources API every `interval` on its own thread and
// publishes the matches to the DeviceRegistry (xpu_device_pod_info). When the
// socket does not exist (not a Kubernetes node) it does nothing and says so
// once. Start()/Stop() from the owning thread.
class PodMapper : public Part {
 public:
  // `dra` is options.dra_* made by the configuration's validation
  // (DraRule::Make). Throws std::invalid_argument for options Validate
  // would refuse.
  PodMapper(const PodMapperOptions& options, DraRule dra, store::PodPort* registry,
            prometheus::Registry* self_metrics);
  ~PodMapper() override;
  PodMapper(const PodMapper&) = delete;
  PodMapper& operator=(const PodMapper&) = delete;

  void Start() override;
  void Stop() override;
  // Part: switched off, its pod assignments leave the registry.
  void Withdraw() override;
  // One poll; returns whether the kubelet answered. For tests.
  bool PollOnce();
  // As built; any thread, while the mapper lives.
  const PodMapperOptions& options() const { return options_; }

 private:
  void Loop();

  const PodMapperOptions options_;
  DraRule dra_;
  store::PodPort* const registry_;
  // The collector's series exist only once the socket does: a node without a
  // kubelet must not show a failing collector.
  CollectorMetrics collectors_;
  // xpu_kubelet_dra_unmatched_devices: its series once the kubelet answers.
  prometheus::Family<prometheus::Gauge>* dra_family_;
  prometheus::Gauge* dra_unmatched_ = nullptr;  // poller-thread state
  std::unique_ptr<v1::PodResourcesLister::Stub> stub_;
  LogOnce said_;         // "absent", "error": logged until they clear
  bool polled_ = false;  // the socket existed at least once; poller-thread state
  InFlightCalls<grpc::ClientContext> calls_;
  Worker worker_;
};

}  // namespace xpu::kubelet
