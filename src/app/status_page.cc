// /status: the exporter's view of its sources and the node's devices as JSON
// (schema in docs/http-api.md).
#include <map>

#include <nlohmann/json.hpp>

#include "app/exporter.h"
#include "version.h"

namespace xpu::app {

using Json = nlohmann::ordered_json;

http::Response Exporter::StatusPage() {
  Json j;
  j["version"] = kVersion;
  j["revision"] = kRevision;
  j["uptimeSeconds"] =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  Json up;
  up["endpoint"] = cfg_.xdm_endpoint;
  up["mode"] = upstream::ModeName(client_->mode());
  up["reconnects"] = client_->reconnects();
  const upstream::UpstreamInfo info = client_->info();
  if (info.status) {
    up["xdmStatus"] = {{"status", info.status->status()},
                       {"message", info.status->message()},
                       {"version", info.status->version()},
                       {"activeStreams", info.status->activestreams()}};
  }
  if (info.controller_enabled) up["controllerEnabled"] = *info.controller_enabled;
  j["upstream"] = up;
  Json hal;
  hal["backend"] = hal_ ? hal_->backend_name() : "none";
  hal["up"] = hal_ && hal_->up();
  j["hal"] = hal;

  // Devices by minor, from both sources.
  std::map<int32_t, Json> devices;
  for (const store::DeviceInfo& d : devices_.Devices()) {
    Json& o = devices[d.minor];
    o["minor"] = d.minor;
    o["uuid"] = d.uuid;
    o["model"] = d.model;
    o["health"]["xdm"] = d.health == "Healthy";
    Json topo = Json::array();
    for (const auto& t : d.topology)
      topo.push_back({{"level", t.level}, {"name", t.name}, {"group", t.group}, {"peers", t.peers}});
    o["topology"] = topo;
  }
  for (const store::HalDeviceView& h : devices_.HalDevices()) {
    Json& o = devices[h.minor];
    o["minor"] = h.minor;
    if (!o.contains("uuid")) o["uuid"] = h.uuid;
    if (h.healthy) {
      o["health"]["hal"] = *h.healthy;
    } else {
      o["health"]["hal"] = nullptr;
    }
    Json faults = Json::array();
    for (const auto& f : h.faults) {
      faults.push_back({{"code", f.code},
                        {"name", f.name},
                        {"level", f.level_name},
                        {"levelValue", f.level},
                        {"description", f.description},
                        {"action", f.action},
                        {"known", f.known}});
    }
    o["faults"] = faults;
  }
  Json list = Json::array();
  for (auto& [minor, o] : devices) {
    if (!o.contains("faults")) o["faults"] = Json::array();
    list.push_back(std::move(o));
  }
  j["devices"] = list;
  http::Response r;
  r.content_type = "application/json";
  r.body = j.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
  return r;
}

}  // namespace xpu::app
