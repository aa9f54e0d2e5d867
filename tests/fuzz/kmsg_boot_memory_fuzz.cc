// The kernel log's boot memory (KmsgBootMemory): what a reader remembers of
// one boot's records, fed any sequence of records (numbers, stamps, texts
// from the input, rising, repeated or going back) and reopened passes. It
// must stay within its bound, and every record it took as new in the boot
// it is in must be known again when a reopened source reads them again:
// none handled twice, whatever came before.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstdlib>
#include <iterator>
#include <map>
#include <string>

#include "hal/kmsg/kmsg.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using xpu::hal::KmsgBootMemory;
  using Verdict = KmsgBootMemory::Verdict;
  FuzzedDataProvider in(data, size);
  KmsgBootMemory memory;
  // The records taken as new since the boot the memory is in began, by
  // number (one number names one record within a boot).
  struct Record {
    uint64_t stamp_us;
    std::string text;
  };
  std::map<uint64_t, Record> boot;
  uint64_t sequence = in.ConsumeIntegral<uint16_t>();
  uint64_t stamp = in.ConsumeIntegral<uint32_t>();
  while (in.remaining_bytes() > 0) {
    const uint8_t op = in.ConsumeIntegral<uint8_t>();
    if (op % 16 == 0) {
      // A reopened source reads the boot's records again, in order, from
      // any of them (the ring's oldest kept, a forwarder's file) up to any:
      // each is one read already (the memory holds them all while they are
      // fewer than its bound). What follows may go back among them.
      memory.StartPass();
      const size_t from = in.ConsumeIntegralInRange<size_t>(0, boot.size());
      const size_t to = in.ConsumeIntegralInRange<size_t>(from, boot.size());
      if (boot.size() <= xpu::hal::kKmsgRememberedRecords) {
        auto it = std::next(boot.begin(), static_cast<std::ptrdiff_t>(from));
        for (size_t i = from; i < to; ++i, ++it)
          if (memory.Note(it->first, it->second.stamp_us, it->second.text) != Verdict::kReadAlready)
            abort();
      }
      continue;
    }
    // Mostly the next record; sometimes a number or stamp going back, a
    // jump, or a record read before.
    switch (op % 8) {
      case 0:
        sequence -= std::min<uint64_t>(sequence, in.ConsumeIntegral<uint8_t>());
        break;
      case 1:
        stamp -= std::min<uint64_t>(stamp, in.ConsumeIntegral<uint32_t>());
        break;
      case 2:
        sequence += in.ConsumeIntegral<uint16_t>();
        stamp += in.ConsumeIntegral<uint32_t>();
        break;
      default:
        sequence += 1;
        stamp += in.ConsumeIntegral<uint8_t>();
        break;
    }
    const std::string text = in.ConsumeRandomLengthString(32);
    switch (memory.Note(sequence, stamp, text)) {
      case Verdict::kNew:
        boot[sequence] = {stamp, text};
        break;
      case Verdict::kNewBoot:
        boot.clear();
        boot[sequence] = {stamp, text};
        break;
      case Verdict::kReadAlready: {
        // Only a record of this boot, read before, is: the same number, stamp
        // and text (one forgotten is judged by its stamp alone).
        const auto it = boot.find(sequence);
        if (boot.size() <= xpu::hal::kKmsgRememberedRecords &&
            (it == boot.end() || it->second.stamp_us != stamp || it->second.text != text))
          abort();
        break;
      }
    }
    if (memory.size() > xpu::hal::kKmsgRememberedRecords) abort();
  }
  return 0;
}
