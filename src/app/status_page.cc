// /status (JSON, schema in docs/http-api.md) and the landing page, both from
// one StatusReport.
#include "app/status_page.h"

#include <cstdio>
#include <ctime>
#include <nlohmann/json.hpp>

#include "common/duration.h"

namespace xpu::app {
namespace {

using Json = nlohmann::ordered_json;

constexpr double kBytesPerGiB = 1024.0 * 1024 * 1024;

double Secs(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

template <typename T>
Json OrNull(const std::optional<T>& v) {
  return v ? Json(*v) : Json(nullptr);
}

std::string Html(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

template <typename... Args>
std::string Format(const char* fmt, Args... args) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, args...);
  return buf;
}

Json UpstreamJson(const StatusReport& r) {
  const upstream::UpstreamState& st = r.upstream;
  Json up;
  up["endpoint"] = r.xdm_endpoint;
  up["mode"] = upstream::ModeName(st.mode);
  up["modeSince"] = Rfc3339(st.mode_since);
  up["reconnects"] = st.reconnects;
  up["currentBackoffSeconds"] = std::chrono::duration<double>(st.current_backoff).count();
  up["secondsSinceStreamMessage"] =
      st.since_stream_message ? Json(Secs(*st.since_stream_message)) : Json(nullptr);
  up["secondsSincePoll"] = st.since_poll ? Json(Secs(*st.since_poll)) : Json(nullptr);
  Json collectors = Json::object();
  for (const auto& [name, c] : st.collectors) {
    collectors[name] = {
        {"success", c.ok}, {"durationSeconds", c.duration_seconds}, {"at", Rfc3339(c.at)}};
  }
  up["collectors"] = collectors;
  up["supportedTypes"] = r.info.supported_types;
  if (r.info.status) {
    up["xdmStatus"] = {{"status", r.info.status->status()},
                       {"message", r.info.status->message()},
                       {"version", r.info.status->version()},
                       {"activeStreams", r.info.status->activestreams()},
                       {"samplesCollected", r.info.status->samplescollected()}};
  } else {
    up["xdmStatus"] = nullptr;
  }
  up["controllerEnabled"] = OrNull(r.info.controller_enabled);
  return up;
}

Json DeviceJson(const DeviceReport& d) {
  Json o;
  o["minor"] = d.minor >= 0 ? Json(d.minor) : Json(nullptr);
  o["busId"] = d.bus_id;
  o["uuid"] = d.uuid;
  o["model"] = d.model;
  o["health"] = {{"xdm", OrNull(d.xdm_healthy)}};
  std::vector<std::pair<std::string, const std::vector<store::ActiveFault>*>> by_source;
  for (const auto& [source, seen] : d.sources) {
    o["health"][source] = OrNull(seen.healthy);
    by_source.emplace_back(source, &seen.faults);
  }
  o["faults"] = Json::array();
  for (const auto& [source, faults] : by_source) {
    for (const store::ActiveFault& f : *faults) {
      o["faults"].push_back({{"code", f.code},
                             {"name", f.name},
                             {"level", f.level_name},
                             {"levelValue", f.level},
                             {"description", f.description},
                             {"action", f.action},
                             {"known", f.known},
                             {"source", source}});
    }
  }
  o["secondsSinceSample"] = OrNull(d.seconds_since_sample);
  o["utilization"] = OrNull(d.utilization);
  o["memoryUsedBytes"] = OrNull(d.memory_used_bytes);
  o["memoryTotalBytes"] = OrNull(d.memory_total_bytes);
  o["temperatureCelsius"] = OrNull(d.temperature_celsius);
  o["topology"] = Json::array();
  for (const store::TopologyLevel& t : d.topology)
    o["topology"].push_back(
        {{"level", t.level}, {"name", t.name}, {"group", t.group}, {"peers", t.peers}});
  o["pods"] = Json::array();
  for (const store::PodAssignment& p : d.pods) {
    o["pods"].push_back({{"namespace", p.namespace_},
                         {"pod", p.pod},
                         {"container", p.container},
                         {"resource", p.resource},
                         {"claim", p.claim},
                         {"driver", p.driver},
                         {"pool", p.pool},
                         {"device", p.device}});
  }
  return o;
}

// A table cell; `bad` marks it red.
std::string Cell(const std::string& html, bool bad = false) {
  return std::string(bad ? "<td class=\"bad\">" : "<td>") + html + "</td>";
}

std::string Health(const std::optional<bool>& h) { return !h ? "-" : *h ? "healthy" : "UNHEALTHY"; }

std::string DeviceRow(const DeviceReport& d) {
  std::string faults;
  // Each source's health, by its name.
  std::string hal_health;
  bool hal_bad = false;
  for (const auto& [source, seen] : d.sources) {
    hal_health += (hal_health.empty() ? "" : "; ") + source + ": " + Health(seen.healthy);
    hal_bad = hal_bad || seen.healthy == false;
    for (const store::ActiveFault& f : seen.faults) {
      if (!faults.empty()) faults += "; ";
      faults += f.code + " " + f.name + " [" + f.level_name + ", " + source + "]: " + f.action;
    }
  }
  std::string pods;
  for (const store::PodAssignment& p : d.pods) {
    if (!pods.empty()) pods += ", ";
    pods += p.namespace_ + "/" + p.pod;
  }
  const std::string util = d.utilization ? Format("%.1f %%", 100 * *d.utilization) : "-";
  const std::string mem = d.memory_used_bytes && d.memory_total_bytes
                              ? Format("%.1f / %.1f GiB", *d.memory_used_bytes / kBytesPerGiB,
                                       *d.memory_total_bytes / kBytesPerGiB)
                              : "-";
  const std::string temp = d.temperature_celsius ? Format("%g °C", *d.temperature_celsius) : "-";
  const std::string age = d.seconds_since_sample ? Format("%.1f s", *d.seconds_since_sample) : "-";
  return "<tr>" + Cell(d.minor >= 0 ? std::to_string(d.minor) : "-") + Cell(Html(d.bus_id)) +
         Cell(Html(d.model)) + Cell(Health(d.xdm_healthy), d.xdm_healthy == false) +
         Cell(hal_health.empty() ? "-" : Html(hal_health), hal_bad) +
         Cell(faults.empty() ? "none" : Html(faults), !faults.empty()) + Cell(util) + Cell(mem) +
         Cell(temp) + Cell(age) + Cell(pods.empty() ? "-" : Html(pods)) + "</tr>\n";
}

// Every two seconds: fetch this page again and swap in its live parts.
const char* kPageScript = R"JS(
(function () {
  function refresh() {
    fetch("./", {cache: "no-store"}).then(function (r) { return r.text(); }).then(function (t) {
      var fresh = new DOMParser().parseFromString(t, "text/html");
      ["mode", "hal", "rows"].forEach(function (id) {
        document.getElementById(id).innerHTML = fresh.getElementById(id).innerHTML;
      });
      document.getElementById("updated").textContent = new Date().toISOString();
    }).catch(function () { document.getElementById("updated").textContent = "refresh failed"; });
  }
  setInterval(refresh, 2000);
})();
)JS";

}  // namespace

