// /status (JSON, schema in docs/http-api.md) and the landing page, which is
// rendered on the server from the same document and refreshed by a few lines
// of JavaScript from /status.
#include <ctime>
#include <map>

#include <nlohmann/json.hpp>

#include "app/exporter.h"
#include "version.h"

namespace xpu::app {
namespace {

using Json = nlohmann::ordered_json;
using SteadyClock = std::chrono::steady_clock;

std::string Rfc3339(std::chrono::system_clock::time_point t) {
  const std::time_t tt = std::chrono::system_clock::to_time_t(t);
  std::tm tm{};
  gmtime_r(&tt, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

double Secs(SteadyClock::duration d) { return std::chrono::duration<double>(d).count(); }

std::string Html(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

}  // namespace

std::string Exporter::StatusJson() {
  Json j;
  j["version"] = kVersion;
  j["revision"] = kRevision;
  j["uptimeSeconds"] = Secs(SteadyClock::now() - started_);
  const upstream::UpstreamState st = client_->state();
  const upstream::UpstreamInfo info = client_->info();
  Json up;
  up["endpoint"] = cfg_.xdm.xdm_endpoint;
  up["mode"] = upstream::ModeName(st.mode);
  up["modeSince"] = Rfc3339(st.mode_since);
  up["reconnects"] = st.reconnects;
  up["currentBackoffSeconds"] = std::chrono::duration<double>(st.current_backoff).count();
  up["secondsSinceStreamMessage"] =
      st.since_stream_message ? Json(Secs(*st.since_stream_message)) : Json(nullptr);
  up["secondsSincePoll"] = st.since_poll ? Json(Secs(*st.since_poll)) : Json(nullptr);
  Json collectors = Json::object();
  for (const auto& [name, c] : st.collectors) {
    collectors[name] = {{"success", c.ok}, {"durationSeconds", c.duration_seconds},
                        {"at", Rfc3339(c.at)}};
  }
  up["collectors"] = collectors;
  up["supportedTypes"] = info.supported_types;
  if (info.status) {
    up["xdmStatus"] = {{"status", info.status->status()},
                       {"message", info.status->message()},
                       {"version", info.status->version()},
                       {"activeStreams", info.status->activestreams()},
                       {"samplesCollected", info.status->samplescollected()}};
  } else {
    up["xdmStatus"] = nullptr;
  }
  up["controllerEnabled"] = info.controller_enabled ? Json(*info.controller_enabled) : Json(nullptr);
  j["upstream"] = up;
  Json hal;
  hal["backend"] = hal_ ? hal_->backend_name() : "none";
  hal["up"] = hal_ && hal_->up();
  auto hal_last = hal_ ? hal_->last_success() : std::nullopt;
  hal["secondsSinceSample"] = hal_last ? Json(Secs(SteadyClock::now() - *hal_last)) : Json(nullptr);
  j["hal"] = hal;

  // Latest values the landing page shows, from one snapshot.
  std::map<int32_t, std::map<uint32_t, double>> latest;
  const store::Snapshot snap = store_->Snap(SteadyClock::now());
  for (size_t i = 0; i < snap.values.size(); ++i) {
    const store::Row& r = snap.set->rows[i];
    if (r.instance.empty() && r.metric_id <= 4) latest[r.minor][r.metric_id] = snap.values[i];
  }
  const auto updates = store_->device_updates();
  auto value = [&](int32_t minor, uint32_t id) -> Json {
    auto d = latest.find(minor);
    if (d == latest.end()) return nullptr;
    auto v = d->second.find(id);
    return v == d->second.end() ? Json(nullptr) : Json(v->second);
  };

  std::map<int32_t, Json> devices;
  auto base = [&](int32_t minor) -> Json& {
    Json& o = devices[minor];
    if (o.is_null()) {
      o["minor"] = minor;
      o["uuid"] = "";
      o["model"] = "";
      o["health"] = {{"xdm", nullptr}, {"hal", nullptr}};
      o["faults"] = Json::array();
      auto u = updates.find(minor);
      o["secondsSinceSample"] =
          u == updates.end() ? Json(nullptr) : Json(Secs(SteadyClock::now() - u->second));
      o["utilization"] = value(minor, 1);
      o["memoryUsedBytes"] = value(minor, 2);
      o["memoryTotalBytes"] = value(minor, 3);
      o["temperatureCelsius"] = value(minor, 4);
      o["topology"] = Json::array();
    }
    return o;
  };
  // Devices that only the data knows of (ListAndWatch not answered yet) too.
  for (const auto& [minor, when] : updates) base(minor);
  for (const store::DeviceInfo& d : devices_.Devices()) {
    Json& o = base(d.minor);
    o["uuid"] = d.uuid;
    o["model"] = d.model;
    o["health"]["xdm"] = d.health == "Healthy";
    for (const auto& t : d.topology)
      o["topology"].push_back(
          {{"level", t.level}, {"name", t.name}, {"group", t.group}, {"peers", t.peers}});
  }
  for (const store::HalDeviceView& h : devices_.HalDevices()) {
    Json& o = base(h.minor);
    if (o["uuid"] == "") o["uuid"] = h.uuid;
    o["health"]["hal"] = h.healthy ? Json(*h.healthy) : Json(nullptr);
    for (const auto& f : h.faults) {
      o["faults"].push_back({{"code", f.code},
                             {"name", f.name},
                             {"level", f.level_name},
                             {"levelValue", f.level},
                             {"description", f.description},
                             {"action", f.action},
                             {"known", f.known}});
    }
  }
  for (const store::PodAssignment& p : devices_.PodAssignments()) {
    for (auto& [minor, o] : devices) {
      if (o["uuid"] != p.uuid) continue;
      if (!o.contains("pods")) o["pods"] = Json::array();
      o["pods"].push_back({{"namespace", p.namespace_}, {"pod", p.pod}, {"container", p.container},
                           {"resource", p.resource}});
    }
  }
  Json list = Json::array();
  for (auto& [minor, o] : devices) {
    if (!o.contains("pods")) o["pods"] = Json::array();
    list.push_back(std::move(o));
  }
  j["devices"] = list;
  return j.dump(2, ' ', false, Json::error_handler_t::replace) + "\n";
}

http::Response Exporter::StatusPage() {
  http::Response r;
  r.content_type = "application/json";
  r.body = StatusJson();
  return r;
}

namespace {

const char* kPageScript = R"JS(
(function () {
  function text(v) { return v === null || v === undefined ? "-" : String(v); }
  function health(v) { return v === null || v === undefined ? "-" : (v ? "healthy" : "UNHEALTHY"); }
  function cell(tr, v, cls) {
    var td = document.createElement("td");
    td.textContent = v;
    if (cls) td.className = cls;
    tr.appendChild(td);
  }
  function render(s) {
    document.getElementById("mode").textContent = s.upstream.mode;
    document.getElementById("hal").textContent = s.hal.backend + (s.hal.up ? " (up)" : " (down)");
    var body = document.querySelector("#devices tbody");
    while (body.firstChild) body.removeChild(body.firstChild);
    s.devices.forEach(function (d) {
      var tr = document.createElement("tr");
      cell(tr, d.minor);
      cell(tr, d.model);
      cell(tr, health(d.health.xdm), d.health.xdm === false ? "bad" : "");
      cell(tr, health(d.health.hal), d.health.hal === false ? "bad" : "");
      cell(tr, d.faults.map(function (f) { return f.code + " " + f.name + " [" + f.level + "]: " + f.action; }).join("; ") || "none",
           d.faults.length ? "bad" : "");
      cell(tr, d.utilization === null ? "-" : (100 * d.utilization).toFixed(1) + " %");
      cell(tr, d.memoryUsedBytes === null ? "-" : (d.memoryUsedBytes / 1073741824).toFixed(1) + " / " +
               (d.memoryTotalBytes / 1073741824).toFixed(1) + " GiB");
      cell(tr, d.temperatureCelsius === null ? "-" : d.temperatureCelsius + " °C");
      cell(tr, d.secondsSinceSample === null ? "-" : d.secondsSinceSample.toFixed(1) + " s");
      cell(tr, d.pods.map(function (p) { return p.namespace + "/" + p.pod; }).join(", ") || "-");
      body.appendChild(tr);
    });
    document.getElementById("updated").textContent = new Date().toISOString();
  }
  function refresh() {
    fetch("status", {cache: "no-store"}).then(function (r) { return r.json(); }).then(render)
      .catch(function () { document.getElementById("updated").textContent = "refresh failed"; });
  }
  setInterval(refresh, 2000);
})();
)JS";

}  // namespace

std::string Exporter::LandingPage() {
  const Json s = Json::parse(StatusJson());
  const std::string path = cfg_.telemetry_path;
  std::string h =
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
      "<title>xpu-exporter</title><style>"
      "body{font-family:sans-serif;margin:1.5em}table{border-collapse:collapse}"
      "td,th{border:1px solid #bbb;padding:.3em .6em;text-align:left}th{background:#eee}"
      ".bad{color:#b00;font-weight:bold}</style></head><body>\n"
      "<h1>xpu-exporter</h1>\n<p>Version " + Html(kVersion) + " (" + Html(kRevision) + "). "
      "<a href=\"" + Html(path.substr(1)) + "\">" + Html(path) + "</a> · "
      "<a href=\"status\">/status</a> · <a href=\"config\">/config</a> · "
      "<a href=\"-/healthy\">/-/healthy</a> · <a href=\"-/ready\">/-/ready</a></p>\n"
      "<p>Upstream mode: <b id=\"mode\">" + Html(s["upstream"]["mode"].get<std::string>()) +
      "</b> · HAL: <b id=\"hal\">" + Html(s["hal"]["backend"].get<std::string>()) +
      (s["hal"]["up"].get<bool>() ? " (up)" : " (down)") +
      "</b> · updated <span id=\"updated\">at load</span></p>\n"
      "<table id=\"devices\"><thead><tr><th>minor</th><th>model</th><th>health (XDM)</th>"
      "<th>health (HAL)</th><th>active faults</th><th>utilization</th><th>memory</th>"
      "<th>temperature</th><th>last sample</th><th>pods</th></tr></thead><tbody>\n";
  auto health = [](const Json& v) -> std::string {
    return v.is_null() ? "-" : v.get<bool>() ? "healthy" : "UNHEALTHY";
  };
  for (const Json& d : s["devices"]) {
    std::string faults;
    for (const Json& f : d["faults"]) {
      if (!faults.empty()) faults += "; ";
      faults += f["code"].get<std::string>() + " " + f["name"].get<std::string>() + " [" +
                f["level"].get<std::string>() + "]: " + f["action"].get<std::string>();
    }
    char util[32] = "-", mem[64] = "-", temp[32] = "-", age[32] = "-";
    if (!d["utilization"].is_null()) std::snprintf(util, sizeof util, "%.1f %%", 100 * d["utilization"].get<double>());
    if (!d["memoryUsedBytes"].is_null() && !d["memoryTotalBytes"].is_null())
      std::snprintf(mem, sizeof mem, "%.1f / %.1f GiB", d["memoryUsedBytes"].get<double>() / 1073741824,
                    d["memoryTotalBytes"].get<double>() / 1073741824);
    if (!d["temperatureCelsius"].is_null()) std::snprintf(temp, sizeof temp, "%g °C", d["temperatureCelsius"].get<double>());
    if (!d["secondsSinceSample"].is_null()) std::snprintf(age, sizeof age, "%.1f s", d["secondsSinceSample"].get<double>());
    std::string pods;
    for (const Json& p : d["pods"]) {
      if (!pods.empty()) pods += ", ";
      pods += p["namespace"].get<std::string>() + "/" + p["pod"].get<std::string>();
    }
    const bool xdm_bad = d["health"]["xdm"].is_boolean() && !d["health"]["xdm"].get<bool>();
    const bool hal_bad = d["health"]["hal"].is_boolean() && !d["health"]["hal"].get<bool>();
    h += "<tr><td>" + std::to_string(d["minor"].get<int>()) + "</td><td>" +
         Html(d["model"].get<std::string>()) + "</td><td" + (xdm_bad ? " class=\"bad\"" : "") + ">" +
         health(d["health"]["xdm"]) + "</td><td" + (hal_bad ? " class=\"bad\"" : "") + ">" +
         health(d["health"]["hal"]) + "</td><td" + (faults.empty() ? "" : " class=\"bad\"") + ">" +
         (faults.empty() ? "none" : Html(faults)) + "</td><td>" + util + "</td><td>" + mem +
         "</td><td>" + temp + "</td><td>" + age + "</td><td>" + (pods.empty() ? "-" : Html(pods)) +
         "</td></tr>\n";
  }
  h += "</tbody></table>\n<script>" + std::string(kPageScript) + "</script>\n</body></html>\n";
  return h;
}

}  // namespace xpu::app
