#pragma once

#include <string>

namespace xpu::app {

// Sets up spdlog on stderr: `level` debug|info|warn|error, `format`
// logfmt|json, UTC timestamps, the message quoted and escaped.
void SetupLogging(const std::string& level, const std::string& format);

}  // namespace xpu::app
