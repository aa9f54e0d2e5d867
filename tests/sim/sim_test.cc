// xdm-sim through a real gRPC channel on temporary Unix sockets, and its
// control API through a real HTTP client.
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "sim_fixture.h"

namespace xdmsim {
namespace {

using xpu::testing::HttpDelete;
using xpu::testing::HttpGet;
using xpu::testing::HttpPost;
using xpu::testing::ReadFile;
using xpu::testing::WaitFor;
namespace api = xdm::api;

class SimTest : public SimFixture {};

api::ListAndWatchResponse FirstDeviceList(api::XpuDeviceManagerService::Stub* stub) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(3));
  auto reader = stub->ListAndWatch(&ctx, api::ListAndWatchRequest());
  api::ListAndWatchResponse resp;
  EXPECT_TRUE(reader->Read(&resp));
  ctx.TryCancel();
  reader->Finish();
  return resp;
}

TEST_F(SimTest, ListSupportedXPUTypeNamesTheModel) {
  grpc::ClientContext ctx;
  Deadline(&ctx);
  api::XPUTypeResponse resp;
  ASSERT_TRUE(xdm_->ListSupportedXPUType(&ctx, api::XPUTypeRequest(), &resp).ok());
  ASSERT_EQ(resp.types_size(), 1);
  EXPECT_EQ(resp.types(0), "PPU-810E");
}

TEST_F(SimTest, ListAndWatchPushesFullDeviceListWithHealthAndMemory) {
  api::ListAndWatchResponse resp = FirstDeviceList(xdm_.get());
  ASSERT_EQ(resp.devices_size(), 8);
  std::set<std::string> uuids;
  for (int i = 0; i < 8; ++i) {
    const auto& d = resp.devices(i);
    EXPECT_EQ(d.minor(), i);
    EXPECT_EQ(d.health(), "Healthy");
    EXPECT_EQ(d.totalmemory(), 98304u);  // MiB
    EXPECT_EQ(d.type(), "PPU-810E");
    EXPECT_TRUE(d.extenderresources().contains("topology"));
    uuids.insert(d.id());
  }
  EXPECT_EQ(uuids.size(), 8u);
}

TEST_F(SimTest, TopologyOfGpu0EqualsReferenceExample) {
  // Section 3.4, "PPU 810E per-device example (GPU 0)".
  const auto expected = nlohmann::json::parse(R"({
    "levels": [
      {"level": 1,  "name": "icnLink2",        "topo1": [0],  "peers": [0, 3]},
      {"level": 2,  "name": "icnLink4",        "topo2": [0],  "peers": [0, 1, 2, 3]},
      {"level": 3,  "name": "icnLink8",        "topo3": [0],  "peers": [0, 1, 2, 3, 4, 5, 6, 7]},
      {"level": 4,  "name": "pcieSwitches",    "topo4": [4],  "peers": [0, 1, 2, 3]},
      {"level": 5,  "name": "numaNodes",       "topo5": [1],  "peers": [0, 1, 2, 3, 8, 9, 10, 11]},
      {"level": 6,  "name": "cpuSockets",      "topo6": [0]},
      {"level": 21, "name": "leafSwitch",      "topo21": "ASW-VM-SQA-G10-P2-S25"},
      {"level": 22, "name": "pointOfDelivery", "topo22": "VM-SQA-G10-P2"}
    ]})");
  api::ListAndWatchResponse resp = FirstDeviceList(xdm_.get());
  ASSERT_GT(resp.devices_size(), 0);
  EXPECT_EQ(nlohmann::json::parse(resp.devices(0).extenderresources().at("topology")), expected);
  // Pairs follow the reference's non-consecutive icnLink2 wiring: 1 pairs with 2.
  auto gpu1 = nlohmann::json::parse(resp.devices(1).extenderresources().at("topology"));
  EXPECT_EQ(gpu1["levels"][0]["peers"], nlohmann::json::parse("[1, 2]"));
}

