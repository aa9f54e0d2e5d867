// HAMi's annotation protocol: the scheduler's grants per container and the
// device plugin's node register, in the forms HAMi writes and broken ones.
#include "kubernetes/hami.h"

#include <gtest/gtest.h>

namespace xpu::kubernetes::hami {
namespace {

TEST(HamiTest, AnnotationKeys) {
  EXPECT_TRUE(IsAllocatedAnnotation("hami.io/vgpu-devices-allocated"));
  EXPECT_TRUE(IsAllocatedAnnotation("hami.io/mlu-devices-allocated"));
  EXPECT_FALSE(IsAllocatedAnnotation("hami.io/vgpu-devices-to-allocate"));
  EXPECT_FALSE(IsAllocatedAnnotation("hami.io/-devices-allocated"));
  EXPECT_TRUE(IsRegisterAnnotation("hami.io/node-nvidia-register"));
  EXPECT_FALSE(IsRegisterAnnotation("hami.io/node-handshake-nvidia"));
}

TEST(HamiTest, GrantsPerContainerInOrder) {
  std::vector<std::vector<Grant>> got;
  ASSERT_TRUE(
      ParseAllocated("GPU-a,NVIDIA,1000,30:GPU-b,NVIDIA,2000,0:;;GPU-c,NVIDIA,500,100:;", &got)
          .ok());
  ASSERT_EQ(got.size(), 3u);
  ASSERT_EQ(got[0].size(), 2u);
  EXPECT_EQ(got[0][0], (Grant{"GPU-a", "NVIDIA", 1000, 30}));
  EXPECT_EQ(got[0][1], (Grant{"GPU-b", "NVIDIA", 2000, 0}));
  EXPECT_TRUE(got[1].empty());  // a container without devices
  EXPECT_EQ(got[2][0].cores, 100);
  ASSERT_TRUE(ParseAllocated("", &got).ok());
  EXPECT_TRUE(got.empty());
}

TEST(HamiTest, BadGrantsAreRefusedWhole) {
  std::vector<std::vector<Grant>> got = {{Grant{"keep", "", 1, 1}}};
  for (const char* bad : {"GPU-a,NVIDIA,1000:", "GPU-a,NVIDIA,-5,30:", "GPU-a,NVIDIA,1e3,30:",
                          ",NVIDIA,1,1:", "GPU-a,NVIDIA,1,1,extra:", "GPU-a,NVIDIA,1,99999999:"})
    EXPECT_FALSE(ParseAllocated(bad, &got).ok()) << bad;
  EXPECT_EQ(got[0][0].uuid, "keep");  // nothing returned on error
  std::string many;
  for (int i = 0; i < 65; ++i) many += "G,T,1,1:;";
  EXPECT_FALSE(ParseAllocated(many, &got).ok());  // > kMaxContainers
  EXPECT_FALSE(ParseAllocated(std::string(kMaxAnnotationBytes + 1, 'x'), &got).ok());
}

TEST(HamiTest, RegisterInBothForms) {
  std::vector<Registered> got;
  ASSERT_TRUE(ParseRegister("GPU-a,10,32768,100,NVIDIA-Tesla V100-PCIE-32GB,0,true:"
                            "GPU-b,4,16384,50,NVIDIA-T4,1,false:",
                            &got)
                  .ok());
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0], (Registered{"GPU-a", 10, 32768, 100, "NVIDIA-Tesla V100-PCIE-32GB", true}));
  EXPECT_FALSE(got[1].healthy);
  ASSERT_TRUE(ParseRegister(R"([{"id":"GPU-c","count":8,"devmem":81920,"devcore":100,)"
                            R"("type":"NVIDIA-H800","numa":0,"health":true,"index":0}])",
                            &got)
                  .ok());
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0], (Registered{"GPU-c", 8, 81920, 100, "NVIDIA-H800", true}));
}

TEST(HamiTest, BadRegisterIsRefused) {
  std::vector<Registered> got;
  for (const char* bad :
       {"GPU-a,10,32768,100,T,0,yes:", "GPU-a,ten,1,1,T,0,true:", "GPU-a,10,1,1:",
        "[{\"count\":1}]", "[{\"id\":\"x\",\"count\":-1}]", "[not json", "{\"id\":\"x\"}"})
    EXPECT_FALSE(ParseRegister(bad, &got).ok()) << bad;
}

TEST(HamiTest, HostileTextBecomesBoundedValidLabels) {
  std::vector<std::vector<Grant>> got;
  const std::string uuid(1000, 'u');
  ASSERT_TRUE(ParseAllocated(uuid + ",\xff\xfe,1,1:", &got).ok());
  EXPECT_LE(got[0][0].uuid.size(), kMaxFieldBytes);
  EXPECT_EQ(got[0][0].type.find('\xff'), std::string::npos);
}

}  // namespace
}  // namespace xpu::kubernetes::hami
