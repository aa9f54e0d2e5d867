// A stand-in for NVIDIA's libnvidia-ml.so.1, which needs a driver and a GPU
// that cannot run here (docs/hal.md, "nvml"): it exports the C functions
// the nvml backend calls, with the same signatures, and serves the cards a
// test writes in a JSON fixture (XPU_FAKE_NVML_FIXTURE), read again when
// the file changed at a read's first calls (Fixture). A test injects through the fixture:
// nvmlInit_v2 failing ("init_error"), the card count failing ("count_error"), a lost card ("lost";
// "lost_by_index_no_handle": a lost card's handle is given only when asked for by address), a call
// that hangs
// ("hang_ms": {"nvmlDeviceGetTemperature": 5000}; it ends early once the
// fixture no longer names the call), a call the card does not
// support ("unsupported"), any other answer to a call ("errors"; "event_create_error": what
// nvmlEventSetCreate answers), and events (Xid, ECC, clocks)
// that nvmlEventSetWait_v2 delivers once each, in order. Built twice: the fake_nvml_old variant
// (FAKE_NVML_OLD_DRIVER) is an older driver's library, without nvmlDeviceGetRemappedRows and with
// only the older name of the clock-event reasons.
#include <limits.h>
#include <poll.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>

#include "hal/nvml/nvml_api.h"
#include "hal/pci_address.h"

namespace nvml = xpu::hal::nvml;
using Json = nlohmann::json;

