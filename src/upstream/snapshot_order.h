#pragma once

#include <chrono>
#include <cstdint>

namespace xpu::upstream {

// The daemon's order of snapshots (docs/architecture.md, "Ordered ingest"):
// by timestampMs, then sequence. A snapshot is applied only when it is newer
// than the last one applied, so that late stream messages and polls racing
// the stream never move a counter backwards. A daemon restart is let through
// by Forget() (ExporterGetStatus reports a new startTimeMs), by a newer
// timestamp (a sequence that restarted), or, for a daemon whose clock or
// sequence went back without saying so, once nothing but older snapshots has
// come for stale-after. Stamps are compared as sent, whatever our clock
// says: a daemon whose clock runs ahead keeps its order. A clock that ran
// ahead and was corrected (older by its stamp, newer by its sequence, after
// a stamp in our future) holds nothing back.
//
// Pure: the clocks are arguments. Not thread-safe; XdmClient calls it under
// its ingest lock.
class SnapshotOrder {
 public:
  enum class [[nodiscard]] Verdict{
      kApply,       // newer than anything applied: store it
      kSame,        // the snapshot already stored, within its interval: fresh, nothing to store
      kRepeat,      // the snapshot already stored, past its interval: a daemon re-serving it
      kOutOfOrder,  // older than the last one applied
      kExpired,     // sampled longer than stale-after ago
  };
  static constexpr int kVerdicts = 5;

  struct Clocks {
    int64_t wall_ms;                            // Unix milliseconds, like timestampMs
    std::chrono::steady_clock::time_point now;  // when the message is judged
    std::chrono::milliseconds stale_after;      // series expire this long after their data
    std::chrono::milliseconds fresh_window;     // one interval plus jitter
  };

  // Judges one message and, on kApply, remembers it as the last applied.
  Verdict Judge(int64_t timestamp_ms, uint64_t sequence, const Clocks& clocks);
  // The daemon restarted: the next stamped snapshot is applied whatever its
  // stamps.
  void Forget() { have_ = false; }

 private:
  bool have_ = false;
  int64_t raw_timestamp_ms_ = 0;  // as sent: ordered by, and the same snapshot known again
  uint64_t sequence_ = 0;
  std::chrono::steady_clock::time_point applied_{};  // when the last one was applied
};

const char* VerdictName(SnapshotOrder::Verdict v);

}  // namespace xpu::upstream
