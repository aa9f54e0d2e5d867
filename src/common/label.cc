#include "common/label.h"

#include <algorithm>
#include <string_view>

namespace xpu {

bool SanitizeLabelValue(std::string* v, size_t max_bytes) {
  // Most values are short ASCII (a link's index, a model name): valid as
  // they are, told without building the copy below.
  if (v->size() <= max_bytes && std::all_of(v->begin(), v->end(), [](char c) {
        return static_cast<unsigned char>(c) < 0x80;
      }))
    return false;
  std::string out;
  bool changed = false;
  const std::string& s = *v;
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    size_t len = c < 0x80           ? 1
                 : (c >> 5) == 0x6  ? 2
                 : (c >> 4) == 0xe  ? 3
                 : (c >> 3) == 0x1e ? 4
                                    : 0;
    bool valid = len > 0 && i + len <= s.size();
    for (size_t k = 1; valid && k < len; ++k)
      valid = (static_cast<unsigned char>(s[i + k]) & 0xc0) == 0x80;
    if (valid && len == 2 && c < 0xc2) valid = false;  // overlong
    if (valid && len == 3) {
      const unsigned char c1 = static_cast<unsigned char>(s[i + 1]);
      if ((c == 0xe0 && c1 < 0xa0) || (c == 0xed && c1 >= 0xa0))
        valid = false;  // overlong, surrogate
    }
    if (valid && len == 4) {
      const unsigned char c1 = static_cast<unsigned char>(s[i + 1]);
      if ((c == 0xf0 && c1 < 0x90) || c > 0xf4 || (c == 0xf4 && c1 >= 0x90)) valid = false;
    }
    const std::string_view piece = valid ? std::string_view(s).substr(i, len) : "\xEF\xBF\xBD";
    if (!valid) {
      changed = true;
      len = 1;
    }
    if (out.size() + piece.size() > max_bytes) {
      changed = true;
      break;
    }
    out.append(piece);
    i += len;
  }
  if (changed) *v = std::move(out);
  return changed;
}

}  // namespace xpu
