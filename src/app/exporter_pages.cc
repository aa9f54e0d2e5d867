// The exporter's pages: the telemetry path, the landing page, the probes,
// /status, /config and /-/reload (docs/http-api.md). Each runs on an HTTP
// worker thread and reads the parts under parts_mu_, or the state they
// publish (store, registry) without it.
#include <google/protobuf/util/json_util.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <deque>
#include <functional>
#include <iterator>
#include <nlohmann/json.hpp>
#include <tuple>

#include "app/exporter.h"
#include "common/duration.h"
#include "version.h"

namespace xpu::app {

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
    reload_error = last_reload_error_;
  }
  wc = web_->config();  // followed from its file: newer than cfg_'s
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
  // The registry knows each health source's sight: any that sees serves.
  std::string seeing;
  for (const std::string& source : devices_.SeeingSources())
    seeing += (seeing.empty() ? "" : ",") + source;
  if (!seeing.empty())
    return http::Response::Text(200, "Ready: XDM stale, HAL sampling (" + seeing + ")\n");
  std::string why = store_->last_update()
                        ? "Not ready: XDM data is stale (upstream mode " +
                              std::string(upstream::ModeName(client_->mode())) + ")"
                        : "Not ready: no data from XDM yet";
  MutexLock lock(parts_mu_);
  bool hal = false;
  for (const PartKind& k : kinds_)
    hal = hal || (k.health_source != nullptr && Running<hal::SourceSampler>(k.name) != nullptr);
  lock.Unlock();
  why += hal ? "; HAL not sampling\n" : "; HAL off\n";
  return http::Response::Text(503, why);
}

http::Response Exporter::StatusPage() {
  http::Response r;
  r.content_type = "application/json";
  r.body = StatusJson(Report());
  return r;
}

namespace {

// The report rows: every card of the inventory, found by its bus address,
// else its minor, else its uuid; a device only XDM's data names (by minor)
// gets a row of its own.
class Rows {
 public:
  DeviceReport& Of(const std::string& bus, int32_t minor, const std::string& uuid) {
    for (DeviceReport& d : rows_)
      if ((!bus.empty() && d.bus_id == bus) || (minor >= 0 && d.minor == minor) ||
          (!uuid.empty() && d.uuid == uuid)) {
        if (d.bus_id.empty()) d.bus_id = bus;
        if (d.minor < 0) d.minor = minor;
        if (d.uuid.empty()) d.uuid = uuid;
        return d;
      }
    DeviceReport& d = rows_.emplace_back();
    d.bus_id = bus;
    d.minor = minor;
    d.uuid = uuid;
    return d;
  }
  // By minor (cards no layer names by one last), then bus address.
  std::vector<DeviceReport> Sorted() && {
    std::sort(rows_.begin(), rows_.end(), [](const DeviceReport& a, const DeviceReport& b) {
      return std::make_tuple(a.minor < 0, a.minor, a.bus_id) <
             std::make_tuple(b.minor < 0, b.minor, b.bus_id);
    });
    return {std::make_move_iterator(rows_.begin()), std::make_move_iterator(rows_.end())};
  }

 private:
  std::deque<DeviceReport> rows_;  // references stay valid as rows are added
};

// One source's view of a card into its row, as the health series says it
// (card-level faults make it unhealthy). Two devices of one source that
// name one card: every fault, the worse health (as the Node condition reads
// them).
void AddSourceView(const std::string& source, store::DeviceView v, DeviceReport* d) {
  const std::optional<bool> health =
      store::HealthWithFaults(v.seen ? v.healthy : std::nullopt, v.faults);
  auto [it, first] = d->sources.try_emplace(source);
  DeviceReport::SourceHealth& h = it->second;
  h.healthy = first ? health : store::WorseHealth(h.healthy, health);
  for (store::ActiveFault& f : v.faults) store::AddFault(&h.faults, std::move(f));
}

}  // namespace

std::string Exporter::HalBackendsLocked() const {
  // Every HAL backend that runs (each a SourceSampler), in the table's
  // order: "sysfs,pci,kmsg".
  std::string out = "none";
  bool first = true;
  for (const PartKind& k : kinds_) {
    const auto* s = Running<hal::SourceSampler>(k.name);
    if (s == nullptr) continue;
    const auto* sysfs = dynamic_cast<const hal::HalSampler*>(s);
    const std::string name = sysfs != nullptr ? sysfs->backend_name() : std::string(k.name);
    out = first ? name : out + "," + name;
    first = false;
  }
  return out;
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
    if (const auto* t = Running<sinks::DeviceTainter>("devicetaints"))
      r.device_taints = t->report();
    r.hal_backend = HalBackendsLocked();
  }
  // Each source's sight from the registry (the one rule): up while every
  // open one sees; the oldest view's age.
  const std::vector<store::DeviceRegistry::SourceStatus> sources = devices_.SourceStatuses();
  r.hal_up = !sources.empty();
  for (const store::DeviceRegistry::SourceStatus& s : sources) {
    r.hal_up = r.hal_up && s.sight == store::Sight::kSeeing;
    std::optional<double> age;
    if (s.view_age) age = secs(*s.view_age);
    if (age && (!r.hal_seconds_since_sample || *age > *r.hal_seconds_since_sample))
      r.hal_seconds_since_sample = age;
    r.sources.push_back({s.source, store::SightName(s.sight), s.why, age});
  }
  // Sources not found yet (--hal=auto's NVML before the driver loads):
  // listed, not judged.
  for (auto& [source, why] : devices_.Looking())
    r.sources.push_back({source, "looking", std::move(why), std::nullopt});

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
  Rows rows;
  for (const store::InventoryDevice& card : devices_.Inventory()) {
    DeviceReport& d = rows.Of(card.bus_id, card.minor, card.uuid);
    d.model = card.model;
  }
  auto device = [&](int32_t minor) -> DeviceReport& { return rows.Of("", minor, ""); };
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
  // XDM's word on health while it is current (null once the daemon is
  // gone, as its health series is withdrawn then); the list still names.
  const bool xdm_live = devices_.XdmLive();
  for (const store::DeviceInfo& info : devices_.Devices()) {
    DeviceReport& d = device(info.minor);
    d.uuid = info.uuid;
    d.model = info.model;
    if (xdm_live) d.xdm_healthy = info.health == "Healthy";
    d.topology = info.topology;
  }
  // Every source that sees, each card as the registry named it.
  for (auto& [source, views] : devices_.SeenDeviceViews()) {
    for (store::DeviceView& v : views) {
      DeviceReport& d = rows.Of(v.bus_id, v.minor, v.uuid);
      AddSourceView(source, std::move(v), &d);
    }
  }
  r.devices = std::move(rows).Sorted();
  for (const store::PodAssignment& p : devices_.PodAssignments()) {
    for (DeviceReport& d : r.devices) {
      if (d.uuid == p.uuid) d.pods.push_back(p);
    }
  }
  return r;
}

}  // namespace xpu::app