TEST_F(SimTest, ListAndWatchPushesAgainWhenHealthOrDeviceCountChanges) {
  grpc::ClientContext ctx;
  Deadline(&ctx, 5000);
  auto reader = xdm_->ListAndWatch(&ctx, api::ListAndWatchRequest());
  api::ListAndWatchResponse resp;
  ASSERT_TRUE(reader->Read(&resp));
  ASSERT_EQ(HttpPost(Control("/control/health"), R"({"minor":2,"healthy":false})").status, 200);
  ASSERT_TRUE(reader->Read(&resp));
  EXPECT_EQ(resp.devices(2).health(), "Unhealthy");
  EXPECT_EQ(resp.devices(1).health(), "Healthy");
  ASSERT_EQ(HttpPost(Control("/control/devices"), R"({"count":3})").status, 200);
  ASSERT_TRUE(reader->Read(&resp));
  EXPECT_EQ(resp.devices_size(), 3);
  ctx.TryCancel();
  reader->Finish();
}

TEST_F(SimTest, ListGpuInfoReturnsStaticInfoFilteredByMinor) {
  grpc::ClientContext ctx;
  Deadline(&ctx);
  api::GpuInfoRequest req;
  req.add_minors(3);
  api::GpuInfoResponse resp;
  ASSERT_TRUE(xdm_->ListGpuInfo(&ctx, req, &resp).ok());
  ASSERT_EQ(resp.gpuinfos_size(), 1);
  const auto& g = resp.gpuinfos(0);
  EXPECT_EQ(g.minor(), 3);
  EXPECT_EQ(g.model(), "PPU-810E");
  EXPECT_FALSE(g.driverversion().empty());
  EXPECT_EQ(g.uuid().rfind("PPU-", 0), 0u);
  EXPECT_EQ(g.totalmemory(), 98304u);
  EXPECT_FALSE(g.migcapable());
}

TEST_F(SimTest, UuidsAreStableAcrossRestarts) {
  api::ListAndWatchResponse before = FirstDeviceList(xdm_.get());
  sim_->Stop();
  StartSim();
  api::ListAndWatchResponse after = FirstDeviceList(xdm_.get());
  ASSERT_EQ(before.devices_size(), after.devices_size());
  for (int i = 0; i < before.devices_size(); ++i)
    EXPECT_EQ(before.devices(i).id(), after.devices(i).id());
}

TEST_F(SimTest, GetDataListServesEveryMetricAndFilters) {
  api::ExporterDataResponse all = GetData();
  std::set<uint32_t> ids;
  std::set<int32_t> minors;
  for (const auto& s : all.datalist()) {
    ids.insert(s.metricid());
    minors.insert(s.minor());
  }
  EXPECT_EQ(ids.size(), AllMetrics().size());
  EXPECT_EQ(minors.size(), 8u);
  // 15 per-device metrics + 3 per link x 7 links, for 8 devices.
  EXPECT_EQ(all.datalist_size(), 8 * (15 + 3 * 7));

  api::ExporterDataRequest req;
  req.add_minors(5);
  req.add_metricids(kTemperature);
  req.add_metricids(kLinkTxBytes);
  api::ExporterDataResponse some = GetData(req);
  ASSERT_EQ(some.datalist_size(), 1 + 7);
  for (const auto& s : some.datalist()) {
    EXPECT_EQ(s.minor(), 5);
    EXPECT_TRUE(s.metricid() == kTemperature || s.metricid() == kLinkTxBytes);
    if (s.metricid() == kLinkTxBytes) {
      EXPECT_FALSE(s.instance().empty());
    }
  }
}

TEST_F(SimTest, MetricsMoveAndCountersNeverDecrease) {
  api::ExporterDataRequest req;
  req.add_minors(0);
  req.add_metricids(kEnergy);
  req.add_metricids(kUtilization);
  api::ExporterDataResponse a = GetData(req);
  ASSERT_TRUE(WaitFor([&] { return GetData(req).sequence() >= a.sequence() + 3; }));
  api::ExporterDataResponse b = GetData(req);
  ASSERT_EQ(a.datalist_size(), 2);
  ASSERT_EQ(b.datalist_size(), 2);
  for (int i = 0; i < 2; ++i) {
    if (a.datalist(i).metricid() == kEnergy)
      EXPECT_GT(b.datalist(i).value(), a.datalist(i).value());
    else
      EXPECT_GE(b.datalist(i).value(), 0);
  }
  EXPECT_GT(b.timestampms(), a.timestampms());
}

