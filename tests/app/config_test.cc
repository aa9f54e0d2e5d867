#include "app/config.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <tuple>

#include "support/test_util.h"

namespace xpu::app {
namespace {

using std::chrono::milliseconds;

// ParseFlags on a command line given as strings.
std::optional<int> Parse(std::vector<std::string> args, Config* cfg) {
  args.insert(args.begin(), "xpu-exporter");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  return ParseFlags(static_cast<int>(args.size()), argv.data(), cfg);
}

TEST(ConfigTest, DefaultsComeFromTheComponentsOptions) {
  Config cfg;
  ASSERT_FALSE(Parse({}, &cfg));
  EXPECT_EQ(cfg.xdm.interval, upstream::ClientOptions{}.interval);
  EXPECT_EQ(cfg.xdm.xdm_endpoint, upstream::ClientOptions{}.xdm_endpoint);
  EXPECT_EQ(cfg.hal.root, hal::HalOptions{}.root);
  EXPECT_EQ(cfg.kubelet.interval, kubelet::PodMapperOptions{}.interval);
  EXPECT_EQ(cfg.web.listen_addresses, std::vector<std::string>{kDefaultListenAddress});
  // /config shows each default as the flag would be written.
  EXPECT_EQ(cfg.settings["collector.interval"].values, std::vector<std::string>{"1s"});
  EXPECT_EQ(cfg.settings["collector.interval"].source, "default");
  EXPECT_EQ(cfg.settings["xdm.backoff-max"].values, std::vector<std::string>{"30s"});
}

TEST(ConfigTest, DurationsAreParsedOnceIntoTheirOptions) {
  Config cfg;
  ASSERT_FALSE(Parse({"--collector.interval=250ms", "--hal.interval", "2s", "--kubelet.interval=1m",
                      "--collector.stale-after=5s"},
                     &cfg));
  EXPECT_EQ(cfg.xdm.interval, milliseconds(250));
  EXPECT_EQ(cfg.hal.interval, milliseconds(2000));
  EXPECT_EQ(cfg.kubelet.interval, milliseconds(60000));
  EXPECT_EQ(cfg.effective_stale_after(), milliseconds(5000));
  EXPECT_EQ(cfg.settings["collector.interval"].source, "flag");
}

TEST(ConfigTest, BadDurationsExitTwo) {
  for (const char* bad : {"--collector.interval=0s", "--hal.interval=fast", "--xdm.backoff-max=25h",
                          "--kubelet.interval=-1s"}) {
    Config cfg;
    EXPECT_EQ(Parse({bad}, &cfg), 2) << bad;
  }
}

TEST(ConfigTest, ConfigFileOverTheSizeCapIsRefused) {
  // docs/reliability.md: --config.file is capped at 1 MiB like every
  // configuration file (it was read whole by yaml-cpp before).
  const std::string path = ::testing::TempDir() + "/xpu-big-config.yml";
  {
    std::ofstream f(path);
    f << "collector.interval: 2s\n";
    f << "# " << std::string(2 << 20, 'x') << "\n";
  }
  Config cfg;
  EXPECT_EQ(Parse({"--config.file", path}, &cfg), 2);
  std::remove(path.c_str());
}

TEST(ConfigTest, PciBackendSettingsComeFromTheConfigFileToo) {
  const std::string path = ::testing::TempDir() + "/xpu-pci-config.yml";
  std::ofstream(path) << "hal: sysfs,pci\n"
                         "hal.pci:\n"
                         "  sysfs-root: /host/sys\n"
                         "  classes: [\"0x1200\", \"030200\"]\n"
                         "  vendors: 0x1ded\n";
  Config cfg;
  ASSERT_FALSE(Parse({"--config.file", path}, &cfg));
  EXPECT_EQ(cfg.hal.backend, "sysfs,pci");
  EXPECT_EQ(cfg.hal.pci_root, "/host/sys");
  EXPECT_EQ(cfg.hal.pci_classes, (std::vector<std::string>{"0x1200", "030200"}));
  EXPECT_EQ(cfg.hal.pci_vendors, std::vector<std::string>{"0x1ded"});
  EXPECT_EQ(cfg.settings["hal.pci.classes"].source, "file");
  std::ofstream(path) << "hal.pci.classes: [\"3d\"]\n";
  Config bad;
  EXPECT_EQ(Parse({"--config.file", path}, &bad), 2);  // a class of 2 digits
  std::remove(path.c_str());
}

// The API-server's bearer token is never sent in the clear unless asked for
// by name (the old code sent it to any http:// URL).
TEST(ConfigTest, AnHttpApiServerNeedsInsecureHttpSaidExplicitly) {
  Config cfg;
  cfg.kubernetes.node_name = "n";
  cfg.kubernetes.api_server = "http://10.0.0.1:8080";
  Status s = Validate(cfg);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(s.message().find("in the clear"), std::string::npos) << s.message();
  Config flags;  // and from the command line: exit 2
  EXPECT_EQ(
      Parse({"--kubernetes.node-name=n", "--kubernetes.api-server=http://10.0.0.1:8080"}, &flags),
      2);
  cfg.kubernetes.insecure_http = true;  // asked for by name: a local proxy
  EXPECT_TRUE(Validate(cfg).ok());
  Config allowed;
  ASSERT_FALSE(Parse({"--kubernetes.node-name=n", "--kubernetes.api-server=http://127.0.0.1:8001",
                      "--kubernetes.insecure-http"},
                     &allowed));
  cfg.kubernetes.insecure_http = false;
  cfg.kubernetes.api_server = "https://10.0.0.1:6443";
  EXPECT_TRUE(Validate(cfg).ok());
}

TEST(ConfigTest, ValidateNamesTheFlagAtFault) {
  const auto message = [](auto change) {
    Config cfg;
    change(cfg);
    Status s = Validate(cfg);
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
    return s.message();
  };
  EXPECT_TRUE(Validate(Config()).ok());
  EXPECT_NE(message([](Config& c) {
              c.web.listen_addresses = {"nonsense"};
            }).find("--web.listen-address"),
            std::string::npos);
  EXPECT_NE(message([](Config& c) { c.telemetry_path = "metrics"; }).find("--web.telemetry-path"),
            std::string::npos);
  EXPECT_NE(message([](Config& c) { c.telemetry_path = "/status"; }).find("shadow"),
            std::string::npos);
  EXPECT_NE(message([](Config& c) {
              c.xdm.backoff_initial = milliseconds(5000);
              c.xdm.backoff_max = milliseconds(1000);
            }).find("--xdm.backoff-max"),
            std::string::npos);
  // No daemon on this node (a hardware-only node): valid since 0.4.
  Config none;
  none.xdm.xdm_endpoint.clear();
  EXPECT_TRUE(Validate(none).ok());
}

}  // namespace
}  // namespace xpu::app

