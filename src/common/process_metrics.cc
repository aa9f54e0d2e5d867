#include "common/process_metrics.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <limits>
#include <sstream>

#include "common/file_util.h"

namespace xpu {
namespace {

constexpr size_t kMaxProcFileBytes = size_t{64} * 1024;

prometheus::MetricFamily Family(const char* name, const char* help, prometheus::MetricType type,
                                double value) {
  prometheus::MetricFamily f;
  f.name = name;
  f.help = help;
  f.type = type;
  prometheus::ClientMetric m;
  if (type == prometheus::MetricType::Counter)
    m.counter.value = value;
  else
    m.gauge.value = value;
  f.metric.push_back(std::move(m));
  return f;
}

// /proc files report a size of 0: read them to their end, bounded. With
// read(2) into a buffer that grows only as the file needs (a stat line is a
// few hundred bytes): this runs on every scrape, where a zeroed 64 KiB
// buffer and a stream cost more than the rest of these families together.
std::optional<std::string> ReadProc(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::string out;
  size_t used = 0;
  for (;;) {
    if (used == out.size()) {
      if (out.size() >= kMaxProcFileBytes) break;
      out.resize(std::min(kMaxProcFileBytes, std::max<size_t>(1024, out.size() * 2)));
    }
    const ssize_t n = read(fd, out.data() + used, out.size() - used);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    used += static_cast<size_t>(n);
  }
  close(fd);
  out.resize(used);
  return out;
}

// Entries of a /proc fd folder, "." and ".." left out; nullopt if it cannot
// be read.
std::optional<size_t> CountEntries(const std::string& dir) {
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return std::nullopt;
  size_t n = 0;
  while (const dirent* e = readdir(d)) {  // NOLINT(concurrency-mt-unsafe): own DIR
    if (e->d_name[0] == '.' &&
        (e->d_name[1] == '\0' || (e->d_name[1] == '.' && e->d_name[2] == '\0')))
      continue;
    ++n;
  }
  closedir(d);
  return n;
}

}  // namespace

std::optional<ProcStat> ParseProcStat(std::string_view line, double ticks_per_second,
                                      double page_bytes) {
  // "pid (comm) state ppid ...": fields after the last ')' are numbered from
  // 3 (state) in proc(5).
  const size_t close = line.rfind(')');
  if (close == std::string_view::npos || ticks_per_second <= 0) return std::nullopt;
  std::vector<std::string_view> f;
  std::string_view rest = line.substr(close + 1);
  while (!rest.empty()) {
    const size_t start = rest.find_first_not_of(" \n");
    if (start == std::string_view::npos) break;
    rest.remove_prefix(start);
    const size_t end = rest.find_first_of(" \n");
    f.push_back(rest.substr(0, end));
    rest.remove_prefix(end == std::string_view::npos ? rest.size() : end);
  }
  // f[0] is field 3; field n is f[n - 3]. Needed: utime 14, stime 15,
  // num_threads 20, starttime 22, vsize 23, rss 24.
  if (f.size() < 22) return std::nullopt;
  auto num = [&](int field, double* out) {
    const std::string_view s = f[static_cast<size_t>(field - 3)];
    long long v = 0;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || p != s.data() + s.size()) return false;
    *out = static_cast<double>(v);
    return true;
  };
  double utime = 0, stime = 0, start = 0, rss = 0;
  ProcStat st;
  if (!num(14, &utime) || !num(15, &stime) || !num(20, &st.threads) || !num(22, &start) ||
      !num(23, &st.virtual_bytes) || !num(24, &rss))
    return std::nullopt;
  st.cpu_seconds = (utime + stime) / ticks_per_second;
  st.start_after_boot = start / ticks_per_second;
  st.resident_bytes = rss * page_bytes;
  return st;
}

ProcessMetrics::ProcessMetrics(std::string proc) : proc_(std::move(proc)) {
  if (auto stat = ReadProc(proc_ + "/stat")) {
    std::istringstream in(*stat);
    std::string key;
    double value = 0;
    while (in >> key) {
      if (key == "btime" && in >> value) {
        boot_time_ = value;
        break;
      }
      in.ignore(std::numeric_limits<std::streamsize>::max(), '\n');
    }
  }
}

std::vector<prometheus::MetricFamily> ProcessMetrics::Collect() const {
  using prometheus::MetricType;
  std::vector<prometheus::MetricFamily> out;
  const auto line = ReadProc(proc_ + "/self/stat");
  const std::optional<ProcStat> st =
      line ? ParseProcStat(*line, static_cast<double>(sysconf(_SC_CLK_TCK)),
                           static_cast<double>(sysconf(_SC_PAGESIZE)))
           : std::nullopt;
  if (st) {
    out.push_back(Family("process_cpu_seconds_total",
                         "Total user and system CPU time spent in seconds.", MetricType::Counter,
                         st->cpu_seconds));
    out.push_back(Family("process_resident_memory_bytes", "Resident memory size in bytes.",
                         MetricType::Gauge, st->resident_bytes));
    out.push_back(Family("process_virtual_memory_bytes", "Virtual memory size in bytes.",
                         MetricType::Gauge, st->virtual_bytes));
    out.push_back(Family("process_threads", "Number of OS threads in the process.",
                         MetricType::Gauge, st->threads));
    if (boot_time_)
      out.push_back(Family("process_start_time_seconds",
                           "Start time of the process since unix epoch in seconds.",
                           MetricType::Gauge, *boot_time_ + st->start_after_boot));
  }
  if (const std::optional<size_t> fds = CountEntries(proc_ + "/self/fd"))
    out.push_back(Family("process_open_fds", "Number of open file descriptors.", MetricType::Gauge,
                         static_cast<double>(*fds)));
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) == 0)
    out.push_back(Family("process_max_fds", "Maximum number of open file descriptors.",
                         MetricType::Gauge, static_cast<double>(lim.rlim_cur)));
  return out;
}

}  // namespace xpu