namespace {

std::mutex mu;
std::atomic<int> hanging{0};  // calls asleep in a "hang_ms" now
std::atomic<long> calls{0};   // calls of a card made so far
// Guarded by mu. Never destroyed: a reader the backend left in a hanging
// call goes on alone (detached) and may still read it while the process
// runs its exit handlers.
// The fixture as last read: a snapshot replaced whole when the file
// changes, so that a call keeps the card it answers from without a copy
// (ThisCall holds it until the thread's next call).
std::shared_ptr<const Json>& fixture = *new std::shared_ptr<const Json>(new Json(Json::object()));
thread_local std::shared_ptr<const Json> this_call;
struct timespec mtime {};  // of the fixture last read
off_t size = -1;
ino_t inode = 0;
// As NVML does, each event set gets every event that comes after it was
// made, once: by set, the index of its next event in the fixture's list.
// Never destroyed (see fixture).
std::map<uintptr_t, size_t>& delivered = *new std::map<uintptr_t, size_t>();
size_t events_delivered = 0;  // by every set; guarded by mu
uintptr_t sets_made = 0;
uintptr_t set_attempts = 0;  // nvmlEventSetCreate's calls, failed ones too

// The fixture now; under mu. `look`: whether to look at the file (a stat,
// and a read when it changed) or answer from the snapshot the last look
// took. The calls that begin a read of the cards (the count, a card's
// handle by index or by bus address), a hang's poll and the events look;
// a card's other calls answer from the snapshot. The stand-in models what
// the driver answers, not what its calls cost: a stat at every call was
// the stand-in's own cost (230 system calls a second for 8 cards), counted
// in the exporter's idle figures because the library runs in its process
// (docs/benchmarks.md, issue 51, sixth pass).
const Json& Fixture(bool look = true) {
  static const char* const path = std::getenv("XPU_FAKE_NVML_FIXTURE");  // set once, before
  if (!look && (size >= 0 || path == nullptr)) return *fixture;
  struct stat st {};
  if (path == nullptr || stat(path, &st) != 0) {
    if (!fixture->empty()) fixture = std::make_shared<const Json>(Json::object());
    mtime = {};
    size = -1;
    return *fixture;
  }
  if (st.st_mtim.tv_sec != mtime.tv_sec || st.st_mtim.tv_nsec != mtime.tv_nsec ||
      st.st_size != size || st.st_ino != inode) {
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    Json j = Json::parse(text.str(), nullptr, false);
    if (!j.is_discarded()) {  // a file half written: keep the last one
      fixture = std::make_shared<const Json>(std::move(j));
      mtime = st.st_mtim;
      size = st.st_size;
      inode = st.st_ino;
    }
  }
  return *fixture;
}

// The member `key` of `j`, or `absent` when it has none: a reference, not
// the copy nlohmann's value() makes (each call reads the fixture, and a copy
// of every card per call made a read slow enough in a loaded sanitizer build
// to miss a test's deadline).
const Json& Member(const Json& j, const char* key, const Json& absent) {
  const auto it = j.find(key);
  return it == j.end() ? absent : *it;
}
const Json& kNoArray = *new Json(Json::array());
const Json& kNoObject = *new Json(Json::object());
const Json& kNull = *new Json();

// The card a handle names: index + 1, and the MIG device's index + 1 above
// bit 16.
nvml::Device Handle(unsigned gpu, unsigned mig = 0) {
  return reinterpret_cast<nvml::Device>(static_cast<uintptr_t>((gpu + 1) | (mig << 16)));
}

// Sleeps if the fixture says `fn` hangs; then answers from the card of `h`:
// `*card` (and `*mig` for a MIG handle) or an error to return.
nvml::Return Enter(const char* fn, nvml::Device h, const Json** card, const Json** mig = nullptr) {
  ++calls;
  std::unique_lock<std::mutex> lock(mu);
  // From the snapshot the read's count or handle call looked at (Fixture).
  const Json* f = &Fixture(/*look=*/false);
  if (f->contains("hang_ms") && (*f)["hang_ms"].contains(fn)) {
    const auto until = std::chrono::steady_clock::now() +
                       std::chrono::milliseconds((*f)["hang_ms"][fn].get<int>());
    ++hanging;
    for (bool still = true; still && std::chrono::steady_clock::now() < until;) {
      lock.unlock();
      std::this_thread::sleep_for(std::chrono::milliseconds(10));  // a call that does not return
      lock.lock();
      const Json& now = Fixture();
      still = now.contains("hang_ms") && now["hang_ms"].contains(fn);
    }
    --hanging;
    f = &Fixture();  // as it is now, after the hang
  }
  const Json& devices = Member(*f, "devices", kNoArray);
  this_call = fixture;  // what *card and *mig point into, kept for the caller
  const uintptr_t v = reinterpret_cast<uintptr_t>(h);
  const size_t gpu = (v & 0xFFFF) - 1, m = v >> 16;
  if (v == 0 || gpu >= devices.size()) return nvml::kErrorInvalidArgument;
  const Json& d = devices[gpu];
  if (d.value("lost", false)) return nvml::kErrorGpuIsLost;
  for (const Json& u : Member(d, "unsupported", kNoArray))
    if (u == fn) return nvml::kErrorNotSupported;
  // Any other answer for a call: {"errors": {"nvmlDeviceGetEccMode": 16}}.
  if (const Json& e = Member(d, "errors", kNoObject); e.contains(fn)) return e[fn].get<int>();
  if (card != nullptr) *card = &d;
  if (m > 0) {
    const Json& migs = Member(Member(d, "mig", kNoObject), "devices", kNoArray);
    if (m > migs.size()) return nvml::kErrorInvalidArgument;
    if (mig != nullptr) *mig = &migs[m - 1];
  }
  return nvml::kSuccess;
}

nvml::Return CopyText(const std::string& s, char* buf, unsigned length) {
  if (buf == nullptr) return nvml::kErrorInvalidArgument;
  if (s.size() + 1 > length) return nvml::kErrorInsufficientSize;
  std::memcpy(buf, s.c_str(), s.size() + 1);
  return nvml::kSuccess;
}

// A text field of the card: `key`, or `key`_bytes, a list of byte values
// (what a driver may write that is no UTF-8, which JSON cannot carry).
std::string TextOf(const Json& j, const std::string& key) {
  auto bytes = j.find(key + "_bytes");
  if (bytes == j.end() || !bytes->is_array()) return j.value(key, "");
  std::string s;
  for (const Json& b : *bytes) s.push_back(static_cast<char>(b.get<int>()));
  return s;
}

// A field of the card, or "not supported" when the fixture leaves it out.
template <typename T>
nvml::Return Field(const Json& j, const char* key, T* out) {
  if (!j.contains(key)) return nvml::kErrorNotSupported;
  *out = j[key].get<T>();
  return nvml::kSuccess;
}

}  // namespace

