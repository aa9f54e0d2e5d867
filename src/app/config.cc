#include "app/config.h"

#include <yaml-cpp/yaml.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <iostream>
#include <set>

#include "catalog/selection.h"
#include "common/duration.h"
#include "common/file_util.h"
#include "common/yaml_util.h"
#include "hal/fault_catalog.h"
#include "hal/flags.h"
#include "http/flags.h"
#include "http/web_server.h"
#include "kubelet/flags.h"
#include "kubernetes/flags.h"
#include "kubernetes/pod_watcher.h"
#include "sinks/flags.h"
#include "upstream/flags.h"
#include "version.h"

namespace xpu::app {
namespace {

// The version and the exporter's own flags: its config files, the lifecycle
// API, the telemetry path and the family selection.
void AddAppFlags(const FlagSet& f, Config* cfg) {
  CLI::App& app = f.app;
  app.set_version_flag("--version", std::string("xpu-exporter ") + kVersion);
  f(Applier::kRestart,
    app.add_option("--config.file", cfg->config_file,
                   "YAML file setting any of these flags by name (flags override it)"));
  f(Applier::kWebConfig,
    app.add_option("--web.config.file", cfg->web_config_file,
                   "Exporter-toolkit web config: TLS, basic auth, headers (re-read on SIGHUP)"));
  f(Applier::kRestart,
    app.add_flag("--web.enable-lifecycle", cfg->enable_lifecycle,
                 "Enable POST /-/reload (like SIGHUP); off by default, as in Prometheus"));
  f(Applier::kRestart,
    app.add_flag("--config.check", cfg->config_check,
                 "Validate the flags and every file they name, print the result, exit 0 or 2"));
  f(Applier::kRestart, app.add_option("--web.telemetry-path", cfg->telemetry_path,
                                      "Path under which to expose metrics")
                           ->capture_default_str());
  f(Applier::kIngest,
    app.add_option("--metrics.include", cfg->metrics_include,
                   "Export only families whose name matches one of these regexes (repeatable)"));
  f(Applier::kIngest,
    app.add_option(
        "--metrics.exclude", cfg->metrics_exclude,
        "Drop families whose name matches one of these regexes, at ingest (repeatable)"));
  f(Applier::kIngest, app.add_option("--metrics.catalog", cfg->catalog_file,
                                     "Metric catalog YAML replacing the built-in one")
                          ->check(CLI::ExistingFile));
}

// Logging.
void AddLogFlags(const FlagSet& f, Config* cfg) {
  CLI::App& app = f.app;
  f(Applier::kLog, app.add_option("--log.level", cfg->log_level, "debug, info, warn or error")
                       ->check(CLI::IsMember({"debug", "info", "warn", "error"}))
                       ->capture_default_str());
  f(Applier::kRestart, app.add_option("--log.format", cfg->log_format, "logfmt or json")
                           ->check(CLI::IsMember({"logfmt", "json"}))
                           ->capture_default_str());
}

// Every flag, in the order --help lists them, writing into `cfg`; each
// one's applier goes to `*appliers` when given.
void Build(CLI::App& app, Config* cfg, std::map<std::string, Applier>* appliers = nullptr) {
  std::map<std::string, Applier> scratch;
  const FlagSet f{app, appliers != nullptr ? appliers : &scratch};
  AddAppFlags(f, cfg);
  http::AddWebFlags(f, &cfg->web, kDefaultListenAddress);
  upstream::AddXdmFlags(f, &cfg->xdm, &cfg->max_series);
  hal::AddHalFlags(f, &cfg->hal);
  kubelet::AddKubeletFlags(f, &cfg->kubelet);
  kubernetes::AddKubernetesFlags(f, &cfg->kubernetes);
  sinks::AddNodeHealthFlags(f, &cfg->node_health);
  AddLogFlags(f, cfg);
  for (const CLI::Option* opt : app.get_options()) {
    const std::string& name = opt->get_name();
    if (name != "--help" && name != "--version" && f.appliers->count(name.substr(2)) == 0)
      throw std::logic_error(name + " was registered without saying who applies it");
  }
}

// Every flag's applier, from one registration on a scratch Config.
const std::map<std::string, Applier>& Appliers() {
  static const std::map<std::string, Applier> table = [] {
    std::map<std::string, Applier> t;
    Config scratch;
    CLI::App app;
    Build(app, &scratch, &t);
    return t;
  }();
  return table;
}

// Parses `args`; returns nullopt to go on, or an exit code: 0 after printing
// help or the version, 2 with `*error` set.
std::optional<int> Parse(CLI::App& app, std::vector<std::string> args, std::string* error) {
  // "--name=" is the empty value, as "--name ''" is (the documented way to
  // switch a socket off): CLI11 would take the next argument as the value.
  std::vector<std::string> split;
  for (std::string& a : args) {
    if (a.size() > 3 && a.compare(0, 2, "--") == 0 && a.find('=') == a.size() - 1) {
      std::string name = a.substr(0, a.size() - 1);
      const CLI::Option* opt = app.get_option_no_throw(name);
      if (opt != nullptr && opt->get_expected_max() > 0) {
        split.push_back(std::move(name));
        split.emplace_back();
        continue;
      }
      if (opt != nullptr) {
        *error =
            name + "= : a switch takes no empty value (write " + name + " or " + name + "=false)";
        return 2;
      }
    }
    split.push_back(std::move(a));
  }
  args = std::move(split);
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
    *error = std::string(e.what()) + " (see --help)";
    return 2;
  }
  return std::nullopt;
}

// The one place a configuration error is reported: one line, exit code 2.
int Fail(const Status& s) {
  std::cerr << "xpu-exporter: " << s.message() << "\n";
  return 2;
}

// One setting of the config file: its flag name ("web.listen-address", from
// nested mappings), where it stands, and its value node.
struct FileEntry {
  std::string key;
  std::string where;
  YAML::Node value;
};

void Flatten(const YAML::Node& node, const std::string& prefix, const std::string& path,
             std::vector<FileEntry>* out) {
  for (const auto& kv : node) {
    const std::string key = (prefix.empty() ? "" : prefix + ".") + kv.first.as<std::string>();
    if (kv.second.IsMap()) {
      Flatten(kv.second, key, path, out);
    } else {
      out->push_back({key, yaml::Where(path, kv.first), kv.second});
    }
  }
}

// The flag arguments for one entry: "--key value" per value, "--key" for a
// true boolean flag.
Status EntryArgs(const FileEntry& e, bool flag, std::vector<std::string>* args) {
  std::vector<std::string> values;
  if (e.value.IsSequence()) {
    for (const auto& v : e.value) {
      if (!v.IsScalar())
        return Status::InvalidArgument(e.where + ": '" + e.key +
                                       "' must be a value or a list of values");
      values.push_back(v.as<std::string>());
    }
  } else if (e.value.IsScalar()) {
    values.push_back(e.value.as<std::string>());
  } else {
    return Status::InvalidArgument(e.where + ": '" + e.key + "' needs a value");
  }
  if (flag) {
    if (values.size() != 1 || (values[0] != "true" && values[0] != "false"))
      return Status::InvalidArgument(e.where + ": '" + e.key + "' must be true or false");
    if (values[0] == "true") args->push_back("--" + e.key);
    return Status::Ok();
  }
  for (const std::string& v : values) {
    args->push_back("--" + e.key);
    args->push_back(v);
  }
  return Status::Ok();
}

// Turns the YAML config file into flag arguments for the options the command
// line does not set. Errors name the file, line and key.
Status FileArgs(const std::string& path, CLI::App& app, std::vector<std::string>* args,
                std::set<std::string>* from_file) {
  std::string text;
  if (Status s = ReadTextFile(path, "--config.file", &text); !s.ok())
    return Status::InvalidArgument(s.message());
  return yaml::ParseDocument(text, path, [&](const YAML::Node& root) {
    if (root.IsNull()) return Status::Ok();
    if (!root.IsMap()) return Status::InvalidArgument(path + ": must be a mapping of flag names");
    std::vector<FileEntry> entries;
    Flatten(root, "", path, &entries);
    for (const FileEntry& e : entries) {
      CLI::Option* opt = app.get_option_no_throw("--" + e.key);
      if (opt == nullptr || e.key == "config.file" || e.key == "config.check" || e.key == "help" ||
          e.key == "version")
        return Status::InvalidArgument(e.where + ": unknown key '" + e.key + "'");
      if (opt->count() > 0) continue;  // the command line wins
      from_file->insert(e.key);
      if (Status s = EntryArgs(e, opt->get_expected_max() == 0, args); !s.ok()) return s;
    }
    return Status::Ok();
  });
}

}  // namespace

