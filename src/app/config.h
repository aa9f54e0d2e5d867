#pragma once

#include <chrono>
#include <cstddef>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "http/web_config.h"

namespace xpu::app {

// Default port: 9445. dcgm-exporter has 9400, node_exporter 9100, Ascend's
// npu-exporter 8082; see docs/configuration.md.
inline constexpr const char* kDefaultListenAddress = ":9445";

// Every duration flag must lie in (0, kMaxDuration]: longer ones overflow
// the clock arithmetic (100y in nanoseconds does) and mean nothing here.
inline constexpr std::chrono::milliseconds kMaxDuration{std::chrono::hours(24)};

// Paths the exporter serves besides the telemetry path, which must not
// shadow them.
inline constexpr const char* kReservedPaths[] = {"/", "/status", "/config", "/-/healthy",
                                                 "/-/ready"};

// The effective configuration, from defaults and flags.
struct Config {
  std::vector<std::string> listen_addresses = {kDefaultListenAddress};
  std::string telemetry_path = "/metrics";
  std::string xdm_endpoint = "unix:///run/amp/eKitC/xdm/sockets/dp2mgr.sock";
  std::string controller_endpoint = "unix:///run/amp/eKitC/xdm/sockets/config-daemon.sock";
  std::chrono::milliseconds interval{1000};
  std::chrono::milliseconds stale_after{0};  // 0: 3 intervals
  std::chrono::milliseconds backoff_initial{1000};
  std::chrono::milliseconds backoff_max{30000};
  size_t max_series = 50000;
  size_t max_devices = 1024;
  int xdm_max_message_bytes = 4 * 1024 * 1024;
  bool unknown_metrics = false;
  std::string catalog_file;  // empty: the built-in catalog
  std::string log_level = "info";
  std::string log_format = "logfmt";
  int max_connections = 16;
  std::string hal = "auto";  // auto | none | sysfs
  std::string hal_root = "/sys/class/xpu";
  std::chrono::milliseconds hal_interval{1000};
  std::string fault_catalog_file;  // empty: the built-in fault catalog
  // Empty: no pod attribution.
  std::string kubelet_socket = "/var/lib/kubelet/pod-resources/kubelet.sock";
  std::chrono::milliseconds kubelet_interval{10000};
  std::string config_file;         // --config.file (YAML of the flags)
  std::string web_config_file;     // --web.config.file (exporter-toolkit format)
  bool protect_probes = false;     // basic auth on /-/healthy and /-/ready too
  std::shared_ptr<const http::WebConfig> web_config;  // loaded from web_config_file

  // Every option's effective value and where it came from ("default",
  // "file" or "flag"), for /config.
  struct Setting {
    std::vector<std::string> values;
    std::string source;
  };
  std::map<std::string, Setting> settings;

  std::chrono::milliseconds effective_stale_after() const {
    return stale_after.count() > 0 ? stale_after : interval * 3;
  }
};

// Parses the command line, and --config.file if given (flags override the
// file), into `cfg`; also loads --web.config.file. Returns -1 to go on, or the
// exit code to exit with at once: 0 after --help/--version, 2 after one clear
// line on stderr for a bad flag, value or file.
int ParseFlags(int argc, char** argv, Config* cfg);

// Sets up spdlog: level (debug|info|warn|error) and format (logfmt|json).
void SetupLogging(const Config& cfg);

}  // namespace xpu::app
