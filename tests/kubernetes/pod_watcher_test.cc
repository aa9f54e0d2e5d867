// The API-server watch's pure parts: pods to records (label allowlist, HAMi
// grants joined to containers), node registers, watch lines, and when the
// in-cluster API server is used. The list/watch protocol itself runs against
// a stand-in API server in tests/e2e/kubernetes_test.sh.
#include "kubernetes/pod_watcher.h"

#include <gtest/gtest.h>
#include <prometheus/text_serializer.h>

#include <cstdlib>
#include <fstream>

#include "store/device_registry.h"
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
  Json pod = Pod({}, Json::object());
  for (int i = 0; i < 200; ++i)
    pod["status"]["containerStatuses"].push_back(
        {{"name", "c" + std::to_string(i)},
         {"containerID", "containerd://" + std::string(999, 'a')}});
  ASSERT_TRUE(ParsePod(pod, Filter({}), &r).ok());
  EXPECT_EQ(r.containers.size(), kMaxContainersPerPod);
  EXPECT_LE(r.containers[0].first.size(), kMaxLabelValueBytes);
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

// A static pod's mirror in the API server has a uid of its own, but the
// kubelet runs the pod, and names its cgroup, by the uid it made from the
// manifest, which the mirror carries as kubernetes.io/config.mirror: the
// record names that one, so that its processes' memory is named too.
TEST(ParsePodTest, AMirrorPodIsKnownByItsStaticPodsUid) {
  const std::string hash = "6f1c2e9a7b1d4c2e9f3a0b1c2d3e4f5a";
  const LabelFilter f = Filter({});
  PodRecord r;
  ASSERT_TRUE(ParsePod(nlohmann::json::parse(R"({"metadata":{"namespace":"kube-system",
      "name":"infer-node-a","uid":"1f6c2f9e-7a1b-4c2d-9e3f-0a1b2c3d4e5f",
      "annotations":{"kubernetes.io/config.mirror":")" +
                                             hash + R"(",
        "kubernetes.io/config.hash":")" + hash +
                                             R"("}},
    "status":{"containerStatuses":[{"name":"main","containerID":"containerd://abc1"}]}})"),
                       f, &r)
                  .ok());
  EXPECT_EQ(r.uid, hash);
  // Through the kept fields as from the whole document.
  PodRecord kept;
  ASSERT_TRUE(ParsePod(ParseKept(R"({"metadata":{"namespace":"kube-system","name":"infer-node-a",
      "uid":"u","annotations":{"kubernetes.io/config.mirror":")" +
                                 hash + R"("}}})"),
                       f, &kept)
                  .ok());
  EXPECT_EQ(kept.uid, hash);
  // An ordinary pod keeps its own; an empty or non-string mirror value is none.
  for (const char* annotations :
       {R"({})", R"({"kubernetes.io/config.mirror":""})", R"({"kubernetes.io/config.mirror":7})"}) {
    PodRecord p;
    ASSERT_TRUE(ParsePod(nlohmann::json::parse(
                             std::string(R"({"metadata":{"namespace":"ml","name":"a","uid":"u",)"
                                         R"("annotations":)") +
                             annotations + "}}"),
                         f, &p)
                    .ok());
    EXPECT_EQ(p.uid, "u") << annotations;
  }
}

