#include "control_api.h"

#include <google/protobuf/util/json_util.h>

#include <nlohmann/json.hpp>
#include <string>

#include "simulator.h"

namespace xdmsim {
namespace {

using Json = nlohmann::json;

void Reply(mg_connection* conn, int code, const Json& body) {
  const std::string text = body.dump() + "\n";
  const char* reason = code == 200   ? "OK"
                       : code == 404 ? "Not Found"
                       : code == 405 ? "Method Not Allowed"
                                     : "Bad Request";
  mg_printf(conn,
            "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
            "Connection: close\r\n\r\n",
            code, reason, text.size());
  mg_write(conn, text.data(), text.size());
}

bool ReplyStatus(mg_connection* conn, const xpu::Status& s) {
  if (s.ok()) {
    Reply(conn, 200, {{"ok", true}});
  } else {
    Reply(conn, s.code() == xpu::Status::Code::kNotFound ? 404 : 400,
          {{"ok", false}, {"error", s.message()}});
  }
  return true;
}

std::string Path(mg_connection* conn) {
  const mg_request_info* info = mg_get_request_info(conn);
  return info->local_uri ? info->local_uri : "";
}

// The request body as JSON; sets `error` when it is not an object.
Json Body(mg_connection* conn, std::string* error) {
  std::string body;
  char buf[4096];
  int n;
  while ((n = mg_read(conn, buf, sizeof buf)) > 0) {
    body.append(buf, static_cast<size_t>(n));
    if (body.size() > 65536) {
      *error = "body too large";
      return {};
    }
  }
  if (body.empty()) body = "{}";
  Json j = Json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) *error = "body is not a JSON object";
  return j;
}

bool GetInt(const Json& j, const char* key, int64_t* out, std::string* error) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number_integer()) {
    *error = std::string("missing integer field '") + key + "'";
    return false;
  }
  *out = it->get<int64_t>();
  return true;
}

// /control/claim's body: pod (required), namespace, container, claim,
// driver, pool, device, cdi [names].
xpu::Status ParseClaim(const Json& body, DraClaim* c) {
  try {
    c->pod = body.at("pod").get<std::string>();
    c->namespace_ = body.value("namespace", c->namespace_);
    c->container = body.value("container", c->container);
    c->claim = body.value("claim", "");
    c->driver = body.value("driver", "");
    c->pool = body.value("pool", "");
    c->device = body.value("device", "");
    c->cdi = body.value("cdi", std::vector<std::string>{});
  } catch (const nlohmann::json::exception& e) {
    return xpu::Status::InvalidArgument(e.what());
  }
  return xpu::Status::Ok();
}

// /control/pci's body, applied to device `minor`'s PCI state.
xpu::Status ApplyPci(const Json& body, int minor, Fleet* fleet) {
  PciState pci;
  if (xpu::Status s = fleet->GetPci(minor, &pci); !s.ok()) return s;
  try {
    pci.present = body.value("present", pci.present);
    pci.driver_bound = body.value("driver_bound", pci.driver_bound);
    pci.power_state = body.value("power_state", pci.power_state);
    pci.link_width = body.value("link_width", pci.link_width);
    pci.max_link_width = body.value("max_link_width", pci.max_link_width);
    pci.link_speed = body.value("link_speed", pci.link_speed);
    pci.max_link_speed = body.value("max_link_speed", pci.max_link_speed);
    pci.port_max_link_width = body.value("port_max_link_width", pci.port_max_link_width);
    pci.port_max_link_speed = body.value("port_max_link_speed", pci.port_max_link_speed);
    pci.idle = body.value("idle", pci.idle);
    if (body.contains("aer")) {
      const auto& a = body["aer"];
      const std::string severity = a.at("severity").get<std::string>();
      if (severity != "correctable" && severity != "nonfatal" && severity != "fatal")
        return xpu::Status::InvalidArgument("aer.severity must be correctable, nonfatal or fatal");
      pci.aer[severity][a.at("type").get<std::string>()] += a.value("add", uint64_t{1});
    }
  } catch (const nlohmann::json::exception& e) {
    return xpu::Status::InvalidArgument(e.what());
  }
  return fleet->SetPci(minor, pci);
}

}  // namespace

