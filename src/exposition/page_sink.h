#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

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

  PageSink(Consumer consumer, size_t piece = kPiece, std::string first = {})
      : consumer_(std::move(consumer)), own_(std::move(first)), piece_(piece) {
    own_.reserve(piece_ + piece_ / 4);
  }
  // A consumer that takes the buffer itself (swaps its contents out, no
  // copy); whatever it leaves in it is dropped.
  using Taker = std::function<bool(std::string* buf, bool last)>;
  // `first`: the buffer to begin with (one kept from an earlier page).
  PageSink(Taker taker, size_t piece, std::string first = {})
      : taker_(std::move(taker)), own_(std::move(first)), piece_(piece) {
    own_.reserve(piece_ + piece_ / 4);
  }
  // The whole page, appended to `*whole` (tests, benchmarks): no pieces.
  explicit PageSink(std::string* whole) : buf_(whole), piece_(static_cast<size_t>(-1)) {}
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
  // The buffer it holds, emptied, for another page's use (after Finish).
  std::string TakeBuffer() {
    std::string b = std::move(own_);
    own_.clear();
    b.clear();
    return b;
  }

 private:
  void Pass(bool last) {
    if (ok_) ok_ = taker_ ? taker_(buf_, last) : consumer_(*buf_, last);
    buf_->clear();
  }
  Consumer consumer_;
  Taker taker_;
  std::string own_;
  std::string* buf_ = &own_;
  size_t piece_;
  bool ok_ = true;
};

}  // namespace xpu::exposition
