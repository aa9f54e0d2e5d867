#include "app/config.h"

#include <algorithm>
#include <iostream>
#include <set>

#include <CLI/CLI.hpp>
#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>
#include <yaml-cpp/yaml.h>

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
      if (*d > kMaxDuration) return "'" + s + "' is longer than " + FormatDuration(kMaxDuration);
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


// Raw option values that need post-processing.
struct Strings {
  std::string interval = "1s", stale_after, backoff_initial = "1s", backoff_max = "30s",
              hal_interval = "1s", kubelet_interval = "10s";
};

void Build(CLI::App& app, Config* cfg, Strings* st) {
  static DurationValidator duration;
  app.set_version_flag("--version", std::string("xpu-exporter ") + kVersion);
  cfg->listen_addresses.clear();
  app.add_option("--config.file", cfg->config_file,
                 "YAML file setting any of these flags by name (flags override it)");
  app.add_option("--web.config.file", cfg->web_config_file,
                 "Exporter-toolkit web config: TLS, basic auth, headers (re-read on SIGHUP)");
  app.add_flag("--web.probes-require-auth", cfg->protect_probes,
               "Require basic auth on /-/healthy and /-/ready too");
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
  app.add_option("--xdm.backoff-initial", st->backoff_initial,
                 "First wait before re-subscribing a broken stream")
      ->check(duration)
      ->capture_default_str();
  app.add_option("--xdm.backoff-max", st->backoff_max, "Longest wait before re-subscribing")
      ->check(duration)
      ->capture_default_str();
  app.add_option("--collector.interval", st->interval,
                 "Expected XDM collection interval; polling period while the stream is down")
      ->check(duration)
      ->capture_default_str();
  app.add_option("--collector.stale-after", st->stale_after,
                 "Drop series not refreshed for this long (default 3 intervals)")
      ->check(duration);
  app.add_option("--collector.max-series", cfg->max_series,
                 "Cap on device series held; new series beyond it are dropped and counted")
      ->check(CLI::Range(size_t{1}, size_t{100000000}))
      ->capture_default_str();
  app.add_option("--collector.max-devices", cfg->max_devices,
                 "Cap on devices taken from XDM; data of further devices is dropped and counted")
      ->check(CLI::Range(size_t{1}, size_t{65536}))
      ->capture_default_str();
  app.add_option("--xdm.max-message-size", cfg->xdm_max_message_bytes,
                 "Largest gRPC message accepted from XDM, in bytes (bounds memory)")
      ->check(CLI::Range(4096, 1 << 30))
      ->capture_default_str();
  app.add_flag("--collector.unknown-metrics", cfg->unknown_metrics,
               "Export samples with metric IDs the catalog lacks as xpu_unknown_metric{id=...}");
  app.add_option("--metrics.catalog", cfg->catalog_file,
                 "Metric catalog YAML replacing the built-in one")
      ->check(CLI::ExistingFile);
  app.add_option("--hal", cfg->hal, "HAL backend: auto (sysfs if --hal.root exists), none, sysfs")
      ->check(CLI::IsMember({"auto", "none", "sysfs"}))
      ->capture_default_str();
  app.add_option("--hal.root", cfg->hal_root, "Root of the sysfs HAL tree (xpu<minor>/...)")
      ->capture_default_str();
  app.add_option("--hal.interval", st->hal_interval, "How often to sample the HAL")
      ->check(duration)
      ->capture_default_str();
  app.add_option("--hal.fault-catalog", cfg->fault_catalog_file,
                 "Fault-code catalog YAML replacing the built-in one")
      ->check(CLI::ExistingFile);
  app.add_option("--kubelet.pod-resources-socket", cfg->kubelet_socket,
                 "kubelet PodResources socket for device-to-pod attribution; empty disables")
      ->capture_default_str();
  app.add_option("--kubelet.interval", st->kubelet_interval, "How often to ask the kubelet")
      ->check(duration)
      ->capture_default_str();
  app.add_option("--log.level", cfg->log_level, "debug, info, warn or error")
      ->check(CLI::IsMember({"debug", "info", "warn", "error"}))
      ->capture_default_str();
  app.add_option("--log.format", cfg->log_format, "logfmt or json")
      ->check(CLI::IsMember({"logfmt", "json"}))
      ->capture_default_str();
}

