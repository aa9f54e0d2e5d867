#pragma once

#include <grpcpp/grpcpp.h>
#include <grpcpp/impl/codegen/service_type.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "common/mutex.h"
#include "common/status.h"
#include "fleet.h"

class CivetServer;

namespace xdmsim {

using xpu::CondVar;
using xpu::Mutex;
using xpu::MutexLock;

struct SimOptions {
  std::string socket_path = "/tmp/xdm-sim/dp2mgr.sock";
  std::string controller_socket_path = "/tmp/xdm-sim/config-daemon.sock";
  std::string control_address = "127.0.0.1:0";  // empty: no control API
  std::string model = "PPU-810E";
  int devices = 8;
  int links = -1;  // < 0: the model's own
  std::chrono::milliseconds interval{1000};
  uint64_t seed = 1;
  int pci_domain = 0;  // the devices' bus ids are <domain>:<bus>:00.0
  // The PCI vendor the tree gives the cards (0x10de: NVIDIA's, so that the
  // stand-in NVML covers them).
  unsigned pci_vendor = 0x1ded;
  std::string hal_root;  // empty: no HAL tree
  // Non-empty: also serve a stand-in kubelet PodResources API here, one pod
  // per allocation (pod "alloc-<id>", namespace "default", container "main").
  std::string kubelet_socket_path;
  bool frozen = false;  // metric values never move (golden tests)
  // ListAndWatch answers only this long after the simulator started, as a
  // daemon whose device scan is slower than its collector (stable-labels tests).
  std::chrono::milliseconds list_delay{0};
  bool flood = false;  // streams push back to back, not once per interval (benchmarks)
  // ExporterDataStream answers UNIMPLEMENTED: a daemon that serves only
  // polls, while ListAndWatch and the rest answer (a client that polls).
  bool no_stream = false;
  uint32_t marker_id = 0;  // > 0: each answer carries this metric ID on device 0 with
                           // the send time in microseconds since the epoch (freshness)
};

// A DRA claim's device as the stand-in kubelet reports it in a container's
// dynamic_resources (docs/simulator.md); any field may be empty.
struct DraClaim {
  std::string pod, namespace_ = "default", container = "main";
  std::string claim, driver, pool, device;
  std::vector<std::string> cdi;
};

// Signals shared by the services and the control API: a tick counter that
// streams wait on, the pause switch, the stream-break generation and shutdown.
// Thread-safe.
class Signals {
 public:
  // Blocks until the tick counter passes `seen`, a break or shutdown happens,
  // or `max_wait` elapses. Returns the tick counter.
  uint64_t WaitTick(uint64_t seen, uint64_t break_gen, std::chrono::milliseconds max_wait);
  // Blocks while paused (checking `cancelled` every 50 ms). False if the call
  // should give up (cancelled or shutting down).
  template <typename Cancelled>
  bool WaitWhilePaused(Cancelled cancelled) {
    MutexLock lock(mu_);
    while (paused_ && !stopping_) {
      if (cancelled()) return false;
      cv_.WaitFor(lock, std::chrono::milliseconds(50));
    }
    return !stopping_;
  }
  // Sleeps until `deadline` or Stop(), whichever comes first.
  void SleepUntil(std::chrono::steady_clock::time_point deadline);
  void Tick();
  void Notify();  // wake waiters to re-check state (device list changed)
  void SetPaused(bool paused);
  void BreakStreams();
  void Stop();
  uint64_t ticks() const;
  uint64_t break_generation() const;
  bool paused() const;
  bool stopping() const;

 private:
  mutable Mutex mu_;
  CondVar cv_;
  // State below is protected by mu_.
  uint64_t ticks_ XPU_GUARDED_BY(mu_) = 0;
  uint64_t break_gen_ XPU_GUARDED_BY(mu_) = 0;
  bool paused_ XPU_GUARDED_BY(mu_) = false;
  bool stopping_ XPU_GUARDED_BY(mu_) = false;
};

// xdm-sim: both upstream gRPC services on Unix sockets, a ticker that moves
// the metrics, the loopback HTTP control API and the HAL tree writer. Start()
// and Stop() are called from one thread; the rest is thread-safe.
class Simulator {
 public:
  explicit Simulator(SimOptions options);
  ~Simulator();
  Simulator(const Simulator&) = delete;
  Simulator& operator=(const Simulator&) = delete;

  // Binds the sockets and the control port and starts serving. Errors name
  // what could not be bound.
  xpu::Status Start();
  // Stops for good: a stopped Simulator is not restarted; make a new one.
  void Stop();

  // The control API's bound port (after Start), 0 if disabled.
  int control_port() const { return control_port_; }
  Fleet& fleet() { return *fleet_; }
  Signals& signals() { return signals_; }
  const SimOptions& options() const { return options_; }
  int active_streams() const { return active_streams_.load(); }
  int64_t start_time_ms() const { return start_time_ms_; }
  // Writes the HAL tree now (also done after every tick and control change).
  void WriteHal();
  void WritePciTree(const std::filesystem::path& sys);

  // Used by the services to count open streams.
  std::atomic<int>& stream_counter() { return active_streams_; }
  // While set, ticks still wake the streams but the data does not advance:
  // every push re-serves the last snapshot (same sequence and timestamps),
  // like a daemon whose collector hung behind a live gRPC server.
  void SetReplay(bool on) { replay_ = on; }
  // While set, one stream push in three is followed by a snapshot served
  // some ticks before (a late message), and every other poll is answered
  // with one (a poll racing the stream). `current` is the answer about to go
  // out; returns the older one to serve too (stream) or instead (poll), if
  // this is its turn.
  void SetReorder(bool on);
  // Its clock this far ahead of the real one (behind when negative): every
  // timestampMs it serves. Any thread.
  void SetClockSkew(int64_t ms) { clock_skew_ms_.store(ms); }
  int64_t clock_skew_ms() const { return clock_skew_ms_.load(); }
  std::optional<xdm::api::ExporterDataResponse> Older(const xdm::api::ExporterDataResponse& current,
                                                      bool poll);
  // DRA claims served by the stand-in kubelet beside the allocations.
  void AddClaim(DraClaim claim);
  size_t RemoveClaims(const std::string& pod);  // how many went
  std::vector<DraClaim> Claims() const;

 private:
  void TickLoop();

  SimOptions options_;
  std::unique_ptr<Fleet> fleet_;
  Signals signals_;
  std::atomic<int> active_streams_{0};
  std::atomic<bool> replay_{false};
  std::atomic<int64_t> clock_skew_ms_{0};
  Mutex reorder_mu_;
  bool reorder_ XPU_GUARDED_BY(reorder_mu_) = false;
  std::deque<xdm::api::ExporterDataResponse> served_ XPU_GUARDED_BY(reorder_mu_);
  uint64_t stream_turn_ XPU_GUARDED_BY(reorder_mu_) = 0;
  uint64_t poll_turn_ XPU_GUARDED_BY(reorder_mu_) = 0;
  int64_t start_time_ms_ = 0;
  std::unique_ptr<grpc::Service> xdm_service_;
  std::unique_ptr<grpc::Service> config_service_;
  std::unique_ptr<grpc::Service> kubelet_service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<CivetServer> control_;
  std::unique_ptr<class ControlHandler> control_handler_;
  int control_port_ = 0;
  std::thread ticker_;
  Mutex hal_mu_;  // serialises HAL tree writes
  mutable Mutex claims_mu_;
  std::vector<DraClaim> claims_ XPU_GUARDED_BY(claims_mu_);
};

// Milliseconds since the Unix epoch.
int64_t NowMs();

}  // namespace xdmsim