extern "C" {

// Not NVML's: how many calls hang now, so that a test can wait for a reader
// it left in one before its process exits.
int xpu_fake_nvml_hanging() { return hanging.load(); }
// Not NVML's: how many calls of a card were made so far (a test counts
// what one read asks).
long xpu_fake_nvml_calls() { return calls.load(); }
// Not NVML's: how many event sets were made, so that a test can wait for a
// listener to be in place before it writes events.
int xpu_fake_nvml_event_sets_made() {
  std::lock_guard<std::mutex> lock(mu);
  return static_cast<int>(sets_made);
}
// Not NVML's: how often nvmlEventSetCreate was called, failed calls too.
int xpu_fake_nvml_event_set_attempts() {
  std::lock_guard<std::mutex> lock(mu);
  return static_cast<int>(set_attempts);
}

// Not NVML's: how many registrations of card `index` for events took, so
// that a test can wait for a listener to have registered it.
std::atomic<int> registrations[64];
int xpu_fake_nvml_registrations_of(int index) {
  return index >= 0 && index < 64 ? registrations[index].load() : 0;
}

// Not NVML's: how many events every set together delivered, so that a
// test can wait for a listener to have taken one.
int xpu_fake_nvml_events_delivered() {
  std::lock_guard<std::mutex> lock(mu);
  return static_cast<int>(events_delivered);
}

nvml::Return nvmlInit_v2() {
  std::lock_guard<std::mutex> lock(mu);
  return Fixture().value("init_error", nvml::kSuccess);
}

nvml::Return nvmlShutdown() { return nvml::kSuccess; }

const char* nvmlErrorString(nvml::Return r) {
  switch (r) {
    case nvml::kSuccess:
      return "Success";
    case nvml::kErrorNotSupported:
      return "Not Supported";
    case nvml::kErrorDriverNotLoaded:
      return "Driver Not Loaded";
    case nvml::kErrorGpuIsLost:
      return "GPU is lost";
    case nvml::kErrorTimeout:
      return "Timeout";
    default:
      return "Unknown Error";
  }
}

nvml::Return nvmlSystemGetDriverVersion(char* buf, unsigned length) {
  std::lock_guard<std::mutex> lock(mu);
  return CopyText(Fixture().value("driver_version", "550.54.15"), buf, length);
}

nvml::Return nvmlDeviceGetCount_v2(unsigned* count) {
  std::lock_guard<std::mutex> lock(mu);
  *count = static_cast<unsigned>(Member(Fixture(), "devices", kNoArray).size());
  // "count_error": the library answering nothing (a read of the cards fails whole).
  return Fixture().value("count_error", nvml::kSuccess);
}

nvml::Return nvmlDeviceGetHandleByIndex_v2(unsigned index, nvml::Device* device) {
  unsigned count = 0;
  nvmlDeviceGetCount_v2(&count);
  if (index >= count) return nvml::kErrorInvalidArgument;
  const Json* d = nullptr;
  const nvml::Return r = Enter("nvmlDeviceGetHandleByIndex_v2", Handle(index), &d);
  bool handle_when_lost = true;  // "lost_by_index_no_handle": a library that gives none then
  {
    std::lock_guard<std::mutex> lock(mu);
    handle_when_lost = !Fixture().value("lost_by_index_no_handle", false);
  }
  if (r == nvml::kSuccess || (r == nvml::kErrorGpuIsLost && handle_when_lost))
    *device = Handle(index);
  return r;
}

nvml::Return nvmlDeviceGetName(nvml::Device h, char* buf, unsigned length) {
  const Json* d = nullptr;
  if (auto r = Enter("nvmlDeviceGetName", h, &d); r != nvml::kSuccess) return r;
  return CopyText(TextOf(*d, "name"), buf, length);
}

nvml::Return nvmlDeviceGetUUID(nvml::Device h, char* buf, unsigned length) {
  const Json *d = nullptr, *m = nullptr;
  if (auto r = Enter("nvmlDeviceGetUUID", h, &d, &m); r != nvml::kSuccess) return r;
  return CopyText(TextOf(m != nullptr ? *m : *d, "uuid"), buf, length);
}

nvml::Return nvmlDeviceGetPciInfo_v3(nvml::Device h, nvml::PciInfo* pci) {
  const Json* d = nullptr;
  if (auto r = Enter("nvmlDeviceGetPciInfo_v3", h, &d); r != nvml::kSuccess) return r;
  std::memset(pci, 0, sizeof *pci);
  const std::string id = d->value("bus_id", "");
  std::strncpy(pci->bus_id, id.c_str(), sizeof pci->bus_id - 1);
  return nvml::kSuccess;
}

nvml::Return nvmlDeviceGetTemperature(nvml::Device h, int sensor, unsigned* t) {
  const Json* d = nullptr;
  if (auto r = Enter("nvmlDeviceGetTemperature", h, &d); r != nvml::kSuccess) return r;
  if (sensor != nvml::kTemperatureGpu) return nvml::kErrorInvalidArgument;
  return Field(*d, "temperature", t);
}

nvml::Return nvmlDeviceGetPowerUsage(nvml::Device h, unsigned* mw) {
  const Json* d = nullptr;
  if (auto r = Enter("nvmlDeviceGetPowerUsage", h, &d); r != nvml::kSuccess) return r;
  return Field(*d, "power_mw", mw);
}

nvml::Return nvmlDeviceGetTotalEnergyConsumption(nvml::Device h, unsigned long long* mj) {
  const Json* d = nullptr;
  if (auto r = Enter("nvmlDeviceGetTotalEnergyConsumption", h, &d); r != nvml::kSuccess) return r;
  return Field(*d, "energy_mj", mj);
}

nvml::Return nvmlDeviceGetMemoryInfo(nvml::Device h, nvml::Memory* mem) {
  const Json *d = nullptr, *m = nullptr;
  if (auto r = Enter("nvmlDeviceGetMemoryInfo", h, &d, &m); r != nvml::kSuccess) return r;
  const Json& j = Member(*(m != nullptr ? m : d), "memory", kNull);
  if (!j.is_object()) return nvml::kErrorNotSupported;
  mem->total = j.value("total", 0ULL);
  mem->used = j.value("used", 0ULL) + j.value("reserved", 0ULL);
  mem->free = mem->total - std::min(mem->total, mem->used);
  return nvml::kSuccess;
}

// The second version, as drivers from R510 answer it: `used` without the
// driver's reservation (the fixture's "used"; "reserved" apart), as
// nvidia-smi shows them; the first version's `used` counts the reservation.
nvml::Return nvmlDeviceGetMemoryInfo_v2(nvml::Device h, nvml::MemoryV2* mem) {
  const Json *d = nullptr, *m = nullptr;
  if (auto r = Enter("nvmlDeviceGetMemoryInfo_v2", h, &d, &m); r != nvml::kSuccess) return r;
  if (mem == nullptr || mem->version != nvml::kMemoryV2Version)
    return nvml::kErrorInvalidArgument;  // NVML_ERROR_ARGUMENT_VERSION_MISMATCH is 25; close
  const Json& j = Member(*(m != nullptr ? m : d), "memory", kNull);
  if (!j.is_object()) return nvml::kErrorNotSupported;
  mem->total = j.value("total", 0ULL);
  mem->reserved = j.value("reserved", 0ULL);
  mem->used = j.value("used", 0ULL);
  mem->free = mem->total - std::min(mem->total, mem->used + mem->reserved);
  return nvml::kSuccess;
}

// A card by its PCI address in any of NVML's forms: found whether or not it
// is lost (GPU_IS_LOST then, the handle filled, as the real library does).
nvml::Return nvmlDeviceGetHandleByPciBusId_v2(const char* bus, nvml::Device* device) {
  if (bus == nullptr || device == nullptr) return nvml::kErrorInvalidArgument;
  const std::string want = xpu::hal::CanonicalPciAddress(bus);
  if (want.empty()) return nvml::kErrorInvalidArgument;
  unsigned index = 0;
  bool found = false;
  {
    std::lock_guard<std::mutex> lock(mu);
    const Json& devices = Member(Fixture(), "devices", kNoArray);
    for (unsigned i = 0; i < devices.size() && !found; ++i)
      if (xpu::hal::CanonicalPciAddress(devices[i].value("bus_id", "")) == want) {
        index = i;
        found = true;
      }
  }
  if (!found) return nvml::kErrorNotFound;
  const Json* d = nullptr;
  const nvml::Return r = Enter("nvmlDeviceGetHandleByPciBusId_v2", Handle(index), &d);
  if (r == nvml::kSuccess || r == nvml::kErrorGpuIsLost) *device = Handle(index);
  return r;
}

nvml::Return nvmlDeviceGetUtilizationRates(nvml::Device h, nvml::Utilization* u) {
  const Json* d = nullptr;
  if (auto r = Enter("nvmlDeviceGetUtilizationRates", h, &d); r != nvml::kSuccess) return r;
  const Json& j = Member(*d, "utilization", kNull);
  if (!j.is_object()) return nvml::kErrorNotSupported;
  u->gpu = j.value("gpu", 0U);
  u->memory = j.value("memory", 0U);
  return nvml::kSuccess;
}

nvml::Return nvmlDeviceGetEccMode(nvml::Device h, int* current, int* pending) {
  const Json* d = nullptr;
  if (auto r = Enter("nvmlDeviceGetEccMode", h, &d); r != nvml::kSuccess) return r;
  if (auto r = Field(*d, "ecc_mode", current); r != nvml::kSuccess) return r;
  *pending = *current;
  return nvml::kSuccess;
}

nvml::Return nvmlDeviceGetTotalEccErrors(nvml::Device h, int type, int counter,
                                         unsigned long long* n) {
  const Json* d = nullptr;
  if (auto r = Enter("nvmlDeviceGetTotalEccErrors", h, &d); r != nvml::kSuccess) return r;
  const Json& e = Member(*d, "ecc", kNoObject);
  const std::string key = std::string(counter == nvml::kVolatileEcc ? "volatile_" : "aggregate_") +
                          (type == nvml::kMemoryErrorCorrected ? "corrected" : "uncorrected");
  *n = e.value(key, 0ULL);
  return nvml::kSuccess;
}

// As NVML documents it: the addresses into a buffer of *count; one too
// small (a size query passes 0) answers INSUFFICIENT_SIZE with the count.
nvml::Return nvmlDeviceGetRetiredPages(nvml::Device h, int cause, unsigned* count,
                                       unsigned long long* addresses) {
  const Json* d = nullptr;
  if (auto r = Enter("nvmlDeviceGetRetiredPages", h, &d); r != nvml::kSuccess) return r;
  const Json& j = Member(*d, "retired", kNoObject);
  const unsigned pages =
      j.value(cause == nvml::kRetiredDoubleBit ? "double_bit" : "single_bit", 0U);
  if (*count < pages) {
    *count = pages;
    return nvml::kErrorInsufficientSize;
  }
  if (addresses == nullptr && pages > 0) return nvml::kErrorInvalidArgument;
  for (unsigned i = 0; i < pages; ++i) addresses[i] = 0x1000ULL * (i + 1);
  *count = pages;
  return nvml::kSuccess;
}

nvml::Return nvmlDeviceGetRetiredPagesPendingStatus(nvml::Device h, int* pending) {
  const Json* d = nullptr;
  if (auto r = Enter("nvmlDeviceGetRetiredPagesPendingStatus", h, &d); r != nvml::kSuccess)
    return r;
  *pending =
      Member(*d, "retired", kNoObject).value("pending", false) ? nvml::kEnabled : nvml::kDisabled;
  return nvml::kSuccess;
}

#ifndef FAKE_NVML_OLD_DRIVER
nvml::Return nvmlDeviceGetRemappedRows(nvml::Device h, unsigned* corrected, unsigned* uncorrected,
                                       unsigned* pending, unsigned* failure) {
  const Json* d = nullptr;
  if (auto r = Enter("nvmlDeviceGetRemappedRows", h, &d); r != nvml::kSuccess) return r;
  const Json& j = Member(*d, "remap", kNull);
  if (!j.is_object()) return nvml::kErrorNotSupported;
  *corrected = j.value("corrected", 0U);
  *uncorrected = j.value("uncorrected", 0U);
  *pending = j.value("pending", false) ? 1 : 0;
  *failure = j.value("failure", false) ? 1 : 0;
  return nvml::kSuccess;
}

nvml::Return nvmlDeviceGetCurrentClocksEventReasons(nvml::Device h, unsigned long long* reasons) {
  const Json* d = nullptr;
  if (auto r = Enter("nvmlDeviceGetCurrentClocksEventReasons", h, &d); r != nvml::kSuccess)
    return r;
  return Field(*d, "clocks_event_reasons", reasons);
}
#endif

nvml::Return nvmlDeviceGetCurrentClocksThrottleReasons(nvml::Device h,
                                                       unsigned long long* reasons) {
  const Json* d = nullptr;
  if (auto r = Enter("nvmlDeviceGetCurrentClocksThrottleReasons", h, &d); r != nvml::kSuccess)
    return r;
  return Field(*d, "clocks_event_reasons", reasons);
}

nvml::Return nvmlDeviceGetNvLinkState(nvml::Device h, unsigned link, int* active) {
  const Json* d = nullptr;
  if (auto r = Enter("nvmlDeviceGetNvLinkState", h, &d); r != nvml::kSuccess) return r;
  const Json& links = Member(*d, "nvlinks", kNoArray);
  if (link >= links.size()) return nvml::kErrorNotSupported;
  *active = links[link].value("active", false) ? nvml::kEnabled : nvml::kDisabled;
  return nvml::kSuccess;
}

nvml::Return nvmlDeviceGetNvLinkErrorCounter(nvml::Device h, unsigned link, int counter,
                                             unsigned long long* n) {
  const Json* d = nullptr;
  if (auto r = Enter("nvmlDeviceGetNvLinkErrorCounter", h, &d); r != nvml::kSuccess) return r;
  const Json& links = Member(*d, "nvlinks", kNoArray);
  if (link >= links.size()) return nvml::kErrorNotSupported;
  static const char* const kNames[] = {"replay", "recovery", "crc_flit", "crc_data"};
  if (counter < 0 || counter > 3) return nvml::kErrorInvalidArgument;
  *n = links[link].value(kNames[counter], 0ULL);
  return nvml::kSuccess;
}

nvml::Return nvmlDeviceGetPcieReplayCounter(nvml::Device h, unsigned* n) {
  const Json* d = nullptr;
  if (auto r = Enter("nvmlDeviceGetPcieReplayCounter", h, &d); r != nvml::kSuccess) return r;
  return Field(*d, "pcie_replays", n);
}

nvml::Return nvmlDeviceGetMigMode(nvml::Device h, unsigned* current, unsigned* pending) {
  const Json* d = nullptr;
  if (auto r = Enter("nvmlDeviceGetMigMode", h, &d); r != nvml::kSuccess) return r;
  if (!d->contains("mig")) return nvml::kErrorNotSupported;
  *current = *pending = (*d)["mig"].value("enabled", false) ? 1 : 0;
  return nvml::kSuccess;
}

nvml::Return nvmlDeviceGetMaxMigDeviceCount(nvml::Device h, unsigned* n) {
  const Json* d = nullptr;
  if (auto r = Enter("nvmlDeviceGetMaxMigDeviceCount", h, &d); r != nvml::kSuccess) return r;
  *n = 7;
  return nvml::kSuccess;
}

nvml::Return nvmlDeviceGetMigDeviceHandleByIndex(nvml::Device h, unsigned index,
                                                 nvml::Device* mig) {
  const Json* d = nullptr;
  if (auto r = Enter("nvmlDeviceGetMigDeviceHandleByIndex", h, &d); r != nvml::kSuccess) return r;
  const Json& migs = Member(Member(*d, "mig", kNoObject), "devices", kNoArray);
  if (index >= migs.size()) return nvml::kErrorNotFound;
  *mig = Handle(static_cast<unsigned>((reinterpret_cast<uintptr_t>(h) & 0xFFFF) - 1), index + 1);
  return nvml::kSuccess;
}

nvml::Return nvmlDeviceGetGpuInstanceId(nvml::Device h, unsigned* id) {
  const Json *d = nullptr, *m = nullptr;
  if (auto r = Enter("nvmlDeviceGetGpuInstanceId", h, &d, &m); r != nvml::kSuccess) return r;
  if (m == nullptr || !m->is_object()) return nvml::kErrorInvalidArgument;
  *id = m->value("gi", 0U);
  return nvml::kSuccess;
}

nvml::Return nvmlDeviceGetComputeInstanceId(nvml::Device h, unsigned* id) {
  const Json *d = nullptr, *m = nullptr;
  if (auto r = Enter("nvmlDeviceGetComputeInstanceId", h, &d, &m); r != nvml::kSuccess) return r;
  if (m == nullptr || !m->is_object()) return nvml::kErrorInvalidArgument;
  *id = m->value("ci", 0U);
  return nvml::kSuccess;
}

// _v2 and _v3 alike here (the entry of _v2, which the backend calls first).
nvml::Return nvmlDeviceGetComputeRunningProcesses_v2(nvml::Device h, unsigned* count,
                                                     nvml::ProcessInfo* infos) {
  const Json* d = nullptr;
  if (auto r = Enter("nvmlDeviceGetComputeRunningProcesses_v2", h, &d); r != nvml::kSuccess)
    return r;
  const Json& ps = Member(*d, "processes", kNoArray);
  if (ps.size() > *count) {
    *count = static_cast<unsigned>(ps.size());
    return nvml::kErrorInsufficientSize;
  }
  *count = static_cast<unsigned>(ps.size());
  for (size_t i = 0; i < ps.size(); ++i) {
    infos[i].pid = ps[i].value("pid", 0U);
    infos[i].used_gpu_memory = ps[i].value("used", 0ULL);
    infos[i].gpu_instance_id = ps[i].value("gi", 0xFFFFFFFFU);
    infos[i].compute_instance_id = ps[i].value("ci", 0xFFFFFFFFU);
  }
  return nvml::kSuccess;
}

nvml::Return nvmlDeviceGetComputeRunningProcesses_v3(nvml::Device h, unsigned* count,
                                                     nvml::ProcessInfo* infos) {
  return nvmlDeviceGetComputeRunningProcesses_v2(h, count, infos);
}

nvml::Return nvmlEventSetCreate(nvml::EventSet* set) {
  std::lock_guard<std::mutex> lock(mu);
  ++set_attempts;
  if (const Json& f = Fixture(); f.contains("event_create_error"))
    return static_cast<nvml::Return>(f["event_create_error"].get<int>());
  const uintptr_t id = ++sets_made;
  delivered[id] = Member(Fixture(), "events", kNoArray).size();
  *set = reinterpret_cast<nvml::EventSet>(id);
  return nvml::kSuccess;
}

nvml::Return nvmlDeviceRegisterEvents(nvml::Device h, unsigned long long /*types*/,
                                      nvml::EventSet /*set*/) {
  const Json* d = nullptr;
  const nvml::Return r = Enter("nvmlDeviceRegisterEvents", h, &d);
  const uintptr_t gpu = reinterpret_cast<uintptr_t>(h) & 0xffff;  // Handle(): index + 1
  if (r == nvml::kSuccess && gpu >= 1 && gpu <= 64) ++registrations[gpu - 1];
  return r;
}

namespace {
// A watch on the fixture's directory (inotify: a write, a rename into it),
// set before the fixture is looked at, so that a change after the look
// ends Wait(): the driver's wait sleeps in the kernel until an event, and
// the stand-in's own wake-ups are not to weigh in the exporter's idle
// figures. Without a fixture path, or inotify, Wait() naps 50 ms.
class FixtureWatch {
 public:
  FixtureWatch() {
    static const char* const path = std::getenv("XPU_FAKE_NVML_FIXTURE");
    if (path == nullptr) return;
    std::string dir = path;
    dir = dir.find('/') == std::string::npos ? "." : dir.substr(0, dir.rfind('/') + 1);
    fd_ = inotify_init1(IN_CLOEXEC);
    if (fd_ >= 0 && inotify_add_watch(fd_, dir.c_str(),
                                      IN_CLOSE_WRITE | IN_MODIFY | IN_MOVED_TO | IN_CREATE) < 0) {
      ::close(fd_);
      fd_ = -1;
    }
  }
  ~FixtureWatch() {
    if (fd_ >= 0) ::close(fd_);
  }
  FixtureWatch(const FixtureWatch&) = delete;
  FixtureWatch& operator=(const FixtureWatch&) = delete;
  void Wait(std::chrono::steady_clock::time_point until) const {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        until - std::chrono::steady_clock::now());
    if (left.count() <= 0) return;
    if (fd_ < 0) {
      std::this_thread::sleep_for(std::min(left, std::chrono::milliseconds(50)));
      return;
    }
    pollfd p{fd_, POLLIN, 0};
    (void)::poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), INT_MAX)));
  }

 private:
  int fd_ = -1;
};
}  // namespace

