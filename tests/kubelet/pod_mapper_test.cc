// Pod attribution against a real gRPC PodResourcesLister on a temporary Unix
// socket (a stand-in for the kubelet, which cannot run here).
#include "kubelet/pod_mapper.h"

#include <gtest/gtest.h>

#include "store/device_registry.h"
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

std::vector<KnownDevice> Devices(std::vector<std::string> uuids) {
  std::vector<KnownDevice> out;
  for (size_t i = 0; i < uuids.size(); ++i)
    out.push_back({uuids[i], std::to_string(i), "0000:" + std::to_string(10 + i) + ":00.0"});
  return out;
}

DraRule Rule(std::vector<std::string> drivers = {},
             std::vector<std::string> names = PodMapperOptions{}.dra_device_names) {
  DraRule r;
  EXPECT_TRUE(DraRule::Make(drivers, names, &r).ok());
  return r;
}

TEST(MatchPodsTest, MatchesWholeAndSharedDevicesOnly) {
  auto got = MatchPods(Pods(), Devices({"PPU-aaa", "PPU-bbb", "PPU-ccc", "PPU-ddd"}), Rule()).pods;
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].uuid, "PPU-aaa");
  EXPECT_EQ(got[0].pod, "train-0");
  EXPECT_EQ(got[0].namespace_, "ml");
  EXPECT_EQ(got[0].container, "worker");
  EXPECT_EQ(got[1].uuid, "PPU-bbb");
  EXPECT_EQ(got[2].uuid, "PPU-ccc");  // two shares of one device, one row
  EXPECT_EQ(got[2].resource, "example.com/ppu-share");
}

TEST(MatchPodsTest, NothingWithoutKnownDevices) {
  EXPECT_TRUE(MatchPods(Pods(), {}, Rule()).pods.empty());
}

// A pod holding DRA claims as the kubelet (1.32+, v1) reports them.
void AddClaim(v1::ListPodResourcesResponse* r, const char* pod, const char* claim,
              const char* driver, const char* pool, const char* device,
              std::vector<std::string> cdi = {}) {
  auto* p = r->add_pod_resources();
  p->set_name(pod);
  p->set_namespace_("ml");
  auto* c = p->add_containers();
  c->set_name("trainer");
  auto* dr = c->add_dynamic_resources();
  dr->set_claim_name(claim);
  dr->set_claim_namespace("ml");
  auto* res = dr->add_claim_resources();
  res->set_driver_name(driver);
  res->set_pool_name(pool);
  res->set_device_name(device);
  for (auto& n : cdi) res->add_cdi_devices()->set_name(n);
}

TEST(MatchPodsTest, DraClaimsByDefaultRulesBesideDevicePlugin) {
  v1::ListPodResourcesResponse r = Pods();
  AddClaim(&r, "dra-0", "gpu-claim", "xpu.lingjun.com", "node-a", "xpu-3");  // template
  AddClaim(&r, "dra-1", "by-uuid", "xpu.lingjun.com", "node-a", "PPU-bbb");  // {uuid}
  AddClaim(&r, "dra-2", "by-cdi", "xpu.lingjun.com", "node-a", "",           // CDI only
           {"lingjun.com/xpu=xpu-0"});
  AddClaim(&r, "dra-3", "other", "xpu.lingjun.com", "node-a", "xpu-9");  // not ours
  AddClaim(&r, "dra-4", "empty", "xpu.lingjun.com", "", "");             // fields absent
  const auto devices = Devices({"PPU-aaa", "PPU-bbb", "PPU-ccc", "PPU-ddd"});
  PodMatch m = MatchPods(r, devices, Rule());
  EXPECT_EQ(m.dra_unmatched, 2u);
  std::map<std::string, store::PodAssignment> by_pod;
  for (const auto& a : m.pods)
    if (!a.claim.empty()) by_pod[a.pod] = a;
  ASSERT_EQ(by_pod.size(), 3u);
  EXPECT_EQ(by_pod["dra-0"].uuid, "PPU-ddd");
  EXPECT_EQ(by_pod["dra-0"].claim, "gpu-claim");
  EXPECT_EQ(by_pod["dra-0"].driver, "xpu.lingjun.com");
  EXPECT_EQ(by_pod["dra-0"].pool, "node-a");
  EXPECT_EQ(by_pod["dra-0"].device, "xpu-3");
  EXPECT_EQ(by_pod["dra-0"].namespace_, "ml");
  EXPECT_EQ(by_pod["dra-0"].container, "trainer");
  EXPECT_TRUE(by_pod["dra-0"].resource.empty());
  EXPECT_EQ(by_pod["dra-1"].uuid, "PPU-bbb");
  EXPECT_EQ(by_pod["dra-2"].uuid, "PPU-aaa");
  EXPECT_EQ(m.pods.size(), 6u);  // the three device plugin rows are still there
}

TEST(MatchPodsTest, DraDriverFilterAndCustomNames) {
  v1::ListPodResourcesResponse r;
  AddClaim(&r, "a", "c1", "gpu.example.com", "p", "gpu-0000:11:00.0");
  AddClaim(&r, "b", "c2", "nic.example.com", "p", "gpu-0000:10:00.0");  // other driver
  const auto devices = Devices({"U0", "U1"});
  PodMatch m = MatchPods(r, devices, Rule({"gpu\\..*"}, {"gpu-{bus_id}"}));
  ASSERT_EQ(m.pods.size(), 1u);
  EXPECT_EQ(m.pods[0].uuid, "U1");
  EXPECT_EQ(m.dra_unmatched, 0u);  // another driver's device is not ours to count
  // The same answer with the default names matches nothing and counts it.
  EXPECT_EQ(MatchPods(r, devices, Rule({"gpu\\..*"})).dra_unmatched, 1u);
}

TEST(DraRuleTest, RejectsBadRules) {
  DraRule r;
  EXPECT_FALSE(DraRule::Make({"("}, {"{uuid}"}, &r).ok());
  EXPECT_FALSE(DraRule::Make({}, {"xpu-{serial}"}, &r).ok());
  EXPECT_FALSE(DraRule::Make({}, {"xpu-0"}, &r).ok());
  EXPECT_TRUE(DraRule::Make({}, {"{minor}", "{uuid}", "{bus_id}"}, &r).ok());
}

TEST(MatchPodsTest, HostileNamesBecomeValidBoundedLabels) {
  v1::ListPodResourcesResponse r;
  AddClaim(&r, "p", "c\xff\xfe", std::string(1000, 'd').c_str(), "pool", "xpu-0");
  PodMatch m = MatchPods(r, Devices({"U0"}), Rule());
  ASSERT_EQ(m.pods.size(), 1u);
  EXPECT_LE(m.pods[0].driver.size(), kMaxLabelBytes);
  EXPECT_EQ(m.pods[0].claim.find('\xff'), std::string::npos);
}

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
  PodMapperOptions options;
  options.socket = sock;
  DraRule dra;
  ASSERT_TRUE(DraRule::Make(options.dra_drivers, options.dra_device_names, &dra).ok());
  PodMapper mapper(options, dra, &registry, &metrics);
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
