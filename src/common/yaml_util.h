#pragma once

#include <yaml-cpp/yaml.h>

#include <functional>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>

#include "common/file_util.h"
#include "common/status.h"

// What every YAML file the exporter reads shares (metric catalog, fault
// catalog, web config, --config.file): messages that say "file:line",
// unknown keys as errors, yaml-cpp's exceptions turned into values, and the
// built-in-or-file shape of the catalogs.
namespace xpu::yaml {

// "origin:line" of `node`, for messages that point into a file.
std::string Where(const std::string& origin, const YAML::Node& node);

// InvalidArgument "origin:line: unknown key 'section.key'" for the first key
// of `map` that is not in `known` (or "... must be a mapping").
Status CheckKeys(const YAML::Node& map, const std::set<std::string>& known,
                 const std::string& origin, const std::string& section = "");

// Parses the YAML document `text` and hands its root to `parse`. yaml-cpp's
// exceptions (syntax errors, a list where a scalar belongs) become
// InvalidArgument "origin: what".
Status ParseDocument(const std::string& text, const std::string& origin,
                     const std::function<Status(const YAML::Node& root)>& parse);

// A catalog compiled into the binary, parsed with T::Parse once. A parse
// error there is a build defect, which the tests catch: it throws.
template <typename T>
std::shared_ptr<const T> ParseBuiltin(const char* text, const char* origin) {
  std::shared_ptr<const T> out;
  Status s = T::Parse(text, origin, &out);
  if (!s.ok()) throw std::logic_error(s.message());
  return out;
}

// Reads `path` within ReadTextFile's limits and parses it with T::Parse;
// `what` names the file in errors ("metrics catalog").
template <typename T>
Status LoadFile(const std::string& path, const char* what, std::shared_ptr<const T>* out) {
  std::string text;
  if (Status s = ReadTextFile(path, what, &text); !s.ok()) return s;
  return T::Parse(text, path, out);
}

}  // namespace xpu::yaml
