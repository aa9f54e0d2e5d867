#include "upstream/xdm_client.h"

#include <malloc.h>
#include <spdlog/spdlog.h>

#include <array>
#include <utility>

#include "common/collector_metrics.h"

namespace xpu::upstream {
namespace {

using SteadyClock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr std::chrono::seconds kStaticInfoDeadline(2);
// Re-subscribing doubles its wait, +-20% so a fleet does not reconnect in step.
constexpr double kBackoffMultiplier = 2.0;
constexpr double kBackoffJitter = 0.2;
// Keepalive finds a dead peer on an idle connection; the stream watchdog
// covers a live but silent one. 20 s keeps well inside servers' ping policy
// while a stream is active.
constexpr int kKeepaliveTimeMs = 20000;
constexpr int kKeepaliveTimeoutMs = 10000;
// Buffers grown past this many entries, and more than twice what they hold,
// are released instead of kept for the next message.
constexpr int kKeepBufferEntries = 4096;
constexpr int kTrimAfterSamples = 20000;
constexpr std::chrono::seconds kTrimEvery(2);
constexpr int kChannelReconnectInitial = 100;  // ms
constexpr int kChannelConnectTimeout = 300;    // ms
constexpr int kChannelReconnectMax = 500;      // ms

double Seconds(SteadyClock::duration d) { return std::chrono::duration<double>(d).count(); }

std::string Describe(const grpc::Status& s) {
  return std::to_string(static_cast<int>(s.error_code())) + " " + s.error_message();
}

}  // namespace

ChannelFactory DefaultChannelFactory(const ClientOptions& options) {
  return [options](const std::string& endpoint) {
    grpc::ChannelArguments args;
    // The channel retries within a second: a connect to a Unix socket costs
    // nothing, and a poll must find a returning daemon at once (the stream's
    // own, longer backoff is cut short by it). gRPC also takes the "min"
    // as the connect timeout: a busy daemon may need most of a second to
    // send its SETTINGS frame, and a shorter one makes every attempt fail.
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, kChannelReconnectInitial);
    args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, kChannelConnectTimeout);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, kChannelReconnectMax);
    // Each channel its own subchannels, so that a renewed channel (see
    // MaybeRenewChannel) does not inherit a stuck connection attempt.
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, kKeepaliveTimeMs);
    args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, kKeepaliveTimeoutMs);
    args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 0);
    // gRPC's bandwidth probe, on as by default, on purpose. It pings the
    // daemon after a message (a third of an idle exporter's wake-ups in its
    // first minutes; its pings thin out to one each 10 s within about 11
    // minutes), but without it gRPC 1.51 keeps a 64 KiB window whatever
    // GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES asks: under a flood of
    // 100,000-sample messages the exporter then made 10 sendmsg calls a
    // message, not one (docs/benchmarks.md, issue 51, sixth pass).
    args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 1);
    // A 100,000-series snapshot is several MB; gRPC's default cap is 4 MB. The
    // cap bounds what one message can make us allocate (docs/reliability.md).
    args.SetMaxReceiveMessageSize(options.max_message_bytes);
    return grpc::CreateCustomChannel(endpoint, grpc::InsecureChannelCredentials(), args);
  };
}