TEST_F(SimTest, StreamDeliversOnePushPerInterval) {
  grpc::ClientContext ctx;
  Deadline(&ctx, 5000);
  auto reader = xdm_->ExporterDataStream(&ctx, api::ExporterDataRequest());
  api::ExporterDataResponse msg;
  ASSERT_TRUE(reader->Read(&msg));  // immediate first push
  ASSERT_TRUE(reader->Read(&msg));
  const uint64_t first_seq = msg.sequence();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 1; i <= 5; ++i) {
    ASSERT_TRUE(reader->Read(&msg));
    EXPECT_EQ(msg.sequence(), first_seq + static_cast<uint64_t>(i));
    EXPECT_EQ(msg.datalist_size(), 8 * (15 + 3 * 7));
  }
  const auto elapsed = std::chrono::steady_clock::now() - start;
  // Five pushes at 100 ms: about 500 ms; generous bounds, this is not a benchmark.
  EXPECT_GE(elapsed, std::chrono::milliseconds(350));
  EXPECT_LE(elapsed, std::chrono::milliseconds(2500));
  ctx.TryCancel();
  reader->Finish();
}

TEST_F(SimTest, StreamBreakEndsStreamsWithUnavailable) {
  grpc::ClientContext data_ctx, watch_ctx;
  Deadline(&data_ctx, 5000);
  Deadline(&watch_ctx, 5000);
  auto data = xdm_->ExporterDataStream(&data_ctx, api::ExporterDataRequest());
  auto watch = xdm_->ListAndWatch(&watch_ctx, api::ListAndWatchRequest());
  api::ExporterDataResponse msg;
  api::ListAndWatchResponse devs;
  ASSERT_TRUE(data->Read(&msg));
  ASSERT_TRUE(watch->Read(&devs));
  ASSERT_TRUE(WaitFor([&] { return sim_->active_streams() == 2; }));
  ASSERT_EQ(HttpPost(Control("/control/stream/break")).status, 200);
  while (data->Read(&msg)) {
  }
  EXPECT_EQ(data->Finish().error_code(), grpc::StatusCode::UNAVAILABLE);
  while (watch->Read(&devs)) {
  }
  EXPECT_EQ(watch->Finish().error_code(), grpc::StatusCode::UNAVAILABLE);
  // A new subscription works again.
  grpc::ClientContext again;
  Deadline(&again);
  auto fresh = xdm_->ExporterDataStream(&again, api::ExporterDataRequest());
  EXPECT_TRUE(fresh->Read(&msg));
  again.TryCancel();
  fresh->Finish();
}

