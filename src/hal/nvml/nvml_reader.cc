#include "hal/nvml/nvml_reader.h"

#include <algorithm>
#include <cstring>
#include <set>

#include "common/label.h"
#include "hal/pci_address.h"

namespace xpu::hal {
namespace {

// Judges each call's answer for one card: true on success; GPU lost marks
// the card; "not supported" (the card or this driver lacks it) is quiet;
// anything else is recorded. Counts the answers, so that the reader can tell
// a card it heard from one whose every call failed.
class Calls {
 public:
  Calls(const NvmlLibrary& lib, NvmlDevice* d) : lib_(lib), d_(d) {}
  bool operator()(nvml::Return r, const char* what) {
    if (r == nvml::kSuccess) {
      ++answered_;
      return true;
    }
    if (r == nvml::kErrorGpuIsLost) {
      d_->lost = true;
    } else if (r == nvml::kErrorResetRequired) {
      d_->reset_required = true;
    } else if (r != nvml::kErrorNotSupported && r != nvml::kErrorFunctionNotFound &&
               r != nvml::kErrorNotFound) {
      ++failed_;
      if (d_->errors.size() < 32)
        d_->errors.push_back(std::string(what) + ": " + lib_.ErrorString(r));
    } else {
      ++answered_;  // "the card has none" is an answer
    }
    return false;
  }
  unsigned answered() const { return answered_; }
  unsigned failed() const { return failed_; }

