#pragma once

#include <grpcpp/grpcpp.h>
#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include "catalog/catalog.h"
#include "common/backoff.h"
#include "common/mutex.h"
#include "common/worker.h"
#include "store/metric_store.h"
#include "store/ports.h"
#include "upstream/decode.h"
#include "upstream/mode_machine.h"
#include "upstream/snapshot_order.h"
#include "xdm/api_outer.grpc.pb.h"
#include "xdm/config_service.grpc.pb.h"

namespace xpu::upstream {

struct ClientOptions {
  // The Lingjun Runtime Kit's sockets; an empty controller endpoint means no
  // Controller.
  std::string xdm_endpoint = "unix:///run/amp/eKitC/xdm/sockets/dp2mgr.sock";
  std::string controller_endpoint = "unix:///run/amp/eKitC/xdm/sockets/config-daemon.sock";
  // The collection interval to assume until ExporterGetConfig tells the one
  // XDM really uses; freshness, the watchdog and the poll period follow that.
  std::chrono::milliseconds interval{1000};
  // A stream silent this long is cancelled and re-subscribed (hung daemon).
  // 0 means 3 intervals, and never less than the stall floor.
  std::chrono::milliseconds watchdog{0};
  // Series expire this long after their last fresh sample; 0 means 3
  // intervals (following the interval XDM reports), and never less than the
  // stall floor.
  std::chrono::milliseconds stale_after{0};
  // A daemon that goes silent (a stall: answers time out, or it re-serves
  // its last snapshot) for less than this keeps its series and the mode; a
  // daemon that refuses calls is down at once. kStallFloor; tests shorten it.
  std::chrono::milliseconds stall_floor = kStallFloor;
  std::chrono::milliseconds backoff_initial{1000};
  std::chrono::milliseconds backoff_max{30000};
  bool keep_unknown = false;  // export unknown metric IDs as xpu_unknown_metric
  // Catalog IDs of families not selected (--metrics.include/exclude),
  // dropped at ingest: they cost neither memory nor CPU.
  std::unordered_set<uint32_t> excluded_ids;
  // --xdm.devices: only these minors' data is taken; empty: every device.
  std::set<int32_t> devices;
  // Largest message accepted from XDM; bigger ones fail the call (counted).
  int max_message_bytes = 4 * 1024 * 1024;
  // Devices taken from one ListAndWatch push; the store holds as many.
  size_t max_devices = store::MetricStore::Options{}.max_devices;
};

// XDM's own interval is believed only within these bounds.
inline constexpr std::chrono::milliseconds kMinUpstreamInterval{50};
inline constexpr std::chrono::milliseconds kMaxUpstreamInterval{std::chrono::minutes(10)};

// Creates the channel to an endpoint; tests may inject their own.
using ChannelFactory = std::function<std::shared_ptr<grpc::Channel>(const std::string& endpoint)>;
// The default: insecure (Unix socket) channel with reconnect backoff and
// keepalive matching ClientOptions.
ChannelFactory DefaultChannelFactory(const ClientOptions& options);

// Last-read answers of the informational RPCs, for /status and /config.
struct UpstreamInfo {
  std::optional<xdm::api::ExporterConfigResponse> config;
  std::optional<xdm::api::ExporterStatusResponse> status;
  std::optional<bool> controller_enabled;
  std::vector<std::string> supported_types;
};

// The last outcome of one upstream source ("collector").
struct CollectorState {
  bool ok = false;
  double duration_seconds = 0;
  std::chrono::system_clock::time_point at;
};

// Where the client stands, for /status.
struct UpstreamState {
  Mode mode = Mode::kDown;
  std::chrono::system_clock::time_point mode_since;
  uint64_t reconnects = 0;
  std::chrono::milliseconds current_backoff{0};  // the stream's next wait if it breaks
  std::optional<std::chrono::steady_clock::duration> since_stream_message;
  std::optional<std::chrono::steady_clock::duration> since_poll;
  std::map<std::string, CollectorState> collectors;
};

// The XDM client: keeps ExporterDataStream subscribed (re-subscribing with
// Backoff), polls ExporterGetDataList while the stream does not deliver, and
// follows ListAndWatch plus the static RPCs. It writes samples into the store
// and device info into the registry, and keeps its self-metrics in the given
// prometheus registry.
//
// Threads: Start() runs three of its own (stream, poller/watchdog, info).
// Start() and Stop() are for the owning thread; the accessors are thread-safe.
class XdmClient {
 public:
  XdmClient(ClientOptions options, std::shared_ptr<const catalog::Catalog> catalog,
            store::MetricStore* store, store::DeviceListPort* devices,
            prometheus::Registry* self_metrics, ChannelFactory channels = nullptr,
            std::function<double()> uniform01 = nullptr);
  ~XdmClient();
  XdmClient(const XdmClient&) = delete;
  XdmClient& operator=(const XdmClient&) = delete;

  void Start();
  // Cancels every call in flight and joins the threads; returns promptly.
  void Stop();