// Delivers the fixture's next undelivered event, or waits for one until
// `timeout_ms`.
nvml::Return nvmlEventSetWait_v2(nvml::EventSet set, nvml::EventData* data, unsigned timeout_ms) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    const FixtureWatch watch;
    {
      std::lock_guard<std::mutex> lock(mu);
      const Json& events = Member(Fixture(), "events", kNoArray);
      size_t& next = delivered[reinterpret_cast<uintptr_t>(set)];
      if (next < events.size()) {
        const Json& e = events[next++];
        ++events_delivered;
        std::memset(data, 0, sizeof *data);
        data->device = Handle(e.value("device", 0U));
        data->event_type = e.value("type", nvml::kEventXidCriticalError);
        data->event_data = e.value("data", 0ULL);
        data->gpu_instance_id = data->compute_instance_id = 0xFFFFFFFFU;
        return nvml::kSuccess;
      }
    }
    if (std::chrono::steady_clock::now() >= until) return nvml::kErrorTimeout;
    watch.Wait(until);
  }
}

nvml::Return nvmlEventSetFree(nvml::EventSet set) {
  std::lock_guard<std::mutex> lock(mu);
  delivered.erase(reinterpret_cast<uintptr_t>(set));
  return nvml::kSuccess;
}

}  // extern "C"