 private:
  const NvmlLibrary& lib_;
  NvmlDevice* d_;
  unsigned answered_ = 0, failed_ = 0;
};

// A string NVML wrote into `buf`, cut at the buffer's end if it forgot its
// terminator.
std::string Text(const char* buf, size_t size) { return std::string(buf, strnlen(buf, size)); }
// The same, for a value that becomes a label (a name, a uuid): valid UTF-8,
// as every label from outside (a driver's bytes that are none would make
// Prometheus refuse the whole page).
std::string LabelText(const char* buf, size_t size) {
  std::string s = Text(buf, size);
  SanitizeLabelValue(&s);
  return s;
}

void ReadIdentity(const NvmlLibrary::Api& a, nvml::Device h, Calls& ok, NvmlDevice* d) {
  char buf[nvml::kUuidSize] = {};
  if (a.name != nullptr && ok(a.name(h, buf, sizeof buf), "name"))
    d->name = LabelText(buf, sizeof buf);
  std::memset(buf, 0, sizeof buf);
  if (a.uuid != nullptr && ok(a.uuid(h, buf, sizeof buf), "uuid"))
    d->uuid = LabelText(buf, sizeof buf);
  nvml::PciInfo pci{};
  if (a.pci_info != nullptr && ok(a.pci_info(h, &pci), "pci info"))
    d->bus_id = CanonicalPciAddress(Text(pci.bus_id, sizeof pci.bus_id));
}

void ReadGauges(const NvmlLibrary::Api& a, nvml::Device h, Calls& ok, NvmlDevice* d) {
  unsigned u = 0;
  unsigned long long ull = 0;
  if (a.temperature != nullptr && ok(a.temperature(h, nvml::kTemperatureGpu, &u), "temperature"))
    d->temperature_celsius = u;
  if (a.power_usage != nullptr && ok(a.power_usage(h, &u), "power")) d->power_watts = u / 1000.0;
  if (a.total_energy != nullptr && ok(a.total_energy(h, &ull), "energy"))
    d->energy_joules = static_cast<double>(ull) / 1000.0;
  nvml::MemoryV2 mem2{};
  mem2.version = nvml::kMemoryV2Version;
  nvml::Memory mem{};
  // The second version where the driver answers it; any other answer than
  // a lost card (a driver that refuses the struct's version) falls back to
  // the first, which is what is judged.
  const nvml::Return v2 =
      a.memory_info_v2 != nullptr ? a.memory_info_v2(h, &mem2) : nvml::kErrorFunctionNotFound;
  if (v2 == nvml::kSuccess) {
    ok(v2, "memory");
    d->memory_total_bytes = mem2.total;
    d->memory_used_bytes = mem2.used;
    d->memory_reserved_bytes = mem2.reserved;
  } else if (v2 == nvml::kErrorGpuIsLost || v2 == nvml::kErrorResetRequired) {
    ok(v2, "memory");
  } else if (a.memory_info != nullptr && ok(a.memory_info(h, &mem), "memory")) {
    d->memory_total_bytes = mem.total;
    d->memory_used_bytes = mem.used;
  }
  nvml::Utilization util{};
  if (a.utilization != nullptr && ok(a.utilization(h, &util), "utilization")) {
    d->gpu_utilization = std::min(util.gpu, 100U);
    d->memory_utilization = std::min(util.memory, 100U);
  }
  if (a.clocks_event_reasons != nullptr && ok(a.clocks_event_reasons(h, &ull), "clock events"))
    d->clocks_event_reasons = ull;
  if (a.pcie_replay_counter != nullptr && ok(a.pcie_replay_counter(h, &u), "pcie replays"))
    d->pcie_replays = u;
}

void ReadMemoryCounts(const NvmlLibrary::Api& a, nvml::Device h, Calls& ok, NvmlDevice* d) {
  int current = 0, pending = 0;
  if (a.ecc_mode != nullptr && ok(a.ecc_mode(h, &current, &pending), "ecc mode"))
    d->ecc_enabled = current == nvml::kEnabled;
  if (a.total_ecc_errors != nullptr && d->ecc_enabled.value_or(false)) {
    struct {
      int type, counter;
      std::optional<uint64_t>* into;
    } const kinds[] = {
        {nvml::kMemoryErrorCorrected, nvml::kVolatileEcc, &d->ecc_volatile_corrected},
        {nvml::kMemoryErrorUncorrected, nvml::kVolatileEcc, &d->ecc_volatile_uncorrected},
        {nvml::kMemoryErrorCorrected, nvml::kAggregateEcc, &d->ecc_aggregate_corrected},
        {nvml::kMemoryErrorUncorrected, nvml::kAggregateEcc, &d->ecc_aggregate_uncorrected},
    };
    for (const auto& k : kinds) {
      unsigned long long n = 0;
      if (ok(a.total_ecc_errors(h, k.type, k.counter, &n), "ecc errors")) *k.into = n;
    }
  }
  if (a.retired_pages != nullptr) {
    // NVML fills the addresses too; a buffer too small answers
    // INSUFFICIENT_SIZE with the count needed, which is the count.
    std::vector<unsigned long long> addresses(kMaxNvmlRetiredPages);
    for (const auto& [cause, into] :
         {std::pair{nvml::kRetiredMultipleSingleBit, &d->retired_pages_single_bit},
          {nvml::kRetiredDoubleBit, &d->retired_pages_double_bit}}) {
      unsigned n = kMaxNvmlRetiredPages;
      const nvml::Return r = a.retired_pages(h, cause, &n, addresses.data());
      if (r == nvml::kErrorInsufficientSize || ok(r, "retired pages")) *into = n;
    }
  }
}

// The calls the card's health is judged on (DeriveNvmlFaults): one that
// fails for another reason than "not supported" leaves the health unread.
void ReadHealth(const NvmlLibrary::Api& a, nvml::Device h, Calls& ok, NvmlDevice* d) {
  const unsigned failed = ok.failed();
  int state = 0;
  if (a.retired_pages_pending != nullptr &&
      ok(a.retired_pages_pending(h, &state), "retirement pending"))
    d->retirement_pending = state == nvml::kEnabled;
  NvmlDevice::Remap r;
  unsigned pending_rows = 0, failure = 0;
  if (a.remapped_rows != nullptr &&
      ok(a.remapped_rows(h, &r.corrected, &r.uncorrected, &pending_rows, &failure),
         "remapped rows")) {
    r.pending = pending_rows != 0;
    r.failure = failure != 0;
    d->remap = r;
  }
  if (ok.failed() > failed) d->unreadable = true;
}

void ReadLinks(const NvmlLibrary::Api& a, nvml::Device h, Calls& ok, NvmlDevice* d) {
  if (a.nvlink_state == nullptr) return;
  for (unsigned link = 0; link < nvml::kNvLinkMaxLinks && !d->lost; ++link) {
    int state = 0;
    // A link the card does not have answers "not supported" (or invalid).
    const nvml::Return r = a.nvlink_state(h, link, &state);
    if (r == nvml::kErrorInvalidArgument || !ok(r, "nvlink state")) continue;
    NvmlLink l;
    l.link = link;
    l.active = state == nvml::kEnabled;
    if (a.nvlink_error_counter != nullptr) {
      struct {
        int counter;
        std::optional<uint64_t>* into;
      } const counters[] = {{nvml::kNvLinkErrorDlReplay, &l.replay},
                            {nvml::kNvLinkErrorDlRecovery, &l.recovery},
                            {nvml::kNvLinkErrorDlCrcFlit, &l.crc_flit},
                            {nvml::kNvLinkErrorDlCrcData, &l.crc_data}};
      for (const auto& c : counters) {
        unsigned long long n = 0;
        if (ok(a.nvlink_error_counter(h, link, c.counter, &n), "nvlink errors")) *c.into = n;
      }
    }
    d->nvlinks.push_back(l);
  }
}

void ReadMig(const NvmlLibrary::Api& a, nvml::Device h, Calls& ok, NvmlDevice* d) {
  unsigned current = 0, pending = 0;
  if (a.mig_mode == nullptr || !ok(a.mig_mode(h, &current, &pending), "mig mode")) return;
  d->mig_enabled = current == 1;
  unsigned max = 0;
  if (!*d->mig_enabled || a.max_mig_device_count == nullptr || a.mig_device_by_index == nullptr ||
      !ok(a.max_mig_device_count(h, &max), "mig devices"))
    return;
  for (unsigned i = 0; i < std::min(max, kMaxNvmlMigDevices) && !d->lost; ++i) {
    nvml::Device m = nullptr;
    // An index without a MIG device answers "not found".
    if (!ok(a.mig_device_by_index(h, i, &m), "mig device") || m == nullptr) continue;
    NvmlMigDevice md;
    char buf[nvml::kUuidSize] = {};
    if (a.uuid != nullptr && ok(a.uuid(m, buf, sizeof buf), "mig uuid"))
      md.uuid = LabelText(buf, sizeof buf);
    if (a.gpu_instance_id != nullptr) (void)ok(a.gpu_instance_id(m, &md.gpu_instance), "gi");
    if (a.compute_instance_id != nullptr)
      (void)ok(a.compute_instance_id(m, &md.compute_instance), "ci");
    nvml::Memory mem{};
    if (a.memory_info != nullptr && ok(a.memory_info(m, &mem), "mig memory")) {
      md.memory_total_bytes = mem.total;
      md.memory_used_bytes = mem.used;
    }
    d->mig.push_back(std::move(md));
  }
}

void ReadProcesses(const NvmlLibrary::Api& a, nvml::Device h, Calls& ok, NvmlDevice* d) {
  if (a.compute_processes == nullptr) return;
  // Room for kMaxNvmlProcesses of the longest entries a driver has written
  // (nvml_api.h), read at the documented stride.
  std::vector<nvml::ProcessInfo> infos(
      (kMaxNvmlProcesses * nvml::kLongestProcessInfo + sizeof(nvml::ProcessInfo) - 1) /
      sizeof(nvml::ProcessInfo));
  unsigned count = kMaxNvmlProcesses;
  const nvml::Return r = a.compute_processes(h, &count, infos.data());
  if (r == nvml::kErrorInsufficientSize) {  // NVML gives none of them then
    d->errors.push_back("processes: more than " + std::to_string(kMaxNvmlProcesses) +
                        " hold memory on the card; none read");
    return;
  }
  if (!ok(r, "processes")) return;
  for (unsigned i = 0; i < std::min(count, kMaxNvmlProcesses); ++i) {
    NvmlProcess p;
    p.pid = infos[i].pid;
    p.used_bytes = infos[i].used_gpu_memory;
    if (infos[i].gpu_instance_id != 0xFFFFFFFFU) {
      p.gpu_instance = infos[i].gpu_instance_id;
      p.compute_instance = infos[i].compute_instance_id;
    }
    d->processes.push_back(p);
  }
}

}  // namespace

Status ReadNvmlDevices(const NvmlLibrary& lib, std::vector<NvmlDevice>* out,
                       const std::vector<std::string>& ask, bool health_only) {
  out->clear();
  const NvmlLibrary::Api& a = lib.api();
  unsigned count = 0;
  if (const nvml::Return r = a.device_count(&count); r != nvml::kSuccess)
    return Status::Unavailable("nvmlDeviceGetCount_v2 failed: " + lib.ErrorString(r));
  // The handle NVML gave each lost card by index, where it gave one: the
  // same card asked for by address answers the same handle.
  std::vector<std::pair<nvml::Device, size_t>> lost_handles;
  for (unsigned i = 0; i < std::min(count, kMaxNvmlDevices); ++i) {
    NvmlDevice d;
    d.index = i;
    Calls ok(lib, &d);
    nvml::Device h = nullptr;
    if (!ok(a.device_by_index(i, &h), "handle") || h == nullptr) {
      d.unreadable = !d.lost;  // listed, unread: lost, or not seen at all
      if (d.lost && h != nullptr) lost_handles.emplace_back(h, out->size());
      out->push_back(std::move(d));
      continue;
    }
    ReadIdentity(a, h, ok, &d);
    // A lost card answers every call so: one is enough to know.
    if (health_only) {
      if (!d.lost) ReadHealth(a, h, ok, &d);
    } else {
      for (auto read :
           {ReadGauges, ReadMemoryCounts, ReadHealth, ReadLinks, ReadMig, ReadProcesses})
        if (!d.lost) read(a, h, ok, &d);
    }
    // Not one answer: nothing of the card was seen.
    if (ok.answered() == 0 && !d.lost && !d.reset_required) d.unreadable = true;
    out->push_back(std::move(d));
  }
  // The cards asked for by address that no card read by index named: one
  // NVML says is lost is the lost card read by index with the same handle,
  // or else a card of its own (NvmlDevice::asked; NvmlSampler names the
  // lost cards read by index from what they were before pairing the rest).
  if (a.device_by_bus_id == nullptr) return Status::Ok();
  std::set<std::string> named;
  for (const NvmlDevice& d : *out)
    if (!d.bus_id.empty()) named.insert(d.bus_id);
  for (const std::string& bus : ask) {
    if (named.count(bus) != 0 || out->size() >= kMaxNvmlDevices + ask.size()) continue;
    nvml::Device h = nullptr;
    const nvml::Return r = a.device_by_bus_id(bus.c_str(), &h);
    if (r != nvml::kErrorGpuIsLost) continue;  // found by index already, or not NVIDIA's
    auto same = std::find_if(lost_handles.begin(), lost_handles.end(),
                             [&](const auto& lh) { return h != nullptr && lh.first == h; });
    if (same != lost_handles.end() && (*out)[same->second].bus_id.empty()) {
      (*out)[same->second].bus_id = bus;
    } else {
      NvmlDevice d;
      d.index = kMaxNvmlDevices + static_cast<unsigned>(named.size());
      d.lost = true;
      d.asked = true;
      d.bus_id = bus;
      out->push_back(std::move(d));
    }
    named.insert(bus);
  }
  return Status::Ok();
}

void KeepSlowFacts(const NvmlDevice& from, NvmlDevice* into) {
  into->temperature_celsius = from.temperature_celsius;
  into->power_watts = from.power_watts;
  into->energy_joules = from.energy_joules;
  into->memory_total_bytes = from.memory_total_bytes;
  into->memory_used_bytes = from.memory_used_bytes;
  into->memory_reserved_bytes = from.memory_reserved_bytes;
  into->gpu_utilization = from.gpu_utilization;
  into->memory_utilization = from.memory_utilization;
  into->ecc_enabled = from.ecc_enabled;
  into->ecc_volatile_corrected = from.ecc_volatile_corrected;
  into->ecc_volatile_uncorrected = from.ecc_volatile_uncorrected;
  into->ecc_aggregate_corrected = from.ecc_aggregate_corrected;
  into->ecc_aggregate_uncorrected = from.ecc_aggregate_uncorrected;
  into->retired_pages_single_bit = from.retired_pages_single_bit;
  into->retired_pages_double_bit = from.retired_pages_double_bit;
  into->clocks_event_reasons = from.clocks_event_reasons;
  into->nvlinks = from.nvlinks;
  into->pcie_replays = from.pcie_replays;
  into->mig_enabled = from.mig_enabled;
  into->mig = from.mig;
  into->processes = from.processes;
}

std::vector<std::string> DeriveNvmlFaults(const NvmlDevice& d) {
  std::vector<std::string> codes;
  if (d.lost) codes.emplace_back(kNvmlGpuLost);
  if (d.remap && d.remap->failure) codes.emplace_back(kNvmlRowRemapFailure);
  if (d.remap && d.remap->pending) codes.emplace_back(kNvmlRowRemapPending);
  if (d.retirement_pending.value_or(false)) codes.emplace_back(kNvmlRetirementPending);
  if (d.reset_required) codes.emplace_back(kNvmlResetRequired);
  return codes;
}

}  // namespace xpu::hal
