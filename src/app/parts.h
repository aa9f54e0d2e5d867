#pragma once

#include <prometheus/registry.h>

#include <functional>
#include <memory>
#include <string_view>
#include <vector>

#include "app/config.h"
#include "common/part.h"
#include "common/status.h"
#include "store/device_registry.h"
#include "store/exemplars.h"

namespace xpu::app {

// What a part's factory builds from.
struct PartContext {
  const Config& cfg;
  const LoadedFiles& files;
  store::DeviceRegistry* devices;
  store::ExemplarStore* exemplars;
  // The fault families every HAL backend shares (one series each).
  prometheus::Registry* shared_metrics;
  // The part's own self-metrics: on the page while it runs.
  prometheus::Registry* metrics;
  // Whether the part of an earlier row will run beside this one.
  std::function<bool(std::string_view name)> on;
};

// One kind of part: a row of the exporter's table. Adding a part (a HAL
// backend, a sink) is its folder (its class, its flags in the folder's
// flags.cc tagged with its applier) and one row in PartTable()
// (docs/architecture.md, "How to add a backend").
struct PartKind {
  // Its self-metrics' name on the page (Exposer::SetPart) and in logs.
  const char* name;
  // Whose settings it is built from: a reload that changes one of them
  // rebuilds it (/config's "appliedBy").
  Applier applier;
  // Rebuilt on every reload where this says so: a file it reads may have
  // changed. Null: never.
  bool (*reread)(const Config& cfg) = nullptr;
  // Rebuilt whenever one of these earlier rows is (it reads what they are);
  // kHealthSources: every row with a health_source.
  std::vector<std::string_view> follows;
  // Whether its self-metrics start afresh on a reload from `running` to
  // `next` (what it shows changes with its settings, and nothing it showed
  // may stay behind). Null: they go on.
  bool (*fresh_metrics)(const Config& running, const Config& next) = nullptr;
  // Builds the part (not started), or leaves it null where the
  // configuration switches it off. An error fails the start or the reload
  // before anything changed.
  std::function<Status(const PartContext& ctx, std::unique_ptr<Part>* out)> make;
  // The registry source it publishes its view as (every HAL backend: one
  // lane), or null: the Node reporter waits for its first view, /-/ready
  // asks the registry for its sight, and the reporter is rebuilt with it.
  const char* health_source = nullptr;
};

// In `follows`: every row that has a health_source.
inline constexpr std::string_view kHealthSources = "health sources";

// Every part, in the order they are built, started and stopped: a part comes
// after the rows it follows.
const std::vector<PartKind>& PartTable();

}  // namespace xpu::app
