// A library with NVML's C functions (the names and signatures the nvml
// backend binds, src/hal/nvml/nvml_api.h) that answers every call from the bytes
// of one fuzz input (nvml_library_fuzz.cc sets them): any return code, any
// count, strings of any length with or without their terminator, values at
// their types' extremes. It keeps NVML's one promise a caller cannot check,
// that nothing is written past the buffer the caller gave; every other
// answer is fair (a count larger than the buffer with success, a lost card
// midway, a MIG device count in the billions).
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "hal/nvml/nvml_api.h"

namespace nvml = xpu::hal::nvml;

namespace {

const uint8_t* data = nullptr;
size_t size = 0, pos = 0;

uint8_t Byte() { return pos < size ? data[pos++] : 0; }
unsigned U32() {
  unsigned v = 0;
  for (int i = 0; i < 4; ++i) v = (v << 8) | Byte();
  return v;
}
unsigned long long U64() { return (static_cast<unsigned long long>(U32()) << 32) | U32(); }
// Mostly success; else any code (the lost GPU, "not supported", INSUFFICIENT_SIZE, junk).
nvml::Return Ret() {
  const uint8_t b = Byte();
  if (b < 160) return nvml::kSuccess;
  if (b < 250) return static_cast<nvml::Return>(b % 32);
  return static_cast<nvml::Return>(U32());
}
// Up to `length` bytes of input, terminated when the input says so.
void Text(char* buf, unsigned length) {
  if (buf == nullptr || length == 0) return;
  const unsigned n = Byte() % (length + 1);
  for (unsigned i = 0; i < n; ++i) buf[i] = static_cast<char>(Byte());
  if (n < length && (Byte() & 1) != 0) buf[n] = '\0';
}
template <typename T>
nvml::Return Fill(T* out) {
  const nvml::Return r = Ret();
  if (out != nullptr)
    for (size_t i = 0; i < sizeof(T); ++i) reinterpret_cast<uint8_t*>(out)[i] = Byte();
  return r;
}

}  // namespace

