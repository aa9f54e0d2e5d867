// Micro-benchmarks (Google Benchmark) of the hot paths, per series, so a
// regression shows per change: decode, store update, snapshot, rendering with
// our writer and with prometheus-cpp's TextSerializer for reference.
#include <benchmark/benchmark.h>
#include <prometheus/text_serializer.h>
#include <zlib.h>

#include "common/collector_metrics.h"
#include "exposition/exposer.h"
#include "exposition/snapshot_writer.h"
#include "http/gzip.h"
#include "http/zstd.h"
#include "store/device_registry.h"
#include "store/metric_store.h"
#include "upstream/decode.h"

namespace {

using xpu::store::Clock;

// A message like xdm-sim's: 15 device metrics + 3 per link.
xdm::api::ExporterDataResponse Message(int devices, int links) {
  xdm::api::ExporterDataResponse msg;
  for (int d = 0; d < devices; ++d) {
    for (uint32_t id = 1; id <= 18; ++id) {
      const bool per_link = id >= 14 && id <= 16;
      for (int l = 0; l < (per_link ? links : 1); ++l) {
        auto* s = msg.add_datalist();
        s->set_minor(d);
        s->set_metricid(id);
        if (per_link) s->set_instance(std::to_string(l));
        s->set_value(12345.678 + d + l);
      }
    }
  }
  return msg;
}

struct Fixture {
  explicit Fixture(int64_t series) {
    const int links = 128;
    const int devices = static_cast<int>(std::max<int64_t>(1, series / (15 + 3 * links)));
    msg = Message(devices, links);
    xpu::upstream::DecodeStats st;
    xpu::upstream::DecodeData(msg, *xpu::catalog::Catalog::Builtin(), false, &batch, &st);
    store = std::make_unique<xpu::store::MetricStore>(
        xpu::catalog::Catalog::Builtin(),
        xpu::store::MetricStore::Options{std::chrono::seconds(60), 10'000'000});
    std::map<int32_t, xpu::store::DeviceLabels> labels;
    for (int d = 0; d < devices; ++d)
      labels[d] = {"PPU-2744a5fa-2135-0e7d-3fab-c78989a8d6e" + std::to_string(d % 10), "PPU-810E"};
    store->SetDevices(labels);
    store->Apply(batch, Clock::now());
  }
  xdm::api::ExporterDataResponse msg;
  std::vector<xpu::store::Sample> batch;
  std::unique_ptr<xpu::store::MetricStore> store;
};

void BM_Decode(benchmark::State& state) {
  Fixture f(state.range(0));
  std::vector<xpu::store::Sample> out;
  for (auto _ : state) {
    xpu::upstream::DecodeStats st;
    xpu::upstream::DecodeData(f.msg, *xpu::catalog::Catalog::Builtin(), false, &out, &st);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(f.batch.size()));
}

void BM_ParseMessage(benchmark::State& state) {
  Fixture f(state.range(0));
  const std::string wire = f.msg.SerializeAsString();
  xdm::api::ExporterDataResponse msg;
  for (auto _ : state) {
    msg.ParseFromString(wire);
    benchmark::DoNotOptimize(msg.datalist_size());
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(f.batch.size()));
}

// The stream's path: the wire bytes decoded as they lie (DecodeDataWire),
// where BM_ParseMessage + BM_Decode is the poll's.
void BM_DecodeWire(benchmark::State& state) {
  Fixture f(state.range(0));
  const std::string wire = f.msg.SerializeAsString();
  std::vector<xpu::store::Sample> out;
  for (auto _ : state) {
    xpu::upstream::DecodeStats st;
    xpu::upstream::DataStamps stamps;
    (void)xpu::upstream::DecodeDataWire({std::string_view(wire)}, *xpu::catalog::Catalog::Builtin(),
                                        false, &out, &st, &stamps);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(f.batch.size()));
}

void BM_StoreApply(benchmark::State& state) {
  Fixture f(state.range(0));
  for (auto _ : state) f.store->Apply(f.batch, Clock::now());
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(f.batch.size()));
}

