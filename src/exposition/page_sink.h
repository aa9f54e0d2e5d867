#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

#include "http/buffer_pool.h"

namespace xpu::exposition {

// Where a rendered page goes, in pieces, so that a scrape never holds the
// whole page: writers append to buf() and call Check() between series; once
// the buffer holds `piece` bytes it goes to the consumer (a compressor, a
// connection) and is emptied. Finish() passes the rest with last = true.
// Once the consumer refuses a piece (the client went away) later pieces are
// dropped; the render still runs to its end. One render, one thread.
class PageSink {
 public:
  // Returns false to refuse the piece (and every later one).
  using Consumer = std::function<bool(std::string_view piece, bool last)>;
  static constexpr size_t kPiece = size_t{64} * 1024;

  // `lender`: where its buffer comes from and goes back to when the sink
  // is destroyed (a page rendered or thrown), so that a large page's
  // memory is not faulted in anew at each scrape; none: its own.
  PageSink(Consumer consumer, size_t piece = kPiece, http::BufferPool* lender = nullptr)
      : consumer_(std::move(consumer)), lender_(lender), piece_(piece) {
    Borrow();
  }
  // A consumer that takes the buffer itself (swaps its contents out, no
  // copy, and may put another in its place); whatever it leaves in it is
  // dropped.
  using Taker = std::function<bool(std::string* buf, bool last)>;
  PageSink(Taker taker, size_t piece, http::BufferPool* lender = nullptr)
      : taker_(std::move(taker)), lender_(lender), piece_(piece) {
    Borrow();
  }
  // The whole page, appended to `*whole` (tests, benchmarks): no pieces.
  explicit PageSink(std::string* whole) : buf_(whole), piece_(static_cast<size_t>(-1)) {}
  ~PageSink() {
    if (lender_ != nullptr) lender_->Give(std::move(own_));
  }
  PageSink(const PageSink&) = delete;
  PageSink& operator=(const PageSink&) = delete;

  std::string* buf() { return buf_; }
  void Check() {
    if (buf_->size() >= piece_) Pass(false);
  }
  // Passes what is left (possibly nothing) as the last piece; whether the
  // consumer took every piece.
  bool Finish() {
    if (consumer_ || taker_) Pass(true);
    return ok_;
  }
  bool ok() const { return ok_; }

 private:
  void Borrow() {
    const size_t room = piece_ + piece_ / 4;
    if (lender_ != nullptr)
      own_ = lender_->Take(room);
    else
      own_.reserve(room);
  }
  void Pass(bool last) {
    if (ok_) ok_ = taker_ ? taker_(buf_, last) : consumer_(*buf_, last);
    buf_->clear();
  }
  Consumer consumer_;
  Taker taker_;
  http::BufferPool* lender_ = nullptr;
  std::string own_;
  std::string* buf_ = &own_;
  size_t piece_;
  bool ok_ = true;
};

}  // namespace xpu::exposition
