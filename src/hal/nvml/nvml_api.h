#pragma once

// The part of NVIDIA's Management Library C API (libnvidia-ml.so.1) the
// nvml backend calls, declared here from NVIDIA's public API reference:
// the signatures, constants and struct layouts are facts of that ABI, and
// nothing here comes from NVIDIA's header. The library is opened at run
// time (NvmlLibrary); nothing links against it. docs/hal.md, "nvml".

#include <cstddef>
#include <cstdint>

namespace xpu::hal::nvml {

using Return = int;  // nvmlReturn_t
inline constexpr Return kSuccess = 0;
inline constexpr Return kErrorUninitialized = 1;
inline constexpr Return kErrorInvalidArgument = 2;
inline constexpr Return kErrorNotSupported = 3;
inline constexpr Return kErrorNoPermission = 4;
inline constexpr Return kErrorNotFound = 6;
inline constexpr Return kErrorInsufficientSize = 7;
inline constexpr Return kErrorDriverNotLoaded = 9;
inline constexpr Return kErrorTimeout = 10;
inline constexpr Return kErrorFunctionNotFound = 13;
inline constexpr Return kErrorGpuIsLost = 15;
inline constexpr Return kErrorResetRequired = 16;
// NVML_VALUE_NOT_AVAILABLE: a process's used_gpu_memory when the driver cannot
// give it (WDDM, or MIG without the privilege to see it).
inline constexpr unsigned long long kValueNotAvailable = ~0ULL;
inline constexpr Return kErrorUnknown = 999;

struct DeviceSt;
using Device = DeviceSt*;  // nvmlDevice_t
struct EventSetSt;
using EventSet = EventSetSt*;  // nvmlEventSet_t

inline constexpr unsigned kPciBusIdSize = 32;  // NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE
inline constexpr unsigned kNameSize = 96;      // NVML_DEVICE_NAME_V2_BUFFER_SIZE
inline constexpr unsigned kUuidSize = 96;      // NVML_DEVICE_UUID_V2_BUFFER_SIZE
inline constexpr unsigned kNvLinkMaxLinks = 18;

// nvmlPciInfo_t, as nvmlDeviceGetPciInfo_v3 fills it.
struct PciInfo {
  char bus_id_legacy[16];
  unsigned domain;
  unsigned bus;
  unsigned device;
  unsigned pci_device_id;
  unsigned pci_subsystem_id;
  char bus_id[kPciBusIdSize];  // "00000000:3B:00.0"
};

// nvmlMemory_t, in bytes.
struct Memory {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};

// nvmlMemory_v2_t, in bytes: `used` without the driver's reservation
// (what nvidia-smi shows as Used; nvmlMemory_t's `used` counts it).
struct MemoryV2 {
  unsigned version;
  unsigned long long total;
  unsigned long long reserved;
  unsigned long long free;
  unsigned long long used;
};
// nvmlMemory_v2: NVML_STRUCT_VERSION(Memory, 2), the struct's size | 2 << 24.
inline constexpr unsigned kMemoryV2Version = sizeof(MemoryV2) | (2U << 24);

// nvmlUtilization_t, percent over the last sample period.
struct Utilization {
  unsigned gpu;
  unsigned memory;
};

// nvmlProcessInfo_v2_t, as nvmlDeviceGetComputeRunningProcesses_v2 fills it
// (its layout never changed; some R535 drivers filled the _v3 function's
// with a longer one, so _v2 is called where the library has it, and the
// buffer has room for the longer entries either way).
struct ProcessInfo {
  unsigned pid;
  unsigned long long used_gpu_memory;  // bytes
  unsigned gpu_instance_id;            // 0xFFFFFFFF without MIG
  unsigned compute_instance_id;
};
inline constexpr size_t kLongestProcessInfo = 32;  // bytes, the R535 form

// nvmlEventData_t.
struct EventData {
  Device device;
  unsigned long long event_type;
  unsigned long long event_data;  // the Xid, for kEventXidCriticalError
  unsigned gpu_instance_id;
  unsigned compute_instance_id;
};

// nvmlTemperatureSensors_t
inline constexpr int kTemperatureGpu = 0;
// nvmlMemoryErrorType_t, nvmlEccCounterType_t
inline constexpr int kMemoryErrorCorrected = 0;
inline constexpr int kMemoryErrorUncorrected = 1;
inline constexpr int kVolatileEcc = 0;
inline constexpr int kAggregateEcc = 1;
// nvmlPageRetirementCause_t
inline constexpr int kRetiredMultipleSingleBit = 0;
inline constexpr int kRetiredDoubleBit = 1;
// nvmlEnableState_t
inline constexpr int kDisabled = 0;
inline constexpr int kEnabled = 1;
// nvmlNvLinkErrorCounter_t
inline constexpr int kNvLinkErrorDlReplay = 0;
inline constexpr int kNvLinkErrorDlRecovery = 1;
inline constexpr int kNvLinkErrorDlCrcFlit = 2;
inline constexpr int kNvLinkErrorDlCrcData = 3;

// nvmlClocksEventReasons (the throttle reasons), a bit mask.
inline constexpr unsigned long long kClocksEventGpuIdle = 0x1ULL;
inline constexpr unsigned long long kClocksEventApplicationsClocksSetting = 0x2ULL;
inline constexpr unsigned long long kClocksEventSwPowerCap = 0x4ULL;
inline constexpr unsigned long long kClocksEventHwSlowdown = 0x8ULL;
inline constexpr unsigned long long kClocksEventSyncBoost = 0x10ULL;
inline constexpr unsigned long long kClocksEventSwThermalSlowdown = 0x20ULL;
inline constexpr unsigned long long kClocksEventHwThermalSlowdown = 0x40ULL;
inline constexpr unsigned long long kClocksEventHwPowerBrakeSlowdown = 0x80ULL;

// nvmlEventType bits.
inline constexpr unsigned long long kEventSingleBitEccError = 0x1ULL;
inline constexpr unsigned long long kEventDoubleBitEccError = 0x2ULL;
inline constexpr unsigned long long kEventPState = 0x4ULL;
inline constexpr unsigned long long kEventXidCriticalError = 0x8ULL;
inline constexpr unsigned long long kEventClock = 0x10ULL;

// The functions, by the names the library exports.
using InitFn = Return (*)();
using ShutdownFn = Return (*)();
using ErrorStringFn = const char* (*)(Return);
using SystemGetDriverVersionFn = Return (*)(char*, unsigned);
using DeviceGetCountFn = Return (*)(unsigned*);
using DeviceGetHandleByIndexFn = Return (*)(unsigned, Device*);
using DeviceGetStringFn = Return (*)(Device, char*, unsigned);  // name, UUID
using DeviceGetPciInfoFn = Return (*)(Device, PciInfo*);
using DeviceGetTemperatureFn = Return (*)(Device, int, unsigned*);
using DeviceGetUintFn = Return (*)(Device, unsigned*);           // power (mW), PCIe replays...
using DeviceGetUllFn = Return (*)(Device, unsigned long long*);  // energy (mJ), reasons
using DeviceGetMemoryInfoFn = Return (*)(Device, Memory*);
using DeviceGetMemoryInfoV2Fn = Return (*)(Device, MemoryV2*);
using DeviceGetHandleByPciBusIdFn = Return (*)(const char*, Device*);
using DeviceGetUtilizationRatesFn = Return (*)(Device, Utilization*);
using DeviceGetEnableStatePairFn = Return (*)(Device, int*, int*);  // ECC mode
using DeviceGetTotalEccErrorsFn = Return (*)(Device, int, int, unsigned long long*);
using DeviceGetRetiredPagesFn = Return (*)(Device, int, unsigned*, unsigned long long*);
using DeviceGetEnableStateFn = Return (*)(Device, int*);  // retirement pending
using DeviceGetRemappedRowsFn = Return (*)(Device, unsigned*, unsigned*, unsigned*, unsigned*);
using DeviceGetNvLinkStateFn = Return (*)(Device, unsigned, int*);
using DeviceGetNvLinkErrorCounterFn = Return (*)(Device, unsigned, int, unsigned long long*);
using DeviceGetMigModeFn = Return (*)(Device, unsigned*, unsigned*);
using DeviceGetMigDeviceHandleByIndexFn = Return (*)(Device, unsigned, Device*);
using DeviceGetProcessesFn = Return (*)(Device, unsigned*, ProcessInfo*);
using EventSetCreateFn = Return (*)(EventSet*);
using DeviceRegisterEventsFn = Return (*)(Device, unsigned long long, EventSet);
using EventSetWaitFn = Return (*)(EventSet, EventData*, unsigned);
using EventSetFreeFn = Return (*)(EventSet);

// The layouts are the ABI: a mistake here reads garbage from a real driver
// (the stand-in shares this header, so only these can see one).
static_assert(sizeof(PciInfo) == 68 && offsetof(PciInfo, bus_id) == 36);
static_assert(sizeof(Memory) == 24 && offsetof(Memory, used) == 16);
static_assert(sizeof(MemoryV2) == 40 && offsetof(MemoryV2, reserved) == 16 &&
              offsetof(MemoryV2, used) == 32 && kMemoryV2Version == 0x02000028);
static_assert(sizeof(Utilization) == 8);
static_assert(sizeof(ProcessInfo) == 24 && offsetof(ProcessInfo, used_gpu_memory) == 8 &&
              offsetof(ProcessInfo, compute_instance_id) == 20);
static_assert(sizeof(EventData) == 32 && offsetof(EventData, event_data) == 16 &&
              offsetof(EventData, compute_instance_id) == 28);

}  // namespace xpu::hal::nvml
