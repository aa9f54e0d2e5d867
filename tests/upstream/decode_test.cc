#include "upstream/decode.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "catalog/selection.h"

namespace xpu::upstream {
namespace {

namespace api = xdm::api;

void Add(api::ExporterDataResponse* msg, int minor, uint32_t id, double v,
         const std::string& inst = "") {
  auto* d = msg->add_datalist();
  d->set_minor(minor);
  d->set_metricid(id);
  d->set_value(v);
  d->set_instance(inst);
}

TEST(DecodeTest, ScalesToBaseUnits) {
  api::ExporterDataResponse msg;
  Add(&msg, 0, 1, 50);    // 50 % -> 0.5
  Add(&msg, 0, 2, 1024);  // 1024 MiB -> bytes
  Add(&msg, 1, 7, 2500);  // 2500 mJ -> 2.5 J
  Add(&msg, 1, 14, 10, "3");
  std::vector<store::Sample> out;
  DecodeStats st;
  DecodeData(msg, *catalog::Catalog::Builtin(), false, &out, &st);
  ASSERT_EQ(out.size(), 4u);
  EXPECT_EQ(out[0].value, 0.5);
  EXPECT_EQ(out[1].value, 1024.0 * 1048576);
  EXPECT_EQ(out[2].value, 2.5);
  EXPECT_EQ(out[3].instance, "3");
}

// --metrics.include/exclude: excluded families never reach the store.
TEST(DecodeTest, ExcludedFamiliesAreDroppedAtIngest) {
  catalog::Selection sel;
  ASSERT_TRUE(
      catalog::Selection::Make({}, {"xpu_temperature_.*", "xpu_memory_used_bytes"}, &sel).ok());
  const auto cat = catalog::Catalog::Builtin();
  const auto excluded = sel.ExcludedIds(*cat);
  api::ExporterDataResponse msg;
  Add(&msg, 0, 1, 50);    // utilization: kept
  Add(&msg, 0, 2, 1024);  // memory used: excluded
  Add(&msg, 0, 4, 60);    // temperature: excluded
  std::vector<store::Sample> out;
  DecodeStats st;
  DecodeData(msg, *cat, false, &out, &st, &excluded);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].metric_id, 1u);
  EXPECT_EQ(st.excluded, 2u);
  EXPECT_EQ(st.unknown_id, 0u);
}

TEST(DecodeTest, DevicesOutsideTheSubsetAreDroppedAtIngest) {
  api::ExporterDataResponse msg;
  Add(&msg, 0, 1, 50);
  Add(&msg, 1, 1, 60);
  Add(&msg, 2, 1, 70);
  std::vector<store::Sample> out;
  DecodeStats st;
  const std::set<int32_t> devices = {1};
  DecodeData(msg, *catalog::Catalog::Builtin(), false, &out, &st, nullptr, &devices);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].minor, 1);
  EXPECT_EQ(st.excluded, 2u);
}

TEST(DecodeTest, DropsAndCountsNonFiniteNegativeCountersAndUnknownIds) {
  api::ExporterDataResponse msg;
  Add(&msg, 0, 4, std::numeric_limits<double>::quiet_NaN());
  Add(&msg, 0, 4, std::numeric_limits<double>::infinity());
  Add(&msg, 0, 6, -std::numeric_limits<double>::infinity());
  Add(&msg, 0, 7, -5);   // negative counter
  Add(&msg, 0, 6, -5);   // negative gauge is fine
  Add(&msg, 0, 999, 1);  // unknown
  std::vector<store::Sample> out;
  DecodeStats st;
  DecodeData(msg, *catalog::Catalog::Builtin(), false, &out, &st);
  EXPECT_EQ(st.invalid[InvalidReason::kNonFinite], 3u);
  EXPECT_EQ(st.invalid[InvalidReason::kNegativeCounter], 1u);
  EXPECT_EQ(st.unknown_id, 1u);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].value, -5);

  DecodeStats st2;
  DecodeData(msg, *catalog::Catalog::Builtin(), true, &out, &st2);
  ASSERT_EQ(out.size(), 2u);  // unknown kept, unscaled
  EXPECT_EQ(out[1].metric_id, 999u);
}