bool ControlHandler::handleGet(CivetServer*, mg_connection* conn) {
  if (Path(conn) != "/control/state") {
    Reply(conn, 404, {{"ok", false}, {"error", "unknown path"}});
    return true;
  }
  Json devices = Json::array();
  for (const HalDeviceView& d : sim_->fleet().HalView()) {
    devices.push_back(
        {{"minor", d.minor}, {"uuid", d.uuid}, {"healthy", d.healthy}, {"faults", d.fault_codes}});
  }
  Reply(conn, 200,
        {{"paused", sim_->signals().paused()},
         {"ticks", sim_->signals().ticks()},
         {"activeStreams", sim_->active_streams()},
         {"model", sim_->fleet().model().name},
         {"devices", devices}});
  return true;
}

bool ControlHandler::handlePost(CivetServer*, mg_connection* conn) {
  const std::string path = Path(conn);
  std::string error;
  if (path == "/control/stream/break") {
    sim_->signals().BreakStreams();
    return ReplyStatus(conn, xpu::Status::Ok());
  }
  if (path == "/control/pause" || path == "/control/resume") {
    sim_->signals().SetPaused(path == "/control/pause");
    return ReplyStatus(conn, xpu::Status::Ok());
  }
  Json body = Body(conn, &error);
  if (!error.empty()) return ReplyStatus(conn, xpu::Status::InvalidArgument(error));
  xpu::Status s;
  int64_t minor = 0;
  if (path == "/control/fault") {
    if (!GetInt(body, "minor", &minor, &error))
      return ReplyStatus(conn, xpu::Status::InvalidArgument(error));
    if (!body.contains("code") || !body["code"].is_string())
      return ReplyStatus(conn, xpu::Status::InvalidArgument("missing string field 'code'"));
    s = sim_->fleet().RaiseFault(static_cast<int>(minor), body["code"].get<std::string>());
  } else if (path == "/control/health") {
    if (!GetInt(body, "minor", &minor, &error))
      return ReplyStatus(conn, xpu::Status::InvalidArgument(error));
    if (!body.contains("healthy") || !body["healthy"].is_boolean())
      return ReplyStatus(conn, xpu::Status::InvalidArgument("missing boolean field 'healthy'"));
    s = sim_->fleet().SetHealth(static_cast<int>(minor), body["healthy"].get<bool>());
  } else if (path == "/control/devices") {
    int64_t count = 0;
    if (!GetInt(body, "count", &count, &error))
      return ReplyStatus(conn, xpu::Status::InvalidArgument(error));
    s = sim_->fleet().SetCount(static_cast<int>(count));
  } else if (path == "/control/allocate") {
    // The gRPC Allocate, for scripts: the body is an AllocateRequest in JSON.
    xdm::api::AllocateRequest req;
    if (!google::protobuf::util::JsonStringToMessage(body.dump(), &req).ok())
      return ReplyStatus(conn, xpu::Status::InvalidArgument("body is not an AllocateRequest"));
    const xdm::api::AllocateResponse resp = sim_->fleet().Allocate(req);
    if (resp.status() != 0) return ReplyStatus(conn, xpu::Status::InvalidArgument(resp.message()));
  } else if (path == "/control/claim") {
    // A DRA claim for the stand-in kubelet: pod (required), namespace,
    // container, claim, driver, pool, device, cdi [names].
    DraClaim c;
    s = ParseClaim(body, &c);
    if (s.ok()) sim_->AddClaim(std::move(c));
  } else if (path == "/control/garbage") {
    if (!body.contains("enabled") || !body["enabled"].is_boolean())
      return ReplyStatus(conn, xpu::Status::InvalidArgument("missing boolean field 'enabled'"));
    sim_->fleet().SetGarbage(body["enabled"].get<bool>());
  } else if (path == "/control/list-unparsable") {
    if (!body.contains("enabled") || !body["enabled"].is_boolean())
      return ReplyStatus(conn, xpu::Status::InvalidArgument("missing boolean field 'enabled'"));
    sim_->fleet().SetListUnparsable(body["enabled"].get<bool>());
  } else if (path == "/control/replay") {
    if (!body.contains("enabled") || !body["enabled"].is_boolean())
      return ReplyStatus(conn, xpu::Status::InvalidArgument("missing boolean field 'enabled'"));
    sim_->SetReplay(body["enabled"].get<bool>());
  } else if (path == "/control/reorder") {
    if (!body.contains("enabled") || !body["enabled"].is_boolean())
      return ReplyStatus(conn, xpu::Status::InvalidArgument("missing boolean field 'enabled'"));
    sim_->SetReorder(body["enabled"].get<bool>());
    // Optional: the daemon's clock this many ms ahead (negative: behind).
    if (body.contains("skew_ms")) {
      if (!body["skew_ms"].is_number_integer())
        return ReplyStatus(conn, xpu::Status::InvalidArgument("'skew_ms' must be an integer"));
      sim_->SetClockSkew(body["skew_ms"].get<int64_t>());
    }
  } else if (path == "/control/pci") {
    // What the kernel's PCI files say of a device: any of present,
    // driver_bound, power_state, link_width, max_link_width, link_speed,
    // max_link_speed, port_max_link_width, port_max_link_speed (the slot),
    // idle (the link at 2.5 GT/s), and aer {severity, type, add}.
    if (!GetInt(body, "minor", &minor, &error))
      return ReplyStatus(conn, xpu::Status::InvalidArgument(error));
    s = ApplyPci(body, static_cast<int>(minor), &sim_->fleet());
  } else if (path == "/control/ecc") {
    if (!GetInt(body, "minor", &minor, &error))
      return ReplyStatus(conn, xpu::Status::InvalidArgument(error));
    const int64_t corr = body.value("correctable", int64_t{0});
    const int64_t uncorr = body.value("uncorrectable", int64_t{0});
    if (corr < 0 || uncorr < 0)
      return ReplyStatus(conn, xpu::Status::InvalidArgument("error counts must be >= 0"));
    s = sim_->fleet().AddEccErrors(static_cast<int>(minor), static_cast<uint64_t>(corr),
                                   static_cast<uint64_t>(uncorr));
  } else {
    Reply(conn, 404, {{"ok", false}, {"error", "unknown path " + path}});
    return true;
  }
  if (s.ok()) {
    sim_->WriteHal();
    sim_->signals().Notify();
  }
  return ReplyStatus(conn, s);
}

