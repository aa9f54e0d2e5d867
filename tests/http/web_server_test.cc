// WebServer over real sockets: routing, bodies refused unread, head deadlines.
#include "http/web_server.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zstd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>

#include "http/buffer_pool.h"
#include "http/gzip.h"
#include "http/headers.h"
#include "http/zstd.h"
#include "support/test_util.h"
#include "tls_test_util.h"

namespace xpu::http {
namespace {

using std::chrono::milliseconds;
using xpu::testing::Gunzip;
using xpu::testing::RawHttp;

class WebServerTest : public ::testing::Test {
 protected:
  void Start(milliseconds head_timeout = milliseconds(5000)) {
    WebOptions o;
    o.listen_addresses = {"127.0.0.1:0"};
    o.max_connections = 4;
    o.head_timeout = head_timeout;
    o.probe_paths = {"/-/healthy"};
    server_ = std::make_unique<WebServer>(o);
    server_->Route("/-/healthy", {"GET"},
                   [](const Request&) { return Response::Text(200, "Healthy\n"); });
    ASSERT_TRUE(server_->Start().ok());
    port_ = server_->ports().at(0);
  }
  void TearDown() override {
    if (server_) server_->Stop();
  }
  std::unique_ptr<WebServer> server_;
  int port_ = 0;
};

TEST_F(WebServerTest, AnnouncedBodyIsRefusedUnreadAndTheConnectionClosed) {
  Start();
  // A gigabyte announced, none sent: civetweb would wait to discard it all.
  const auto t0 = std::chrono::steady_clock::now();
  const std::string resp =
      RawHttp(port_, "GET /-/healthy HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000000\r\n\r\n",
              milliseconds(3000));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, milliseconds(2500)) << "connection not closed";
  EXPECT_EQ(resp.rfind("HTTP/1.1 413", 0), 0u) << resp;
  EXPECT_NE(resp.find("Connection: close"), std::string::npos) << resp;
  const std::string post =
      RawHttp(port_, "POST /-/healthy HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000000\r\n\r\n",
              milliseconds(3000));
  EXPECT_EQ(post.rfind("HTTP/1.1 405", 0), 0u) << post;
  EXPECT_NE(post.find("Connection: close"), std::string::npos) << post;
}

// A streamed body goes out as HTTP/1.1 chunks (empty pieces skipped, the
// terminating chunk after the last), the connection stays usable for the
// next request, and HEAD never runs the producer.
TEST_F(WebServerTest, StreamedBodyIsSentChunkedAndTheConnectionKeptAlive) {
  std::atomic<int> produced{0};
  WebOptions o;
  o.listen_addresses = {"127.0.0.1:0"};
  server_ = std::make_unique<WebServer>(o);
  server_->Route(
      "/stream", {"GET", "HEAD"},
      [&produced](const Request&) {
        Response r;
        r.stream = [&produced](const BodyWriter& write) {
          ++produced;
          EXPECT_TRUE(write("abc", false));
          EXPECT_TRUE(write("", false));
          EXPECT_TRUE(write("defg", true));
          EXPECT_FALSE(write("late", false)) << "a piece after the last";
        };
        return r;
      },
      /*gzip=*/true);
  server_->Route("/-/healthy", {"GET"}, [](const Request&) { return Response::Text(200, "ok\n"); });
  server_->Route("/one", {"GET"}, [](const Request&) {
    Response r;
    r.stream = [](const BodyWriter& write) { write("whole", true); };
    return r;
  });
  ASSERT_TRUE(server_->Start().ok());
  port_ = server_->ports().at(0);
  const std::string two =
      RawHttp(port_,
              "GET /stream HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip\r\n\r\n"
              "GET /-/healthy HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_NE(two.find("Transfer-Encoding: chunked\r\n"), std::string::npos) << two;
  EXPECT_EQ(two.find("Content-Encoding"), std::string::npos) << "streams are never gzipped";
  EXPECT_NE(two.find("\r\n\r\n3\r\nabc\r\n4\r\ndefg\r\n0\r\n\r\nHTTP/1.1 200 OK\r\n"),
            std::string::npos)
      << two;
  EXPECT_EQ(two.substr(two.size() - 3), "ok\n");
  EXPECT_EQ(produced.load(), 1);
  const auto got = xpu::testing::HttpGet("http://127.0.0.1:" + std::to_string(port_) + "/stream");
  EXPECT_EQ(got.status, 200);
  EXPECT_EQ(got.body, "abcdefg");
  const std::string head =
      RawHttp(port_, "HEAD /stream HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(head.rfind("HTTP/1.1 200", 0), 0u) << head;
  EXPECT_EQ(head.substr(head.find("\r\n\r\n") + 4), "");
  EXPECT_EQ(produced.load(), 2) << "HEAD ran the producer";
  // A body that comes in one piece is an ordinary response (as Go's
  // net/http answers): Content-Length, no chunks.
  const std::string one =
      RawHttp(port_, "GET /one HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_NE(one.find("Content-Length: 5\r\n"), std::string::npos) << one;
  EXPECT_EQ(one.find("Transfer-Encoding"), std::string::npos) << one;
  EXPECT_EQ(one.substr(one.find("\r\n\r\n") + 4), "whole");
  // An HTTP/1.0 client knows no chunks: the body unframed, then close.
  const std::string old_client = RawHttp(port_, "GET /stream HTTP/1.0\r\nHost: x\r\n\r\n");
  EXPECT_EQ(old_client.find("Transfer-Encoding"), std::string::npos) << old_client;
  EXPECT_NE(old_client.find("Connection: close\r\n"), std::string::npos) << old_client;
  EXPECT_EQ(old_client.substr(old_client.find("\r\n\r\n") + 4), "abcdefg");
}

TEST_F(WebServerTest, SlowHeadIsCutOffAtItsDeadline) {
  Start(milliseconds(300));
  const auto t0 = std::chrono::steady_clock::now();
  // Half a head, then silence: the guard closes it after 300 ms, not after
  // civetweb's 10 s request timeout.
  const std::string resp = RawHttp(port_, "GET /-/healthy HTTP/1.1\r\nHost:", milliseconds(5000));
  const auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_LT(took, milliseconds(3000));
  EXPECT_GE(server_->head_timeouts(), 1u);
  // The server still answers.
  EXPECT_EQ(RawHttp(port_, "GET /-/healthy HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                .rfind("HTTP/1.1 200", 0),
            0u);
}

TEST_F(WebServerTest, MalformedRequestLineIsRefusedBeforeCivetwebEchoesIt) {
  Start();
  // Found by fuzzing: civetweb put this version text, bare LF and all, into
  // its own status line ("HTTP/HHTTP/1.1 401 Unau\nContent2Length: ...").
  const std::string resp =
      RawHttp(port_, "POST /metrics HHTTP/1.1 401 Unau\nContent2Length: 1000000000\r\n\r\nab");
  EXPECT_EQ(resp.rfind("HTTP/1.1 400 Bad Request\r\n", 0), 0u) << resp;
  EXPECT_EQ(resp.find("Content2Length"), std::string::npos) << resp;
  // Found next by fuzzing: blank lines before a line, which civetweb took for
  // an empty request and answered with an echo. Refused, never echoed...
  for (const char* req : {"\n\n``\n", "\n\n``"}) {
    const std::string resp = RawHttp(port_, req, milliseconds(2000));
    EXPECT_EQ(resp.rfind("HTTP/1.1 400 Bad Request\r\n", 0), 0u) << resp;
    EXPECT_EQ(resp.find("``"), std::string::npos) << resp;
  }
  // ...and before a good request line skipped, as RFC 9112 2.2 allows.
  EXPECT_EQ(RawHttp(port_, "\r\nGET /-/healthy HTTP/1.1\r\nConnection: close\r\n\r\n")
                .rfind("HTTP/1.1 200", 0),
            0u);
  EXPECT_EQ(RawHttp(port_, "GET /-/healthy HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                .rfind("HTTP/1.1 200", 0),
            0u);
}

TEST(HeadersTest, ContentCodingFollowsQValues) {
  using C = ContentCoding;
  EXPECT_EQ(NegotiateContentCoding("gzip"), C::kGzip);  // Prometheus
  EXPECT_EQ(NegotiateContentCoding("zstd"), C::kZstd);
  EXPECT_EQ(NegotiateContentCoding("gzip, zstd"), C::kZstd);  // a tie: zstd
  EXPECT_EQ(NegotiateContentCoding("zstd;q=0.1, gzip;q=0.5"), C::kGzip);
  EXPECT_EQ(NegotiateContentCoding("x-gzip"), C::kGzip);
  EXPECT_EQ(NegotiateContentCoding("*"), C::kZstd);
  EXPECT_EQ(NegotiateContentCoding("*;q=0.5, zstd;q=0"), C::kGzip);
  EXPECT_EQ(NegotiateContentCoding("gzip;q=0, zstd;q=0"), C::kIdentity);
  EXPECT_EQ(NegotiateContentCoding("gzip;q=0.2, identity;q=0.9"), C::kIdentity);
  EXPECT_EQ(NegotiateContentCoding(""), C::kIdentity);
  EXPECT_EQ(NegotiateContentCoding("br, deflate"), C::kIdentity);
  EXPECT_EQ(NegotiateContentCoding("ZSTD;Q=1"), C::kZstd);
  EXPECT_EQ(NegotiateContentCoding("zstd;q=bogus, gzip"), C::kGzip);
  EXPECT_EQ(NegotiateContentCoding("zstd;q=0.5x, gzip;q=0.1"), C::kGzip);
  EXPECT_EQ(NegotiateContentCoding("zstd;q=, gzip;q=0.1"), C::kGzip);
  EXPECT_EQ(NegotiateContentCoding("zstd;foo=bar;q=0.1, gzip;q=0.5"), C::kGzip);
}

TEST(HeadersTest, AcceptEncodingAndBasicAuth) {
  EXPECT_TRUE(AcceptsGzip("gzip"));
  EXPECT_TRUE(AcceptsGzip("deflate, gzip;q=0.5"));
  EXPECT_FALSE(AcceptsGzip("gzip;q=0"));
  EXPECT_FALSE(AcceptsGzip("identity"));
  std::string user, password;
  ASSERT_TRUE(ParseBasicAuth("Basic dTpwOnc=", &user, &password));  // u:p:w
  EXPECT_EQ(user, "u");
  EXPECT_EQ(password, "p:w");
  EXPECT_FALSE(ParseBasicAuth("Basic !!!!", &user, &password));
  EXPECT_FALSE(ParseBasicAuth("Bearer x", &user, &password));
}

// A TLS server on certificate "a", with config "b" ready to reload.
class TlsReloadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(MakeCert(dir_.path(), "a"));
    ASSERT_TRUE(MakeCert(dir_.path(), "b"));
    auto a = TlsConfigFor(dir_.path(), "a");
    b_ = TlsConfigFor(dir_.path(), "b");
    ASSERT_TRUE(a && b_);
    WebOptions o;
    o.listen_addresses = {"127.0.0.1:0"};
    o.web_config = a;
    server_ = std::make_unique<WebServer>(o);
    server_->Route("/-/healthy", {"GET"}, [](const Request&) { return Response{}; });
    ASSERT_TRUE(server_->Start().ok());
  }
  void Remove(const std::string& name) { std::remove((dir_.path() + "/" + name).c_str()); }
  xpu::testing::TempDir dir_;
  std::shared_ptr<const WebConfig> b_;
  std::unique_ptr<WebServer> server_;
};

// Certificates that vanish after their configs were checked: the context
// already loaded keeps serving; the listener is never given up.
TEST_F(TlsReloadTest, ReloadThatCannotLoadNeverLeavesTheServerWithoutAListener) {
  Remove("a.crt");
  Remove("b.crt");
  const Status s = server_->Reload(b_);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << s.message();
  EXPECT_TRUE(server_->listening());
}

TEST_F(TlsReloadTest, FailedTlsReloadKeepsServingTheOldSettingsOnTheSamePort) {
  const int port = server_->ports().at(0);
  Remove("b.crt");
  const Status s = server_->Reload(b_);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << s.message();
  EXPECT_TRUE(server_->listening());
  EXPECT_EQ(server_->ports().at(0), port);
}

TEST(ListenAddressTest, PrometheusStyleAddressesBecomeCivetwebPorts) {
  std::string out;
  ASSERT_TRUE(WebServer::ToCivetPort(":9445", &out).ok());
  EXPECT_EQ(out, "+9445");  // every interface, IPv6 and IPv4
  ASSERT_TRUE(WebServer::ToCivetPort("127.0.0.1:0", &out).ok());
  EXPECT_EQ(out, "127.0.0.1:0");
  ASSERT_TRUE(WebServer::ToCivetPort("[::1]:9445", &out).ok());
  EXPECT_EQ(out, "[::1]:9445");
  ASSERT_TRUE(WebServer::ToCivetPort("[::]:9445", &out).ok());
  EXPECT_EQ(out, "[::]:9445");
  ASSERT_TRUE(WebServer::ToCivetPort("[fe80::1:2]:1", &out).ok());
  for (const char* bad : {"::1:9445", "[::1:9445", "[]:1", "[::1]x:1", "[::g]:1", "[::1]:", "9445",
                          "[::1]:99999", "a b:1"})
    EXPECT_FALSE(WebServer::ToCivetPort(bad, &out).ok()) << bad;
}

// HTTP over IPv6, and ":0" on both families (skipped where the machine
// has no IPv6 loopback).
TEST(ListenAddressTest, ListensOnIpv6AndDualStack) {
  {
    int fd = ::socket(AF_INET6, SOCK_STREAM, 0);
    sockaddr_in6 a{};
    a.sin6_family = AF_INET6;
    a.sin6_addr = in6addr_loopback;
    const bool v6 = fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    if (fd >= 0) ::close(fd);
    if (!v6) GTEST_SKIP() << "no IPv6 loopback";
  }
  for (const char* address : {"[::1]:0", ":0"}) {
    WebOptions o;
    o.listen_addresses = {address};
    WebServer server(o);
    // A body no other process on the machine answers with (parallel tests
    // may listen on 127.0.0.1 with the same port number).
    const std::string token = "xpu-" + std::to_string(::getpid()) + "-" + address;
    server.Route("/-/healthy", {"GET"}, [&](const Request&) { return Response::Text(200, token); });
    ASSERT_TRUE(server.Start().ok()) << address;
    const std::string port = std::to_string(server.ports().at(0));
    EXPECT_EQ(xpu::testing::HttpGet("http://[::1]:" + port + "/-/healthy").body, token) << address;
    const bool v4 = xpu::testing::HttpGet("http://127.0.0.1:" + port + "/-/healthy").body == token;
    EXPECT_EQ(v4, std::string(address) == ":0") << address;
    server.Stop();
  }
}

}  // namespace
}  // namespace xpu::http

namespace xpu::http {
namespace {

// igzip's output is one standard gzip member: zlib reads it back whole, from
// nothing to a 12 MB page and incompressible bytes.
// zstd: one frame, whether compressed whole or piece by piece, that
// libzstd decodes back to the page (with its content size unknown when
// streamed, as a decoder must handle).
TEST(ZstdTest, PiecesMakeOneFrameOfTheWholePage) {
  std::string page;
  for (int i = 0; page.size() < (4u << 20); ++i)
    page += "xpu_link_up{minor=\"" + std::to_string(i % 256) + "\",link=\"" +
            std::to_string(i % 128) + "\"} " + std::to_string(i) + "\n";
  std::string streamed;
  ZstdStream z(&streamed);
  for (size_t at = 0; at < page.size(); at += 65536)
    ASSERT_TRUE(z.Write(std::string_view(page).substr(at, 65536)));
  ASSERT_TRUE(z.Finish());
  for (const std::string& frame : {streamed, Zstd(page)}) {
    ASSERT_FALSE(frame.empty());
    EXPECT_LT(frame.size(), page.size() / 5);
    EXPECT_EQ(ZSTD_findFrameCompressedSize(frame.data(), frame.size()), frame.size())
        << "not exactly one frame";
    ZSTD_DStream* d = ZSTD_createDStream();
    std::string out;
    ZSTD_inBuffer in{frame.data(), frame.size(), 0};
    char buf[1 << 16];
    size_t left = 1;
    while (left != 0 && !ZSTD_isError(left)) {
      ZSTD_outBuffer o{buf, sizeof buf, 0};
      left = ZSTD_decompressStream(d, &o, &in);
      out.append(buf, o.pos);
    }
    ZSTD_freeDStream(d);
    ASSERT_FALSE(ZSTD_isError(left)) << ZSTD_getErrorName(left);
    EXPECT_EQ(out, page);
  }
}

TEST(GzipTest, RoundTripsThroughZlibAsOneMember) {
  std::string page;
  for (int i = 0; page.size() < (12u << 20); ++i)
    page += "xpu_link_up{minor=\"" + std::to_string(i % 256) + "\",uuid=\"PPU-" +
            std::to_string(i * 7919) + "\",link=\"" + std::to_string(i % 128) + "\"} 1\n";
  std::string noise(1 << 20, '\0');
  uint64_t x = 88172645463325252ULL;
  for (char& c : noise) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    c = static_cast<char>(x);
  }
  for (const std::string* in : {&page, &noise}) {
    const std::string z = Gzip(*in);
    ASSERT_FALSE(z.empty());
    EXPECT_EQ(Gunzip(z), *in);
  }
  EXPECT_LT(Gzip(page).size(), page.size() / 5);  // metrics text compresses well
  EXPECT_EQ(Gunzip(Gzip("")), "");
}

// A page compressed in pieces (as MetricsEndpoint renders it) is still one
// member that inflates to the pieces joined, whatever their sizes, with the
// ratio of the whole page compressed at once.
TEST(GzipTest, StreamOfPiecesIsOneMemberOfTheWholePage) {
  std::string page;
  for (int i = 0; page.size() < (3u << 20); ++i)
    page += "xpu_link_up{minor=\"" + std::to_string(i % 256) + "\",link=\"" +
            std::to_string(i % 128) + "\"} " + std::to_string(i * 0.37) + "\n";
  for (size_t piece : {size_t{1}, size_t{1000}, size_t{65536}, size_t{1} << 22}) {
    GzipStream gz;
    std::string z;
    size_t pos = 0;
    if (piece == 1) {  // tiny pieces over a prefix only: a byte at a time is slow
      for (; pos < 5000; ++pos) ASSERT_TRUE(gz.Write(page.substr(pos, 1), false, &z));
    }
    for (; pos < page.size(); pos += piece) {
      const std::string_view p = std::string_view(page).substr(pos, piece);
      ASSERT_TRUE(gz.Write(p, pos + piece >= page.size(), &z)) << piece;
    }
    EXPECT_EQ(Gunzip(z), page) << "pieces of " << piece;
    EXPECT_LT(z.size(), Gzip(page).size() * 11 / 10) << "pieces of " << piece;
  }
  GzipStream empty;
  std::string z;
  ASSERT_TRUE(empty.Write("", true, &z));
  EXPECT_EQ(Gunzip(z), "");
}

// The pipe compresses on a helper thread what the caller hands it: the same
// one member, whether the page is one piece (inline) or many (queued), and
// each piece's buffer comes back empty; a pipe abandoned mid-page (a render
// that threw) ends its helper.
TEST(GzipTest, PipeCompressesPiecesOnAHelperIntoOneMember) {
  std::string page;
  for (int i = 0; page.size() < (2u << 20); ++i)
    page += "xpu_power_watts{minor=\"" + std::to_string(i % 256) + "\"} " +
            std::to_string(i * 1.5) + "\n";
  for (size_t piece : {size_t{65536}, size_t{1000}, page.size()}) {
    std::string z;
    GzipPipe pipe(&z);
    std::string buf;
    for (size_t pos = 0; pos < page.size(); pos += piece) {
      buf.assign(page, pos, piece);
      pipe.Take(&buf, pos + piece >= page.size());
      ASSERT_TRUE(buf.empty());
    }
    ASSERT_TRUE(pipe.Finish());
    EXPECT_EQ(Gunzip(z), page) << "pieces of " << piece;
  }
  // Abandoned (a render that throws): no last piece, no Finish. The
  // destructor does not hang, and every buffer the pipe held (queued,
  // compressed, or the one the caller still has) goes back to the pool.
  while (BufferPool::Batches().kept() > 0) (void)BufferPool::Batches().Take(0);
  std::string z;
  std::set<const char*> used;
  {
    GzipPipe abandoned(&z);
    std::string buf = abandoned.Spare();
    // One piece compressed while kDepth more wait: the queue is full when
    // the pipe is let go (unless the helper is far faster than this loop).
    for (size_t pos = 0; pos < (GzipPipe::kDepth + 1) * GzipPipe::kBatch; pos += GzipPipe::kBatch) {
      buf.append(page, pos, GzipPipe::kBatch);
      used.insert(buf.data());
      abandoned.Take(&buf, false);
    }
    used.insert(buf.data());
    BufferPool::Batches().Give(std::move(buf));  // the sink gives back the caller's
  }
  // Every one, up to what the pool keeps (kDepth + 2).
  EXPECT_EQ(BufferPool::Batches().kept(), std::min(used.size(), GzipPipe::kDepth + 2));
}

// igzip's level buffers (some 300 KiB each) are kept for the next stream
// and handed out again, at most two of them.
TEST(GzipTest, LevelBuffersAreKeptForTheNextStream) {
  { GzipStream warm; }  // the pool made, one kept
  ASSERT_GE(GzipStream::LevelBuffersKept(), 1u);
  const size_t before = GzipStream::LevelBuffersKept();
  {
    GzipStream a;
    EXPECT_EQ(GzipStream::LevelBuffersKept(), before - 1) << "a kept one is taken";
    std::string out;
    ASSERT_TRUE(a.Write("xpu_up 1\n", true, &out));
  }
  EXPECT_EQ(GzipStream::LevelBuffersKept(), before) << "and given back";
  {
    GzipStream a, b, c;
    EXPECT_EQ(GzipStream::LevelBuffersKept(), 0u);
  }
  EXPECT_EQ(GzipStream::LevelBuffersKept(), 2u) << "two kept; the third freed";
}

// Kept buffers: at most `keep`, none too small or too large, handed out
// with their memory (the same bytes, not a copy) and emptied.
TEST(BufferPoolTest, KeepsAtMostItsCountOfUsefulBuffersAndHandsBackTheRoomiest) {
  BufferPool pool(2, 1 << 20);
  std::string small(100, 'x'), big(400000, 'y'), bigger(600000, 'z'), huge(2 << 20, 'h');
  const char* bigger_bytes = bigger.data();
  pool.Give(std::move(small));  // under kMinCapacity: not kept
  pool.Give(std::move(huge));   // over max_capacity: not kept
  EXPECT_EQ(pool.kept(), 0u);
  pool.Give(std::move(big));
  pool.Give(std::move(bigger));
  pool.Give(std::string(300000, 'w'));  // a third: no place
  EXPECT_EQ(pool.kept(), 2u);
  std::string taken = pool.Take(1000);
  EXPECT_EQ(taken.data(), bigger_bytes);  // the roomiest, its own memory
  EXPECT_TRUE(taken.empty());
  EXPECT_GE(taken.capacity(), 600000u);
  EXPECT_EQ(pool.kept(), 1u);
  std::string fresh = pool.Take(5000);
  EXPECT_GE(fresh.capacity(), 5000u);
  EXPECT_EQ(pool.kept(), 0u);
  EXPECT_GE(pool.Take(7000).capacity(), 7000u);  // none left: a new one
  // A kept one far roomier than asked (a page that shrank) is let go.
  BufferPool pages(1, 32 << 20);
  pages.Give(std::string(8 << 20, 'p'));
  EXPECT_LT(pages.Take(100000).capacity(), size_t{8} << 20);
  EXPECT_EQ(pages.kept(), 0u);
}

// A page's batches serve the next page: a large page through one pipe
// leaves its buffers kept, and the next pipe's buffers are those same
// buffers, so their memory is not faulted in anew at every scrape.
TEST(BufferPoolTest, APipesBatchesServeTheNextPage) {
  std::string page;
  for (int i = 0; page.size() < (2u << 20); ++i)
    page += "xpu_link_up{minor=\"" + std::to_string(i % 256) + "\",link=\"" +
            std::to_string(i % 128) + "\"} 1\n";
  auto run = [&](std::set<const char*>* used) {
    std::string z;
    GzipPipe pipe(&z);
    std::string buf = pipe.Spare();
    for (size_t pos = 0; pos < page.size(); pos += GzipPipe::kBatch) {
      buf.append(page, pos, GzipPipe::kBatch);
      used->insert(buf.data());
      pipe.Take(&buf, pos + GzipPipe::kBatch >= page.size());
    }
    EXPECT_TRUE(pipe.Finish());
    EXPECT_EQ(Gunzip(z), page);
  };
  // What earlier tests left kept is let go: this test's buffers alone.
  while (BufferPool::Batches().kept() > 0) (void)BufferPool::Batches().Take(0);
  std::set<const char*> first, second;
  run(&first);
  // Every buffer the page used is kept (at most kDepth + 2 are needed)...
  ASSERT_LE(first.size(), GzipPipe::kDepth + 2);
  EXPECT_EQ(BufferPool::Batches().kept(), first.size());
  run(&second);
  // ...and the next page takes those before any new one: a new buffer only
  // where it had more in flight than the first page did (how many depends
  // on how fast the helper compresses). Every first buffer is still alive
  // (kept or in use), so no new one can share an address with it.
  size_t fresh = 0;
  for (const char* p : second) fresh += first.count(p) == 0 ? 1 : 0;
  EXPECT_LE(fresh, second.size() > first.size() ? second.size() - first.size() : 0);
  EXPECT_EQ(BufferPool::Batches().kept(), first.size() + fresh);
}

}  // namespace
}  // namespace xpu::http
