#include "kubelet/pod_mapper.h"

#include <prometheus/gauge.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <filesystem>

#include "common/label.h"

namespace xpu::kubelet {
namespace {

// The device a kubelet device ID names, if any. A node has a handful of
// devices, so a scan is fine.
const KnownDevice* ByDeviceId(const std::string& id, const std::vector<KnownDevice>& devices) {
  for (const KnownDevice& d : devices) {
    const std::string& u = d.uuid;
    if (u.empty() || id.compare(0, u.size(), u) != 0) continue;
    if (id.size() == u.size() || !std::isalnum(static_cast<unsigned char>(id[u.size()]))) return &d;
  }
  return nullptr;
}

constexpr const char* kFields[] = {"{uuid}", "{minor}", "{bus_id}"};

// `tmpl` with each {field} replaced by the device's value; empty when the
// device lacks a value it names.
std::string Render(const std::string& tmpl, const KnownDevice& d) {
  std::string out;
  for (size_t i = 0; i < tmpl.size();) {
    const std::string* value = nullptr;
    size_t len = 0;
    for (const char* f : kFields) {
      if (tmpl.compare(i, std::strlen(f), f) != 0) continue;
      len = std::strlen(f);
      value = f[1] == 'u' ? &d.uuid : f[1] == 'm' ? &d.minor : &d.bus_id;
    }
    if (value == nullptr) {
      out += tmpl[i++];
      continue;
    }
    if (value->empty()) return {};
    out += *value;
    i += len;
  }
  return out;
}

// The NAME of a CDI device name "vendor.com/class=NAME" (the whole string
// when it has no '=').
std::string CdiName(const std::string& cdi) {
  const size_t eq = cdi.rfind('=');
  return eq == std::string::npos ? cdi : cdi.substr(eq + 1);
}

void Sanitize(store::PodAssignment* a) {
  // Label values: valid UTF-8, bounded, whatever the kubelet sent.
  for (std::string* v : {&a->pod, &a->namespace_, &a->container, &a->resource, &a->claim,
                         &a->driver, &a->pool, &a->device})
    SanitizeLabelValue(v, kMaxLabelBytes);
}

}  // namespace

Status DraRule::Make(const std::vector<std::string>& drivers, const std::vector<std::string>& names,
                     DraRule* out) {
  DraRule r;
  for (const std::string& d : drivers) {
    try {
      r.drivers_.emplace_back(d, std::regex::ECMAScript | std::regex::optimize);
    } catch (const std::regex_error& e) {
      return Status::InvalidArgument("DRA driver '" + d + "' is not a valid regex: " + e.what());
    }
  }
  for (const std::string& n : names) {
    bool names_one = false;
    for (size_t i = n.find('{'); i != std::string::npos; i = n.find('{', i + 1)) {
      bool known = false;
      for (const char* f : kFields) known = known || n.compare(i, std::strlen(f), f) == 0;
      if (!known)
        return Status::InvalidArgument("DRA device name '" + n +
                                       "': only {uuid}, {minor} and {bus_id} may appear");
      names_one = true;
    }
    if (!names_one)
      return Status::InvalidArgument("DRA device name '" + n +
                                     "' names no field ({uuid}, {minor} or {bus_id})");
    r.names_.push_back(n);
  }
  *out = std::move(r);
  return Status::Ok();
}

bool DraRule::DriverMatches(const std::string& driver) const {
  if (drivers_.empty()) return true;
  for (const std::regex& r : drivers_)
    if (std::regex_match(driver, r)) return true;
  return false;
}

const KnownDevice* DraRule::Find(const std::string& name,
                                 const std::vector<KnownDevice>& devices) const {
  if (name.empty()) return nullptr;
  for (const std::string& tmpl : names_)
    for (const KnownDevice& d : devices)
      if (Render(tmpl, d) == name) return &d;
  return nullptr;
}

PodMatch MatchPods(const v1::ListPodResourcesResponse& resp,
                   const std::vector<KnownDevice>& devices, const DraRule& rule) {
  PodMatch out;
  auto add = [&](store::PodAssignment a) {
    if (out.pods.size() >= kMaxPodAssignments) return;
    Sanitize(&a);
    out.pods.push_back(std::move(a));
  };
  for (const auto& pod : resp.pod_resources()) {
    for (const auto& c : pod.containers()) {
      for (const auto& dev : c.devices()) {
        for (const auto& id : dev.device_ids()) {
          const KnownDevice* d = ByDeviceId(id, devices);
          if (d == nullptr) continue;
          store::PodAssignment a;
          a.uuid = d->uuid;
          a.pod = pod.name();
          a.namespace_ = pod.namespace_();
          a.container = c.name();
          a.resource = dev.resource_name();
          add(std::move(a));
        }
      }
      for (const auto& claim : c.dynamic_resources()) {
        for (const auto& res : claim.claim_resources()) {
          if (!rule.DriverMatches(res.driver_name())) continue;
          const KnownDevice* d = rule.Find(res.device_name(), devices);
          for (int i = 0; d == nullptr && i < res.cdi_devices_size(); ++i)
            d = rule.Find(CdiName(res.cdi_devices(i).name()), devices);
          if (d == nullptr) {
            ++out.dra_unmatched;
            continue;
          }
          store::PodAssignment a;
          a.uuid = d->uuid;
          a.pod = pod.name();
          // A claim lives in its pod's namespace; the field may be absent.
          a.namespace_ = pod.namespace_().empty() ? claim.claim_namespace() : pod.namespace_();
          a.container = c.name();
          a.claim = claim.claim_name();
          a.driver = res.driver_name();
          a.pool = res.pool_name();
          a.device = res.device_name();
          add(std::move(a));
        }
      }
    }
  }
  std::sort(out.pods.begin(), out.pods.end());
  // Several shares of one device, or one device in two claims' results.
  out.pods.erase(std::unique(out.pods.begin(), out.pods.end()), out.pods.end());
  return out;
}

PodMapper::PodMapper(const PodMapperOptions& options, DraRule dra, store::PodPort* registry,
                     prometheus::Registry* self_metrics)
    : options_(options),
      dra_(std::move(dra)),
      registry_(registry),
      collectors_(*self_metrics),
      dra_family_(&prometheus::BuildGauge()
                       .Name("xpu_kubelet_dra_unmatched_devices")
                       .Help("DRA devices of a matching driver, in the kubelet's last answer, "
                             "that name none of this node's devices by "
                             "--kubelet.dra.device-names.")
                       .Register(*self_metrics)) {
  if (options_.interval.count() <= 0) throw std::invalid_argument("kubelet interval must be > 0");
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxMessageBytes);
  stub_ = v1::PodResourcesLister::NewStub(grpc::CreateCustomChannel(
      "unix://" + options_.socket, grpc::InsecureChannelCredentials(), args));
}

