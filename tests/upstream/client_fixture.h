// The XdmClient test fixture: a real xdm-sim on temporary Unix sockets and
// a client with a store and a device registry, shared by client_test.cc
// (run beside other tests) and client_timing_test.cc (real-time windows,
// run alone).
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <set>

#include "simulator.h"
#include "support/metrics_util.h"
#include "support/test_util.h"
#include "upstream/xdm_client.h"

namespace xpu::upstream {

constexpr std::chrono::milliseconds kInterval(200);

inline double Value(const prometheus::Registry& r, const std::string& name,
                    const std::map<std::string, std::string>& labels = {}) {
  return xpu::testing::MetricValue(r, name, labels);
}

class ClientTest : public ::testing::Test {
 protected:
  void SetUp() override { Begin(kInterval, DefaultOptions()); }
  ClientOptions DefaultOptions() {
    ClientOptions o;
    o.xdm_endpoint = "unix://" + dir_.File("dp2mgr.sock");
    o.controller_endpoint = "unix://" + dir_.File("config-daemon.sock");
    o.interval = kInterval;
    o.backoff_initial = std::chrono::milliseconds(100);
    o.backoff_max = std::chrono::milliseconds(400);
    // Most tests watch what happens past a stall: the floor is the 3
    // intervals it defaults to without one. The stall tests set their own.
    o.stall_floor = kInterval * 3;
    return o;
  }
  // (Re)starts xdm-sim collecting every `sim_interval` and a fresh client.
  void Begin(std::chrono::milliseconds sim_interval, const ClientOptions& o) {
    if (client_) client_->Stop();
    client_.reset();
    if (sim_) sim_->Stop();
    sim_interval_ = sim_interval;
    StartSim();
    store_ = std::make_unique<store::MetricStore>(
        catalog::Catalog::Builtin(), store::MetricStore::Options{o.interval * 3, 100000});
    registry_ = std::make_unique<prometheus::Registry>();
    devices_ = std::make_unique<store::DeviceRegistry>();
    store_->FollowDevices(devices_.get());
    client_ = std::make_unique<XdmClient>(o, catalog::Catalog::Builtin(), store_.get(),
                                          devices_.get(), registry_.get());
    client_->Start();
  }
  void TearDown() override {
    client_->Stop();
    if (sim_) sim_->Stop();
  }
  void StartSim() {
    xdmsim::SimOptions so;
    so.socket_path = dir_.File("dp2mgr.sock");
    so.controller_socket_path = dir_.File("config-daemon.sock");
    so.interval = sim_interval_;
    so.no_stream = sim_no_stream_;
    sim_ = std::make_unique<xdmsim::Simulator>(so);
    ASSERT_TRUE(sim_->Start().ok());
  }
  std::string Control(const std::string& p) {
    return "http://127.0.0.1:" + std::to_string(sim_->control_port()) + p;
  }
  std::set<int32_t> Minors() {
    std::set<int32_t> out;
    auto snap = store_->Snap(std::chrono::steady_clock::now());
    for (const auto& r : snap.set->rows) out.insert(r.minor);
    return out;
  }
  size_t Series() { return store_->Snap(std::chrono::steady_clock::now()).values.size(); }
  bool WaitMode(Mode m, std::chrono::milliseconds timeout = std::chrono::milliseconds(5000)) {
    return xpu::testing::WaitFor([&] { return client_->mode() == m; }, timeout);
  }
  // A daemon that serves no stream, and a stream backoff far past any test:
  // the client only polls (ClientTest's no-stream cases). False if it never
  // reaches poll mode.
  bool BeginPolledOnly() {
    sim_no_stream_ = true;
    ClientOptions o = DefaultOptions();
    o.backoff_initial = o.backoff_max = std::chrono::seconds(30);
    Begin(kInterval, o);
    return WaitMode(Mode::kPoll);
  }

  // Whether xpu_device_health{source="xdm"} is on the page for any device.
  bool XdmHealthServed() {
    for (const auto& f : devices_->Collect()) {
      if (f.name != "xpu_device_health") continue;
      for (const auto& m : f.metric)
        for (const auto& l : m.label)
          if (l.name == "source" && l.value == "xdm") return true;
    }
    return false;
  }

  xpu::testing::TempDir dir_;
  std::chrono::milliseconds sim_interval_ = kInterval;
  bool sim_no_stream_ = false;  // the next StartSim's daemon serves no stream
  std::unique_ptr<xdmsim::Simulator> sim_;
  std::unique_ptr<prometheus::Registry> registry_;
  std::unique_ptr<store::DeviceRegistry> devices_;
  std::unique_ptr<store::MetricStore> store_;
  std::unique_ptr<XdmClient> client_;
};

}  // namespace xpu::upstream
