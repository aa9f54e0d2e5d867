#include "app/status_page.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace xpu::app {
namespace {

StatusReport TwoDevices() {
  StatusReport r;
  r.version = "1.2.3";
  DeviceReport a;
  a.minor = 0;
  a.bus_id = "0000:10:00.0";
  a.model = "PPU<810E>";
  a.xdm_healthy = true;
  a.utilization = 0.447;
  a.memory_used_bytes = 2.0 * 1024 * 1024 * 1024;
  a.memory_total_bytes = 8.0 * 1024 * 1024 * 1024;
  a.sources["sysfs"] = {false, {{"0x1", "ECC", 5, "reset_card", "d", "reset it", true}}};
  store::PodAssignment pod;
  pod.uuid = "u0";
  pod.pod = "train-0";
  pod.namespace_ = "ml";
  pod.container = "main";
  pod.resource = "example.com/ppu";
  a.pods.push_back(pod);
  DeviceReport b;
  b.minor = 1;  // only data so far: nothing but its minor
  DeviceReport c;
  c.bus_id = "0000:20:00.0";  // only the bus so far: no minor
  c.sources["pci"] = {true, {}};
  r.devices = {a, b, c};
  return r;
}

TEST(StatusPageTest, RendersEveryDeviceRowWithItsValuesOnTheServer) {
  const std::string h = LandingPageHtml(TwoDevices(), "/metrics");
  EXPECT_NE(h.find("<tr><td>0</td><td>0000:10:00.0</td><td>PPU&lt;810E&gt;</td><td>healthy</td>"
                   "<td class=\"bad\">sysfs: UNHEALTHY</td>"
                   "<td class=\"bad\">0x1 ECC [reset_card, sysfs]: reset it</td><td>44.7 %</td>"
                   "<td>2.0 / 8.0 GiB</td><td>-</td><td>-</td><td>ml/train-0</td></tr>"),
            std::string::npos)
      << h;
  EXPECT_NE(h.find("<tr><td>1</td><td></td><td></td><td>-</td><td>-</td><td>none</td><td>-</td>"),
            std::string::npos)
      << h;
  EXPECT_NE(h.find("<tr><td>-</td><td>0000:20:00.0</td><td></td><td>-</td><td>pci: healthy</td>"),
            std::string::npos)
      << h;
  EXPECT_NE(h.find("href=\"metrics\""), std::string::npos);
}

TEST(StatusPageTest, JsonSaysNullForWhatIsNotKnown) {
  const auto j = nlohmann::json::parse(StatusJson(TwoDevices()));
  EXPECT_EQ(j["version"], "1.2.3");
  EXPECT_EQ(j["devices"][0]["health"]["sysfs"], false);
  EXPECT_EQ(j["devices"][0]["busId"], "0000:10:00.0");
  EXPECT_EQ(j["devices"][0]["faults"][0]["source"], "sysfs");
  EXPECT_TRUE(j["devices"][2]["minor"].is_null()) << "a card no layer names by a minor";
  EXPECT_EQ(j["devices"][2]["health"]["pci"], true);
  EXPECT_EQ(j["devices"][0]["faults"][0]["levelValue"], 5);
  EXPECT_EQ(j["devices"][0]["pods"][0]["namespace"], "ml");
  EXPECT_TRUE(j["devices"][1]["health"]["xdm"].is_null());
  EXPECT_TRUE(j["devices"][1]["utilization"].is_null());
  EXPECT_TRUE(j["devices"][1]["pods"].is_array());
  EXPECT_TRUE(j["upstream"]["xdmStatus"].is_null());
  EXPECT_EQ(j["hal"]["backend"], "none");
}

}  // namespace
}  // namespace xpu::app
