#pragma once

#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include <chrono>
#include <future>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "app/config.h"
#include "app/metrics_endpoint.h"
#include "app/status_page.h"
#include "catalog/selection.h"
#include "common/mutex.h"
#include "common/process_metrics.h"
#include "common/status.h"
#include "common/worker.h"
#include "exposition/exposer.h"
#include "hal/hal_sampler.h"
#include "hal/pci_metrics.h"
#include "hal/pci_sampler.h"
#include "http/web_server.h"
#include "kubelet/pod_mapper.h"
#include "kubernetes/pod_watcher.h"
#include "store/device_registry.h"
#include "store/exemplars.h"
#include "store/metric_store.h"
#include "upstream/xdm_client.h"

namespace xpu::app {

// The whole exporter, wired: XdmClient and HalSampler -> MetricStore and
// DeviceRegistry -> Exposer -> WebServer. Owns every part. Start()/Stop() from
// the owning thread (main, or a test); everything else runs on the parts' own
// threads. Reloads run on a thread of their own, one at a time, whoever asks
// (SIGHUP, POST /-/reload): they restart the HTTP listeners on a TLS change,
// which an HTTP worker thread could not do.
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
  // Parses the command line and the files it names again, and applies what
  // changed (docs/configuration.md, "Reload"); settings that need a restart
  // are logged and shown in /config. On error nothing changes and the
  // Status says why. Blocks until done; any thread but an HTTP worker's.
  Status Reload();

  std::vector<int> ports() const { return web_ ? web_->ports() : std::vector<int>{}; }
  bool listening() const { return web_ && web_->listening(); }
  upstream::XdmClient* client() { return client_.get(); }

 private:
  struct ReloadJob;
  void ReloadLoop();
  // Queues a reload; `answer` is given once its outcome is known.
  std::future<Status> RequestReload(bool from_http);
  void RunReload(ReloadJob* job);
  // Builds the HAL samplers `cfg` asks for (not started).
  Status BuildHal(const Config& cfg, const std::shared_ptr<const hal::FaultCatalog>& faults,
                  std::unique_ptr<hal::HalSampler>* hal, std::unique_ptr<hal::PciSampler>* pci);
  std::unique_ptr<kubelet::PodMapper> BuildPods(const Config& cfg);
  std::unique_ptr<kubernetes::PodWatcher> BuildWatcher(const Config& cfg);
  // Which data is taken and shown: catalog, selection, devices, timing.
  void ApplyIngest(const Config& cfg, const LoadedFiles& files);
  void RecordReload(const Status& s);
  http::Response ReloadPage(const http::Request& req);
  http::Response Metrics(const http::Request& req);
  http::Response Ready();
  http::Response StatusPage();
  http::Response ConfigPage();
  // The state /status and the landing page show, gathered from every part.
  StatusReport Report();

  // The configuration in force. Its restart-only members never change after
  // Start; the rest, and the parts marked below, are replaced by reloads
  // under parts_mu_ (read by scrapes, /status, /config).
  Config cfg_;
  mutable Mutex parts_mu_;
  // Restart-only settings whose new values wait for a restart.
  std::map<std::string, Config::Setting> pending_restart_ XPU_GUARDED_BY(parts_mu_);
  std::string last_reload_error_ XPU_GUARDED_BY(parts_mu_);  // empty after a good one
  const std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  std::shared_ptr<const catalog::Catalog> catalog_ XPU_GUARDED_BY(parts_mu_);  // after Start
  prometheus::Registry self_metrics_;
  ProcessMetrics process_metrics_;                 // process_*: read from /proc on each scrape
  prometheus::Gauge* identity_missing_ = nullptr;  // set once in Start
  prometheus::Gauge* reload_ok_ = nullptr;         // set once in Start
  prometheus::Gauge* reload_time_ = nullptr;       // set once in Start
  prometheus::Gauge* restart_pending_ = nullptr;   // set once in Start
  LogOnce identity_said_;
  std::unique_ptr<store::MetricStore> store_;
  store::DeviceRegistry devices_;
  store::ExemplarStore exemplars_;                   // fault raises' pods, for OpenMetrics scrapes
  std::unique_ptr<store::DataAgeMetrics> data_age_;  // reads store_
  std::unique_ptr<exposition::Exposer> exposer_;
  std::unique_ptr<MetricsEndpoint> metrics_;  // the telemetry path
  std::unique_ptr<upstream::XdmClient> client_;
  // Guarded by parts_mu_ after Start (a reload replaces them):
  std::unique_ptr<hal::HalSampler> hal_
      XPU_GUARDED_BY(parts_mu_);  // null when --hal selects no sysfs backend
  std::unique_ptr<hal::PciSampler> pci_
      XPU_GUARDED_BY(parts_mu_);  // null when --hal selects no pci backend
  std::unique_ptr<kubelet::PodMapper> pods_
      XPU_GUARDED_BY(parts_mu_);  // null when the socket flag is empty
  std::unique_ptr<kubernetes::PodWatcher> watcher_
      XPU_GUARDED_BY(parts_mu_);  // null when no API server is used
  std::unique_ptr<http::WebServer> web_;
  // Each part's self-metrics, on the page beside self_metrics_ while the
  // part runs (Exposer::SetPart): kept when a reload rebuilds the part (its
  // counters go on), dropped with it when a reload switches it off, so
  // nothing it exported stays behind frozen. (The fault families both HAL
  // backends share stay in self_metrics_: one series each, and the raises
  // they count did happen.) Start and the reload thread.
  struct PartMetrics {
    std::shared_ptr<prometheus::Registry> hal = std::make_shared<prometheus::Registry>();
    std::shared_ptr<prometheus::Registry> pci = std::make_shared<prometheus::Registry>();
    std::shared_ptr<prometheus::Registry> kubelet = std::make_shared<prometheus::Registry>();
    std::shared_ptr<prometheus::Registry> apiserver = std::make_shared<prometheus::Registry>();
  };
  PartMetrics part_metrics_;
  // The parts' pointers, taken under parts_mu_ to be used outside it where
  // no reload can replace them (Start before the reloader runs, Stop after).
  struct Parts {
    hal::HalSampler* hal = nullptr;
    hal::PciSampler* pci = nullptr;
    kubelet::PodMapper* pods = nullptr;
    kubernetes::PodWatcher* watcher = nullptr;
  };
  // Puts each part's metrics on the page, or takes them off (and starts a
  // fresh registry for it) when the part is off.
  void PublishPartMetrics();

  // The reload thread and its queue.
  Mutex jobs_mu_;
  std::unique_ptr<ReloadJob> job_ XPU_GUARDED_BY(jobs_mu_);  // the next reload's requests
  bool reloader_started_ XPU_GUARDED_BY(jobs_mu_) = false;
  Worker::Alarm reload_wake_;
  Worker reloader_;  // last: stops first
};

}  // namespace xpu::app