// A batch in another order each time: no sample's position hint holds,
// every one is looked up in the index (a daemon that reorders, or its
// first batch after a restart).
void BM_StoreApplyShuffled(benchmark::State& state) {
  Fixture f(state.range(0));
  std::vector<xpu::store::Sample> a = f.batch;
  std::vector<xpu::store::Sample> b(f.batch.rbegin(), f.batch.rend());
  bool flip = false;
  for (auto _ : state) {
    f.store->Apply(flip ? a : b, Clock::now());
    flip = !flip;
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(f.batch.size()));
}

void BM_Snapshot(benchmark::State& state) {
  Fixture f(state.range(0));
  for (auto _ : state) benchmark::DoNotOptimize(f.store->Snap(Clock::now()).values.data());
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(f.batch.size()));
}

void BM_RenderSnapshotWriter(benchmark::State& state) {
  Fixture f(state.range(0));
  xpu::exposition::SnapshotWriter w;
  auto snap = f.store->Snap(Clock::now());
  std::string out;
  for (auto _ : state) {
    out.clear();
    w.Append(snap, &out);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(f.batch.size()));
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(out.size()));
}

// The page as a scrape renders it: in 64 KiB pieces handed to a consumer
// (here one that only counts them), never whole.
void BM_RenderPieces(benchmark::State& state) {
  Fixture f(state.range(0));
  auto snap = f.store->Snap(Clock::now());
  size_t bytes = 0;
  for (auto _ : state) {
    bytes = 0;
    xpu::exposition::PageSink sink([&bytes](std::string_view piece, bool) {
      bytes += piece.size();
      return true;
    });
    xpu::exposition::SnapshotWriter::Append(snap, &sink);
    sink.Finish();
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(f.batch.size()));
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(bytes));
}

// Render straight into igzip, as a gzip scrape does.
void BM_RenderIntoIgzip(benchmark::State& state) {
  Fixture f(state.range(0));
  auto snap = f.store->Snap(Clock::now());
  size_t in = 0, out = 0;
  for (auto _ : state) {
    std::string z;
    xpu::http::GzipStream gz;
    in = 0;
    xpu::exposition::PageSink sink([&](std::string_view piece, bool last) {
      in += piece.size();
      return gz.Write(piece, last, &z);
    });
    xpu::exposition::SnapshotWriter::Append(snap, &sink);
    sink.Finish();
    out = z.size();
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(f.batch.size()));
  state.counters["ratio"] = static_cast<double>(in) / static_cast<double>(out);
}

// The same with GzipPipe, as a gzip scrape does now: igzip on a second
// thread while this one renders (wall time is what the scrape waits).
void BM_RenderIntoGzipPipe(benchmark::State& state) {
  Fixture f(state.range(0));
  auto snap = f.store->Snap(Clock::now());
  for (auto _ : state) {
    std::string z;
    xpu::http::GzipPipe gz(&z);
    xpu::exposition::PageSink sink(
        xpu::exposition::PageSink::Taker([&](std::string* buf, bool last) {
          gz.Take(buf, last);
          return true;
        }),
        xpu::http::GzipPipe::kBatch);
    xpu::exposition::SnapshotWriter::Append(snap, &sink);
    sink.Finish();
    gz.Finish();
    benchmark::DoNotOptimize(z.data());
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(f.batch.size()));
}

// gzip of the rendered page: ISA-L's igzip (what the exporter uses) and
// zlib at level 1 (what it used before), on the same bytes.
std::string Page(int64_t series) {
  Fixture f(series);
  xpu::exposition::SnapshotWriter w;
  std::string out;
  w.Append(f.store->Snap(Clock::now()), &out);
  return out;
}

void BM_GzipIgzip(benchmark::State& state) {
  const std::string page = Page(state.range(0));
  size_t z = 0;
  for (auto _ : state) z = xpu::http::Gzip(page).size();
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(page.size()));
  state.counters["ratio"] = static_cast<double>(page.size()) / static_cast<double>(z);
}

