#include "upstream/snapshot_order.h"

namespace xpu::upstream {

SnapshotOrder::Verdict SnapshotOrder::Judge(int64_t ts, uint64_t seq, const Clocks& c) {
  // An unstamped message has no order to keep: it is applied as it comes.
  if (ts == 0 && seq == 0) return Verdict::kApply;
  // Before 1970, or sampled longer than stale-after ago.
  if (ts < 0 || (ts > 0 && c.wall_ms - ts > c.stale_after.count())) return Verdict::kExpired;
  if (have_) {
    if (ts == raw_timestamp_ms_ && seq == sequence_)
      return c.now - applied_ < c.fresh_window ? Verdict::kSame : Verdict::kRepeat;
    // Raw stamps against raw stamps, timestamps first; the sequence breaks
    // ties, and orders alone when either message has no timestamp. A clamp
    // of a future stamp here would let a late older snapshot from a daemon
    // whose clock runs ahead compare as newer.
    bool older = ts != 0 && raw_timestamp_ms_ != 0
                     ? ts < raw_timestamp_ms_ || (ts == raw_timestamp_ms_ && seq < sequence_)
                     : seq < sequence_;
    // The last one was stamped in our future and this one is older by its
    // stamp but newer by the daemon's own count: its clock was corrected,
    // not a late message (which is older by both).
    const int64_t ahead_limit = c.wall_ms + c.fresh_window.count();
    if (older && ts != 0 && raw_timestamp_ms_ > ahead_limit && seq > sequence_ && sequence_ != 0)
      older = false;
    // And the other way: stamped in our future, older by the daemon's
    // count: a late message from before the correction, not a newer one.
    if (!older && ts > ahead_limit && seq != 0 && sequence_ != 0 && seq < sequence_) older = true;
    // Nothing but older snapshots for stale-after: the daemon's own order
    // went back (a clock step, a restart not seen). Its new order is taken
    // rather than refusing it for good.
    if (older && c.now - applied_ < c.stale_after) return Verdict::kOutOfOrder;
  }
  have_ = true;
  raw_timestamp_ms_ = ts;
  sequence_ = seq;
  applied_ = c.now;
  return Verdict::kApply;
}

const char* VerdictName(SnapshotOrder::Verdict v) {
  switch (v) {
    case SnapshotOrder::Verdict::kApply:
      return "apply";
    case SnapshotOrder::Verdict::kSame:
      return "same";
    case SnapshotOrder::Verdict::kRepeat:
      return "repeat";
    case SnapshotOrder::Verdict::kOutOfOrder:
      return "out_of_order";
    case SnapshotOrder::Verdict::kExpired:
      return "expired";
  }
  return "apply";
}

}  // namespace xpu::upstream