struct XdmClient::Metrics {
  explicit Metrics(prometheus::Registry& r)
      : up_family(prometheus::BuildGauge()
                      .Name("xpu_exporter_upstream_up")
                      .Help("Whether metric data arrives from XDM (stream or poll): 1 yes, 0 "
                            "no; absent where no daemon is configured (--xdm.endpoint \"\").")
                      .Register(r)),
        up(up_family.Add({})),
        mode_family(prometheus::BuildGauge()
                        .Name("xpu_exporter_upstream_mode")
                        .Help("How metric data arrives from XDM; the current mode is 1.")
                        .Register(r)),
        reconnects(prometheus::BuildCounter()
                       .Name("xpu_exporter_stream_reconnects_total")
                       .Help("Re-subscriptions to ExporterDataStream after it ended.")
                       .Register(r)
                       .Add({})),
        stream_messages(prometheus::BuildCounter()
                            .Name("xpu_exporter_stream_messages_total")
                            .Help("Messages received on ExporterDataStream.")
                            .Register(r)
                            .Add({})),
        poll_requests(prometheus::BuildCounter()
                          .Name("xpu_exporter_poll_requests_total")
                          .Help("ExporterGetDataList calls made while the stream was down.")
                          .Register(r)
                          .Add({})),
        poll_failures(prometheus::BuildCounter()
                          .Name("xpu_exporter_poll_failures_total")
                          .Help("ExporterGetDataList calls that failed.")
                          .Register(r)
                          .Add({})),
        last_sample(prometheus::BuildGauge()
                        .Name("xpu_exporter_last_sample_timestamp_seconds")
                        .Help("Unix time of the last metric data received from XDM.")
                        .Register(r)
                        .Add({})),
        collectors(r),
        series_dropped(prometheus::BuildCounter()
                           .Name("xpu_exporter_series_dropped_total")
                           .Help("Samples of new series refused because the series cap was "
                                 "reached (--collector.max-series).")
                           .Register(r)
                           .Add({})),
        unknown_samples(prometheus::BuildCounter()
                            .Name("xpu_exporter_unknown_metric_samples_total")
                            .Help("Samples whose metric ID is not in the catalog.")
                            .Register(r)
                            .Add({})),
        invalid(prometheus::BuildCounter()
                    .Name("xpu_exporter_invalid_samples_total")
                    .Help("Upstream data dropped or repaired, by reason.")
                    .Register(r)),
        stale_family(prometheus::BuildCounter()
                         .Name("xpu_exporter_stale_messages_total")
                         .Help("XDM messages not applied, by reason: repeat (the snapshot "
                               "already stored), out_of_order (older than one already "
                               "applied), expired (sampled longer than stale-after ago).")
                         .Register(r)),
        interval(prometheus::BuildGauge()
                     .Name("xpu_exporter_upstream_interval_seconds")
                     .Help("Collection interval in force: XDM's own (ExporterGetConfig) when "
                           "known, else --collector.interval.")
                     .Register(r)
                     .Add({})) {
    for (Mode m : {Mode::kDown, Mode::kPoll, Mode::kStream})
      mode[static_cast<int>(m)] = &mode_family.Add({{"mode", ModeName(m)}});
    mode[static_cast<int>(Mode::kDown)]->Set(1);
    for (const InvalidReasonInfo& r : kInvalidReasons)
      invalid_by[static_cast<size_t>(r.reason)] = &invalid.Add({{"reason", std::string(r.name)}});
    using V = SnapshotOrder::Verdict;
    for (V v : {V::kRepeat, V::kOutOfOrder, V::kExpired})
      stale[static_cast<int>(v)] = &stale_family.Add({{"reason", VerdictName(v)}});
  }
  prometheus::Family<prometheus::Gauge>& up_family;
  prometheus::Gauge& up;
  prometheus::Family<prometheus::Gauge>& mode_family;
  prometheus::Gauge* mode[3];
  prometheus::Counter& reconnects;
  prometheus::Counter& stream_messages;
  prometheus::Counter& poll_requests;
  prometheus::Counter& poll_failures;
  prometheus::Gauge& last_sample;
  CollectorMetrics collectors;
  prometheus::Counter& series_dropped;
  prometheus::Counter& unknown_samples;
  prometheus::Family<prometheus::Counter>& invalid;
  std::array<prometheus::Counter*, kInvalidReasonCount> invalid_by{};
  prometheus::Family<prometheus::Counter>& stale_family;
  // By verdict; those that apply (kApply, kSame) have none.
  prometheus::Counter* stale[SnapshotOrder::kVerdicts] = {};
  prometheus::Gauge& interval;
};

XdmClient::XdmClient(ClientOptions options, std::shared_ptr<const catalog::Catalog> catalog,
                     store::MetricStore* store, store::DeviceListPort* devices,
                     prometheus::Registry* self_metrics, ChannelFactory channels,
                     std::function<double()> uniform01)
    : options_(std::move(options)),
      store_(store),
      devices_(devices),
      metrics_(std::make_unique<Metrics>(*self_metrics)),
      uniform01_(std::move(uniform01)),
      machine_(ModeMachine::Options{options_.interval, options_.watchdog, options_.stall_floor}),
      stale_after_(options_.stale_after),
      configured_interval_(options_.interval),
      ingest_(std::make_shared<IngestRules>(IngestRules{std::move(catalog), options_.excluded_ids,
                                                        options_.keep_unknown, options_.devices})) {
  if (options_.interval.count() <= 0) throw std::invalid_argument("interval must be > 0");
  if (options_.max_message_bytes <= 0) throw std::invalid_argument("max_message_bytes must be > 0");
  if (options_.max_devices == 0) throw std::invalid_argument("max_devices must be > 0");
  metrics_->interval.Set(std::chrono::duration<double>(options_.interval).count());
  devices_->SetXdmLive(false);
  if (!channels) channels = DefaultChannelFactory(options_);
  // The stream's and ListAndWatch's backoffs draw at once when XDM dies:
  // one engine each thread (before, both shared one mt19937, unlocked).
  if (!uniform01_) uniform01_ = SharedUniform01();
  channels_ = channels;
  if (options_.xdm_endpoint.empty()) {
    // No daemon on this node (a hardware-only node): nothing to connect to,
    // and nothing to say is down. `metrics_->up` is gone with its series:
    // only the loops set it, and Start() runs none without an endpoint.
    metrics_->up_family.Remove(&metrics_->up);
    return;
  }
  {
    MutexLock lock(mu_);
    channel_ = channels_(options_.xdm_endpoint);
    stub_ = xdm::api::XpuDeviceManagerService::NewStub(channel_);
  }
  if (!options_.controller_endpoint.empty()) {
    controller_channel_ = channels(options_.controller_endpoint);
    controller_ = xdm::config::AmpConfigService::NewStub(controller_channel_);
  }
}