TEST_F(SimTest, PauseStopsAnsweringAndResumeAnswersAgain) {
  ASSERT_EQ(HttpPost(Control("/control/pause")).status, 200);
  {
    grpc::ClientContext ctx;
    Deadline(&ctx, 300);
    api::ExporterDataResponse resp;
    EXPECT_EQ(xdm_->ExporterGetDataList(&ctx, api::ExporterDataRequest(), &resp).error_code(),
              grpc::StatusCode::DEADLINE_EXCEEDED);
  }
  {
    grpc::ClientContext ctx;
    Deadline(&ctx, 300);
    xdm::config::QueryStatusResponse resp;
    EXPECT_EQ(ctl_->QueryStatus(&ctx, {}, &resp).error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  }
  {
    // A stream opened while paused is accepted but gets nothing.
    grpc::ClientContext ctx;
    Deadline(&ctx, 400);
    auto reader = xdm_->ExporterDataStream(&ctx, api::ExporterDataRequest());
    api::ExporterDataResponse msg;
    EXPECT_FALSE(reader->Read(&msg));
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  }
  ASSERT_EQ(HttpPost(Control("/control/resume")).status, 200);
  EXPECT_GT(GetData().datalist_size(), 0);
}

TEST_F(SimTest, FaultControlChangesHalTreeAndState) {
  ASSERT_EQ(HttpPost(Control("/control/fault"), R"({"minor":1,"code":"0x80e18400"})").status, 200);
  ASSERT_EQ(HttpPost(Control("/control/fault"), R"({"minor":1,"code":"80C98000"})").status, 200);
  EXPECT_EQ(ReadFile(dir_.File("hal/xpu1/fault_codes")), "0x80C98000\n0x80E18400\n");
  EXPECT_EQ(ReadFile(dir_.File("hal/xpu0/fault_codes")), "");
  auto state = nlohmann::json::parse(HttpGet(Control("/control/state")).body);
  EXPECT_EQ(state["devices"][1]["faults"].size(), 2u);

  ASSERT_EQ(HttpDelete(Control("/control/fault?minor=1&code=0x80E18400")).status, 200);
  EXPECT_EQ(ReadFile(dir_.File("hal/xpu1/fault_codes")), "0x80C98000\n");
  ASSERT_EQ(HttpDelete(Control("/control/fault?minor=1")).status, 200);
  EXPECT_EQ(ReadFile(dir_.File("hal/xpu1/fault_codes")), "");
}

TEST_F(SimTest, ControlRejectsBadRequestsClearly) {
  auto r = HttpPost(Control("/control/fault"), R"({"minor":99,"code":"0x1"})");
  EXPECT_EQ(r.status, 404);
  EXPECT_NE(r.body.find("no device with minor 99"), std::string::npos);
  r = HttpPost(Control("/control/fault"), R"({"minor":1,"code":"zzz"})");
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.body.find("not hex"), std::string::npos);
  EXPECT_EQ(HttpPost(Control("/control/fault"), "not json").status, 400);
  EXPECT_EQ(HttpPost(Control("/control/health"), R"({"minor":1})").status, 400);
  EXPECT_EQ(HttpPost(Control("/control/devices"), R"({"count":-1})").status, 400);
  EXPECT_EQ(HttpDelete(Control("/control/fault?minor=x")).status, 400);
  EXPECT_EQ(HttpPost(Control("/control/nothing"), "{}").status, 404);
}

TEST_F(SimTest, HealthControlShowsInListAndWatchAndHal) {
  EXPECT_EQ(ReadFile(dir_.File("hal/xpu4/health")), "1\n");
  ASSERT_EQ(HttpPost(Control("/control/health"), R"({"minor":4,"healthy":false})").status, 200);
  EXPECT_EQ(ReadFile(dir_.File("hal/xpu4/health")), "0\n");
  EXPECT_EQ(FirstDeviceList(xdm_.get()).devices(4).health(), "Unhealthy");
  EXPECT_EQ(ReadFile(dir_.File("hal/xpu4/uuid")),
            FirstDeviceList(xdm_.get()).devices(4).id() + "\n");
}

TEST_F(SimTest, DevicesControlMakesDevicesAppearAndVanish) {
  ASSERT_EQ(HttpPost(Control("/control/devices"), R"({"count":10})").status, 200);
  auto minors_served = [&] {
    std::set<int32_t> minors;
    const api::ExporterDataResponse data = GetData();
    for (const auto& s : data.datalist()) minors.insert(s.minor());
    return minors;
  };
  EXPECT_EQ(minors_served().size(), 10u);
  EXPECT_TRUE(std::filesystem::exists(dir_.File("hal/xpu9/uuid")));
  ASSERT_EQ(HttpPost(Control("/control/devices"), R"({"count":2})").status, 200);
  EXPECT_EQ(minors_served(), (std::set<int32_t>{0, 1}));
  EXPECT_FALSE(std::filesystem::exists(dir_.File("hal/xpu2")));
}

TEST_F(SimTest, EccControlRaisesErrorCounters) {
  api::ExporterDataRequest req;
  req.add_minors(6);
  req.add_metricids(kEccUncorrectable);
  const double before = GetData(req).datalist(0).value();
  ASSERT_EQ(HttpPost(Control("/control/ecc"), R"({"minor":6,"uncorrectable":3})").status, 200);
  EXPECT_EQ(GetData(req).datalist(0).value(), before + 3);
}

