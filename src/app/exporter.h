#pragma once

#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "app/config.h"
#include "app/status_page.h"
#include "catalog/selection.h"
#include "common/process_metrics.h"
#include "common/status.h"
#include "common/worker.h"
#include "exposition/exposer.h"
#include "hal/hal_sampler.h"
#include "hal/pci_sampler.h"
#include "http/web_server.h"
#include "kubelet/pod_mapper.h"
#include "kubernetes/pod_watcher.h"
#include "store/device_registry.h"
#include "store/metric_store.h"
#include "upstream/xdm_client.h"

namespace xpu::app {

// The whole exporter, wired: XdmClient and HalSampler -> MetricStore and
// DeviceRegistry -> Exposer -> WebServer. Owns every part. Start()/Stop() from the owning thread
// (main, or a test); everything else runs on the parts' own threads.
class Exporter {
 public:
  explicit Exporter(Config cfg);
  ~Exporter();
  Exporter(const Exporter&) = delete;
  Exporter& operator=(const Exporter&) = delete;

  // Loads the catalog, binds the listen addresses and starts the upstream
  // client. Errors are configuration errors (exit 2) or bind errors.
  Status Start();
  void Stop();
  // Re-reads --web.config.file (SIGHUP). On error the old one stays in force.
  Status ReloadWebConfig();

  std::vector<int> ports() const { return web_ ? web_->ports() : std::vector<int>{}; }
  bool listening() const { return web_ && web_->listening(); }
  upstream::XdmClient* client() { return client_.get(); }

 private:
  http::Response Metrics(const http::Request& req);
  http::Response Ready();
  http::Response StatusPage();
  http::Response ConfigPage();
  // The state /status and the landing page show, gathered from every part.
  StatusReport Report();

  Config cfg_;  // cfg_.web.web_config is guarded by web_config_mu_ after Start
  std::mutex web_config_mu_;
  const std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  std::shared_ptr<const catalog::Catalog> catalog_;
  prometheus::Registry self_metrics_;
  catalog::Selection selection_;    // --metrics.include/exclude; set before any thread
  ProcessMetrics process_metrics_;  // process_*: read from /proc on each scrape
  prometheus::Gauge* identity_missing_ = nullptr;  // set once in the constructor
  LogOnce identity_said_;
  std::unique_ptr<store::MetricStore> store_;
  store::DeviceRegistry devices_;
  std::unique_ptr<exposition::Exposer> exposer_;
  std::unique_ptr<upstream::XdmClient> client_;
  std::shared_ptr<const hal::FaultCatalog> fault_catalog_;
  std::unique_ptr<hal::HalSampler> hal_;             // null when --hal selects no sysfs backend
  std::unique_ptr<hal::PciSampler> pci_;             // null when --hal selects no pci backend
  std::unique_ptr<kubelet::PodMapper> pods_;         // null when the socket flag is empty
  std::unique_ptr<kubernetes::PodWatcher> watcher_;  // null when no API server is used
  std::unique_ptr<http::WebServer> web_;
};

}  // namespace xpu::app
