#pragma once

#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include <chrono>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "app/config.h"
#include "app/parts.h"
#include "app/status_page.h"
#include "catalog/selection.h"
#include "common/mutex.h"
#include "common/part.h"
#include "common/process_metrics.h"
#include "common/status.h"
#include "common/worker.h"
#include "exposition/exposer.h"
#include "exposition/metrics_endpoint.h"
#include "hal/kmsg/kmsg_sampler.h"
#include "hal/nvml/nvml_sampler.h"
#include "hal/pci/pci_sampler.h"
#include "hal/sysfs/hal_sampler.h"
#include "http/web_server.h"
#include "kubelet/pod_mapper.h"
#include "kubernetes/pod_watcher.h"
#include "sinks/device_tainter.h"
#include "sinks/node_reporter.h"
#include "store/device_registry.h"
#include "store/exemplars.h"
#include "store/metric_store.h"
#include "upstream/xdm_client.h"

namespace xpu::app {

// The whole exporter, wired: XdmClient and the parts of PartTable() (the HAL
// backends, the pod sources, the Node reporter) -> MetricStore and
// DeviceRegistry -> Exposer -> WebServer. Owns every part; its pages are in
// exporter_pages.cc. Start()/Stop() from
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
  // The probe listener's bound ports (--web.probe-listen-address; may be none).
  std::vector<int> probe_ports() const { return web_ ? web_->probe_ports() : std::vector<int>{}; }
  bool listening() const { return web_ && web_->listening(); }
  upstream::XdmClient* client() { return client_.get(); }
  // The configuration in force: the start's, then each good reload's.
  std::shared_ptr<const Config> config() const;
  // The configuration `a` last applied (built its part from, or re-applied):
  // the start's, then that of the last reload that changed one of its
  // settings. For tests; kRestart's is the start's for ever.
  std::shared_ptr<const Config> applied(Applier a) const;
  // What the running parts hold, read from them (not from the
  // configuration), and which part objects run: for tests that check that a
  // reload reached the part that applies a setting and rebuilt no other. A
  // part that is off has no value. After Start.
  struct InForce {
    const void* hal_part = nullptr;  // identities: a rebuilt part is a new one
    const void* pci_part = nullptr;
    const void* kmsg_part = nullptr;
    const void* nvml_part = nullptr;
    const void* pods_part = nullptr;
    const void* watcher_part = nullptr;
    const void* reporter_part = nullptr;
    const void* tainter_part = nullptr;
    std::optional<std::chrono::milliseconds> hal_interval;
    std::string hal_root;
    std::shared_ptr<const hal::FaultCatalog> hal_faults;
    std::optional<std::chrono::milliseconds> pci_interval;
    std::string pci_root;
    hal::PciFilter pci_filter;
    std::shared_ptr<const hal::FaultCatalog> pci_faults;
    std::optional<hal::KmsgSampler::Options> kmsg;
    std::shared_ptr<const hal::KmsgCatalog> kmsg_catalog;
    std::optional<hal::NvmlSampler::Options> nvml;
    std::shared_ptr<const hal::FaultCatalog> nvml_faults;
    std::optional<kubelet::PodMapperOptions> pods;
    std::optional<kubernetes::KubernetesOptions> watcher;
    std::string watcher_url;
    std::optional<sinks::NodeReporter::Options> reporter;
    std::optional<kubernetes::KubernetesOptions> reporter_kubernetes;
    std::optional<sinks::DeviceTainter::Options> tainter;
    upstream::XdmClient::Settings ingest;
    std::shared_ptr<const catalog::Catalog> store_catalog;
    std::shared_ptr<const http::WebConfig> web_config;
  };
  InForce in_force() const;

 private:
  struct ReloadJob;
  void ReloadLoop();
  // Queues a reload; `answer` is given once its outcome is known.
  std::future<Status> RequestReload(bool from_http);
  void RunReload(ReloadJob* job);
  // The parts a reload replaces (the rows `rebuild` marks), built from the
  // next configuration: a marked row with a null part is switched off.
  struct Replacement {
    std::vector<bool> rebuild;  // by row of PartTable()
    std::vector<std::unique_ptr<Part>> parts;
    std::vector<std::shared_ptr<prometheus::Registry>> metrics;
    std::vector<bool> fresh_metrics;  // marked rows whose metrics start afresh
    std::vector<Applier> applied;     // the appliers that ran
  };
  // Builds the parts of the marked rows (not started), each with its row's
  // registry in `next->metrics`; an unmarked row keeps its running part.
  Status BuildParts(const Config& cfg, const LoadedFiles& files, Replacement* next);
  // Stops the parts `next` replaces and starts its new ones, each taking
  // over from its predecessor; then puts them, `cfg` and `pending` in force.
  void SwapParts(Replacement* next, std::shared_ptr<const Config> cfg,
                 std::map<std::string, Config::Setting> pending,
                 std::shared_ptr<const catalog::Catalog> catalog);
  // The HAL backends that run, by name in the table's order ("sysfs,pci"),
  // or "none".
  std::string HalBackendsLocked() const XPU_REQUIRES(parts_mu_);
  // The running part of the row `name`, as its type; null when it is off.
  template <class T>
  T* Running(std::string_view name) const XPU_REQUIRES(parts_mu_) {
    for (size_t i = 0; i < kinds_.size(); ++i)
      if (kinds_[i].name == name)
        return parts_[i] ? dynamic_cast<T*>(parts_[i]->Working()) : nullptr;
    return nullptr;
  }
  // Which data is taken and shown: catalog, selection, devices, timing.
  void ApplyIngest(const Config& cfg, const LoadedFiles& files);
  void RecordReload(const Status& s);
  // Start's steps: the exporter's own gauges, and the pages it serves.
  void RegisterSelfMetrics();
  void AddRoutes(const std::string& telemetry_path);
  http::Response ReloadPage(const http::Request& req);
  http::Response Metrics(const http::Request& req);
  http::Response Ready();
  http::Response StatusPage();
  http::Response ConfigPage();
  // The state /status and the landing page show, gathered from every part.
  StatusReport Report();

  mutable Mutex parts_mu_;
  // The configuration in force, immutable: a reload builds the next one
  // (restart-only settings at their running values) and swaps it in with
  // the parts built from it, under parts_mu_ (read by scrapes, /status,
  // /config). Each applier's last applied one beside it, for tests.
  std::shared_ptr<const Config> cfg_ XPU_GUARDED_BY(parts_mu_);
  std::shared_ptr<const Config> applied_[kApplierCount] XPU_GUARDED_BY(parts_mu_);
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
  std::unique_ptr<exposition::MetricsEndpoint> metrics_;  // the telemetry path
  std::unique_ptr<upstream::XdmClient> client_;
  // The table of parts, and the running part of each row (null while the
  // configuration leaves it off); a reload replaces them under parts_mu_.
  const std::vector<PartKind>& kinds_ = PartTable();
  std::vector<std::unique_ptr<Part>> parts_ XPU_GUARDED_BY(parts_mu_);
  std::unique_ptr<http::WebServer> web_;
  // Each part's self-metrics, on the page beside self_metrics_ while the
  // part runs (Exposer::SetPart): kept when a reload rebuilds the part (its
  // counters go on), dropped with it when a reload switches it off, so
  // nothing it exported stays behind frozen. (The fault families both HAL
  // backends share stay in self_metrics_: one series each, and the raises
  // they count did happen.) Start and the reload thread.
  // By row of the table.
  std::vector<std::shared_ptr<prometheus::Registry>> part_metrics_;
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