extern "C" {

// Not NVML's: the bytes the next calls answer from.
void xpu_fuzz_nvml_set(const uint8_t* d, size_t n) {
  data = d;
  size = n;
  pos = 0;
}

nvml::Return nvmlInit_v2() { return nvml::kSuccess; }
nvml::Return nvmlShutdown() { return nvml::kSuccess; }
const char* nvmlErrorString(nvml::Return) { return (Byte() & 1) != 0 ? "fuzzed error" : nullptr; }
nvml::Return nvmlSystemGetDriverVersion(char* buf, unsigned length) {
  Text(buf, length);
  return Ret();
}
nvml::Return nvmlDeviceGetCount_v2(unsigned* count) {
  *count = (Byte() & 1) != 0 ? Byte() % 4 : U32();
  return Ret();
}
nvml::Return nvmlDeviceGetHandleByIndex_v2(unsigned index, nvml::Device* device) {
  *device = reinterpret_cast<nvml::Device>(static_cast<uintptr_t>(index) + 1);
  return Ret();
}
// Any answer for any address: found, lost, not found, junk.
nvml::Return nvmlDeviceGetHandleByPciBusId_v2(const char*, nvml::Device* device) {
  *device = reinterpret_cast<nvml::Device>(static_cast<uintptr_t>(Byte()) + 1);
  return Ret();
}
nvml::Return nvmlDeviceGetName(nvml::Device, char* buf, unsigned length) {
  Text(buf, length);
  return Ret();
}
nvml::Return nvmlDeviceGetUUID(nvml::Device, char* buf, unsigned length) {
  Text(buf, length);
  return Ret();
}
nvml::Return nvmlDeviceGetPciInfo_v3(nvml::Device, nvml::PciInfo* p) {
  const nvml::Return r = Fill(p);
  if ((Byte() & 1) != 0) Text(p->bus_id, sizeof(p->bus_id));
  return r;
}
nvml::Return nvmlDeviceGetTemperature(nvml::Device, int, unsigned* v) { return Fill(v); }
nvml::Return nvmlDeviceGetPowerUsage(nvml::Device, unsigned* v) { return Fill(v); }
nvml::Return nvmlDeviceGetTotalEnergyConsumption(nvml::Device, unsigned long long* v) {
  return Fill(v);
}
nvml::Return nvmlDeviceGetMemoryInfo(nvml::Device, nvml::Memory* m) { return Fill(m); }
nvml::Return nvmlDeviceGetMemoryInfo_v2(nvml::Device, nvml::MemoryV2* m) { return Fill(m); }
nvml::Return nvmlDeviceGetUtilizationRates(nvml::Device, nvml::Utilization* u) { return Fill(u); }
nvml::Return nvmlDeviceGetEccMode(nvml::Device, int* current, int* pending) {
  Fill(pending);
  return Fill(current);
}
nvml::Return nvmlDeviceGetTotalEccErrors(nvml::Device, int, int, unsigned long long* v) {
  return Fill(v);
}
nvml::Return nvmlDeviceGetRetiredPages(nvml::Device, int, unsigned* count,
                                       unsigned long long* addresses) {
  const unsigned room = *count;
  const nvml::Return r = Ret();
  const unsigned n = (Byte() & 1) != 0 ? Byte() % 8 : U32();
  for (unsigned i = 0; i < n && i < room && addresses != nullptr; ++i) addresses[i] = U64();
  *count = n;  // may exceed the room: what a library answers, not what it wrote
  return r;
}
nvml::Return nvmlDeviceGetRetiredPagesPendingStatus(nvml::Device, int* v) { return Fill(v); }
nvml::Return nvmlDeviceGetRemappedRows(nvml::Device, unsigned* corrected, unsigned* uncorrected,
                                       unsigned* pending, unsigned* failure) {
  Fill(corrected);
  Fill(uncorrected);
  Fill(pending);
  return Fill(failure);
}
nvml::Return nvmlDeviceGetCurrentClocksEventReasons(nvml::Device, unsigned long long* v) {
  return Fill(v);
}
nvml::Return nvmlDeviceGetNvLinkState(nvml::Device, unsigned, int* v) { return Fill(v); }
nvml::Return nvmlDeviceGetNvLinkErrorCounter(nvml::Device, unsigned, int, unsigned long long* v) {
  return Fill(v);
}
nvml::Return nvmlDeviceGetPcieReplayCounter(nvml::Device, unsigned* v) { return Fill(v); }
nvml::Return nvmlDeviceGetMigMode(nvml::Device, unsigned* current, unsigned* pending) {
  Fill(pending);
  return Fill(current);
}
nvml::Return nvmlDeviceGetMaxMigDeviceCount(nvml::Device, unsigned* v) {
  *v = (Byte() & 1) != 0 ? Byte() % 8 : U32();
  return Ret();
}
nvml::Return nvmlDeviceGetMigDeviceHandleByIndex(nvml::Device gpu, unsigned index,
                                                 nvml::Device* mig) {
  *mig = reinterpret_cast<nvml::Device>(reinterpret_cast<uintptr_t>(gpu) |
                                        ((static_cast<uintptr_t>(index) + 1) << 16));
  return Ret();
}
nvml::Return nvmlDeviceGetGpuInstanceId(nvml::Device, unsigned* v) { return Fill(v); }
nvml::Return nvmlDeviceGetComputeInstanceId(nvml::Device, unsigned* v) { return Fill(v); }
nvml::Return nvmlDeviceGetComputeRunningProcesses_v2(nvml::Device, unsigned* count,
                                                     nvml::ProcessInfo* infos) {
  const unsigned room = *count;
  const nvml::Return r = Ret();
  const unsigned n = (Byte() & 1) != 0 ? Byte() % 8 : U32();
  for (unsigned i = 0; i < n && i < room && infos != nullptr; ++i) Fill(&infos[i]);
  *count = n;
  return r;
}

}  // extern "C"
