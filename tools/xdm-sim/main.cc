// xdm-sim: a stand-in for the Lingjun Runtime Kit daemon (XDM) and its
// Controller, serving the upstream gRPC API on Unix sockets. See
// docs/simulator.md.
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <csignal>
#include <cstdio>
#include <iostream>

#include "common/duration.h"
#include "simulator.h"

// --pci-domain HEX and --pci-vendor HEX: the devices' PCI domain, and the
// vendor ID the PCI tree gives the cards (0x10de: NVIDIA's, so that the
// stand-in NVML covers them); a vendor refused unless 4 hex digits.
void AddPciFlags(CLI::App& app, xdmsim::SimOptions* opts) {
  app.add_option_function<std::string>(
      "--pci-domain",
      [opts](const std::string& s) {
        size_t end = 0;
        try {
          opts->pci_domain = std::stoi(s, &end, 16);
        } catch (const std::exception&) {
          end = 0;
        }
        if (end != s.size() || s.empty()) opts->pci_domain = -1;  // refused by Start
      },
      "PCI domain of the devices' bus ids, hex (default 0000); a rare one keeps test records "
      "apart from real devices'");
  app.add_option_function<std::string>(
         "--pci-vendor",
         [opts](const std::string& s) { opts->pci_vendor = std::stoul(s, nullptr, 16); },
         "PCI vendor ID the PCI tree gives the cards, hex (default 0x1ded)")
      ->check(CLI::Validator(
          [](std::string& s) {
            const size_t hex = s.rfind("0x", 0) == 0 ? 2 : 0;
            const bool ok = s.size() > hex && s.size() - hex <= 4 &&
                            s.find_first_not_of("0123456789abcdefABCDEF", hex) == std::string::npos;
            return ok ? std::string() : "not a PCI vendor ID (4 hex digits): " + s;
          },
          "HEX"));
}

int main(int argc, char** argv) {
  xdmsim::SimOptions opts;
  std::string interval = "1s";
  std::string log_level = "info";
  CLI::App app{"xdm-sim: simulated Lingjun Runtime Kit (XDM) for xpu-exporter"};
  app.add_option("--socket", opts.socket_path, "XDM gRPC Unix socket (dp2mgr.sock)")
      ->capture_default_str();
  app.add_option("--controller-socket", opts.controller_socket_path,
                 "Controller gRPC Unix socket (config-daemon.sock)")
      ->capture_default_str();
  app.add_option("--control-address", opts.control_address,
                 "loopback HTTP control API host:port (port 0 picks one); empty disables")
      ->capture_default_str();
  std::string models;
  for (const auto& m : xdmsim::ModelNames()) models += (models.empty() ? "" : ", ") + m;
  app.add_option("--model", opts.model, "device model: " + models)->capture_default_str();
  app.add_option("--devices", opts.devices, "number of devices")
      ->check(CLI::Range(0, 4096))
      ->capture_default_str();
  app.add_option("--links", opts.links, "interconnect links per device (default: the model's)")
      ->check(CLI::Range(0, 4096));
  app.add_option("--interval", interval, "collection interval (500ms, 1s, ...)")
      ->capture_default_str();
  app.add_option("--seed", opts.seed, "seed for UUIDs and metric noise")->capture_default_str();
  AddPciFlags(app, &opts);
  app.add_flag("--flood", opts.flood, "streams push back to back (ingest benchmarks)");
  app.add_flag("--no-stream", opts.no_stream,
               "ExporterDataStream answers UNIMPLEMENTED: a daemon that is only polled");
  std::string list_delay = "0s";
  app.add_option("--list-delay", list_delay,
                 "ListAndWatch answers only this long after start (500ms, 2s, ...)");
  app.add_option("--marker-id", opts.marker_id,
                 "add this metric ID on device 0 carrying the send time in us (freshness)");
  app.add_flag("--frozen", opts.frozen, "metric values never move (deterministic output)");
  app.add_option("--kubelet-socket", opts.kubelet_socket_path,
                 "also serve a stand-in kubelet PodResources API here (one pod per allocation)");
  app.add_option("--hal-root", opts.hal_root, "write a sysfs-like HAL tree here");
  app.add_option("--log-level", log_level, "debug, info, warn, error")->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "xdm-sim: " << e.what() << "\n";
    return 2;
  }
  auto d = xpu::ParseDuration(interval);
  if (!d || d->count() <= 0) {
    std::cerr << "xdm-sim: --interval: '" << interval << "' is not a positive duration\n";
    return 2;
  }
  opts.interval = *d;
  auto delay = xpu::ParseDuration(list_delay);
  if (!delay || delay->count() < 0) {
    std::cerr << "xdm-sim: --list-delay: '" << list_delay << "' is not a duration\n";
    return 2;
  }
  opts.list_delay = *delay;
  if (xdmsim::FindModel(opts.model) == nullptr) {
    std::cerr << "xdm-sim: --model: unknown model '" << opts.model << "' (known: " << models
              << ")\n";
    return 2;
  }
  spdlog::set_level(spdlog::level::from_str(log_level));

  // Block the stop signals before any thread starts, then wait for them here.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);

  xdmsim::Simulator sim(opts);
  xpu::Status s = sim.Start();
  if (!s.ok()) {
    std::cerr << "xdm-sim: " << s.message() << "\n";
    return 1;
  }
  // One line that scripts and tests parse for the control port.
  std::printf(
      "xdm-sim ready model=%s devices=%d socket=%s controller=%s control=%s\n", opts.model.c_str(),
      opts.devices, opts.socket_path.c_str(), opts.controller_socket_path.c_str(),
      sim.control_port() ? ("http://127.0.0.1:" + std::to_string(sim.control_port())).c_str()
                         : "off");
  std::fflush(stdout);
  int sig = 0;
  sigwait(&stop, &sig);
  spdlog::info("signal {}: stopping", sig);
  sim.Stop();
  return 0;
}