XdmClient::~XdmClient() { Stop(); }

void XdmClient::Start() {
  if (options_.xdm_endpoint.empty()) {
    spdlog::info("no XDM daemon configured (--xdm.endpoint \"\"): the HAL's sources alone");
    return;
  }
  worker_.Start([this] { StreamLoop(); }, "xdm-stream");
  worker_.Start([this] { PollLoop(); }, "xdm-poll");
  worker_.Start([this] { InfoLoop(); }, "xdm-info");
}

void XdmClient::Stop() {
  worker_.RequestStop();  // first: calls that end now end because we stop
  calls_.CancelAll();
  worker_.Stop();
}

Backoff XdmClient::NewBackoff() const {
  return Backoff(options_.backoff_initial, kBackoffMultiplier, options_.backoff_max, kBackoffJitter,
                 uniform01_);
}

std::shared_ptr<xdm::api::XpuDeviceManagerService::Stub> XdmClient::stub() const {
  MutexLock lock(mu_);
  return stub_;
}

std::string XdmClient::MethodPath(const char* name) {
  return std::string("/") + xdm::api::XpuDeviceManagerService::service_full_name() + "/" + name;
}

XdmClient::RawStream XdmClient::OpenRawStream(const char* method, grpc::ClientContext* ctx,
                                              const google::protobuf::Message& req) const {
  RawStream out;
  {
    MutexLock lock(mu_);
    out.channel = channel_;
  }
  const grpc::internal::RpcMethod m(method, grpc::internal::RpcMethod::SERVER_STREAMING,
                                    out.channel);
  out.reader.reset(grpc::internal::ClientReaderFactory<grpc::ByteBuffer>::Create(out.channel.get(),
                                                                                 m, ctx, req));
  return out;
}

// gRPC 1.51's client sometimes never sees the SETTINGS frame of a daemon that
// just restarted: its connection attempts time out one after another for
// seconds (docs/reliability.md). A fresh channel starts a fresh attempt.
void XdmClient::MaybeRenewChannel() {
  {
    MutexLock lock(mu_);
    if (!machine_.RenewChannel(SteadyClock::now())) return;
  }
  auto channel = channels_(options_.xdm_endpoint);
  auto fresh = xdm::api::XpuDeviceManagerService::NewStub(channel);
  MutexLock lock(mu_);
  stub_ = std::move(fresh);
  channel_ = std::move(channel);
}

std::chrono::milliseconds XdmClient::interval() const {
  MutexLock lock(mu_);
  return machine_.interval();
}

bool XdmClient::SetIntervalLocked(milliseconds interval) {
  if (!machine_.set_interval(interval)) return false;
  store_->set_stale_after(StaleAfterLocked());
  metrics_->interval.Set(std::chrono::duration<double>(interval).count());
  return true;
}

void XdmClient::SayInterval(milliseconds interval) {
  spdlog::info("XDM collects every {} ms; freshness, watchdog and polling follow it",
               interval.count());
}

void XdmClient::Reconfigure(IngestRules ingest, milliseconds interval, milliseconds stale_after) {
  if (!ingest.catalog) throw std::invalid_argument("Reconfigure needs a catalog");
  if (interval.count() <= 0) throw std::invalid_argument("interval must be > 0");
  bool changed = false;
  {
    // After the message being ingested (if any): once this returns, every
    // message decoded by the old rules is in the store, and every later one
    // is decoded by the new rules, so the caller's Drop of what is no longer
    // selected is final (a message in between used to add it back).
    MutexLock ordered(ingest_mu_);
    MutexLock lock(mu_);
    ingest_ = std::make_shared<const IngestRules>(std::move(ingest));
    stale_after_ = stale_after;
    configured_interval_ = interval;
    store_->set_stale_after(StaleAfterLocked());
    if (!interval_reported_) changed = SetIntervalLocked(interval);
  }
  if (changed) SayInterval(interval);
}

XdmClient::Settings XdmClient::settings() const {
  MutexLock lock(mu_);
  return Settings{ingest_, configured_interval_, stale_after_};
}

milliseconds XdmClient::StaleAfterLocked() const {
  return EffectiveStaleAfter(stale_after_, machine_.interval(), options_.stall_floor);
}

void XdmClient::Warn(const std::string& key, const std::string& message) {
  if (logged_.Raise(key)) spdlog::warn("{} (logged once; counted)", message);
}

