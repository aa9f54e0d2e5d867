#include "app/exporter.h"

#include <google/protobuf/util/json_util.h>
#include <prometheus/gauge.h>
#include <spdlog/spdlog.h>

#include <nlohmann/json.hpp>

#include "common/duration.h"
#include "http/headers.h"
#include "version.h"

namespace xpu::app {

// The requests one reload answers: all that queued up while the previous
// one ran (one fresh read of the files serves them all, so a client posting
// in a loop costs one reload at a time, not a backlog).
struct Exporter::ReloadJob {
  bool from_http = false;  // one was asked by an HTTP worker: see RunReload
  std::vector<std::promise<Status>> answers;
  bool answered = false;
  void Answer(const Status& s) {
    if (answered) return;
    answered = true;
    for (std::promise<Status>& a : answers) a.set_value(s);
  }
};

// The parts a reload replaces, built from the next configuration: a flag
// set with a null part switches that part off.
struct Exporter::Replacement {
  bool hal_changed = false, pods_changed = false, watcher_changed = false;
  // The reporter names the HAL backends that run: rebuilt with them too.
  bool reporter_changed = false;
  std::unique_ptr<hal::HalSampler> hal;
  std::unique_ptr<hal::PciSampler> pci;
  std::unique_ptr<hal::KmsgSampler> kmsg;
  std::unique_ptr<kubelet::PodMapper> pods;
  std::unique_ptr<kubernetes::PodWatcher> watcher;
  std::unique_ptr<kubernetes::NodeReporter> reporter;
  std::vector<Applier> applied;  // the appliers that ran
};

Exporter::Exporter(Config cfg) : cfg_(std::make_shared<const Config>(std::move(cfg))) {
  devices_.SetPciFamilyWriter(hal::PciFamilies);  // the pci backend's families, on its views
}

std::shared_ptr<const Config> Exporter::config() const {
  MutexLock lock(parts_mu_);
  return cfg_;
}

std::shared_ptr<const Config> Exporter::applied(Applier a) const {
  MutexLock lock(parts_mu_);
  return applied_[static_cast<int>(a)];
}

Exporter::InForce Exporter::in_force() const {
  InForce f;
  f.ingest = client_->settings();
  f.store_catalog = store_->catalog();
  f.web_config = web_->config();
  MutexLock lock(parts_mu_);
  f.hal_part = hal_.get();
  f.pci_part = pci_.get();
  f.kmsg_part = kmsg_.get();
  f.pods_part = pods_.get();
  f.watcher_part = watcher_.get();
  f.reporter_part = reporter_.get();
  if (hal_) {
    f.hal_interval = hal_->interval();
    f.hal_root = hal_->backend_root();
    f.hal_faults = hal_->fault_catalog();
  }
  if (pci_) {
    f.pci_interval = pci_->interval();
    f.pci_root = pci_->scanner().root();
    f.pci_filter = pci_->scanner().filter();
    f.pci_faults = pci_->fault_catalog();
  }
  if (kmsg_) {
    f.kmsg = kmsg_->options();
    f.kmsg_catalog = kmsg_->catalog();
  }
  if (pods_) f.pods = pods_->options();
  if (watcher_) {
    f.watcher = watcher_->options();
    f.watcher_url = watcher_->base_url();
  }
  if (reporter_) {
    f.reporter = reporter_->options();
    f.reporter_kubernetes = reporter_->kubernetes();
  }
  return f;
}

Exporter::~Exporter() { Stop(); }

Status Exporter::BuildHal(const Config& cfg, const LoadedFiles& files,
                          std::unique_ptr<hal::HalSampler>* hal,
                          std::unique_ptr<hal::PciSampler>* pci,
                          std::unique_ptr<hal::KmsgSampler>* kmsg) {
  const std::shared_ptr<const hal::FaultCatalog>& faults = files.faults;
  const hal::HalSelection& hal_sel = cfg.parsed->hal;
  std::unique_ptr<hal::HalBackend> backend;
  if (hal_sel.automatic || hal_sel.sysfs) {
    if (Status s = hal::MakeBackend(hal_sel.sysfs ? "sysfs" : "auto", cfg.hal.root, &backend);
        !s.ok())
      return s;
  }
  if (backend) {
    spdlog::info("HAL backend {} at {}, every {} ms", backend->name(), cfg.hal.root,
                 cfg.hal.interval.count());
    *hal =
        std::make_unique<hal::HalSampler>(std::move(backend), faults, cfg.hal.interval, &devices_,
                                          part_metrics_.hal.get(), &exemplars_, &self_metrics_);
  } else {
    spdlog::info("HAL sysfs backend off (--hal={}, {})", cfg.hal.backend, cfg.hal.root);
  }
  if (hal_sel.automatic || hal_sel.pci) {
    hal::PciScanner scanner(cfg.hal.pci_root, cfg.parsed->pci_filter);
    std::vector<hal::PciDevice> found;
    const bool usable = scanner.Scan(&found).ok();
    // auto: only where there is something to watch.
    if (hal_sel.pci || (usable && !found.empty())) {
      spdlog::info("HAL backend pci at {}: {} device(s), every {} ms", cfg.hal.pci_root,
                   found.size(), cfg.hal.interval.count());
      *pci =
          std::make_unique<hal::PciSampler>(std::move(scanner), faults, cfg.hal.interval, &devices_,
                                            part_metrics_.pci.get(), &exemplars_, &self_metrics_);
    }
  }
  // auto: where the kernel log can be read (CAP_SYSLOG under dmesg_restrict).
  const bool kmsg_readable = hal_sel.automatic && hal::KmsgReadable(cfg.hal.kmsg_path);
  if (hal_sel.automatic && !kmsg_readable)
    spdlog::info("HAL kmsg backend off: {} cannot be read (--hal=kmsg would retry)",
                 cfg.hal.kmsg_path);
  if (hal_sel.kmsg || kmsg_readable) {
    spdlog::info("HAL backend kmsg at {}", cfg.hal.kmsg_path);
    *kmsg = std::make_unique<hal::KmsgSampler>(
        hal::KmsgSampler::Options{
            cfg.hal.kmsg_path, cfg.hal.kmsg_user_records, cfg.hal.interval,
            cfg.hal.state_dir.empty() ? "" : cfg.hal.state_dir + "/kmsg-states.json"},
        files.kmsg, faults, &devices_, part_metrics_.kmsg.get(), &exemplars_);
  }
  return Status::Ok();
}

std::unique_ptr<kubelet::PodMapper> Exporter::BuildPods(const Config& cfg) {
  if (cfg.kubelet.socket.empty()) return nullptr;
  return std::make_unique<kubelet::PodMapper>(cfg.kubelet, cfg.parsed->dra, &devices_,
                                              part_metrics_.kubelet.get());
}

std::unique_ptr<kubernetes::PodWatcher> Exporter::BuildWatcher(const Config& cfg) {
  std::string why_off;
  const std::string api = kubernetes::ResolveApiServer(cfg.kubernetes, &why_off);
  if (api.empty()) {
    spdlog::info("kubernetes: no API-server watch: {}", why_off);
    return nullptr;
  }
  return std::make_unique<kubernetes::PodWatcher>(cfg.kubernetes, cfg.parsed->labels, api,
                                                  &devices_, part_metrics_.apiserver.get());
}

std::unique_ptr<kubernetes::NodeReporter> Exporter::BuildReporter(
    const Config& cfg, kubernetes::FaultSources sources) {
  if (!cfg.node_health.condition && !cfg.node_health.events) return nullptr;
  std::string why_off;
  const std::string api = kubernetes::ResolveApiServer(cfg.kubernetes, &why_off);
  if (api.empty()) {
    spdlog::warn("kubernetes: no node condition or Events: {}", why_off);
    return nullptr;
  }
  kubernetes::NodeReporter::Options o;
  o.condition = cfg.node_health.condition;
  o.events = cfg.node_health.events;
  o.recover_hold = cfg.node_health.hold;
  o.sources = sources;
  return std::make_unique<kubernetes::NodeReporter>(cfg.kubernetes, o, api, &devices_,
                                                    part_metrics_.nodehealth.get());
}

void Exporter::PublishPartMetrics() {
  auto publish = [&](const char* name, bool on, std::shared_ptr<prometheus::Registry>* metrics) {
    if (on) {
      exposer_->SetPart(name, *metrics);
    } else {
      exposer_->SetPart(name, nullptr);
      *metrics = std::make_shared<prometheus::Registry>();  // a later part starts afresh
    }
  };
  MutexLock lock(parts_mu_);
  publish("hal", hal_ != nullptr, &part_metrics_.hal);
  publish("pci", pci_ != nullptr, &part_metrics_.pci);
  publish("kmsg", kmsg_ != nullptr, &part_metrics_.kmsg);
  publish("kubelet", pods_ != nullptr, &part_metrics_.kubelet);
  publish("apiserver", watcher_ != nullptr, &part_metrics_.apiserver);
  publish("nodehealth", reporter_ != nullptr, &part_metrics_.nodehealth);
}

void Exporter::ApplyIngest(const Config& cfg, const LoadedFiles& files) {
  const catalog::Catalog& cat = *files.catalog;
  const catalog::Selection& sel = cfg.parsed->selection;
  upstream::XdmClient::IngestRules rules{files.catalog,
                                         sel.ExcludedIds(cat),
                                         cfg.xdm.keep_unknown && sel.Allows("xpu_unknown_metric"),
                                         {cfg.xdm.devices.begin(), cfg.xdm.devices.end()}};
  // The client first: it returns once the message being ingested is stored,
  // and no message decoded after it adds what is no longer selected. Then
  // the store: from here on it names series by the new catalog, and what is
  // no longer selected goes from it, for good.
  const std::set<int32_t> devices = rules.devices;
  const std::unordered_set<uint32_t> excluded = rules.excluded_ids;
  const bool keep_unknown = rules.keep_unknown;
  client_->Reconfigure(std::move(rules), cfg.xdm.interval, cfg.xdm.stale_after);
  store_->SetCatalog(files.catalog);
  const size_t dropped = store_->Drop([&](int32_t minor, uint32_t id) {
    if (excluded.count(id) != 0) return true;
    if (!devices.empty() && devices.count(minor) == 0) return true;
    return !keep_unknown && cat.Find(id) == nullptr;
  });
  if (dropped > 0) spdlog::info("dropped {} series no longer selected", dropped);
  devices_.SetDeviceFilter(devices);
  if (sel.everything()) {
    exposer_->SetFamilyFilter(nullptr);
  } else {
    exposer_->SetFamilyFilter(
        [sel](const std::string& name) { return sel.Allows(name); });  // a copy: immutable
    spdlog::info("metric selection: {} of {} catalog families exported",
                 cat.entries().size() - excluded.size(), cat.entries().size());
  }
  if (!devices.empty()) spdlog::info("exporting {} device(s) only (--xdm.devices)", devices.size());
}

void Exporter::RegisterSelfMetrics() {
  identity_missing_ = &prometheus::BuildGauge()
                           .Name("xpu_exporter_device_identity_missing")
                           .Help(
                               "1 while device series go out without uuid and model: XDM sent "
                               "data but no device list within 10 s.")
                           .Register(self_metrics_)
                           .Add({});
  reload_ok_ = &prometheus::BuildGauge()
                    .Name("xpu_exporter_config_last_reload_successful")
                    .Help("Whether the last configuration reload (SIGHUP, /-/reload) succeeded.")
                    .Register(self_metrics_)
                    .Add({});
  reload_ok_->Set(1);
  reload_time_ =
      &prometheus::BuildGauge()
           .Name("xpu_exporter_config_last_reload_success_timestamp_seconds")
           .Help("When the configuration was last loaded successfully (start or reload).")
           .Register(self_metrics_)
           .Add({});
  reload_time_->SetToCurrentTime();
  restart_pending_ = &prometheus::BuildGauge()
                          .Name("xpu_exporter_config_restart_pending")
                          .Help(
                              "Settings changed by a reload that take effect only after a "
                              "restart (named in /config).")
                          .Register(self_metrics_)
                          .Add({});
}

void Exporter::AddRoutes(const std::string& telemetry_path) {
  web_->Route(
      telemetry_path, {"GET"}, [this](const http::Request& r) { return Metrics(r); },
      /*gzip=*/true);
  web_->Route("/", {"GET"}, [this](const http::Request&) {
    http::Response r;
    r.content_type = "text/html; charset=utf-8";
    r.body = LandingPageHtml(Report(), config()->telemetry_path);
    return r;
  });
  web_->Route("/-/healthy", {"GET"},
              [](const http::Request&) { return http::Response::Text(200, "Healthy\n"); });
  web_->Route("/-/ready", {"GET"}, [this](const http::Request&) { return Ready(); });
  web_->Route("/-/reload", {"POST", "PUT"},
              [this](const http::Request& r) { return ReloadPage(r); });
  web_->Route("/status", {"GET"}, [this](const http::Request&) { return StatusPage(); });
  web_->Route("/config", {"GET"}, [this](const http::Request&) { return ConfigPage(); });
}

Status Exporter::Start() {
  std::shared_ptr<const Config> given = config();
  if (!given->parsed) {  // a Config not made by ParseFlags (tests, tools)
    auto validated = std::make_shared<Config>(*given);
    ParsedConfig parsed;
    if (Status s = Validate(*validated, &parsed); !s.ok()) return s;
    validated->parsed = std::move(parsed);
    given = std::move(validated);
  }
  const Config& cfg = *given;
  LoadedFiles files;
  if (Status s = LoadFiles(cfg, &files); !s.ok()) return s;
  // The parts are built outside parts_mu_ (BuildHal scans sysfs) and
  // started below, after the web server, through these pointers: until the
  // reloader runs, nothing else replaces them.
  Parts built;
  {
    std::unique_ptr<hal::HalSampler> hal;
    std::unique_ptr<hal::PciSampler> pci;
    std::unique_ptr<hal::KmsgSampler> kmsg;
    if (Status s = BuildHal(cfg, files, &hal, &pci, &kmsg); !s.ok()) return s;
    std::unique_ptr<kubelet::PodMapper> pods = BuildPods(cfg);
    std::unique_ptr<kubernetes::PodWatcher> watcher = BuildWatcher(cfg);
    std::unique_ptr<kubernetes::NodeReporter> reporter =
        BuildReporter(cfg, {hal != nullptr, pci != nullptr, kmsg != nullptr});
    built = Parts{hal.get(), pci.get(), kmsg.get(), pods.get(), watcher.get(), reporter.get()};
    MutexLock lock(parts_mu_);
    cfg_ = given;
    for (std::shared_ptr<const Config>& a : applied_) a = given;
    catalog_ = files.catalog;
    hal_ = std::move(hal);
    pci_ = std::move(pci);
    kmsg_ = std::move(kmsg);
    pods_ = std::move(pods);
    watcher_ = std::move(watcher);
    reporter_ = std::move(reporter);
  }
  prometheus::BuildGauge()
      .Name("xpu_exporter_build_info")
      .Help("xpu-exporter's version, revision and node name; always 1.")
      .Register(self_metrics_)
      .Add({{"version", kVersion}, {"revision", kRevision}, {"node", cfg.kubernetes.node_name}})
      .Set(1);
  store_ = std::make_unique<store::MetricStore>(
      files.catalog, store::MetricStore::Options{cfg.effective_stale_after(), cfg.max_series,
                                                 cfg.xdm.max_devices, store::kIdentityWait});
  store_->FollowDevices(&devices_);
  RegisterSelfMetrics();
  exposer_ = std::make_unique<exposition::Exposer>(store_.get(), &self_metrics_);
  exposer_->AddCollectable(&devices_);
  data_age_ = std::make_unique<store::DataAgeMetrics>(store_.get());
  exposer_->AddCollectable(data_age_.get());
  exposer_->AddCollectable(&self_metrics_);
  exposer_->AddCollectable(&process_metrics_);
  exposer_->SetExemplars(&exemplars_);
  metrics_ = std::make_unique<MetricsEndpoint>(exposer_.get(), &self_metrics_);
  client_ = std::make_unique<upstream::XdmClient>(cfg.xdm, files.catalog, store_.get(), &devices_,
                                                  &self_metrics_);
  ApplyIngest(cfg, files);  // selection and devices, before any thread runs

  http::WebOptions wo = cfg.web;
  wo.probe_paths = {"/-/healthy", "/-/ready"};
  web_ = std::make_unique<http::WebServer>(wo);
  AddRoutes(cfg.telemetry_path);
  exposer_->AddCollectable(web_->metrics());  // before any scrape can run
  PublishPartMetrics();
  Status s = web_->Start();
  if (!s.ok()) return s;
  client_->Start();
  if (built.hal) built.hal->Start();
  if (built.pci) built.pci->Start();
  if (built.kmsg) built.kmsg->Start();
  if (built.pods) built.pods->Start();
  if (built.watcher) built.watcher->Start();
  if (built.reporter) built.reporter->Start();
  {
    MutexLock lock(jobs_mu_);
    reloader_started_ = true;
  }
  reloader_.Start([this] { ReloadLoop(); });
  return Status::Ok();
}

std::future<Status> Exporter::RequestReload(bool from_http) {
  std::promise<Status> promise;
  std::future<Status> answer = promise.get_future();
  {
    // A request queued after the loop's last look would never be answered.
    MutexLock lock(jobs_mu_);
    if (!reloader_started_ || reloader_.stopping()) {
      promise.set_value(Status::Unavailable("not running"));
      return answer;
    }
    if (!job_) job_ = std::make_unique<ReloadJob>();
    job_->from_http = job_->from_http || from_http;
    job_->answers.push_back(std::move(promise));
  }
  reloader_.Ring(&reload_wake_);
  return answer;
}

void Exporter::ReloadLoop() {
  for (;;) {
    std::unique_ptr<ReloadJob> job;
    {
      MutexLock lock(jobs_mu_);
      job = std::move(job_);
    }
    if (job) RunReload(job.get());
    if (!reloader_.SleepFor(std::chrono::hours(24), &reload_wake_)) break;
  }
  MutexLock lock(jobs_mu_);
  if (job_) job_->Answer(Status::Unavailable("shutting down"));
  job_.reset();
}

Status Exporter::Reload() { return RequestReload(/*from_http=*/false).get(); }

void Exporter::RecordReload(const Status& s) {
  reload_ok_->Set(s.ok() ? 1 : 0);
  if (s.ok()) reload_time_->SetToCurrentTime();
  MutexLock lock(parts_mu_);
  last_reload_error_ = s.ok() ? "" : s.message();
}

void Exporter::RunReload(ReloadJob* job) {
  auto fail = [&](const Status& s) {
    spdlog::error("reload: kept the configuration in force: {}", s.message());
    RecordReload(s);
    job->Answer(s);
  };
  // Everything that can fail comes first; then nothing can. The next
  // configuration is whole: restart-only settings at their running values.
  const std::shared_ptr<const Config> running = config();
  auto fresh = std::make_shared<Config>();
  std::map<std::string, Config::Setting> pending;
  if (Status s = Reparse(*running, fresh.get(), &pending); !s.ok()) return fail(s);
  LoadedFiles files;
  if (Status s = LoadFiles(*fresh, &files); !s.ok()) return fail(s);
  auto changed = [&](Applier a) {
    for (const auto& [key, st] : fresh->settings) {
      if (AppliedBy(key) != a) continue;
      auto old = running->settings.find(key);
      if (old == running->settings.end() || old->second.values != st.values) return true;
    }
    return false;
  };
  Replacement next;
  next.applied = {Applier::kIngest, Applier::kLog};  // cheap: always applied
  // A fault catalog file is read again: its contents may have changed.
  // A catalog file is read again: its contents may have changed.
  next.hal_changed = changed(Applier::kHal) || !fresh->hal.fault_catalog_file.empty() ||
                     !fresh->hal.kmsg_catalog_file.empty();
  if (next.hal_changed) {
    if (Status s = BuildHal(*fresh, files, &next.hal, &next.pci, &next.kmsg); !s.ok())
      return fail(s);
    next.applied.push_back(Applier::kHal);
  }
  // The web config: auth, headers and TLS files change at once (each later
  // handshake takes the new certificate; the listeners stay). Switching TLS
  // on or off would need new listeners: restart-only.
  const bool web_changed = !running->web_config_file.empty() || !fresh->web_config_file.empty();
  if (web_changed) {
    if (web_->NeedsRestart(fresh->web.web_config))
      pending["web.config.file"] = Config::Setting{{"tls_server_config on/off"}, "file"};
    if (Status s = web_->Reload(fresh->web.web_config); !s.ok()) return fail(s);
    next.applied.push_back(Applier::kWebConfig);
  }

  spdlog::set_level(spdlog::level::from_str(fresh->log_level));
  ApplyIngest(*fresh, files);
  next.pods_changed = changed(Applier::kPods);
  next.watcher_changed = changed(Applier::kWatcher);
  if (next.pods_changed) {
    next.pods = BuildPods(*fresh);
    next.applied.push_back(Applier::kPods);
  }
  if (next.watcher_changed) {
    next.watcher = BuildWatcher(*fresh);
    next.applied.push_back(Applier::kWatcher);
  }
  // The reporter names the HAL's backends and uses the API server's settings.
  const bool node_health_changed = changed(Applier::kNodeHealth);
  next.reporter_changed = next.watcher_changed || next.hal_changed || node_health_changed;
  if (node_health_changed) next.applied.push_back(Applier::kNodeHealth);
  if (next.reporter_changed) {
    // What it shows changes with what is on: a fresh registry, so that a
    // condition switched off leaves no gauge behind (the old reporter's
    // registry stays on the page until it has stopped, in SwapParts).
    if (!(running->node_health == fresh->node_health))
      part_metrics_.nodehealth = std::make_shared<prometheus::Registry>();
    kubernetes::FaultSources sources;
    if (next.hal_changed) {
      sources = {next.hal != nullptr, next.pci != nullptr, next.kmsg != nullptr};
    } else {
      MutexLock lock(parts_mu_);
      sources = {hal_ != nullptr, pci_ != nullptr, kmsg_ != nullptr};
    }
    next.reporter = BuildReporter(*fresh, sources);
  }
  const std::string level = fresh->log_level;
  const size_t waiting = pending.size();
  for (const auto& [key, st] : pending)
    spdlog::warn("reload: --{}{} changed; it takes effect after a restart", key,
                 key == "web.config.file" ? " (TLS on or off)" : "");
  SwapParts(&next, std::move(fresh), std::move(pending), files.catalog);
  PublishPartMetrics();  // a part switched off takes its metrics with it
  restart_pending_->Set(static_cast<double>(waiting));
  spdlog::info("reload: configuration reloaded (log level {}, {} setting(s) waiting for a restart)",
               level, waiting);
  RecordReload(Status::Ok());
  job->Answer(Status::Ok());
}

void Exporter::SwapParts(Replacement* next, std::shared_ptr<const Config> cfg,
                         std::map<std::string, Config::Setting> pending,
                         std::shared_ptr<const catalog::Catalog> catalog) {
  // The old parts stop outside the lock (joining threads).
  std::unique_ptr<hal::HalSampler> old_hal;
  std::unique_ptr<hal::PciSampler> old_pci;
  std::unique_ptr<hal::KmsgSampler> old_kmsg;
  std::unique_ptr<kubelet::PodMapper> old_pods;
  std::unique_ptr<kubernetes::PodWatcher> old_watcher;
  std::unique_ptr<kubernetes::NodeReporter> old_reporter;
  {
    MutexLock lock(parts_mu_);
    if (next->hal_changed) {
      old_hal = std::exchange(hal_, nullptr);
      old_pci = std::exchange(pci_, nullptr);
      old_kmsg = std::exchange(kmsg_, nullptr);
    }
    if (next->pods_changed) old_pods = std::exchange(pods_, nullptr);
    if (next->watcher_changed) old_watcher = std::exchange(watcher_, nullptr);
    if (next->reporter_changed) old_reporter = std::exchange(reporter_, nullptr);
  }
  if (old_hal) old_hal->Stop();
  if (old_pci) old_pci->Stop();
  if (old_kmsg) old_kmsg->Stop();
  if (old_pods) old_pods->Stop();
  if (old_watcher) old_watcher->Stop();
  if (old_reporter) old_reporter->Stop();
  // Raises the old reporter had not read or sent yet go out from the new
  // one, under the same rate limit; what it knew of the Node stays known.
  if (next->reporter && old_reporter) next->reporter->Seed(old_reporter->handover());
  // Faults that stay active are not raised again by the new samplers.
  if (next->hal && old_hal) next->hal->SeedFaultState(old_hal->fault_state());
  if (next->pci && old_pci) {
    next->pci->SeedFaultState(old_pci->fault_state());
    next->pci->SeedTracker(old_pci->tracker_state());
  }
  // The same log: the new sampler goes on after the old one's last record.
  if (next->kmsg && old_kmsg && next->kmsg->options().path == old_kmsg->options().path)
    next->kmsg->Seed(old_kmsg->state());
  if (next->hal_changed) {
    if (!next->hal) devices_.CloseSource(store::DeviceRegistry::kSysfs);
    if (!next->pci) devices_.CloseSource(store::DeviceRegistry::kPci);
    if (!next->kmsg) devices_.CloseSource(store::DeviceRegistry::kKmsg);
  }
  if (next->pods_changed && !next->pods) devices_.SetPodAssignments({});
  if (next->watcher_changed && !next->watcher) {
    devices_.SetPodMetadata({});
    devices_.SetContainerQuotas({});
    devices_.SetDeviceShares({});
  }
  if (next->hal) next->hal->Start();
  if (next->pci) next->pci->Start();
  if (next->kmsg) next->kmsg->Start();
  if (next->pods) next->pods->Start();
  if (next->watcher) next->watcher->Start();
  if (next->reporter) next->reporter->Start();

  MutexLock lock(parts_mu_);
  if (next->hal_changed) {
    hal_ = std::move(next->hal);
    pci_ = std::move(next->pci);
    kmsg_ = std::move(next->kmsg);
  }
  if (next->pods_changed) pods_ = std::move(next->pods);
  if (next->watcher_changed) watcher_ = std::move(next->watcher);
  if (next->reporter_changed) reporter_ = std::move(next->reporter);
  catalog_ = std::move(catalog);
  for (Applier a : next->applied) applied_[static_cast<int>(a)] = cfg;
  cfg_ = std::move(cfg);
  pending_restart_ = std::move(pending);
}

http::Response Exporter::ReloadPage(const http::Request&) {
  // Prometheus's convention: off unless asked for, 403 then.
  if (!config()->enable_lifecycle)
    return http::Response::Text(403, "Lifecycle API is not enabled (--web.enable-lifecycle).\n");
  std::future<Status> answer = RequestReload(/*from_http=*/true);
  if (answer.wait_for(std::chrono::seconds(60)) != std::future_status::ready)
    return http::Response::Text(503, "reload still running after 60 s; see the log\n");
  Status s = answer.get();
  if (!s.ok()) return http::Response::Text(500, "failed to reload config: " + s.message() + "\n");
  return http::Response::Text(200, "configuration reloaded\n");
}

void Exporter::Stop() {
  reloader_.Stop();  // from here on no reload replaces a part
  if (client_) client_->Stop();
  // The parts stay in place (/status still reads them) and are stopped
  // outside parts_mu_: their threads join, and the reloader, the only one
  // that replaces them, has stopped.
  Parts parts;
  {
    MutexLock lock(parts_mu_);
    parts =
        Parts{hal_.get(), pci_.get(), kmsg_.get(), pods_.get(), watcher_.get(), reporter_.get()};
  }
  if (parts.hal) parts.hal->Stop();
  if (parts.pci) parts.pci->Stop();
  if (parts.kmsg) parts.kmsg->Stop();
  if (parts.pods) parts.pods->Stop();
  if (parts.watcher) parts.watcher->Stop();
  if (parts.reporter) parts.reporter->Stop();
  if (web_) web_->Stop();
}

http::Response Exporter::Metrics(const http::Request& req) {
  http::Response r = metrics_->Serve(req);
  // Device series waited kIdentityWait for the device list and went out
  // without uuid and model (they will change labels when it comes): said
  // once, and shown as a gauge until the list arrives.
  const bool expired = store_->identity_wait_expired();
  identity_missing_->Set(expired ? 1 : 0);
  if (expired && identity_said_.Raise("identity"))
    spdlog::warn(
        "XDM sent data but no device list (ListAndWatch) for {} s: device series go out "
        "without uuid and model until it comes",
        std::chrono::duration_cast<std::chrono::seconds>(store::kIdentityWait).count());
  if (!expired) identity_said_.Clear("identity");
  return r;
}

http::Response Exporter::ConfigPage() {
  using Json = nlohmann::ordered_json;
  Json j;
  auto value = [](const std::string& key, const Config::Setting& st) {
    return st.values.size() == 1 && key != "web.listen-address" ? Json(st.values[0])
                                                                : Json(st.values);
  };
  Json settings = Json::object();
  std::shared_ptr<const http::WebConfig> wc;
  std::string reload_error;
  {
    MutexLock lock(parts_mu_);
    for (const auto& [key, st] : cfg_->settings) {
      Json s = {{"value", value(key, st)},
                {"source", st.source},
                {"reload", NeedsRestart(key) ? "restart" : "live"},
                {"appliedBy", ApplierName(AppliedBy(key))}};
      // A reload read a new value that only a restart applies.
      auto pending = pending_restart_.find(key);
      if (pending != pending_restart_.end())
        s["pendingRestart"] = {{"value", value(key, pending->second)},
                               {"source", pending->second.source}};
      settings[key] = s;
    }
    wc = cfg_->web.web_config;
    reload_error = last_reload_error_;
  }
  j["settings"] = settings;
  j["lastReload"] = {{"successful", reload_error.empty()},
                     {"error", reload_error.empty() ? Json(nullptr) : Json(reload_error)}};
  if (wc) {
    Json w;
    w["path"] = wc->path;
    if (wc->tls) {
      const http::TlsConfig& t = *wc->tls;
      // Inline PEM is said to be there, never shown (the key is a secret).
      w["tls"] = {{"certFile", t.cert_file},
                  {"keyFile", t.key_file},
                  {"clientCaFile", t.client_ca_file},
                  {"certInline", !t.cert_pem.empty()},
                  {"keyInline", !t.key_pem.empty()},
                  {"clientCaInline", !t.client_ca_pem.empty()},
                  {"clientAuthType", http::Name(t.client_auth)},
                  {"clientAllowedSans", t.client_allowed_sans},
                  {"minVersion", http::Name(t.min_version)},
                  {"maxVersion", http::Name(t.max_version)},
                  {"cipherSuites", t.cipher_suites},
                  {"preferServerCipherSuites", t.prefer_server_cipher_suites},
                  {"curvePreferences", t.curve_preferences}};
    } else {
      w["tls"] = nullptr;
    }
    Json users = Json::object();
    for (const auto& [user, hash] : wc->users) users[user] = "<secret>";  // never the hash
    w["basicAuthUsers"] = users;
    Json headers = Json::object();
    for (const auto& [k, v] : wc->headers) headers[k] = v;
    w["headers"] = headers;
    w["http2"] = wc->http2;
    const std::chrono::nanoseconds every = wc->rate_limit.interval;
    w["rateLimit"] = {
        {"interval",
         every % std::chrono::milliseconds(1) == std::chrono::nanoseconds(0)
             ? FormatDuration(std::chrono::duration_cast<std::chrono::milliseconds>(every))
             : std::to_string(every.count()) + "ns"},
        {"burst", wc->rate_limit.burst}};
    j["webConfig"] = w;
  } else {
    j["webConfig"] = nullptr;
  }
  const upstream::UpstreamInfo info = client_->info();
  if (info.config) {
    std::string js;
    google::protobuf::util::JsonPrintOptions opts;
    opts.always_print_primitive_fields = true;
    (void)google::protobuf::util::MessageToJsonString(*info.config, &js, opts);
    j["xdmConfig"] = Json::parse(js, nullptr, false);
  } else {
    j["xdmConfig"] = nullptr;
  }
  http::Response r;
  r.content_type = "application/json";
  r.body = j.dump(2, ' ', false, Json::error_handler_t::replace) + "\n";
  return r;
}

http::Response Exporter::Ready() {
  const auto now = std::chrono::steady_clock::now();
  auto fresh = [&](std::optional<std::chrono::steady_clock::time_point> t,
                   std::chrono::milliseconds window) { return t && now - *t < window; };
  if (fresh(store_->last_update(), store_->stale_after()))
    return http::Response::Text(200, "Ready: data from XDM\n");
  MutexLock lock(parts_mu_);
  if (hal_ && fresh(hal_->last_success(), cfg_->hal.interval * 3))
    return http::Response::Text(200, "Ready: XDM stale, HAL sampling\n");
  std::string why = store_->last_update()
                        ? "Not ready: XDM data is stale (upstream mode " +
                              std::string(upstream::ModeName(client_->mode())) + ")"
                        : "Not ready: no data from XDM yet";
  why += hal_ ? "; HAL not sampling\n" : "; HAL off\n";
  lock.Unlock();
  return http::Response::Text(503, why);
}

http::Response Exporter::StatusPage() {
  http::Response r;
  r.content_type = "application/json";
  r.body = StatusJson(Report());
  return r;
}

StatusReport Exporter::Report() {
  using SteadyClock = std::chrono::steady_clock;
  const auto now = SteadyClock::now();
  const auto secs = [](SteadyClock::duration d) {
    return std::chrono::duration<double>(d).count();
  };
  StatusReport r;
  r.version = kVersion;
  r.revision = kRevision;
  r.uptime_seconds = secs(now - started_);
  r.upstream = client_->state();
  r.info = client_->info();
  std::shared_ptr<const catalog::Catalog> catalog;
  {
    MutexLock lock(parts_mu_);
    r.xdm_endpoint = cfg_->xdm.xdm_endpoint;
    catalog = catalog_;
    if (hal_) {
      r.hal_backend = hal_->backend_name();
      r.hal_up = hal_->up();
      if (auto last = hal_->last_success()) r.hal_seconds_since_sample = secs(now - *last);
    }
    if (pci_) {  // "sysfs,pci": up only while every backend is
      r.hal_backend = hal_ ? r.hal_backend + ",pci" : "pci";
      r.hal_up = (!hal_ || r.hal_up) && pci_->up();
    }
    if (kmsg_) {
      r.hal_backend = hal_ || pci_ ? r.hal_backend + ",kmsg" : "kmsg";
      r.hal_up = (!(hal_ || pci_) || r.hal_up) && kmsg_->up();
    }
  }

  // The table's four values, from one snapshot; a catalog without one of
  // these families leaves its column empty.
  struct Column {
    const catalog::Entry* entry;
    std::optional<double> DeviceReport::*field;
  };
  const Column columns[] = {
      {catalog->FindByName("xpu_utilization_ratio"), &DeviceReport::utilization},
      {catalog->FindByName("xpu_memory_used_bytes"), &DeviceReport::memory_used_bytes},
      {catalog->FindByName("xpu_memory_total_bytes"), &DeviceReport::memory_total_bytes},
      {catalog->FindByName("xpu_temperature_celsius"), &DeviceReport::temperature_celsius},
  };
  std::map<int32_t, DeviceReport> devices;
  auto device = [&](int32_t minor) -> DeviceReport& {
    DeviceReport& d = devices[minor];
    d.minor = minor;
    return d;
  };
  // Devices that only the data knows of (ListAndWatch not answered yet) too.
  for (const store::MetricStore::DeviceUpdate& u : store_->device_updates())
    device(u.minor).seconds_since_sample = secs(now - u.updated);
  const store::Snapshot snap = store_->Snap(now);
  for (size_t i = 0; i < snap.values.size(); ++i) {
    const store::Row& row = snap.set->rows[i];
    if (!row.instance.empty()) continue;
    for (const Column& c : columns) {
      if (c.entry != nullptr && c.entry->id == row.metric_id)
        device(row.minor).*c.field = snap.values[i];
    }
  }
  for (const store::DeviceInfo& info : devices_.Devices()) {
    DeviceReport& d = device(info.minor);
    d.uuid = info.uuid;
    d.model = info.model;
    d.xdm_healthy = info.health == "Healthy";
    d.topology = info.topology;
  }
  for (store::HalDeviceView& h : devices_.HalDevices()) {
    DeviceReport& d = device(h.minor);
    if (d.uuid.empty()) d.uuid = h.uuid;
    d.hal_healthy = h.healthy;
    d.faults = std::move(h.faults);
  }
  for (store::KmsgDeviceView& k : devices_.KmsgDevices()) {
    DeviceReport& d = device(k.minor);
    int worst = 0;
    for (const store::ActiveFault& f : k.faults) worst = std::max(worst, f.level);
    d.kmsg_healthy = worst < store::kUnhealthyFaultLevel;
    d.kmsg_faults = std::move(k.faults);
  }
  for (const store::PodAssignment& p : devices_.PodAssignments()) {
    for (auto& [minor, d] : devices) {
      if (d.uuid == p.uuid) d.pods.push_back(p);
    }
  }
  for (auto& [minor, d] : devices) r.devices.push_back(std::move(d));
  return r;
}

}  // namespace xpu::app
