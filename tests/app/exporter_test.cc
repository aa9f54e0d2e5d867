// The wired exporter in-process, over real HTTP with libcurl, fed by a real
// xdm-sim on temporary Unix sockets.
#include "app/exporter.h"

#include <gtest/gtest.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "simulator.h"
#include "support/test_util.h"

namespace xpu::app {
namespace {

using std::chrono::milliseconds;
using xpu::testing::Gunzip;
using xpu::testing::Http;
using xpu::testing::HttpGet;
using xpu::testing::HttpPost;
using xpu::testing::WaitFor;

// xdm-sim on sockets in `dir`, pushing every 100 ms.
xdmsim::SimOptions SimIn(const xpu::testing::TempDir& dir) {
  xdmsim::SimOptions so;
  so.socket_path = dir.File("x.sock");
  so.controller_socket_path = dir.File("c.sock");
  so.interval = milliseconds(100);
  return so;
}

bool HasHeader(const xpu::testing::HttpResponse& r, const std::string& h) {
  for (const auto& line : r.headers)
    if (strncasecmp(line.c_str(), h.c_str(), h.size()) == 0) return true;
  return false;
}

class ExporterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const xdmsim::SimOptions so = SimIn(dir_);
    sim_ = std::make_unique<xdmsim::Simulator>(so);
    ASSERT_TRUE(sim_->Start().ok());
    Config cfg;
    cfg.web.listen_addresses = {"127.0.0.1:0"};
    cfg.xdm.xdm_endpoint = "unix://" + so.socket_path;
    cfg.xdm.controller_endpoint = "unix://" + so.controller_socket_path;
    cfg.xdm.interval = milliseconds(100);
    cfg.xdm.backoff_initial = milliseconds(100);
    cfg.xdm.backoff_max = milliseconds(200);
    // No HAL backend, whatever this machine has (auto would read /dev/kmsg
    // where it is readable, and a real PCI accelerator).
    cfg.hal.backend = "none";
    exporter_ = std::make_unique<Exporter>(cfg);
    Status s = exporter_->Start();
    ASSERT_TRUE(s.ok()) << s.message();
    base_ = "http://127.0.0.1:" + std::to_string(exporter_->ports().at(0));
    ASSERT_TRUE(WaitFor([&] {
      const std::string page = HttpGet(base_ + "/metrics").body;
      return page.find("xpu_link_up{minor=\"7\"") != std::string::npos &&
             page.find("xpu_device_info{minor=\"7\"") != std::string::npos;
    }));
  }
  void TearDown() override {
    exporter_->Stop();
    sim_->Stop();
  }
  xpu::testing::TempDir dir_;
  std::unique_ptr<xdmsim::Simulator> sim_;
  std::unique_ptr<Exporter> exporter_;
  std::string base_;
};

TEST_F(ExporterTest, MetricsServesTextFormatWithItsContentType) {
  auto r = HttpGet(base_ + "/metrics");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.content_type, "text/plain; version=0.0.4; charset=utf-8");
  EXPECT_NE(r.body.find("# TYPE xpu_utilization_ratio gauge\n"), std::string::npos);
  EXPECT_NE(r.body.find("xpu_exporter_upstream_mode{mode=\"stream\"} 1\n"), std::string::npos);
  EXPECT_NE(r.body.find("xpu_exporter_build_info{"), std::string::npos);
}

TEST_F(ExporterTest, MetricsIsGzippedOnlyWhenAsked) {
  auto plain = HttpGet(base_ + "/metrics");
  EXPECT_FALSE(HasHeader(plain, "Content-Encoding"));
  auto z = Http({"GET", base_ + "/metrics", "", {"Accept-Encoding: gzip"}, "", 5000});
  EXPECT_EQ(z.status, 200);
  EXPECT_TRUE(HasHeader(z, "Content-Encoding: gzip"));
  const std::string body = Gunzip(z.body);
  EXPECT_NE(body.find("# TYPE xpu_utilization_ratio gauge\n"), std::string::npos);
  EXPECT_LT(z.body.size(), body.size() / 3);
  auto refused = Http({"GET", base_ + "/metrics", "", {"Accept-Encoding: gzip;q=0"}, "", 5000});
  EXPECT_FALSE(HasHeader(refused, "Content-Encoding"));
}

