#include "http/gzip.h"

#include <isa-l/igzip_lib.h>

#include <cstdint>
#include <vector>

namespace xpu::http {

// ISA-L's igzip at level 1 (Debian's libisal2): several times zlib's speed at
// level 1 for a page of metrics, as one ordinary gzip member that every
// client reads (docs/benchmarks.md, "gzip").
std::string Gzip(const std::string& in) {
  // The level's hash tables, kept per (civetweb worker) thread.
  thread_local std::vector<uint8_t> level_buf(ISAL_DEF_LVL1_DEFAULT);
  isal_zstream zs;
  isal_deflate_init(&zs);
  zs.level = 1;
  zs.level_buf = level_buf.data();
  zs.level_buf_size = static_cast<uint32_t>(level_buf.size());
  zs.gzip_flag = IGZIP_GZIP;
  zs.end_of_stream = 1;
  zs.flush = NO_FLUSH;
  if (in.size() > UINT32_MAX / 2) return {};
  zs.next_in = reinterpret_cast<uint8_t*>(const_cast<char*>(in.data()));
  zs.avail_in = static_cast<uint32_t>(in.size());
  // A page of metrics shrinks about 20-fold: start at a quarter, so a scrape
  // does not fault in pages it never writes, and grow while it is short
  // (incompressible input ends a little larger than it began).
  std::string out(in.size() / 4 + 4096, '\0');
  size_t done = 0;
  for (;;) {
    zs.next_out = reinterpret_cast<uint8_t*>(out.data()) + done;
    zs.avail_out = static_cast<uint32_t>(out.size() - done);
    if (isal_deflate(&zs) != COMP_OK) return {};
    done = out.size() - zs.avail_out;
    if (zs.internal_state.state == ZSTATE_END) break;
    if (zs.avail_out != 0) return {};  // stopped without finishing or filling: not expected
    out.resize(out.size() * 2);
  }
  out.resize(done);
  return out;
}

}  // namespace xpu::http
