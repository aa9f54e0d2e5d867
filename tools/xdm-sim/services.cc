#include "services.h"

#include <atomic>
#include <chrono>

#include "kubelet/podresources.grpc.pb.h"
#include "simulator.h"
#include "xdm/api_outer.grpc.pb.h"
#include "xdm/config_service.grpc.pb.h"

namespace xdmsim {
namespace {

using grpc::ServerContext;
using grpc::Status;
using grpc::StatusCode;
namespace api = xdm::api;
namespace cfg = xdm::config;

constexpr std::chrono::milliseconds kPollSlice(100);

// Counts an open stream for ExporterGetStatus for as long as it lives.
class StreamGuard {
 public:
  explicit StreamGuard(std::atomic<int>& n) : n_(n) { ++n_; }
  ~StreamGuard() { --n_; }
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  std::atomic<int>& n_;
};

// Why a long-lived call should stop now, as a gRPC status; OK to go on.
Status StreamEnd(Simulator* sim, ServerContext* ctx, uint64_t break_gen) {
  if (ctx->IsCancelled()) return Status(StatusCode::CANCELLED, "client cancelled");
  if (sim->signals().stopping()) return Status(StatusCode::UNAVAILABLE, "xdm-sim shutting down");
  if (sim->signals().break_generation() != break_gen)
    return Status(StatusCode::UNAVAILABLE, "stream broken by the control API");
  return Status::OK;
}

class XdmService final : public api::XpuDeviceManagerService::Service {
 public:
  explicit XdmService(Simulator* sim) : sim_(sim) {}

  Status ListSupportedXPUType(ServerContext* ctx, const api::XPUTypeRequest*,
                              api::XPUTypeResponse* resp) override {
    if (!Answering(ctx)) return Unanswered();
    resp->add_types(sim_->fleet().model().name);
    return Status::OK;
  }

  Status ListAndWatch(ServerContext* ctx, const api::ListAndWatchRequest*,
                      grpc::ServerWriter<api::ListAndWatchResponse>* writer) override {
    StreamGuard guard(sim_->stream_counter());
    const auto up = std::chrono::milliseconds(NowMs() - sim_->start_time_ms());
    if (up < sim_->options().list_delay)  // a slow device scan
      sim_->signals().SleepUntil(std::chrono::steady_clock::now() + sim_->options().list_delay -
                                 up);
    const uint64_t break_gen = sim_->signals().break_generation();
    uint64_t sent_gen = 0;
    uint64_t tick = sim_->signals().ticks();
    for (;;) {
      Status end = StreamEnd(sim_, ctx, break_gen);
      if (!end.ok()) return end;
      const uint64_t gen = sim_->fleet().devices_generation();
      if (gen != sent_gen && !sim_->signals().paused()) {
        if (!writer->Write(sim_->fleet().Devices())) return Status::OK;  // client gone
        sent_gen = gen;
      }
      tick = sim_->signals().WaitTick(tick, break_gen, kPollSlice);
    }
  }

  Status Allocate(ServerContext* ctx, const api::AllocateRequest* req,
                  api::AllocateResponse* resp) override {
    if (!Answering(ctx)) return Unanswered();
    *resp = sim_->fleet().Allocate(*req);
    return Status::OK;
  }

  Status Release(ServerContext* ctx, const api::ReleaseRequest* req,
                 api::ReleaseResponse* resp) override {
    if (!Answering(ctx)) return Unanswered();
    *resp = sim_->fleet().Release(*req);
    return Status::OK;
  }

  Status ListGpuInfo(ServerContext* ctx, const api::GpuInfoRequest* req,
                     api::GpuInfoResponse* resp) override {
    if (!Answering(ctx)) return Unanswered();
    *resp = sim_->fleet().GpuInfo(*req);
    return Status::OK;
  }

  Status ExporterGetDataList(ServerContext* ctx, const api::ExporterDataRequest* req,
                             api::ExporterDataResponse* resp) override {
    if (!Answering(ctx)) return Unanswered();
    *resp = Stamped(sim_->fleet().Data(*req));
    if (auto older = sim_->Older(*resp, /*poll=*/true))
      *resp = std::move(*older);  // racing the stream
    return Status::OK;
  }

