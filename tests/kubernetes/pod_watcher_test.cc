// The API-server watch's pure parts: pods to records (label allowlist, HAMi
// grants joined to containers), node registers, watch lines, and when the
// in-cluster API server is used. The list/watch protocol itself runs against
// a stand-in API server in tests/e2e/kubernetes_test.sh.
#include "kubernetes/pod_watcher.h"

#include <gtest/gtest.h>
#include <prometheus/text_serializer.h>

#include <cstdlib>
#include <fstream>

#include "support/test_util.h"

namespace xpu::kubernetes {
namespace {

using Json = nlohmann::json;

LabelFilter Filter(std::vector<std::string> patterns) {
  LabelFilter f;
  EXPECT_TRUE(LabelFilter::Make(patterns, &f).ok());
  return f;
}

Json Pod(Json labels, Json annotations, std::string phase = "Running") {
  return Json{
      {"metadata",
       {{"namespace", "ml"},
        {"name", "train-0"},
        {"resourceVersion", "7"},
        {"labels", labels},
        {"annotations", annotations}}},
      {"spec", {{"nodeName", "node-a"}, {"containers", {{{"name", "main"}}, {{"name", "side"}}}}}},
      {"status", {{"phase", phase}}}};
}

TEST(LabelFilterTest, AllowlistAndExportNames) {
  LabelFilter f = Filter({"team", "app\\.kubernetes\\.io/.*"});
  EXPECT_TRUE(f.Allows("team"));
  EXPECT_FALSE(f.Allows("teams"));  // the whole name must match
  EXPECT_TRUE(f.Allows("app.kubernetes.io/name"));
  EXPECT_EQ(LabelFilter::ExportName("app.kubernetes.io/name"), "label_app_kubernetes_io_name");
  LabelFilter bad;
  EXPECT_FALSE(LabelFilter::Make({"("}, &bad).ok());
}

TEST(ParsePodTest, AllowlistedLabelsAndGrantsByContainer) {
  PodRecord r;
  ASSERT_TRUE(ParsePod(Pod({{"team", "vision"}, {"secret", "x"}, {"app.kubernetes.io/name", "t"}},
                           {{"hami.io/vgpu-devices-allocated", "U1,PPU,1024,25:;U2,PPU,0,50:;"}}),
                       Filter({"team", "app\\..*"}), &r)
                  .ok());
  EXPECT_EQ(r.namespace_, "ml");
  EXPECT_EQ(r.name, "train-0");
  using L = std::vector<std::pair<std::string, std::string>>;
  EXPECT_EQ(r.labels, (L{{"label_app_kubernetes_io_name", "t"}, {"label_team", "vision"}}));
  ASSERT_EQ(r.quotas.size(), 2u);
  EXPECT_EQ(r.quotas[0].uuid, "U1");
  EXPECT_EQ(r.quotas[0].container, "main");
  EXPECT_EQ(r.quotas[0].memory_bytes, 1024LL * 1024 * 1024);
  EXPECT_DOUBLE_EQ(r.quotas[0].core_ratio, 0.25);
  EXPECT_EQ(r.quotas[1].container, "side");
  EXPECT_EQ(r.quotas[1].memory_bytes, 0);
  EXPECT_FALSE(r.bad_annotation);
}

TEST(ParsePodTest, NoLabelsWithoutAllowlistAndNoGrantsWhenFinished) {
  PodRecord r;
  ASSERT_TRUE(ParsePod(Pod({{"team", "vision"}}, {{"hami.io/vgpu-devices-allocated", "U1,P,1,1:"}},
                           "Succeeded"),
                       Filter({}), &r)
                  .ok());
  EXPECT_TRUE(r.labels.empty());
  EXPECT_TRUE(r.quotas.empty());  // a finished pod holds nothing
}

TEST(ParsePodTest, MalformedDataIsFlaggedNotFatal) {
  PodRecord r;
  // More grant entries than containers, a broken grant, labels of the wrong type.
  ASSERT_TRUE(ParsePod(Pod({{"team", 5}},
                           {{"hami.io/vgpu-devices-allocated", "U,P,1,1:;U,P,1,1:;U,P,1,1:;"}}),
                       Filter({"team"}), &r)
                  .ok());
  EXPECT_TRUE(r.bad_annotation);
  EXPECT_TRUE(r.quotas.empty());
  EXPECT_TRUE(r.labels.empty());
  ASSERT_TRUE(ParsePod(Pod({}, {{"hami.io/vgpu-devices-allocated", 42}}), Filter({}), &r).ok());
  EXPECT_TRUE(r.bad_annotation);
  EXPECT_FALSE(ParsePod(Json{{"metadata", {{"name", "x"}}}}, Filter({}), &r).ok());
  EXPECT_FALSE(ParsePod(Json::array(), Filter({}), &r).ok());
  EXPECT_FALSE(ParsePod(Json{{"metadata", "x"}}, Filter({}), &r).ok());
}

TEST(ParsePodTest, LabelCountAndValueBounded) {
  Json labels = Json::object();
  for (int i = 0; i < 200; ++i) labels["l" + std::to_string(i)] = std::string(1000, 'v');
  PodRecord r;
  ASSERT_TRUE(ParsePod(Pod(labels, Json::object()), Filter({".*"}), &r).ok());
  EXPECT_EQ(r.labels.size(), kMaxLabelsPerPod);
  EXPECT_LE(r.labels[0].second.size(), kMaxLabelValueBytes);
}

TEST(ParseNodeSharesTest, RegistersOfEveryTypeAndBadOnesCounted) {
  Json node = {{"metadata",
                {{"name", "node-a"},
                 {"annotations",
                  {{"hami.io/node-nvidia-register", "U1,10,32768,100,T,0,true:"},
                   {"hami.io/node-mlu-register", "garbage"},
                   {"hami.io/node-handshake-nvidia", "Reported 2026"}}}}}};
  int bad = 0;
  auto shares = ParseNodeShares(node, &bad);
  EXPECT_EQ(bad, 1);
  ASSERT_EQ(shares.size(), 1u);
  EXPECT_EQ(shares[0].uuid, "U1");
  EXPECT_EQ(shares[0].split_count, 10);
  EXPECT_EQ(shares[0].memory_bytes, 32768LL * 1024 * 1024);
  EXPECT_DOUBLE_EQ(shares[0].core_ratio, 1.0);
  EXPECT_TRUE(shares[0].healthy);
  EXPECT_TRUE(ParseNodeShares(Json::array(), &bad).empty());
}

TEST(ParseEventTest, TypesVersionsAndGone) {
  WatchEvent e = ParseEvent(R"({"type":"ADDED","object":{"metadata":{"resourceVersion":"12"}}})");
  EXPECT_EQ(e.type, WatchEvent::Type::kAdded);
  EXPECT_EQ(e.resource_version, "12");
  EXPECT_EQ(
      ParseEvent(R"({"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"13"}}})").type,
      WatchEvent::Type::kBookmark);
  e = ParseEvent(R"({"type":"ERROR","object":{"kind":"Status","code":410,"reason":"Expired"}})");
  EXPECT_EQ(e.type, WatchEvent::Type::kError);
  EXPECT_EQ(e.error_code, 410);
  for (const char* bad :
       {"", "{", "[]", R"({"type":"ADDED"})", R"({"type":"EXPLODED","object":{}})",
        R"({"type":7,"object":{}})", R"({"type":"ADDED","object":"x"})"})
    EXPECT_EQ(ParseEvent(bad).type, WatchEvent::Type::kInvalid) << bad;
}

