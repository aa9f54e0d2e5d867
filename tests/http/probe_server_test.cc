// The probe listener on its own (ProbeServer), over real loopback sockets:
// what it answers, how each connection ends and is counted, and that no
// connection it holds keeps a probe out.
#include "http/probe_server.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "support/test_util.h"

namespace xpu::http {
namespace {

using xpu::testing::ConnectLoopback;

// Sends `bytes`, optionally half-closes, and reads until the server closes
// (or 3 s pass).
// What comes on `fd` until the server closes it (or 3 s pass).
std::string ReadUntilClosed(int fd) {
  std::string got;
  char buf[4096];
  pollfd p{fd, POLLIN, 0};
  while (::poll(&p, 1, 3000) > 0) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    got.append(buf, static_cast<size_t>(n));
  }
  return got;
}

std::string Exchange(int port, const std::string& bytes, bool half_close) {
  const int fd = ConnectLoopback(port);
  if (fd < 0) return "connect failed";
  (void)::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
  if (half_close) ::shutdown(fd, SHUT_WR);
  std::string got = ReadUntilClosed(fd);
  ::close(fd);
  return got;
}

class ProbeServerTest : public ::testing::Test {
 protected:
  void Start(size_t max_connections = 256,
             std::chrono::milliseconds deadline = std::chrono::milliseconds(1000)) {
    ProbeServer::Options o;
    o.listen_addresses = {"127.0.0.1:0"};
    o.max_connections = max_connections;
    o.deadline = deadline;
    std::map<std::string, ProbeServer::Route> routes{
        {"/-/healthy",
         [] {
           return ProbeServer::Answer{200, "Healthy\n"};
         }},
        {"/-/ready",
         [] {
           return ProbeServer::Answer{503, "Not ready\n"};
         }},
        // Holds the loop thread until the test lets it go: the loop late
        // for its own reasons (descheduled on a loaded node).
        {"/-/held", [this] {
           entered_.set_value();
           let_go_.wait();
           return ProbeServer::Answer{200, "Late\n"};
         }}};
    server_ = std::make_unique<ProbeServer>(
        o, std::move(routes),
        [] {
          return std::vector<std::pair<std::string, std::string>>{{"X-Frame-Options", "deny"}};
        },
        nullptr);
    ASSERT_TRUE(server_->Start().ok());
    port_ = server_->ports().at(0);
  }
  void TearDown() override {
    LetGo();
    if (server_) server_->Stop();
  }
  void LetGo() {
    if (!let_go_set_.exchange(true)) let_go_promise_.set_value();
  }
  std::promise<void> entered_;
  std::promise<void> let_go_promise_;
  std::shared_future<void> let_go_ = let_go_promise_.get_future().share();
  std::atomic<bool> let_go_set_{false};
  std::unique_ptr<ProbeServer> server_;
  int port_ = 0;
};

TEST_F(ProbeServerTest, AnswersTheProbesAndNothingElse) {
  Start();
  const std::string ok = Exchange(port_, "GET /-/healthy HTTP/1.1\r\nHost: x\r\n\r\n", false);
  EXPECT_EQ(ok.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << ok;
  EXPECT_NE(ok.find("Connection: close\r\n"), std::string::npos) << ok;
  EXPECT_NE(ok.find("X-Frame-Options: deny\r\n"), std::string::npos) << ok;
  EXPECT_NE(ok.find("\r\n\r\nHealthy\n"), std::string::npos) << ok;
  const std::string ready = Exchange(port_, "GET /-/ready?x=1 HTTP/1.0\r\n\r\n", false);
  EXPECT_EQ(ready.rfind("HTTP/1.1 503 ", 0), 0u) << ready;
  const std::string head = Exchange(port_, "HEAD /-/healthy HTTP/1.1\r\n\r\n", false);
  EXPECT_EQ(head.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << head;
  EXPECT_EQ(head.find("Healthy"), std::string::npos) << head;
  EXPECT_EQ(Exchange(port_, "GET /metrics HTTP/1.1\r\n\r\n", false).rfind("HTTP/1.1 404 ", 0), 0u);
  const std::string post = Exchange(port_, "POST /-/healthy HTTP/1.1\r\n\r\n", false);
  EXPECT_EQ(post.rfind("HTTP/1.1 405 ", 0), 0u) << post;
  EXPECT_NE(post.find("Allow: GET, HEAD\r\n"), std::string::npos) << post;
  EXPECT_EQ(Exchange(port_, "NOT HTTP\r\n\r\n", false).rfind("HTTP/1.1 400 ", 0), 0u);
  EXPECT_EQ(Exchange(port_, std::string(5000, 'a'), false).rfind("HTTP/1.1 431 ", 0), 0u);
}

// A client that sends its request and half-closes at once (FIN with the
// head) still gets its answer.
TEST_F(ProbeServerTest, AnswersAClientThatHalfClosesWithItsRequest) {
  Start();
  const std::string got = Exchange(port_, "GET /-/healthy HTTP/1.1\r\n\r\n", true);
  EXPECT_EQ(got.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << got;
}

// Pipelined requests: one answer, then the connection ends.
TEST_F(ProbeServerTest, AnswersOneRequestPerConnection) {
  Start();
  std::string three;
  for (int i = 0; i < 3; ++i) three += "GET /-/healthy HTTP/1.1\r\nHost: x\r\n\r\n";
  const std::string got = Exchange(port_, three, false);
  EXPECT_EQ(got.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << got;
  EXPECT_EQ(got.find("HTTP/1.1", 1), std::string::npos) << got;
}

// Each connection is counted once, by how it ended.
TEST_F(ProbeServerTest, CountsEachConnectionOnceByHowItEnded) {
  Start();
  (void)Exchange(port_, "GET /-/healthy HTTP/1.1\r\n\r\n", false);  // answered
  (void)Exchange(port_, "BAD\r\n\r\n", false);                      // bad
  ::close(ConnectLoopback(port_));                                  // closed, nothing sent
  const int idle = ConnectLoopback(port_);                          // deadline (1 s)
  ASSERT_TRUE(xpu::testing::WaitFor(
      [&] {
        const auto c = server_->counts();
        return c.answered + c.bad + c.closed + c.deadline >= 4;
      },
      std::chrono::seconds(10)));
  ::close(idle);
  const auto c = server_->counts();
  EXPECT_EQ(c.answered, 1u);
  EXPECT_EQ(c.bad, 1u);
  EXPECT_EQ(c.closed, 1u);
  EXPECT_EQ(c.deadline, 1u);
  EXPECT_EQ(c.evicted, 0u);
}

// A full table of idle connections: the oldest goes for each new one, so a
// probe is answered at once.
TEST_F(ProbeServerTest, IdleConnectionsFillingTheTableDoNotKeepAProbeOut) {
  // A long deadline: none passes while the table fills, however slow the
  // machine.
  Start(/*max_connections=*/8, std::chrono::seconds(30));
  std::vector<int> idle;
  for (int i = 0; i < 8; ++i) idle.push_back(ConnectLoopback(port_));
  const std::string got = Exchange(port_, "GET /-/healthy HTTP/1.1\r\n\r\n", false);
  EXPECT_EQ(got.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << got;
  // The table was full: the probe got in by evicting the oldest, not by
  // waiting out the idle ones' deadline (none has passed yet).
  const auto c = server_->counts();
  EXPECT_GE(c.evicted, 1u);
  EXPECT_EQ(c.deadline, 0u);
  for (int fd : idle) ::close(fd);
}

// A whole head that came while the loop thread was away past the
// connection's deadline (here held in another probe's handler; on a loaded
// node, descheduled between its wait and its expiry pass) is answered: the
// server late for its own reasons does not blame the client. Before, the
// expiry pass closed it unread (seen once in the http_request fuzzer, run
// niced beside the TSan suite).
TEST_F(ProbeServerTest, AHeadThatCameWhileTheLoopWasAwayIsAnswered) {
  // Long enough that the early connection is still open when its head is
  // sent, however slowly the loop takes the holder's.
  const auto deadline = std::chrono::milliseconds(1000);
  Start(256, deadline);
  const int early = ConnectLoopback(port_);  // accepted before the loop is held
  ASSERT_GE(early, 0);
  const auto connected = std::chrono::steady_clock::now();
  const int holder = ConnectLoopback(port_);
  ASSERT_GE(holder, 0);
  const std::string held = "GET /-/held HTTP/1.1\r\n\r\n";
  ASSERT_EQ(::send(holder, held.data(), held.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(held.size()));
  ASSERT_EQ(entered_.get_future().wait_for(std::chrono::seconds(10)), std::future_status::ready);
  // The loop is held; the early connection's head comes, whole, in time.
  ASSERT_EQ(server_->counts().deadline, 0u) << "the early connection was closed already";
  const std::string get = "GET /-/healthy HTTP/1.1\r\n\r\n";
  ASSERT_EQ(::send(early, get.data(), get.size(), MSG_NOSIGNAL), static_cast<ssize_t>(get.size()));
  // The loop comes back only once the deadline has passed: the time under
  // test, not a wait for a condition.
  std::this_thread::sleep_until(connected + deadline + std::chrono::milliseconds(100));
  LetGo();
  const std::string got = ReadUntilClosed(early);
  ::close(early);
  ::close(holder);
  EXPECT_EQ(got.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << "'" << got << "'";
  EXPECT_EQ(server_->counts().deadline, 0u);
}

TEST(ProbeListenAddressTest, SplitsPrometheusStyleAddresses) {
  std::string host;
  int port = 0;
  ASSERT_TRUE(SplitListenAddress(":9446", &host, &port).ok());
  EXPECT_EQ(host, "");
  EXPECT_EQ(port, 9446);
  ASSERT_TRUE(SplitListenAddress("[::1]:1", &host, &port).ok());
  EXPECT_EQ(host, "::1");
  ASSERT_TRUE(SplitListenAddress("127.0.0.1:0", &host, &port).ok());
  EXPECT_EQ(host, "127.0.0.1");
  EXPECT_FALSE(SplitListenAddress("9446", &host, &port).ok());
  EXPECT_FALSE(SplitListenAddress("::1:9446", &host, &port).ok());
  EXPECT_FALSE(SplitListenAddress("x:99999", &host, &port).ok());
  EXPECT_FALSE(SplitListenAddress("x:", &host, &port).ok());
}

}  // namespace
}  // namespace xpu::http