  Status ExporterDataStream(ServerContext* ctx, const api::ExporterDataRequest* req,
                            grpc::ServerWriter<api::ExporterDataResponse>* writer) override {
    if (sim_->options().no_stream)
      return Status(StatusCode::UNIMPLEMENTED, "this daemon serves no ExporterDataStream");
    StreamGuard guard(sim_->stream_counter());
    const uint64_t break_gen = sim_->signals().break_generation();
    uint64_t tick = sim_->signals().ticks();
    bool first = true;
    for (;;) {
      Status end = StreamEnd(sim_, ctx, break_gen);
      if (!end.ok()) return end;
      const bool flood = sim_->options().flood;
      const uint64_t now = first || flood ? tick + (flood ? 1 : 0)
                                          : sim_->signals().WaitTick(tick, break_gen, kPollSlice);
      end = StreamEnd(sim_, ctx, break_gen);
      if (!end.ok()) return end;
      if ((first || now != tick) && !sim_->signals().paused()) {
        api::ExporterDataResponse msg = Stamped(sim_->fleet().Data(*req));
        // Flooding, every message is a snapshot of its own (its sequence
        // advances within the tick), so that each one is decoded and applied
        // as a daemon's new snapshots are, not dropped as the same again.
        if (flood) msg.set_sequence((msg.sequence() << 20) + (++flooded_ & 0xfffff));
        if (!writer->Write(msg)) return Status::OK;         // client gone
        if (auto older = sim_->Older(msg, /*poll=*/false))  // a late message
          if (!writer->Write(*older)) return Status::OK;
        first = false;
      }
      tick = now;
    }
  }

  Status ExporterGetConfig(ServerContext* ctx, const api::ExporterConfigRequest*,
                           api::ExporterConfigResponse* resp) override {
    if (!Answering(ctx)) return Unanswered();
    resp->set_intervalms(static_cast<uint32_t>(sim_->options().interval.count()));
    for (const MetricInfo& m : AllMetrics()) {
      auto* d = resp->add_metrics();
      d->set_id(m.id);
      d->set_name(m.name);
      d->set_unit(m.unit);
      if (m.per_link) d->set_instancelabel("link");
    }
    for (int32_t minor : sim_->fleet().Minors()) resp->add_minors(minor);
    (*resp->mutable_settings())["model"] = sim_->fleet().model().name;
    (*resp->mutable_settings())["simulator"] = "xdm-sim";
    return Status::OK;
  }

  Status ExporterGetStatus(ServerContext* ctx, const api::ExporterStatusRequest*,
                           api::ExporterStatusResponse* resp) override {
    if (!Answering(ctx)) return Unanswered();
    resp->set_status(0);
    resp->set_message("running");
    resp->set_version("xdm-sim 0.1.0");
    resp->set_starttimems(sim_->start_time_ms());
    resp->set_activestreams(static_cast<uint32_t>(sim_->active_streams()));
    resp->set_samplescollected(sim_->fleet().samples_served());
    resp->set_lastcollectms(sim_->fleet().last_tick_ms());
    return Status::OK;
  }

 private:
  // Adds the freshness marker (--marker-id) stamped at send time.
  api::ExporterDataResponse Stamped(api::ExporterDataResponse resp) const {
    // A daemon clock ahead of (or behind) ours: every stamp it sends.
    if (const int64_t skew = sim_->clock_skew_ms(); skew != 0) {
      if (resp.timestampms() != 0) resp.set_timestampms(resp.timestampms() + skew);
      for (auto& s : *resp.mutable_datalist())
        if (s.timestampms() != 0) s.set_timestampms(s.timestampms() + skew);
    }
    if (sim_->options().marker_id == 0) return resp;
    auto* m = resp.add_datalist();
    m->set_minor(0);
    m->set_metricid(sim_->options().marker_id);
    m->set_value(static_cast<double>(std::chrono::duration_cast<std::chrono::microseconds>(
                                         std::chrono::system_clock::now().time_since_epoch())
                                         .count()));
    return resp;
  }
  // Paused: hold the call until resumed or the caller gives up.
  bool Answering(ServerContext* ctx) {
    return sim_->signals().WaitWhilePaused([ctx] { return ctx->IsCancelled(); });
  }
  // What the caller gave up waiting for: a paused daemon never answers, so
  // the caller's own deadline is what ends the call, however the race of
  // the two ends. A daemon shutting down is going away, as a real one's
  // server says (UNAVAILABLE), not paused: a call that came in as it
  // stopped was answered "paused" (e2e_quiet_logs saw four such warnings).
  Status Unanswered() const {
    if (sim_->signals().stopping()) return Status(StatusCode::UNAVAILABLE, "xdm-sim shutting down");
    return Status(StatusCode::DEADLINE_EXCEEDED, "xdm-sim paused");
  }

