#include "simulator.h"

#include <CivetServer.h>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>

#include "common/civet_util.h"
#include "control_api.h"
#include "services.h"

namespace xdmsim {

namespace fs = std::filesystem;

void Simulator::AddClaim(DraClaim claim) {
  MutexLock lock(claims_mu_);
  claims_.push_back(std::move(claim));
}

size_t Simulator::RemoveClaims(const std::string& pod) {
  MutexLock lock(claims_mu_);
  return std::erase_if(claims_, [&](const DraClaim& c) { return c.pod == pod; });
}

std::vector<DraClaim> Simulator::Claims() const {
  MutexLock lock(claims_mu_);
  return claims_;
}

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

uint64_t Signals::WaitTick(uint64_t seen, uint64_t break_gen, std::chrono::milliseconds max_wait) {
  MutexLock lock(mu_);
  const auto deadline = std::chrono::steady_clock::now() + max_wait;
  while (ticks_ == seen && break_gen_ == break_gen && !stopping_) {
    if (!cv_.WaitUntil(lock, deadline)) break;
  }
  return ticks_;
}

void Signals::SleepUntil(std::chrono::steady_clock::time_point deadline) {
  MutexLock lock(mu_);
  while (!stopping_) {
    if (!cv_.WaitUntil(lock, deadline)) break;
  }
}

void Signals::Tick() {
  {
    MutexLock lock(mu_);
    ++ticks_;
  }
  cv_.NotifyAll();
}

void Signals::Notify() { cv_.NotifyAll(); }

void Signals::SetPaused(bool paused) {
  {
    MutexLock lock(mu_);
    paused_ = paused;
  }
  cv_.NotifyAll();
}

void Signals::BreakStreams() {
  {
    MutexLock lock(mu_);
    ++break_gen_;
  }
  cv_.NotifyAll();
}

void Signals::Stop() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
  }
  cv_.NotifyAll();
}

uint64_t Signals::ticks() const {
  MutexLock lock(mu_);
  return ticks_;
}
uint64_t Signals::break_generation() const {
  MutexLock lock(mu_);
  return break_gen_;
}
bool Signals::paused() const {
  MutexLock lock(mu_);
  return paused_;
}
bool Signals::stopping() const {
  MutexLock lock(mu_);
  return stopping_;
}

Simulator::Simulator(SimOptions options) : options_(std::move(options)) {}

Simulator::~Simulator() { Stop(); }