void XdmClient::CountInvalid(const InvalidCounts& counts) {
  for (const InvalidReasonInfo& r : kInvalidReasons) {
    const size_t n = counts[r.reason];
    if (n == 0) continue;
    metrics_->invalid_by[static_cast<size_t>(r.reason)]->Increment(static_cast<double>(n));
    Warn(std::string(r.name), std::string(r.message));
  }
}

void XdmClient::Collector(const std::string& name, bool ok, SteadyClock::duration took) {
  metrics_->collectors.Record(name, ok, took);
  MutexLock lock(mu_);
  collectors_[name] = CollectorState{ok, Seconds(took), std::chrono::system_clock::now()};
}

bool XdmClient::Ingest(const xdm::api::ExporterDataResponse& msg) {
  return IngestDecoded(
      {msg.timestampms(), msg.sequence(), static_cast<size_t>(msg.datalist_size())},
      [&msg](const IngestRules& rules, std::vector<store::Sample>* out, DecodeStats* stats) {
        DecodeData(msg, *rules.catalog, rules.keep_unknown, out, stats, &rules.excluded_ids,
                   &rules.devices);
        return true;
      });
}

bool XdmClient::IngestWire(grpc::ByteBuffer* bytes, bool* parsed) {
  std::vector<grpc::Slice> slices;
  DataStamps stamps;
  *parsed = bytes->Dump(&slices).ok();
  WirePieces wire;
  wire.reserve(slices.size());
  for (const grpc::Slice& s : slices)
    wire.emplace_back(reinterpret_cast<const char*>(s.begin()), s.size());
  if (*parsed) *parsed = ReadDataStamps(wire, &stamps).ok();
  if (!*parsed) return false;
  return IngestDecoded(
      stamps, [&](const IngestRules& rules, std::vector<store::Sample>* out, DecodeStats* stats) {
        DataStamps whole;
        *parsed = DecodeDataWire(wire, *rules.catalog, rules.keep_unknown, out, stats, &whole,
                                 &rules.excluded_ids, &rules.devices)
                      .ok();
        return *parsed;
      });
}

bool XdmClient::IngestDecoded(const DataStamps& stamps, const Decoder& decode) {
  // One message at a time, judged, decoded and applied in one step: the
  // stream and the poller may both deliver, and an older snapshot judged
  // before a newer one must not be applied after it (docs/architecture.md,
  // "Ordered ingest"); and once Reconfigure returns, no message decoded by
  // the old rules is still on its way to the store.
  MutexLock ordered(ingest_mu_);
  std::shared_ptr<const IngestRules> ingest;
  SnapshotOrder judged;  // the order as it is once this message is taken
  SnapshotOrder::Verdict verdict;
  {
    MutexLock lock(mu_);
    ingest = ingest_;
    judged = order_;
    const SnapshotOrder::Clocks clocks{std::chrono::duration_cast<milliseconds>(
                                           std::chrono::system_clock::now().time_since_epoch())
                                           .count(),
                                       SteadyClock::now(), StaleAfterLocked(),
                                       machine_.fresh_window()};
    verdict = judged.Judge(stamps.timestamp_ms, stamps.sequence, clocks);
  }
  switch (verdict) {
    case SnapshotOrder::Verdict::kApply:
      break;
    case SnapshotOrder::Verdict::kSame:
      // The snapshot already stored (a poll and the stream may both fetch
      // it within one interval): nothing new, and still current.
      return true;
    default:
      metrics_->stale[static_cast<int>(verdict)]->Increment();
      return false;
  }
  thread_local std::vector<store::Sample> batch;
  // One huge message, applied or not, must not pin its buffer for the life
  // of the thread.
  struct Shrink {
    ~Shrink() {
      if (batch.capacity() > kKeepBufferEntries && batch.capacity() > 2 * batch.size()) {
        batch.clear();
        batch.shrink_to_fit();
      }
    }
  } shrink;
  DecodeStats ds;
  if (!decode(*ingest, &batch, &ds)) return false;  // the order not taken: nothing applied
  // The order takes a stamped message's stamps (a Forget() meanwhile, a
  // restart, would have taken this message too); an unstamped one changes
  // nothing, and must not undo such a Forget().
  if (stamps.timestamp_ms != 0 || stamps.sequence != 0) {
    MutexLock lock(mu_);
    order_ = judged;
  }
  const store::ApplyStats st = store_->Apply(batch, SteadyClock::now());
  metrics_->last_sample.Set(
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count());
  ordered.Unlock();  // what is left trims, counts and logs
  // A large message leaves hundreds of thousands of freed small objects
  // behind (its decoded fields); hand their pages back to the system now and
  // then, so a flooding daemon cannot ratchet RSS up (docs/reliability.md).
  if (stamps.samples > kTrimAfterSamples) {
    static std::atomic<int64_t> last_trim{0};
    const int64_t now = SteadyClock::now().time_since_epoch().count();
    int64_t last = last_trim.load();
    if (now - last > std::chrono::nanoseconds(kTrimEvery).count() &&
        last_trim.compare_exchange_strong(last, now))
      malloc_trim(0);
  }
  if (ds.unknown_id) {
    metrics_->unknown_samples.Increment(static_cast<double>(ds.unknown_id));
    Warn("unknown_id", "XDM sent metric IDs that the catalog does not know");
  }
  InvalidCounts invalid = ds.invalid;
  invalid.Add(InvalidReason::kDuplicate, st.duplicates);
  invalid.Add(InvalidReason::kUnknownDevice, st.unknown_device);
  invalid.Add(InvalidReason::kDeviceCap, st.over_device_cap);
  CountInvalid(invalid);
  if (st.dropped) {
    metrics_->series_dropped.Increment(static_cast<double>(st.dropped));
    Warn("series_cap", "series cap reached (--collector.max-series); new series dropped");
  }
  return true;
}

