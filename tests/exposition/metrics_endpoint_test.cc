#include "exposition/metrics_endpoint.h"

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <stdexcept>
#include <thread>

#include "http/buffer_pool.h"
#include "support/test_util.h"

namespace xpu::exposition {
namespace {

using store::Clock;
using xpu::testing::Gunzip;
using xpu::testing::WaitFor;

// A collectable that holds the render it is in until released: makes "a
// scrape arrives while another renders" happen on purpose.
class Gate : public prometheus::Collectable {
 public:
  std::vector<prometheus::MetricFamily> Collect() const override {
    ++calls;
    std::unique_lock<std::mutex> lock(mu_);
    entered_ = true;
    cv_.notify_all();
    cv_.wait(lock, [this] { return open_; });
    return {};
  }
  void WaitEntered() const {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return entered_; });
  }
  void Open() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    cv_.notify_all();
  }
  mutable std::atomic<int> calls{0};

 private:
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  mutable bool entered_ = false;
  bool open_ = false;
};

double Shared(prometheus::Registry& self) {
  for (const auto& f : self.Collect())
    if (f.name == "xpu_exporter_scrapes_shared_total") return f.metric.at(0).counter.value;
  return -1;
}

class MetricsEndpointTest : public ::testing::Test {
 protected:
  // `links` link series per device on 8 devices, besides the device series.
  void Fill(int links, double value) {
    std::vector<store::Sample> batch;
    for (int32_t minor = 0; minor < 8; ++minor) {
      batch.push_back({minor, 1, "", value});
      for (int l = 0; l < links; ++l) batch.push_back({minor, 16, std::to_string(l), value});
    }
    store_.Apply(batch, Clock::now());
  }
  http::Request Gzip() {
    http::Request r;
    r.method = "GET";
    r.accept_encoding = "gzip";
    return r;
  }
  std::string Whole() {
    std::string page;
    exposer_.Render(&page);
    return page;
  }

  store::MetricStore store_{catalog::Catalog::Builtin(), {std::chrono::seconds(60), 1000000}};
  prometheus::Registry self_;
  exposition::Exposer exposer_{&store_, &self_};
  MetricsEndpoint endpoint_{&exposer_, &self_};
};

// Two gzip scrapes at once cost one render: the second waits for the page
// the first is rendering and gets the very same bytes.
TEST_F(MetricsEndpointTest, ConcurrentGzipScrapesShareOneRender) {
  Fill(4, 0.5);
  Gate gate;
  exposer_.AddCollectable(&gate);
  http::Response first, second;
  std::thread a([&] { first = endpoint_.Serve(Gzip()); });
  gate.WaitEntered();
  std::thread b([&] { second = endpoint_.Serve(Gzip()); });
  const bool joined = WaitFor([&] { return Shared(self_) == 1; });
  gate.Open();  // before any assertion can return: the threads must be joined
  a.join();
  b.join();
  ASSERT_TRUE(joined) << "the second scrape did not join";
  EXPECT_EQ(gate.calls.load(), 1);
  ASSERT_TRUE(first.shared_body);
  EXPECT_EQ(first.shared_body, second.shared_body);
  const std::string page = Gunzip(*first.shared_body);
  EXPECT_NE(page.find("xpu_link_up{minor=\"7\""), std::string::npos) << page;
  EXPECT_EQ(page, Whole());
  // Once sent, a page is not reused: the next scrape renders the new value.
  Fill(4, 0.75);
  const http::Response third = endpoint_.Serve(Gzip());
  EXPECT_EQ(gate.calls.load(), 3);  // Whole() rendered once too
  EXPECT_NE(Gunzip(*third.shared_body).find("} 0.75\n"), std::string::npos);
  EXPECT_EQ(Shared(self_), 1);
}

// A compressed page's buffer serves the next page (BufferPool::Pages) and
// only its room is kept: a large page, then a smaller one, then a larger
// one again, each body inflates to exactly its own render, nothing of the
// page before past its end, and the next page's buffer is the page sent
// before once that is let go.
TEST_F(MetricsEndpointTest, APagesBufferServesTheNextPageWithOnlyItsOwnBytes) {
  for (int links : {3000, 10, 2000}) {
    Fill(links, links * 0.5);
    const http::Response r = endpoint_.Serve(Gzip());
    ASSERT_TRUE(r.shared_body);
    EXPECT_EQ(Gunzip(*r.shared_body), Whole()) << links << " links";
  }
  const char* sent = nullptr;
  {
    const http::Response r = endpoint_.Serve(Gzip());
    ASSERT_TRUE(r.shared_body);
    sent = r.shared_body->data();
  }  // let go: its buffer is kept
  EXPECT_EQ(http::BufferPool::Pages().kept(), 1u);
  const http::Response next = endpoint_.Serve(Gzip());
  EXPECT_EQ(next.shared_body->data(), sent);
  EXPECT_EQ(Gunzip(*next.shared_body), Whole());
}

