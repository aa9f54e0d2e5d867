#pragma once

#include <string>

namespace xpu::http {

// gzip-compresses `in` (fast level); empty on failure.
std::string Gzip(const std::string& in);

}  // namespace xpu::http