// Gauges and the registry's liveness are set under mu_, so concurrent mode
// changes cannot leave them disagreeing with the mode.
void XdmClient::PublishModeLocked() {
  for (Mode x : {Mode::kDown, Mode::kPoll, Mode::kStream})
    metrics_->mode[static_cast<int>(x)]->Set(x == machine_.mode() ? 1 : 0);
  metrics_->up.Set(machine_.mode() == Mode::kDown ? 0 : 1);
  // XDM's view of device health is served only while XDM is alive: its
  // ListAndWatch open and its data fresh.
  devices_->SetXdmLive(info_open_ && machine_.mode() != Mode::kDown);
}

void XdmClient::UpdateMode() {
  if (worker_.stopping()) return;  // calls end because we cancel them, not because XDM left
  ModeMachine::Change c;
  {
    MutexLock lock(mu_);
    c = machine_.Update(SteadyClock::now());
    if (c.changed()) mode_since_ = std::chrono::system_clock::now();
    PublishModeLocked();
  }
  if (c.say_down) {
    spdlog::warn(
        "XDM down at {} (upstream mode {} -> down): {}; retrying with backoff, details "
        "at --log.level=debug",
        options_.xdm_endpoint, ModeName(c.from), c.reason);
  } else if (c.say_back) {
    spdlog::info("XDM back at {} (upstream mode {} -> {})", options_.xdm_endpoint, ModeName(c.from),
                 ModeName(c.to));
  } else if (c.changed()) {
    spdlog::info("upstream mode {} -> {}", ModeName(c.from), ModeName(c.to));
  }
}

void XdmClient::NoteFailure(const char* call, const grpc::Status& st) {
  MutexLock lock(mu_);
  machine_.Failed(std::string(call) + ": " + Describe(st));
}