namespace {

// What the device taints' part knows: the API it found, and per card what
// names it in the slices (or why nothing does) and its rule's state.
Json DeviceTaintsJson(const sinks::DeviceTainter::Report& t) {
  Json j = {{"api", t.api},
            {"ruleVersion", t.rule_version},
            {"sliceVersion", t.slice_version},
            {"slicesRead", t.slices_read},
            {"slices", t.slices},
            {"sliceError", t.slice_error},
            {"staleRules", t.stale},
            {"cards", Json::array()}};
  for (const sinks::DeviceTainter::CardReport& c : t.cards) {
    Json card = {{"busId", c.bus_id}, {"key", c.key}, {"state", c.state}, {"why", c.why}};
    if (c.device)
      card["device"] = {
          {"driver", c.device->driver}, {"pool", c.device->pool}, {"device", c.device->device}};
    else
      card["unmapped"] = c.unmapped;
    if (!c.rule.empty())
      card["rule"] = {{"name", c.rule}, {"value", c.value}, {"effect", c.effect}};
    j["cards"].push_back(std::move(card));
  }
  return j;
}

}  // namespace

std::string StatusJson(const StatusReport& r) {
  Json j;
  j["version"] = r.version;
  j["revision"] = r.revision;
  j["uptimeSeconds"] = r.uptime_seconds;
  j["upstream"] = UpstreamJson(r);
  j["hal"] = {{"backend", r.hal_backend},
              {"up", r.hal_up},
              {"secondsSinceSample", OrNull(r.hal_seconds_since_sample)},
              {"sources", Json::array()}};
  for (const StatusReport::Source& s : r.sources)
    j["hal"]["sources"].push_back({{"name", s.name},
                                   {"sight", s.sight},
                                   {"why", s.why},
                                   {"viewAgeSeconds", OrNull(s.view_age_seconds)}});
  j["devices"] = Json::array();
  for (const DeviceReport& d : r.devices) j["devices"].push_back(DeviceJson(d));
  if (r.device_taints) j["kubernetes"] = {{"deviceTaints", DeviceTaintsJson(*r.device_taints)}};
  return j.dump(2, ' ', false, Json::error_handler_t::replace) + "\n";
}

std::string LandingPageHtml(const StatusReport& r, const std::string& path) {
  std::string h =
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
      "<title>xpu-exporter</title><style>"
      "body{font-family:sans-serif;margin:1.5em}table{border-collapse:collapse}"
      "td,th{border:1px solid #bbb;padding:.3em .6em;text-align:left}th{background:#eee}"
      ".bad{color:#b00;font-weight:bold}</style></head><body>\n"
      "<h1>xpu-exporter</h1>\n<p>Version " +
      Html(r.version) + " (" + Html(r.revision) +
      "). "
      "<a href=\"" +
      Html(path.substr(1)) + "\">" + Html(path) +
      "</a> · "
      "<a href=\"status\">/status</a> · <a href=\"config\">/config</a> · "
      "<a href=\"-/healthy\">/-/healthy</a> · <a href=\"-/ready\">/-/ready</a></p>\n"
      "<p>Upstream mode: <b id=\"mode\">" +
      upstream::ModeName(r.upstream.mode) + "</b> · HAL: <b id=\"hal\">" + Html(r.hal_backend) +
      (r.hal_up ? " (up)" : " (down)") +
      "</b> · updated <span id=\"updated\">at load</span></p>\n"
      "<table id=\"devices\"><thead><tr><th>minor</th><th>bus</th><th>model</th><th>health "
      "(XDM)</th>"
      "<th>health (HAL)</th><th>active faults</th><th>utilization</th><th>memory</th>"
      "<th>temperature</th><th>last sample</th><th>pods</th></tr></thead><tbody id=\"rows\">\n";
  for (const DeviceReport& d : r.devices) h += DeviceRow(d);
  h += "</tbody></table>\n<script>" + std::string(kPageScript) + "</script>\n</body></html>\n";
  return h;
}

}  // namespace xpu::app
