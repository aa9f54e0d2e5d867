#pragma once

#include <cstddef>
#include <string>

#include "common/status.h"

namespace xpu {

// Configuration files are small; a bigger one is a mistake or an attack.
inline constexpr size_t kMaxConfigFileBytes = size_t{1024} * 1024;

// Reads a whole (small) regular file into `out`, refusing anything longer
// than `max_bytes` and anything that is not a regular file (a FIFO would
// block). `what` names it in the error, e.g. "metrics catalog":
// "cannot read metrics catalog /x: No such file or directory".
Status ReadTextFile(const std::string& path, const std::string& what, std::string* out,
                    size_t max_bytes = kMaxConfigFileBytes);

// A cheap signature of the file at `path` as it is now (stat only, the
// link followed: a Secret's `..data` swap is a change): device, inode, size,
// modification and change times; "!errno" when it cannot be stat'ed. Equal
// signatures mean the file was not replaced or written in between.
std::string FileSignature(const std::string& path);

// strerror(err), safe on any thread (strerror itself shares one buffer).
std::string ErrnoText(int err);

}  // namespace xpu
