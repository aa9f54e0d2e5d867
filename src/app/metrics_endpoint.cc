#include "app/metrics_endpoint.h"

#include <spdlog/spdlog.h>

#include "http/gzip.h"
#include "http/headers.h"

namespace xpu::app {

MetricsEndpoint::MetricsEndpoint(exposition::Exposer* exposer, prometheus::Registry* self)
    : exposer_(exposer),
      shared_(prometheus::BuildCounter()
                  .Name("xpu_exporter_scrapes_shared_total")
                  .Help("gzip scrapes answered with the page a concurrent scrape rendered.")
                  .Register(*self)
                  .Add({})) {}

http::Response MetricsEndpoint::Serve(const http::Request& req) {
  http::Response r;
  // OpenMetrics when the client prefers it (Prometheus does), else the
  // Prometheus text format.
  const http::MetricsFormat asked = http::NegotiateMetricsFormat(req.accept);
  const exposition::Format format = asked == http::MetricsFormat::kText
                                        ? exposition::Format::kText
                                        : exposition::Format::kOpenMetrics;
  // The version asked for (0.0.1 and 1.0.0 are the same lines for what we
  // write); always one version parameter, never two.
  r.content_type = asked == http::MetricsFormat::kText ? exposition::kTextContentType
                   : asked == http::MetricsFormat::kOpenMetrics001
                       ? exposition::kOpenMetrics001ContentType
                       : exposition::kOpenMetricsContentType;
  r.headers.emplace_back("Vary", "Accept, Accept-Encoding");
  if (http::AcceptsGzip(req.accept_encoding)) {
    if (Page page = Gzipped(format)) {
      r.shared_body = std::move(page);
      r.headers.emplace_back("Content-Encoding", "gzip");
      return r;
    }
    // Not expected (igzip failed): the plain page still answers.
  }
  exposition::Exposer* exposer = exposer_;
  r.stream = [exposer, format](const http::BodyWriter& write) {
    exposition::PageSink sink(write);
    exposer->Render(&sink, format);
  };
  return r;
}

MetricsEndpoint::Page MetricsEndpoint::Gzipped(exposition::Format format) {
  const int slot = format == exposition::Format::kOpenMetrics ? 1 : 0;
  std::promise<Page> promise;
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (inflight_[slot].valid()) {
      std::shared_future<Page> other = inflight_[slot];
      lock.unlock();
      shared_.Increment();
      return other.get();
    }
    inflight_[slot] = promise.get_future().share();
  }
  Page page;
  try {
    page = RenderGzipped(format);
  } catch (const std::exception& e) {  // bad_alloc: this scrape fails, not the process
    spdlog::error("rendering a gzip page failed: {}", e.what());
  } catch (...) {  // whatever it was, the scrapes waiting on this page must not hang
    spdlog::error("rendering a gzip page failed");
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    inflight_[slot] = {};
  }
  promise.set_value(page);
  return page;
}

MetricsEndpoint::Page MetricsEndpoint::RenderGzipped(exposition::Format format) {
  auto page = std::make_shared<std::string>();
  // A large page is compressed on a second core while this one renders.
  http::GzipPipe gz(page.get());
  exposition::PageSink sink(exposition::PageSink::Taker([&](std::string* buf, bool last) {
                              gz.Take(buf, last);
                              return true;
                            }),
                            http::GzipPipe::kBatch);
  exposer_->Render(&sink, format);
  if (!gz.Finish()) {
    spdlog::error("igzip failed to compress the metrics page");
    return nullptr;
  }
  return page;
}

}  // namespace xpu::app
