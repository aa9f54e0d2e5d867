#include "common/file_util.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace xpu {

Status ReadTextFile(const std::string& path, const std::string& what, std::string* out) {
  std::ifstream in(path);
  if (!in) return Status::IoError("cannot read " + what + " " + path + ": " + std::strerror(errno));
  std::stringstream ss;
  ss << in.rdbuf();
  *out = ss.str();
  return Status::Ok();
}

}  // namespace xpu
