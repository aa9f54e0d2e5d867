#pragma once

#include <algorithm>
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "common/mutex.h"

namespace xpu::http {

// Large buffers kept for reuse from one scrape to the next. A compressed
// scrape of a large page fills some megabytes of buffers (its batches and
// its compressed page); allocated afresh at each scrape, their memory is
// handed back by glibc (and by the malloc_trim after a large ingest) and
// every page of it faulted in again: about 900 page faults a scrape of the
// 100k page, a third of its CPU on a VM (docs/benchmarks.md). Keeps at most
// `keep` buffers of at most `max_capacity` each; their contents are
// dropped, their capacity kept. Thread-safe; Give never throws.
//
// `Buf` is a buffer with capacity(), reserve(n) and clear() (std::string;
// gzip.cc's fixed-size level buffers).
template <class Buf>
class BasicBufferPool {
 public:
  static constexpr size_t kMinCapacity = 4096;       // smaller ones are not kept
  static constexpr size_t kSlack = size_t{1} << 20;  // see Take
  BasicBufferPool(size_t keep, size_t max_capacity) : keep_(keep), max_capacity_(max_capacity) {
    kept_.reserve(keep_);  // Give (in destructors and deleters) then never allocates
  }
  BasicBufferPool(const BasicBufferPool&) = delete;
  BasicBufferPool& operator=(const BasicBufferPool&) = delete;

  // An empty buffer with room for at least `room` bytes: the kept one of
  // most room, else a new one. A kept one of more than 4 x `room` +
  // kSlack is freed instead (a page that shrank for good).
  Buf Take(size_t room) {
    Buf out;
    {
      MutexLock lock(mu_);
      auto most = std::max_element(kept_.begin(), kept_.end(), [](const Buf& a, const Buf& b) {
        return a.capacity() < b.capacity();
      });
      if (most != kept_.end()) {
        // Far more room than asked (the page shrank: devices gone, a series
        // cap lowered) is let go, not kept for good.
        if (most->capacity() <= 4 * room + kSlack) out = std::move(*most);
        kept_.erase(most);
      }
    }
    out.reserve(room);
    return out;
  }
  // Keeps `buf`, emptied, while fewer than `keep` are kept and its room is
  // between kMinCapacity and `max_capacity`; else frees it.
  void Give(Buf buf) {
    // One with no room of its own (a moved-from or never-filled one) would
    // only take a place.
    if (buf.capacity() > max_capacity_ || buf.capacity() < kMinCapacity) return;
    buf.clear();
    MutexLock lock(mu_);
    if (kept_.size() < keep_) kept_.push_back(std::move(buf));
  }
  size_t kept() const {
    MutexLock lock(mu_);
    return kept_.size();
  }

 private:
  const size_t keep_;
  const size_t max_capacity_;
  mutable Mutex mu_;
  std::vector<Buf> kept_ XPU_GUARDED_BY(mu_);
};

// The process's pools of strings (never destroyed: a page may be let go on
// a thread that outlives static destruction).
class BufferPool : public BasicBufferPool<std::string> {
 public:
  using BasicBufferPool::BasicBufferPool;
  // GzipPipe's pieces in flight and the page sink's buffer (kDepth + 2,
  // 1 MiB each at most; 320 KiB each as a page fills them).
  static BufferPool& Batches();
  // The last compressed page's buffer (one: an HA pair's scrapes share one
  // page; 32 MiB at most). A scrape of another format or coding, its size
  // not yet known, asks for little room, and lets a kept page far larger go
  // once.
  static BufferPool& Pages();
};

}  // namespace xpu::http
