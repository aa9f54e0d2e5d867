// PodWatcher's own threads against the stand-in API server
// (tests/support/fake_apiserver.py over HTTPS, run as a child process), so
// that the sanitizer builds see the watch and node threads publishing while
// this thread reads the registry, and Stop() ending a live watch. The
// protocol cases (410, breaks, 401/403) are in tests/e2e/kubernetes_test.sh.
#include <gtest/gtest.h>
#include <prometheus/text_serializer.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <chrono>
#include <fstream>

#include "kubernetes/pod_watcher.h"
#include "support/test_util.h"

extern char** environ;

namespace xpu::kubernetes {
namespace {

using xpu::testing::RunCommand;
using xpu::testing::WaitFor;

class FakeApiServer {
 public:
  explicit FakeApiServer(const xpu::testing::TempDir& dir) : dir_(dir) {
    const std::string d = dir.path();
    RunCommand("cd " + d +
               " && openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 2 "
               "-subj /CN=ca 2>/dev/null && openssl req -newkey rsa:2048 -nodes -keyout srv.key "
               "-out srv.csr -subj /CN=kubernetes 2>/dev/null && printf "
               "'subjectAltName=IP:127.0.0.1\\n' >srv.ext && openssl x509 -req -in srv.csr -CA "
               "ca.crt -CAkey ca.key -CAcreateserial -out srv.crt -days 2 -extfile srv.ext "
               "2>/dev/null");
    std::ofstream(dir.File("token")) << "tok\n";
    const std::string script = std::string(XPU_SOURCE_DIR) + "/tests/support/fake_apiserver.py";
    const std::string cmd = "exec python3 " + script + " " + d + "/srv.crt " + d +
                            "/srv.key tok >" + d + "/api.out 2>" + d + "/api.err";
    const char* argv[] = {"/bin/sh", "-c", cmd.c_str(), nullptr};
    if (posix_spawn(&pid_, "/bin/sh", nullptr, nullptr, const_cast<char**>(argv), environ) != 0)
      pid_ = -1;
    WaitFor([&] { return xpu::testing::ReadFile(dir.File("api.out")).find("port=") == 0; },
            std::chrono::seconds(10));
    const std::string out = xpu::testing::ReadFile(dir.File("api.out"));
    if (out.rfind("port=", 0) == 0) url_ = "https://127.0.0.1:" + out.substr(5, out.find('\n') - 5);
  }
  ~FakeApiServer() {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      waitpid(pid_, nullptr, 0);
    }
  }
  const std::string& url() const { return url_; }
  void Control(const std::string& method, const std::string& path, const std::string& body) {
    std::ofstream(dir_.File("body.json")) << body;
    RunCommand("curl -sfk -X" + method + " " + url_ + "/control/" + path + " --data-binary @" +
               dir_.File("body.json"));
  }

 private:
  const xpu::testing::TempDir& dir_;
  pid_t pid_ = -1;
  std::string url_;
};

std::string Page(const store::DeviceRegistry& reg) {
  return prometheus::TextSerializer().Serialize(reg.Collect());
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

}  // namespace
}  // namespace xpu::kubernetes
