// Pod attribution against a real gRPC PodResourcesLister on a temporary Unix
// socket (a stand-in for the kubelet, which cannot run here).
#include "kubelet/pod_mapper.h"

#include <gtest/gtest.h>

#include "support/metrics_util.h"
#include "support/test_util.h"

namespace xpu::kubelet {
namespace {

v1::ListPodResourcesResponse Pods() {
  v1::ListPodResourcesResponse r;
  auto add = [&](const char* ns, const char* pod, const char* container, const char* resource,
                 std::vector<std::string> ids) {
    auto* p = r.add_pod_resources();
    p->set_name(pod);
    p->set_namespace_(ns);
    auto* c = p->add_containers();
    c->set_name(container);
    auto* d = c->add_devices();
    d->set_resource_name(resource);
    for (auto& id : ids) d->add_device_ids(id);
  };
  add("ml", "train-0", "worker", "example.com/ppu", {"PPU-aaa", "PPU-bbb"});
  add("ml", "infer-1", "server", "example.com/ppu-share", {"PPU-ccc-1", "PPU-ccc::2"});
  add("kube-system", "nic-user", "app", "example.com/rdma", {"mlx5_0"});
  add("ml", "almost", "x", "example.com/ppu", {"PPU-aaaX"});  // a different device
  return r;
}

TEST(MatchPodsTest, MatchesWholeAndSharedDevicesOnly) {
  auto got = MatchPods(Pods(), {"PPU-aaa", "PPU-bbb", "PPU-ccc", "PPU-ddd"});
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].uuid, "PPU-aaa");
  EXPECT_EQ(got[0].pod, "train-0");
  EXPECT_EQ(got[0].namespace_, "ml");
  EXPECT_EQ(got[0].container, "worker");
  EXPECT_EQ(got[1].uuid, "PPU-bbb");
  EXPECT_EQ(got[2].uuid, "PPU-ccc");  // two shares of one device, one row
  EXPECT_EQ(got[2].resource, "example.com/ppu-share");
}

TEST(MatchPodsTest, NothingWithoutKnownDevices) { EXPECT_TRUE(MatchPods(Pods(), {}).empty()); }

class FakeKubelet final : public v1::PodResourcesLister::Service {
 public:
  grpc::Status List(grpc::ServerContext*, const v1::ListPodResourcesRequest*,
                    v1::ListPodResourcesResponse* resp) override {
    *resp = Pods();
    return grpc::Status::OK;
  }
};

TEST(PodMapperTest, PublishesPodsOfKnownDevicesAsInfoMetric) {
  xpu::testing::TempDir dir;
  const std::string sock = dir.File("kubelet.sock");
  store::DeviceRegistry registry;
  store::DeviceInfo d;
  d.minor = 3;
  d.uuid = "PPU-ccc";
  d.health = "Healthy";
  registry.SetXdmDevices({d});
  prometheus::Registry metrics;
  PodMapper mapper(sock, std::chrono::seconds(10), &registry, &metrics);
  EXPECT_FALSE(mapper.PollOnce());  // no kubelet socket: nothing, quietly
  EXPECT_EQ(xpu::testing::MetricValue(metrics, "xpu_exporter_collector_success",
                                      {{"collector", "kubelet"}}),
            -1);  // not a failing collector: no series at all
  FakeKubelet kubelet;
  grpc::ServerBuilder b;
  b.AddListeningPort("unix://" + sock, grpc::InsecureServerCredentials());
  b.RegisterService(&kubelet);
  auto server = b.BuildAndStart();
  ASSERT_TRUE(server);
  ASSERT_TRUE(mapper.PollOnce());
  EXPECT_EQ(xpu::testing::MetricValue(metrics, "xpu_exporter_collector_success",
                                      {{"collector", "kubelet"}}),
            1);
  bool found = false;
  for (const auto& f : registry.Collect()) {
    if (f.name != "xpu_device_pod_info") continue;
    ASSERT_EQ(f.metric.size(), 1u);
    std::map<std::string, std::string> l;
    for (const auto& x : f.metric[0].label) l[x.name] = x.value;
    EXPECT_EQ(l["minor"], "3");
    EXPECT_EQ(l["pod"], "infer-1");
    EXPECT_EQ(l["namespace"], "ml");
    EXPECT_EQ(l["container"], "server");
    found = true;
  }
  EXPECT_TRUE(found);
  server->Shutdown();
  EXPECT_FALSE(mapper.PollOnce());  // the kubelet is gone
  EXPECT_EQ(xpu::testing::MetricValue(metrics, "xpu_exporter_collector_success",
                                      {{"collector", "kubelet"}}),
            0);
  for (const auto& f : registry.Collect()) EXPECT_NE(f.name, "xpu_device_pod_info");
}

}  // namespace
}  // namespace xpu::kubelet
