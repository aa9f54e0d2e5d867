#pragma once

#include <prometheus/counter.h>
#include <prometheus/registry.h>

#include <atomic>
#include <future>
#include <memory>
#include <string>

#include "common/mutex.h"
#include "exposition/exposer.h"
#include "http/web_server.h"

namespace xpu::exposition {

// Answers the telemetry path (/metrics) from the Exposer, without ever
// holding a whole plain page:
// - a plain scrape streams the page to its client in 64 KiB chunks as it
//   renders;
// - a gzip scrape (what Prometheus asks for) renders straight into igzip and
//   sends the compressed page (a zstd scrape likewise into libzstd), and
//   concurrent scrapes of one format and coding share one render: a scrape that arrives while
//   another renders waits for that page instead of rendering its own, so an HA pair of Prometheus
//   servers costs one render. The shared page is at most one render older
//   than the request; it is never kept after it is sent.
// A client that is slow to read holds only its own worker: compressed pages
// are complete before any is sent. Thread-safe (civetweb's workers).
class MetricsEndpoint {
 public:
  // `self` receives xpu_exporter_scrapes_shared_total.
  MetricsEndpoint(Exposer* exposer, prometheus::Registry* self);

  http::Response Serve(const http::Request& req);

 private:
  using Page = std::shared_ptr<const std::string>;
  // The compressed page of `format` (zstd when `zstd`, else gzip), rendered
  // here or by the scrape already rendering it; null if compression failed.
  Page Compressed(Format format, bool zstd);
  Page RenderGzipped(Format format);
  Page RenderZstd(Format format);
  // A new page of `format` and coding, filled by compress(page) (which
  // renders into it; false: it failed, and says so).
  template <class Compress>
  Page RenderCompressed(Format format, bool zstd, Compress compress);

  Exposer* const exposer_;
  prometheus::Counter& shared_;
  // Room for the next page: the last one's size of that format and coding
  // and an eighth more, so that a large page is compressed into one
  // buffer reserved once, not one grown (copied, and its new pages
  // faulted in) some twenty times a scrape.
  static size_t RoomFor(size_t last) { return last + last / 8 + 4096; }
  Mutex mu_;
  std::shared_future<Page> inflight_[2][2] XPU_GUARDED_BY(mu_);  // by Format, then zstd
  std::atomic<size_t> last_size_[2][2] = {};                     // by Format, then zstd
};

}  // namespace xpu::exposition