void XdmClient::StreamLoop() {
  Backoff backoff = NewBackoff();
  const xdm::api::ExporterDataRequest req;  // everything
  while (!worker_.stopping()) {
    grpc::ClientContext ctx;
    CallScope tracked(&calls_, &ctx);
    if (!tracked.ok()) break;
    {
      MutexLock lock(mu_);
      stream_ctx_ = &ctx;
      worker_.Reset(&stream_wake_);
      machine_.StreamOpened(SteadyClock::now());
    }
    // The stream's messages as bytes: decoded as they lie (IngestWire), never
    // made into message objects (at 100,000 samples those were 18 MB).
    static const std::string kMethod = MethodPath("ExporterDataStream");
    const RawStream call = OpenRawStream(kMethod.c_str(), &ctx, req);
    grpc::ClientReader<grpc::ByteBuffer>* const reader = call.reader.get();
    grpc::ByteBuffer msg;
    bool delivered = false;
    // The stream has held: a message an interval or more after it opened
    // (not a second message: a daemon's push on subscribing and its next
    // tick may come together). Only then are the backoff and the polls'
    // hurry reset: a daemon that sends one message on subscribing and drops
    // the call (a handler that fails after its first write) is re-subscribed
    // with a growing backoff, not once a second for ever.
    bool held = false;
    const auto opened = SteadyClock::now();
    auto t0 = opened;
    while (reader->Read(&msg)) {
      metrics_->stream_messages.Increment();
      bool parsed = true;
      const bool fresh = IngestWire(&msg, &parsed);
      msg.Clear();
      if (!parsed) {
        // Ended here (gRPC would leave it open, as it did a typed read that
        // failed to parse: ListAndWatch's test), and opened anew after the
        // backoff, which such a stream never resets; polls meanwhile.
        Warn("stream_parse", "an ExporterDataStream message does not parse; re-subscribing");
        ctx.TryCancel();
        break;
      }
      if (!delivered) {
        delivered = true;
        spdlog::info("ExporterDataStream delivering from {}", options_.xdm_endpoint);
        logged_.Clear("watchdog");
      }
      if (!held) {
        MutexLock lock(mu_);
        held = SteadyClock::now() - opened >= machine_.interval();
        if (held) {
          backoff.Reset();
          backoff_base_ = backoff.base();
          stream_hurry_.Delivered();
        }
      }
      if (fresh) {
        MutexLock lock(mu_);
        machine_.StreamDelivered(SteadyClock::now());
      }
      Collector("stream", true, SteadyClock::now() - t0);
      UpdateMode();
      t0 = SteadyClock::now();
    }
    const grpc::Status st = reader->Finish();
    if (!st.ok()) NoteFailure("ExporterDataStream", st);
    {
      MutexLock lock(mu_);
      stream_ctx_ = nullptr;
      // Open an interval or longer (a stall the watchdog ended), not refused
      // at once: the next poll that answers may hurry it again.
      if (SteadyClock::now() - opened >= machine_.interval()) stream_hurry_.Clear();
      machine_.StreamEnded();
      worker_.Ring(&poll_now_);
    }
    UpdateMode();
    if (worker_.stopping()) break;
    Collector("stream", false, SteadyClock::now() - t0);
    milliseconds wait;
    {
      MutexLock lock(mu_);
      // A poll hurried it since its last wait: a stream still not ready is
      // tried again after the first wait, not the one a long outage grew.
      if (stream_hurry_.TakeAnew()) backoff.Reset();
      wait = backoff.Next();
      backoff_base_ = backoff.base();
    }
    spdlog::debug(
        "ExporterDataStream ended ({}); polling, re-subscribing in {} ms "
        "(at once when a poll succeeds)",
        Describe(st), wait.count());
    if (!worker_.SleepFor(wait, &stream_wake_)) break;
    metrics_->reconnects.Increment();
    MutexLock lock(mu_);
    ++reconnects_;
  }
}

bool XdmClient::PollOnce() {
  grpc::ClientContext ctx;
  CallScope tracked(&calls_, &ctx);
  if (!tracked.ok()) return false;
  milliseconds deadline;
  {
    MutexLock lock(mu_);
    deadline = machine_.poll_deadline();
  }
  ctx.set_deadline(std::chrono::system_clock::now() + deadline);
  xdm::api::ExporterDataResponse resp;
  const auto t0 = SteadyClock::now();
  const auto stub = this->stub();  // outlives the call
  const grpc::Status st = stub->ExporterGetDataList(&ctx, xdm::api::ExporterDataRequest(), &resp);
  metrics_->poll_requests.Increment();
  Collector("poll", st.ok(), SteadyClock::now() - t0);
  bool fresh = false;
  if (st.ok()) {
    fresh = Ingest(resp);
  } else {
    metrics_->poll_failures.Increment();
    spdlog::debug("ExporterGetDataList failed: {}", Describe(st));
    NoteFailure("ExporterGetDataList", st);
  }
  {
    MutexLock lock(mu_);
    // A timeout is a stall (a paused or overloaded daemon); any other
    // failure means the daemon is not there to answer.
    machine_.Polled(SteadyClock::now(), fresh,
                    !st.ok() && st.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED);
    if (st.ok()) {
      // The daemon answers: whatever is down re-subscribes now (Hurry).
      // Rung under mu_, so that a stream opening meanwhile (and resetting
      // its alarm) is seen. Spaced by an interval, or the first backoff if
      // longer, less a tenth (a poll is stamped after its call).
      const auto now = SteadyClock::now();
      const auto spacing = std::max(machine_.interval(), options_.backoff_initial) * 9 / 10;
      if (!machine_.stream_open() && stream_hurry_.Due(now, spacing) && stream_hurry_.Ask(now))
        worker_.Ring(&stream_wake_);
      if (!info_open_ && info_hurry_.Due(now, spacing) && info_hurry_.Ask(now))
        worker_.Ring(&info_wake_);
    } else if (st.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED) {
      // Not there to answer: its return may hurry them again.
      stream_hurry_.Clear();
      info_hurry_.Clear();
    }
  }
  return fresh;
}