namespace xpu::app {
namespace {

// Each flag names its applier where it is registered: the restart-only ones
// are exactly these (docs/configuration.md, "Reload"), and each other one
// has a part that applies it.
TEST(ConfigTest, EveryFlagNamesWhoAppliesIt) {
  Config cfg;
  ASSERT_EQ(Parse({}, &cfg), std::nullopt);
  std::set<std::string> restart;
  std::map<std::string, std::string> live;
  for (const auto& [key, st] : cfg.settings) {
    if (NeedsRestart(key)) {
      restart.insert(key);
    } else {
      live[key] = ApplierName(AppliedBy(key));
    }
  }
  EXPECT_EQ(restart, (std::set<std::string>{"web.listen-address",
                                            "web.probe-listen-address",
                                            "web.telemetry-path",
                                            "web.max-connections",
                                            "web.probes-require-auth",
                                            "web.reserved-probe-connections",
                                            "web.head-timeout",
                                            "web.keep-alive-timeout",
                                            "web.response-timeout",
                                            "web.max-auth-checks",
                                            "web.enable-lifecycle",
                                            "xdm.endpoint",
                                            "controller.endpoint",
                                            "xdm.backoff-initial",
                                            "xdm.backoff-max",
                                            "xdm.max-message-size",
                                            "collector.max-series",
                                            "collector.max-devices",
                                            "log.format",
                                            "config.file",
                                            "config.check",
                                            "kubernetes.node-name"}));
  EXPECT_EQ(live["log.level"], "log");
  EXPECT_EQ(live["metrics.exclude"], "ingest");
  EXPECT_EQ(live["hal.interval"], "hal");
  EXPECT_EQ(live["kubelet.interval"], "kubelet");
  EXPECT_EQ(live["kubernetes.pod-labels"], "apiserver");
  EXPECT_EQ(live["web.config.file"], "web");
  EXPECT_TRUE(NeedsRestart("no.such-flag"));
}

// "--flag=" is the empty value, as "--flag ''" is, for every flag that
// takes a value: it never takes the next argument as its value (it did:
// "--kubelet.pod-resources-socket= --web.listen-address=..." listened on
// the default port). Either the empty value is taken and the next flag
// applies, or the empty value is refused naming its own flag.
TEST(ConfigTest, AnEmptyValueAfterEqualsNeverSwallowsTheNextFlag) {
  Config defaults;
  ASSERT_EQ(Parse({}, &defaults), std::nullopt);
  int taken = 0;
  for (const auto& [key, st] : defaults.settings) {
    if (key == "log.level" || key == "config.file") continue;
    Config cfg;
    ::testing::internal::CaptureStderr();
    const std::optional<int> rc = Parse({"--" + key + "=", "--log.level=debug"}, &cfg);
    const std::string err = ::testing::internal::GetCapturedStderr();
    if (!rc) {
      EXPECT_EQ(cfg.log_level, "debug") << key;
      const std::vector<std::string>& v = cfg.settings[key].values;
      // A boolean flag takes no value; every other one holds the empty one.
      if (st.values != std::vector<std::string>{"false"} &&
          st.values != std::vector<std::string>{"true"}) {
        EXPECT_TRUE(v.empty() || v == std::vector<std::string>{""})
            << key << ": " << (v.empty() ? "" : v[0]);
      }
      ++taken;
    } else {
      EXPECT_EQ(*rc, 2) << key;
      // The flag, or its group ("--kubelet.dra.*" for the DRA templates).
      const std::string group = "--" + key.substr(0, key.rfind('.')) + ".*";
      EXPECT_TRUE(err.find(key) != std::string::npos || err.find(group) != std::string::npos)
          << key << ": " << err;
      EXPECT_EQ(err.find("log.level"), std::string::npos) << key << ": " << err;
    }
  }
  EXPECT_GT(taken, 5);  // the sockets and endpoints at least
  // The issue's own case.
  Config cfg;
  ASSERT_EQ(
      Parse({"--kubelet.pod-resources-socket=", "--web.listen-address=127.0.0.1:39999"}, &cfg),
      std::nullopt);
  EXPECT_EQ(cfg.kubelet.socket, "");
  EXPECT_EQ(cfg.web.listen_addresses, std::vector<std::string>{"127.0.0.1:39999"});
}

// A reload's configuration is whole: the new live values, the running
// restart-only ones (read again by their own parsers), and the new
// restart-only values set aside, with where they came from.
TEST(ConfigTest, AReloadKeepsRestartOnlyValuesAndSetsTheNewOnesAside) {
  xpu::testing::TempDir dir;
  const std::string file = dir.File("c.yml");
  std::ofstream(file) << "web.max-connections: 8\nkubernetes.node-name: a\nlog.level: warn\n"
                         "web.enable-lifecycle: true\nxdm.devices: [1, 2]\n";
  Config running;
  ASSERT_EQ(Parse({"--config.file", file, "--web.head-timeout=3s"}, &running), std::nullopt);
  std::ofstream(file) << "web.max-connections: 9\nkubernetes.node-name: b\nlog.level: debug\n"
                         "xdm.devices: [3]\nweb.head-timeout: 1s\n";
  Config next;
  std::map<std::string, Config::Setting> pending;
  ASSERT_TRUE(Reparse(running, &next, &pending).ok());
  EXPECT_EQ(next.web.max_connections, 8);
  EXPECT_EQ(next.kubernetes.node_name, "a");
  EXPECT_TRUE(next.enable_lifecycle);  // dropped from the file: still on until a restart
  EXPECT_EQ(next.web.head_timeout, milliseconds(3000));  // the command line's, as before
  EXPECT_EQ(next.log_level, "debug");
  EXPECT_EQ(next.xdm.devices, (std::set<int32_t>{3}));
  EXPECT_EQ(next.settings.at("web.max-connections").values, std::vector<std::string>{"8"});
  EXPECT_EQ(next.settings.at("web.max-connections").source, "file");
  EXPECT_EQ(next.settings.at("web.head-timeout").source, "flag");
  ASSERT_EQ(pending.size(), 3u);
  EXPECT_EQ(pending.at("web.max-connections").values, std::vector<std::string>{"9"});
  EXPECT_EQ(pending.at("kubernetes.node-name").values, std::vector<std::string>{"b"});
  EXPECT_EQ(pending.at("web.enable-lifecycle").source, "default");
  ASSERT_TRUE(next.parsed.has_value());
  // A bad restart-only value is refused by the reload, as at start (it
  // would not wait for a restart that then exits 2).
  for (const std::string& bad :
       {std::string("web.telemetry-path: /status\n"), std::string("xdm.backoff-max: 10ms\n"),
        std::string("xdm.backoff-max: 25h\n")}) {
    std::ofstream(file) << bad;
    pending.clear();
    const Status s = Reparse(running, &next, &pending);
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << bad;
    EXPECT_EQ(s.message().rfind("--" + bad.substr(0, bad.find(':')), 0), 0u) << s.message();
  }
  // NODE_NAME read at start is kept, even when the variable changes.
  ::setenv("NODE_NAME", "from-env", 1);
  Config env_started;
  ASSERT_EQ(Parse({}, &env_started), std::nullopt);
  ::setenv("NODE_NAME", "changed", 1);
  ASSERT_TRUE(Reparse(env_started, &next, &pending).ok());
  EXPECT_EQ(next.kubernetes.node_name, "from-env");
  ::unsetenv("NODE_NAME");
  Config unset_started;
  ASSERT_EQ(Parse({}, &unset_started), std::nullopt);
  ::setenv("NODE_NAME", "appeared", 1);
  ASSERT_TRUE(Reparse(unset_started, &next, &pending).ok());
  EXPECT_EQ(next.kubernetes.node_name, "");
  ::unsetenv("NODE_NAME");
  // A Config made by hand has no settings to carry: nothing to reload.
  EXPECT_EQ(Reparse(Config(), &next, &pending).code(), Status::Code::kInvalidArgument);
  // A reload of an unchanged file sets nothing aside.
  std::ofstream(file) << "web.max-connections: 8\nkubernetes.node-name: a\n"
                         "web.enable-lifecycle: true\n";
  pending.clear();
  ASSERT_TRUE(Reparse(running, &next, &pending).ok());
  EXPECT_TRUE(pending.empty());
}

// Reparse: the same command line with the file as it is now; errors are
// values, never an exit.
TEST(ConfigTest, ReparseReadsTheFileAgainAndReportsErrors) {
  xpu::testing::TempDir dir;
  const std::string file = dir.File("c.yml");
  std::ofstream(file) << "log.level: warn\n";
  Config cfg;
  ASSERT_EQ(Parse({"--config.file", file}, &cfg), std::nullopt);
  EXPECT_EQ(cfg.log_level, "warn");
  std::ofstream(file) << "log.level: debug\nmetrics.exclude: [xpu_link_.*]\n";
  Config again;
  ASSERT_TRUE(Reparse(cfg, &again, nullptr).ok());
  EXPECT_EQ(again.log_level, "debug");
  EXPECT_EQ(again.metrics_exclude, std::vector<std::string>{"xpu_link_.*"});
  std::ofstream(file) << "log.level: [\n";
  Status s = Reparse(cfg, &again, nullptr);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(s.message().find("c.yml"), std::string::npos) << s.message();
}

TEST(ConfigTest, LoadFilesChecksTheCatalogs) {
  xpu::testing::TempDir dir;
  Config cfg;
  LoadedFiles files;
  ASSERT_TRUE(LoadFiles(cfg, &files).ok());
  EXPECT_TRUE(files.catalog && files.faults);
  cfg.hal.fault_catalog_file = dir.File("absent.yml");
  EXPECT_FALSE(LoadFiles(cfg, &files).ok());
}

// The settings that are text (regexes, templates, lists) are parsed once,
// by validation, into the types the parts take (ParsedConfig); a bad one is
// refused there, naming its flag.
TEST(ConfigTest, ValidationParsesTheTextSettingsIntoWhatThePartsTake) {
  Config cfg;
  ASSERT_EQ(Parse({"--metrics.exclude", "xpu_link_.*", "--kubernetes.pod-labels", "team",
                   "--kubelet.dra.device-names", "gpu-{minor}", "--hal.pci.vendors", "0x1ded",
                   "--hal", "pci"},
                  &cfg),
            std::nullopt);
  ASSERT_TRUE(cfg.parsed);
  const ParsedConfig& p = *cfg.parsed;
  EXPECT_FALSE(p.selection.Allows("xpu_link_up"));
  EXPECT_TRUE(p.selection.Allows("xpu_power_watts"));
  EXPECT_TRUE(p.labels.Allows("team"));
  EXPECT_FALSE(p.labels.Allows("app"));
  const std::vector<kubelet::KnownDevice> devices = {{"GPU-a", "3", ""}};
  const kubelet::KnownDevice* d = p.dra.Find("gpu-3", devices);
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->uuid, "GPU-a");
  EXPECT_EQ(p.dra.Find("xpu-3", devices), nullptr);  // the default template is replaced
  EXPECT_EQ(p.pci_filter.vendors, std::vector<uint32_t>{0x1ded});
  EXPECT_TRUE(p.hal.on("pci"));
  EXPECT_FALSE(p.hal.on("sysfs") || p.hal.automatic);
  // Each refused at start (exit 2) and by a reload, naming its flag.
  for (const auto& [flag, value, named] :
       std::vector<std::tuple<std::string, std::string, std::string>>{
           {"--metrics.exclude", "(", "--metrics.exclude"},
           {"--kubernetes.pod-labels", "(", "--kubernetes.pod-labels"},
           {"--kubelet.dra.device-names", "gpu", "--kubelet.dra."},
           {"--hal.pci.vendors", "zz", "--hal.pci.vendors"},
           {"--hal", "sysfs,bogus", "--hal:"}}) {
    Config c;
    EXPECT_EQ(Parse({flag, value}, &c), 2) << flag;
    Config running;
    running.cmdline = {flag, value};
    const Status s = Reparse(running, &c, nullptr);
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << flag;
    EXPECT_EQ(s.message().rfind(named, 0), 0u) << flag << ": " << s.message();
  }
}

}  // namespace
}  // namespace xpu::app
