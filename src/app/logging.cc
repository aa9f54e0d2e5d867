#include "app/logging.h"

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <memory>
#include <string_view>

namespace xpu::app {
namespace {

// The message as a quoted, escaped string: valid in logfmt and in JSON.
class QuotedMessage : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&,
              spdlog::memory_buf_t& dest) override {
    dest.push_back('"');
    for (char c : std::string_view(msg.payload.data(), msg.payload.size())) {
      switch (c) {
        case '"':
          dest.append(std::string_view("\\\""));
          break;
        case '\\':
          dest.append(std::string_view("\\\\"));
          break;
        case '\n':
          dest.append(std::string_view("\\n"));
          break;
        case '\t':
          dest.append(std::string_view("\\t"));
          break;
        default:
          if (static_cast<unsigned char>(c) < 0x20) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\u%04x", c);
            dest.append(std::string_view(buf));
          } else {
            dest.push_back(c);
          }
      }
    }
    dest.push_back('"');
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return spdlog::details::make_unique<QuotedMessage>();
  }
};

}  // namespace

void SetupLogging(const std::string& level, const std::string& format) {
  auto logger = std::make_shared<spdlog::logger>("xpu-exporter",
                                                 std::make_shared<spdlog::sinks::stderr_sink_mt>());
  auto formatter = std::make_unique<spdlog::pattern_formatter>(spdlog::pattern_time_type::utc);
  formatter->add_flag<QuotedMessage>('*');
  if (format == "json") {
    formatter->set_pattern(R"({"ts":"%Y-%m-%dT%H:%M:%S.%eZ","level":"%l","msg":%*})");
  } else {
    formatter->set_pattern("ts=%Y-%m-%dT%H:%M:%S.%eZ level=%l msg=%*");
  }
  logger->set_formatter(std::move(formatter));
  spdlog::set_default_logger(logger);
  spdlog::set_level(spdlog::level::from_str(level));
  spdlog::flush_on(spdlog::level::info);
}

}  // namespace xpu::app
