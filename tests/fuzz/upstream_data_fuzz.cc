// ExporterDataStream / ExporterGetDataList messages through decode, the store
// and the /metrics writer. Structure-aware: half the mutations parse the input
// as a message and change fields (extreme values, duplicated samples, hostile
// instance names); the rest mutate raw bytes.
#include <cmath>
#include <limits>
#include <random>

#include "catalog/catalog.h"
#include "exposition/snapshot_writer.h"
#include "fuzz_util.h"
#include "store/metric_store.h"
#include "upstream/decode.h"
#include "upstream/snapshot_order.h"

namespace api = xdm::api;

extern "C" size_t LLVMFuzzerMutate(uint8_t* data, size_t size, size_t max_size);

// The stream's path decodes the wire bytes themselves (DecodeDataWire), in
// gRPC's pieces; the poll's, the parsed message (DecodeData). Both must take
// and refuse the same bytes and make the same samples of them.
void SameFromTheWire(const uint8_t* data, size_t size, const api::ExporterDataResponse* msg,
                     const xpu::catalog::Catalog& catalog) {
  const std::string_view all(reinterpret_cast<const char*>(data), size);
  // Cut where the bytes say: pieces' ends fall inside fields.
  const size_t a = size > 0 ? data[0] % (size + 1) : 0;
  const size_t b = a + (size > 1 ? data[size - 1] % (size - a + 1) : 0);
  const xpu::upstream::WirePieces wire{all.substr(0, a), all.substr(a, b - a), all.substr(b)};
  xpu::upstream::DataStamps stamps;
  std::vector<xpu::store::Sample> from_wire;
  xpu::upstream::DecodeStats wire_stats;
  const bool taken =
      xpu::upstream::DecodeDataWire(wire, catalog, true, &from_wire, &wire_stats, &stamps).ok();
  if (taken != (msg != nullptr)) __builtin_trap();
  // The stamps' quick read (the top level only) takes whatever protobuf
  // takes, with the same stamps; what it refuses, protobuf refuses.
  xpu::upstream::DataStamps quick;
  const bool quick_taken = xpu::upstream::ReadDataStamps(wire, &quick).ok();
  if (taken && (!quick_taken || quick.timestamp_ms != stamps.timestamp_ms ||
                quick.sequence != stamps.sequence || quick.samples != stamps.samples))
    __builtin_trap();
  if (msg == nullptr) return;
  if (stamps.timestamp_ms != msg->timestampms() || stamps.sequence != msg->sequence() ||
      stamps.samples != static_cast<size_t>(msg->datalist_size()))
    __builtin_trap();
  std::vector<xpu::store::Sample> from_msg;
  xpu::upstream::DecodeStats msg_stats;
  xpu::upstream::DecodeData(*msg, catalog, true, &from_msg, &msg_stats);
  if (from_wire != from_msg || !(wire_stats == msg_stats)) __builtin_trap();
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const auto catalog = xpu::catalog::Catalog::Builtin();
  api::ExporterDataResponse msg;
  if (!msg.ParseFromArray(data, static_cast<int>(size))) {
    SameFromTheWire(data, size, nullptr, *catalog);
    return 0;
  }
  SameFromTheWire(data, size, &msg, *catalog);
  {
    // The order's stamps are the daemon's: any value must be judged without
    // overflow, and a snapshot just applied is the same snapshot after it.
    using V = xpu::upstream::SnapshotOrder::Verdict;
    xpu::upstream::SnapshotOrder order;
    const xpu::upstream::SnapshotOrder::Clocks c{
        1'700'000'000'000, std::chrono::steady_clock::now(), std::chrono::seconds(5),
        std::chrono::milliseconds(150)};
    const V first = order.Judge(msg.timestampms(), msg.sequence(), c);
    const bool stamped = msg.timestampms() != 0 || msg.sequence() != 0;
    if (first == V::kApply && stamped &&
        order.Judge(msg.timestampms(), msg.sequence(), c) != V::kSame)
      __builtin_trap();
    // Any verdict will do; what is checked is that the stamps' arithmetic
    // does not overflow (UBSan).
    (void)order.Judge(static_cast<int64_t>(static_cast<uint64_t>(msg.timestampms()) - 1),
                      msg.sequence() + 1, c);
  }
  for (bool keep_unknown : {false, true}) {
    std::vector<xpu::store::Sample> samples;
    xpu::upstream::DecodeStats stats;
    xpu::upstream::DecodeData(msg, *catalog, keep_unknown, &samples, &stats);
    xpu::store::MetricStore store(catalog, {std::chrono::seconds(3), 5000, 64});
    const auto now = std::chrono::steady_clock::now();
    store.Apply(samples, now);
    if (size % 2) store.SetDevices({{0, {"u0", "m0"}}, {1, {"u\n1", "m\xff"}}});
    store.Apply(samples, now);
    xpu::exposition::SnapshotWriter writer;
    std::string page;
    writer.Append(store.Snap(now), &page);
    xpu::fuzz::CheckExposition(page);
  }
  return 0;
}

extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size, size_t max_size,
                                          unsigned int seed) {
  std::minstd_rand rng(seed);
  api::ExporterDataResponse msg;
  if (rng() % 2 == 0 || !msg.ParseFromArray(data, static_cast<int>(size)))
    return LLVMFuzzerMutate(data, size, max_size);
  auto pick = [&](int n) { return n > 0 ? static_cast<int>(rng() % static_cast<unsigned>(n)) : 0; };
  static const double kValues[] = {
      0,        -1,        1e308,  -1e308,       std::numeric_limits<double>::quiet_NaN(),
      INFINITY, -INFINITY, 5e-324, 4294967296.0, 0.1};
  static const char* kInstances[] = {
      "",     "0",        "7",       "q\"uo\\te",
      "nl\n", "\xff\xfe", "x{y}=\"", "very-long-very-long-very-long-very-long-very-long"};
  const int n = msg.datalist_size();
  switch (rng() % 7) {
    case 0:
      if (n > 0) *msg.add_datalist() = msg.datalist(pick(n));  // duplicate a sample
      break;
    case 1:
      if (n > 0) msg.mutable_datalist(pick(n))->set_value(kValues[pick(10)]);
      break;
    case 2:
      if (n > 0) msg.mutable_datalist(pick(n))->set_minor(static_cast<int32_t>(rng()) % 4096 - 8);
      break;
    case 3:
      if (n > 0) msg.mutable_datalist(pick(n))->set_metricid(static_cast<uint32_t>(rng() % 40));
      break;
    case 4:
      if (n > 0) msg.mutable_datalist(pick(n))->set_instance(kInstances[pick(8)]);
      break;
    case 5:
      msg.set_sequence(rng());
      msg.set_timestampms(static_cast<int64_t>(rng()));
      break;
    default:
      if (n > 1) msg.mutable_datalist()->SwapElements(pick(n), pick(n));
  }
  const std::string out = msg.SerializeAsString();
  if (out.size() > max_size) return LLVMFuzzerMutate(data, size, max_size);
  std::copy(out.begin(), out.end(), data);
  return out.size();
}
