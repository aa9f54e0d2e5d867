#pragma once

// A HAL backend as the exporter knows it: its folder (src/hal/<name>/) holds
// its code, its flags and its factory, and it is one row of BackendKinds()
// (src/hal/backends.cc). --hal accepts the registered names; the exporter
// builds one part per row (app::PartTable), which publishes its view as the
// registry source of the same name (store::HealthSourcePort: one lane).

#include <prometheus/registry.h>

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "common/flags.h"
#include "common/part.h"
#include "common/status.h"
#include "hal/fault_catalog.h"
#include "hal/hal.h"
#include "store/exemplars.h"
#include "store/ports.h"

namespace xpu::hal {

class KmsgCatalog;
struct PciFilter;

// What a backend's factory builds from: its settings and the shared parts.
struct BackendContext {
  const HalOptions& options;
  const HalSelection& selection;
  const PciFilter& pci_filter;  // --hal.pci.classes, --hal.pci.vendors, parsed
  std::shared_ptr<const FaultCatalog> faults;
  std::shared_ptr<const KmsgCatalog> kmsg;  // the kernel log's catalog (Xid codes, states)
  store::HealthSourcePort* registry;
  store::ExemplarStore* exemplars;
  // The fault families every backend shares (one series each), and the
  // backend's own self-metrics.
  prometheus::Registry* shared_metrics;
  prometheus::Registry* metrics;
};

// One row: a backend kind.
struct BackendKind {
  // --hal's word and the registry source it publishes as ("pci").
  const char* name;
  // The exporter's part name (its self-metrics, /config's "appliedBy").
  const char* part;
  // Adds its --hal.<name>.* flags (tagged Applier::kHal), writing into
  // HalOptions. Null: none of its own.
  void (*flags)(const FlagSet& f, HalOptions* o);
  // Builds it (not started), or leaves `*out` null where the selection
  // (auto: nothing found) switches it off. An error fails the start or the
  // reload before anything changed.
  Status (*make)(const BackendContext& c, std::unique_ptr<Part>* out);
};

// Every backend, in the order they are built and started.
const std::vector<BackendKind>& BackendKinds();

}  // namespace xpu::hal
