// PodWatcher's own threads against the stand-in API server
// (tests/support/fake_apiserver.py over HTTPS, run as a child process:
// FakeApiServer), so
// that the sanitizer builds see the watch and node threads publishing while
// this thread reads the registry, and Stop() ending a live watch. The
// protocol cases (410, breaks, 401/403) are in tests/e2e/kubernetes_test.sh.
#include <gtest/gtest.h>
#include <prometheus/text_serializer.h>

#include <chrono>

#include "kubernetes/fake_apiserver.h"
#include "kubernetes/pod_watcher.h"
#include "store/device_registry.h"
#include "support/test_util.h"

namespace xpu::kubernetes {
namespace {

using xpu::testing::RunCommand;
using xpu::testing::WaitFor;

std::string Page(const store::DeviceRegistry& reg) {
  return prometheus::TextSerializer().Serialize(reg.Collect());
}

// The requests the stand-in was sent whose path starts with `prefix` and
// holds `part`.
int Requests(FakeApiServer& api, const std::string& prefix, const std::string& part) {
  int n = 0;
  for (const nlohmann::json& r : api.Recorded("requests")) {
    const std::string path = r.get<std::string>();
    n += path.rfind(prefix, 0) == 0 && path.find(part) != std::string::npos;
  }
  return n;
}

// Options for node-a against the stand-in in `dir`.
KubernetesOptions Options(const xpu::testing::TempDir& dir) {
  KubernetesOptions o;
  o.node_name = "node-a";
  o.token_file = dir.File("token");
  o.ca_file = dir.File("ca.crt");
  return o;
}

TEST(PodWatcherLiveTest, PublishesWhileScrapedAndStopsALiveWatch) {
  xpu::testing::TempDir dir;
  FakeApiServer api(dir);
  ASSERT_FALSE(api.url().empty()) << xpu::testing::ReadFile(dir.File("api.err"));
  api.Control("POST", "pod",
              R"({"metadata":{"namespace":"ml","name":"p0","labels":{"team":"a"},
                  "annotations":{"hami.io/vgpu-devices-allocated":"U1,PPU,1024,50:;"}},
                  "spec":{"nodeName":"node-a","containers":[{"name":"main"}]}})");
  api.Control("POST", "node",
              R"({"metadata":{"name":"node-a","annotations":{
                  "hami.io/node-ppu-register":"U1,10,65536,100,PPU,0,true:"}}})");
  store::DeviceRegistry reg;
  store::PodAssignment a;
  a.uuid = "U1";
  a.namespace_ = "ml";
  a.pod = "p0";
  a.container = "main";
  reg.SetPodAssignments({a});
  prometheus::Registry metrics;
  KubernetesOptions o;
  o.node_name = "node-a";
  o.token_file = dir.File("token");
  o.ca_file = dir.File("ca.crt");
  o.pod_labels = {"team"};
  o.node_interval = std::chrono::milliseconds(50);
  LabelFilter labels;
  ASSERT_TRUE(LabelFilter::Make(o.pod_labels, &labels).ok());
  PodWatcher watcher(o, labels, api.url(), &reg, &metrics);
  watcher.Start();
  // This thread scrapes while the watcher's two threads publish.
  EXPECT_TRUE(WaitFor([&] {
    const std::string p = Page(reg);
    return p.find("label_team=\"a\"") != std::string::npos &&
           p.find("xpu_container_memory_limit_bytes{") != std::string::npos &&
           p.find("xpu_device_split_count{") != std::string::npos;
  })) << Page(reg);
  api.Control("POST", "pod",
              R"({"metadata":{"namespace":"ml","name":"p0","labels":{"team":"b"}},
                  "spec":{"nodeName":"node-a","containers":[{"name":"main"}]}})");
  EXPECT_TRUE(WaitFor([&] { return Page(reg).find("label_team=\"b\"") != std::string::npos; }));
  EXPECT_EQ(Page(reg).find("xpu_container_memory_limit_bytes{"), std::string::npos);
  const auto t0 = std::chrono::steady_clock::now();
  watcher.Stop();  // a watch is open: Stop must end it
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
}