  Mode mode() const;
  // The collection interval in force: XDM's (ExporterGetConfig) when known,
  // else ClientOptions::interval.
  std::chrono::milliseconds interval() const;
  UpstreamInfo info() const;
  UpstreamState state() const;
  uint64_t reconnects() const;

  // What a reload may change (docs/configuration.md): which data is taken
  // (catalog, selection, devices; ClientOptions' fields of the same names)
  // and the timing (the interval assumed until XDM reports its own, and
  // stale-after, 0 meaning 3 intervals). Takes effect with the next message;
  // waits for the one being ingested, if any, to be stored first.
  struct IngestRules {
    std::shared_ptr<const catalog::Catalog> catalog;
    std::unordered_set<uint32_t> excluded_ids;
    bool keep_unknown = false;
    std::set<int32_t> devices;
  };
  void Reconfigure(IngestRules ingest, std::chrono::milliseconds interval,
                   std::chrono::milliseconds stale_after);
  // What the start or the last Reconfigure gave, as given.
  struct Settings {
    std::shared_ptr<const IngestRules> ingest;
    std::chrono::milliseconds interval, stale_after;
  };
  Settings settings() const;

 private:
  struct Metrics;
  void StreamLoop();
  void PollLoop();
  void InfoLoop();
  bool PollOnce();
  // Stores a message's samples in the daemon's order (SnapshotOrder); false
  // if the message holds no fresh data (the same snapshot again past its
  // interval, one older than the last applied, or one sampled longer than
  // stale-after ago).
  bool Ingest(const xdm::api::ExporterDataResponse& msg);
  // The same for a message as it came off the stream, decoded from its bytes
  // (DecodeDataWire); `*parsed` false when they do not parse. A message not
  // newer than the last applied is judged by its top level alone (its
  // samples are not decoded, so not checked): it is dropped either way.
  bool IngestWire(grpc::ByteBuffer* bytes, bool* parsed);
  // Decodes a message by the rules in force, into the samples and the counts
  // of what was dropped; false when it cannot.
  using Decoder = std::function<bool(const IngestRules& rules, std::vector<store::Sample>* out,
                                     DecodeStats* stats)>;
  // A message of these stamps: judged first (the same snapshot again, or an
  // older one, is not decoded), then decoded, then stored; the order takes
  // its stamps only once it decoded.
  bool IngestDecoded(const DataStamps& stamps, const Decoder& decode);
  // Whether it changed; the caller says so with SayInterval once mu_ is
  // released (nothing logs under mu_: a blocked stderr would stall ingest
  // and every scrape's state() call).
  bool SetIntervalLocked(std::chrono::milliseconds interval) XPU_REQUIRES(mu_);
  static void SayInterval(std::chrono::milliseconds interval);
  // Stale-after in force: the configured one, else 3 intervals but no less
  // than the stall floor (EffectiveStaleAfter).
  std::chrono::milliseconds StaleAfterLocked() const XPU_REQUIRES(mu_);
  void PublishModeLocked() XPU_REQUIRES(mu_);
  void ReadStaticInfo();
  void UpdateMode();
  void NoteFailure(const char* call, const grpc::Status& st);  // records last_error_
  void Collector(const std::string& name, bool ok, std::chrono::steady_clock::duration took);
  // Adds `counts` to xpu_exporter_invalid_samples_total{reason} and logs each
  // reason's message the first time it occurs.
  void CountInvalid(const InvalidCounts& counts);
  Backoff NewBackoff() const;
  void Warn(const std::string& key, const std::string& message);
  using CallScope = InFlightCalls<grpc::ClientContext>::Scope;

  const ClientOptions options_;
  store::MetricStore* const store_;
  store::DeviceListPort* const devices_;
  std::unique_ptr<Metrics> metrics_;
  ChannelFactory channels_;
  std::shared_ptr<grpc::Channel> controller_channel_;
  // The XDM channel's stub; replaced (under mu_) by a fresh channel when
  // connection attempts to a returned daemon keep hanging. Calls hold their
  // own reference.
  std::shared_ptr<xdm::api::XpuDeviceManagerService::Stub> stub_ XPU_GUARDED_BY(mu_);
  std::shared_ptr<xdm::api::XpuDeviceManagerService::Stub> stub() const;
  // A server-streaming call whose messages are read as bytes, parsed by the
  // caller, which ends the call (TryCancel) on one that does not parse: gRPC
  // would leave it open. Holds the channel, which must outlive the call (a
  // renewed channel replaces channel_ while the call may still be open).
  struct RawStream {
    std::shared_ptr<grpc::Channel> channel;
    std::unique_ptr<grpc::ClientReader<grpc::ByteBuffer>> reader;
  };
  // "/<XDM's service>/<name>", gRPC's path of one of its methods.
  static std::string MethodPath(const char* name);
  // `method` must outlive the call (gRPC keeps the pointer): a static
  // MethodPath.
  RawStream OpenRawStream(const char* method, grpc::ClientContext* ctx,
                          const google::protobuf::Message& req) const;
  // The channel of stub_: the stream reads its messages' bytes on it, not
  // parsed into messages (IngestWire).
  std::shared_ptr<grpc::Channel> channel_ XPU_GUARDED_BY(mu_);
  // Replaces the XDM channel if the daemon has been unreachable for a while.
  void MaybeRenewChannel();
  std::unique_ptr<xdm::config::AmpConfigService::Stub> controller_;
  std::function<double()> uniform01_;

