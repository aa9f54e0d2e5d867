#pragma once

#include <isa-l/igzip_lib.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "common/mutex.h"
#include "http/buffer_pool.h"

namespace xpu::http {

// gzip-compresses `in` (ISA-L igzip, level 1) into one gzip member; empty on
// failure. Any thread.
std::string Gzip(std::string_view in);

// One gzip member written from pieces (a page rendered in pieces): one
// igzip level 1 stream across them, so it inflates to the pieces joined and
// compresses as well as Gzip() of the whole. Owns its stream state (~300 KiB
// of hash tables, taken from and given back to a pool of two, so that
// sixteen HTTP workers do not each keep one, nor fault a fresh one in at each
// small scrape); one thread.
class GzipStream {
 public:
  GzipStream();
  ~GzipStream();
  GzipStream(const GzipStream&) = delete;
  GzipStream& operator=(const GzipStream&) = delete;

  // Compresses `piece`, appending what comes out to `out`; `last` ends the
  // member. False on a compressor error (then `out` is not a valid member).
  bool Write(std::string_view piece, bool last, std::string* out);
  // How many level buffers are kept for the next stream (at most two: an HA
  // pair's scrapes at once).
  static size_t LevelBuffersKept();

 private:
  // igzip's level 1 hash tables: a fixed size, never cleared (igzip sets
  // them up at each stream's start). The shape BasicBufferPool keeps.
  struct LevelBuffer {
    std::unique_ptr<uint8_t[]> bytes;
    size_t capacity() const { return bytes ? ISAL_DEF_LVL1_DEFAULT : 0; }
    void reserve(size_t) {
      if (!bytes) bytes = std::make_unique_for_overwrite<uint8_t[]>(ISAL_DEF_LVL1_DEFAULT);
    }
    void clear() {}
  };
  static BasicBufferPool<LevelBuffer>& Levels();

  LevelBuffer level_buf_;  // from Levels()
  isal_zstream zs_;
};

// One gzip member compressed on a helper thread while the caller renders the
// next pieces, so that rendering and compressing a large page overlap on two
// cores. A page of one batch is compressed inline, without a thread. At most
// kDepth batches wait (then Take waits). Its batches are kept for the next
// page once this one is done (BufferPool::Batches). Take from one thread,
// then Finish.
class GzipPipe {
 public:
  static constexpr size_t kBatch = size_t{256} * 1024;  // bytes handed over at a time
  static constexpr size_t kDepth = 2;                   // batches waiting at most
  explicit GzipPipe(std::string* out) : out_(out) {}
  ~GzipPipe();
  GzipPipe(const GzipPipe&) = delete;
  GzipPipe& operator=(const GzipPipe&) = delete;

  // Queues (or, for a one-piece page, compresses) the contents of `*buf`
  // and leaves it an empty buffer with room for a batch (after the last
  // piece, an empty one without room); `last` ends the page. Pieces of
  // about kBatch keep the two threads' hand-overs few.
  void Take(std::string* buf, bool last);
  // Waits until every piece is compressed into `out`; false on a compressor
  // error. Call after the last Take.
  bool Finish();
  // An empty buffer with room for a batch: one this pipe emptied, or one
  // kept from an earlier page (BufferPool::Batches), else a new one (Take
  // puts one in the caller's buffer; tests take their first from here).
  std::string Spare();

 private:
  void Loop();                         // the helper thread
  void Inline(std::string_view page);  // the whole page, on the caller's thread
  void Push(std::string batch, bool last);

  std::string* const out_;  // written by the helper while it runs
  GzipStream gz_;
  Mutex mu_;
  CondVar cv_;
  std::deque<std::pair<std::string, bool>> queue_ XPU_GUARDED_BY(mu_);  // (batch, last)
  std::vector<std::string> spare_ XPU_GUARDED_BY(mu_);                  // emptied pieces to reuse
  bool ok_ XPU_GUARDED_BY(mu_) = true;
  std::thread helper_;
};

}  // namespace xpu::http
