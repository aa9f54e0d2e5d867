#include "common/yaml_util.h"

namespace xpu::yaml {

std::string Where(const std::string& origin, const YAML::Node& node) {
  return origin + ":" + std::to_string(node.Mark().line + 1);
}

Status CheckKeys(const YAML::Node& map, const std::set<std::string>& known,
                 const std::string& origin, const std::string& section) {
  if (!map.IsMap())
    return Status::InvalidArgument(Where(origin, map) + ": " +
                                   (section.empty() ? "the document" : section) +
                                   " must be a mapping");
  for (const auto& kv : map) {
    const std::string k = kv.first.as<std::string>();
    if (known.count(k) == 0)
      return Status::InvalidArgument(Where(origin, kv.first) + ": unknown key '" +
                                     (section.empty() ? k : section + "." + k) + "'");
  }
  return Status::Ok();
}

Status ParseDocument(const std::string& text, const std::string& origin,
                     const std::function<Status(const YAML::Node& root)>& parse) {
  try {
    return parse(YAML::Load(text));
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument(origin + ": " + e.what());
  }
}

}  // namespace xpu::yaml
