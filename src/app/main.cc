// xpu-exporter: see README.md and docs/architecture.md.
#include <malloc.h>
#include <spdlog/spdlog.h>

#include <csignal>
#include <cstdio>
#include <iostream>

#include "app/config.h"
#include "app/exporter.h"
#include "app/logging.h"
#include "version.h"

int main(int argc, char** argv) {
  // Memory: every civetweb worker thread would otherwise get its own malloc
  // arena and keep a scrape-sized buffer (12 MB at 100,000 series) after
  // each scrape; and glibc's dynamic mmap threshold would move such buffers
  // onto the heap, where they stay resident. Two arenas and a fixed 1 MiB
  // threshold return scrape buffers to the system (docs/benchmarks.md).
  // Before any thread exists, so mallopt's lack of thread safety is moot.
  mallopt(M_ARENA_MAX, 2);             // NOLINT(concurrency-mt-unsafe)
  mallopt(M_MMAP_THRESHOLD, 1 << 20);  // NOLINT(concurrency-mt-unsafe)
  xpu::app::Config cfg;
  if (auto rc = xpu::app::ParseFlags(argc, argv, &cfg)) return *rc;
  if (cfg.config_check) {
    // ParseFlags read the config file and the web config; the catalogs remain.
    xpu::app::LoadedFiles files;
    if (xpu::Status s = xpu::app::LoadFiles(cfg, &files); !s.ok()) {
      std::cerr << "xpu-exporter: " << s.message() << "\n";
      return 2;
    }
    std::cout << "xpu-exporter: configuration OK"
              << (cfg.config_file.empty() ? "" : " (" + cfg.config_file + ")") << "\n";
    return 0;
  }
  xpu::app::SetupLogging(cfg.log_level, cfg.log_format);

  // Block the stop signals before any thread starts; this thread waits for them.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  xpu::app::Exporter exporter(cfg);
  xpu::Status s = exporter.Start();
  if (!s.ok()) {
    std::cerr << "xpu-exporter: " << s.message() << "\n";
    return s.code() == xpu::Status::Code::kInvalidArgument ? 2 : 1;
  }
  std::string where;
  for (int p : exporter.ports()) where += (where.empty() ? "" : ", ") + std::to_string(p);
  spdlog::info("xpu-exporter {} listening on port(s) {}, metrics at {}, upstream {}", xpu::kVersion,
               where, cfg.telemetry_path, cfg.xdm.xdm_endpoint);
  std::string probes;
  for (int p : exporter.probe_ports()) probes += (probes.empty() ? "" : ", ") + std::to_string(p);
  if (!probes.empty())
    spdlog::info("probes (/-/healthy, /-/ready) answered on their own port(s) {}", probes);
  int sig = 0;
  for (;;) {
    sigwait(&stop, &sig);
    if (sig != SIGHUP) break;
    spdlog::info("SIGHUP: reloading the configuration");
    xpu::Status r = exporter.Reload();
    if (!r.ok() && !exporter.listening()) {
      // Better a restart by the supervisor than a process nobody can scrape.
      spdlog::error("SIGHUP: no listener left after a failed reload; exiting");
      exporter.Stop();
      return 1;
    }
  }
  spdlog::info("signal {}: shutting down", sig);
  exporter.Stop();
  return 0;
}
