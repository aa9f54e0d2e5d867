// Allocate/Release against the reference's rules (section 3.3), with the
// reference's own JSON request examples parsed into the proto.
#include <google/protobuf/util/json_util.h>

#include "sim_fixture.h"

namespace xdmsim {
namespace {

namespace api = xdm::api;

class AllocateTest : public SimFixture {
 protected:
  api::AllocateResponse Allocate(const std::string& json) {
    api::AllocateRequest req;
    auto st = google::protobuf::util::JsonStringToMessage(json, &req);
    EXPECT_TRUE(st.ok()) << st.ToString();
    grpc::ClientContext ctx;
    Deadline(&ctx);
    api::AllocateResponse resp;
    EXPECT_TRUE(xdm_->Allocate(&ctx, req, &resp).ok());
    return resp;
  }
  api::ReleaseResponse Release(const std::string& id) {
    api::ReleaseRequest req;
    req.set_id(id);
    grpc::ClientContext ctx;
    Deadline(&ctx);
    api::ReleaseResponse resp;
    EXPECT_TRUE(xdm_->Release(&ctx, req, &resp).ok());
    return resp;
  }
  // Expects a rejection whose message contains `needle`.
  void ExpectRejected(const std::string& json, const std::string& needle) {
    api::AllocateResponse r = Allocate(json);
    EXPECT_NE(r.status(), 0) << json;
    EXPECT_NE(r.message().find(needle), std::string::npos) << r.message();
    EXPECT_EQ(r.devices_size(), 0);
  }
};

class AllocateMigTest : public AllocateTest {
  void SetUp() override { StartSim("A100-SXM4-80GB"); }
};

TEST_F(AllocateTest, AcceptsReferenceWholeCardExample) {
  auto r = Allocate(
      R"({ "id": "550e8400-e29b-41d4-a716-446655440000", "devices": [{ "minor": 1 }, { "minor": 2 }] })");
  EXPECT_EQ(r.status(), 0) << r.message();
  EXPECT_EQ(r.message(), "");
  ASSERT_EQ(r.devices_size(), 2);
  EXPECT_EQ(r.devices(0).minor(), 1);
  EXPECT_EQ(r.devices(1).minor(), 2);
  EXPECT_EQ(r.envs().at("XPU_VISIBLE_DEVICES"), "1,2");
  // A whole card is exclusive until released.
  ExpectRejected(R"({"id":"b","devices":[{"minor":1,"core":10}]})", "allocated whole");
  auto rel = Release("550e8400-e29b-41d4-a716-446655440000");
  EXPECT_EQ(rel.status(), 0);
  EXPECT_EQ(rel.message(), "");
  EXPECT_EQ(Allocate(R"({"id":"b","devices":[{"minor":1,"core":10}]})").status(), 0);
}

TEST_F(AllocateTest, AcceptsReferenceTimeSharingExample) {
  auto r = Allocate(
      R"({ "id": "550e8400-e29b-41d4-a716-446655440001", "devices": [{ "minor": 1, "core": 50, "memory": 4 }] })");
  EXPECT_EQ(r.status(), 0) << r.message();
  ASSERT_EQ(r.devices_size(), 1);
  EXPECT_EQ(r.devices(0).core(), 50u);
  EXPECT_EQ(r.devices(0).memory(), 4u);
  // A second 50% share fits, a third does not.
  EXPECT_EQ(Allocate(R"({"id":"x2","devices":[{"minor":1,"core":50}]})").status(), 0);
  ExpectRejected(R"({"id":"x3","devices":[{"minor":1,"core":1}]})", "not enough compute");
}

TEST_F(AllocateMigTest, AcceptsReferenceMigExample) {
  auto r = Allocate(
      R"({ "id": "550e8400-e29b-41d4-a716-446655440004", "devices": [{ "minor": 1, "slice": 3, "memory": 4 }] })");
  EXPECT_EQ(r.status(), 0) << r.message();
  ASSERT_EQ(r.devices_size(), 1);
  EXPECT_EQ(r.devices(0).slice(), 3u);
}

TEST_F(AllocateTest, RejectsCoreAbove100) {
  ExpectRejected(R"({"id":"a","devices":[{"minor":1,"core":101}]})",
                 "core 101 out of range: 0 (no limit) or 1..100");
}

TEST_F(AllocateMigTest, RejectsSliceFive) {
  ExpectRejected(R"({"id":"a","devices":[{"minor":1,"slice":5}]})",
                 "slice 5 invalid: must be 1, 2, 3, 4 or 7");
}

TEST_F(AllocateTest, RejectsSliceOnNonMigModel) {
  ExpectRejected(R"({"id":"a","devices":[{"minor":1,"slice":3}]})",
                 "MIG partitioning is not supported on PPU-810E");
}

TEST_F(AllocateTest, RejectsMixedDevices) {
  ExpectRejected(
      R"({"id":"a","devices":[{"minor":1,"core":50,"memory":4},{"minor":2,"core":20,"memory":4}]})",
      "devices[1] differs from devices[0]");
}

TEST_F(AllocateTest, RejectsUnknownMinor) {
  ExpectRejected(R"({"id":"a","devices":[{"minor":42}]})", "devices[0].minor 42: no such device");
}

TEST_F(AllocateTest, RejectsEmptyAndDuplicateIds) {
  ExpectRejected(R"({"devices":[{"minor":1}]})", "id must not be empty");
  EXPECT_EQ(Allocate(R"({"id":"dup","devices":[{"minor":1,"core":10}]})").status(), 0);
  ExpectRejected(R"({"id":"dup","devices":[{"minor":2}]})", "already exists");
}

TEST_F(AllocateTest, RejectsMemoryBeyondTheCard) {
  ExpectRejected(R"({"id":"a","devices":[{"minor":1,"memory":97}]})",
                 "memory 97 GiB exceeds the card's 96 GiB");
}

TEST_F(AllocateTest, AssignsMinorWhenEmpty) {
  auto a = Allocate(R"({"id":"a","devices":[{},{}]})");
  ASSERT_EQ(a.status(), 0) << a.message();
  ASSERT_EQ(a.devices_size(), 2);
  EXPECT_EQ(a.devices(0).minor(), 0);
  EXPECT_EQ(a.devices(1).minor(), 1);
  // Those two are whole and taken: the next auto pick skips them.
  auto b = Allocate(R"({"id":"b","devices":[{"core":30}]})");
  ASSERT_EQ(b.status(), 0) << b.message();
  EXPECT_EQ(b.devices(0).minor(), 2);
}

TEST_F(AllocateTest, ReleaseOfUnknownIdIsAnError) {
  auto r = Release("nope");
  EXPECT_NE(r.status(), 0);
  EXPECT_NE(r.message().find("not found"), std::string::npos);
}

TEST_F(AllocateTest, AnnotationsAreEchoed) {
  auto r = Allocate(R"({"id":"a","devices":[{"minor":3}],"annotations":{"k":"v"}})");
  EXPECT_EQ(r.annotations().at("k"), "v");
}

}  // namespace
}  // namespace xdmsim