TEST_F(ExporterTest, UnknownPathsAndWrongMethodsAreRefused) {
  EXPECT_EQ(HttpGet(base_ + "/nope").status, 404);
  EXPECT_EQ(HttpGet(base_ + "/metrics/extra").status, 404);
  auto r = HttpPost(base_ + "/metrics", "x");
  EXPECT_EQ(r.status, 405);
  EXPECT_TRUE(HasHeader(r, "Allow: GET, HEAD"));
  // HEAD over a raw socket: libcurl would not read a body after HEAD at all.
  const std::string head = xpu::testing::RawHttp(
      exporter_->ports().at(0), "HEAD /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  ASSERT_EQ(head.rfind("HTTP/1.1 200", 0), 0u) << head;
  const size_t end = head.find("\r\n\r\n");
  ASSERT_NE(end, std::string::npos) << head;
  // The plain page is streamed as it renders (MetricsEndpoint): chunked.
  EXPECT_NE(head.find("Transfer-Encoding: chunked\r\n"), std::string::npos) << head;
  EXPECT_EQ(head.substr(end + 4), "") << "HEAD answered with a body";
}

TEST_F(ExporterTest, ProbesAndLandingPage) {
  EXPECT_EQ(HttpGet(base_ + "/-/healthy").status, 200);
  EXPECT_EQ(HttpGet(base_ + "/-/ready").status, 200);
  auto page = HttpGet(base_ + "/");
  EXPECT_EQ(page.status, 200);
  EXPECT_EQ(page.content_type, "text/html; charset=utf-8");
  EXPECT_NE(page.body.find("href=\"metrics\""), std::string::npos);
  EXPECT_NE(page.body.find("href=\"status\""), std::string::npos);
  EXPECT_NE(page.body.find("href=\"config\""), std::string::npos);
  // Server-rendered: one row per device before any JavaScript runs.
  size_t rows = 0;
  for (size_t p = page.body.find("<tr><td>"); p != std::string::npos;
       p = page.body.find("<tr><td>", p + 1))
    ++rows;
  EXPECT_EQ(rows, 8u);
  EXPECT_NE(page.body.find("PPU-810E"), std::string::npos);
}

TEST_F(ExporterTest, StatusDescribesUpstreamHalAndEveryDevice) {
  ASSERT_TRUE(WaitFor([&] {
    auto j = nlohmann::json::parse(HttpGet(base_ + "/status").body, nullptr, false);
    return j.is_object() && j["upstream"]["xdmStatus"].is_object() &&
           j["upstream"]["controllerEnabled"].is_boolean();
  }));
  auto r = HttpGet(base_ + "/status");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.content_type, "application/json");
  auto j = nlohmann::json::parse(r.body);
  EXPECT_FALSE(j["version"].get<std::string>().empty());
  EXPECT_GT(j["uptimeSeconds"].get<double>(), 0);
  EXPECT_EQ(j["upstream"]["mode"], "stream");
  EXPECT_TRUE(j["upstream"]["modeSince"].is_string());
  EXPECT_TRUE(j["upstream"]["currentBackoffSeconds"].is_number());
  EXPECT_TRUE(j["upstream"]["secondsSinceStreamMessage"].is_number());
  EXPECT_TRUE(j["upstream"]["collectors"]["stream"]["success"].get<bool>());
  EXPECT_EQ(j["hal"]["backend"], "none");
  ASSERT_EQ(j["devices"].size(), 8u);
  const auto& d = j["devices"][3];
  EXPECT_EQ(d["minor"], 3);
  EXPECT_EQ(d["model"], "PPU-810E");
  EXPECT_EQ(d["health"]["xdm"], true);
  EXPECT_EQ(d["health"].size(), 1u) << "the HAL is off: XDM's health alone";
  EXPECT_TRUE(d["busId"].is_string());
  EXPECT_TRUE(d["faults"].is_array());
  EXPECT_TRUE(d["utilization"].is_number());
  EXPECT_TRUE(d["memoryTotalBytes"].is_number());
  EXPECT_TRUE(d["temperatureCelsius"].is_number());
  EXPECT_LT(d["secondsSinceSample"].get<double>(), 5);
  EXPECT_EQ(d["topology"].size(), 8u);
}

TEST_F(ExporterTest, ConfigShowsEffectiveSettingsWithSources) {
  ASSERT_TRUE(WaitFor([&] {
    auto j = nlohmann::json::parse(HttpGet(base_ + "/config").body, nullptr, false);
    return j.is_object() && j["xdmConfig"].is_object();
  }));
  auto r = HttpGet(base_ + "/config");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.content_type, "application/json");
  auto j = nlohmann::json::parse(r.body);
  EXPECT_EQ(j["xdmConfig"]["intervalMs"], 100);
  EXPECT_TRUE(j["webConfig"].is_null());
  EXPECT_TRUE(j["settings"].is_object());
}

TEST_F(ExporterTest, ScrapeSucceedsWhileUpstreamIsDownAndReadyFlips) {
  sim_->Stop();
  EXPECT_TRUE(WaitFor([&] { return HttpGet(base_ + "/-/ready").status == 503; }));
  auto r = HttpGet(base_ + "/metrics");
  EXPECT_EQ(r.status, 200);
  EXPECT_NE(r.body.find("xpu_exporter_upstream_up 0\n"), std::string::npos);
  EXPECT_EQ(r.body.find("xpu_utilization_ratio{"), std::string::npos);  // stale, gone
  sim_ = std::make_unique<xdmsim::Simulator>(sim_->options());
  ASSERT_TRUE(sim_->Start().ok());
  EXPECT_TRUE(
      WaitFor([&] { return HttpGet(base_ + "/-/ready").status == 200; }, std::chrono::seconds(10)));
}

// The daemon's word on a card's health is shown while it answers: once it is
// gone, /status says nothing of it (null), as the health series says nothing
// (absent), not the last answer as if it were today's.
TEST_F(ExporterTest, StatusShowsNoHealthFromADaemonThatIsGone) {
  auto xdm_health = [&] {
    auto j = nlohmann::json::parse(HttpGet(base_ + "/status").body, nullptr, false);
    return j.is_object() && j["devices"].size() == 8u ? j["devices"][3]["health"]["xdm"]
                                                      : nlohmann::json();
  };
  ASSERT_TRUE(WaitFor([&] { return xdm_health() == true; }));
  sim_->Stop();
  ASSERT_TRUE(WaitFor([&] {
    return HttpGet(base_ + "/metrics").body.find("xpu_device_health{") == std::string::npos;
  })) << "the health series outlived the daemon";
  EXPECT_TRUE(xdm_health().is_null()) << xdm_health();
}

}  // namespace
}  // namespace xpu::app

