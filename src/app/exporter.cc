#include "app/exporter.h"

#include <google/protobuf/util/json_util.h>
#include <prometheus/gauge.h>
#include <spdlog/spdlog.h>

#include <nlohmann/json.hpp>

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
  if (cfg_.hal.fault_catalog_file.empty()) {
    fault_catalog_ = hal::FaultCatalog::Builtin();
  } else {
    Status s = hal::FaultCatalog::LoadFile(cfg_.hal.fault_catalog_file, &fault_catalog_);
    if (!s.ok()) return s;
  }
  hal::HalSelection hal_sel;
  if (Status s = hal::ParseHalSelection(cfg_.hal.backend, &hal_sel); !s.ok())
    return Status::InvalidArgument("--hal: " + s.message());
  std::unique_ptr<hal::HalBackend> backend;
  if (hal_sel.automatic || hal_sel.sysfs) {
    if (Status s = hal::MakeBackend(hal_sel.sysfs ? "sysfs" : "auto", cfg_.hal.root, &backend);
        !s.ok())
      return s;
  }
  if (backend) {
    spdlog::info("HAL backend {} at {}, every {} ms", backend->name(), cfg_.hal.root,
                 cfg_.hal.interval.count());
    hal_ = std::make_unique<hal::HalSampler>(std::move(backend), fault_catalog_, cfg_.hal.interval,
                                             &devices_, &self_metrics_);
  } else {
    spdlog::info("HAL sysfs backend off (--hal={}, {})", cfg_.hal.backend, cfg_.hal.root);
  }
  if (hal_sel.automatic || hal_sel.pci) {
    hal::PciFilter filter;
    if (Status s = hal::MakePciFilter(cfg_.hal.pci_classes, cfg_.hal.pci_vendors, &filter); !s.ok())
      return s;
    hal::PciScanner scanner(cfg_.hal.pci_root, filter);
    std::vector<hal::PciDevice> found;
    const bool usable = scanner.Scan(&found).ok();
    // auto: only where there is something to watch.
    if (hal_sel.pci || (usable && !found.empty())) {
      spdlog::info("HAL backend pci at {}: {} device(s), every {} ms", cfg_.hal.pci_root,
                   found.size(), cfg_.hal.interval.count());
      pci_ = std::make_unique<hal::PciSampler>(std::move(scanner), fault_catalog_,
                                               cfg_.hal.interval, &devices_, &self_metrics_);
    }
  }
  if (!cfg_.kubelet.socket.empty())
    pods_ = std::make_unique<kubelet::PodMapper>(cfg_.kubelet, &devices_, &self_metrics_);
  std::string why_off;
  const std::string api = kubernetes::ResolveApiServer(cfg_.kubernetes, &why_off);
  if (api.empty())
    spdlog::info("kubernetes: no API-server watch: {}", why_off);
  else
    watcher_ =
        std::make_unique<kubernetes::PodWatcher>(cfg_.kubernetes, api, &devices_, &self_metrics_);
  prometheus::BuildGauge()
      .Name("xpu_exporter_build_info")
      .Help("xpu-exporter's version, revision and node name; always 1.")
      .Register(self_metrics_)
      .Add({{"version", kVersion}, {"revision", kRevision}, {"node", cfg_.kubernetes.node_name}})
      .Set(1);
  store_ = std::make_unique<store::MetricStore>(
      catalog_, store::MetricStore::Options{cfg_.effective_stale_after(), cfg_.max_series,
                                            cfg_.xdm.max_devices, store::kIdentityWait});
  devices_.SetDeviceFilter(cfg_.xdm.devices);
  if (!cfg_.xdm.devices.empty())
    spdlog::info("exporting {} device(s) only (--xdm.devices)", cfg_.xdm.devices.size());
  store_->FollowDevices(&devices_);
  identity_missing_ = &prometheus::BuildGauge()
                           .Name("xpu_exporter_device_identity_missing")
                           .Help(
                               "1 while device series go out without uuid and model: XDM sent "
                               "data but no device list within 10 s.")
                           .Register(self_metrics_)
                           .Add({});
  exposer_ = std::make_unique<exposition::Exposer>(store_.get(), &self_metrics_);
  exposer_->AddCollectable(&devices_);
  exposer_->AddCollectable(&self_metrics_);
  exposer_->AddCollectable(&process_metrics_);

  // Family selection: catalog families at ingest, every other family when
  // rendered. Validate() has checked the patterns.
  upstream::ClientOptions xdm = cfg_.xdm;
  if (Status s = catalog::Selection::Make(cfg_.metrics_include, cfg_.metrics_exclude, &selection_);
      !s.ok())
    throw std::invalid_argument(s.message());
  if (!selection_.everything()) {
    xdm.excluded_ids = selection_.ExcludedIds(*catalog_);
    xdm.keep_unknown = xdm.keep_unknown && selection_.Allows("xpu_unknown_metric");
    exposer_->SetFamilyFilter([this](const std::string& name) { return selection_.Allows(name); });
    spdlog::info("metric selection: {} of {} catalog families exported",
                 catalog_->entries().size() - xdm.excluded_ids.size(), catalog_->entries().size());
  }
  client_ =
      std::make_unique<upstream::XdmClient>(xdm, catalog_, store_.get(), &devices_, &self_metrics_);

  http::WebOptions wo = cfg_.web;
  wo.probe_paths = {"/-/healthy", "/-/ready"};
  web_ = std::make_unique<http::WebServer>(wo);
  web_->Route(
      cfg_.telemetry_path, {"GET"}, [this](const http::Request& r) { return Metrics(r); },
      /*gzip=*/true);
  web_->Route("/", {"GET"}, [this](const http::Request&) {
    http::Response r;
    r.content_type = "text/html; charset=utf-8";
    r.body = LandingPageHtml(Report(), cfg_.telemetry_path);
    return r;
  });
  web_->Route("/-/healthy", {"GET"}, [](const http::Request&) {
    return http::Response{200, "text/plain; charset=utf-8", "Healthy\n", {}};
  });
  web_->Route("/-/ready", {"GET"}, [this](const http::Request&) { return Ready(); });
  web_->Route("/status", {"GET"}, [this](const http::Request&) { return StatusPage(); });
  web_->Route("/config", {"GET"}, [this](const http::Request&) { return ConfigPage(); });
  Status s = web_->Start();
  if (!s.ok()) return s;
  client_->Start();
  if (hal_) hal_->Start();
  if (pci_) pci_->Start();
  if (pods_) pods_->Start();
  if (watcher_) watcher_->Start();
  return Status::Ok();
}