namespace {

xpu::Status PrepareSocket(const std::string& path) {
  std::error_code ec;
  const fs::path p(path);
  if (p.has_parent_path()) fs::create_directories(p.parent_path(), ec);
  if (ec)
    return xpu::Status::IoError("cannot create " + p.parent_path().string() + ": " + ec.message());
  // A socket file left by a previous run would make bind fail.
  if (fs::is_socket(p, ec)) fs::remove(p, ec);
  if (fs::exists(p, ec)) return xpu::Status::IoError(path + " exists and is not a socket");
  return xpu::Status::Ok();
}

// Replaces `path` with `content` only if it differs, via rename so a reader
// never sees a half-written file.
void WriteIfChanged(const fs::path& path, const std::string& content) {
  std::ifstream in(path);
  if (in) {
    std::string old((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (old == content) return;
  }
  const fs::path tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << content;
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
}

}  // namespace

xpu::Status Simulator::Start() {
  const ModelSpec* model = FindModel(options_.model);
  if (model == nullptr)
    return xpu::Status::InvalidArgument("unknown model '" + options_.model + "'");
  if (options_.devices < 0 || options_.devices > 4096)
    return xpu::Status::InvalidArgument("--devices must be 0..4096");
  if (options_.interval.count() <= 0) return xpu::Status::InvalidArgument("--interval must be > 0");
  if (options_.pci_domain < 0 || options_.pci_domain > 0xffff)
    return xpu::Status::InvalidArgument("--pci-domain must be 0..ffff");
  fleet_ = std::make_unique<Fleet>(*model, options_.devices, options_.seed, options_.links,
                                   options_.frozen, options_.pci_domain);
  start_time_ms_ = NowMs();
  fleet_->Tick(start_time_ms_, 0);

  for (const std::string& p :
       {options_.socket_path, options_.controller_socket_path, options_.kubelet_socket_path}) {
    if (p.empty()) continue;
    xpu::Status s = PrepareSocket(p);
    if (!s.ok()) return s;
  }
  xdm_service_ = MakeXdmService(this);
  config_service_ = MakeConfigService(this);
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix://" + options_.socket_path, grpc::InsecureServerCredentials());
  builder.AddListeningPort("unix://" + options_.controller_socket_path,
                           grpc::InsecureServerCredentials());
  // The sync server's pollers wake this often to notice shutdown; gRPC's
  // default (1 s) makes every Stop() take about two seconds.
  builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::CQ_TIMEOUT_MSEC, 50);
  builder.RegisterService(xdm_service_.get());
  builder.RegisterService(config_service_.get());
  if (!options_.kubelet_socket_path.empty()) {
    // One server, three sockets: each service answers on all of them, which
    // a client cannot tell from separate daemons.
    kubelet_service_ = MakeKubeletService(this);
    builder.AddListeningPort("unix://" + options_.kubelet_socket_path,
                             grpc::InsecureServerCredentials());
    builder.RegisterService(kubelet_service_.get());
  }
  server_ = builder.BuildAndStart();
  if (!server_) {
    return xpu::Status::IoError("cannot listen on " + options_.socket_path + " or " +
                                options_.controller_socket_path);
  }

  if (!options_.control_address.empty()) {
    control_handler_ = std::make_unique<ControlHandler>(this);
    std::vector<std::string> opts = {"listening_ports", options_.control_address, "num_threads",
                                     "4"};
    try {
      control_ = std::make_unique<CivetServer>(opts);
    } catch (const CivetException& e) {
      Stop();
      return xpu::Status::IoError("cannot listen on " + options_.control_address + ": " + e.what());
    }
    control_->addHandler("/control", control_handler_.get());
    std::vector<int> ports = control_->getListeningPorts();
    control_port_ = ports.empty() ? 0 : ports[0];
  }
  if (!options_.hal_root.empty()) {
    std::error_code ec;
    fs::create_directories(options_.hal_root, ec);
    if (ec) {
      Stop();
      return xpu::Status::IoError("cannot create --hal-root " + options_.hal_root + ": " +
                                  ec.message());
    }
    WriteHal();
  }
  ticker_ = std::thread([this] { TickLoop(); });
  return xpu::Status::Ok();
}

void Simulator::TickLoop() {
  auto next = std::chrono::steady_clock::now() + options_.interval;
  int64_t last = start_time_ms_;
  while (!signals_.stopping()) {
    signals_.SleepUntil(next);
    if (signals_.stopping()) break;
    const int64_t now = NowMs();
    if (!replay_) fleet_->Tick(now, now - last);
    last = now;
    signals_.Tick();
    if (!options_.hal_root.empty()) WriteHal();
    next += options_.interval;
    // After a long stall (debugger, overloaded machine) do not burst to catch up.
    if (std::chrono::steady_clock::now() > next + options_.interval * 4)
      next = std::chrono::steady_clock::now() + options_.interval;
  }
}

void Simulator::WriteHal() {
  if (options_.hal_root.empty() || !fleet_) return;
  MutexLock lock(hal_mu_);
  const fs::path root(options_.hal_root);
  std::set<std::string> present;
  std::error_code ec;
  for (const HalDeviceView& d : fleet_->HalView()) {
    const std::string name = "xpu" + std::to_string(d.minor);
    present.insert(name);
    const fs::path dir = root / name;
    // Another card under this minor: its directory made anew, as the
    // kernel's class device is (the exporter reads a directory's identity
    // once: docs/hal.md).
    if (std::ifstream in(dir / "uuid"); in) {
      std::string was;
      std::getline(in, was);
      if (was != d.uuid) fs::remove_all(dir, ec);
    }
    fs::create_directories(dir, ec);
    WriteIfChanged(dir / "uuid", d.uuid + "\n");
    WriteIfChanged(dir / "health", d.healthy ? "1\n" : "0\n");
    std::string codes;
    for (const std::string& c : d.fault_codes) codes += c + "\n";
    WriteIfChanged(dir / "fault_codes", codes);
    // A class device's link to its PCI device, as a driver's has.
    if (!fs::is_symlink(dir / "device", ec))
      fs::create_symlink(fs::path("../sys/bus/pci/devices") / d.bus_id, dir / "device", ec);
  }
  // Devices that vanished take their directories with them.
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("xpu", 0) == 0 && present.count(name) == 0) fs::remove_all(entry.path(), ec);
  }
  WritePciTree(root / "sys");
}

