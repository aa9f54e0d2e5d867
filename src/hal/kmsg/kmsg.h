#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"

namespace xpu::hal {

// The largest record /dev/kmsg hands out: a read() needs a buffer this big
// (the kernel's limit for one record with its prefix and dictionary), and
// a record file's record may not be longer.
inline constexpr size_t kKmsgMaxRecord = 8192;

// One record of the kernel's log, as /dev/kmsg gives it
// (Documentation/ABI/testing/dev-kmsg):
//
//   <facility*8+priority>,<sequence>,<microseconds since boot>,<flags>[,...];<text>\n
//   [ KEY=VALUE\n]...
//
// Non-printable bytes and '\' in the text and values are escaped \xNN;
// they are unescaped here. Further prefix fields (",caller=T1") are ignored.
struct KmsgRecord {
  int facility = 0;  // 0: the kernel; 1 (LOG_USER) for records written from userspace
  int priority = 0;  // 0 emerg .. 7 debug
  uint64_t sequence = 0;
  uint64_t timestamp_us = 0;
  char flags = '-';  // '-', or 'c' (a continued line), '+'
  std::string text;
  std::map<std::string, std::string> dict;  // SUBSYSTEM, DEVICE, ...
};

// Parses one record (at most kKmsgMaxRecord bytes); InvalidArgument says
// what is wrong with it. Never throws.
Status ParseKmsgRecord(std::string_view raw, KmsgRecord* out);

// The PCI address a record names, normalised to "dddd:bb:dd.f" (lower case):
// the dictionary's DEVICE=+pci:<address>, else the first address in the
// text (a dev_printk prefix "amdgpu 0000:03:00.0: ...", NVIDIA's
// "(PCI:0000:3b:00)", which has no function and is read as function 0).
// Empty when it names none.
std::string NormalizePciAddress(std::string_view text);

// Whether a record's text is a packet log: netfilter's LOG target, nft's
// `log`, ebtables' and arptables' log write a kernel record (facility 0)
// that begins with a prefix any holder of CAP_NET_ADMIN chooses (up to 127
// bytes), then the packet's fields, "IN=<if> OUT=<if> ...". Such a record
// is never a driver's line, whatever its start says.
bool IsPacketLog(std::string_view text);

// What a reader has read of one boot's kernel log, to tell a record read
// already (a rewritten record file read again from its start, a reopened
// ring) from a new one and from a newer boot's. Within one boot a sequence
// number names one record, and stamps rise with sequence numbers (within
// kKmsgBootMarginUs: two CPUs may stamp out of order); a reboot starts both
// again. Remembers the boot's first record and its last kKmsgRememberedRecords
// (24 bytes each). Called from one thread (the sampler's).
class KmsgBootMemory {
 public:
  enum class Verdict {
    kNew,          // not read before: handle it
    kReadAlready,  // this boot's, read before (same sequence, stamp and text): skip it
    kNewBoot,      // a boot after the one remembered: what it raised is gone
  };
  // Judges the record and remembers it (kNew, kNewBoot: then it is the new
  // boot's first). Within one pass (records read in order, the source
  // neither reopened nor started over) a number at or below the one before
  // starts a newer boot, whatever the memory says: one boot's numbers rise.
  Verdict Note(uint64_t sequence, uint64_t stamp_us, std::string_view text);
  // The same for a source that holds one boot only (/dev/kmsg: the ring is
  // this boot's, read again from its oldest record when reopened): a record
  // is new when its number is above every one read, and never a new boot.
  // Stamps say nothing here: the kernel stamps a record before it numbers
  // it, so a printk preempted between the two is stamped before the record
  // numbered ahead of it.
  Verdict NoteOfOneBoot(uint64_t sequence, uint64_t stamp_us, std::string_view text);
  // The source is read again from a start (reopened, a record file
  // rewritten or replaced): what comes may have been read before.
  void StartPass() { pass_last_.reset(); }
  size_t size() const { return seen_.size(); }

 private:
  struct Seen {
    uint64_t sequence;
    uint64_t stamp_us;
    uint64_t hash;  // of the text
  };
  Verdict Restart(const Seen& first);
  void Remember(size_t at, const Seen& s);  // at: its index in seen_
  Seen first_{};                            // the boot's first record read (never forgotten)
  std::optional<uint64_t> pass_last_;       // the number of the record before, this pass
  std::deque<Seen> seen_;                   // the last ones, by rising sequence
};

// Bounds of KmsgBootMemory (docs/reliability.md).
inline constexpr size_t kKmsgRememberedRecords = 4096;
inline constexpr uint64_t kKmsgBootMarginUs = 1000000;
// How far before the record numbered ahead of it the next number may be
// stamped and still be the same boot's: the kernel stamps a record before
// it numbers it, and a printk preempted between the two (a stolen vCPU, a
// soft lockup: the watchdog's threshold is 20 s) is stamped that much
// before. A reboot's next number is stamped far before that (its clock
// starts again at 0).
inline constexpr uint64_t kKmsgPreemptedStampUs = 60000000;

}  // namespace xpu::hal