// A real pod is mostly fields the watcher never reads (managedFields, status,
// volumes, env): they are not built into the DOM, and what is read is the
// same as from the whole document.
// An answer nested deeper than any object of the API is refused before it
// is parsed: the parse's callback rebuilt the path at every key, so a list
// body of "{"a":{"a":..." (16 MiB: 3 million levels) took hours, and a
// watch line of one minutes; a value nested as deep as allowed is parsed.
TEST(ParseKeptTest, AnAnswerNestedDeeperThanTheApisObjectsIsRefused) {
  auto nested = [](int depth) {
    std::string s;
    for (int i = 0; i < depth; ++i) s += R"({"metadata":)";
    s += "1";
    s.append(static_cast<size_t>(depth), '}');
    return s;
  };
  EXPECT_FALSE(
      ParseKeeping(nested(kMaxJsonDepth), [](const std::string&) { return true; }).is_discarded());
  EXPECT_TRUE(ParseKeeping(nested(kMaxJsonDepth + 1), [](const std::string&) {
                return true;
              }).is_discarded());
  EXPECT_TRUE(ParseKept(nested(kMaxJsonDepth + 1)).is_discarded());
  // Brackets inside strings are no nesting.
  EXPECT_FALSE(
      ParseKept(R"({"metadata":{"name":")" + std::string(1000, '[') + R"("}})").is_discarded());
  // The size a list may have, all nesting: refused (before, hours).
  EXPECT_TRUE(ParseKept(nested(static_cast<int>(kMaxListBytes / 13))).is_discarded());
  EXPECT_EQ(ParseEvent(R"({"type":"ADDED","object":)" + nested(100) + "}").type,
            WatchEvent::Type::kInvalid);
}

TEST(ParseKeptTest, KeepsOnlyWhatThePodParserReads) {
  const std::string pod = R"({"metadata":{"namespace":"ml","name":"train-0","uid":"u",
      "labels":{"team":"vision","a.b/c":"d"},
      "annotations":{"hami.io/vgpu-devices-allocated":"U1,PPU,1024,25:;"},
      "managedFields":[{"manager":"kubelet","fieldsV1":{"f:status":{"f:conditions":{}}}}]},
    "spec":{"nodeName":"node-a","volumes":[{"name":"v","hostPath":{"path":"/x"}}],
      "containers":[{"name":"main","image":"i","env":[{"name":"E","value":"1"}]}]},
    "status":{"phase":"Running","conditions":[{"type":"Ready"}],
      "containerStatuses":[{"name":"main","containerID":"containerd://abc1","image":"i",
        "imageID":"registry.example.com/train@sha256:0123456789abcdef0123456789abcdef",
        "ready":true,"restartCount":0,"started":true,"lastState":{},
        "state":{"running":{"startedAt":"2026-12-04T00:00:00Z"}}},{"name":"waiting"}],
      "initContainerStatuses":[{"name":"init","containerID":"cri-o://abc0","ready":false}]}})";
  const std::string list = R"({"kind":"PodList","metadata":{"resourceVersion":"7","continue":"c"},
    "items":[)" + pod + "," +
                           pod + "]}";
  const nlohmann::json kept = ParseKept(list);
  ASSERT_TRUE(kept.is_object());
  EXPECT_EQ(kept["metadata"]["resourceVersion"], "7");
  EXPECT_EQ(kept["metadata"]["continue"], "c");
  ASSERT_EQ(kept["items"].size(), 2u);
  const nlohmann::json& item = kept["items"][0];
  EXPECT_FALSE(item["metadata"].contains("managedFields"));
  EXPECT_EQ(item["metadata"]["uid"], "u");  // what a process's cgroup names
  EXPECT_FALSE(item["status"]["containerStatuses"][0].contains("state"));
  EXPECT_FALSE(item["status"]["containerStatuses"][0].contains("image"));
  EXPECT_EQ(item["status"]["phase"], "Running");  // read: a finished pod's grants are over
  EXPECT_FALSE(item["status"].contains("conditions"));
  EXPECT_FALSE(item["spec"].contains("volumes"));
  EXPECT_FALSE(item["spec"]["containers"][0].contains("env"));
  EXPECT_EQ(item["spec"]["containers"][0]["name"], "main");
  EXPECT_EQ(item["metadata"]["labels"]["a.b/c"], "d");
  PodRecord from_kept, from_whole;
  const LabelFilter f = Filter({".*"});
  ASSERT_TRUE(ParsePod(item, f, &from_kept).ok());
  ASSERT_TRUE(ParsePod(nlohmann::json::parse(pod), f, &from_whole).ok());
  EXPECT_EQ(from_kept.labels, from_whole.labels);
  EXPECT_EQ(from_kept.uid, "u");
  // Each container with its runtime id, the scheme cut; one not started has none.
  const std::vector<std::pair<std::string, std::string>> ids = {{"abc1", "main"}, {"abc0", "init"}};
  EXPECT_EQ(from_kept.containers, ids);
  EXPECT_EQ(from_whole.containers, ids);
  ASSERT_EQ(from_kept.quotas.size(), 1u);
  EXPECT_EQ(from_kept.quotas[0].container, "main");
  EXPECT_LT(kept.dump().size() * 2, list.size());
  EXPECT_TRUE(ParseKept("{").is_discarded());
  // A finished pod, through a watch event: its grants are not counted.
  std::string done = pod;
  done.replace(done.find("Running"), 7, "Succeeded");
  const WatchEvent e = ParseEvent(R"({"type":"MODIFIED","object":)" + done + "}");
  PodRecord finished;
  ASSERT_TRUE(ParsePod(e.object, f, &finished).ok());
  EXPECT_TRUE(finished.quotas.empty());
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
  reg.SetPodMetadata({{"ml", "train-0", {{"label_team", "vision"}}, "", {}}});
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

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>