void BM_GzipZlibLevel1(benchmark::State& state) {
  const std::string page = Page(state.range(0));
  size_t z = 0;
  for (auto _ : state) {
    z_stream zs{};
    deflateInit2(&zs, 1, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY);
    std::string out(deflateBound(&zs, page.size()), '\0');
    zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(page.data()));
    zs.avail_in = static_cast<uInt>(page.size());
    zs.next_out = reinterpret_cast<Bytef*>(out.data());
    zs.avail_out = static_cast<uInt>(out.size());
    deflate(&zs, Z_FINISH);
    z = zs.total_out;
    deflateEnd(&zs);
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(page.size()));
  state.counters["ratio"] = static_cast<double>(page.size()) / static_cast<double>(z);
}

// zstd of the rendered page at the level given (the exporter uses
// kZstdLevel; docs/benchmarks.md, "zstd").
void BM_Zstd(benchmark::State& state) {
  const std::string page = Page(100'000);
  size_t z = 0;
  for (auto _ : state) z = xpu::http::Zstd(page, static_cast<int>(state.range(0))).size();
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(page.size()));
  state.counters["ratio"] = static_cast<double>(page.size()) / static_cast<double>(z);
}

void BM_RenderTextSerializer(benchmark::State& state) {
  Fixture f(state.range(0));
  auto snap = f.store->Snap(Clock::now());
  for (auto _ : state) {
    auto fams = xpu::exposition::SnapshotWriter::ToFamilies(snap);
    benchmark::DoNotOptimize(prometheus::TextSerializer().Serialize(fams).size());
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(f.batch.size()));
}

}  // namespace

// A small node's whole page as a scrape renders it (exposer, not only the
// store's rows): 8 devices with 4 links each, the device registry's
// families, ~25 self-metric families and two parts' registries, one of which
// shares its collector families with the self-metrics (merged by name).
void BM_ExposerPage(benchmark::State& state) {
  const xdm::api::ExporterDataResponse msg = Message(8, 4);
  std::vector<xpu::store::Sample> batch;
  xpu::upstream::DecodeStats st;
  xpu::upstream::DecodeData(msg, *xpu::catalog::Catalog::Builtin(), false, &batch, &st);
  xpu::store::MetricStore store(xpu::catalog::Catalog::Builtin(),
                                xpu::store::MetricStore::Options{std::chrono::seconds(60), 100000});
  xpu::store::DeviceRegistry registry;
  std::vector<xpu::store::DeviceInfo> devices;
  std::map<int32_t, xpu::store::DeviceLabels> labels;
  for (int32_t d = 0; d < 8; ++d) {
    xpu::store::DeviceInfo info;
    info.minor = d;
    info.uuid = "PPU-2744a5fa-2135-0e7d-3fab-c78989a8d6e" + std::to_string(d);
    info.model = "PPU-810E";
    info.health = "Healthy";
    info.bus_id = "0000:1" + std::to_string(d) + ":00.0";
    devices.push_back(info);
    labels[d] = {info.uuid, info.model};
  }
  registry.SetXdmDevices(devices);
  // The sysfs and kmsg backends' views, as a node with both has them (the
  // health families, and the sources' own).
  xpu::store::DeviceViews sysfs_views, kmsg_views;
  kmsg_views.coverage = xpu::store::Coverage::kAddressedSilent;
  for (const xpu::store::DeviceInfo& d : devices) {
    xpu::store::DeviceView h;
    h.minor = d.minor;
    h.uuid = d.uuid;
    h.healthy = true;
    sysfs_views.devices.push_back(h);
    xpu::store::DeviceView k;
    k.bus_id = d.bus_id;
    k.healthy = true;
    kmsg_views.devices.push_back(k);
  }
  registry.OpenSource(xpu::store::kSourceSysfs,
                      std::chrono::hours(1));  // fresh for the run
  registry.OpenSource(xpu::store::kSourceKmsg, std::chrono::hours(1));
  registry.SetDeviceViews(xpu::store::kSourceSysfs, sysfs_views);
  registry.SetDeviceViews(xpu::store::kSourceKmsg, kmsg_views);
  store.SetDevices(labels);
  store.Apply(batch, Clock::now());
  prometheus::Registry self;
  xpu::exposition::Exposer exposer(&store, &self);
  for (int i = 0; i < 20; ++i)
    prometheus::BuildGauge()
        .Name("xpu_exporter_bench_gauge_" + std::to_string(i))
        .Help("A self-metric.")
        .Register(self)
        .Add({})
        .Set(i);
  xpu::CollectorMetrics collectors(self);
  for (const char* c : {"stream", "poll", "gpu_info", "config", "status"})
    collectors.Record(c, true, std::chrono::milliseconds(3));
  auto kubelet = std::make_shared<prometheus::Registry>();
  xpu::CollectorMetrics kubelet_collectors(*kubelet);
  kubelet_collectors.Record("kubelet", true, std::chrono::milliseconds(2));
  auto hal = std::make_shared<prometheus::Registry>();
  prometheus::BuildGauge().Name("xpu_hal_up").Help("HAL up.").Register(*hal).Add({}).Set(1);
  exposer.AddCollectable(&registry);
  exposer.AddCollectable(&self);
  exposer.SetPart("kubelet", kubelet);
  exposer.SetPart("hal", hal);
  std::string out;
  for (auto _ : state) {
    exposer.Render(&out);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(out.size()));
}