TEST(DecodeTest, RepairsInvalidUtf8AndOverlongInstances) {
  api::ExporterDataResponse msg;
  Add(&msg, 0, 14, 1,
      std::string("a\xff\xfe"
                  "b"));
  Add(&msg, 0, 15, 1, std::string(10000, 'x'));
  std::vector<store::Sample> out;
  DecodeStats st;
  DecodeData(msg, *catalog::Catalog::Builtin(), false, &out, &st);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].instance,
            "a\xEF\xBF\xBD\xEF\xBF\xBD"
            "b");
  EXPECT_LE(out[1].instance.size(), 256u);
  EXPECT_EQ(st.invalid[InvalidReason::kBadLabel], 2u);
}

TEST(DecodeTest, ParsesReferenceTopologyExample) {
  std::vector<store::TopologyLevel> levels;
  Status s = ParseTopology(R"({"levels":[
      {"level": 22, "name": "pointOfDelivery", "topo22": "VM-SQA-G10-P2"},
      {"level": 1,  "name": "icnLink2", "topo1": [0], "peers": [0, 3]},
      {"level": 5,  "name": "numaNodes", "topo5": [1], "peers": [0, 1, 2, 3, 8, 9, 10, 11]}]})",
                           &levels);
  ASSERT_TRUE(s.ok()) << s.message();
  ASSERT_EQ(levels.size(), 3u);
  EXPECT_EQ(levels[0].level, 1);  // sorted nearest first
  EXPECT_EQ(levels[0].group, "0");
  EXPECT_EQ(levels[0].peers, "0,3");
  EXPECT_EQ(levels[1].peers, "0,1,2,3,8,9,10,11");
  EXPECT_EQ(levels[2].group, "VM-SQA-G10-P2");
  EXPECT_EQ(levels[2].peers, "");
}

TEST(DecodeTest, RejectsMalformedTopology) {
  std::vector<store::TopologyLevel> levels;
  EXPECT_FALSE(ParseTopology("not json", &levels).ok());
  EXPECT_FALSE(ParseTopology("{}", &levels).ok());
  EXPECT_FALSE(ParseTopology(R"({"levels":[{"name":"x"}]})", &levels).ok());
  EXPECT_FALSE(ParseTopology(R"({"levels":"no"})", &levels).ok());
  EXPECT_TRUE(levels.empty());
}

TEST(DecodeTest, DevicesMergeGpuInfoAndSurviveHostileStrings) {
  api::ListAndWatchResponse law;
  auto* d = law.add_devices();
  d->set_minor(1);
  d->set_id("GPU-1");
  d->set_type(std::string(1 << 20, 'M') + "\"\\\n\xff");
  d->set_health("Healthy");
  d->set_totalmemory(1024);
  (*d->mutable_extenderresources())["topology"] = "{broken";
  auto* dup = law.add_devices();
  dup->set_minor(1);
  api::GpuInfoResponse info;
  auto* g = info.add_gpuinfos();
  g->set_minor(1);
  g->set_driverversion("1.2.3");
  DeviceDecodeStats st;
  auto devs = DecodeDevices(law, info, 1024, &st);
  ASSERT_EQ(devs.size(), 1u);
  EXPECT_EQ(devs[0].driver_version, "1.2.3");
  EXPECT_LE(devs[0].model.size(), 256u);
  EXPECT_EQ(st[InvalidReason::kBadLabel], 1u);
  EXPECT_EQ(st[InvalidReason::kBadTopology], 1u);
  EXPECT_EQ(st[InvalidReason::kDuplicateMinor], 1u);
  EXPECT_FALSE(devs[0].topology_error.empty());
}

