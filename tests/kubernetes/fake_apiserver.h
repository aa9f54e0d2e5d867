#pragma once

// The stand-in API server (tests/support/fake_apiserver.py) over HTTPS with
// a CA, a certificate and a token of its own, run as a child process for
// the tests of the API-server parts.
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "support/test_util.h"

extern char** environ;

namespace xpu::kubernetes {

class FakeApiServer {
 public:
  explicit FakeApiServer(const xpu::testing::TempDir& dir) : dir_(dir) {
    const std::string d = dir.path();
    xpu::testing::RunCommand(
        "cd " + d +
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
    xpu::testing::WaitFor(
        [&] { return xpu::testing::ReadFile(dir.File("api.out")).find("port=") == 0; },
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
    xpu::testing::RunCommand("curl -sfk -X" + method + " " + url_ + "/control/" + path +
                             " --data-binary @" + dir_.File("body.json"));
  }
  // What GET /control/<what> answers (requests, patches, events), parsed.
  nlohmann::json Recorded(const std::string& what) {
    xpu::testing::RunCommand("curl -sfk " + url_ + "/control/" + what + " >" +
                             dir_.File(what + ".json"));
    return nlohmann::json::parse(xpu::testing::ReadFile(dir_.File(what + ".json")), nullptr, false);
  }

 private:
  const xpu::testing::TempDir& dir_;
  pid_t pid_ = -1;
  std::string url_;
};

}  // namespace xpu::kubernetes
