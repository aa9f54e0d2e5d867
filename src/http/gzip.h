#pragma once

#include <string>

namespace xpu::http {

// gzip-compresses `in` (ISA-L igzip, level 1) into one gzip member; empty on
// failure. Any thread.
std::string Gzip(const std::string& in);

}  // namespace xpu::http
