#include "http/gzip.h"

namespace xpu::http {

// ISA-L's igzip at level 1 (Debian's libisal2): several times zlib's speed at
// level 1 for a page of metrics, as one ordinary gzip member that every
// client reads (docs/benchmarks.md, "gzip").
namespace {
// The level's hash tables, kept per (civetweb worker) thread: a fresh
// 276 KiB buffer per scrape would cost page faults at every small scrape.
thread_local std::vector<uint8_t> thread_level_buf;
thread_local bool thread_level_buf_taken = false;
}  // namespace

GzipStream::GzipStream() {
  if (thread_level_buf_taken) {
    level_buf_ = &own_;
  } else {
    thread_level_buf_taken = true;
    level_buf_ = &thread_level_buf;
  }
  level_buf_->resize(ISAL_DEF_LVL1_DEFAULT);
  isal_deflate_init(&zs_);
  zs_.level = 1;
  zs_.level_buf = level_buf_->data();
  zs_.level_buf_size = static_cast<uint32_t>(level_buf_->size());
  zs_.gzip_flag = IGZIP_GZIP;
  zs_.flush = NO_FLUSH;
}

GzipStream::~GzipStream() {
  if (level_buf_ == &thread_level_buf) thread_level_buf_taken = false;
}

bool GzipStream::Write(std::string_view piece, bool last, std::string* out) {
  if (piece.size() > UINT32_MAX / 2) return false;
  zs_.end_of_stream = last ? 1 : 0;
  zs_.next_in = reinterpret_cast<uint8_t*>(const_cast<char*>(piece.data()));
  zs_.avail_in = static_cast<uint32_t>(piece.size());
  // A page of metrics shrinks about 20-fold: room for a quarter of the
  // piece, grown while igzip fills it (incompressible input ends a little
  // larger than it began).
  size_t done = out->size();
  out->resize(done + piece.size() / 4 + 4096);
  for (;;) {
    zs_.next_out = reinterpret_cast<uint8_t*>(out->data()) + done;
    zs_.avail_out = static_cast<uint32_t>(out->size() - done);
    if (isal_deflate(&zs_) != COMP_OK) return false;
    done = out->size() - zs_.avail_out;
    const bool finished = last ? zs_.internal_state.state == ZSTATE_END : zs_.avail_in == 0;
    if (finished && zs_.avail_out != 0) break;
    if (zs_.avail_out != 0 && zs_.avail_in != 0) return false;  // stalled: not expected
    out->resize(out->size() + out->size() / 2 + 4096);
  }
  out->resize(done);
  return true;
}

std::string Gzip(std::string_view in) {
  std::string out;
  out.reserve(in.size() / 4 + 4096);
  GzipStream z;
  if (!z.Write(in, true, &out)) return {};
  return out;
}

}  // namespace xpu::http
