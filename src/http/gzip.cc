#include "http/gzip.h"

#include "common/mutex.h"
#include "common/worker.h"
#include "http/buffer_pool.h"

namespace xpu::http {

// ISA-L's igzip at level 1 (Debian's libisal2): several times zlib's speed at
// level 1 for a page of metrics, as one ordinary gzip member that every
// client reads (docs/benchmarks.md, "gzip").
BasicBufferPool<GzipStream::LevelBuffer>& GzipStream::Levels() {
  // Scrapes rarely compress at once: two kept. Never destroyed: a stream
  // may end on a thread that outlives static destruction.
  static auto* pool = new BasicBufferPool<LevelBuffer>(2, ISAL_DEF_LVL1_DEFAULT);
  return *pool;
}

size_t GzipStream::LevelBuffersKept() { return Levels().kept(); }

GzipStream::GzipStream() : level_buf_(Levels().Take(ISAL_DEF_LVL1_DEFAULT)) {
  isal_deflate_init(&zs_);
  zs_.level = 1;
  zs_.level_buf = level_buf_.bytes.get();
  zs_.level_buf_size = ISAL_DEF_LVL1_DEFAULT;
  zs_.gzip_flag = IGZIP_GZIP;
  zs_.flush = NO_FLUSH;
}

GzipStream::~GzipStream() { Levels().Give(std::move(level_buf_)); }

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

GzipPipe::~GzipPipe() {
  if (helper_.joinable()) {
    {
      MutexLock lock(mu_);
      // Abandoned (the render threw): the batches still queued go back to
      // the pool with the emptied ones, not freed.
      for (auto& [batch, last] : queue_) {
        batch.clear();
        spare_.push_back(std::move(batch));
      }
      queue_.clear();
      queue_.emplace_back(std::string(), true);  // ends the helper
    }
    cv_.NotifyAll();
    helper_.join();
  }
  MutexLock lock(mu_);
  for (std::string& s : spare_) BufferPool::Batches().Give(std::move(s));
}

void GzipPipe::Take(std::string* buf, bool last) {
  if (!helper_.joinable() && last) {
    std::string page = std::exchange(*buf, std::string());
    Inline(page);  // the whole page in one piece
    BufferPool::Batches().Give(std::move(page));
    return;
  }
  // The spare is taken once the batch is queued: at most kDepth wait, one
  // is compressed and one is the caller's, so kDepth + 2 buffers serve a
  // page of any size (and BufferPool::Batches keeps that many). After the
  // last piece the caller needs none.
  Push(std::exchange(*buf, std::string()), last);
  if (!last) *buf = Spare();
}

void GzipPipe::Inline(std::string_view page) {
  const bool ok = gz_.Write(page, true, out_);
  MutexLock lock(mu_);
  ok_ = ok_ && ok;
}

std::string GzipPipe::Spare() {
  {
    MutexLock lock(mu_);
    if (!spare_.empty()) {
      std::string s = std::move(spare_.back());
      spare_.pop_back();
      s.reserve(kBatch + kBatch / 4);
      return s;
    }
  }
  return BufferPool::Batches().Take(kBatch + kBatch / 4);
}

void GzipPipe::Push(std::string batch, bool last) {
  if (!helper_.joinable())
    helper_ = std::thread([this] {
      NameThisThread("gzip");
      Loop();
    });
  MutexLock lock(mu_);
  while (queue_.size() >= kDepth) cv_.Wait(lock);
  queue_.emplace_back(std::move(batch), last);
  lock.Unlock();
  cv_.NotifyAll();
}

bool GzipPipe::Finish() {
  if (helper_.joinable()) helper_.join();
  MutexLock lock(mu_);
  return ok_;
}

void GzipPipe::Loop() {
  for (;;) {
    std::pair<std::string, bool> item;
    {
      MutexLock lock(mu_);
      while (queue_.empty()) cv_.Wait(lock);
      item = std::move(queue_.front());
      queue_.pop_front();
    }
    cv_.NotifyAll();  // room for the renderer
    bool ok = true;
    try {
      ok = gz_.Write(item.first, item.second, out_);
    } catch (const std::bad_alloc&) {  // the page grew past memory: this scrape fails
      ok = false;
    }
    MutexLock lock(mu_);
    ok_ = ok_ && ok;
    item.first.clear();
    spare_.push_back(std::move(item.first));
    if (item.second) return;
  }
}

}  // namespace xpu::http