bool ControlHandler::handleDelete(CivetServer*, mg_connection* conn) {
  if (Path(conn) == "/control/claim") {  // ?pod=NAME: that pod's claims go
    const mg_request_info* info = mg_get_request_info(conn);
    const std::string query = info->query_string ? info->query_string : "";
    char pod[256] = {0};
    if (mg_get_var(query.c_str(), query.size(), "pod", pod, sizeof pod) <= 0)
      return ReplyStatus(conn, xpu::Status::InvalidArgument("missing query parameter 'pod'"));
    if (sim_->RemoveClaims(pod) == 0)
      return ReplyStatus(conn, xpu::Status::NotFound(std::string("no claims of pod ") + pod));
    return ReplyStatus(conn, xpu::Status::Ok());
  }
  if (Path(conn) != "/control/fault") {
    Reply(conn, 404, {{"ok", false}, {"error", "unknown path"}});
    return true;
  }
  const mg_request_info* info = mg_get_request_info(conn);
  const std::string query = info->query_string ? info->query_string : "";
  char minor_buf[32] = {0};
  char code_buf[64] = {0};
  if (mg_get_var(query.c_str(), query.size(), "minor", minor_buf, sizeof minor_buf) <= 0)
    return ReplyStatus(conn, xpu::Status::InvalidArgument("missing query parameter 'minor'"));
  mg_get_var(query.c_str(), query.size(), "code", code_buf, sizeof code_buf);
  char* end = nullptr;
  const long minor = std::strtol(minor_buf, &end, 10);
  if (end == minor_buf || *end != '\0')
    return ReplyStatus(conn, xpu::Status::InvalidArgument("minor is not an integer"));
  xpu::Status s = sim_->fleet().ClearFault(static_cast<int>(minor), code_buf);
  if (s.ok()) sim_->WriteHal();
  return ReplyStatus(conn, s);
}

}  // namespace xdmsim
