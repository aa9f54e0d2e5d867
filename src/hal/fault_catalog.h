#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace xpu::hal {

// The level ladder, least to most severe; the number is what
// xpu_device_fault_level exports so alerts can use >=.
enum class FaultLevel {
  kNone = 0,
  kRetryRequest = 1,
  kRestartJob = 2,
  kRestartCard = 3,
  kResetCard = 4,
  kIsolateAfterJob = 5,
  kIsolateCard = 6,
};
const char* LevelName(FaultLevel l);
bool ParseLevel(const std::string& name, FaultLevel* out);

struct FaultInfo {
  std::string code;  // "0x" + 8 upper-case hex digits
  std::string name;
  FaultLevel level = FaultLevel::kNone;
  std::string description;
  std::string action;
  bool known = true;  // false: not in the catalog, default level applied
};

// Fault code -> catalog entry. Immutable after Parse: any thread may read.
class FaultCatalog {
 public:
  static Status Parse(const std::string& yaml_text, const std::string& origin,
                      std::shared_ptr<const FaultCatalog>* out);
  static std::shared_ptr<const FaultCatalog> Builtin();
  static Status LoadFile(const std::string& path, std::shared_ptr<const FaultCatalog>* out);

  // The entry for `code` (normalised), or an "unknown" entry at the default level.
  FaultInfo Lookup(const std::string& code) const;
  const std::map<std::string, FaultInfo>& entries() const { return entries_; }
  FaultLevel default_level() const { return default_level_; }

 private:
  std::map<std::string, FaultInfo> entries_;
  FaultLevel default_level_ = FaultLevel::kRestartCard;
};

}  // namespace xpu::hal
