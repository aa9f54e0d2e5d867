#include "http/zstd.h"

#include <zstd.h>

namespace xpu::http {

struct ZstdStream::Ctx {
  ZSTD_CCtx* cctx = ZSTD_createCCtx();
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
    // Room for what this step may produce, at the end of `out`.
    const size_t room = ZSTD_CStreamOutSize();
    const size_t at = out_->size();
    out_->resize(at + room);
    ZSTD_outBuffer out{out_->data() + at, room, 0};
    const size_t left =
        ZSTD_compressStream2(ctx_->cctx, &out, &in, static_cast<ZSTD_EndDirective>(mode));
    out_->resize(at + out.pos);
    if (ZSTD_isError(left)) return ok_ = false;
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
