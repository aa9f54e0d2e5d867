#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
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

}  // namespace xpu::hal
