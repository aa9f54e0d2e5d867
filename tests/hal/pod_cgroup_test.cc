// The pod and container a process's cgroup names (hal/pod_cgroup.h), for
// the cgroup layouts the kubelet makes with each cgroup driver and runtime.
#include "hal/nvml/pod_cgroup.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>
#include <string>

#include "support/test_util.h"

namespace xpu::hal {
namespace {

const std::string kUid = "1f6c2f9e-7a1b-4c2d-9e3f-0a1b2c3d4e5f";
const std::string kUnderscored = "1f6c2f9e_7a1b_4c2d_9e3f_0a1b2c3d4e5f";
const std::string kId = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

PodCgroup Parsed(const std::string& text) {
  PodCgroup cg;
  EXPECT_TRUE(ParsePodCgroup(text, &cg)) << text;
  return cg;
}

TEST(PodCgroupTest, EveryDriverAndRuntimeNamesThePodAndContainer) {
  for (const std::string& text : {
           // cgroup v2, the systemd driver, containerd
           "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + kUnderscored +
               ".slice/cri-containerd-" + kId + ".scope\n",
           // guaranteed QoS has no QoS slice; CRI-O
           "0::/kubepods.slice/kubepods-pod" + kUnderscored + ".slice/crio-" + kId + ".scope\n",
           // cgroup v1, the cgroupfs driver: every controller's line, docker's bare id
           "12:memory:/kubepods/besteffort/pod" + kUid + "/" + kId +
               "\n11:devices:/kubepods/besteffort/pod" + kUid + "/" + kId + "\n",
           // cgroup v1 with the systemd driver and docker; a kind node's nesting
           "5:cpu,cpuacct:/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" +
               kUnderscored + ".slice/docker-" + kId + ".scope\n",
           "0::/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/"
           "kubelet-kubepods-besteffort-pod" +
               kUnderscored + ".slice/cri-containerd-" + kId + ".scope\n",
           // read from inside a cgroup namespace (the exporter unprivileged on
           // cgroup v2): relative to its own cgroup, the same QoS class
           // (cgroupfs driver) or a guaranteed pod (systemd driver)
           "0::/../../pod" + kUid + "/" + kId + "\n",
           // ... or another QoS class (cgroupfs: kubepods/<qos>/pod<uid>), seen
           // from a burstable and from a guaranteed container
           "0::/../../../besteffort/pod" + kUid + "/" + kId + "\n",
           "0::/../../burstable/pod" + kUid + "/" + kId + "\n",
           "0::/../kubepods/burstable/pod" + kUid + "/" + kId + "\n",
           "0::/../../../kubepods-pod" + kUnderscored + ".slice/cri-containerd-" + kId + ".scope\n",
           // a v1 line without the pod first (the named systemd hierarchy), then one with it
           "1:name=systemd:/system.slice/containerd.service\n0::/kubepods/pod" + kUid + "/" + kId +
               "\n",
       }) {
    const PodCgroup cg = Parsed(text);
    EXPECT_EQ(cg.pod_uid, kUid) << text;
    EXPECT_EQ(cg.container_id, kId) << text;
  }
}

// A static pod (a manifest the kubelet reads from its own directory) runs
// under the uid the kubelet made for it, its config's md5 in 32 hex digits,
// which its mirror pod in the API server carries as kubernetes.io/config.mirror.
TEST(PodCgroupTest, AStaticPodIsNamedByItsConfigHash) {
  const std::string hash = "6f1c2e9a7b1d4c2e9f3a0b1c2d3e4f5a";
  for (const std::string& text : {
           "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + hash +
               ".slice/cri-containerd-" + kId + ".scope\n",
           "0::/kubepods.slice/kubepods-pod" + hash + ".slice/crio-" + kId + ".scope\n",
           "12:memory:/kubepods/besteffort/pod" + hash + "/" + kId + "\n",
           "0::/../../pod" + hash + "/" + kId + "\n",
       }) {
    const PodCgroup cg = Parsed(text);
    EXPECT_EQ(cg.pod_uid, hash) << text;
    EXPECT_EQ(cg.container_id, kId) << text;
  }
  PodCgroup cg;
  for (const std::string& text : {
           // one digit short or long, upper case, not hex
           "0::/kubepods/besteffort/pod" + hash.substr(1) + "/" + kId + "\n",
           "0::/kubepods/besteffort/pod" + hash + "0/" + kId + "\n",
           "0::/kubepods/besteffort/pod6F1C2E9A7B1D4C2E9F3A0B1C2D3E4F5A/" + kId + "\n",
           "0::/kubepods/besteffort/pod6f1c2e9a7b1d4c2e9f3a0b1c2d3e4f5g/" + kId + "\n",
           "0::/system.slice/pod" + hash + "/" + kId + "\n",
       }) {
    EXPECT_FALSE(ParsePodCgroup(text, &cg)) << text;
  }
}

TEST(PodCgroupTest, AProcessInNoPodIsNoPods) {
  PodCgroup cg;
  for (const std::string& text : {
           std::string("0::/system.slice/nvidia-persistenced.service\n"),
           std::string("0::/user.slice/user-1000.slice/session-3.scope\n"),
           std::string("0::/\n"),
           std::string(""),
           // a pod's name outside the kubelet's tree is not its pod
           "0::/system.slice/pod" + kUid + "/" + kId + "\n",
           // "..": only as the first segments (the reader's cgroup namespace
           // is below the process's cgroup); after a name, or between two,
           // the kernel never writes it, and it proves no kubelet tree
           "0::/system.slice/../pod" + kUid + "/" + kId + "\n",
           "0::/../system.slice/../pod" + kUid + "/" + kId + "\n",
           "0::/../system.slice/pod" + kUid + "/" + kId + "\n",
           "0::/../besteffort/burstable/pod" + kUid + "/" + kId + "\n",
           "0::/kubepods/../pod" + kUid + "/" + kId + "\n",
           std::string("0::/..\n"),
           // the pod's own cgroup, no container under it
           "0::/kubepods/besteffort/pod" + kUid + "\n",
           // an id that is not the runtime's (short, upper case), a uid cut short
           "0::/kubepods/besteffort/pod" + kUid + "/abc123\n",
           "0::/kubepods/besteffort/pod" + kUid + "/" + std::string(64, 'A') + "\n",
           "0::/kubepods/besteffort/pod" + kUid.substr(0, 35) + "/" + kId + "\n",
           // mixed separators in the uid
           "0::/kubepods/besteffort/pod1f6c2f9e-7a1b_4c2d-9e3f-0a1b2c3d4e5f/" + kId + "\n",
           // no "id:controllers:" in front
           "/kubepods/besteffort/pod" + kUid + "/" + kId + "\n",
       }) {
    EXPECT_FALSE(ParsePodCgroup(text, &cg)) << text;
  }
  // Longer than a cgroup file is: refused whole.
  std::string big = "0::/kubepods/pod" + kUid + "/" + kId + "\n";
  big += std::string(kMaxCgroupFileBytes, '\n');
  EXPECT_FALSE(ParsePodCgroup(big, &cg));
}

TEST(PodCgroupTest, ReadsAProcsCgroupFileAndSaysWhyNot) {
  testing::TempDir proc;
  ASSERT_EQ(mkdir(proc.File("42").c_str(), 0755), 0);
  std::ofstream(proc.File("42/cgroup"))
      << "0::/kubepods/burstable/pod" << kUid << "/" << kId << "\n";
  ASSERT_EQ(mkdir(proc.File("7").c_str(), 0755), 0);
  std::ofstream(proc.File("7/cgroup")) << "0::/system.slice/sshd.service\n";
  PodCgroup cg;
  bool in_pod = false;
  std::string why;
  ASSERT_TRUE(ReadPodCgroup(proc.path(), 42, &cg, &in_pod, &why)) << why;
  EXPECT_TRUE(in_pod);
  EXPECT_EQ(cg.pod_uid, kUid);
  ASSERT_TRUE(ReadPodCgroup(proc.path(), 7, &cg, &in_pod, &why)) << why;
  EXPECT_FALSE(in_pod);
  EXPECT_FALSE(ReadPodCgroup(proc.path(), 99, &cg, &in_pod, &why));
  EXPECT_NE(why.find("99/cgroup"), std::string::npos) << why;
  // The real kernel file: this process's own cgroup reads (in a pod or not).
  EXPECT_TRUE(ReadPodCgroup("/proc", static_cast<unsigned>(getpid()), &cg, &in_pod, &why)) << why;
}

}  // namespace
}  // namespace xpu::hal
