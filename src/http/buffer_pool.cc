#include "http/buffer_pool.h"

#include <algorithm>

#include "http/gzip.h"

namespace xpu::http {

std::string BufferPool::Take(size_t room) {
  std::string out;
  {
    MutexLock lock(mu_);
    auto most = std::max_element(
        kept_.begin(), kept_.end(),
        [](const std::string& a, const std::string& b) { return a.capacity() < b.capacity(); });
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

void BufferPool::Give(std::string buf) {
  // One with no room of its own (a moved-from or never-filled one) would
  // only take a place.
  if (buf.capacity() > max_capacity_ || buf.capacity() < kMinCapacity) return;
  buf.clear();
  MutexLock lock(mu_);
  if (kept_.size() < keep_) kept_.push_back(std::move(buf));
}

size_t BufferPool::kept() const {
  MutexLock lock(mu_);
  return kept_.size();
}

BufferPool& BufferPool::Batches() {
  // GzipPipe's batches in flight (kDepth queued, one compressing, the
  // sink's): 320 KiB each as a page fills them, 1.25 MiB kept.
  static BufferPool* pool = new BufferPool(GzipPipe::kDepth + 2, size_t{1} << 20);
  return *pool;
}

BufferPool& BufferPool::Pages() {
  static BufferPool* pool = new BufferPool(1, size_t{32} * 1024 * 1024);
  return *pool;
}

}  // namespace xpu::http
