#pragma once

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "kubelet/podresources.grpc.pb.h"
#include "simulator.h"
#include "support/test_util.h"
#include "xdm/api_outer.grpc.pb.h"
#include "xdm/config_service.grpc.pb.h"

namespace xdmsim {

// Starts an xdm-sim in-process on temporary Unix sockets and connects real
// gRPC stubs to it; the control API listens on 127.0.0.1:0.
class SimFixture : public ::testing::Test {
 protected:
  void StartSim(const std::string& model = "PPU-810E", int devices = 8,
                std::chrono::milliseconds interval = std::chrono::milliseconds(100)) {
    SimOptions o;
    o.socket_path = dir_.File("dp2mgr.sock");
    o.controller_socket_path = dir_.File("config-daemon.sock");
    o.hal_root = dir_.File("hal");
    o.kubelet_socket_path = dir_.File("kubelet.sock");
    o.model = model;
    o.devices = devices;
    o.interval = interval;
    sim_ = std::make_unique<Simulator>(o);
    xpu::Status s = sim_->Start();
    ASSERT_TRUE(s.ok()) << s.message();
    auto ch = grpc::CreateChannel("unix://" + o.socket_path, grpc::InsecureChannelCredentials());
    xdm_ = xdm::api::XpuDeviceManagerService::NewStub(ch);
    auto cc = grpc::CreateChannel("unix://" + o.controller_socket_path,
                                  grpc::InsecureChannelCredentials());
    ctl_ = xdm::config::AmpConfigService::NewStub(cc);
  }
  void SetUp() override { StartSim(); }
  void TearDown() override {
    if (sim_) sim_->Stop();
  }
  std::string Control(const std::string& path) const {
    return "http://127.0.0.1:" + std::to_string(sim_->control_port()) + path;
  }
  static void Deadline(grpc::ClientContext* ctx, int ms = 3000) {
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(ms));
  }
  xdm::api::ExporterDataResponse GetData(const xdm::api::ExporterDataRequest& req = {}) {
    grpc::ClientContext ctx;
    Deadline(&ctx);
    xdm::api::ExporterDataResponse resp;
    grpc::Status s = xdm_->ExporterGetDataList(&ctx, req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp;
  }

  xpu::testing::TempDir dir_;
  std::unique_ptr<Simulator> sim_;
  std::unique_ptr<xdm::api::XpuDeviceManagerService::Stub> xdm_;
  std::unique_ptr<xdm::config::AmpConfigService::Stub> ctl_;
};

}  // namespace xdmsim
