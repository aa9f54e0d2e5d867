#pragma once
// Shared by the libFuzzer harnesses (tests/fuzz, docs/reliability.md).

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

namespace xpu::fuzz {

inline std::string AsString(const uint8_t* data, size_t size) {
  return std::string(reinterpret_cast<const char*>(data), size);
}

// Checks a rendered /metrics page: every line is a comment or starts with a
// metric name of ours, so no label value broke a line. Aborts otherwise
// (libFuzzer records the input).
inline void CheckExposition(std::string_view page) {
  size_t start = 0;
  while (start < page.size()) {
    size_t nl = page.find('\n', start);
    if (nl == std::string_view::npos) abort();  // the page ends with a newline
    std::string_view line = page.substr(start, nl - start);
    if (!line.empty() && line[0] != '#' && line.rfind("xpu_", 0) != 0) abort();
    start = nl + 1;
  }
}

}  // namespace xpu::fuzz