// A plain scrape is streamed in pieces of at least 64 KiB (the last may be
// shorter) that join into the page rendered whole.
TEST_F(MetricsEndpointTest, PlainScrapeStreamsThePageInPieces) {
  Fill(1000, 1);
  http::Request req;
  req.method = "GET";
  const http::Response r = endpoint_.Serve(req);
  ASSERT_TRUE(r.stream);
  EXPECT_FALSE(r.shared_body);
  std::vector<std::string> pieces;
  bool ended = false;
  r.stream([&](std::string_view piece, bool last) {
    EXPECT_FALSE(ended);
    pieces.emplace_back(piece);
    ended = last;
    return true;
  });
  EXPECT_TRUE(ended);
  ASSERT_GT(pieces.size(), 3u);
  std::string joined;
  for (size_t i = 0; i < pieces.size(); ++i) {
    if (i + 1 < pieces.size()) {
      EXPECT_GE(pieces[i].size(), exposition::PageSink::kPiece);
    }
    EXPECT_LT(pieces[i].size(), exposition::PageSink::kPiece + 4096);
    joined += pieces[i];
  }
  EXPECT_EQ(joined, Whole());
  // A client that goes away mid-page gets nothing more; the render ends.
  int offered = 0;
  r.stream([&](std::string_view, bool) { return ++offered < 2; });
  EXPECT_EQ(offered, 2);
}

// A sink's buffer is lent by its pool and goes back to it when the sink
// is destroyed, whether the page was finished or its render threw: the
// next page finds it there, with its room and none of its bytes.
TEST(PageSinkTest, ALentBufferGoesBackToItsPoolEvenWhenTheRenderThrows) {
  http::BufferPool pool(1, size_t{1} << 20);
  constexpr size_t kPiece = 64 * 1024;
  for (const bool throws : {false, true}) {
    SCOPED_TRACE(throws ? "throws" : "finishes");
    std::string sent;
    try {
      PageSink sink([&](std::string_view piece, bool) { return sent.append(piece), true; }, kPiece,
                    &pool);
      EXPECT_EQ(pool.kept(), 0u);  // it holds the pool's one buffer
      sink.buf()->append(kPiece / 2, 'x');
      sink.Check();
      if (throws) throw std::runtime_error("render failed");
      EXPECT_TRUE(sink.Finish());
    } catch (const std::runtime_error&) {
    }
    EXPECT_EQ(sent.size(), throws ? 0u : kPiece / 2);
    ASSERT_EQ(pool.kept(), 1u);
    std::string back = pool.Take(0);
    EXPECT_TRUE(back.empty());
    EXPECT_GE(back.capacity(), kPiece + kPiece / 4);
    pool.Give(std::move(back));
  }
}

// OpenMetrics and the text format are separate pages: a gzip text scrape
// that arrives while an OpenMetrics one renders does not wait for that page
// and get it, but renders its own (and the other way round).
TEST_F(MetricsEndpointTest, FormatsAreNotShared) {
  Fill(2, 1);
  Gate gate;
  exposer_.AddCollectable(&gate);
  http::Request om = Gzip();
  om.accept = "application/openmetrics-text;version=1.0.0";
  http::Response a, b;
  std::thread first([&] { a = endpoint_.Serve(om); });
  gate.WaitEntered();
  std::thread second([&] { b = endpoint_.Serve(Gzip()); });
  // Either the text scrape renders too (it enters the gate) or it joined
  // the OpenMetrics render (counted as shared).
  const bool overlapped = WaitFor([&] { return gate.calls.load() == 2 || Shared(self_) > 0; });
  gate.Open();  // before any assertion can return: the threads must be joined
  first.join();
  second.join();
  ASSERT_TRUE(overlapped);
  EXPECT_EQ(Shared(self_), 0);
  EXPECT_EQ(gate.calls.load(), 2);
  ASSERT_TRUE(a.shared_body && b.shared_body);
  EXPECT_NE(a.shared_body, b.shared_body);
  EXPECT_NE(Gunzip(*a.shared_body).find("# EOF\n"), std::string::npos);
  EXPECT_EQ(Gunzip(*b.shared_body).find("# EOF"), std::string::npos);
  EXPECT_EQ(a.content_type, exposition::kOpenMetricsContentType);
  EXPECT_NE(b.content_type, exposition::kOpenMetricsContentType);
}

}  // namespace
}  // namespace xpu::exposition