PodMapper::~PodMapper() { Stop(); }

void PodMapper::Start() {
  worker_.Start([this] { Loop(); }, "pod-resources");
}

void PodMapper::Stop() {
  worker_.RequestStop();
  calls_.CancelAll();
  worker_.Stop();
}

void PodMapper::Withdraw() { registry_->SetPodAssignments({}); }

void PodMapper::Loop() {
  do {
    PollOnce();
  } while (worker_.SleepFor(options_.interval));
}

bool PodMapper::PollOnce() {
  std::error_code ec;
  if (!std::filesystem::exists(options_.socket, ec)) {
    if (said_.Raise("absent"))
      spdlog::info("kubelet PodResources socket {} absent: no pod attribution", options_.socket);
    if (polled_) {  // the kubelet went away: its answers no longer hold
      collectors_.Record("kubelet", false, std::chrono::steady_clock::duration::zero());
      registry_->SetPodAssignments({});
    }
    return false;
  }
  polled_ = true;
  said_.Clear("absent");
  grpc::ClientContext ctx;
  InFlightCalls<grpc::ClientContext>::Scope in_flight(&calls_, &ctx);
  if (!in_flight.ok()) return false;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  v1::ListPodResourcesResponse resp;
  const auto t0 = std::chrono::steady_clock::now();
  const grpc::Status st = stub_->List(&ctx, v1::ListPodResourcesRequest(), &resp);
  collectors_.Record("kubelet", st.ok(), std::chrono::steady_clock::now() - t0);
  if (!st.ok()) {
    if (said_.Raise("error"))
      spdlog::warn("kubelet PodResources List failed: {}", st.error_message());
    registry_->SetPodAssignments({});
    return false;
  }
  said_.Clear("error");
  std::vector<KnownDevice> devices;
  for (const auto& d : registry_->Devices())
    devices.push_back({d.uuid, std::to_string(d.minor), d.bus_id});
  // Every other card a layer names by a uuid (the sysfs tree's, NVML's).
  for (const auto& c : registry_->Inventory())
    if (!c.uuid.empty())
      devices.push_back({c.uuid, c.minor >= 0 ? std::to_string(c.minor) : "", c.bus_id});
  PodMatch match = MatchPods(resp, devices, dra_);
  if (match.dra_unmatched > 0 && said_.Raise("dra-unmatched"))
    spdlog::info("kubelet: {} DRA device(s) name none of ours (--kubelet.dra.device-names)",
                 match.dra_unmatched);
  if (match.dra_unmatched == 0) said_.Clear("dra-unmatched");
  if (dra_unmatched_ == nullptr) dra_unmatched_ = &dra_family_->Add({});
  dra_unmatched_->Set(static_cast<double>(match.dra_unmatched));
  registry_->SetPodAssignments(std::move(match.pods));
  return true;
}

}  // namespace xpu::kubelet