TEST_F(SimTest, ConfigAndStatusDescribeTheExporterFeed) {
  grpc::ClientContext c1;
  Deadline(&c1);
  api::ExporterConfigResponse cfg;
  ASSERT_TRUE(xdm_->ExporterGetConfig(&c1, {}, &cfg).ok());
  EXPECT_EQ(cfg.intervalms(), 100u);
  EXPECT_EQ(static_cast<size_t>(cfg.metrics_size()), AllMetrics().size());
  EXPECT_EQ(cfg.minors_size(), 8);

  grpc::ClientContext sctx;
  Deadline(&sctx);
  auto stream = xdm_->ExporterDataStream(&sctx, {});
  api::ExporterDataResponse msg;
  ASSERT_TRUE(stream->Read(&msg));
  grpc::ClientContext c2;
  Deadline(&c2);
  api::ExporterStatusResponse st;
  ASSERT_TRUE(xdm_->ExporterGetStatus(&c2, {}, &st).ok());
  EXPECT_EQ(st.status(), 0);
  EXPECT_EQ(st.activestreams(), 1u);
  EXPECT_GT(st.samplescollected(), 0u);
  EXPECT_GT(st.starttimems(), 0);
  sctx.TryCancel();
  stream->Finish();
}

TEST_F(SimTest, ControllerEnableDisableQueryStatus) {
  auto query = [&] {
    grpc::ClientContext ctx;
    Deadline(&ctx);
    xdm::config::QueryStatusResponse resp;
    EXPECT_TRUE(ctl_->QueryStatus(&ctx, {}, &resp).ok());
    return resp.enabled();
  };
  EXPECT_TRUE(query());
  {
    grpc::ClientContext ctx;
    Deadline(&ctx);
    xdm::config::DisableResponse resp;
    ASSERT_TRUE(ctl_->Disable(&ctx, {}, &resp).ok());
    EXPECT_EQ(resp.status(), 0);
  }
  EXPECT_FALSE(query());
  {
    grpc::ClientContext ctx;
    Deadline(&ctx);
    xdm::config::EnableResponse resp;
    ASSERT_TRUE(ctl_->Enable(&ctx, {}, &resp).ok());
  }
  EXPECT_TRUE(query());
}

TEST_F(SimTest, ControlAllocateShowsAsPodOnTheStandInKubelet) {
  auto ch = grpc::CreateChannel("unix://" + dir_.File("kubelet.sock"),
                                grpc::InsecureChannelCredentials());
  auto kubelet = v1::PodResourcesLister::NewStub(ch);
  auto list = [&] {
    grpc::ClientContext ctx;
    Deadline(&ctx);
    v1::ListPodResourcesResponse resp;
    EXPECT_TRUE(kubelet->List(&ctx, {}, &resp).ok());
    return resp;
  };
  EXPECT_EQ(list().pod_resources_size(), 0);
  auto r =
      HttpPost(Control("/control/allocate"), R"({"id":"job-12345678-x","devices":[{"minor":4}]})");
  ASSERT_EQ(r.status, 200) << r.body;
  auto resp = list();
  ASSERT_EQ(resp.pod_resources_size(), 1);
  EXPECT_EQ(resp.pod_resources(0).name(), "alloc-job-1234");
  const auto& dev = resp.pod_resources(0).containers(0).devices(0);
  ASSERT_EQ(dev.device_ids_size(), 1);
  EXPECT_EQ(dev.device_ids(0), FirstDeviceList(xdm_.get()).devices(4).id());
  // The control API applies the same rules as the gRPC Allocate.
  r = HttpPost(Control("/control/allocate"), R"({"id":"bad","devices":[{"minor":4,"core":101}]})");
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.body.find("core 101"), std::string::npos);
}

TEST(SimStartTest, UnknownModelIsAnError) {
  xpu::testing::TempDir dir;
  SimOptions o;
  o.socket_path = dir.File("a.sock");
  o.controller_socket_path = dir.File("b.sock");
  o.model = "Z9000";
  Simulator sim(o);
  xpu::Status s = sim.Start();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("Z9000"), std::string::npos);
}

}  // namespace
}  // namespace xdmsim
