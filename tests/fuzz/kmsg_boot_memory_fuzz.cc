// The kernel log's boot memory (KmsgBootMemory): what a reader remembers of
// one boot's records, fed any sequence of records (numbers, stamps, texts
// from the input, rising, repeated or going back, bursts past its bound) and
// reopened passes. It must stay within its bound, take the next record of a
// boot as new, and know again every record it took as new in the boot it is
// in when a reopened source reads them again: none handled twice, whatever
// came before. For a source of one boot (/dev/kmsg: NoteOfOneBoot, chosen by
// the input's first byte), a record is new exactly when its number is above
// every one noted, and no record starts a newer boot.
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <cstdlib>
#include <iterator>
#include <map>
#include <optional>
#include <string>

#include "hal/kmsg/kmsg.h"

namespace {

using xpu::hal::KmsgBootMemory;
using Verdict = KmsgBootMemory::Verdict;

// The memory under test and what it must know: the records taken as new
// since its boot began, by number (one number names one record in a boot).
class Model {
 public:
  explicit Model(bool one_boot) : one_boot_(one_boot) {}
  // Notes a record of the main pass and checks the verdict.
  void Note(uint64_t sequence, uint64_t stamp, const std::string& text) {
    if (one_boot_) {
      const bool above = boot_.empty() || sequence > boot_.rbegin()->first;
      const Verdict v = memory_.NoteOfOneBoot(sequence, stamp, text);
      if (v != (above ? Verdict::kNew : Verdict::kReadAlready)) abort();
      if (above) boot_[sequence] = {stamp, text};
      if (memory_.size() > xpu::hal::kKmsgRememberedRecords) abort();
      return;
    }
    // The next record of the boot (a higher number than any held, in this
    // pass too, its stamp not well before the last's) is new.
    const bool next = boot_.empty() ||
                      (sequence > boot_.rbegin()->first &&
                       stamp + xpu::hal::kKmsgPreemptedStampUs >= boot_.rbegin()->second.stamp_us &&
                       (!pass_last_ || sequence > *pass_last_));
    pass_last_ = sequence;
    const Verdict v = memory_.Note(sequence, stamp, text);
    if (next && v != Verdict::kNew) abort();
    switch (v) {
      case Verdict::kNew:
        boot_[sequence] = {stamp, text};
        break;
      case Verdict::kNewBoot:
        boot_.clear();
        boot_[sequence] = {stamp, text};
        break;
      case Verdict::kReadAlready: {
        // Only a record of this boot, read before, is: the same number, stamp
        // and text (one forgotten is judged by its stamp alone).
        const auto it = boot_.find(sequence);
        if (Whole() &&
            (it == boot_.end() || it->second.stamp_us != stamp || it->second.text != text))
          abort();
        break;
      }
    }
    if (memory_.size() > xpu::hal::kKmsgRememberedRecords) abort();
  }
  // A reopened source reads the boot's records again, in order, from the
  // `from`th to before the `to`th (the ring's oldest kept, a forwarder's
  // file): each is one read already while the memory holds them all.
  void Reread(size_t from, size_t to) {
    memory_.StartPass();
    pass_last_.reset();
    // One boot's memory knows its records by number, forgotten or not.
    if (!one_boot_ && !Whole()) return;
    auto it = std::next(boot_.begin(), static_cast<std::ptrdiff_t>(from));
    for (size_t i = from; i < to; ++i, ++it) {
      pass_last_ = it->first;
      const Verdict v = one_boot_
                            ? memory_.NoteOfOneBoot(it->first, it->second.stamp_us, it->second.text)
                            : memory_.Note(it->first, it->second.stamp_us, it->second.text);
      if (v != Verdict::kReadAlready) abort();
    }
  }
  size_t size() const { return boot_.size(); }

 private:
  struct Record {
    uint64_t stamp_us;
    std::string text;
  };
  // Whether the memory holds every record of the boot (none forgotten).
  bool Whole() const { return boot_.size() <= xpu::hal::kKmsgRememberedRecords; }
  const bool one_boot_;
  KmsgBootMemory memory_;
  std::map<uint64_t, Record> boot_;
  std::optional<uint64_t> pass_last_;  // the number noted last, this pass
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  Model model(in.ConsumeIntegral<uint8_t>() % 4 == 0);
  uint64_t sequence = in.ConsumeIntegral<uint16_t>();
  uint64_t stamp = in.ConsumeIntegral<uint32_t>();
  int burst_budget = 8000;
  while (in.remaining_bytes() > 0) {
    const uint8_t op = in.ConsumeIntegral<uint8_t>();
    if (op % 16 == 0) {
      const size_t from = in.ConsumeIntegralInRange<size_t>(0, model.size());
      model.Reread(from, in.ConsumeIntegralInRange<size_t>(from, model.size()));
      continue;
    }
    // Mostly the next record; sometimes a number going back, a stamp going
    // back (the clock started again), a jump, or a burst of records past
    // the memory's bound.
    switch (op % 8) {
      case 0:
        sequence -= std::min<uint64_t>(sequence, in.ConsumeIntegral<uint8_t>());
        break;
      case 1:
        sequence += 1;
        stamp -= std::min<uint64_t>(stamp, in.ConsumeIntegral<uint32_t>());
        break;
      case 2:
        sequence += in.ConsumeIntegral<uint16_t>();
        stamp += in.ConsumeIntegral<uint32_t>();
        break;
      case 3: {
        const int n = std::min(in.ConsumeIntegralInRange<int>(1, 6000), burst_budget);
        burst_budget -= n;  // an input's bursts stay under 8,000 records: fast
        for (int i = 0; i < n; ++i) model.Note(++sequence, ++stamp, "burst " + std::to_string(i));
        continue;
      }
      default:
        sequence += 1;
        stamp += in.ConsumeIntegral<uint8_t>();
        break;
    }
    model.Note(sequence, stamp, in.ConsumeRandomLengthString(32));
  }
  return 0;
}
