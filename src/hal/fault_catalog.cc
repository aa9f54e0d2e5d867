#include "hal/fault_catalog.h"

#include <yaml-cpp/yaml.h>

#include <cctype>
#include <set>
#include <stdexcept>

#include "common/fault_code.h"
#include "common/yaml_util.h"
#include "hal/builtin_fault_codes.h"  // generated: kBuiltinFaultCodesYaml

namespace xpu::hal {
namespace {

constexpr const char* kLevelNames[] = {"none",         "retry_request", "restart_job",
                                       "restart_card", "reset_card",    "isolate_after_job",
                                       "isolate_card"};

}  // namespace

const char* LevelName(FaultLevel l) { return kLevelNames[static_cast<int>(l)]; }

bool ParseLevel(const std::string& name, FaultLevel* out) {
  for (int i = 0; i <= static_cast<int>(FaultLevel::kIsolateCard); ++i) {
    if (name == kLevelNames[i]) {
      *out = static_cast<FaultLevel>(i);
      return true;
    }
  }
  return false;
}

Status FaultCatalog::Parse(const std::string& yaml_text, const std::string& origin,
                           std::shared_ptr<const FaultCatalog>* out) {
  auto cat = std::make_shared<FaultCatalog>();
  Status parsed = yaml::ParseDocument(yaml_text, origin, [&](const YAML::Node& root) {
    if (Status k = yaml::CheckKeys(root, {"default_level", "codes"}, origin); !k.ok()) return k;
    if (root["default_level"] &&
        !ParseLevel(root["default_level"].as<std::string>(), &cat->default_level_))
      return Status::InvalidArgument(yaml::Where(origin, root["default_level"]) +
                                     ": unknown default_level");
    const YAML::Node codes = root["codes"];
    if (!codes || !codes.IsSequence())
      return Status::InvalidArgument(origin + ": 'codes' list missing");
    for (size_t i = 0; i < codes.size(); ++i) {
      const YAML::Node c = codes[i];
      const std::string section = "codes[" + std::to_string(i) + "]";
      const std::string where = yaml::Where(origin, c) + ": " + section;
      if (Status k = yaml::CheckKeys(c, {"code", "name", "level", "description", "action"}, origin,
                                     section);
          !k.ok())
        return k;
      FaultInfo f;
      f.code = NormalizeFaultCode(c["code"] ? c["code"].as<std::string>() : "");
      if (f.code.empty()) return Status::InvalidArgument(where + ": code must be 1..8 hex digits");
      f.name = c["name"] ? c["name"].as<std::string>() : "";
      f.description = c["description"] ? c["description"].as<std::string>() : "";
      f.action = c["action"] ? c["action"].as<std::string>() : "";
      if (f.name.empty() || f.description.empty() || f.action.empty())
        return Status::InvalidArgument(where + ": name, description and action are required");
      if (!c["level"] || !ParseLevel(c["level"].as<std::string>(), &f.level))
        return Status::InvalidArgument(where +
                                       ": level must be one of none, retry_request, "
                                       "restart_job, restart_card, reset_card, isolate_after_job, "
                                       "isolate_card");
      if (cat->entries_.count(f.code) > 0)
        return Status::InvalidArgument(where + ": duplicate code " + f.code);
      cat->entries_[f.code] = f;
    }
    return Status::Ok();
  });
  if (parsed.ok()) *out = std::move(cat);
  return parsed;
}

std::shared_ptr<const FaultCatalog> FaultCatalog::Builtin() {
  static const auto builtin =
      yaml::ParseBuiltin<FaultCatalog>(kBuiltinFaultCodesYaml, "builtin fault catalog");
  return builtin;
}

Status FaultCatalog::LoadFile(const std::string& path, std::shared_ptr<const FaultCatalog>* out) {
  return yaml::LoadFile(path, "fault catalog", out);
}

FaultInfo FaultCatalog::Lookup(const std::string& code) const {
  const std::string norm = NormalizeFaultCode(code);
  auto it = entries_.find(norm);
  if (it != entries_.end()) return it->second;
  FaultInfo f;
  f.code = norm.empty() ? code : norm;
  f.name = "unknown";
  f.level = default_level_;
  f.description = "Fault code not in the catalog.";
  f.action = "Treat as " + std::string(LevelName(default_level_)) +
             "; look the code up in the vendor's fault table and add it to the catalog.";
  f.known = false;
  return f;
}

}  // namespace xpu::hal
