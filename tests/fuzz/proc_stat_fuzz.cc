// /proc/self/stat lines through ParseProcStat (the process_* metrics): any
// bytes, including a command name with spaces, parens and newlines. A parsed
// line gives finite, non-negative figures.
#include <cmath>

#include "common/process_metrics.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view line(reinterpret_cast<const char*>(data), size);
  const auto st = xpu::ParseProcStat(line, 100, 4096);
  if (!st) return 0;
  for (double v :
       {st->cpu_seconds, st->start_after_boot, st->virtual_bytes, st->resident_bytes, st->threads})
    if (!std::isfinite(v)) abort();
  return 0;
}