Status Validate(const Config& cfg, ParsedConfig* parsed) {
  ParsedConfig p;
  if (cfg.web.listen_addresses.empty())
    return Status::InvalidArgument("--web.listen-address: none given");
  for (const std::string& a : cfg.web.listen_addresses) {
    std::string civet;
    if (Status s = http::WebServer::ToCivetPort(a, &civet); !s.ok())
      return Status::InvalidArgument("--web.listen-address: " + s.message());
  }
  for (const std::string& a : cfg.web.probe_listen_addresses) {
    std::string host;
    int port = 0;
    if (Status s = http::SplitListenAddress(a, &host, &port); !s.ok())
      return Status::InvalidArgument("--web.probe-listen-address: " + s.message());
  }
  if (cfg.telemetry_path.empty() || cfg.telemetry_path[0] != '/' ||
      cfg.telemetry_path.find_first_of("?# ") != std::string::npos)
    return Status::InvalidArgument("--web.telemetry-path must be a path starting with '/'");
  for (const char* reserved : kReservedPaths) {
    if (cfg.telemetry_path == reserved)
      return Status::InvalidArgument(std::string("--web.telemetry-path ") + reserved +
                                     " would shadow a page the exporter serves there");
  }
  if (cfg.xdm.backoff_max < cfg.xdm.backoff_initial)
    return Status::InvalidArgument("--xdm.backoff-max must not be below --xdm.backoff-initial");
  if (Status s = catalog::Selection::Make(cfg.metrics_include, cfg.metrics_exclude, &p.selection);
      !s.ok())
    return s;
  if (Status s = hal::ParseHalSelection(cfg.hal.backend, &p.hal); !s.ok())
    return Status::InvalidArgument("--hal: " + s.message());
  if (Status s = kubernetes::LabelFilter::Make(cfg.kubernetes.pod_labels, &p.labels); !s.ok())
    return Status::InvalidArgument("--kubernetes.pod-labels: " + s.message());
  const std::string& api = cfg.kubernetes.api_server;
  if (!api.empty() && api != "auto") {
    if (api.rfind("http://", 0) == 0 && !cfg.kubernetes.insecure_http)
      return Status::InvalidArgument(
          "--kubernetes.api-server " + api +
          " is http://: the bearer token would cross the network in the clear; use https:// "
          "(or --kubernetes.insecure-http for a local proxy)");
    if (api.rfind("https://", 0) != 0 && api.rfind("http://", 0) != 0)
      return Status::InvalidArgument(
          "--kubernetes.api-server must be auto, empty or an https:// URL");
    if (cfg.kubernetes.node_name.empty())
      return Status::InvalidArgument(
          "--kubernetes.api-server needs the node name (--kubernetes.node-name or NODE_NAME, "
          "read at start only): only this node's pods are watched");
  }
  const sinks::NodeHealthOptions& nh = cfg.node_health;
  if ((nh.condition || nh.events || nh.device_taints) && api.empty())
    return Status::InvalidArgument(std::string(nh.condition ? "--kubernetes.node-condition"
                                               : nh.events  ? "--kubernetes.events"
                                                            : "--kubernetes.device-taints") +
                                   " needs the API server (--kubernetes.api-server is empty)");
  if (nh.taint_effect != "NoSchedule" && nh.taint_effect != "None")
    return Status::InvalidArgument("--kubernetes.device-taints.effect must be NoSchedule or None");
  if (!nh.taint_evict_level.empty()) {
    hal::FaultLevel level;
    if (!hal::ParseLevel(nh.taint_evict_level, &level) ||
        static_cast<int>(level) < store::kUnhealthyFaultLevel)
      return Status::InvalidArgument(
          "--kubernetes.device-taints.evict-level must be restart_card, reset_card, "
          "isolate_after_job or isolate_card (a taint is written from restart_card)");
    p.taint_evict_level = static_cast<int>(level);
  }
  if (Status s =
          kubelet::DraRule::Make(cfg.kubelet.dra_drivers, cfg.kubelet.dra_device_names, &p.dra);
      !s.ok())
    return Status::InvalidArgument("--kubelet.dra.*: " + s.message());
  if (Status s = hal::MakePciFilter(cfg.hal.pci_classes, cfg.hal.pci_vendors, &p.pci_filter);
      !s.ok())
    return s;
  if (parsed != nullptr) *parsed = std::move(p);
  return Status::Ok();
}

