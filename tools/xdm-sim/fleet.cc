#include "fleet.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <limits>
#include <sstream>

#include "common/fault_code.h"

namespace xdmsim {
namespace {

using xdm::api::AllocateRequest;
using xdm::api::AllocateResponse;
using xdm::api::DeviceRequest;

// Allocate/Release status codes (docs/upstream-api.md).
constexpr int kStatusOk = 0;
constexpr int kStatusInvalid = 1;
constexpr int kStatusNotFound = 2;
constexpr int kStatusExhausted = 3;
constexpr int kStatusExists = 4;

double Clamp(double v, double lo, double hi) { return std::max(lo, std::min(hi, v)); }

std::string DeviceUuid(const std::string& prefix, uint64_t seed, int minor) {
  // Stable across restarts for the same seed and minor, unique per minor.
  std::mt19937_64 rng(seed * 1000003ULL + static_cast<uint64_t>(minor) * 7919ULL + 17);
  uint64_t a = rng(), b = rng();
  char buf[64];
  std::snprintf(buf, sizeof buf, "%08x-%04x-%04x-%04x-%012llx", static_cast<unsigned>(a >> 32),
                static_cast<unsigned>((a >> 16) & 0xffff), static_cast<unsigned>(a & 0xffff),
                static_cast<unsigned>(b >> 48),
                static_cast<unsigned long long>(b & 0xffffffffffffULL));
  return prefix + buf;
}

}  // namespace

Fleet::Fleet(const ModelSpec& model, int count, uint64_t seed, int links, bool frozen,
             int pci_domain)
    : model_(model),
      seed_(seed),
      links_(links < 0 ? model.links : links),
      frozen_(frozen),
      pci_domain_(pci_domain) {
  for (int m = 0; m < count; ++m) devices_.push_back(MakeDevice(m));
}

Fleet::Device Fleet::MakeDevice(int minor) const {
  Device d;
  d.minor = minor;
  d.uuid = DeviceUuid(model_.uuid_prefix, seed_, minor);
  d.serial = "SIM" + std::to_string(seed_) + "-" + std::to_string(1000 + minor);
  d.rng.seed(seed_ + static_cast<uint64_t>(minor) * 104729ULL);
  d.util = 20 + 7 * (minor % 8);
  d.mem_used_mib = static_cast<double>(model_.memory_mib) * 0.2;
  d.temp = 40;
  d.mem_temp = 45;
  d.power = model_.idle_watts;
  d.core_mhz = model_.idle_core_mhz;
  d.links.resize(static_cast<size_t>(links_));
  return d;
}

std::string Fleet::ModelNameLocked(const Device& d) const {
  if (!garbage_ || d.minor != devices_.front().minor) return model_.name;
  std::string model = model_.name + " \"quoted\" back\\slash\nnewline \xc3\x28";
  model.resize(1 << 20, 'M');
  return model;
}

Fleet::Device* Fleet::FindLocked(int minor) {
  for (Device& d : devices_) {
    if (d.minor == minor) return &d;
  }
  return nullptr;
}

void Fleet::Tick(int64_t now_ms, int64_t dt_ms) {
  MutexLock lock(mu_);
  const double dt = static_cast<double>(dt_ms) / 1000.0;
  for (Device& d : devices_) {
    if (frozen_) break;
    std::normal_distribution<double> noise(0.0, 1.0);
    std::uniform_real_distribution<double> unit(0.0, 1.0);
    // Utilization wanders with a pull towards a per-device working point.
    const double target = 30 + 8 * (d.minor % 8);
    d.util = Clamp(d.util + 0.2 * (target - d.util) + 6 * noise(d.rng), 0, 100);
    const double busy = d.util / 100.0;
    const double mem_target = static_cast<double>(model_.memory_mib) * (0.1 + 0.8 * busy);
    d.mem_used_mib = Clamp(d.mem_used_mib + 0.3 * (mem_target - d.mem_used_mib), 0,
                           static_cast<double>(model_.memory_mib));
    d.temp = Clamp(d.temp + 0.3 * ((32 + 45 * busy) - d.temp) + 0.3 * noise(d.rng), 20, 110);
    d.mem_temp = d.temp + 4 + 0.2 * noise(d.rng);
    d.power =
        Clamp(model_.idle_watts + (model_.max_watts - model_.idle_watts) * busy + 3 * noise(d.rng),
              0, model_.max_watts * 1.1);
    d.energy_mj += d.power * dt * 1000.0;
    d.core_mhz =
        d.util > 5 ? model_.max_core_mhz - 20 * std::abs(noise(d.rng)) : model_.idle_core_mhz;
    d.mem_bw_util = Clamp(0.8 * d.util + 5 * noise(d.rng), 0, 100);
    if (unit(d.rng) < 0.02) d.ecc_corr += 1;
    if (unit(d.rng) < 0.01) d.pcie_replays += 1;
    // PCIe up to ~25 GB/s, interconnect links up to ~50 GB/s each.
    d.pcie_tx += busy * 25e9 * dt * unit(d.rng);
    d.pcie_rx += busy * 25e9 * dt * unit(d.rng);
    for (LinkState& l : d.links) {
      if (!l.up) continue;
      l.tx_bytes += busy * 50e9 * dt * unit(d.rng);
      l.rx_bytes += busy * 50e9 * dt * unit(d.rng);
    }
  }
  ++sequence_;
  last_tick_ms_ = now_ms;
}

void Fleet::AppendSamples(const Device& d, const std::set<uint32_t>& ids,
                          xdm::api::ExporterDataResponse* out) const {
  const int64_t stamp = last_tick_ms_;
  auto want = [&](uint32_t id) { return ids.empty() || ids.count(id) > 0; };
  auto add = [&](uint32_t id, double v) {
    if (!want(id)) return;
    auto* s = out->add_datalist();
    s->set_minor(d.minor);
    s->set_metricid(id);
    s->set_value(v);
    s->set_timestampms(stamp);
  };
  add(kUtilization, std::round(d.util * 10) / 10);
  add(kMemoryUsed, std::round(d.mem_used_mib));
  add(kMemoryTotal, static_cast<double>(model_.memory_mib));
  add(kTemperature, std::round(d.temp));
  add(kMemoryTemperature, std::round(d.mem_temp));
  add(kPower, std::round(d.power * 100) / 100);
  add(kEnergy, std::floor(d.energy_mj));
  add(kCoreClock, std::round(d.core_mhz));
  add(kMemoryClock, model_.memory_mhz);
  add(kEccCorrectable, d.ecc_corr);
  add(kEccUncorrectable, d.ecc_uncorr);
  add(kPcieTxBytes, std::floor(d.pcie_tx));
  add(kPcieRxBytes, std::floor(d.pcie_rx));
  add(kMemoryBandwidthUtil, std::round(d.mem_bw_util * 10) / 10);
  add(kPcieReplays, d.pcie_replays);
  for (size_t i = 0; i < d.links.size(); ++i) {
    const std::string inst = std::to_string(i);
    auto add_link = [&](uint32_t id, double v) {
      if (!want(id)) return;
      auto* s = out->add_datalist();
      s->set_minor(d.minor);
      s->set_metricid(id);
      s->set_instance(inst);
      s->set_value(v);
      s->set_timestampms(stamp);
    };
    add_link(kLinkTxBytes, std::floor(d.links[i].tx_bytes));
    add_link(kLinkRxBytes, std::floor(d.links[i].rx_bytes));
    add_link(kLinkUp, d.links[i].up ? 1 : 0);
  }
}

xdm::api::ExporterDataResponse Fleet::Data(const xdm::api::ExporterDataRequest& req) const {
  const std::set<int32_t> minors(req.minors().begin(), req.minors().end());
  const std::set<uint32_t> ids(req.metricids().begin(), req.metricids().end());
  xdm::api::ExporterDataResponse out;
  MutexLock lock(mu_);
  for (const Device& d : devices_) {
    if (!minors.empty() && minors.count(d.minor) == 0) continue;
    AppendSamples(d, ids, &out);
  }
  if (garbage_ && !devices_.empty()) {
    const int32_t m = devices_.front().minor;
    const int64_t stamp = last_tick_ms_;
    auto add = [&](uint32_t id, double v, const std::string& inst) {
      auto* s = out.add_datalist();
      s->set_minor(m);
      s->set_metricid(id);
      s->set_value(v);
      s->set_instance(inst);
      s->set_timestampms(stamp);
    };
    add(kTemperature, std::numeric_limits<double>::quiet_NaN(), "");
    add(kPower, std::numeric_limits<double>::infinity(), "");
    add(kEnergy, -1, "");
    add(999, 1, "");
    add(kUtilization, 12, "");  // a second utilization sample for the same device
    add(kLinkTxBytes, 5, std::string("q\"uo\\te\nnl\xff\xfe"));
  }
  out.set_timestampms(last_tick_ms_);
  out.set_sequence(sequence_);
  samples_served_ += static_cast<uint64_t>(out.datalist_size());
  return out;
}

xdm::api::ListAndWatchResponse Fleet::Devices() const {
  xdm::api::ListAndWatchResponse out;
  MutexLock lock(mu_);
  const int count = static_cast<int>(devices_.size());
  for (const Device& d : devices_) {
    auto* dev = out.add_devices();
    dev->set_id(d.uuid);
    dev->set_minor(d.minor);
    dev->set_type(ModelNameLocked(d));
    dev->set_health(d.healthy ? "Healthy" : "Unhealthy");
    dev->set_totalmemory(model_.memory_mib);
    (*dev->mutable_extenderresources())["topology"] = garbage_ && d.minor == devices_.back().minor
                                                          ? "{\"levels\": [{oops"
                                                          : TopologyJson(model_, d.minor, count);
    if (list_unparsable_) (*dev->mutable_extenderresources())["not utf-8 \xff"] = "x";
  }
  return out;
}

xdm::api::GpuInfoResponse Fleet::GpuInfo(const xdm::api::GpuInfoRequest& req) const {
  const std::set<int32_t> minors(req.minors().begin(), req.minors().end());
  xdm::api::GpuInfoResponse out;
  MutexLock lock(mu_);
  for (const Device& d : devices_) {
    if (!minors.empty() && minors.count(d.minor) == 0) continue;
    auto* g = out.add_gpuinfos();
    g->set_minor(d.minor);
    g->set_uuid(d.uuid);
    g->set_model(ModelNameLocked(d));
    g->set_driverversion(model_.driver_version);
    g->set_firmwareversion(model_.firmware_version);
    g->set_totalmemory(model_.memory_mib);
    g->set_busid(BusIdOf(d.minor, pci_domain_));
    g->set_numanode(d.minor / 4);
    g->set_migcapable(model_.mig_capable);
    g->set_serial(d.serial);
  }
  return out;
}

// Shares of one card: compute in percent, MIG in sevenths (the A100/H800
// profiles 1g..7g), so a MIG request takes 1, 2, 3, 4 or 7 slices.
constexpr uint32_t kCorePercent = 100;
constexpr uint32_t kMigSlices = 7;
constexpr uint32_t kMigProfiles[] = {1, 2, 3, 4, 7};

std::string Fleet::CheckFits(const Device& d, const DeviceRequest& r) const {
  const uint32_t total_gib = static_cast<uint32_t>(model_.memory_mib / 1024);
  const bool whole = r.core() == 0 && r.memory() == 0 && r.slice() == 0;
  if (!d.healthy) return "device is unhealthy";
  if (d.exclusive) return "device is allocated whole to another container";
  if (whole && (d.core_used > 0 || d.memory_used_gib > 0 || d.slices_used > 0))
    return "whole-card request but the device is shared";
  if (d.core_used + r.core() > kCorePercent)
    return "not enough compute left (" + std::to_string(kCorePercent - d.core_used) + "% free)";
  if (d.memory_used_gib + r.memory() > total_gib)
    return "not enough memory left (" + std::to_string(total_gib - d.memory_used_gib) +
           " GiB free)";
  if (d.slices_used + r.slice() > kMigSlices)
    return "not enough MIG slices left (" + std::to_string(kMigSlices - d.slices_used) + " free)";
  return "";
}

AllocateResponse Fleet::Allocate(const AllocateRequest& req) {
  AllocateResponse resp;
  resp.set_id(req.id());
  *resp.mutable_annotations() = req.annotations();
  MutexLock lock(mu_);
  std::vector<int32_t> chosen;
  std::optional<Refusal> refused = ValidateLocked(req);
  if (!refused && req.devices_size() > 0) refused = PlaceLocked(req, &chosen);
  if (refused) {
    resp.set_status(refused->status);
    resp.set_message(std::move(refused->message));
    return resp;
  }
  CommitLocked(req, chosen, &resp);
  resp.set_status(kStatusOk);
  return resp;
}

std::optional<Fleet::Refusal> Fleet::ValidateLocked(const AllocateRequest& req) {
  if (req.id().empty()) return Refusal{kStatusInvalid, "id must not be empty"};
  if (allocations_.count(req.id()) > 0)
    return Refusal{kStatusExists, "allocation id " + req.id() + " already exists"};
  const uint32_t total_gib = static_cast<uint32_t>(model_.memory_mib / 1024);
  std::set<int32_t> named;
  for (int i = 0; i < req.devices_size(); ++i) {
    const DeviceRequest& r = req.devices(i);
    const DeviceRequest& first = req.devices(0);
    const std::string at = "devices[" + std::to_string(i) + "]";
    if (r.core() > kCorePercent)
      return Refusal{kStatusInvalid, at + ".core " + std::to_string(r.core()) +
                                         " out of range: 0 (no limit) or 1..100 percent"};
    const bool profile = std::find(std::begin(kMigProfiles), std::end(kMigProfiles), r.slice()) !=
                         std::end(kMigProfiles);
    if (r.slice() != 0 && !profile)
      return Refusal{kStatusInvalid, at + ".slice " + std::to_string(r.slice()) +
                                         " invalid: must be 1, 2, 3, 4 or 7"};
    if (r.slice() != 0 && !model_.mig_capable)
      return Refusal{kStatusInvalid, at + ".slice " + std::to_string(r.slice()) +
                                         ": MIG partitioning is not supported on " + model_.name +
                                         " (A100 and H800 only)"};
    if (r.memory() > total_gib)
      return Refusal{kStatusInvalid, at + ".memory " + std::to_string(r.memory()) +
                                         " GiB exceeds the card's " + std::to_string(total_gib) +
                                         " GiB"};
    if (r.core() != first.core() || r.memory() != first.memory() || r.slice() != first.slice())
      return Refusal{kStatusInvalid, at + " differs from devices[0]: all devices must request "
                                          "the same core/memory/slice (homogeneous)"};
    if (r.has_minor()) {
      if (FindLocked(r.minor()) == nullptr)
        return Refusal{kStatusNotFound,
                       at + ".minor " + std::to_string(r.minor()) + ": no such device"};
      if (!named.insert(r.minor()).second)
        return Refusal{kStatusInvalid,
                       at + ".minor " + std::to_string(r.minor()) + " requested twice"};
    }
  }
  return std::nullopt;
}

std::optional<Fleet::Refusal> Fleet::PlaceLocked(const AllocateRequest& req,
                                                 std::vector<int32_t>* chosen) {
  chosen->assign(static_cast<size_t>(req.devices_size()), -1);
  std::set<int32_t> taken;
  for (const DeviceRequest& r : req.devices())
    if (r.has_minor()) taken.insert(r.minor());
  for (int i = 0; i < req.devices_size(); ++i) {
    const DeviceRequest& r = req.devices(i);
    int32_t& pick = (*chosen)[static_cast<size_t>(i)];
    if (r.has_minor()) {
      std::string why = CheckFits(*FindLocked(r.minor()), r);
      if (!why.empty())
        return Refusal{kStatusExhausted, "devices[" + std::to_string(i) + "].minor " +
                                             std::to_string(r.minor()) + ": " + why};
      pick = r.minor();
      continue;
    }
    for (const Device& d : devices_) {
      if (taken.count(d.minor) == 0 && CheckFits(d, r).empty()) {
        pick = d.minor;
        taken.insert(d.minor);
        break;
      }
    }
    if (pick < 0)
      return Refusal{kStatusExhausted,
                     "devices[" + std::to_string(i) + "]: no available card fits the request"};
  }
  return std::nullopt;
}

// No devices at all is a CPU container (no core, no memory, no other
// resource): recorded, holding nothing.
void Fleet::CommitLocked(const AllocateRequest& req, const std::vector<int32_t>& chosen,
                         AllocateResponse* resp) {
  Allocation alloc;
  std::string visible;
  for (int i = 0; i < req.devices_size(); ++i) {
    const DeviceRequest& r = req.devices(i);
    Device* d = FindLocked(chosen[static_cast<size_t>(i)]);
    d->core_used += r.core();
    d->memory_used_gib += r.memory();
    d->slices_used += r.slice();
    d->exclusive = d->exclusive || (r.core() == 0 && r.memory() == 0 && r.slice() == 0);
    xdm::api::AllocatedDevice a;
    a.set_minor(d->minor);
    a.set_uuid(d->uuid);
    a.set_core(r.core());
    a.set_memory(r.memory());
    a.set_slice(r.slice());
    *a.mutable_extender() = r.extender();
    *resp->add_devices() = a;
    alloc.devices.push_back(a);
    if (!visible.empty()) visible += ",";
    visible += std::to_string(d->minor);
  }
  allocations_[req.id()] = std::move(alloc);
  if (req.devices_size() > 0) (*resp->mutable_envs())["XPU_VISIBLE_DEVICES"] = visible;
}

void Fleet::GiveBackLocked(const xdm::api::AllocatedDevice& a) {
  Device* d = FindLocked(a.minor());
  if (d == nullptr) return;  // vanished since; nothing to give back
  d->core_used -= std::min(d->core_used, a.core());
  d->memory_used_gib -= std::min(d->memory_used_gib, a.memory());
  d->slices_used -= std::min(d->slices_used, a.slice());
  if (a.core() == 0 && a.memory() == 0 && a.slice() == 0) d->exclusive = false;
}

xdm::api::ReleaseResponse Fleet::Release(const xdm::api::ReleaseRequest& req) {
  xdm::api::ReleaseResponse resp;
  MutexLock lock(mu_);
  auto it = allocations_.find(req.id());
  if (it == allocations_.end()) {
    resp.set_status(kStatusNotFound);
    resp.set_message("allocation id " + req.id() + " not found");
    return resp;
  }
  for (const auto& a : it->second.devices) GiveBackLocked(a);
  allocations_.erase(it);
  resp.set_status(kStatusOk);
  return resp;
}

std::map<std::string, std::vector<std::string>> Fleet::AllocatedUuids() const {
  MutexLock lock(mu_);
  std::map<std::string, std::vector<std::string>> out;
  for (const auto& [id, alloc] : allocations_) {
    auto& uuids = out[id];
    for (const auto& d : alloc.devices) uuids.push_back(d.uuid());
  }
  return out;
}

std::vector<int32_t> Fleet::Minors() const {
  MutexLock lock(mu_);
  std::vector<int32_t> out;
  for (const Device& d : devices_) out.push_back(d.minor);
  return out;
}

std::string BusIdOf(int minor, int pci_domain) {
  char bus[32];
  std::snprintf(bus, sizeof bus, "%04x:%02x:00.0", pci_domain & 0xffff, 0x10 + minor * 0x10 % 0xf0);
  return bus;
}

std::vector<HalDeviceView> Fleet::HalView() const {
  MutexLock lock(mu_);
  std::vector<HalDeviceView> out;
  for (const Device& d : devices_) {
    out.push_back({d.minor,
                   d.uuid,
                   d.healthy,
                   {d.faults.begin(), d.faults.end()},
                   BusIdOf(d.minor, pci_domain_),
                   d.pci});
  }
  return out;
}

xpu::Status Fleet::SetPci(int minor, const PciState& state) {
  MutexLock lock(mu_);
  Device* d = FindLocked(minor);
  if (d == nullptr) return xpu::Status::NotFound("no device with minor " + std::to_string(minor));
  d->pci = state;
  return xpu::Status::Ok();
}

xpu::Status Fleet::GetPci(int minor, PciState* state) const {
  MutexLock lock(mu_);
  for (const Device& d : devices_) {
    if (d.minor != minor) continue;
    *state = d.pci;
    return xpu::Status::Ok();
  }
  return xpu::Status::NotFound("no device with minor " + std::to_string(minor));
}

uint64_t Fleet::samples_served() const {
  MutexLock lock(mu_);
  return samples_served_;
}

int64_t Fleet::last_tick_ms() const {
  MutexLock lock(mu_);
  return last_tick_ms_;
}

uint64_t Fleet::devices_generation() const {
  MutexLock lock(mu_);
  return devices_generation_;
}

xpu::Status Fleet::RaiseFault(int minor, const std::string& code) {
  const std::string norm = xpu::NormalizeFaultCode(code);
  if (norm.empty()) return xpu::Status::InvalidArgument("fault code '" + code + "' is not hex");
  MutexLock lock(mu_);
  Device* d = FindLocked(minor);
  if (d == nullptr) return xpu::Status::NotFound("no device with minor " + std::to_string(minor));
  d->faults.insert(norm);
  return xpu::Status::Ok();
}

xpu::Status Fleet::ClearFault(int minor, const std::string& code) {
  const std::string norm = xpu::NormalizeFaultCode(code);  // empty code: every fault
  if (!code.empty() && norm.empty())
    return xpu::Status::InvalidArgument("fault code '" + code + "' is not hex");
  MutexLock lock(mu_);
  Device* d = FindLocked(minor);
  if (d == nullptr) return xpu::Status::NotFound("no device with minor " + std::to_string(minor));
  if (!norm.empty()) {
    d->faults.erase(norm);
  } else {
    d->faults.clear();
  }
  return xpu::Status::Ok();
}

xpu::Status Fleet::SetHealth(int minor, bool healthy) {
  MutexLock lock(mu_);
  Device* d = FindLocked(minor);
  if (d == nullptr) return xpu::Status::NotFound("no device with minor " + std::to_string(minor));
  if (d->healthy != healthy) {
    d->healthy = healthy;
    ++devices_generation_;
  }
  return xpu::Status::Ok();
}

xpu::Status Fleet::AddEccErrors(int minor, uint64_t correctable, uint64_t uncorrectable) {
  MutexLock lock(mu_);
  Device* d = FindLocked(minor);
  if (d == nullptr) return xpu::Status::NotFound("no device with minor " + std::to_string(minor));
  d->ecc_corr += static_cast<double>(correctable);
  d->ecc_uncorr += static_cast<double>(uncorrectable);
  return xpu::Status::Ok();
}

void Fleet::SetGarbage(bool on) {
  MutexLock lock(mu_);
  if (garbage_ != on) ++devices_generation_;
  garbage_ = on;
}

void Fleet::SetListUnparsable(bool on) {
  MutexLock lock(mu_);
  if (list_unparsable_ != on) ++devices_generation_;
  list_unparsable_ = on;
}

xpu::Status Fleet::SetCount(int count) {
  if (count < 0 || count > 4096)
    return xpu::Status::InvalidArgument("count " + std::to_string(count) + " out of range 0..4096");
  MutexLock lock(mu_);
  const int have = static_cast<int>(devices_.size());
  if (count == have) return xpu::Status::Ok();
  if (count < have) {
    devices_.resize(static_cast<size_t>(count));
    // Allocations on vanished cards end with them.
    for (auto it = allocations_.begin(); it != allocations_.end();) {
      bool gone = std::any_of(it->second.devices.begin(), it->second.devices.end(),
                              [&](const auto& a) { return a.minor() >= count; });
      if (!gone) {
        ++it;
        continue;
      }
      for (const auto& a : it->second.devices) GiveBackLocked(a);
      it = allocations_.erase(it);
    }
  } else {
    for (int m = have; m < count; ++m) devices_.push_back(MakeDevice(m));
  }
  ++devices_generation_;
  return xpu::Status::Ok();
}

}  // namespace xdmsim
