#include "http/zstd.h"

#include <zstd.h>

#include <vector>

namespace xpu::http {

struct ZstdStream::Ctx {
  ZSTD_CCtx* cctx = ZSTD_createCCtx();
  std::vector<char> buf = std::vector<char>(ZSTD_CStreamOutSize());  // one step's output
  ~Ctx() { ZSTD_freeCCtx(cctx); }
};

ZstdStream::ZstdStream(std::string* out, int level) : ctx_(std::make_unique<Ctx>()), out_(out) {
  ok_ = ctx_->cctx != nullptr &&
        !ZSTD_isError(ZSTD_CCtx_setParameter(ctx_->cctx, ZSTD_c_compressionLevel, level)) &&
        !ZSTD_isError(ZSTD_CCtx_setParameter(ctx_->cctx, ZSTD_c_checksumFlag, 1));
}

ZstdStream::~ZstdStream() = default;

bool ZstdStream::Run(std::string_view piece, int mode) {
  if (!ok_) return false;
  ZSTD_inBuffer in{piece.data(), piece.size(), 0};
  for (;;) {
    ZSTD_outBuffer out{ctx_->buf.data(), ctx_->buf.size(), 0};
    const size_t left =
        ZSTD_compressStream2(ctx_->cctx, &out, &in, static_cast<ZSTD_EndDirective>(mode));
    if (ZSTD_isError(left)) return ok_ = false;
    out_->append(ctx_->buf.data(), out.pos);
    const bool done = mode == ZSTD_e_end ? left == 0 : in.pos == in.size;
    if (done) return true;
  }
}

bool ZstdStream::Write(std::string_view piece) { return Run(piece, ZSTD_e_continue); }

bool ZstdStream::Finish() { return Run({}, ZSTD_e_end); }

std::string Zstd(std::string_view in, int level) {
  std::string out;
  ZstdStream z(&out, level);
  if (!z.Write(in) || !z.Finish()) return {};
  return out;
}

}  // namespace xpu::http
