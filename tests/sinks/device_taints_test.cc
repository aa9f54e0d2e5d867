// The pure half of the device taints (sinks/device_taints.h): what a
// ResourceSlice says, which device names a card, what a card's views ask
// for, and the names and objects written.
#include "sinks/device_taints.h"

#include <gtest/gtest.h>

#include <regex>

namespace xpu::sinks {
namespace {

using Json = nlohmann::json;

// The devices as a vector: a braced list of one json would be that json,
// not an array of it, with some compilers.
Json SliceJson(const std::string& name, const std::string& pool, int generation, int count,
               std::vector<Json> devices) {
  return {{"metadata", {{"name", name}}},
          {"spec",
           {{"driver", "gpu.example.com"},
            {"pool", {{"name", pool}, {"generation", generation}, {"resourceSliceCount", count}}},
            {"devices", std::move(devices)}}}};
}

Json Dev(const std::string& name, const std::string& bus, const std::string& uuid = "",
         const std::string& uuid_key = "uuid") {
  Json attrs = Json::object();
  if (!bus.empty()) attrs["resource.kubernetes.io/pciBusID"] = {{"string", bus}};
  if (!uuid.empty()) attrs[uuid_key] = {{"string", uuid}};
  return {{"name", name}, {"attributes", attrs}};
}

Slice Parsed(const Json& j) {
  Slice s;
  EXPECT_TRUE(ParseSlice(j, &s).ok()) << j.dump();
  return s;
}

store::InventoryDevice CardAt(const std::string& bus, int32_t minor = -1,
                              const std::string& uuid = "") {
  store::InventoryDevice d;
  d.key = bus.empty() ? "uuid/" + uuid : bus;
  d.bus_id = bus;
  d.minor = minor;
  d.uuid = uuid;
  return d;
}

kubelet::DraRule Rule_(std::vector<std::string> drivers = {},
                       std::vector<std::string> names = {"{uuid}", "xpu-{minor}"}) {
  kubelet::DraRule r;
  EXPECT_TRUE(kubelet::DraRule::Make(drivers, names, &r).ok());
  return r;
}

TEST(DeviceTaintsTest, ASliceKeepsItsPoolAndTheAttributesThatNameACard) {
  const Slice s = Parsed(SliceJson("s1", "node-a", 3, 2,
                                   {Dev("gpu-0", "0000:3B:00.0", "GPU-a"),
                                    Dev("gpu-1", "", "GPU-b", "gpu.example.com/uuid"),
                                    {{"attributes", Json::object()}}}));
  EXPECT_EQ(s.driver, "gpu.example.com");
  EXPECT_EQ(s.pool, "node-a");
  EXPECT_EQ(s.generation, 3);
  EXPECT_EQ(s.slice_count, 2);
  ASSERT_EQ(s.devices.size(), 2u);  // a device without a name is none a rule can select
  EXPECT_EQ(s.devices[0].pci_bus_id, "0000:3b:00.0");
  EXPECT_EQ(s.devices[0].uuid, "GPU-a");
  EXPECT_EQ(s.devices[1].uuid, "GPU-b");  // qualified by the driver's own domain

  Slice bad;
  EXPECT_FALSE(ParseSlice(Json{{"metadata", {{"name", "x"}}}}, &bad).ok());
  EXPECT_FALSE(ParseSlice(Json::array(), &bad).ok());
  std::vector<Json> many;
  for (size_t i = 0; i <= kMaxSliceDevices; ++i) many.push_back(Dev("d" + std::to_string(i), ""));
  EXPECT_FALSE(ParseSlice(SliceJson("s", "p", 1, 1, many), &bad).ok());
}

TEST(DeviceTaintsTest, ACardIsNamedByItsAddressThenItsNameThenItsUuid) {
  std::map<std::string, Slice> slices;
  slices["a"] = Parsed(
      SliceJson("a", "node-a", 1, 1,
                {Dev("gpu-0", "0000:3b:00.0"), Dev("xpu-1", ""), Dev("other", "", "GPU-2")}));
  const SliceIndex index(slices);
  std::string why;
  auto d = index.Find(CardAt("0000:3b:00.0", 0), Rule_(), &why);
  ASSERT_TRUE(d.has_value()) << why;
  EXPECT_EQ(d->device, "gpu-0");
  d = index.Find(CardAt("0000:5e:00.0", 1), Rule_(), &why);
  ASSERT_TRUE(d.has_value()) << why;
  EXPECT_EQ(d->device, "xpu-1");
  d = index.Find(CardAt("0000:86:00.0", 2, "GPU-2"), Rule_(), &why);
  ASSERT_TRUE(d.has_value()) << why;
  EXPECT_EQ(d->device, "other");
  // A template names only devices of a driver the rule matches.
  EXPECT_FALSE(index.Find(CardAt("0000:5e:00.0", 1), Rule_({"nvidia\\.com"}), &why).has_value());
  EXPECT_FALSE(index.Find(CardAt("0000:af:00.0", 3), Rule_(), &why).has_value());
  EXPECT_NE(why.find("names it"), std::string::npos) << why;
}

// A device whose own pciBusID names another card is never this card's by
// its name or uuid: a driver that dropped a faulted card from its slices and
// numbered the rest again ("xpu-1" now the card at 5e) would have the
// faulted card's taint written on a healthy card's device.
TEST(DeviceTaintsTest, ADeviceThatNamesAnotherAddressIsNotACardsByNameOrUuid) {
  std::map<std::string, Slice> slices;
  slices["a"] = Parsed(SliceJson(
      "a", "node-a", 1, 1,
      {Dev("xpu-0", "0000:3b:00.0"), Dev("xpu-1", "0000:5e:00.0", "GPU-B"), Dev("xpu-2", "")}));
  const SliceIndex index(slices);
  std::string why;
  EXPECT_FALSE(index.Find(CardAt("0000:86:00.0", 1), Rule_(), &why).has_value())
      << "xpu-1 is 0000:5e:00.0's";
  EXPECT_FALSE(index.Find(CardAt("0000:86:00.0", 3, "GPU-B"), Rule_(), &why).has_value())
      << "by uuid neither";
  // A device that names no address is still found by its name, and a card
  // with no address by any device's.
  auto d = index.Find(CardAt("0000:86:00.0", 2), Rule_(), &why);
  ASSERT_TRUE(d.has_value()) << why;
  EXPECT_EQ(d->device, "xpu-2");
  d = index.Find(CardAt("", 1, "GPU-X"), Rule_(), &why);
  ASSERT_TRUE(d.has_value()) << why;
  EXPECT_EQ(d->device, "xpu-1");
}

TEST(DeviceTaintsTest, TwoDevicesNamingOneCardNameNone) {
  std::map<std::string, Slice> slices;
  slices["a"] =
      Parsed(SliceJson("a", "p", 1, 1, {Dev("g0", "0000:3b:00.0"), Dev("g1", "3b:00.0")}));
  std::string why;
  EXPECT_FALSE(SliceIndex(slices).Find(CardAt("0000:3b:00.0"), Rule_(), &why).has_value());
  EXPECT_NE(why.find("2 devices"), std::string::npos) << why;
}

TEST(DeviceTaintsTest, APoolsNewestGenerationWinsAndAMissingSliceIsSaid) {
  std::map<std::string, Slice> slices;
  slices["old"] = Parsed(SliceJson("old", "p", 1, 1, {Dev("old-0", "0000:3b:00.0")}));
  slices["new-1"] = Parsed(SliceJson("new-1", "p", 2, 2, {Dev("new-0", "0000:3b:00.0")}));
  const SliceIndex index(slices);
  std::string why;
  auto d = index.Find(CardAt("0000:3b:00.0"), Rule_(), &why);
  ASSERT_TRUE(d.has_value()) << why;
  EXPECT_EQ(d->device, "new-0");
  EXPECT_FALSE(index.Has({"gpu.example.com", "p", "old-0"}));
  ASSERT_EQ(index.incomplete().size(), 1u);  // 1 of its 2 slices
  EXPECT_FALSE(index.Find(CardAt("0000:5e:00.0"), Rule_(), &why).has_value());
  EXPECT_NE(why.find("incomplete"), std::string::npos) << why;
  slices["new-2"] = Parsed(SliceJson("new-2", "p", 2, 2, {Dev("new-1", "0000:5e:00.0")}));
  EXPECT_TRUE(SliceIndex(slices).incomplete().empty());
}

TEST(DeviceTaintsTest, RuleNamesAreValidBoundedAndTellDevicesApart) {
  const std::regex subdomain("[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*");
  const std::string long_node = std::string(240, 'n') + ".example.com";
  const std::string long_dev(63, 'd');
  std::set<std::string> names;
  for (const std::string& node : {std::string("node-a"), long_node, std::string("Node_A")}) {
    for (const char* pool : {"p1", "p2"}) {
      for (const std::string& dev : {std::string("gpu-0"), long_dev, std::string("-")}) {
        const std::string n = RuleName(node, {"gpu.example.com", pool, dev});
        EXPECT_LE(n.size(), 253u) << n;
        EXPECT_TRUE(std::regex_match(n, subdomain)) << n;
        names.insert(n);
      }
    }
  }
  EXPECT_EQ(names.size(), 18u);
  EXPECT_EQ(RuleName("node-a", {"d", "p", "gpu-0"}).rfind("node-a.gpu-0-", 0), 0u);
}

TEST(DeviceTaintsTest, NodeLabelValuesAreLabelValues) {
  const std::regex value("([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]");
  EXPECT_EQ(NodeLabelValue("node-a"), "node-a");
  const std::string long_node = std::string(100, 'n') + ".example.com";
  for (const std::string& node : {long_node, std::string("UPPER.case"), std::string("a_b")}) {
    const std::string v = NodeLabelValue(node);
    EXPECT_LE(v.size(), 63u) << v;
    EXPECT_TRUE(std::regex_match(v, value)) << v;
  }
  EXPECT_NE(NodeLabelValue(long_node), NodeLabelValue(long_node + "x"));
}

TEST(DeviceTaintsTest, ARuleReadBackIsOursOnlyWithOurLabelsAndThisNode) {
  Rule r;
  r.name = RuleName("node-a", {"drv", "pool", "gpu-1"});
  r.device = {"drv", "pool", "gpu-1"};
  r.value = "reset_card";
  r.effect = "NoSchedule";
  r.bus_id = "0000:3b:00.0";
  const Json body = Json::parse(RuleBody("v1beta2", "node-a", r));
  EXPECT_EQ(body["apiVersion"], "resource.k8s.io/v1beta2");
  EXPECT_FALSE(body["metadata"].contains("resourceVersion"));
  Rule back;
  ASSERT_TRUE(ParseRule(body, "node-a", &back).ok());
  EXPECT_TRUE(back.ours);
  EXPECT_EQ(back.device, r.device);
  EXPECT_EQ(back.value, r.value);
  EXPECT_EQ(back.effect, r.effect);
  EXPECT_EQ(back.bus_id, r.bus_id);
  ASSERT_TRUE(ParseRule(body, "node-b", &back).ok());
  EXPECT_FALSE(back.ours);  // another node's exporter's
  Json theirs = body;
  theirs["metadata"]["labels"].erase("app.kubernetes.io/managed-by");
  ASSERT_TRUE(ParseRule(theirs, "node-a", &back).ok());
  EXPECT_FALSE(back.ours);
}

store::SourceView View(const std::string& source, store::Sight sight,
                       std::vector<store::SourceView::Device> devices) {
  store::SourceView v;
  v.source = source;
  v.sight = sight;
  v.devices = std::move(devices);
  return v;
}

store::SourceView::Device Seen(const std::string& key, std::vector<store::ActiveFault> faults = {},
                               bool seen = true, std::optional<bool> healthy = true) {
  store::SourceView::Device d;
  d.key = key;
  d.bus_id = key;
  d.seen = seen;
  d.healthy = healthy;
  d.faults = std::move(faults);
  return d;
}

store::ActiveFault LevelFault(int level, const std::string& name) {
  store::ActiveFault f;
  f.code = "0x" + std::to_string(level);
  f.level = level;
  f.level_name = name;
  return f;
}

TEST(DeviceTaintsTest, AVerdictIsTheWorstSeenFaultAndUnknownWhereASourceCannotSee) {
  const std::vector<store::InventoryDevice> cards = {CardAt("a"), CardAt("b"), CardAt("c"),
                                                     CardAt("d")};
  auto v = VerdictsOf({View("pci", store::Sight::kSeeing,
                            {Seen("a", {LevelFault(4, "reset_card"), LevelFault(2, "restart_job")}),
                             Seen("b"), Seen("c", {}, false), Seen("d", {}, true, false)}),
                       View("kmsg", store::Sight::kSeeing,
                            {Seen("a", {LevelFault(6, "isolate_card")}), Seen("b")})},
                      cards);
  ASSERT_EQ(v.size(), 4u);
  EXPECT_EQ(v[0].level, 6);
  EXPECT_EQ(v[0].level_name, "isolate_card");
  EXPECT_EQ(v[1].level, 0);
  EXPECT_TRUE(v[1].known);
  EXPECT_FALSE(v[2].known);                            // not seen by a source that covers it
  EXPECT_EQ(v[3].level, store::kUnhealthyFaultLevel);  // its own health bit
  // A blind source: its faults are no evidence, and every card is unknown.
  v = VerdictsOf({View("pci", store::Sight::kSeeing, {Seen("a"), Seen("b")}),
                  View("nvml", store::Sight::kBlind, {Seen("a", {LevelFault(6, "isolate_card")})})},
                 {CardAt("a"), CardAt("b")});
  EXPECT_EQ(v[0].level, 0);
  EXPECT_FALSE(v[0].known);
  EXPECT_TRUE(v[1].known);
  v = VerdictsOf({View("pci", store::Sight::kSeeing, {Seen("a"), Seen("b")}),
                  View("nvml", store::Sight::kNotYet, {})},
                 {CardAt("a"), CardAt("b")});
  EXPECT_FALSE(v[0].known);
  EXPECT_FALSE(v[1].known);
  // A fault seen beside a blind source: that level at least, not known
  // whole (the blind one may have seen worse).
  v = VerdictsOf({View("pci", store::Sight::kSeeing, {Seen("a", {LevelFault(4, "reset_card")})}),
                  View("nvml", store::Sight::kBlind, {Seen("a", {LevelFault(6, "isolate_card")})})},
                 {CardAt("a")});
  EXPECT_EQ(v[0].level, 4);
  EXPECT_FALSE(v[0].known);
  // A stale source is no evidence either.
  v = VerdictsOf({View("pci", store::Sight::kSeeing, {Seen("a"), Seen("b")}),
                  View("sysfs", store::Sight::kStale, {Seen("a"), Seen("b")})},
                 {CardAt("a"), CardAt("b")});
  EXPECT_FALSE(v[0].known);
  EXPECT_FALSE(v[1].known);
  // No source at all: nothing is known.
  v = VerdictsOf({}, {CardAt("a")});
  EXPECT_FALSE(v[0].known);
  // A card no source that sees covers: not known healthy.
  v = VerdictsOf({View("pci", store::Sight::kSeeing, {Seen("a")})}, {CardAt("a"), CardAt("b")});
  EXPECT_TRUE(v[0].known);
  EXPECT_FALSE(v[1].known);
}

TEST(DeviceTaintsTest, EffectsAndVersions) {
  EXPECT_EQ(EffectOf(3, "NoSchedule", 0), "NoSchedule");
  EXPECT_EQ(EffectOf(6, "NoSchedule", 0), "NoSchedule");
  EXPECT_EQ(EffectOf(6, "NoSchedule", 5), "NoExecute");
  EXPECT_EQ(EffectOf(4, "NoSchedule", 5), "NoSchedule");
  EXPECT_EQ(EffectOf(6, "None", 5), "None");
  EXPECT_FALSE(VersionHasEffect("v1alpha3", "None"));
  EXPECT_TRUE(VersionHasEffect("v1beta2", "None"));
  bool has = false;
  ASSERT_TRUE(ListsResource(R"({"kind":"APIResourceList","resources":[{"name":"resourceslices"},
      {"name":"devicetaintrules"},{"name":"devicetaintrules/status"}]})",
                            "devicetaintrules", &has)
                  .ok());
  EXPECT_TRUE(has);
  ASSERT_TRUE(
      ListsResource(R"({"resources":[{"name":"resourceslices"}]})", "devicetaintrules", &has).ok());
  EXPECT_FALSE(has);
  EXPECT_FALSE(ListsResource("<html>", "devicetaintrules", &has).ok());
}

}  // namespace
}  // namespace xpu::sinks
