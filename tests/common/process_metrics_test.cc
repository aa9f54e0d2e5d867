// The process_* metrics: /proc/self/stat parsed as proc(5) lays it out, and
// live values that move when the process allocates memory and opens files.
#include "common/process_metrics.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <map>
#include <memory>

namespace xpu {
namespace {

std::map<std::string, double> Values(const ProcessMetrics& m) {
  std::map<std::string, double> out;
  for (const auto& f : m.Collect()) {
    const auto& c = f.metric.at(0);
    out[f.name] = f.type == prometheus::MetricType::Counter ? c.counter.value : c.gauge.value;
  }
  return out;
}

TEST(ProcStatTest, ParsesFieldsAfterACommandWithSpacesAndParens) {
  const std::string line =
      "4242 (xpu (exporter) 1) S 1 4242 4242 0 -1 4194560 1000 0 0 0 250 50 0 0 20 0 7 0 "
      "123400 104857600 2560 18446744073709551615 1 1 0 0 0 0 0 4096 0 0 0 0 17 1 0 0 0 0 0\n";
  auto st = ParseProcStat(line, 100, 4096);
  ASSERT_TRUE(st.has_value());
  EXPECT_DOUBLE_EQ(st->cpu_seconds, 3.0);  // (250 + 50) / 100
  EXPECT_DOUBLE_EQ(st->threads, 7);
  EXPECT_DOUBLE_EQ(st->start_after_boot, 1234);
  EXPECT_DOUBLE_EQ(st->virtual_bytes, 104857600);
  EXPECT_DOUBLE_EQ(st->resident_bytes, 2560.0 * 4096);
}

TEST(ProcStatTest, RefusesOtherText) {
  for (const char* bad : {"", "4242 (x) S 1 2 3", "no parens at all",
                          "1 (x) S a b c d e f g h i j k l m n o p q r s t u"})
    EXPECT_FALSE(ParseProcStat(bad, 100, 4096).has_value()) << bad;
  EXPECT_FALSE(ParseProcStat("1 (x) S", 0, 4096).has_value());
}

TEST(ProcessMetricsTest, MoveWithMemoryAndFiles) {
  ProcessMetrics m;
  auto before = Values(m);
  for (const char* name : {"process_cpu_seconds_total", "process_resident_memory_bytes",
                           "process_virtual_memory_bytes", "process_open_fds", "process_max_fds",
                           "process_start_time_seconds", "process_threads"})
    ASSERT_TRUE(before.count(name)) << name;
  constexpr size_t kBytes = size_t{64} << 20;
  auto block = std::make_unique<char[]>(kBytes);
  std::memset(block.get(), 1, kBytes);  // touched: resident
  std::vector<int> fds;
  for (int i = 0; i < 16; ++i) fds.push_back(open("/dev/null", O_RDONLY));
  auto after = Values(m);
  EXPECT_GE(after["process_resident_memory_bytes"] - before["process_resident_memory_bytes"],
            static_cast<double>(kBytes) / 2);
  EXPECT_GE(after["process_virtual_memory_bytes"], after["process_resident_memory_bytes"]);
  EXPECT_GE(after["process_open_fds"] - before["process_open_fds"], 16);
  EXPECT_GE(after["process_cpu_seconds_total"], before["process_cpu_seconds_total"]);
  const double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  EXPECT_LE(after["process_start_time_seconds"], now + 1);
  EXPECT_GT(after["process_start_time_seconds"], now - 86400);  // this test started today
  EXPECT_GE(after["process_threads"], 1);
  for (int fd : fds) close(fd);
  EXPECT_LE(Values(m)["process_open_fds"], after["process_open_fds"] - 16);
  volatile char sink = block[kBytes - 1];
  (void)sink;
}

TEST(ProcessMetricsTest, MissingProcLeavesMetricsOut) {
  ProcessMetrics m("/nonexistent-proc");
  for (const auto& f : m.Collect()) EXPECT_EQ(f.name, "process_max_fds");  // from getrlimit only
}

}  // namespace
}  // namespace xpu
