#include "catalog/catalog.h"

#include <yaml-cpp/yaml.h>

#include <cmath>
#include <map>
#include <set>

#include "catalog/builtin_catalog.h"    // generated: kBuiltinCatalogYaml
#include "catalog/own_families_yaml.h"  // generated: kOwnFamiliesYaml
#include "common/yaml_util.h"

namespace xpu::catalog {
namespace {

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

const std::set<std::string>& BaseUnits() {
  static const std::set<std::string> units = {"bytes", "celsius", "watts", "joules",  "hertz",
                                              "ratio", "seconds", "volts", "amperes", "none"};
  return units;
}

}  // namespace

bool IsValidMetricName(const std::string& name) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
    if (!alpha && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

bool IsValidLabelName(const std::string& name) {
  if (name.empty() || name.rfind("__", 0) == 0) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    if (!alpha && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

const OwnFamilies& ExporterFamilies() {
  static const OwnFamilies own = [] {
    OwnFamilies o;
    const YAML::Node root = YAML::Load(kOwnFamiliesYaml);
    for (const auto& p : root["prefixes"]) o.prefixes.push_back(p.as<std::string>());
    for (const auto& f : root["families"])
      o.families.emplace_back(f["name"].as<std::string>(), f["type"].as<std::string>() == "counter"
                                                               ? MetricType::kCounter
                                                               : MetricType::kGauge);
    return o;
  }();
  return own;
}

std::string OpenMetricsFamily(const std::string& name, MetricType type) {
  return type == MetricType::kCounter && EndsWith(name, "_total") ? name.substr(0, name.size() - 6)
                                                                  : name;
}

namespace {

// The sample names a family writes in either format.
std::set<std::string> SampleNames(const std::string& name, MetricType type) {
  if (type != MetricType::kCounter) return {name};
  const std::string family = OpenMetricsFamily(name, type);
  return {family + "_total", family + "_created"};
}

// Whether two families would give a page two HELP/TYPE blocks for one
// family, or one sample name twice.
bool Collide(const std::string& a, MetricType at, const std::string& b, MetricType bt) {
  if (OpenMetricsFamily(a, at) == OpenMetricsFamily(b, bt)) return true;
  const auto sa = SampleNames(a, at);
  for (const std::string& n : SampleNames(b, bt))
    if (sa.count(n) > 0) return true;
  return false;
}

}  // namespace

std::string ReservedFamilyReason(const std::string& name, MetricType type) {
  const OwnFamilies& own = ExporterFamilies();
  for (const std::string& prefix : own.prefixes)
    if (name.rfind(prefix, 0) == 0) return "is in the exporter's own namespace " + prefix + "*";
  for (const auto& [other, other_type] : own.families) {
    if (Collide(name, type, other, other_type))
      return name == other
                 ? "is a family the exporter exports itself"
                 : "collides with the exporter's own family " + other +
                       " (one OpenMetrics family " + OpenMetricsFamily(other, other_type) + ")";
  }
  return "";
}

bool IsReservedFamily(const std::string& name) {
  return !ReservedFamilyReason(name, MetricType::kGauge).empty() ||
         !ReservedFamilyReason(name, MetricType::kCounter).empty();
}

std::string CheckEntry(const Entry& e) {
  if (!IsValidMetricName(e.name)) return "name '" + e.name + "' is not a valid metric name";
  if (e.name.rfind("xpu_", 0) != 0) return "name '" + e.name + "' lacks the xpu_ prefix";
  if (std::string why = ReservedFamilyReason(e.name, e.type); !why.empty())
    return "name '" + e.name + "' " + why;
  if (e.name.find("percent") != std::string::npos)
    return "name '" + e.name + "' uses percent; export a 0..1 ratio";
  if (BaseUnits().count(e.unit) == 0)
    return "unit '" + e.unit +
           "' is not a base unit (bytes, celsius, watts, joules, hertz, "
           "ratio, seconds, volts, amperes or none)";
  const std::string stem = e.type == MetricType::kCounter && EndsWith(e.name, "_total")
                               ? e.name.substr(0, e.name.size() - 6)
                               : e.name;
  if (e.type == MetricType::kCounter && !EndsWith(e.name, "_total"))
    return "counter '" + e.name + "' must end in _total";
  if (e.type == MetricType::kGauge && EndsWith(e.name, "_total"))
    return "gauge '" + e.name + "' must not end in _total";
  if (e.unit != "none" && !EndsWith(stem, "_" + e.unit))
    return "name '" + e.name + "' must end in _" + e.unit +
           (e.type == MetricType::kCounter ? "_total" : "");
  for (const char* other : {"_bytes", "_celsius", "_watts", "_joules", "_hertz", "_ratio",
                            "_seconds", "_volts", "_amperes"}) {
    if (e.unit == "none" && EndsWith(stem, other))
      return "name '" + e.name + "' ends in a unit but unit is none";
  }
  if (!(e.scale > 0) || !std::isfinite(e.scale)) return "scale must be a positive number";
  if (e.help.empty()) return "help must not be empty";
  if (!e.instance_label.empty() && !IsValidLabelName(e.instance_label))
    return "instance_label '" + e.instance_label + "' is not a valid label name";
  for (const char* reserved : {"minor", "uuid", "model"}) {
    if (e.instance_label == reserved)
      return "instance_label '" + e.instance_label + "' clashes with a device label";
  }
  return "";
}

Status Catalog::Parse(const std::string& yaml_text, const std::string& origin,
                      std::shared_ptr<const Catalog>* out) {
  auto cat = std::make_shared<Catalog>();
  Status parsed = yaml::ParseDocument(yaml_text, origin, [&](const YAML::Node& root) {
    if (Status k = yaml::CheckKeys(root, {"metrics"}, origin); !k.ok()) return k;
    const YAML::Node metrics = root["metrics"];
    if (!metrics || !metrics.IsSequence())
      return Status::InvalidArgument(origin + ": top-level 'metrics' list missing");
    std::set<std::string> names;
    std::map<std::string, std::string> claimed;  // family and sample names -> the entry
    for (size_t i = 0; i < metrics.size(); ++i) {
      const YAML::Node m = metrics[i];
      const std::string where = yaml::Where(origin, m) + ": metrics[" + std::to_string(i) + "]";
      if (Status k =
              yaml::CheckKeys(m, {"id", "name", "type", "unit", "scale", "help", "instance_label"},
                              origin, "metrics[" + std::to_string(i) + "]");
          !k.ok())
        return k;
      Entry e;
      if (!m["id"] || !m["name"] || !m["type"] || !m["help"] || !m["unit"])
        return Status::InvalidArgument(where + ": id, name, type, unit and help are required");
      const int64_t id = m["id"].as<int64_t>();
      if (id < 0 || id > UINT32_MAX) return Status::InvalidArgument(where + ": id out of range");
      e.id = static_cast<uint32_t>(id);
      e.name = m["name"].as<std::string>();
      const std::string type = m["type"].as<std::string>();
      if (type == "gauge") {
        e.type = MetricType::kGauge;
      } else if (type == "counter") {
        e.type = MetricType::kCounter;
      } else {
        return Status::InvalidArgument(where + ": type must be gauge or counter, not '" + type +
                                       "'");
      }
      e.unit = m["unit"].as<std::string>();
      e.scale = m["scale"] ? m["scale"].as<double>() : 1.0;
      e.help = m["help"].as<std::string>();
      if (e.scale > 0 && e.scale < 1) {
        const double inv = std::round(1 / e.scale);
        if (std::abs(1 / e.scale - inv) < 1e-9 * inv) e.divisor = inv;
      }
      if (m["instance_label"]) e.instance_label = m["instance_label"].as<std::string>();
      std::string problem = CheckEntry(e);
      if (!problem.empty()) return Status::InvalidArgument(where + ": " + problem);
      if (cat->by_id_.count(e.id) > 0)
        return Status::InvalidArgument(where + ": duplicate id " + std::to_string(e.id));
      if (!names.insert(e.name).second)
        return Status::InvalidArgument(where + ": duplicate name " + e.name);
      // One OpenMetrics family, or one sample name, per entry: a gauge X
      // beside a counter X_total (both family X) would give the page two
      // HELP/TYPE blocks for X, and Prometheus refuses the whole scrape.
      std::set<std::string> keys = SampleNames(e.name, e.type);
      keys.insert("family " + OpenMetricsFamily(e.name, e.type));
      for (const std::string& k : keys) {
        auto [it, fresh] = claimed.emplace(k, e.name);
        if (!fresh)
          return Status::InvalidArgument(
              where + ": " + e.name + " and " + it->second + " are one OpenMetrics family (" +
              OpenMetricsFamily(e.name, e.type) +
              "): a page with both has two HELP/TYPE blocks for it, and Prometheus refuses it");
      }
      if (cat->entries_.size() >= kMaxCatalogEntries)
        return Status::InvalidArgument(where + ": more than " + std::to_string(kMaxCatalogEntries) +
                                       " entries");
      cat->by_id_[e.id] = cat->entries_.size();
      cat->entries_.push_back(std::move(e));
    }
    return Status::Ok();
  });
  if (parsed.ok()) *out = std::move(cat);
  return parsed;
}

std::shared_ptr<const Catalog> Catalog::Builtin() {
  static const auto builtin = yaml::ParseBuiltin<Catalog>(kBuiltinCatalogYaml, "builtin catalog");
  return builtin;
}

Status Catalog::LoadFile(const std::string& path, std::shared_ptr<const Catalog>* out) {
  return yaml::LoadFile(path, "metrics catalog", out);
}

const Entry* Catalog::FindByName(const std::string& name) const {
  for (const Entry& e : entries_)
    if (e.name == name) return &e;
  return nullptr;
}

}  // namespace xpu::catalog
