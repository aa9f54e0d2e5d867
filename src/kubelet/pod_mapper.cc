#include "kubelet/pod_mapper.h"

#include <prometheus/gauge.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <filesystem>

#include "common/label.h"

namespace xpu::kubelet {
namespace {

// The device UUID a kubelet device ID names, if any. A node has a handful of
// devices, so a scan is fine.
const std::string* UuidOf(const std::string& id, const std::set<std::string>& uuids) {
  for (const std::string& u : uuids) {
    if (u.empty() || id.compare(0, u.size(), u) != 0) continue;
    if (id.size() == u.size() || !std::isalnum(static_cast<unsigned char>(id[u.size()]))) return &u;
  }
  return nullptr;
}

}  // namespace

std::vector<store::PodAssignment> MatchPods(const v1::ListPodResourcesResponse& resp,
                                            const std::set<std::string>& uuids) {
  std::vector<store::PodAssignment> out;
  for (const auto& pod : resp.pod_resources()) {
    for (const auto& c : pod.containers()) {
      for (const auto& dev : c.devices()) {
        for (const auto& id : dev.device_ids()) {
          const std::string* uuid = UuidOf(id, uuids);
          if (uuid == nullptr) continue;
          if (out.size() >= kMaxPodAssignments) break;
          store::PodAssignment a{*uuid, pod.name(), pod.namespace_(), c.name(),
                                 dev.resource_name()};
          // Label values: valid UTF-8, bounded, whatever the kubelet sent.
          for (std::string* v : {&a.pod, &a.namespace_, &a.container, &a.resource})
            SanitizeLabelValue(v, kMaxLabelBytes);
          out.push_back(std::move(a));
        }
      }
    }
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    return std::tie(a.uuid, a.namespace_, a.pod, a.container) <
           std::tie(b.uuid, b.namespace_, b.pod, b.container);
  });
  out.erase(std::unique(out.begin(), out.end()), out.end());  // several shares of one device
  return out;
}

PodMapper::PodMapper(std::string socket_path, std::chrono::milliseconds interval,
                     store::DeviceRegistry* registry, prometheus::Registry* self_metrics)
    : socket_path_(std::move(socket_path)),
      interval_(interval),
      registry_(registry),
      collectors_(*self_metrics) {
  if (interval_.count() <= 0) throw std::invalid_argument("kubelet interval must be > 0");
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxMessageBytes);
  stub_ = v1::PodResourcesLister::NewStub(grpc::CreateCustomChannel(
      "unix://" + socket_path_, grpc::InsecureChannelCredentials(), args));
}

PodMapper::~PodMapper() { Stop(); }

void PodMapper::Start() {
  worker_.Start([this] { Loop(); });
}

void PodMapper::Stop() {
  worker_.RequestStop();
  calls_.CancelAll();
  worker_.Stop();
}

void PodMapper::Loop() {
  do {
    PollOnce();
  } while (worker_.SleepFor(interval_));
}

bool PodMapper::PollOnce() {
  std::error_code ec;
  if (!std::filesystem::exists(socket_path_, ec)) {
    if (said_.Raise("absent"))
      spdlog::info("kubelet PodResources socket {} absent: no pod attribution", socket_path_);
    if (polled_) {  // the kubelet went away: its answers no longer hold
      collectors_.Record("kubelet", false, std::chrono::steady_clock::duration::zero());
      registry_->SetPodAssignments({});
    }
    return false;
  }
  polled_ = true;
  said_.Clear("absent");
  grpc::ClientContext ctx;
  InFlightCalls<grpc::ClientContext>::Scope in_flight(&calls_, &ctx);
  if (!in_flight.ok()) return false;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  v1::ListPodResourcesResponse resp;
  const auto t0 = std::chrono::steady_clock::now();
  const grpc::Status st = stub_->List(&ctx, v1::ListPodResourcesRequest(), &resp);
  collectors_.Record("kubelet", st.ok(), std::chrono::steady_clock::now() - t0);
  if (!st.ok()) {
    if (said_.Raise("error"))
      spdlog::warn("kubelet PodResources List failed: {}", st.error_message());
    registry_->SetPodAssignments({});
    return false;
  }
  said_.Clear("error");
  std::set<std::string> uuids;
  for (const auto& d : registry_->Devices()) uuids.insert(d.uuid);
  for (const auto& h : registry_->HalDevices()) uuids.insert(h.uuid);
  registry_->SetPodAssignments(MatchPods(resp, uuids));
  return true;
}

}  // namespace xpu::kubelet
