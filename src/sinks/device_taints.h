#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "kubelet/pod_mapper.h"
#include "store/faults.h"
#include "store/views.h"

// Device health to the scheduler, per card (docs/kubernetes.md, "Device
// taints"): what the DRA API says of this node's devices (ResourceSlices),
// which card each names, what each card's health asks for, and the
// DeviceTaintRule that says it. Pure functions and small value classes;
// DeviceTainter does the talking.
namespace xpu::sinks {

// The API group, and its versions that may serve DeviceTaintRules, newest
// first: discovery uses the first whose resource list has them.
inline constexpr const char* kResourceGroup = "resource.k8s.io";
inline constexpr const char* kRuleVersions[] = {"v1", "v1beta2", "v1beta1", "v1alpha3"};
// ResourceSlices are read in the newest of these that serves them (v1 is GA
// since 1.34; v1beta2's devices have the same shape).
inline constexpr const char* kSliceVersions[] = {"v1", "v1beta2"};
// The one taint key; its value is the card's worst level ("reset_card"), so
// a pod may tolerate the key, or only some levels.
inline constexpr const char* kTaintKey = "xpu-exporter.io/card-fault";
// The labels a rule of ours carries (a restarted exporter lists its own
// rules by them, and touches no other), and its annotations.
inline constexpr const char* kManagedByLabel = "app.kubernetes.io/managed-by";
inline constexpr const char* kManagedByValue = "xpu-exporter";
inline constexpr const char* kNodeLabel = "xpu-exporter.io/node";
inline constexpr const char* kNodeAnnotation = "xpu-exporter.io/node-name";
inline constexpr const char* kBusAnnotation = "xpu-exporter.io/bus-id";
// The standard attribute a DRA driver gives a PCI device's address.
inline constexpr const char* kPciBusIdAttribute = "resource.kubernetes.io/pciBusID";
// Limits on what the API server can make us hold (docs/reliability.md).
inline constexpr size_t kMaxSlices = 256;          // this node's ResourceSlices
inline constexpr size_t kMaxSliceDevices = 1024;   // devices in one slice (the API's is 128)
inline constexpr size_t kMaxDraNameBytes = 253;    // a driver, pool or device name
inline constexpr size_t kMaxRules = 1024;          // rules of ours listed at once
inline constexpr size_t kMaxAttributeBytes = 256;  // an attribute's string value

// Where a rule selects a device: its DRA driver, pool and name.
struct DraDevice {
  std::string driver, pool, device;
  bool operator==(const DraDevice&) const = default;
  bool operator<(const DraDevice& o) const;
};

// One ResourceSlice as kept: its pool's generation and slice count, and each
// device's name with the attributes that can name a card.
struct Slice {
  std::string name, driver, pool;
  int64_t generation = 0;
  int64_t slice_count = 1;
  struct Device {
    std::string name;
    std::string pci_bus_id;  // canonical; empty when the attribute is absent
    std::string uuid;        // the "uuid" attribute (the driver's own domain)
    bool operator==(const Device&) const = default;
  };
  std::vector<Device> devices;
  bool operator==(const Slice&) const = default;
};

// `j[key]` when `j` is an object and that is a string, else nullptr.
const std::string* StringIn(const nlohmann::json& j, const char* key);

// A ResourceSlice object (JSON, as ParseKeeping keeps it: KeptSlicePath) to
// a Slice. InvalidArgument when it is none, or past the limits above.
Status ParseSlice(const nlohmann::json& object, Slice* out);
bool KeptSlicePath(const std::string& path);

// Whether an APIResourceList (the answer of /apis/resource.k8s.io/<v>)
// lists `resource`. InvalidArgument when it is not one.
Status ListsResource(std::string_view text, const std::string& resource, bool* out);

// Which device of the node's slices names each card. Built from every
// slice seen (a pool's newest generation wins; older ones are ignored), then
// asked per card: the device whose pciBusID is the card's address, else one
// of a matching driver named by the --kubelet.dra.device-names templates,
// else one whose uuid attribute is the card's. Two devices naming one card
// name none (ambiguous, said).
class SliceIndex {
 public:
  explicit SliceIndex(const std::map<std::string, Slice>& slices);
  // The device naming `card`, or nullopt with `why` saying why none does.
  std::optional<DraDevice> Find(const store::InventoryDevice& card, const kubelet::DraRule& rule,
                                std::string* why) const;
  // Pools whose slices have not all arrived (fewer than its slice count at
  // its newest generation): a card not found may be in the rest.
  const std::vector<std::string>& incomplete() const { return incomplete_; }
  bool empty() const { return devices_.empty(); }
  // Whether `d` is a device of the current slices.
  bool Has(const DraDevice& d) const;
  // Whether a slice of `driver` is here.
  bool HasDriver(const std::string& driver) const;

 private:
  struct Entry {
    DraDevice id;
    std::string pci_bus_id, uuid;
  };
  std::vector<Entry> devices_;
  std::vector<std::string> incomplete_;
};

// What a card's health asks of its rule: a taint at its worst level, none
// (every source that covers it sees it, and none shows a card-level fault),
// or unknown (a source that covers it cannot see it: a rule stays as it is).
struct CardVerdict {
  std::string key, bus_id, uuid;
  int32_t minor = -1;
  int level = 0;  // 0: no fault at restart_card or worse
  std::string level_name;
  // Every source that covers it sees it: `level` is all there is. Unknown
  // (a source cannot see, or none runs), `level` is what the others saw: a
  // floor, never a recovery.
  bool known = true;
  std::string why;      // what faults
  std::string unknown;  // why unknown
};
// Per card of `inventory`, from the views (as ConditionOf judges the node:
// only a source that sees raises; a card's own unhealthy bit is
// restart_card; a blind, stale or not-yet source, one that does not see the
// card, or no source at all makes it unknown, whatever the others show).
std::vector<CardVerdict> VerdictsOf(const std::vector<store::SourceView>& views,
                                    const std::vector<store::InventoryDevice>& inventory);

// The effect for `level`: "None" where the operator only watches
// (`effect` "None"), else "NoExecute" at `evict_level` or worse (0: never),
// else "NoSchedule".
std::string EffectOf(int level, const std::string& effect, int evict_level);
// Whether the served version has `effect` (v1alpha3 has no "None").
bool VersionHasEffect(const std::string& version, const std::string& effect);

// The rule's name for `device` on `node`: a DNS subdomain of at most 253
// characters, readable (the node and the device) and unique (a hash of the
// node, driver, pool and device, which any of them cut short still tells
// apart).
std::string RuleName(const std::string& node, const DraDevice& device);
// The node's label value (a label value is at most 63 characters: a longer
// or odd node name is hashed).
std::string NodeLabelValue(const std::string& node);

// A rule as we write it and read it back.
struct Rule {
  std::string name;
  DraDevice device;
  std::string value;             // the level name
  std::string effect;            // None, NoSchedule, NoExecute
  std::string bus_id;            // the card it stands for (an annotation)
  std::string resource_version;  // as read; empty for one not yet written
  bool ours = false;             // carries our labels and this node's annotation
  bool operator==(const Rule&) const = default;
};
// The object to create or update (`resource_version` set for an update).
std::string RuleBody(const std::string& version, const std::string& node, const Rule& rule);
// A DeviceTaintRule object (JSON) to a Rule; `ours` tells whether it is this
// node's exporter's. InvalidArgument when it is no rule.
Status ParseRule(const nlohmann::json& object, const std::string& node, Rule* out);
bool KeptRulePath(const std::string& path);

}  // namespace xpu::sinks