namespace xpu::app {
namespace {

// Two minors of a sysfs tree linked to one PCI function are one card: /status
// shows the faults of both on it, whichever the tree lists last, as the Node
// condition reads them (the later used to hide the earlier's fault).
TEST(ExporterStatusTest, TwoDevicesOfOneSourceOnOneCardShowBothFaults) {
  xpu::testing::TempDir dir;
  for (int minor : {0, 1}) {
    const std::string d = dir.File("hal/xpu" + std::to_string(minor));
    std::filesystem::create_directories(d);
    std::ofstream(d + "/uuid") << "UUID-" << minor << "\n";
    std::ofstream(d + "/health") << "1\n";
    std::ofstream(d + "/fault_codes") << (minor == 0 ? "0x80E18400\n" : "");
    std::filesystem::create_directory_symlink("/sys/devices/pci0000:00/0000:3b:00.0",
                                              d + "/device");
  }
  Config cfg;
  const std::string root = dir.File("hal"), none = "unix://" + dir.File("none.sock");
  const char* argv[] = {"xpu-exporter",
                        "--web.listen-address=127.0.0.1:0",
                        "--xdm.endpoint",
                        none.c_str(),
                        "--controller.endpoint=",
                        "--kubelet.pod-resources-socket=",
                        "--hal=sysfs",
                        "--hal.root",
                        root.c_str(),
                        "--hal.interval=100ms",
                        nullptr};
  ASSERT_EQ(ParseFlags(10, const_cast<char**>(argv), &cfg), std::nullopt);
  Exporter exporter(cfg);
  ASSERT_TRUE(exporter.Start().ok());
  const std::string base = "http://127.0.0.1:" + std::to_string(exporter.ports().at(0));
  nlohmann::json card;
  EXPECT_TRUE(WaitFor([&] {
    auto j = nlohmann::json::parse(HttpGet(base + "/status").body, nullptr, false);
    if (!j.is_object()) return false;
    for (const auto& d : j["devices"])
      if (d["busId"] == "0000:3b:00.0" && d["health"].contains("sysfs")) card = d;
    return card.is_object();
  }));
  ASSERT_EQ(card["faults"].size(), 1u) << card.dump();
  EXPECT_EQ(card["faults"][0]["code"], "0x80E18400");
  EXPECT_EQ(card["health"]["sysfs"], false) << card.dump();
  exporter.Stop();
}

// --hal=pci over a PCI tree in the kernel's layout: the device at xdm-sim's
// bus_id for minor 0 is exported with minor and uuid joined from XDM.
TEST(ExporterPciTest, PciBackendJoinsXdmDevicesByBusId) {
  xpu::testing::TempDir dir;
  const std::string dev = dir.path() + "/devices/pci0000:00/0000:10:00.0";
  std::filesystem::create_directories(dev);
  std::filesystem::create_directories(dir.path() + "/bus/pci/devices");
  std::filesystem::create_directory_symlink(dev, dir.path() + "/bus/pci/devices/0000:10:00.0");
  for (const auto& [file, text] :
       std::map<std::string, std::string>{{"vendor", "0x1ded\n"},
                                          {"device", "0x8000\n"},
                                          {"class", "0x120000\n"},
                                          {"current_link_speed", "16.0 GT/s PCIe\n"},
                                          {"max_link_speed", "32.0 GT/s PCIe\n"},
                                          {"current_link_width", "8\n"},
                                          {"max_link_width", "16\n"},
                                          {"power_state", "D0\n"}})
    std::ofstream(dev + "/" + file) << text;
  const xdmsim::SimOptions so = SimIn(dir);
  xdmsim::Simulator sim(so);
  ASSERT_TRUE(sim.Start().ok());
  Config cfg;
  cfg.web.listen_addresses = {"127.0.0.1:0"};
  cfg.xdm.xdm_endpoint = "unix://" + so.socket_path;
  cfg.xdm.controller_endpoint = "unix://" + so.controller_socket_path;
  cfg.xdm.interval = milliseconds(100);
  cfg.hal.backend = "pci";
  cfg.hal.pci_root = dir.path();
  cfg.hal.interval = milliseconds(100);
  Exporter exporter(cfg);
  const Status started = exporter.Start();
  ASSERT_TRUE(started.ok()) << started.message();
  const std::string url = "http://127.0.0.1:" + std::to_string(exporter.ports().at(0)) + "/metrics";
  std::string page;
  // A downtrained link (x8 of x16, Gen4 of Gen5), joined to minor 0.
  EXPECT_TRUE(WaitFor([&] {
    page = HttpGet(url).body;
    return page.find("xpu_pcie_link_width_lanes{bus_id=\"0000:10:00.0\",minor=\"0\",uuid=\"") !=
           std::string::npos;
  })) << page;
  EXPECT_NE(page.find("\",bound=\"current\"} 8\n"), std::string::npos) << page;
  EXPECT_NE(page.find("\",bound=\"max\"} 3.2e+10\n"), std::string::npos) << page;
  EXPECT_NE(page.find("xpu_pci_driver_bound{bus_id=\"0000:10:00.0\""), std::string::npos);
  EXPECT_NE(page.find("xpu_hal_pci_up 1\n"), std::string::npos);
  const auto status = nlohmann::json::parse(
      HttpGet("http://127.0.0.1:" + std::to_string(exporter.ports().at(0)) + "/status").body);
  EXPECT_EQ(status["hal"]["backend"], "pci");
  EXPECT_EQ(status["hal"]["up"], true);
  exporter.Stop();
  sim.Stop();
}

}  // namespace
}  // namespace xpu::app