void XdmClient::PollLoop() {
  // Give the stream an interval to deliver before the first look (half to
  // one and a half: then on the grid the HAL's samplers tick on, NextTick,
  // one wake-up for all of them).
  auto tick = SteadyClock::now();
  milliseconds interval = options_.interval;
  while (worker_.SleepToTick(&tick, interval, &poll_now_)) {
    const auto now = SteadyClock::now();
    bool stream_fresh;
    std::optional<milliseconds> silent;  // the watchdog cancelled a stream silent this long
    {
      MutexLock lock(mu_);
      interval = machine_.interval();
      stream_fresh = machine_.StreamFresh(now);
      if (stream_ctx_ != nullptr) {
        silent = machine_.Silent(now);
        if (silent) stream_ctx_->TryCancel();
      }
    }
    // Said outside mu_: a blocked log (stderr full) must not stall ingest.
    if (silent && logged_.Raise("watchdog"))
      spdlog::warn(
          "ExporterDataStream silent for {} ms; cancelling it (watchdog; said once until data "
          "flows)",
          silent->count());
    if (!stream_fresh) PollOnce();
    UpdateMode();
    MaybeRenewChannel();
  }
}

void XdmClient::ReadStaticInfo() {
  const auto stub = this->stub();  // outlives the calls below
  auto call = [&](const char* name, auto&& fn) {
    grpc::ClientContext ctx;
    CallScope tracked(&calls_, &ctx);
    if (!tracked.ok()) return;
    ctx.set_deadline(std::chrono::system_clock::now() + kStaticInfoDeadline);
    const auto t0 = SteadyClock::now();
    grpc::Status st = fn(&ctx);
    Collector(name, st.ok(), SteadyClock::now() - t0);
    const std::string key = std::string("call:") + name;
    if (st.ok()) {
      if (logged_.Clear(key)) spdlog::info("{} works again", name);
    } else if (!worker_.stopping()) {
      spdlog::debug("{} failed: {}", name, Describe(st));
      // XDM unreachable is said once as "XDM down"; the Controller has its
      // own socket, and other codes are their own problem: once each.
      // A daemon shutting down cancels the calls it was serving
      // (CANCELLED, when we did not stop): that too is XDM going away.
      const bool xdm_unreachable = (st.error_code() == grpc::StatusCode::UNAVAILABLE ||
                                    st.error_code() == grpc::StatusCode::CANCELLED) &&
                                   std::string(name) != "controller";
      if (!xdm_unreachable && logged_.Raise(key))
        spdlog::warn("{} failed: {} (said once until it works)", name, Describe(st));
    }
  };
  call("gpu_info", [&](grpc::ClientContext* ctx) {
    xdm::api::GpuInfoResponse resp;
    grpc::Status st = stub->ListGpuInfo(ctx, {}, &resp);
    if (st.ok()) {
      MutexLock lock(mu_);
      gpu_info_ = std::move(resp);
    }
    return st;
  });
  call("supported_types", [&](grpc::ClientContext* ctx) {
    xdm::api::XPUTypeResponse resp;
    grpc::Status st = stub->ListSupportedXPUType(ctx, {}, &resp);
    if (st.ok()) {
      MutexLock lock(mu_);
      info_.supported_types.assign(resp.types().begin(), resp.types().end());
    }
    return st;
  });
  call("exporter_config", [&](grpc::ClientContext* ctx) {
    xdm::api::ExporterConfigResponse resp;
    grpc::Status st = stub->ExporterGetConfig(ctx, {}, &resp);
    bool changed = false;
    const milliseconds reported(resp.intervalms());
    if (st.ok()) {
      MutexLock lock(mu_);
      if (reported >= kMinUpstreamInterval && reported <= kMaxUpstreamInterval) {
        changed = SetIntervalLocked(reported);
        interval_reported_ = true;
      }
      info_.config = std::move(resp);
    }
    if (changed) SayInterval(reported);
    return st;
  });
  call("exporter_status", [&](grpc::ClientContext* ctx) {
    xdm::api::ExporterStatusResponse resp;
    grpc::Status st = stub->ExporterGetStatus(ctx, {}, &resp);
    bool restarted = false;
    if (st.ok()) {
      MutexLock lock(mu_);
      // A new start time: the daemon restarted, and its sequence (and
      // perhaps its clock) with it. Its next snapshot is taken as it comes.
      restarted = info_.status && info_.status->starttimems() != resp.starttimems();
      if (restarted) order_.Forget();
      info_.status = std::move(resp);
    }
    if (restarted)
      spdlog::info("XDM restarted (a new startTimeMs); its snapshots are ordered anew");
    return st;
  });
  if (controller_) {
    call("controller", [&](grpc::ClientContext* ctx) {
      xdm::config::QueryStatusResponse resp;
      grpc::Status st = controller_->QueryStatus(ctx, {}, &resp);
      if (st.ok()) {
        MutexLock lock(mu_);
        info_.controller_enabled = resp.enabled();
      }
      return st;
    });
  }
}