  InFlightCalls<grpc::ClientContext> calls_;  // cancelled by Stop()
  LogOnce logged_;                            // problems already logged once
  // Wakes the poller at once (the stream just ended), and the stream or
  // ListAndWatch (a poll succeeded while it was down: the daemon is back, so
  // re-subscribe now instead of waiting out the backoff).
  Worker::Alarm poll_now_, stream_wake_, info_wake_;

  // Held by Ingest from judging a message to storing it, so that the stream
  // and the poller apply snapshots in the daemon's order. Taken before mu_,
  // never while holding it; nothing logs while holding it.
  Mutex ingest_mu_ XPU_ACQUIRED_BEFORE(mu_);

  mutable Mutex mu_;
  // State below is protected by mu_.
  // The mode and what it follows from: the stream's and the polls' times,
  // the last failure, the interval in force.
  ModeMachine machine_ XPU_GUARDED_BY(mu_);
  grpc::ClientContext* stream_ctx_ XPU_GUARDED_BY(mu_) =
      nullptr;  // the open stream's, for cancelling
  std::chrono::system_clock::time_point mode_since_ XPU_GUARDED_BY(mu_) =
      std::chrono::system_clock::now();
  std::chrono::milliseconds backoff_base_ XPU_GUARDED_BY(mu_){0};
  std::map<std::string, CollectorState> collectors_ XPU_GUARDED_BY(mu_);
  bool info_open_ XPU_GUARDED_BY(mu_) = false;  // ListAndWatch delivering
  // A poll's answer cutting a re-subscription's wait short (PollOnce): the
  // daemon answers, so the stream (ListAndWatch) is tried now, not after its
  // backoff. Once until the call delivers, a poll finds the daemon gone, or
  // (the stream) its call stayed open an interval; at most once per
  // `spacing`; and the backoff starts anew after it. A daemon that answers
  // polls but refuses the stream was otherwise called thousands of times a
  // second. While its thread is in a call (ListAndWatch's: its static calls
  // and the call itself, delivering or not) a poll does not hurry it but
  // asks for it, done when the call ends. Held under mu_ (a member of
  // XdmClient, guarded there).
  class Hurry {
   public:
    using Clock = std::chrono::steady_clock;
    bool Due(Clock::time_point now, Clock::duration spacing) const {
      return !hurried_ && (!at_ || now - *at_ >= spacing);
    }
    // A poll found it Due: whether to ring its thread now (false: the
    // thread is in a call, and CallEnded hurries it).
    bool Ask(Clock::time_point now) {
      if (calling_) {
        wanted_ = true;
        return false;
      }
      Mark(now);
      return true;
    }
    void CallStarted() { calling_ = true; }
    // Whether a poll asked meanwhile: then it is hurried now (ring it).
    bool CallEnded(Clock::time_point now) {
      calling_ = false;
      if (!std::exchange(wanted_, false)) return false;
      Mark(now);
      return true;
    }
    // The call delivered: it may be hurried again, and nothing asked
    // before counts.
    void Delivered() {
      hurried_ = false;
      wanted_ = false;
    }
    // The daemon is not there, or the stream stayed open an interval: it
    // may be hurried again.
    void Clear() { hurried_ = false; }
    // Whether it was hurried since last asked: the caller's backoff starts anew.
    bool TakeAnew() { return std::exchange(anew_, false); }

   private:
    void Mark(Clock::time_point now) {
      hurried_ = true;
      at_ = now;
      anew_ = true;
    }
    bool hurried_ = false;
    std::optional<Clock::time_point> at_;
    bool anew_ = false;
    bool calling_ = false;
    bool wanted_ = false;
  };
  Hurry stream_hurry_ XPU_GUARDED_BY(mu_), info_hurry_ XPU_GUARDED_BY(mu_);
  bool interval_reported_ XPU_GUARDED_BY(mu_) = false;  // the interval is XDM's own
  std::chrono::milliseconds stale_after_
      XPU_GUARDED_BY(mu_);  // ClientOptions::stale_after, reloadable
  std::chrono::milliseconds configured_interval_
      XPU_GUARDED_BY(mu_);  // ClientOptions::interval, reloadable
  std::shared_ptr<const IngestRules> ingest_ XPU_GUARDED_BY(mu_);  // never null; replaced whole
  // The daemon's order of snapshots: what was applied last. Judged under
  // both ingest_mu_ and mu_ (mu_ alone for Forget).
  SnapshotOrder order_ XPU_GUARDED_BY(mu_);
  uint64_t reconnects_ XPU_GUARDED_BY(mu_) = 0;
  UpstreamInfo info_ XPU_GUARDED_BY(mu_);
  xdm::api::GpuInfoResponse gpu_info_ XPU_GUARDED_BY(mu_);

  Worker worker_;  // last: its threads stop before the state above goes
};

}  // namespace xpu::upstream
