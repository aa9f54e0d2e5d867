#include "app/exporter.h"

#include <prometheus/gauge.h>
#include <spdlog/spdlog.h>

#include "version.h"

namespace xpu::app {

Exporter::Exporter(Config cfg) : cfg_(std::move(cfg)) {}

Exporter::~Exporter() { Stop(); }

Status Exporter::Start() {
  if (cfg_.catalog_file.empty()) {
    catalog_ = catalog::Catalog::Builtin();
  } else {
    Status s = catalog::Catalog::LoadFile(cfg_.catalog_file, &catalog_);
    if (!s.ok()) return s;
  }
  prometheus::BuildGauge()
      .Name("xpu_exporter_build_info")
      .Help("xpu-exporter's version and revision; always 1.")
      .Register(self_metrics_)
      .Add({{"version", kVersion}, {"revision", kRevision}})
      .Set(1);
  store_ = std::make_unique<store::MetricStore>(
      catalog_, store::MetricStore::Options{cfg_.effective_stale_after(), cfg_.max_series});
  exposer_ = std::make_unique<exposition::Exposer>(store_.get(), &self_metrics_);
  exposer_->AddCollectable(&devices_);
  exposer_->AddCollectable(&self_metrics_);

  upstream::ClientOptions co;
  co.xdm_endpoint = cfg_.xdm_endpoint;
  co.controller_endpoint = cfg_.controller_endpoint;
  co.interval = cfg_.interval;
  co.backoff_initial = cfg_.backoff_initial;
  co.backoff_max = cfg_.backoff_max;
  co.keep_unknown = cfg_.unknown_metrics;
  client_ = std::make_unique<upstream::XdmClient>(co, catalog_, store_.get(), &devices_,
                                                  &self_metrics_);

  web_ = std::make_unique<http::WebServer>(
      http::WebOptions{cfg_.listen_addresses, cfg_.max_connections, 10000});
  web_->Route(cfg_.telemetry_path, {"GET"},
              [this](const http::Request& r) { return Metrics(r); }, /*gzip=*/true);
  web_->Route("/", {"GET"}, [this](const http::Request&) {
    http::Response r;
    r.content_type = "text/html; charset=utf-8";
    r.body = LandingPage();
    return r;
  });
  web_->Route("/-/healthy", {"GET"}, [](const http::Request&) {
    return http::Response{200, "text/plain; charset=utf-8", "Healthy\n", {}};
  });
  web_->Route("/-/ready", {"GET"}, [this](const http::Request&) { return Ready(); });
  Status s = web_->Start();
  if (!s.ok()) return s;
  client_->Start();
  return Status::Ok();
}

void Exporter::Stop() {
  if (client_) client_->Stop();
  if (web_) web_->Stop();
}

http::Response Exporter::Metrics(const http::Request&) {
  http::Response r;
  r.content_type = "text/plain; version=0.0.4; charset=utf-8";
  exposer_->Render(&r.body);
  return r;
}

http::Response Exporter::Ready() {
  auto last = store_->last_update();
  const auto now = std::chrono::steady_clock::now();
  if (last && now - *last < cfg_.effective_stale_after())
    return {200, "text/plain; charset=utf-8", "Ready\n", {}};
  return {503, "text/plain; charset=utf-8",
          last ? "Not ready: no fresh data from XDM\n" : "Not ready: no data from XDM yet\n",
          {}};
}

std::string Exporter::LandingPage() const {
  const std::string path = cfg_.telemetry_path;
  return "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>xpu-exporter</title></head>"
         "<body><h1>xpu-exporter</h1><p>Version " +
         std::string(kVersion) + " (" + kRevision + ")</p><ul><li><a href=\"" + path + "\">" +
         path +
         "</a></li><li><a href=\"/-/healthy\">/-/healthy</a></li>"
         "<li><a href=\"/-/ready\">/-/ready</a></li></ul><p>Upstream mode: " +
         upstream::ModeName(client_->mode()) + "</p></body></html>\n";
}

}  // namespace xpu::app
