#pragma once

#include <re2/re2.h>

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace xpu::hal {

// Bounds of a kernel-log catalog (docs/reliability.md).
inline constexpr size_t kMaxKmsgPatterns = 256;
inline constexpr size_t kMaxKmsgPatternLength = 1024;

// What a matching record means for its device.
enum class KmsgEffect {
  kFault,    // raises `code` (an event, or a state: KmsgCatalog::IsState)
  kReset,    // the device was reset: its event-like codes clear
  kHealthy,  // the device is (again) initialised and healthy: every code clears
};

// One pattern of the catalog: a driver's record, matched on its text with
// RE2 (linear time: a hostile 8 KiB line cannot stall the sampler). The
// regex may capture the device's PCI address as (?P<address>...) and a
// number as (?P<number>...), which is added to `code` (NVIDIA's Xid).
struct KmsgPattern {
  std::string name;
  // The driver it is for (nvidia, amdgpu, pcie): a fault record that names
  // no device is its card's where one card is bound to this driver
  // (KmsgSampler), and otherwise only documentation.
  std::string driver;
  std::shared_ptr<const RE2> regex;
  KmsgEffect effect = KmsgEffect::kFault;
  uint32_t code = 0;  // the base fault code (kFault)
  bool numbered = false;
  int address_group = 0, number_group = 0;  // 1-based; 0: none
};

// A record's meaning: which pattern, which device (a normalised PCI address,
// empty when neither the text nor the dictionary names one), which code.
struct KmsgMatch {
  const KmsgPattern* pattern = nullptr;
  std::string address;
  std::string code;  // "0x%08X" (kFault)
};

// The kernel-log catalog (src/hal/kmsg/kmsg_patterns.yaml, or --hal.kmsg.catalog):
// patterns, the drivers whose other records are counted, the codes that are
// states, and how long an event stays active. Immutable after Parse: any
// thread may read it.
class KmsgCatalog {
 public:
  static Status Parse(const std::string& yaml_text, const std::string& origin,
                      std::shared_ptr<const KmsgCatalog>* out);
  static std::shared_ptr<const KmsgCatalog> Builtin();
  static Status LoadFile(const std::string& path, std::shared_ptr<const KmsgCatalog>* out);

  // The first pattern matching `text`; `dict_device` is the record's
  // DEVICE=+pci:... address (normalised), used when the pattern captures
  // none. nullopt: no pattern matches.
  std::optional<KmsgMatch> Match(std::string_view text, const std::string& dict_device) const;
  // The driver whose records start like `text` ("NVRM: ", "amdgpu "), or "".
  std::string DriverOf(std::string_view text) const;
  // A state-like code stays active until the device is seen healthy again;
  // any other is an event, active for event_active_for() after its record.
  bool IsState(const std::string& code) const;
  const std::vector<std::string>& states() const { return states_; }
  std::chrono::seconds event_active_for() const { return event_active_for_; }
  const std::vector<KmsgPattern>& patterns() const { return patterns_; }

 private:
  struct Driver {
    std::string name;
    std::string prefix;
  };
  std::vector<KmsgPattern> patterns_;
  std::vector<Driver> drivers_;
  std::vector<std::string> states_;
  std::chrono::seconds event_active_for_{600};
};

}  // namespace xpu::hal
