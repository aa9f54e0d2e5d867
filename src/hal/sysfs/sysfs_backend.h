#pragma once

#include <chrono>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "hal/attribute_files.h"
#include "hal/hal.h"

namespace xpu::hal {

// Limits on what the tree can make the sampler hold (docs/reliability.md).
inline constexpr size_t kMaxFaultCodes = 64;    // active codes per device
inline constexpr size_t kMaxHalDevices = 1024;  // xpu<minor> directories

// Parsers of the sysfs files (docs/hal.md), pure and separate from I/O.
// Every file must end in a newline: a missing one means a partly written or
// truncated file, which is an error rather than a guess.
Status ParseHealthFile(std::string_view text, bool* healthy);
Status ParseUuidFile(std::string_view text, std::string* uuid);
// One code per line; an empty file means no active faults.
Status ParseFaultCodesFile(std::string_view text, std::vector<std::string>* codes);

// Reads <root>/xpu<minor>/{uuid,health,fault_codes}: the layout xdm-sim
// writes with --hal-root, modelled on a driver's sysfs class directory. A
// round is ListDevices, then each device's reads; the files are held open
// between rounds (HeldFiles). Called by one thread (its sampler's).
class SysfsBackend : public HalBackend {
 public:
  explicit SysfsBackend(std::string root) : root_(std::move(root)) {}
  std::string name() const override { return "sysfs"; }
  std::string root() const override { return root_; }
  Status ListDevices(std::vector<HalDeviceId>* out) override;
  Status ReadHealth(int32_t minor, bool* healthy) override;
  Status ReadFaultCodes(int32_t minor, std::vector<std::string>* codes) override;

 private:
  Status ReadFile(int32_t minor, const char* file, std::string* out);
  // A device's identity (its UUID and PCI address), read whole, kept by its
  // directory: read again when the directory's entry is another inode (a
  // card replaced makes its directory anew), when it was not listed in the
  // last round (or that round failed), when its uuid file is no longer held
  // (created or renamed over since), or once kIdentityMaxAge old. Nothing
  // that raises a fault is kept: health and fault codes are read every round.
  struct Known {
    uint64_t inode = 0;
    HalDeviceId id;
    std::chrono::steady_clock::time_point read_at;
  };
  static constexpr std::chrono::seconds kIdentityMaxAge{10};
  std::string root_;
  HeldFiles held_;                      // each device's files, held between rounds
  std::map<std::string, Known> known_;  // directory name -> identity, as last listed
};

}  // namespace xpu::hal