// Parses `args`; returns -1 to go on, or an exit code after printing.
int Parse(CLI::App& app, std::vector<std::string> args) {
  std::reverse(args.begin(), args.end());  // CLI11 takes them back to front
  try {
    app.parse(args);
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
  return -1;
}

void Flatten(const YAML::Node& node, const std::string& prefix,
             std::vector<std::pair<std::string, YAML::Node>>* out) {
  for (const auto& kv : node) {
    const std::string key = (prefix.empty() ? "" : prefix + ".") + kv.first.as<std::string>();
    if (kv.second.IsMap()) {
      Flatten(kv.second, key, out);
    } else {
      out->emplace_back(key, kv.first);  // the key node, for its line
      out->back().second = kv.second;
      out->back().second.SetTag(std::to_string(kv.first.Mark().line + 1));
    }
  }
}

// Turns the YAML config file into flag arguments for the options the command
// line does not set. Errors name the file, line and key.
Status FileArgs(const std::string& path, CLI::App& app, std::vector<std::string>* args,
                std::set<std::string>* from_file) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::BadFile&) {
    return Status::InvalidArgument("--config.file: cannot read " + path);
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument(path + ": " + e.what());
  }
  if (root.IsNull()) return Status::Ok();
  if (!root.IsMap()) return Status::InvalidArgument(path + ": must be a mapping of flag names");
  std::vector<std::pair<std::string, YAML::Node>> entries;
  try {
    Flatten(root, "", &entries);
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument(path + ": " + e.what());
  }
  for (const auto& [key, value] : entries) {
    const std::string where = path + ":" + value.Tag();
    CLI::Option* opt = app.get_option_no_throw("--" + key);
    if (opt == nullptr || key == "config.file" || key == "help" || key == "version")
      return Status::InvalidArgument(where + ": unknown key '" + key + "'");
    if (opt->count() > 0) continue;  // the command line wins
    from_file->insert(key);
    const bool flag = opt->get_expected_max() == 0;
    std::vector<std::string> values;
    try {
      if (value.IsSequence()) {
        for (const auto& v : value) values.push_back(v.as<std::string>());
      } else if (value.IsScalar()) {
        values.push_back(value.as<std::string>());
      } else {
        return Status::InvalidArgument(where + ": '" + key + "' needs a value");
      }
    } catch (const YAML::Exception&) {
      return Status::InvalidArgument(where + ": '" + key + "' must be a value or a list of values");
    }
    if (flag) {
      if (values.size() != 1 || (values[0] != "true" && values[0] != "false"))
        return Status::InvalidArgument(where + ": '" + key + "' must be true or false");
      if (values[0] == "true") args->push_back("--" + key);
      continue;
    }
    for (const std::string& v : values) {
      args->push_back("--" + key);
      args->push_back(v);
    }
  }
  return Status::Ok();
}

}  // namespace

int ParseFlags(int argc, char** argv, Config* cfg) {
  const std::vector<std::string> cmdline(argv + 1, argv + argc);
  // Pass 1: the command line alone, to find --config.file and what it sets.
  Config first;
  Strings first_strings;
  CLI::App probe{"xpu-exporter", "xpu-exporter"};
  Build(probe, &first, &first_strings);
  if (int rc = Parse(probe, cmdline); rc >= 0) return rc;
  std::vector<std::string> args;
  std::set<std::string> from_file;
  if (!first.config_file.empty()) {
    if (Status s = FileArgs(first.config_file, probe, &args, &from_file); !s.ok()) {
      std::cerr << "xpu-exporter: " << s.message() << "\n";
      return 2;
    }
  }
  // Pass 2: the file's values, then the command line's.
  args.insert(args.end(), cmdline.begin(), cmdline.end());
  Strings st;
  CLI::App app{"xpu-exporter: Prometheus exporter for AI accelerators (Lingjun Runtime Kit / XDM)",
               "xpu-exporter"};
  *cfg = Config();
  Build(app, cfg, &st);
  if (int rc = Parse(app, args); rc >= 0) return rc;
  for (CLI::Option* opt : app.get_options()) {
    const std::string name = opt->get_name();
    if (name.rfind("--", 0) != 0 || name == "--help" || name == "--version") continue;
    const std::string key = name.substr(2);
    Config::Setting setting;
    if (opt->count() > 0) {
      setting.values = opt->results();
      setting.source = from_file.count(key) ? "file" : "flag";
    } else {
      setting.values = {opt->get_default_str()};
      setting.source = "default";
    }
    cfg->settings[key] = setting;
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
  for (const char* reserved : kReservedPaths) {
    if (cfg->telemetry_path == reserved) {
      std::cerr << "xpu-exporter: --web.telemetry-path " << reserved
                << " would shadow a page the exporter serves there\n";
      return 2;
    }
  }
  cfg->interval = *ParseDuration(st.interval);
  cfg->hal_interval = *ParseDuration(st.hal_interval);
  cfg->kubelet_interval = *ParseDuration(st.kubelet_interval);
  if (!st.stale_after.empty()) cfg->stale_after = *ParseDuration(st.stale_after);
  cfg->backoff_initial = *ParseDuration(st.backoff_initial);
  cfg->backoff_max = *ParseDuration(st.backoff_max);
  if (cfg->backoff_max < cfg->backoff_initial) {
    std::cerr << "xpu-exporter: --xdm.backoff-max must not be below --xdm.backoff-initial\n";
    return 2;
  }
  if (cfg->xdm_endpoint.empty()) {
    std::cerr << "xpu-exporter: --xdm.endpoint must not be empty\n";
    return 2;
  }
  if (!cfg->web_config_file.empty()) {
    if (Status s = http::WebConfig::Load(cfg->web_config_file, &cfg->web_config); !s.ok()) {
      std::cerr << "xpu-exporter: " << s.message() << "\n";
      return 2;
    }
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
