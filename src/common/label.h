#pragma once

#include <cstddef>
#include <string>

namespace xpu {

// Makes `v` a valid Prometheus label value: replaces invalid UTF-8 sequences
// with U+FFFD and cuts the value at `max_bytes` (on a character boundary).
// Returns true if it changed anything. Every string from outside that
// becomes a label passes through here.
bool SanitizeLabelValue(std::string* v, size_t max_bytes = 1024);

}  // namespace xpu
