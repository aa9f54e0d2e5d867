#include "exposition/metrics_endpoint.h"

#include <spdlog/spdlog.h>

#include "exposition/negotiate.h"
#include "http/buffer_pool.h"
#include "http/gzip.h"
#include "http/headers.h"
#include "http/zstd.h"

namespace xpu::exposition {

MetricsEndpoint::MetricsEndpoint(Exposer* exposer, prometheus::Registry* self)
    : exposer_(exposer),
      shared_(prometheus::BuildCounter()
                  .Name("xpu_exporter_scrapes_shared_total")
                  .Help("Compressed (gzip or zstd) scrapes answered with the page a concurrent "
                        "scrape rendered.")
                  .Register(*self)
                  .Add({})) {}

http::Response MetricsEndpoint::Serve(const http::Request& req) {
  http::Response r;
  // OpenMetrics when the client prefers it (Prometheus does), else the
  // Prometheus text format.
  const Negotiated asked = NegotiateFormat(req.accept);
  const Format format = asked.format;
  r.content_type = asked.content_type;
  r.headers.emplace_back("Vary", "Accept, Accept-Encoding");
  const http::ContentCoding coding = http::NegotiateContentCoding(req.accept_encoding);
  if (coding != http::ContentCoding::kIdentity) {
    const bool zstd = coding == http::ContentCoding::kZstd;
    if (Page page = Compressed(format, zstd)) {
      r.shared_body = std::move(page);
      r.headers.emplace_back("Content-Encoding", zstd ? "zstd" : "gzip");
      return r;
    }
    // Not expected (the compressor failed): the plain page still answers.
  }
  Exposer* exposer = exposer_;
  r.stream = [exposer, format](const http::BodyWriter& write) {
    // Its buffer from (and back to) the kept ones, as a compressed page's.
    PageSink sink(write, PageSink::kPiece, &http::BufferPool::Batches());
    exposer->Render(&sink, format);
  };
  return r;
}

MetricsEndpoint::Page MetricsEndpoint::Compressed(Format format, bool zstd) {
  std::shared_future<Page>& inflight =
      inflight_[format == Format::kOpenMetrics ? 1 : 0][zstd ? 1 : 0];
  const char* coding = zstd ? "zstd" : "gzip";
  std::promise<Page> promise;
  {
    MutexLock lock(mu_);
    if (inflight.valid()) {
      std::shared_future<Page> other = inflight;
      lock.Unlock();
      shared_.Increment();
      return other.get();
    }
    inflight = promise.get_future().share();
  }
  Page page;
  try {
    page = zstd ? RenderZstd(format) : RenderGzipped(format);
  } catch (const std::exception& e) {  // bad_alloc: this scrape fails, not the process
    spdlog::error("rendering a {} page failed: {}", coding, e.what());
  } catch (...) {  // whatever it was, the scrapes waiting on this page must not hang
    spdlog::error("rendering a {} page failed", coding);
  }
  {
    MutexLock lock(mu_);
    inflight = {};
  }
  promise.set_value(page);
  return page;
}

namespace {
// A compressed page's buffer, from (and, once every scrape sending it is
// done, back to) the pool of pages, so that its memory is not faulted in
// anew at each scrape.
std::shared_ptr<std::string> NewPage(size_t room) {
  return std::shared_ptr<std::string>(new std::string(http::BufferPool::Pages().Take(room)),
                                      [](std::string* s) {
                                        http::BufferPool::Pages().Give(std::move(*s));
                                        delete s;
                                      });
}
}  // namespace

template <class Compress>
MetricsEndpoint::Page MetricsEndpoint::RenderCompressed(Format format, bool zstd,
                                                        Compress compress) {
  // Room for the last page of its kind and some growth, so that the page
  // is not grown by copies.
  std::atomic<size_t>& last = last_size_[format == Format::kOpenMetrics ? 1 : 0][zstd ? 1 : 0];
  auto page = NewPage(RoomFor(last.load(std::memory_order_relaxed)));
  if (!compress(page.get())) return nullptr;
  last.store(page->size(), std::memory_order_relaxed);
  return page;
}

MetricsEndpoint::Page MetricsEndpoint::RenderGzipped(Format format) {
  return RenderCompressed(format, false, [&](std::string* page) {
    // A large page is compressed on a second core while this one renders.
    http::GzipPipe gz(page);
    PageSink sink(PageSink::Taker([&](std::string* buf, bool last) {
                    gz.Take(buf, last);  // and puts a spare batch in its place
                    return true;
                  }),
                  http::GzipPipe::kBatch, &http::BufferPool::Batches());
    exposer_->Render(&sink, format);
    if (gz.Finish()) return true;
    spdlog::error("igzip failed to compress the metrics page");
    return false;
  });
}

MetricsEndpoint::Page MetricsEndpoint::RenderZstd(Format format) {
  return RenderCompressed(format, true, [&](std::string* page) {
    http::ZstdStream z(page);
    constexpr size_t kPiece = size_t{256} * 1024;
    PageSink sink(PageSink::Taker([&](std::string* buf, bool) {
                    return z.Write(*buf);  // what it leaves in buf is dropped
                  }),
                  kPiece, &http::BufferPool::Batches());
    exposer_->Render(&sink, format);
    if (z.Finish()) return true;
    spdlog::error("libzstd failed to compress the metrics page");
    return false;
  });
}

}  // namespace xpu::exposition
