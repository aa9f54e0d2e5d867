#pragma once

#include <chrono>
#include <cstddef>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "catalog/catalog.h"
#include "catalog/selection.h"
#include "common/flags.h"
#include "common/status.h"
#include "hal/fault_catalog.h"
#include "hal/hal.h"
#include "hal/kmsg/kmsg_catalog.h"
#include "hal/pci/pci.h"
#include "http/web_config.h"
#include "http/web_server.h"
#include "kubelet/pod_mapper.h"
#include "kubernetes/label_filter.h"
#include "kubernetes/options.h"
#include "sinks/options.h"
#include "store/metric_store.h"
#include "upstream/xdm_client.h"

namespace xpu::app {

// Default port: 9445. dcgm-exporter has 9400, node_exporter 9100, Ascend's
// npu-exporter 8082; see docs/configuration.md.
inline constexpr const char* kDefaultListenAddress = ":9445";

// Paths the exporter serves besides the telemetry path, which must not
// shadow them.
inline constexpr const char* kReservedPaths[] = {"/", "/status", "/config", "/-/healthy",
                                                 "/-/ready"};

// What validation makes of the settings that are text to parse (regexes,
// templates, lists), in the types the parts use: the parts take these and
// never parse their text again (docs/architecture.md, "Configuration").
struct ParsedConfig {
  catalog::Selection selection;    // --metrics.include / --metrics.exclude
  hal::HalSelection hal;           // --hal
  hal::PciFilter pci_filter;       // --hal.pci.classes / --hal.pci.vendors
  kubelet::DraRule dra;            // --kubelet.dra.drivers / --kubelet.dra.device-names
  kubernetes::LabelFilter labels;  // --kubernetes.pod-labels
  int taint_evict_level = 0;       // --kubernetes.device-taints.evict-level (0: none)
};

// The effective configuration, from defaults, --config.file and flags. Each
// component's settings are its own options struct, which holds their
// defaults; the flags write straight into them.
struct Config {
  // HTTP: listen addresses, connections, probes' auth, the loaded web config.
  http::WebOptions web = [] {
    http::WebOptions w;
    w.listen_addresses = {kDefaultListenAddress};
    return w;
  }();
  std::string telemetry_path = "/metrics";
  std::string web_config_file;  // --web.config.file (exporter-toolkit format)
  // XDM client: endpoints, interval, stale-after, backoff, message and
  // device caps (max_devices also bounds the store).
  upstream::ClientOptions xdm;
  size_t max_series = store::MetricStore::Options{}.max_series;
  std::string catalog_file;  // empty: the built-in catalog
  // Family selection (regexes on whole names), applied at ingest.
  std::vector<std::string> metrics_include, metrics_exclude;
  hal::HalOptions hal;
  kubelet::PodMapperOptions kubelet;
  kubernetes::KubernetesOptions kubernetes;
  sinks::NodeHealthOptions node_health;
  std::string log_level = "info";
  std::string log_format = "logfmt";
  std::string config_file;        // --config.file (YAML of the flags)
  bool enable_lifecycle = false;  // --web.enable-lifecycle: POST /-/reload
  bool config_check = false;      // --config.check: validate every file, exit
  // The command line it came from (without argv[0]): a reload parses it
  // again, with the config file as it is then.
  std::vector<std::string> cmdline;

  // Every option's effective value and where it came from ("default",
  // "file" or "flag"), for /config.
  struct Setting {
    std::vector<std::string> values;
    std::string source;
  };
  std::map<std::string, Setting> settings;
  // Validate's result for the settings above; set by ParseFlags and
  // Reparse. Exporter::Start validates a Config without it (built by hand:
  // tests, tools); code that changes a text setting after ParseFlags resets
  // it, or the parts keep the parsed value.
  std::optional<ParsedConfig> parsed;

  std::chrono::milliseconds effective_stale_after() const {
    return upstream::EffectiveStaleAfter(xdm.stale_after, xdm.interval, xdm.stall_floor);
  }
};

// Checks what the flags' own validators cannot: relations between options,
// the forms of addresses and paths, and parses the settings that are text
// into `*parsed` (when given). InvalidArgument names the flag.
Status Validate(const Config& cfg, ParsedConfig* parsed = nullptr);

using xpu::Applier;
using xpu::ApplierName;
using xpu::kApplierCount;
using xpu::kMaxDuration;

// The applier of a setting (a flag name without "--"); kRestart for a name
// that is no flag.
Applier AppliedBy(const std::string& key);

// Parses the command line, and --config.file if given (flags override the
// file), into `cfg`, validates it and loads --web.config.file. Returns
// nullopt to go on, or the exit code to exit with at once: 0 after
// --help/--version, 2 after one clear line on stderr for a bad flag, value or
// file.
std::optional<int> ParseFlags(int argc, char** argv, Config* cfg);

// The same for a reload: parses `running`'s command line and the config file
// as they are now into `cfg`, where every restart-only setting keeps its
// running value (each option's own parser reads its running text again);
// the new values that wait for a restart go to `*pending`. InvalidArgument
// with the one line ParseFlags would print.
Status Reparse(const Config& running, Config* cfg, std::map<std::string, Config::Setting>* pending);

// The files a configuration names besides itself and the web config, loaded
// and checked: the metric, fault and kernel-log catalogs.
struct LoadedFiles {
  std::shared_ptr<const catalog::Catalog> catalog;
  std::shared_ptr<const hal::FaultCatalog> faults;
  std::shared_ptr<const hal::KmsgCatalog> kmsg;
};
Status LoadFiles(const Config& cfg, LoadedFiles* out);

// Whether the setting (a flag name without "--") takes effect only at start;
// every other one changes on reload (docs/configuration.md).
inline bool NeedsRestart(const std::string& key) { return AppliedBy(key) == Applier::kRestart; }

}  // namespace xpu::app
