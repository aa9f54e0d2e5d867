#pragma once

#include <string>

#include "common/status.h"

namespace xpu {

// Reads a whole (small) file into `out`. `what` names it in the error, e.g.
// "metrics catalog": "cannot read metrics catalog /x: No such file or directory".
Status ReadTextFile(const std::string& path, const std::string& what, std::string* out);

}  // namespace xpu