// A pod list whose every page hands out a `continue` (a server bug, a
// proxy replaying a page) ends after kMaxListPages pages as a failure
// (counted malformed, said), retried after its backoff: it did not ask for
// pages without end, nor hang in its first list.
TEST(PodWatcherLiveTest, AListThatNeverEndsIsCutAtItsPageLimit) {
  xpu::testing::TempDir dir;
  FakeApiServer api(dir);
  ASSERT_FALSE(api.url().empty()) << xpu::testing::ReadFile(dir.File("api.err"));
  api.Control("POST", "fault",
              R"({"prefix":"/api/v1/pods","path_contains":"limit=","method":"GET","status":200,
                  "times":1000000,
                  "body":"{\"kind\":\"PodList\",\"items\":[],\"metadata\":{\"continue\":\"again\",\"resourceVersion\":\"7\"}}"})");
  auto lists = [&] { return Requests(api, "/api/v1/pods", "limit="); };
  store::DeviceRegistry reg;
  prometheus::Registry metrics;
  const KubernetesOptions o = Options(dir);
  LabelFilter labels;
  ASSERT_TRUE(LabelFilter::Make({}, &labels).ok());
  PodWatcher watcher(o, labels, api.url(), &reg, &metrics);
  watcher.Start();
  const auto malformed_lists = [&] {
    for (const auto& f : metrics.Collect())
      if (f.name == "xpu_kubernetes_malformed_total")
        for (const auto& m : f.metric)
          for (const auto& l : m.label)
            if (l.name == "what" && l.value == "list") return m.counter.value;
    return 0.0;
  };
  ASSERT_TRUE(WaitFor([&] { return malformed_lists() >= 1; }, std::chrono::seconds(30)))
      << lists() << " pages asked for";
  EXPECT_GE(lists(), kMaxListPages);
  EXPECT_LE(lists(), 3 * kMaxListPages);  // a list or two more, after the backoff
  watcher.Stop();
}

// A watch that ends within a second of its start, whatever it sent (a
// bookmark and the end; a 410 at once, from a server that keeps no
// version), waits its backoff: it was resumed, or listed again, at once,
// as fast as the server answered. The node's reads (every 50 ms) are the
// clock: over some forty of them, a handful of watches.
TEST(PodWatcherLiveTest, AWatchThatEndsAtOnceWaitsItsBackoffWhateverItSent) {
  const std::string bookmark =
      R"({\"type\":\"BOOKMARK\",\"object\":{\"kind\":\"Pod\",\"metadata\":{\"resourceVersion\":\"9\"}}})";
  const std::string gone = R"({\"type\":\"ERROR\",\"object\":{\"kind\":\"Status\",\"code\":410}})";
  for (const std::string& answer : {bookmark, gone}) {
    xpu::testing::TempDir dir;
    FakeApiServer api(dir);
    ASSERT_FALSE(api.url().empty()) << xpu::testing::ReadFile(dir.File("api.err"));
    api.Control("POST", "node", R"({"metadata":{"name":"node-a"}})");
    api.Control("POST", "fault",
                R"({"prefix":"/api/v1/pods","path_contains":"watch=true","method":"GET",
                    "status":200,"times":1000000,"body":")" +
                    answer + R"(\n"})");
    auto requests = [&](const std::string& prefix, const std::string& part) {
      return Requests(api, prefix, part);
    };
    store::DeviceRegistry reg;
    prometheus::Registry metrics;
    KubernetesOptions o = Options(dir);
    o.node_interval = std::chrono::milliseconds(50);
    LabelFilter labels;
    ASSERT_TRUE(LabelFilter::Make({}, &labels).ok());
    PodWatcher watcher(o, labels, api.url(), &reg, &metrics);
    watcher.Start();
    ASSERT_TRUE(WaitFor([&] { return requests("/api/v1/pods", "watch=true") >= 1; },
                        std::chrono::seconds(20)));
    const int reads = requests("/api/v1/nodes/node-a", "");
    ASSERT_TRUE(WaitFor([&] { return requests("/api/v1/nodes/node-a", "") >= reads + 40; },
                        std::chrono::seconds(30)));
    EXPECT_LE(requests("/api/v1/pods", "watch=true"), 6) << answer;
    watcher.Stop();
  }
}

// An API server that throttles the list (429 with Retry-After, as API
// Priority and Fairness answers) is asked again no sooner than it said, not
// after the backoff's first second. Before, Retry-After was not read.
TEST(PodWatcherLiveTest, AThrottledListIsAskedAgainWhenTheServerSaid) {
  xpu::testing::TempDir dir;
  FakeApiServer api(dir);
  ASSERT_FALSE(api.url().empty()) << xpu::testing::ReadFile(dir.File("api.err"));
  api.Control("POST", "fault",
              R"({"prefix":"/api/v1/pods","path_contains":"limit=","method":"GET","status":429,
                  "times":1,"headers":{"Retry-After":"3"}})");
  store::DeviceRegistry reg;
  prometheus::Registry metrics;
  LabelFilter labels;
  ASSERT_TRUE(LabelFilter::Make({}, &labels).ok());
  PodWatcher watcher(Options(dir), labels, api.url(), &reg, &metrics);
  watcher.Start();
  std::vector<double> lists;  // when each list was asked (the stand-in's clock)
  ASSERT_TRUE(WaitFor(
      [&] {
        lists.clear();
        for (const nlohmann::json& t : api.Recorded("times"))
          if (t[1].get<std::string>().find("limit=") != std::string::npos)
            lists.push_back(t[0].get<double>());
        return lists.size() >= 2;
      },
      std::chrono::seconds(20)));
  EXPECT_GE(lists[1] - lists[0], 2.9) << "asked again before the server's Retry-After";
  watcher.Stop();
}

}  // namespace
}  // namespace xpu::kubernetes
