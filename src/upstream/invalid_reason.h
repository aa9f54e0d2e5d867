#pragma once

#include <array>
#include <cstddef>
#include <string_view>

namespace xpu::upstream {

// Why upstream data was dropped or repaired: the `reason` label of
// xpu_exporter_invalid_samples_total, and the key of the line logged the first
// time each happens. Add a reason here and in kInvalidReasons together.
enum class InvalidReason {
  kNonFinite,           // NaN or +-Inf value; dropped
  kNegativeCounter,     // counter below zero; dropped
  kDuplicate,           // same series twice in one message; the last wins
  kUnknownDevice,       // data for a minor ListAndWatch does not list; dropped
  kBadLabel,            // string with invalid UTF-8 or too long; repaired
  kBadTopology,         // malformed topology JSON; topology labels omitted
  kUnexpectedInstance,  // instance on a metric without an instance label; dropped
  kDuplicateMinor,      // ListAndWatch lists a minor twice; the first wins
  kDeviceCap,           // beyond --collector.max-devices; dropped
  kCount,
};
inline constexpr size_t kInvalidReasonCount = static_cast<size_t>(InvalidReason::kCount);

struct InvalidReasonInfo {
  InvalidReason reason;
  std::string_view name;     // the metric label
  std::string_view message;  // logged once
};

inline constexpr std::array<InvalidReasonInfo, kInvalidReasonCount> kInvalidReasons = {{
    {InvalidReason::kNonFinite, "non_finite", "XDM sent NaN or infinite values; dropped"},
    {InvalidReason::kNegativeCounter, "negative_counter",
     "XDM sent negative counter values; dropped"},
    {InvalidReason::kDuplicate, "duplicate",
     "XDM sent the same series twice in one message; the last wins"},
    {InvalidReason::kUnknownDevice, "unknown_device",
     "XDM sent data for a device ListAndWatch does not list; dropped"},
    {InvalidReason::kBadLabel, "bad_label",
     "XDM sent strings with invalid UTF-8 or too long; repaired"},
    {InvalidReason::kBadTopology, "bad_topology",
     "XDM sent a malformed topology JSON; topology labels omitted"},
    {InvalidReason::kUnexpectedInstance, "unexpected_instance",
     "XDM sent an instance for a metric that has none in the catalog; dropped"},
    {InvalidReason::kDuplicateMinor, "duplicate_minor",
     "XDM listed a minor twice in ListAndWatch; the first wins"},
    {InvalidReason::kDeviceCap, "device_cap",
     "XDM sent more devices than --collector.max-devices; dropped"},
}};

constexpr const InvalidReasonInfo& Describe(InvalidReason r) {
  return kInvalidReasons[static_cast<size_t>(r)];
}

// The table is indexed by the enum: each row must sit at its own value.
consteval bool InvalidReasonTableInOrder() {
  for (size_t i = 0; i < kInvalidReasonCount; ++i)
    if (static_cast<size_t>(kInvalidReasons[i].reason) != i) return false;
  return true;
}
static_assert(InvalidReasonTableInOrder(), "kInvalidReasons out of enum order");

// Counts per reason, filled by decoding and by the store's apply step.
class InvalidCounts {
 public:
  void Add(InvalidReason r, size_t n = 1) { n_[static_cast<size_t>(r)] += n; }
  size_t operator[](InvalidReason r) const { return n_[static_cast<size_t>(r)]; }
  void Merge(const InvalidCounts& other) {
    for (size_t i = 0; i < kInvalidReasonCount; ++i) n_[i] += other.n_[i];
  }
  bool operator==(const InvalidCounts&) const = default;

 private:
  std::array<size_t, kInvalidReasonCount> n_{};
};

}  // namespace xpu::upstream
