#include "app/config.h"

#include <iostream>

#include <CLI/CLI.hpp>
#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include "common/duration.h"
#include "http/web_server.h"
#include "version.h"

namespace xpu::app {
namespace {

// CLI11 validator: a Prometheus duration (500ms, 1s, 2m), positive.
struct DurationValidator : public CLI::Validator {
  DurationValidator() {
    name_ = "DURATION";
    func_ = [](const std::string& s) -> std::string {
      auto d = ParseDuration(s);
      if (!d || d->count() <= 0) return "'" + s + "' is not a positive duration (e.g. 500ms, 1s, 2m)";
      return "";
    };
  }
};

// logfmt and JSON need the message escaped: custom spdlog flags.
class QuotedMessage : public spdlog::custom_flag_formatter {
 public:
  explicit QuotedMessage(bool json) : json_(json) {}
  void format(const spdlog::details::log_msg& msg, const std::tm&,
              spdlog::memory_buf_t& dest) override {
    dest.push_back('"');
    for (char c : std::string_view(msg.payload.data(), msg.payload.size())) {
      switch (c) {
        case '"': dest.append(std::string_view("\\\"")); break;
        case '\\': dest.append(std::string_view("\\\\")); break;
        case '\n': dest.append(std::string_view("\\n")); break;
        case '\t': dest.append(std::string_view("\\t")); break;
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
    return spdlog::details::make_unique<QuotedMessage>(json_);
  }

 private:
  bool json_;
};

}  // namespace

int ParseFlags(int argc, char** argv, Config* cfg) {
  CLI::App app{"xpu-exporter: Prometheus exporter for AI accelerators (Lingjun Runtime Kit / XDM)",
               "xpu-exporter"};
  app.set_version_flag("--version", std::string("xpu-exporter ") + kVersion);
  DurationValidator duration;
  std::string interval = "1s", stale_after, backoff_initial = "1s", backoff_max = "30s";
  cfg->listen_addresses.clear();
  app.add_option("--web.listen-address", cfg->listen_addresses,
                 "Address to listen on, repeatable (default :9445)");
  app.add_option("--web.telemetry-path", cfg->telemetry_path, "Path under which to expose metrics")
      ->capture_default_str();
  app.add_option("--web.max-connections", cfg->max_connections,
                 "Maximum concurrent HTTP requests")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  app.add_option("--xdm.endpoint", cfg->xdm_endpoint, "XDM gRPC endpoint (dp2mgr.sock)")
      ->capture_default_str();
  app.add_option("--controller.endpoint", cfg->controller_endpoint,
                 "Controller gRPC endpoint (config-daemon.sock); empty disables")
      ->capture_default_str();
  app.add_option("--xdm.backoff-initial", backoff_initial,
                 "First wait before re-subscribing a broken stream")
      ->check(duration)
      ->capture_default_str();
  app.add_option("--xdm.backoff-max", backoff_max, "Longest wait before re-subscribing")
      ->check(duration)
      ->capture_default_str();
  app.add_option("--collector.interval", interval,
                 "Expected XDM collection interval; polling period while the stream is down")
      ->check(duration)
      ->capture_default_str();
  app.add_option("--collector.stale-after", stale_after,
                 "Drop series not refreshed for this long (default 3 intervals)")
      ->check(duration);
  app.add_option("--collector.max-series", cfg->max_series,
                 "Cap on device series held; new series beyond it are dropped and counted")
      ->check(CLI::Range(size_t{1}, size_t{100000000}))
      ->capture_default_str();
  app.add_flag("--collector.unknown-metrics", cfg->unknown_metrics,
               "Export samples with metric IDs the catalog lacks as xpu_unknown_metric{id=...}");
  app.add_option("--metrics.catalog", cfg->catalog_file,
                 "Metric catalog YAML replacing the built-in one")
      ->check(CLI::ExistingFile);
  std::string hal_interval = "1s";
  app.add_option("--hal", cfg->hal, "HAL backend: auto (sysfs if --hal.root exists), none, sysfs")
      ->check(CLI::IsMember({"auto", "none", "sysfs"}))
      ->capture_default_str();
  app.add_option("--hal.root", cfg->hal_root, "Root of the sysfs HAL tree (xpu<minor>/...)")
      ->capture_default_str();
  app.add_option("--hal.interval", hal_interval, "How often to sample the HAL")
      ->check(duration)
      ->capture_default_str();
  app.add_option("--hal.fault-catalog", cfg->fault_catalog_file,
                 "Fault-code catalog YAML replacing the built-in one")
      ->check(CLI::ExistingFile);
  app.add_option("--log.level", cfg->log_level, "debug, info, warn or error")
      ->check(CLI::IsMember({"debug", "info", "warn", "error"}))
      ->capture_default_str();
  app.add_option("--log.format", cfg->log_format, "logfmt or json")
      ->check(CLI::IsMember({"logfmt", "json"}))
      ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    app.exit(e);
    return 0;
  } catch (const CLI::CallForVersion& e) {
    app.exit(e);
    return 0;
  } catch (const CLI::ParseError& e) {
    std::cerr << "xpu-exporter: " << e.what() << " (see --help)\n";
    return 2;
  }
  if (cfg->listen_addresses.empty()) cfg->listen_addresses = {kDefaultListenAddress};
  for (const std::string& a : cfg->listen_addresses) {
    std::string civet;
    if (Status s = http::WebServer::ToCivetPort(a, &civet); !s.ok()) {
      std::cerr << "xpu-exporter: --web.listen-address: " << s.message() << "\n";
      return 2;
    }
  }
  if (cfg->telemetry_path.empty() || cfg->telemetry_path[0] != '/' ||
      cfg->telemetry_path.find_first_of("?# ") != std::string::npos) {
    std::cerr << "xpu-exporter: --web.telemetry-path must be a path starting with '/'\n";
    return 2;
  }
  cfg->interval = *ParseDuration(interval);
  cfg->hal_interval = *ParseDuration(hal_interval);
  if (!stale_after.empty()) cfg->stale_after = *ParseDuration(stale_after);
  cfg->backoff_initial = *ParseDuration(backoff_initial);
  cfg->backoff_max = *ParseDuration(backoff_max);
  if (cfg->backoff_max < cfg->backoff_initial) {
    std::cerr << "xpu-exporter: --xdm.backoff-max must not be below --xdm.backoff-initial\n";
    return 2;
  }
  if (cfg->xdm_endpoint.empty()) {
    std::cerr << "xpu-exporter: --xdm.endpoint must not be empty\n";
    return 2;
  }
  return -1;
}

void SetupLogging(const Config& cfg) {
  auto logger = std::make_shared<spdlog::logger>(
      "xpu-exporter", std::make_shared<spdlog::sinks::stderr_sink_mt>());
  auto formatter = std::make_unique<spdlog::pattern_formatter>(spdlog::pattern_time_type::utc);
  const bool json = cfg.log_format == "json";
  formatter->add_flag<QuotedMessage>('*', json);
  if (json) {
    formatter->set_pattern(R"({"ts":"%Y-%m-%dT%H:%M:%S.%eZ","level":"%l","msg":%*})");
  } else {
    formatter->set_pattern("ts=%Y-%m-%dT%H:%M:%S.%eZ level=%l msg=%*");
  }
  logger->set_formatter(std::move(formatter));
  spdlog::set_default_logger(logger);
  spdlog::set_level(spdlog::level::from_str(cfg.log_level));
  spdlog::flush_on(spdlog::level::info);
}

}  // namespace xpu::app
