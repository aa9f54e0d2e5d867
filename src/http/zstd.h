#pragma once

#include <memory>
#include <string>
#include <string_view>

namespace xpu::http {

// zstd for /metrics (Accept-Encoding: zstd), with Debian's libzstd. The
// level is 1 by measurement (docs/benchmarks.md, "zstd"): on a 100k-series
// scrape it sends 12% (values changing every second) to 55% (a fresh page)
// fewer bytes than igzip for 2-2.5 times its CPU; level 3 took a fifth more
// time for 2% fewer bytes, level 6 three times the time.
inline constexpr int kZstdLevel = 1;

// One zstd frame of `in`; empty on failure (not expected).
std::string Zstd(std::string_view in, int level = kZstdLevel);

// Compresses a page given piece by piece into one frame appended to `out`,
// so the plain page is never held whole. Owns a ZSTD_CCtx. Not thread-safe:
// one writer.
class ZstdStream {
 public:
  explicit ZstdStream(std::string* out, int level = kZstdLevel);
  ~ZstdStream();
  ZstdStream(const ZstdStream&) = delete;
  ZstdStream& operator=(const ZstdStream&) = delete;

  bool Write(std::string_view piece);
  // Ends the frame; false if any step failed (then `out` is not a frame).
  bool Finish();

 private:
  bool Run(std::string_view piece, int mode);
  struct Ctx;
  std::unique_ptr<Ctx> ctx_;
  std::string* out_;
  bool ok_ = true;
};

}  // namespace xpu::http
