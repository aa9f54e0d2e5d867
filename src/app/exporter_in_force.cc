// Exporter::in_force(): what the running parts hold, read from them, for
// the tests that check that a reload reached the part that applies a setting
// (tests/app/exporter_test.cc, the reload walk).
#include "app/exporter.h"

namespace xpu::app {

Exporter::InForce Exporter::in_force() const {
  InForce f;
  f.ingest = client_->settings();
  f.store_catalog = store_->catalog();
  f.web_config = web_->config();
  MutexLock lock(parts_mu_);
  auto* hal = Running<hal::HalSampler>("hal");
  auto* pci = Running<hal::PciSampler>("pci");
  auto* kmsg = Running<hal::KmsgSampler>("kmsg");
  auto* nvml = Running<hal::NvmlSampler>("nvml");
  auto* pods = Running<kubelet::PodMapper>("kubelet");
  auto* watcher = Running<kubernetes::PodWatcher>("apiserver");
  auto* reporter = Running<sinks::NodeReporter>("nodehealth");
  auto* tainter = Running<sinks::DeviceTainter>("devicetaints");
  f.hal_part = hal;
  f.pci_part = pci;
  f.kmsg_part = kmsg;
  f.nvml_part = nvml;
  f.pods_part = pods;
  f.watcher_part = watcher;
  f.reporter_part = reporter;
  f.tainter_part = tainter;
  if (tainter) f.tainter = tainter->options();
  if (hal) {
    f.hal_interval = hal->interval();
    f.hal_root = hal->backend_root();
    f.hal_faults = hal->fault_catalog();
  }
  if (pci) {
    f.pci_interval = pci->interval();
    f.pci_root = pci->scanner().root();
    f.pci_filter = pci->scanner().filter();
    f.pci_faults = pci->fault_catalog();
  }
  if (kmsg) {
    f.kmsg = kmsg->options();
    f.kmsg_catalog = kmsg->catalog();
  }
  if (nvml) {
    f.nvml = nvml->options();
    f.nvml_faults = nvml->fault_catalog();
  }
  if (pods) f.pods = pods->options();
  if (watcher) {
    f.watcher = watcher->options();
    f.watcher_url = watcher->base_url();
  }
  if (reporter) {
    f.reporter = reporter->options();
    f.reporter_kubernetes = reporter->kubernetes();
  }
  return f;
}

}  // namespace xpu::app