#include "kubernetes/api_client.h"

namespace xpu::kubernetes {
namespace {

// A plain-HTTP listener on loopback that records what one client sends.
class PlainListener {
 public:
  PlainListener() {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(::listen(fd_, 4), 0);
    socklen_t n = sizeof a;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &n);
    port_ = ntohs(a.sin_port);
  }
  ~PlainListener() { ::close(fd_); }
  int port() const { return port_; }
  // Answers one connection, if one comes within `wait`, with 200 "{}";
  // returns what it sent (empty when nobody connected).
  std::string ServeOne(int wait_ms) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, wait_ms) != 1) return "";
    const int c = ::accept(fd_, nullptr, nullptr);
    std::string got;
    char buf[4096];
    while (got.find("\r\n\r\n") == std::string::npos) {
      const ssize_t r = ::read(c, buf, sizeof buf);
      if (r <= 0) break;
      got.append(buf, static_cast<size_t>(r));
    }
    const std::string ok = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}";
    (void)!::write(c, ok.data(), ok.size());
    ::close(c);
    return got;
  }

 private:
  int fd_ = -1;
  int port_ = 0;
};

TEST(ApiClientTest, TheTokenNeverGoesOverPlainHttpUnlessAskedFor) {
  xpu::testing::TempDir dir;
  std::ofstream(dir.File("token")) << "s3cret\n";
  PlainListener server;
  const std::string url = "http://127.0.0.1:" + std::to_string(server.port());
  const auto never = [] { return false; };
  {
    const ApiClient client(url, dir.File("token"), "");
    std::string sent;
    std::thread t([&] { sent = server.ServeOne(500); });
    const HttpResult r = client.Get("/api/v1/pods", 1 << 20, std::chrono::seconds(2), never);
    t.join();
    EXPECT_FALSE(r.ok());
    EXPECT_NE(r.error.find("not https://"), std::string::npos) << r.error;
    EXPECT_EQ(sent, "");  // not even a connection
  }
  {
    // Asked for by name (a local proxy): sent, token and all.
    const ApiClient client(url, dir.File("token"), "", /*insecure_http=*/true);
    std::string sent;
    std::thread t([&] { sent = server.ServeOne(2000); });
    const HttpResult r = client.Get("/api/v1/pods", 1 << 20, std::chrono::seconds(2), never);
    t.join();
    EXPECT_TRUE(r.ok()) << r.error;
    EXPECT_NE(sent.find("Authorization: Bearer s3cret"), std::string::npos) << sent;
  }
}

}  // namespace
}  // namespace xpu::kubernetes
