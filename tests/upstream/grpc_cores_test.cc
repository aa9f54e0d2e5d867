// gRPC sized for one core (src/app/grpc_cores.cc, linked into this binary as
// into the exporter): every caller in the process is told one core, and the
// CPU a thread runs on is always slot 0 of gRPC's per-core arrays, sized one.
// libgpr finds the CPU through the count it is told only while its own call
// goes through its PLT; a libgpr that bound it inside itself would index a
// one-slot array with the real CPU number, and fail here on any CPU but 0.
#include <grpc/support/cpu.h>
#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>

#include <thread>
#include <vector>

namespace {

TEST(GrpcCoresTest, GrpcIsToldOneCore) { EXPECT_EQ(gpr_cpu_num_cores(), 1u); }

TEST(GrpcCoresTest, TheCurrentCpuIsSlotZeroOnEveryCpuThisProcessMayUse) {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  ASSERT_EQ(sched_getaffinity(0, sizeof allowed, &allowed), 0);
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &allowed)) cpus.push_back(c);
  ASSERT_FALSE(cpus.empty());
  for (int c : cpus) {
    unsigned seen = 99;
    int on = -1;
    // A thread of its own, pinned: this thread's affinity stays as it was.
    std::thread([&] {
      cpu_set_t one;
      CPU_ZERO(&one);
      CPU_SET(c, &one);
      if (pthread_setaffinity_np(pthread_self(), sizeof one, &one) != 0) return;
      on = sched_getcpu();
      seen = gpr_cpu_current_cpu();
    }).join();
    ASSERT_EQ(on, c) << "could not run on CPU " << c;
    EXPECT_EQ(seen, 0u) << "on CPU " << c;
  }
}

}  // namespace
