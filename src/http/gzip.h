#pragma once

#include <isa-l/igzip_lib.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace xpu::http {

// gzip-compresses `in` (ISA-L igzip, level 1) into one gzip member; empty on
// failure. Any thread.
std::string Gzip(std::string_view in);

// One gzip member written from pieces (a page rendered in pieces): one
// igzip level 1 stream across them, so it inflates to the pieces joined and
// compresses as well as Gzip() of the whole. Owns its stream state (~300 KiB
// of hash tables, taken from and given back to a pool of two, so that
// sixteen HTTP workers do not each keep one); one thread.
class GzipStream {
 public:
  GzipStream();
  ~GzipStream();
  GzipStream(const GzipStream&) = delete;
  GzipStream& operator=(const GzipStream&) = delete;

  // Compresses `piece`, appending what comes out to `out`; `last` ends the
  // member. False on a compressor error (then `out` is not a valid member).
  bool Write(std::string_view piece, bool last, std::string* out);

 private:
  std::unique_ptr<uint8_t[]> level_buf_;  // from a small process-wide pool
  isal_zstream zs_;
};

}  // namespace xpu::http
