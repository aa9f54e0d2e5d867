#include "hal/fault_catalog.h"

#include "common/fault_code.h"
#include "common/file_util.h"

#include <cctype>
#include <fstream>
#include <set>
#include <sstream>
#include <stdexcept>

#include <yaml-cpp/yaml.h>

#include "hal/builtin_fault_codes.h"  // generated: kBuiltinFaultCodesYaml

namespace xpu::hal {
namespace {

constexpr const char* kLevelNames[] = {"none",         "retry_request",     "restart_job",
                                       "restart_card", "reset_card",        "isolate_after_job",
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

std::string FaultCatalog::Normalize(const std::string& code) { return NormalizeFaultCode(code); }

Status FaultCatalog::Parse(const std::string& yaml_text, const std::string& origin,
                           std::shared_ptr<const FaultCatalog>* out) {
  auto cat = std::make_shared<FaultCatalog>();
  try {
    YAML::Node root = YAML::Load(yaml_text);
    if (!root.IsMap()) return Status::InvalidArgument(origin + ": not a mapping");
    for (const auto& kv : root) {
      const std::string key = kv.first.as<std::string>();
      if (key != "default_level" && key != "codes")
        return Status::InvalidArgument(origin + ": unknown key '" + key + "' (line " +
                                       std::to_string(kv.first.Mark().line + 1) + ")");
    }
    if (root["default_level"] &&
        !ParseLevel(root["default_level"].as<std::string>(), &cat->default_level_))
      return Status::InvalidArgument(origin + ": unknown default_level");
    const YAML::Node codes = root["codes"];
    if (!codes || !codes.IsSequence()) return Status::InvalidArgument(origin + ": 'codes' list missing");
    for (size_t i = 0; i < codes.size(); ++i) {
      const YAML::Node c = codes[i];
      const std::string where =
          origin + ": codes[" + std::to_string(i) + "] (line " + std::to_string(c.Mark().line + 1) + ")";
      if (!c.IsMap()) return Status::InvalidArgument(where + ": not a mapping");
      for (const auto& kv : c) {
        static const std::set<std::string> known = {"code", "name", "level", "description", "action"};
        if (known.count(kv.first.as<std::string>()) == 0)
          return Status::InvalidArgument(where + ": unknown key '" + kv.first.as<std::string>() + "'");
      }
      FaultInfo f;
      f.code = Normalize(c["code"] ? c["code"].as<std::string>() : "");
      if (f.code.empty()) return Status::InvalidArgument(where + ": code must be 1..8 hex digits");
      f.name = c["name"] ? c["name"].as<std::string>() : "";
      f.description = c["description"] ? c["description"].as<std::string>() : "";
      f.action = c["action"] ? c["action"].as<std::string>() : "";
      if (f.name.empty() || f.description.empty() || f.action.empty())
        return Status::InvalidArgument(where + ": name, description and action are required");
      if (!c["level"] || !ParseLevel(c["level"].as<std::string>(), &f.level))
        return Status::InvalidArgument(where + ": level must be one of none, retry_request, "
                                       "restart_job, restart_card, reset_card, isolate_after_job, "
                                       "isolate_card");
      if (cat->entries_.count(f.code) > 0)
        return Status::InvalidArgument(where + ": duplicate code " + f.code);
      cat->entries_[f.code] = f;
    }
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument(origin + ": " + e.what());
  }
  *out = std::move(cat);
  return Status::Ok();
}

std::shared_ptr<const FaultCatalog> FaultCatalog::Builtin() {
  static const std::shared_ptr<const FaultCatalog> builtin = [] {
    std::shared_ptr<const FaultCatalog> c;
    Status s = Parse(kBuiltinFaultCodesYaml, "builtin fault catalog", &c);
    if (!s.ok()) throw std::logic_error(s.message());  // a build defect, caught by tests
    return c;
  }();
  return builtin;
}

Status FaultCatalog::LoadFile(const std::string& path, std::shared_ptr<const FaultCatalog>* out) {
  std::string text;
  if (Status s = ReadTextFile(path, "fault catalog", &text); !s.ok()) return s;
  return Parse(text, path, out);
}

FaultInfo FaultCatalog::Lookup(const std::string& code) const {
  const std::string norm = Normalize(code);
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