void XdmClient::InfoLoop() {
  Backoff backoff = NewBackoff();
  while (!worker_.stopping()) {
    {
      MutexLock lock(mu_);
      info_hurry_.CallStarted();  // until the call ends: no poll hurries it meanwhile
    }
    ReadStaticInfo();
    grpc::ClientContext ctx;
    CallScope tracked(&calls_, &ctx);
    if (!tracked.ok()) break;
    // Read as bytes and parsed here: a message protobuf refuses (a map key
    // that is not UTF-8) makes a typed Read fail while gRPC leaves the call
    // open, and Finish would then wait as long as the daemon keeps it open,
    // the list of before kept meanwhile. It ends the call instead.
    static const std::string kMethod = MethodPath("ListAndWatch");
    const RawStream call = OpenRawStream(kMethod.c_str(), &ctx, xdm::api::ListAndWatchRequest());
    grpc::ClientReader<grpc::ByteBuffer>* const reader = call.reader.get();
    grpc::ByteBuffer msg;
    xdm::api::ListAndWatchResponse resp;
    bool unparsed = false;
    auto t0 = SteadyClock::now();
    while (reader->Read(&msg)) {
      if (!grpc::SerializationTraits<xdm::api::ListAndWatchResponse>::Deserialize(&msg, &resp)
               .ok()) {
        // Said once until a list parses again (the call's CANCELLED is ours,
        // not said again below).
        if (logged_.Raise("list_and_watch_parse"))
          spdlog::warn(
              "a ListAndWatch message does not parse; its list is not taken, and the "
              "call is opened anew after its backoff");
        unparsed = true;
        ctx.TryCancel();
        break;
      }
      backoff.Reset();
      bool missing_info;
      {
        MutexLock lock(mu_);
        std::set<int32_t> have;
        for (const auto& g : gpu_info_.gpuinfos()) have.insert(g.minor());
        missing_info = std::any_of(resp.devices().begin(), resp.devices().end(),
                                   [&](const auto& d) { return have.count(d.minor()) == 0; });
      }
      if (missing_info) ReadStaticInfo();  // new devices: fetch their static info
      DeviceDecodeStats ds;
      xdm::api::GpuInfoResponse gpu;
      {
        MutexLock lock(mu_);
        gpu = gpu_info_;
      }
      std::vector<store::DeviceInfo> devs = DecodeDevices(resp, gpu, options_.max_devices, &ds);
      {
        MutexLock lock(mu_);
        info_open_ = true;
        info_hurry_.Delivered();
        PublishModeLocked();
      }
      CountInvalid(ds);
      if (devices_->SetXdmDevices(std::move(devs)))
        spdlog::info("ListAndWatch: {} devices", resp.devices_size());
      const bool had_ended = logged_.Clear("list_and_watch");
      const bool had_unparsed = logged_.Clear("list_and_watch_parse");
      if (had_ended || had_unparsed) spdlog::info("ListAndWatch delivering again");
      Collector("list_and_watch", true, SteadyClock::now() - t0);
      t0 = SteadyClock::now();
    }
    const grpc::Status st = reader->Finish();
    {
      MutexLock lock(mu_);
      info_open_ = false;
      if (info_hurry_.CallEnded(SteadyClock::now())) {
        // A poll answered while the call was going on: hurried now.
        worker_.Ring(&info_wake_);
      } else {
        worker_.Reset(&info_wake_);
      }
      if (info_hurry_.TakeAnew()) backoff.Reset();  // as the stream's
      PublishModeLocked();
    }
    if (worker_.stopping()) break;
    Collector("list_and_watch", false, SteadyClock::now() - t0);
    const auto wait = backoff.Next();
    spdlog::debug("ListAndWatch ended ({}); re-subscribing in {} ms (at once when a poll succeeds)",
                  Describe(st), wait.count());
    // Unreachable XDM is the one "XDM down" line; another ending is its own
    // problem, said once until ListAndWatch delivers again.
    if (!unparsed && st.error_code() != grpc::StatusCode::UNAVAILABLE &&
        logged_.Raise("list_and_watch"))
      spdlog::warn("ListAndWatch ended: {}", Describe(st));
    if (!worker_.SleepFor(wait, &info_wake_)) break;
  }
}

Mode XdmClient::mode() const {
  MutexLock lock(mu_);
  return machine_.mode();
}

UpstreamInfo XdmClient::info() const {
  MutexLock lock(mu_);
  return info_;
}

UpstreamState XdmClient::state() const {
  MutexLock lock(mu_);
  UpstreamState s;
  s.mode = machine_.mode();
  s.mode_since = mode_since_;
  s.reconnects = reconnects_;
  s.current_backoff = backoff_base_.count() > 0 ? backoff_base_ : options_.backoff_initial;
  const auto now = SteadyClock::now();
  if (auto t = machine_.last_stream_message()) s.since_stream_message = now - *t;
  if (auto t = machine_.last_poll()) s.since_poll = now - *t;
  s.collectors = collectors_;
  return s;
}

uint64_t XdmClient::reconnects() const {
  MutexLock lock(mu_);
  return reconnects_;
}

}  // namespace xpu::upstream