namespace {

// Parses `args` into a fresh `*cfg` and records each option's value and
// source in its settings ("file" for the keys in `from_file`).
std::optional<int> ParseInto(const std::vector<std::string>& args,
                             const std::set<std::string>& from_file, Config* cfg,
                             std::string* error) {
  CLI::App app{"xpu-exporter: Prometheus exporter for AI accelerators (Lingjun Runtime Kit / XDM)",
               "xpu-exporter"};
  *cfg = Config();
  Build(app, cfg);
  if (auto rc = Parse(app, args, error)) return rc;
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
  return std::nullopt;
}

// The arguments that set each option of `settings` not at its default to
// its values, read by the same parsers again ("--flag=false" for a flag).
std::vector<std::string> ArgsOf(const std::map<std::string, Config::Setting>& settings) {
  Config scratch;
  CLI::App app;
  Build(app, &scratch);
  std::vector<std::string> args;
  for (const auto& [key, st] : settings) {
    const CLI::Option* opt = app.get_option("--" + key);
    // A default is left to the option, but one an environment variable
    // could set (NODE_NAME) is given: the variable may have changed since.
    if (st.source == "default" && opt->get_envname().empty()) continue;
    const bool flag = opt->get_expected_max() == 0;
    for (const std::string& v : st.values) {
      if (flag) {
        args.push_back("--" + key + "=" + v);
      } else {
        args.push_back("--" + key);
        args.push_back(v);
      }
    }
  }
  return args;
}

// Parses `cmdline` (and the --config.file it names) into `cfg` and validates
// it; with `running`, a reload's: restart-only settings keep their running
// values and the new ones go to `*pending`. Returns nullopt to go on; else
// the exit code, with `*error` set when it is 2 (help and version print
// themselves and give 0).
std::optional<int> Load(const std::vector<std::string>& cmdline, Config* cfg, Status* error,
                        const Config* running = nullptr,
                        std::map<std::string, Config::Setting>* pending = nullptr) {
  // Pass 1: the command line alone, to find --config.file and what it sets.
  Config first;
  CLI::App probe{"xpu-exporter", "xpu-exporter"};
  Build(probe, &first);
  std::string parse_error;
  if (auto rc = Parse(probe, cmdline, &parse_error)) {
    if (*rc != 0) *error = Status::InvalidArgument(parse_error);
    return rc;
  }
  std::vector<std::string> args;
  std::set<std::string> from_file;
  if (!first.config_file.empty()) {
    if (Status s = FileArgs(first.config_file, probe, &args, &from_file); !s.ok()) {
      *error = s;
      return 2;
    }
  }
  // Pass 2: the file's values, then the command line's.
  args.insert(args.end(), cmdline.begin(), cmdline.end());
  if (auto rc = ParseInto(args, from_file, cfg, &parse_error)) {
    if (*rc != 0) *error = Status::InvalidArgument(parse_error);
    return rc;
  }
  if (running != nullptr) {
    // What the next restart would run is checked whole first: a reload
    // refuses a bad restart-only value too, rather than keep it waiting.
    if (cfg->web.listen_addresses.empty()) cfg->web.listen_addresses = {kDefaultListenAddress};
    if (Status s = Validate(*cfg); !s.ok()) {
      *error = s;
      return 2;
    }
    if (running->settings.empty()) {
      *error = Status::InvalidArgument(
          "the running configuration was not made from a command line: nothing to reload");
      return 2;
    }
    // Pass 3, a reload's: the new settings, but the running text of every
    // restart-only one, through the same parsers.
    std::map<std::string, Config::Setting> merged = cfg->settings;
    for (auto& [key, st] : merged) {
      auto old = running->settings.find(key);
      if (!NeedsRestart(key) || old == running->settings.end()) continue;
      if (old->second.values != st.values && pending != nullptr) (*pending)[key] = st;
      st = old->second;
    }
    if (auto rc = ParseInto(ArgsOf(merged), {}, cfg, &parse_error)) {
      *error = Status::InvalidArgument("the running settings do not parse again: " + parse_error);
      return 2;
    }
    for (const auto& [key, st] : merged) {  // a lossy round trip would change a value unseen
      if (cfg->settings[key].values != st.values) {
        *error = Status::InvalidArgument("--" + key + ": its value does not parse back to itself");
        return 2;
      }
    }
    cfg->settings = std::move(merged);
  }
  if (cfg->web.listen_addresses.empty()) cfg->web.listen_addresses = {kDefaultListenAddress};
  cfg->cmdline = cmdline;
  ParsedConfig parsed;
  if (Status s = Validate(*cfg, &parsed); !s.ok()) {
    *error = s;
    return 2;
  }
  cfg->parsed = std::move(parsed);
  if (!cfg->web_config_file.empty()) {
    if (Status s = http::WebConfig::Load(cfg->web_config_file, &cfg->web.web_config); !s.ok()) {
      *error = s;
      return 2;
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<int> ParseFlags(int argc, char** argv, Config* cfg) {
  Status error;
  const std::optional<int> rc = Load({argv + 1, argv + argc}, cfg, &error);
  if (rc && *rc != 0) return Fail(error);
  return rc;
}

Status Reparse(const Config& running, Config* cfg,
               std::map<std::string, Config::Setting>* pending) {
  Status error;
  if (Load(running.cmdline, cfg, &error, &running, pending)) {
    return error.ok() ? Status::InvalidArgument("the command line asks for help or the version")
                      : error;
  }
  return Status::Ok();
}

Status LoadFiles(const Config& cfg, LoadedFiles* out) {
  if (cfg.catalog_file.empty()) {
    out->catalog = catalog::Catalog::Builtin();
  } else if (Status s = catalog::Catalog::LoadFile(cfg.catalog_file, &out->catalog); !s.ok()) {
    return s;
  }
  if (cfg.hal.fault_catalog_file.empty()) {
    out->faults = hal::FaultCatalog::Builtin();
  } else if (Status s = hal::FaultCatalog::LoadFile(cfg.hal.fault_catalog_file, &out->faults);
             !s.ok()) {
    return s;
  }
  if (cfg.hal.kmsg_catalog_file.empty()) {
    out->kmsg = hal::KmsgCatalog::Builtin();
  } else if (Status s = hal::KmsgCatalog::LoadFile(cfg.hal.kmsg_catalog_file, &out->kmsg);
             !s.ok()) {
    return s;
  }
  return Status::Ok();
}

Applier AppliedBy(const std::string& key) {
  // What a running exporter cannot change (kRestart): its sockets and their
  // limits, where it connects, the caps that size its tables, and the log's
  // format (swapping spdlog's default logger races with threads logging).
  const auto& table = Appliers();
  auto it = table.find(key);
  return it == table.end() ? Applier::kRestart : it->second;
}

}  // namespace xpu::app