// The kernel's PCI sysfs layout under <hal-root>/sys (docs/simulator.md):
// devices/pci0000:00/<port>/<addr>/ with the files the pci backend reads,
// each card under its own root port (the slot, with its own maxima), and
// bus/pci/devices/<addr> symlinks to them, as on a real machine.
void Simulator::WritePciTree(const std::filesystem::path& sys) {
  std::error_code ec;
  const fs::path bus = sys / "bus/pci/devices";
  const fs::path drivers = sys / "bus/pci/drivers/xpu";
  fs::create_directories(bus, ec);
  fs::create_directories(drivers, ec);
  std::set<std::string> listed;
  for (const HalDeviceView& d : fleet_->HalView()) {
    char port_addr[16];
    std::snprintf(port_addr, sizeof port_addr, "0000:00:%02x.%d", 1 + d.minor % 31,
                  (d.minor / 31) % 8);
    const fs::path port = sys / "devices/pci0000:00" / port_addr;
    const fs::path dir = port / d.bus_id;
    const fs::path link = bus / d.bus_id;
    if (!d.pci.present) {
      fs::remove(link, ec);  // off the bus: no longer enumerated
      continue;
    }
    listed.insert(d.bus_id);
    fs::create_directories(dir, ec);
    char vendor[16];
    std::snprintf(vendor, sizeof vendor, "0x%04x\n", options_.pci_vendor);
    WriteIfChanged(dir / "vendor", vendor);
    WriteIfChanged(dir / "device", "0x8000\n");
    WriteIfChanged(dir / "class", "0x120000\n");
    WriteIfChanged(dir / "numa_node", std::to_string(d.minor / 4) + "\n");
    WriteIfChanged(dir / "enable", "1\n");
    WriteIfChanged(dir / "power_state", d.pci.power_state + "\n");
    const std::string speed = d.pci.idle ? "2.5 GT/s PCIe" : d.pci.link_speed;
    WriteIfChanged(port / "vendor", "0x8086\n");
    WriteIfChanged(port / "class", "0x060400\n");  // a PCI bridge: the root port
    WriteIfChanged(port / "max_link_speed", d.pci.port_max_link_speed + "\n");
    WriteIfChanged(port / "max_link_width", std::to_string(d.pci.port_max_link_width) + "\n");
    WriteIfChanged(port / "current_link_speed", speed + "\n");
    WriteIfChanged(port / "current_link_width", std::to_string(d.pci.link_width) + "\n");
    WriteIfChanged(dir / "current_link_speed", speed + "\n");
    WriteIfChanged(dir / "max_link_speed", d.pci.max_link_speed + "\n");
    WriteIfChanged(dir / "current_link_width", std::to_string(d.pci.link_width) + "\n");
    WriteIfChanged(dir / "max_link_width", std::to_string(d.pci.max_link_width) + "\n");
    for (const char* severity : {"correctable", "nonfatal", "fatal"}) {
      static const std::map<std::string, const char*> kTotal = {{"correctable", "TOTAL_ERR_COR"},
                                                                {"nonfatal", "TOTAL_ERR_NONFATAL"},
                                                                {"fatal", "TOTAL_ERR_FATAL"}};
      std::string text;
      uint64_t total = 0;
      auto it = d.pci.aer.find(severity);
      if (it != d.pci.aer.end()) {
        for (const auto& [type, count] : it->second) {
          text += type + " " + std::to_string(count) + "\n";
          total += count;
        }
      }
      text += std::string(kTotal.at(severity)) + " " + std::to_string(total) + "\n";
      WriteIfChanged(dir / ("aer_dev_" + std::string(severity)), text);
    }
    const fs::path driver = dir / "driver";
    if (d.pci.driver_bound && !fs::is_symlink(driver)) {
      fs::create_directory_symlink("../../../../bus/pci/drivers/xpu", driver, ec);
    } else if (!d.pci.driver_bound) {
      fs::remove(driver, ec);
    }
    if (!fs::is_symlink(link)) fs::create_directory_symlink(dir, link, ec);
  }
  // Devices gone from the fleet leave the bus too.
  for (const auto& entry : fs::directory_iterator(bus, ec)) {
    if (listed.count(entry.path().filename().string()) == 0) fs::remove(entry.path(), ec);
  }
}

void Simulator::Stop() {
  signals_.Stop();
  if (control_) {
    xpu::CloseCivetServer(*control_);
    control_.reset();
  }
  if (server_) {
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
    server_->Wait();
    server_.reset();
  }
  if (ticker_.joinable()) ticker_.join();
  std::error_code ec;
  if (!options_.socket_path.empty()) fs::remove(options_.socket_path, ec);
  if (!options_.controller_socket_path.empty()) fs::remove(options_.controller_socket_path, ec);
  if (!options_.kubelet_socket_path.empty()) fs::remove(options_.kubelet_socket_path, ec);
}

void Simulator::SetReorder(bool on) {
  MutexLock lock(reorder_mu_);
  reorder_ = on;
  served_.clear();
}

std::optional<xdm::api::ExporterDataResponse> Simulator::Older(
    const xdm::api::ExporterDataResponse& current, bool poll) {
  constexpr size_t kHistory = 3;  // the older answer is up to 2 snapshots back
  MutexLock lock(reorder_mu_);
  if (!reorder_) return std::nullopt;
  if (served_.empty() || served_.back().sequence() != current.sequence()) {
    served_.push_back(current);
    if (served_.size() > kHistory) served_.pop_front();
  }
  const bool turn = poll ? ++poll_turn_ % 2 == 0 : ++stream_turn_ % 3 == 0;
  if (!turn || served_.size() < 2) return std::nullopt;
  return served_.front();
}

}  // namespace xdmsim