  Simulator* sim_;
  // Flood messages sent, every stream's: a stream opened anew within a tick
  // goes on from the last one's sequence.
  std::atomic<uint64_t> flooded_{0};
};

class ConfigService final : public cfg::AmpConfigService::Service {
 public:
  explicit ConfigService(Simulator* sim) : sim_(sim) {}

  Status Enable(ServerContext* ctx, const cfg::EnableRequest*, cfg::EnableResponse* resp) override {
    if (!Answering(ctx)) return Status(StatusCode::UNAVAILABLE, "xdm-sim paused");
    enabled_ = true;
    resp->set_status(0);
    return Status::OK;
  }
  Status Disable(ServerContext* ctx, const cfg::DisableRequest*,
                 cfg::DisableResponse* resp) override {
    if (!Answering(ctx)) return Status(StatusCode::UNAVAILABLE, "xdm-sim paused");
    enabled_ = false;
    resp->set_status(0);
    return Status::OK;
  }
  Status QueryStatus(ServerContext* ctx, const cfg::QueryStatusRequest*,
                     cfg::QueryStatusResponse* resp) override {
    if (!Answering(ctx)) return Status(StatusCode::UNAVAILABLE, "xdm-sim paused");
    resp->set_enabled(enabled_.load());
    resp->set_status(0);
    return Status::OK;
  }

 private:
  bool Answering(ServerContext* ctx) {
    return sim_->signals().WaitWhilePaused([ctx] { return ctx->IsCancelled(); });
  }
  Simulator* sim_;
  std::atomic<bool> enabled_{true};
};

class KubeletService final : public v1::PodResourcesLister::Service {
 public:
  explicit KubeletService(Simulator* sim) : sim_(sim) {}
  Status List(ServerContext*, const v1::ListPodResourcesRequest*,
              v1::ListPodResourcesResponse* resp) override {
    for (const auto& [id, uuids] : sim_->fleet().AllocatedUuids()) {
      if (uuids.empty()) continue;  // a CPU container holds no device
      auto* pod = resp->add_pod_resources();
      pod->set_name("alloc-" + id.substr(0, 8));
      pod->set_namespace_("default");
      auto* c = pod->add_containers();
      c->set_name("main");
      auto* d = c->add_devices();
      d->set_resource_name("lingjun.com/xpu");
      for (const auto& u : uuids) d->add_device_ids(u);
    }
    for (const DraClaim& claim : sim_->Claims()) {
      auto* pod = resp->add_pod_resources();
      pod->set_name(claim.pod);
      pod->set_namespace_(claim.namespace_);
      auto* c = pod->add_containers();
      c->set_name(claim.container);
      auto* dr = c->add_dynamic_resources();
      dr->set_claim_name(claim.claim);
      dr->set_claim_namespace(claim.namespace_);
      auto* res = dr->add_claim_resources();
      res->set_driver_name(claim.driver);
      res->set_pool_name(claim.pool);
      res->set_device_name(claim.device);
      for (const std::string& n : claim.cdi) res->add_cdi_devices()->set_name(n);
    }
    return Status::OK;
  }

 private:
  Simulator* sim_;
};

}  // namespace

std::unique_ptr<grpc::Service> MakeKubeletService(Simulator* sim) {
  return std::make_unique<KubeletService>(sim);
}

std::unique_ptr<grpc::Service> MakeXdmService(Simulator* sim) {
  return std::make_unique<XdmService>(sim);
}
std::unique_ptr<grpc::Service> MakeConfigService(Simulator* sim) {
  return std::make_unique<ConfigService>(sim);
}

}  // namespace xdmsim
