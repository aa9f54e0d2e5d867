#pragma once

#include <cstddef>
#include <map>
#include <set>
#include <string>
#include <string_view>

#include "common/status.h"

namespace xpu::hal {

// The kernel log's active states (Xid 79, amdgpu's failed reset: codes that
// stay until the device is seen healthy, whose remedy is a reboot), kept
// across exporter restarts in a state file (docs/hal.md, "States across
// restarts"): the kernel's ring forgets, and a card still off the bus must
// not read healthy after a restart. A file written in another boot (another
// boot id) says nothing of this one: the reboot was the remedy.

// Bounds of the state file (docs/reliability.md): above the most the
// sampler can write (kMaxKmsgDevices devices of kMaxKmsgCodesPerDevice state
// codes each, events with their times: about 2 MB), so that no file it wrote is refused at the
// next start (KmsgStateTest.TheMostTheSamplerHoldsIsAFileTheNextStartReads).
inline constexpr size_t kMaxKmsgStateFileBytes = size_t{4} << 20;

struct KmsgSavedStates {
  std::string boot_id;
  // By canonical PCI address: the state codes ("0x10DE004F") active on it.
  std::map<std::string, std::set<std::string>> states;
  // By canonical PCI address: the event codes active on it, each with the
  // kernel time (µs since boot) of its last record: active until its window
  // after that, in this boot.
  std::map<std::string, std::map<std::string, uint64_t>> events;
  bool operator==(const KmsgSavedStates&) const = default;
};

// The file's text: JSON, {"version":1,"boot_id":"...","states":{"0000:3b:00.0":["0x10DE004F"]},
// "events":{"0000:3b:00.0":{"0x10DE000D":1000000000}}} ("events" may be absent: a file of an
// earlier release; one of this release is read by those, which ignore it).
std::string SerializeKmsgStates(const KmsgSavedStates& s);
// Pure, on untrusted text (fuzzed: kmsg_state): InvalidArgument, saying
// why, for anything but that shape within its bounds (kMaxKmsgStateFileBytes,
// the backend's device and code limits, canonical addresses, fault codes).
Status ParseKmsgStates(std::string_view text, KmsgSavedStates* out);

// This boot's id (/proc/sys/kernel/random/boot_id, or `path`), trimmed;
// empty when it cannot be read.
std::string ReadBootId(const std::string& path = "/proc/sys/kernel/random/boot_id");

// Writes `content` to `path` so that a reader (or a crash) sees the old file
// or the new one, never a part: under an exclusive lock (flock on
// `path`.lock, waited for at most 2 s) a temporary file beside it with a
// name no other process can hold (mkstemp), fsync, rename, fsync of the
// directory. Writers in other processes (other pid namespaces) and threads
// take turns; a crashed writer's temporary file is removed by the next.
Status WriteFileAtomically(const std::string& path, const std::string& content);

// Makes the state directory `dir` where it is missing (each missing folder
// mode 0700); IoError, saying why, where it cannot (or it is no directory).
Status MakeStateDirectory(const std::string& dir);

}  // namespace xpu::hal