namespace xpu::app {
namespace {

// Reloads (issue 14) while scrapes run: each scrape is whole, and the
// selection a reload reads is what the next scrapes show. Under TSan this is
// the check that reloads and scrapes share the parts safely.
TEST(ExporterReloadTest, ReloadsWhileScrapedChangeSelectionWithoutAFailedScrape) {
  xpu::testing::TempDir dir;
  const xdmsim::SimOptions so = SimIn(dir);
  xdmsim::Simulator sim(so);
  ASSERT_TRUE(sim.Start().ok());
  const std::string file = dir.File("exporter.yml");
  auto write = [&](const std::string& text) { std::ofstream(file) << text; };
  write("log.level: info\n");
  Config cfg;
  const char* argv[] = {"xpu-exporter",
                        "--web.listen-address=127.0.0.1:0",
                        "--web.enable-lifecycle",
                        "--hal=none",
                        "--kubelet.pod-resources-socket=",
                        "--collector.interval=100ms",
                        "--xdm.endpoint",
                        nullptr,
                        "--controller.endpoint",
                        nullptr,
                        "--config.file",
                        nullptr};
  const std::string xdm = "unix://" + so.socket_path, ctl = "unix://" + so.controller_socket_path;
  argv[7] = xdm.c_str();
  argv[9] = ctl.c_str();
  argv[11] = file.c_str();
  ASSERT_EQ(ParseFlags(12, const_cast<char**>(argv), &cfg), std::nullopt);
  Exporter exporter(cfg);
  ASSERT_TRUE(exporter.Start().ok());
  const std::string base = "http://127.0.0.1:" + std::to_string(exporter.ports().at(0));
  auto has_links = [&] {
    return HttpGet(base + "/metrics").body.find("\nxpu_link_up{") != std::string::npos;
  };
  ASSERT_TRUE(WaitFor(has_links));

  std::atomic<bool> done{false};
  std::atomic<int> ok{0}, bad{0};
  std::thread scraper([&] {
    while (!done) {
      auto r = HttpGet(base + "/metrics");
      const bool good = r.status == 200 && r.body.find("\nxpu_device_info{") != std::string::npos;
      (good ? ok : bad)++;
    }
  });
  for (int i = 0; i < 6; ++i) {
    write(i % 2 == 0 ? "metrics.exclude: ['xpu_link_.*']\n" : "log.level: info\n");
    if (i % 3 == 0) {
      ASSERT_TRUE(exporter.Reload().ok());
    } else {
      auto r = HttpPost(base + "/-/reload", "");
      ASSERT_EQ(r.status, 200) << r.body;
    }
    if (i % 2 == 0) {
      EXPECT_FALSE(has_links()) << "reload " << i;
    } else {
      EXPECT_TRUE(WaitFor(has_links)) << "reload " << i;
    }
  }
  // Many at once are served by few reloads, and every one is answered.
  std::vector<std::thread> posters;
  std::atomic<int> answered{0};
  for (int i = 0; i < 12; ++i)
    posters.emplace_back([&] { answered += HttpPost(base + "/-/reload", "").status == 200; });
  for (std::thread& t : posters) t.join();
  EXPECT_EQ(answered.load(), 12);
  write("metrics.exclude: ['(']\n");
  Status s = exporter.Reload();
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(s.message().find("metrics.exclude"), std::string::npos) << s.message();
  EXPECT_TRUE(has_links());  // the bad file changed nothing
  done = true;
  scraper.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_GT(ok.load(), 0);
  exporter.Stop();
  EXPECT_EQ(exporter.Reload().code(), Status::Code::kUnavailable);  // stopped: answered, not hung
  sim.Stop();
}

// A reload that switches a part off takes everything it exported off the
// page (before, its self-metrics stayed, frozen at their last values:
// xpu_exporter_collector_success{collector="apiserver_pods"} 1 for ever).
TEST(ExporterReloadTest, SwitchingAPartOffTakesItsMetricsOffThePage) {
  xpu::testing::TempDir dir;
  xdmsim::SimOptions so = SimIn(dir);
  so.hal_root = dir.File("hal");
  so.kubelet_socket_path = dir.File("kubelet.sock");
  xdmsim::Simulator sim(so);
  ASSERT_TRUE(sim.Start().ok());
  const std::string file = dir.File("exporter.yml");
  const std::string on =
      "hal: pci\nhal.pci.sysfs-root: " + dir.File("hal") +
      "/sys\nhal.interval: 100ms\nkubelet.pod-resources-socket: " + so.kubelet_socket_path +
      "\nkubelet.interval: 100ms\nkubernetes.node-name: node-a\n"
      "kubernetes.api-server: https://127.0.0.1:1\n";
  const std::string off =
      "hal: none\nkubelet.pod-resources-socket: ''\nkubernetes.api-server: ''\n";
  std::ofstream(file) << on;
  Config cfg;
  const std::string xdm = "unix://" + so.socket_path, ctl = "unix://" + so.controller_socket_path;
  const char* argv[] = {"xpu-exporter",
                        "--web.listen-address=127.0.0.1:0",
                        "--collector.interval=100ms",
                        "--xdm.endpoint",
                        xdm.c_str(),
                        "--controller.endpoint",
                        ctl.c_str(),
                        "--config.file",
                        file.c_str(),
                        nullptr};
  ASSERT_EQ(ParseFlags(9, const_cast<char**>(argv), &cfg), std::nullopt);
  Exporter exporter(cfg);
  ASSERT_TRUE(exporter.Start().ok());
  const std::string base = "http://127.0.0.1:" + std::to_string(exporter.ports().at(0));
  // What each part puts on the page while it runs.
  const std::vector<std::string> parts = {
      "\nxpu_hal_pci_up ",                                               // the pci sampler
      "\nxpu_pcie_link_width_lanes{",                                    // its devices
      "\nxpu_exporter_collector_success{collector=\"kubelet\"}",         // the kubelet mapper
      "\nxpu_exporter_collector_success{collector=\"apiserver_pods\"}",  // the API-server watch
      "\nxpu_kubernetes_watch_restarts_total{",
  };
  auto shown = [&](const std::string& page) {
    std::vector<std::string> out;
    for (const std::string& p : parts)
      if (page.find(p) != std::string::npos) out.push_back(p);
    return out;
  };
  ASSERT_TRUE(WaitFor([&] {
    return shown(HttpGet(base + "/metrics").body).size() == parts.size();
  })) << HttpGet(base + "/metrics").body;
  std::ofstream(file) << off;
  ASSERT_TRUE(exporter.Reload().ok());
  const std::string page = HttpGet(base + "/metrics").body;
  EXPECT_EQ(shown(page), std::vector<std::string>{});
  // XDM's own collectors stay.
  EXPECT_NE(page.find("xpu_exporter_collector_success{collector=\"stream\"}"), std::string::npos);
  // Switched on again, each part's series come back.
  std::ofstream(file) << on;
  ASSERT_TRUE(exporter.Reload().ok());
  EXPECT_TRUE(
      WaitFor([&] { return shown(HttpGet(base + "/metrics").body).size() == parts.size(); }));
  exporter.Stop();
  sim.Stop();
}

// Whether every running part holds what `cfg` (the configuration in force)
// asks of it, read from the parts themselves: a setting that reached the
// configuration but not its part fails here.
void ExpectPartsHold(const Exporter::InForce& f, const Config& cfg) {
  const ParsedConfig& p = *cfg.parsed;
  auto from_file = [](const std::shared_ptr<const hal::FaultCatalog>& c) {
    return c != nullptr && c->entries().size() == 1;  // the test's catalog has one code
  };
  EXPECT_EQ(f.hal_interval.has_value(), p.hal.on("sysfs"));
  if (f.hal_interval) {
    EXPECT_EQ(*f.hal_interval, cfg.hal.interval);
    EXPECT_EQ(f.hal_root, cfg.hal.root);
    EXPECT_EQ(from_file(f.hal_faults), !cfg.hal.fault_catalog_file.empty());
  }
  EXPECT_EQ(f.pci_interval.has_value(), p.hal.on("pci"));
  if (f.pci_interval) {
    EXPECT_EQ(*f.pci_interval, cfg.hal.interval);
    EXPECT_EQ(f.pci_root, cfg.hal.pci_root);
    EXPECT_TRUE(f.pci_filter == p.pci_filter);
    EXPECT_EQ(from_file(f.pci_faults), !cfg.hal.fault_catalog_file.empty());
  }
  EXPECT_EQ(f.kmsg.has_value(), p.hal.on("kmsg"));
  if (f.kmsg) {
    EXPECT_TRUE(*f.kmsg ==
                (hal::KmsgSampler::Options{
                    cfg.hal.kmsg_path, cfg.hal.kmsg_user_records, cfg.hal.interval,
                    cfg.hal.state_dir.empty() ? "" : cfg.hal.state_dir + "/kmsg-states.json"}));
    ASSERT_NE(f.kmsg_catalog, nullptr);
    // The test's catalog has no pattern; the built-in one has many.
    EXPECT_EQ(f.kmsg_catalog->patterns().empty(), !cfg.hal.kmsg_catalog_file.empty());
  }
  EXPECT_EQ(f.nvml.has_value(), p.hal.on("nvml"));
  if (f.nvml) {
    EXPECT_EQ(f.nvml->library, cfg.hal.nvml_library);
    EXPECT_EQ(f.nvml->host_proc, cfg.hal.nvml_host_proc);
    EXPECT_EQ(f.nvml->interval, cfg.hal.interval);
    EXPECT_EQ(f.nvml->gauge_interval, cfg.hal.gauge_interval);
    // The kernel log's catalog's words for events: the test's has no state.
    EXPECT_EQ(f.nvml->states.empty(), !cfg.hal.kmsg_catalog_file.empty());
    EXPECT_EQ(f.nvml->event_active_for,
              std::chrono::seconds(cfg.hal.kmsg_catalog_file.empty() ? 600 : 60));
    EXPECT_EQ(from_file(f.nvml_faults), !cfg.hal.fault_catalog_file.empty());
  }
  EXPECT_EQ(f.pods.has_value(), !cfg.kubelet.socket.empty());
  if (f.pods) {
    EXPECT_TRUE(*f.pods == cfg.kubelet);
  }
  EXPECT_EQ(f.watcher.has_value(), !cfg.kubernetes.api_server.empty());
  if (f.watcher) {
    EXPECT_TRUE(*f.watcher == cfg.kubernetes);
    EXPECT_EQ(f.watcher_url, cfg.kubernetes.api_server);
  }
  EXPECT_EQ(f.reporter.has_value(), !cfg.kubernetes.api_server.empty() &&
                                        (cfg.node_health.condition || cfg.node_health.events));
  if (f.reporter) {
    EXPECT_TRUE(*f.reporter_kubernetes == cfg.kubernetes);
    EXPECT_EQ(f.reporter->condition, cfg.node_health.condition);
    EXPECT_EQ(f.reporter->events, cfg.node_health.events);
    EXPECT_EQ(f.reporter->recover_hold, cfg.node_health.hold);
    // It names the backends that run.
    sinks::FaultSources running;
    for (const auto& [on, source] : {std::pair{f.hal_interval.has_value(), "sysfs"},
                                     {f.pci_interval.has_value(), "pci"},
                                     {f.kmsg.has_value(), "kmsg"},
                                     {f.nvml.has_value(), "nvml"}})
      if (on) running.insert(source);
    EXPECT_EQ(f.reporter->sources, running);
  }
  EXPECT_EQ(f.tainter.has_value(),
            !cfg.kubernetes.api_server.empty() && cfg.node_health.device_taints);
  if (f.tainter) {
    EXPECT_EQ(f.tainter->effect, cfg.node_health.taint_effect);
    EXPECT_EQ(f.tainter->evict_level, cfg.node_health.taint_evict_level.empty() ? 0 : 4);
    EXPECT_EQ(f.tainter->hold, cfg.node_health.hold);
  }
  ASSERT_NE(f.ingest.ingest, nullptr);
  const upstream::XdmClient::IngestRules& rules = *f.ingest.ingest;
  EXPECT_EQ(f.ingest.interval, cfg.xdm.interval);
  EXPECT_EQ(f.ingest.stale_after, cfg.xdm.stale_after);
  EXPECT_EQ(rules.catalog, f.store_catalog);  // one catalog, in the client and the store
  EXPECT_EQ(rules.catalog->entries().size() == 1, !cfg.catalog_file.empty());
  EXPECT_EQ(rules.excluded_ids, p.selection.ExcludedIds(*rules.catalog));
  EXPECT_EQ(rules.keep_unknown, cfg.xdm.keep_unknown);
  EXPECT_EQ(rules.devices, std::set<int32_t>(cfg.xdm.devices.begin(), cfg.xdm.devices.end()));
  EXPECT_EQ(f.web_config ? f.web_config->path : "", cfg.web_config_file);
  EXPECT_EQ(spdlog::get_level(), spdlog::level::from_str(cfg.log_level));
}

// Reload by construction (issue 24): every flag and config-file key, changed
// by a reload, is either applied by the part its registration names (the
// part then holds the new value, read from the part, and no part that owns
// none of the changed settings is rebuilt) or kept at its running value and
// shown waiting for a restart in /config. A flag added without a value here
// fails the test.
TEST(ExporterReloadTest, EveryFlagIsAppliedByItsPartOrWaitsForARestart) {
  xpu::testing::TempDir dir;
  const xdmsim::SimOptions so = SimIn(dir);
  xdmsim::Simulator sim(so);
  ASSERT_TRUE(sim.Start().ok());
  std::ofstream(dir.File("web.yml")) << "";
  std::ofstream(dir.File("token")) << "t0k3n\n";
  std::ofstream(dir.File("ca.crt")) << "";
  std::ofstream(dir.File("metrics.yml"))
      << "metrics:\n  - id: 1\n    name: xpu_utilization_ratio\n    type: gauge\n"
         "    unit: ratio\n    scale: 0.01\n    help: Busy fraction.\n";
  std::ofstream(dir.File("kmsg.records")) << "";
  std::ofstream(dir.File("other.records")) << "";
  std::ofstream(dir.File("kmsg.yml")) << "event_active_for: 1m\npatterns: []\n";
  std::ofstream(dir.File("faults.yml"))
      << "default_level: restart_card\ncodes:\n  - code: \"0x1\"\n    name: one\n"
         "    level: reset_card\n    description: One.\n    action: Reset.\n";
  // What the file holds before each change (a key changed replaces its line).
  const std::map<std::string, std::string> base = {
      {"web.listen-address", "127.0.0.1:0"},
      {"xdm.endpoint", "unix://" + so.socket_path},
      {"controller.endpoint", "unix://" + so.controller_socket_path},
      {"collector.interval", "100ms"},
      // Every part on, so that each setting's part can be read.
      {"hal", "sysfs,pci,kmsg,nvml"},
      {"hal.kmsg.path", dir.File("kmsg.records")},
      // No NVIDIA library here: the nvml part runs, blind.
      {"hal.nvml.library", dir.File("libnvidia-ml.so.1")},
      {"hal.state-dir", dir.File("state")},  // not a machine's /var/lib/xpu-exporter
      {"hal.root", dir.File("hal")},
      {"hal.pci.sysfs-root", dir.File("sys")},
      {"kubelet.pod-resources-socket", dir.File("kubelet.sock")},
      {"kubernetes.api-server", "https://127.0.0.1:1"},
      {"kubernetes.node-name", "node-a"},
      {"kubernetes.node-condition", "true"},
      {"kubernetes.device-taints", "true"},
  };
  // Each key's new value, as YAML and as /config shows it.
  struct Change {
    std::string yaml;
    std::vector<std::string> shown;
  };
  const std::string d = dir.path();
  const std::map<std::string, Change> changes = {
      {"web.config.file", {dir.File("web.yml"), {dir.File("web.yml")}}},
      {"web.enable-lifecycle", {"true", {"true"}}},
      {"web.probes-require-auth", {"true", {"true"}}},
      {"web.listen-address", {"127.0.0.1:1", {"127.0.0.1:1"}}},
      {"web.telemetry-path", {"/m", {"/m"}}},
      {"web.max-connections", {"9", {"9"}}},
      {"web.reserved-probe-connections", {"5", {"5"}}},
      {"web.probe-listen-address", {"127.0.0.1:1", {"127.0.0.1:1"}}},
      {"web.head-timeout", {"7s", {"7s"}}},
      {"web.keep-alive-timeout", {"7s", {"7s"}}},
      {"web.response-timeout", {"7s", {"7s"}}},
      {"web.max-auth-checks", {"3", {"3"}}},
      {"xdm.endpoint", {"unix://" + dir.File("other.sock"), {"unix://" + dir.File("other.sock")}}},
      {"controller.endpoint", {"''", {""}}},
      {"xdm.backoff-initial", {"2s", {"2s"}}},
      {"xdm.backoff-max", {"10s", {"10s"}}},
      {"collector.interval", {"250ms", {"250ms"}}},
      {"collector.stale-after", {"9s", {"9s"}}},
      {"collector.max-series", {"5000", {"5000"}}},
      {"collector.max-devices", {"100", {"100"}}},
      {"xdm.max-message-size", {"8192", {"8192"}}},
      {"collector.unknown-metrics", {"true", {"true"}}},
      {"xdm.devices", {"[0, 1]", {"0", "1"}}},
      {"metrics.include", {"['xpu_.*']", {"xpu_.*"}}},
      {"metrics.exclude", {"['xpu_link_.*']", {"xpu_link_.*"}}},
      {"metrics.catalog", {dir.File("metrics.yml"), {dir.File("metrics.yml")}}},
      {"hal", {"pci", {"pci"}}},
      {"hal.pci.sysfs-root", {d, {d}}},
      {"hal.pci.classes", {"['0302']", {"0302"}}},
      {"hal.pci.vendors", {"['0x10de']", {"0x10de"}}},
      {"hal.root", {d, {d}}},
      {"hal.interval", {"7s", {"7s"}}},
      {"hal.gauge-interval", {"70s", {"70s"}}},
      {"hal.fault-catalog", {dir.File("faults.yml"), {dir.File("faults.yml")}}},
      {"hal.kmsg.path", {dir.File("other.records"), {dir.File("other.records")}}},
      {"hal.kmsg.catalog", {dir.File("kmsg.yml"), {dir.File("kmsg.yml")}}},
      {"hal.kmsg.user-records", {"true", {"true"}}},
      {"hal.nvml.library", {dir.File("other-nvml.so"), {dir.File("other-nvml.so")}}},
      {"hal.nvml.host-proc", {d, {d}}},
      {"hal.state-dir", {d, {d}}},
      {"kubelet.pod-resources-socket", {dir.File("pods.sock"), {dir.File("pods.sock")}}},
      {"kubelet.interval", {"7s", {"7s"}}},
      {"kubelet.dra.drivers", {"['gpu.example.com']", {"gpu.example.com"}}},
      {"kubelet.dra.device-names", {"['xpu-{minor}']", {"xpu-{minor}"}}},
      {"kubernetes.node-name", {"node-b", {"node-b"}}},
      {"kubernetes.api-server", {"https://127.0.0.1:2", {"https://127.0.0.1:2"}}},
      {"kubernetes.insecure-http", {"true", {"true"}}},
      {"kubernetes.token-file", {dir.File("token"), {dir.File("token")}}},
      {"kubernetes.ca-file", {dir.File("ca.crt"), {dir.File("ca.crt")}}},
      {"kubernetes.pod-labels", {"['app']", {"app"}}},
      {"kubernetes.node-interval", {"7s", {"7s"}}},
      {"kubernetes.node-condition", {"false", {""}}},  // a flag off reads back empty
      {"kubernetes.events", {"true", {"true"}}},
      {"kubernetes.node-condition-hold", {"9s", {"9s"}}},
      {"kubernetes.device-taints", {"false", {""}}},
      {"kubernetes.device-taints.effect", {"None", {"None"}}},
      {"kubernetes.device-taints.evict-level", {"reset_card", {"reset_card"}}},
      {"log.level", {"debug", {"debug"}}},
      {"log.format", {"json", {"json"}}},
  };
  const std::string file = dir.File("exporter.yml");
  auto write = [&](const std::string& key, const std::string& value) {
    std::ofstream out(file);
    for (const auto& [k, v] : base)
      if (k != key) out << k << ": " << v << "\n";
    if (!key.empty()) out << key << ": " << value << "\n";
  };
  write("", "");
  Config cfg;
  std::string config_flag = "--config.file=" + file;
  const char* argv[] = {"xpu-exporter", config_flag.c_str(), nullptr};
  ASSERT_EQ(ParseFlags(2, const_cast<char**>(argv), &cfg), std::nullopt);
  // The command line's own keys cannot change: a reload parses it again.
  for (const char* key : {"config.file", "config.check"}) EXPECT_TRUE(NeedsRestart(key)) << key;
  std::set<std::string> keys, covered;
  for (const auto& [key, st] : cfg.settings)
    if (key != "config.file" && key != "config.check") keys.insert(key);
  for (const auto& [key, change] : changes) covered.insert(key);
  ASSERT_EQ(covered, keys) << "give each flag a new value here";

  Exporter exporter(cfg);
  ASSERT_TRUE(exporter.Start().ok());
  ExpectPartsHold(exporter.in_force(), *exporter.config());
  const std::string url = "http://127.0.0.1:" + std::to_string(exporter.ports().at(0)) + "/config";
  const std::string metrics =
      "http://127.0.0.1:" + std::to_string(exporter.ports().at(0)) + "/metrics";
  auto shown = [](const std::vector<std::string>& values, const std::string& key) {
    return values.size() == 1 && key != "web.listen-address" ? nlohmann::json(values[0])
                                                             : nlohmann::json(values);
  };
  for (const auto& [key, change] : changes) {
    SCOPED_TRACE(key);
    const std::shared_ptr<const Config> before = exporter.config();
    const Exporter::InForce parts_before = exporter.in_force();
    std::shared_ptr<const Config> applied_before[kApplierCount];
    for (int a = 0; a < kApplierCount; ++a) applied_before[a] = exporter.applied(Applier(a));
    write(key, change.yaml);
    const Status s = exporter.Reload();
    ASSERT_TRUE(s.ok()) << s.message();
    const nlohmann::json setting = nlohmann::json::parse(HttpGet(url).body)["settings"][key];
    const Applier by = AppliedBy(key);
    EXPECT_EQ(setting["appliedBy"], ApplierName(by));
    const std::shared_ptr<const Config> now = exporter.config();
    if (by == Applier::kRestart) {
      EXPECT_EQ(setting["reload"], "restart");
      EXPECT_EQ(setting["value"], shown(before->settings.at(key).values, key));
      ASSERT_TRUE(setting.contains("pendingRestart")) << setting.dump();
      EXPECT_EQ(setting["pendingRestart"]["value"], shown(change.shown, key));
      EXPECT_EQ(now->settings.at(key).values, before->settings.at(key).values);
      EXPECT_NE(HttpGet(metrics).body.find("\nxpu_exporter_config_restart_pending 1\n"),
                std::string::npos);
    } else {
      EXPECT_EQ(setting["reload"], "live");
      EXPECT_EQ(setting["value"], shown(change.shown, key));
      EXPECT_FALSE(setting.contains("pendingRestart")) << setting.dump();
      // Its applier ran on the configuration now in force, which has it.
      EXPECT_EQ(exporter.applied(by), now);
      EXPECT_EQ(exporter.applied(by)->settings.at(key).values, change.shown);
    }
    // No part that owns none of the changed settings was rebuilt: the same
    // objects run (and the bookkeeping agrees).
    const Exporter::InForce parts_after = exporter.in_force();
    if (by != Applier::kHal) {
      EXPECT_EQ(parts_after.hal_part, parts_before.hal_part);
      EXPECT_EQ(parts_after.pci_part, parts_before.pci_part);
      EXPECT_EQ(parts_after.kmsg_part, parts_before.kmsg_part);
      EXPECT_EQ(parts_after.nvml_part, parts_before.nvml_part);
    }
    if (by != Applier::kPods) {
      EXPECT_EQ(parts_after.pods_part, parts_before.pods_part);
    }
    if (by != Applier::kWatcher) {
      EXPECT_EQ(parts_after.watcher_part, parts_before.watcher_part);
    }
    // It names the HAL's backends and uses the API server's settings.
    if (by != Applier::kWatcher && by != Applier::kHal && by != Applier::kNodeHealth) {
      EXPECT_EQ(parts_after.reporter_part, parts_before.reporter_part);
    }
    // It also reads the kubelet's DRA names.
    if (by != Applier::kWatcher && by != Applier::kHal && by != Applier::kNodeHealth &&
        by != Applier::kPods) {
      EXPECT_EQ(parts_after.tainter_part, parts_before.tainter_part);
    }
    for (Applier other : {Applier::kWebConfig, Applier::kHal, Applier::kPods, Applier::kWatcher,
                          Applier::kNodeHealth}) {
      if (other != by) {
        EXPECT_EQ(exporter.applied(other), applied_before[static_cast<int>(other)])
            << ApplierName(other);
      }
    }
    ExpectPartsHold(exporter.in_force(), *now);
    // Back to the base: nothing waits for a restart any more.
    write("", "");
    ASSERT_TRUE(exporter.Reload().ok());
    ExpectPartsHold(exporter.in_force(), *exporter.config());
    EXPECT_FALSE(
        nlohmann::json::parse(HttpGet(url).body)["settings"][key].contains("pendingRestart"));
  }
  exporter.Stop();
  sim.Stop();
}

}  // namespace
}  // namespace xpu::app
