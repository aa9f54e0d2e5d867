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
  a.model = "PPU<810E>";
  a.xdm_healthy = true;
  a.hal_healthy = false;
  a.utilization = 0.447;
  a.memory_used_bytes = 2.0 * 1024 * 1024 * 1024;
  a.memory_total_bytes = 8.0 * 1024 * 1024 * 1024;
  a.faults.push_back({"0x1", "ECC", 5, "reset_card", "d", "reset it", true});
  store::PodAssignment pod;
  pod.uuid = "u0";
  pod.pod = "train-0";
  pod.namespace_ = "ml";
  pod.container = "main";
  pod.resource = "example.com/ppu";
  a.pods.push_back(pod);
  DeviceReport b;
  b.minor = 1;  // only data so far: nothing but its minor
  r.devices = {a, b};
  return r;
}

TEST(StatusPageTest, RendersEveryDeviceRowWithItsValuesOnTheServer) {
  const std::string h = LandingPageHtml(TwoDevices(), "/metrics");
  EXPECT_NE(h.find("<tr><td>0</td><td>PPU&lt;810E&gt;</td><td>healthy</td>"
                   "<td class=\"bad\">UNHEALTHY</td>"
                   "<td class=\"bad\">0x1 ECC [reset_card]: reset it</td><td>44.7 %</td>"
                   "<td>2.0 / 8.0 GiB</td><td>-</td><td>-</td><td>ml/train-0</td></tr>"),
            std::string::npos)
      << h;
  EXPECT_NE(h.find("<tr><td>1</td><td></td><td>-</td><td>-</td><td>none</td><td>-</td>"),
            std::string::npos)
      << h;
  EXPECT_NE(h.find("href=\"metrics\""), std::string::npos);
}

TEST(StatusPageTest, JsonSaysNullForWhatIsNotKnown) {
  const auto j = nlohmann::json::parse(StatusJson(TwoDevices()));
  EXPECT_EQ(j["version"], "1.2.3");
  EXPECT_EQ(j["devices"][0]["health"]["hal"], false);
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