Status Exporter::ReloadWebConfig() {
  if (cfg_.web_config_file.empty()) return Status::Ok();
  std::shared_ptr<const http::WebConfig> fresh;
  Status s = http::WebConfig::Load(cfg_.web_config_file, &fresh);
  if (!s.ok()) return s;
  s = web_->Reload(fresh);
  if (s.ok()) {
    std::lock_guard<std::mutex> lock(web_config_mu_);
    cfg_.web.web_config = fresh;
  }
  return s;
}

void Exporter::Stop() {
  if (client_) client_->Stop();
  if (hal_) hal_->Stop();
  if (pci_) pci_->Stop();
  if (pods_) pods_->Stop();
  if (watcher_) watcher_->Stop();
  if (web_) web_->Stop();
}

http::Response Exporter::Metrics(const http::Request&) {
  http::Response r;
  r.content_type = "text/plain; version=0.0.4; charset=utf-8";
  exposer_->Render(&r.body);
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
  Json settings = Json::object();
  for (const auto& [key, st] : cfg_.settings) {
    Json v =
        st.values.size() == 1 && key != "web.listen-address" ? Json(st.values[0]) : Json(st.values);
    settings[key] = {{"value", v}, {"source", st.source}};
  }
  j["settings"] = settings;
  std::shared_ptr<const http::WebConfig> wc;
  {
    std::lock_guard<std::mutex> lock(web_config_mu_);
    wc = cfg_.web.web_config;
  }
  if (wc) {
    Json w;
    w["path"] = wc->path;
    if (wc->tls) {
      w["tls"] = {{"certFile", wc->tls->cert_file},
                  {"keyFile", wc->tls->key_file},
                  {"clientCaFile", wc->tls->client_ca_file},
                  {"clientAuthType", http::Name(wc->tls->client_auth)},
                  {"minVersion", http::Name(wc->tls->min_version)},
                  {"maxVersion", http::Name(wc->tls->max_version)}};
    } else {
      w["tls"] = nullptr;
    }
    Json users = Json::object();
    for (const auto& [user, hash] : wc->users) users[user] = "<secret>";  // never the hash
    w["basicAuthUsers"] = users;
    Json headers = Json::object();
    for (const auto& [k, v] : wc->headers) headers[k] = v;
    w["headers"] = headers;
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
    return {200, "text/plain; charset=utf-8", "Ready: data from XDM\n", {}};
  if (hal_ && fresh(hal_->last_success(), cfg_.hal.interval * 3))
    return {200, "text/plain; charset=utf-8", "Ready: XDM stale, HAL sampling\n", {}};
  std::string why = store_->last_update()
                        ? "Not ready: XDM data is stale (upstream mode " +
                              std::string(upstream::ModeName(client_->mode())) + ")"
                        : "Not ready: no data from XDM yet";
  why += hal_ ? "; HAL not sampling\n" : "; HAL off\n";
  return {503, "text/plain; charset=utf-8", why, {}};
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
  r.xdm_endpoint = cfg_.xdm.xdm_endpoint;
  r.upstream = client_->state();
  r.info = client_->info();
  if (hal_) {
    r.hal_backend = hal_->backend_name();
    r.hal_up = hal_->up();
    if (auto last = hal_->last_success()) r.hal_seconds_since_sample = secs(now - *last);
  }
  if (pci_) {  // "sysfs,pci": up only while every backend is
    r.hal_backend = hal_ ? r.hal_backend + ",pci" : "pci";
    r.hal_up = (!hal_ || r.hal_up) && pci_->up();
  }

  // The table's four values, from one snapshot; a catalog without one of
  // these families leaves its column empty.
  struct Column {
    const catalog::Entry* entry;
    std::optional<double> DeviceReport::*field;
  };
  const Column columns[] = {
      {catalog_->FindByName("xpu_utilization_ratio"), &DeviceReport::utilization},
      {catalog_->FindByName("xpu_memory_used_bytes"), &DeviceReport::memory_used_bytes},
      {catalog_->FindByName("xpu_memory_total_bytes"), &DeviceReport::memory_total_bytes},
      {catalog_->FindByName("xpu_temperature_celsius"), &DeviceReport::temperature_celsius},
  };
  std::map<int32_t, DeviceReport> devices;
  auto device = [&](int32_t minor) -> DeviceReport& {
    DeviceReport& d = devices[minor];
    d.minor = minor;
    return d;
  };
  // Devices that only the data knows of (ListAndWatch not answered yet) too.
  for (const auto& [minor, when] : store_->device_updates())
    device(minor).seconds_since_sample = secs(now - when);
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
  for (const store::PodAssignment& p : devices_.PodAssignments()) {
    for (auto& [minor, d] : devices) {
      if (d.uuid == p.uuid) d.pods.push_back(p);
    }
  }
  for (auto& [minor, d] : devices) r.devices.push_back(std::move(d));
  return r;
}

}  // namespace xpu::app
