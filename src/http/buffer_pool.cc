#include "http/buffer_pool.h"

#include "http/gzip.h"

namespace xpu::http {

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