// The device registry's families with per-process memory on (the nvml
// backend's --hal.nvml.host-proc): 8 cards, each with `range(0)` / 8
// containers, every one of a pod the watch gave; what a scrape collects.
void BM_ContainerMemoryRows(benchmark::State& state) {
  const int containers = static_cast<int>(state.range(0));
  xpu::store::DeviceRegistry registry;
  registry.OpenSource("nvml", std::chrono::hours(1));  // fresh for the run
  xpu::store::DeviceViews views;
  std::vector<xpu::store::PodMetadata> pods;
  const auto hex = [](int i, size_t width) {
    char buf[80];
    std::snprintf(buf, sizeof buf, "%0*x", static_cast<int>(width), i);
    return std::string(buf);
  };
  for (int32_t card = 0; card < 8; ++card) {
    xpu::store::DeviceView d;
    d.minor = card;
    d.uuid = "GPU-" + std::to_string(card);
    d.bus_id = "0000:1" + std::to_string(card) + ":00.0";
    d.healthy = true;
    for (int i = 0; i < containers / 8; ++i) {
      const int n = card * 1000 + i;
      const std::string uid = hex(n, 32), id = hex(n, 64);
      d.containers.push_back({uid, id, 1u << 30});
      pods.push_back({"ml", "train-" + std::to_string(n), {}, uid, {{id, "main"}}});
    }
    views.devices.push_back(std::move(d));
  }
  registry.SetDeviceViews("nvml", views);
  registry.SetPodMetadata(pods);
  size_t rows = 0;
  for (auto _ : state) {
    const std::vector<prometheus::MetricFamily> families = registry.Collect();
    rows = families.size();
    benchmark::DoNotOptimize(families.data());
  }
  state.counters["families"] = static_cast<double>(rows);
}

BENCHMARK(BM_ExposerPage)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_ContainerMemoryRows)->Arg(64)->Arg(1024)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_ParseMessage)->Arg(10'000)->Arg(100'000)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Decode)->Arg(10'000)->Arg(100'000)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_DecodeWire)->Arg(10'000)->Arg(100'000)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_StoreApply)->Arg(10'000)->Arg(100'000)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_StoreApplyShuffled)->Arg(10'000)->Arg(100'000)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Snapshot)->Arg(10'000)->Arg(100'000)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_RenderSnapshotWriter)->Arg(10'000)->Arg(100'000)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_RenderPieces)->Arg(10'000)->Arg(100'000)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_RenderIntoIgzip)->Arg(10'000)->Arg(100'000)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_RenderIntoGzipPipe)
    ->Arg(10'000)
    ->Arg(100'000)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_RenderTextSerializer)->Arg(10'000)->Arg(100'000)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Zstd)->Arg(1)->Arg(2)->Arg(3)->Arg(6)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_GzipIgzip)->Arg(10'000)->Arg(100'000)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_GzipZlibLevel1)->Arg(10'000)->Arg(100'000)->Unit(benchmark::kMillisecond);
BENCHMARK_MAIN();
