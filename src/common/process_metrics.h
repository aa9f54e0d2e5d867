#pragma once

#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace xpu {

// What /proc/self/stat says of the process (proc(5)), the fields the
// process_* metrics need.
struct ProcStat {
  double cpu_seconds = 0;       // utime + stime
  double start_after_boot = 0;  // seconds
  double virtual_bytes = 0;     // vsize
  double resident_bytes = 0;    // rss pages x page size
  double threads = 0;
};

// Parses one /proc/<pid>/stat line: `ticks_per_second` (sysconf(_SC_CLK_TCK))
// and `page_bytes` convert. The command name in parentheses may hold spaces
// and parentheses itself. nullopt when the line is not that format.
std::optional<ProcStat> ParseProcStat(std::string_view line, double ticks_per_second,
                                      double page_bytes);

// The process metrics every Prometheus client library exports, with their
// standard names and meanings: process_cpu_seconds_total,
// process_resident_memory_bytes, process_virtual_memory_bytes,
// process_open_fds, process_max_fds, process_start_time_seconds, plus
// process_threads. Read from /proc/self on each Collect (a scrape); a file
// that cannot be read leaves its metrics out. Thread-safe (no state but the
// boot time, read once).
class ProcessMetrics : public prometheus::Collectable {
 public:
  // `proc` is the proc filesystem's root (tests point it at a fixture).
  explicit ProcessMetrics(std::string proc = "/proc");
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  const std::string proc_;
  std::optional<double> boot_time_;  // /proc/stat btime, seconds since the epoch
};

}  // namespace xpu