TEST(DecodeTest, DeeplyNestedTopologyIsRejectedWithoutRecursing) {
  // 1,000,000 nested arrays (2 MB): walking them recursively overflowed the stack.
  const std::string deep = std::string(1000000, '[') + std::string(1000000, ']');
  std::vector<store::TopologyLevel> levels;
  Status s = ParseTopology(R"({"levels":[{"level":0,"topo0":)" + deep + "}]}", &levels);
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(levels.empty());
  // Within the size cap, depth alone is refused too.
  const std::string deep_small =
      std::string(kMaxTopologyDepth + 1, '[') + std::string(kMaxTopologyDepth + 1, ']');
  s = ParseTopology(R"({"levels":[{"level":0,"topo0":)" + deep_small + "}]}", &levels);
  EXPECT_NE(s.message().find("deeper"), std::string::npos) << s.message();
  // Brackets inside strings do not count.
  s = ParseTopology(R"({"levels":[{"level":0,"name":"[[[[[[[[[[[[[[[[[[[[[[[[[[\"[["}]})", &levels);
  EXPECT_TRUE(s.ok()) << s.message();
}

TEST(DecodeTest, TopologyWithTooManyLevelsIsRejected) {
  std::string json = R"({"levels":[)";
  for (size_t i = 0; i <= kMaxTopologyLevels; ++i)
    json += (i ? "," : "") + std::string(R"({"level":)") + std::to_string(i) + "}";
  json += "]}";
  std::vector<store::TopologyLevel> levels;
  EXPECT_FALSE(ParseTopology(json, &levels).ok());
}

TEST(DecodeTest, InstanceOnMetricWithoutInstanceLabelIsDroppedNotDuplicated) {
  api::ExporterDataResponse msg;
  Add(&msg, 0, 4, 40);       // temperature: no instance label in the catalog
  Add(&msg, 0, 4, 41, "7");  // would render as a second, identical series
  std::vector<store::Sample> out;
  DecodeStats st;
  DecodeData(msg, *catalog::Catalog::Builtin(), false, &out, &st);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].value, 40);
  EXPECT_EQ(st.invalid[InvalidReason::kUnexpectedInstance], 1u);
}

TEST(DecodeTest, DevicesBeyondTheCapAreDroppedAndCounted) {
  api::ListAndWatchResponse law;
  for (int m = 9; m >= 0; --m) law.add_devices()->set_minor(m);
  DeviceDecodeStats st;
  auto devs = DecodeDevices(law, {}, 4, &st);
  ASSERT_EQ(devs.size(), 4u);
  EXPECT_EQ(devs.back().minor, 3);
  EXPECT_EQ(st[InvalidReason::kDeviceCap], 6u);
}

}  // namespace
}  // namespace xpu::upstream

namespace xpu::upstream {
namespace {

// Both decoders of the same bytes: the message parsed (DecodeData) and the
// wire read as it lies (DecodeDataWire), in `wire`'s pieces.
void ExpectSameFromTheWire(const api::ExporterDataResponse& msg, const WirePieces& wire,
                           const std::unordered_set<uint32_t>* excluded = nullptr,
                           const std::set<int32_t>* devices = nullptr) {
  const auto catalog = catalog::Catalog::Builtin();
  for (bool keep_unknown : {false, true}) {
    std::vector<store::Sample> a, b;
    DecodeStats sa, sb;
    DataStamps stamps;
    DecodeData(msg, *catalog, keep_unknown, &a, &sa, excluded, devices);
    ASSERT_TRUE(
        DecodeDataWire(wire, *catalog, keep_unknown, &b, &sb, &stamps, excluded, devices).ok());
    EXPECT_EQ(a, b);
    EXPECT_TRUE(sa == sb);
    EXPECT_EQ(stamps.timestamp_ms, msg.timestampms());
    EXPECT_EQ(stamps.sequence, msg.sequence());
    EXPECT_EQ(stamps.samples, static_cast<size_t>(msg.datalist_size()));
    DataStamps quick;
    ASSERT_TRUE(ReadDataStamps(wire, &quick).ok());
    EXPECT_EQ(quick.timestamp_ms, stamps.timestamp_ms);
    EXPECT_EQ(quick.sequence, stamps.sequence);
    EXPECT_EQ(quick.samples, stamps.samples);
  }
}

api::ExporterDataResponse Varied() {
  api::ExporterDataResponse msg;
  Add(&msg, 0, 1, 50);
  Add(&msg, -3, 2, 1024);  // a negative minor: ten bytes of varint
  Add(&msg, 1, 14, 10, "3");
  Add(&msg, 1, 14, 11, std::string("\xff\n{\"", 4));
  Add(&msg, 2, 999, 1);  // unknown
  Add(&msg, 2, 7, std::numeric_limits<double>::quiet_NaN());
  Add(&msg, 2, 14, -1, "0");  // a negative counter
  Add(&msg, 3, 1, 5, "unexpected");
  msg.add_datalist();  // every field at its default
  msg.set_timestampms(-5);
  msg.set_sequence(std::numeric_limits<uint64_t>::max());
  return msg;
}

TEST(DecodeWireTest, TheWireDecodesAsTheMessageDoesInAnyPieces) {
  const api::ExporterDataResponse msg = Varied();
  const std::string bytes = msg.SerializeAsString();
  const std::string_view all(bytes);
  ExpectSameFromTheWire(msg, {all});
  const std::unordered_set<uint32_t> excluded{2};
  const std::set<int32_t> devices{1, 2};
  ExpectSameFromTheWire(msg, {all}, &excluded, &devices);
  for (size_t a = 0; a <= bytes.size(); ++a)
    for (size_t b = a; b <= bytes.size(); b += 7)
      ExpectSameFromTheWire(msg, {all.substr(0, a), all.substr(a, b - a), all.substr(b)});
  ExpectSameFromTheWire(api::ExporterDataResponse(), {});
}

// What protobuf's parser does with what a newer daemon may send: fields it
// does not know skipped, a known field on another wire type kept as
// unknown, a field twice the last one.
TEST(DecodeWireTest, UnknownFieldsRepeatedFieldsAndOtherWireTypesAsProtobufTakesThem) {
  api::ExporterDataResponse msg = Varied();
  std::string bytes = msg.SerializeAsString();
  // Unknown: field 9 varint, field 10 bytes, field 11 fixed32, a group 12.
  bytes += std::string("\x48\x05\x52\x02hi\x5d\x01\x02\x03\x04\x63\x08\x01\x64", 15);
  // sequence (3) as a fixed64, then timestampMs (2) twice.
  bytes += std::string("\x19\x01\x02\x03\x04\x05\x06\x07\x08\x10\x07\x10\x09", 13);
  // A MetricData whose minor is sent twice and carries an unknown field.
  api::MetricData extra;
  extra.set_minor(2);
  extra.set_metricid(1);
  extra.set_value(1);
  const std::string sub = std::string("\x08\x01", 2) + extra.SerializeAsString() + "\x78\x01";
  bytes += "\x0a" + std::string(1, static_cast<char>(sub.size())) + sub;
  api::ExporterDataResponse parsed;
  ASSERT_TRUE(parsed.ParseFromString(bytes));
  ASSERT_EQ(parsed.timestampms(), 9);
  ASSERT_EQ(parsed.datalist(parsed.datalist_size() - 1).minor(), 2);
  ExpectSameFromTheWire(parsed, {std::string_view(bytes)});
}

// Bytes protobuf refuses are refused: nothing decoded, nothing counted.
TEST(DecodeWireTest, BytesThatDoNotParseAreRefusedWhole) {
  const std::string good = Varied().SerializeAsString();
  const auto catalog = catalog::Catalog::Builtin();
  std::vector<std::string> bad = {
      good.substr(0, good.size() - 1),         // cut short
      good + std::string("\x00", 1),           // a tag of 0
      good + "\x0c",                           // an end-group tag with no group
      good + "\x0a\x05\x08\x01",               // a MetricData longer than what is left
      good + "\x0a\x02\x08\x01\x08",           // a MetricData cut inside a field
      good + "\x0f",                           // wire type 7
      std::string("\x0a\x03\x08\x01\x00", 5),  // a tag of 0 inside a MetricData
      // Lengths whose fifth byte is 8 or more (past 2 GiB; a 32-bit read
      // drops those bits and sees 1 or 0).
      std::string("\x22\x81\x80\x80\x80\x10\x00", 7),
      std::string("\x0a\x80\x80\x80\x80\x10", 6),
      std::string("\x0a\x07\x1a\x81\x80\x80\x80\x10\x41", 9),
      // A MetricData and its instance claiming nearly 2 GiB in 13 bytes.
      std::string("\x0a\xf0\xff\xff\xff\x07\x1a\xe0\xff\xff\xff\x07\x41", 13),
  };
  for (const std::string& b : bad) {
    api::ExporterDataResponse msg;
    ASSERT_FALSE(msg.ParseFromString(b)) << "protobuf takes it: not a case";
    DataStamps stamps;
    std::vector<store::Sample> out;
    DecodeStats st;
    EXPECT_FALSE(DecodeDataWire({std::string_view(b)}, *catalog, true, &out, &st, &stamps).ok());
    EXPECT_TRUE(out.empty());
    EXPECT_TRUE(st == DecodeStats());
  }
}

}  // namespace
}  // namespace xpu::upstream