TEST(ResolveApiServerTest, ExplicitAutoAndOff) {
  KubernetesOptions o;
  std::string why;
  o.api_server = "";
  EXPECT_EQ(ResolveApiServer(o, &why), "");
  o.api_server = "https://10.0.0.1:6443";
  EXPECT_EQ(ResolveApiServer(o, &why), "https://10.0.0.1:6443");
  o.api_server = "auto";
  unsetenv("KUBERNETES_SERVICE_HOST");
  EXPECT_EQ(ResolveApiServer(o, &why), "");
  EXPECT_NE(why.find("not in a cluster"), std::string::npos);
  xpu::testing::TempDir dir;
  o.token_file = dir.File("token");
  setenv("KUBERNETES_SERVICE_HOST", "fd00::1", 1);
  setenv("KUBERNETES_SERVICE_PORT", "443", 1);
  EXPECT_EQ(ResolveApiServer(o, &why), "");  // no token
  EXPECT_NE(why.find("token"), std::string::npos);
  std::ofstream(o.token_file) << "t";
  EXPECT_EQ(ResolveApiServer(o, &why), "");  // no node name
  EXPECT_NE(why.find("node name"), std::string::npos);
  o.node_name = "node-a";
  EXPECT_EQ(ResolveApiServer(o, &why), "https://[fd00::1]:443");
  unsetenv("KUBERNETES_SERVICE_HOST");
  unsetenv("KUBERNETES_SERVICE_PORT");
}

// The registry joins the API server's view into its series: labels on
// pod_info, limits and shares with the device's minor.
TEST(RegistryKubernetesTest, LabelsLimitsAndShares) {
  store::DeviceRegistry reg;
  store::DeviceInfo d;
  d.minor = 4;
  d.uuid = "U1";
  reg.SetXdmDevices({d});
  store::PodAssignment a;
  a.uuid = "U1";
  a.namespace_ = "ml";
  a.pod = "train-0";
  a.container = "main";
  a.resource = "lingjun.com/xpu";
  reg.SetPodAssignments({a});
  reg.SetPodMetadata({{"ml", "train-0", {{"label_team", "vision"}}}});
  reg.SetContainerQuotas({{"U1", "ml", "train-0", "main", 1 << 30, 0.25}});
  reg.SetDeviceShares({{"U1", "T", 10, int64_t{1} << 35, 1.0, true}});
  const std::string page = prometheus::TextSerializer().Serialize(reg.Collect());
  EXPECT_NE(
      page.find(
          R"(xpu_device_pod_info{minor="4",uuid="U1",namespace="ml",pod="train-0",container="main",resource="lingjun.com/xpu",label_team="vision"} 1)"),
      std::string::npos)
      << page;
  EXPECT_NE(
      page.find(
          R"(xpu_container_memory_limit_bytes{minor="4",uuid="U1",namespace="ml",pod="train-0",container="main"} 1073741824)"),
      std::string::npos);
  EXPECT_NE(
      page.find(
          R"(xpu_container_core_limit_ratio{minor="4",uuid="U1",namespace="ml",pod="train-0",container="main"} 0.25)"),
      std::string::npos);
  EXPECT_NE(page.find(R"(xpu_device_split_count{minor="4",uuid="U1"} 10)"), std::string::npos);
  EXPECT_NE(page.find(R"(xpu_device_shared_healthy{minor="4",uuid="U1"} 1)"), std::string::npos);
  reg.SetPodMetadata({});
  reg.SetContainerQuotas({});
  const std::string after = prometheus::TextSerializer().Serialize(reg.Collect());
  EXPECT_EQ(after.find("label_team"), std::string::npos);
  EXPECT_EQ(after.find("xpu_container_memory_limit_bytes{"), std::string::npos);
}

}  // namespace
}  // namespace xpu::kubernetes
