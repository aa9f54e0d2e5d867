#include "app/exporter.h"

#include <prometheus/gauge.h>
#include <spdlog/spdlog.h>

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

Exporter::Exporter(Config cfg) : cfg_(std::make_shared<const Config>(std::move(cfg))) {
  MutexLock lock(parts_mu_);
  parts_.resize(kinds_.size());
  for (size_t i = 0; i < kinds_.size(); ++i)
    part_metrics_.push_back(std::make_shared<prometheus::Registry>());
}

std::shared_ptr<const Config> Exporter::config() const {
  MutexLock lock(parts_mu_);
  return cfg_;
}

std::shared_ptr<const Config> Exporter::applied(Applier a) const {
  MutexLock lock(parts_mu_);
  return applied_[static_cast<int>(a)];
}

Exporter::~Exporter() { Stop(); }

Status Exporter::BuildParts(const Config& cfg, const LoadedFiles& files, Replacement* next) {
  const size_t n = kinds_.size();
  next->parts.resize(n);
  next->metrics.resize(n);
  std::vector<bool> running(n);
  {
    MutexLock lock(parts_mu_);
    for (size_t i = 0; i < n; ++i) running[i] = parts_[i] != nullptr;
  }
  for (size_t i = 0; i < n; ++i) {
    const bool fresh = i < next->fresh_metrics.size() && next->fresh_metrics[i];
    next->metrics[i] = fresh ? std::make_shared<prometheus::Registry>() : part_metrics_[i];
    if (!next->rebuild[i]) continue;
    auto on = [&](std::string_view name) {
      for (size_t j = 0; j < i; ++j)
        if (kinds_[j].name == name)
          return next->rebuild[j] ? next->parts[j] != nullptr : running[j];
      return false;
    };
    PartContext ctx{cfg, files, &devices_, &exemplars_, &self_metrics_, next->metrics[i].get(), on};
    if (Status s = kinds_[i].make(ctx, &next->parts[i]); !s.ok()) return s;
  }
  return Status::Ok();
}

void Exporter::PublishPartMetrics() {
  MutexLock lock(parts_mu_);
  for (size_t i = 0; i < kinds_.size(); ++i) {
    if (parts_[i]) {
      exposer_->SetPart(kinds_[i].name, part_metrics_[i]);
    } else {
      exposer_->SetPart(kinds_[i].name, nullptr);
      part_metrics_[i] = std::make_shared<prometheus::Registry>();  // a later part starts afresh
    }
  }
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
  // The parts are built outside parts_mu_ (a HAL factory scans sysfs) and
  // started below, after the web server, through these pointers: until the
  // reloader runs, nothing else replaces them.
  std::vector<Part*> built;
  {
    Replacement all;
    all.rebuild.assign(kinds_.size(), true);
    if (Status s = BuildParts(cfg, files, &all); !s.ok()) return s;
    MutexLock lock(parts_mu_);
    cfg_ = given;
    for (std::shared_ptr<const Config>& a : applied_) a = given;
    catalog_ = files.catalog;
    for (size_t i = 0; i < kinds_.size(); ++i) {
      parts_[i] = std::move(all.parts[i]);
      built.push_back(parts_[i].get());
    }
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
  metrics_ = std::make_unique<exposition::MetricsEndpoint>(exposer_.get(), &self_metrics_);
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
  for (Part* p : built)
    if (p) p->Start();
  {
    MutexLock lock(jobs_mu_);
    reloader_started_ = true;
  }
  reloader_.Start([this] { ReloadLoop(); }, "reloader");
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
  const std::shared_ptr<const Config> running = config();
  auto fail = [&](const Status& s) {
    spdlog::set_level(spdlog::level::from_str(running->log_level));  // it may have been set
    spdlog::error("reload: kept the configuration in force: {}", s.message());
    RecordReload(s);
    job->Answer(s);
  };
  // Everything that can fail comes first; then nothing can. The next
  // configuration is whole: restart-only settings at their running values.
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
  // Which rows are rebuilt: their settings changed, a file they read is
  // named (it may have changed), or a row they follow is rebuilt.
  Replacement next;
  next.applied = {Applier::kIngest, Applier::kLog};  // cheap: always applied
  next.rebuild.resize(kinds_.size());
  for (size_t i = 0; i < kinds_.size(); ++i) {
    const PartKind& k = kinds_[i];
    const bool own = changed(k.applier) || (k.reread && k.reread(*fresh));
    bool follows = false;
    for (size_t j = 0; j < i; ++j)
      for (std::string_view f : k.follows)
        follows =
            follows ||
            (next.rebuild[j] &&
             (kinds_[j].name == f || (f == kHealthSources && kinds_[j].health_source != nullptr)));
    next.rebuild[i] = own || follows;
    if (own && std::find(next.applied.begin(), next.applied.end(), k.applier) == next.applied.end())
      next.applied.push_back(k.applier);
    // What it shows changes with its settings: a fresh registry, so that
    // nothing it showed stays behind (the old part's registry stays on the
    // page until that part has stopped, in SwapParts).
    next.fresh_metrics.push_back(k.fresh_metrics != nullptr && k.fresh_metrics(*running, *fresh));
  }
  // The new level first: the parts log what they are as they are built.
  spdlog::set_level(spdlog::level::from_str(fresh->log_level));
  if (Status s = BuildParts(*fresh, files, &next); !s.ok()) return fail(s);
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
  ApplyIngest(*fresh, files);
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
  const size_t n = kinds_.size();
  std::vector<std::unique_ptr<Part>> old(n);
  {
    MutexLock lock(parts_mu_);
    for (size_t i = 0; i < n; ++i)
      if (next->rebuild[i]) old[i] = std::exchange(parts_[i], nullptr);
  }
  for (std::unique_ptr<Part>& p : old)
    if (p) p->Stop();
  // What stays true goes on in the new part (faults that stay active are
  // not raised again); a part switched off takes back what it published.
  for (size_t i = 0; i < n; ++i) {
    if (!old[i]) continue;
    if (next->parts[i]) {
      next->parts[i]->TakeOver(*old[i]);
    } else {
      old[i]->Withdraw();
    }
  }
  for (std::unique_ptr<Part>& p : next->parts)
    if (p) p->Start();

  MutexLock lock(parts_mu_);
  for (size_t i = 0; i < n; ++i) {
    if (!next->rebuild[i]) continue;
    parts_[i] = std::move(next->parts[i]);
    part_metrics_[i] = next->metrics[i];
  }
  catalog_ = std::move(catalog);
  for (Applier a : next->applied) applied_[static_cast<int>(a)] = cfg;
  cfg_ = std::move(cfg);
  pending_restart_ = std::move(pending);
}

void Exporter::Stop() {
  reloader_.Stop();  // from here on no reload replaces a part
  if (client_) client_->Stop();
  // The parts stay in place (/status still reads them) and are stopped
  // outside parts_mu_: their threads join, and the reloader, the only one
  // that replaces them, has stopped.
  std::vector<Part*> parts;
  {
    MutexLock lock(parts_mu_);
    for (const std::unique_ptr<Part>& p : parts_) parts.push_back(p.get());
  }
  for (Part* p : parts)
    if (p) p->Stop();
  if (web_) web_->Stop();
}

}  // namespace xpu::app
