#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "hal/nvml/nvml_library.h"

namespace xpu::hal {

// One NVLink of a card as NVML reports it.
struct NvmlLink {
  unsigned link = 0;
  bool active = false;
  std::optional<uint64_t> replay, recovery, crc_flit, crc_data;  // error counters
  bool operator==(const NvmlLink&) const = default;
};

// A MIG device (a compute instance on a GPU instance), named by its own
// UUID ("MIG-..."), as the kubelet names it.
struct NvmlMigDevice {
  std::string uuid;
  unsigned gpu_instance = 0, compute_instance = 0;
  std::optional<uint64_t> memory_total_bytes, memory_used_bytes;
  bool operator==(const NvmlMigDevice&) const = default;
};

// A process that holds memory on the card (its compute processes).
struct NvmlProcess {
  uint32_t pid = 0;
  uint64_t used_bytes = 0;
  std::optional<unsigned> gpu_instance, compute_instance;  // under MIG
  bool operator==(const NvmlProcess&) const = default;
};

// What NVML says of one card in one sample, as plain values: nullopt where
// the card or the driver's library does not give it (not supported, a
// symbol an older driver lacks) or the call failed (`errors` says which).
struct NvmlDevice {
  unsigned index = 0;
  std::string name, uuid;
  std::string bus_id;  // canonical, "0000:3b:00.0"; empty if NVML gave none
  // NVML_ERROR_GPU_IS_LOST on any call: the card cannot be reached.
  bool lost = false;
  // Found lost by its address (ReadNvmlDevices' `ask`) and not known to be
  // any card read by index: index is kMaxNvmlDevices or more, bus_id set.
  bool asked = false;
  // NVML_ERROR_RESET_REQUIRED on any call: the card needs a reset first.
  bool reset_required = false;
  // Its health could not be read (not lost): its handle could not be had, a
  // call its health is judged on (row remaps, page retirement) failed for
  // another reason than "not supported", or no call answered at all. It is
  // not seen: its health Unknown, never healthy (a fault it shows all the
  // same still counts).
  bool unreadable = false;
  std::optional<double> temperature_celsius, power_watts, energy_joules;
  // Used as nvidia-smi shows it (nvmlDeviceGetMemoryInfo_v2), the driver's
  // reservation apart; where only the first version exists, used counts it
  // and reserved is unknown.
  std::optional<uint64_t> memory_total_bytes, memory_used_bytes, memory_reserved_bytes;
  std::optional<unsigned> gpu_utilization, memory_utilization;  // percent
  std::optional<bool> ecc_enabled;
  std::optional<uint64_t> ecc_volatile_corrected, ecc_volatile_uncorrected;
  std::optional<uint64_t> ecc_aggregate_corrected, ecc_aggregate_uncorrected;
  std::optional<unsigned> retired_pages_single_bit, retired_pages_double_bit;
  std::optional<bool> retirement_pending;
  struct Remap {
    unsigned corrected = 0, uncorrected = 0;
    bool pending = false, failure = false;
    bool operator==(const Remap&) const = default;
  };
  std::optional<Remap> remap;
  std::optional<uint64_t> clocks_event_reasons;  // nvml::kClocksEvent* bits
  std::vector<NvmlLink> nvlinks;                 // the links that exist
  std::optional<unsigned> pcie_replays;
  std::optional<bool> mig_enabled;
  std::vector<NvmlMigDevice> mig;
  std::vector<NvmlProcess> processes;
  // Calls that failed for another reason than "not supported", as
  // "what: NVML's words".
  std::vector<std::string> errors;
  bool operator==(const NvmlDevice&) const = default;
};

// Bounds of one sample (docs/reliability.md).
inline constexpr unsigned kMaxNvmlDevices = 64;
inline constexpr unsigned kMaxNvmlMigDevices = 64;     // per card
inline constexpr unsigned kMaxNvmlProcesses = 256;     // per card
inline constexpr unsigned kMaxNvmlRetiredPages = 512;  // addresses read per cause

// Every card the library lists (at most kMaxNvmlDevices), read whole. An
// error only when the list itself cannot be had (nvmlDeviceGetCount_v2
// failed); a card that fails a call is still listed with what it gave.
// Any thread; each call blocks for as long as the driver does (the caller
// bounds it: NvmlSampler reads on a thread of its own, with a deadline).
// `ask`: bus addresses of cards NVML is to be asked for by address
// (nvmlDeviceGetHandleByPciBusId_v2) when no card read by index has it: a
// card lost before it said who it is is then known by its address.
// `health_only`: each card's identity and the calls its health is judged
// on (ReadHealth: row remaps, page retirement; a lost card, a reset
// required), not its gauges, counters, links, MIG devices or processes:
// what must be seen each interval, read without the rest (NvmlSampler
// reads the rest at its slower cadence and keeps it between).
Status ReadNvmlDevices(const NvmlLibrary& lib, std::vector<NvmlDevice>* out,
                       const std::vector<std::string>& ask = {}, bool health_only = false);
// Copies what a health-only read leaves out (gauges, counters, links, MIG,
// processes) from `from`, the same card's last whole read, into `into`.
void KeepSlowFacts(const NvmlDevice& from, NvmlDevice* into);

// The fault codes a sample shows (docs/hal.md, "nvml"; the fault catalog
// has their levels): GPU lost, a row remap that failed or waits for a
// reset, page retirement waiting for a reset, a card that answers that it
// needs a reset. 0xFC0100xx: derived by the nvml backend (0x10DE0000 + n
// is the Xid n, which the kernel log may name up to 65535).
inline constexpr const char* kNvmlGpuLost = "0xFC010001";
inline constexpr const char* kNvmlRowRemapFailure = "0xFC010002";
inline constexpr const char* kNvmlRowRemapPending = "0xFC010003";
inline constexpr const char* kNvmlRetirementPending = "0xFC010004";
inline constexpr const char* kNvmlResetRequired = "0xFC010005";
std::vector<std::string> DeriveNvmlFaults(const NvmlDevice& d);

}  // namespace xpu::hal
