#include "sinks/device_taints.h"

#include <algorithm>
#include <cstdio>
#include <set>
#include <tuple>

#include "hal/pci_address.h"
#include "kubernetes/pod_watcher.h"

namespace xpu::sinks {
namespace {

using Json = nlohmann::json;

const Json* ObjectIn(const Json& j, const char* key) {
  if (!j.is_object()) return nullptr;
  auto it = j.find(key);
  return it != j.end() && it->is_object() ? &*it : nullptr;
}

std::optional<int64_t> IntIn(const Json& j, const char* key) {
  if (!j.is_object()) return std::nullopt;
  auto it = j.find(key);
  if (it == j.end() || !it->is_number_integer()) return std::nullopt;
  return it->get<int64_t>();
}

// Whether `path` (ParseKeeping's) is one of `leaves` under a bare object, a
// list's items or a watch event's object, or on the way to one.
bool KeptUnder(const std::string& path, std::initializer_list<const char*> leaves,
               std::initializer_list<const char*> whole) {
  static const char* const kRoots[] = {"", "items.", "object."};
  static const char* const kTop[] = {"kind",    "type",      "code",          "reason",
                                     "message", "resources", "resources.name"};
  for (const char* t : kTop)
    if (path == t || path == std::string("object.") + t) return true;
  for (const char* root : kRoots) {
    for (const char* leaf : leaves)
      if (kubernetes::OnPathTo(path, std::string(root) + leaf, false)) return true;
    for (const char* leaf : whole)
      if (kubernetes::OnPathTo(path, std::string(root) + leaf, true)) return true;
  }
  return false;
}

uint64_t Fnv(std::initializer_list<std::string_view> parts) {
  uint64_t h = 1469598103934665603ULL;
  for (std::string_view p : parts) {
    for (unsigned char c : p) h = (h ^ c) * 1099511628211ULL;
    h = (h ^ 0xff) * 1099511628211ULL;  // a separator no name holds
  }
  return h;
}

std::string Hex(uint64_t h, int digits) {
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return std::string(hex + 16 - digits);
}

// `s` made a run of DNS-label characters (lower-case letters, digits, '-'
// and, with `dots`, '.'), at most `max`, with no '-' or '.' at either end.
std::string DnsPart(std::string_view s, size_t max, bool dots) {
  std::string out;
  for (char c : s) {
    if (out.size() >= max) break;
    const char l = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    out += (std::isalnum(static_cast<unsigned char>(l)) || (dots && l == '.')) ? l : '-';
  }
  auto edge = [](char c) { return c == '-' || c == '.'; };
  while (!out.empty() && edge(out.back())) out.pop_back();
  while (!out.empty() && edge(out.front())) out.erase(out.begin());
  return out;
}

// An attribute's string value: {"string": "..."} (DeviceAttribute).
std::string AttributeString(const Json& attributes, const std::string& driver,
                            const std::string& name) {
  for (const std::string& key : {name, driver + "/" + name}) {
    const Json* a = ObjectIn(attributes, key.c_str());
    if (a == nullptr) continue;
    const std::string* v = StringIn(*a, "string");
    if (v != nullptr && v->size() <= kMaxAttributeBytes) return *v;
  }
  return {};
}

bool ValidDraName(const std::string& s) { return !s.empty() && s.size() <= kMaxDraNameBytes; }

}  // namespace

const std::string* StringIn(const Json& j, const char* key) {
  if (!j.is_object()) return nullptr;
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get_ptr<const std::string*>() : nullptr;
}

bool DraDevice::operator<(const DraDevice& o) const {
  return std::tie(driver, pool, device) < std::tie(o.driver, o.pool, o.device);
}

bool KeptSlicePath(const std::string& path) {
  return KeptUnder(path,
                   {"metadata.name", "metadata.resourceVersion", "metadata.continue", "spec.driver",
                    "spec.nodeName", "spec.pool.name", "spec.pool.generation",
                    "spec.pool.resourceSliceCount", "spec.devices.name"},
                   {"spec.devices.attributes"});
}

bool KeptRulePath(const std::string& path) {
  return KeptUnder(
      path,
      {"metadata.name", "metadata.resourceVersion", "metadata.continue",
       "spec.deviceSelector.driver", "spec.deviceSelector.pool", "spec.deviceSelector.device",
       "spec.taint.key", "spec.taint.value", "spec.taint.effect"},
      {"metadata.labels", "metadata.annotations"});
}

Status ParseSlice(const Json& object, Slice* out) {
  const Json* meta = ObjectIn(object, "metadata");
  const Json* spec = ObjectIn(object, "spec");
  const Json* pool = spec ? ObjectIn(*spec, "pool") : nullptr;
  const std::string* name = meta ? StringIn(*meta, "name") : nullptr;
  const std::string* driver = spec ? StringIn(*spec, "driver") : nullptr;
  const std::string* pool_name = pool ? StringIn(*pool, "name") : nullptr;
  if (name == nullptr || driver == nullptr || pool_name == nullptr || !ValidDraName(*name) ||
      !ValidDraName(*driver) || !ValidDraName(*pool_name))
    return Status::InvalidArgument("not a ResourceSlice (metadata.name, spec.driver, spec.pool)");
  Slice s;
  s.name = *name;
  s.driver = *driver;
  s.pool = *pool_name;
  s.generation = IntIn(*pool, "generation").value_or(0);
  s.slice_count = std::max<int64_t>(1, IntIn(*pool, "resourceSliceCount").value_or(1));
  auto devices = spec->find("devices");
  if (devices != spec->end() && devices->is_array()) {
    if (devices->size() > kMaxSliceDevices)
      return Status::InvalidArgument("ResourceSlice " + s.name + " lists " +
                                     std::to_string(devices->size()) + " devices (at most " +
                                     std::to_string(kMaxSliceDevices) + ")");
    for (const Json& d : *devices) {
      const std::string* dn = StringIn(d, "name");
      if (dn == nullptr || !ValidDraName(*dn)) continue;  // no device a rule can name
      Slice::Device dev;
      dev.name = *dn;
      if (const Json* attrs = ObjectIn(d, "attributes")) {
        dev.pci_bus_id =
            hal::CanonicalPciAddress(AttributeString(*attrs, s.driver, kPciBusIdAttribute));
        dev.uuid = AttributeString(*attrs, s.driver, "uuid");
      }
      s.devices.push_back(std::move(dev));
    }
  }
  *out = std::move(s);
  return Status::Ok();
}

Status ListsResource(std::string_view text, const std::string& resource, bool* out) {
  const Json j = kubernetes::ParseKeeping(text, [](const std::string&) { return true; });
  if (!j.is_object() || !j.contains("resources") || !j["resources"].is_array())
    return Status::InvalidArgument("not an APIResourceList");
  *out = false;
  for (const Json& r : j["resources"])
    if (const std::string* n = StringIn(r, "name"); n != nullptr && *n == resource) *out = true;
  return Status::Ok();
}

SliceIndex::SliceIndex(const std::map<std::string, Slice>& slices) {
  // A pool's newest generation, and how many of its slices are here.
  std::map<std::pair<std::string, std::string>, std::pair<int64_t, int64_t>> newest;
  std::map<std::pair<std::string, std::string>, int64_t> count;
  for (const auto& [name, s] : slices) {
    auto& n = newest[{s.driver, s.pool}];
    if (count.count({s.driver, s.pool}) == 0 || s.generation > n.first) n = {s.generation, 0};
    count[{s.driver, s.pool}] = 1;
    if (s.generation == n.first) n.second = std::max(n.second, s.slice_count);
  }
  std::map<std::pair<std::string, std::string>, int64_t> arrived;
  for (const auto& [name, s] : slices) {
    if (s.generation != newest[{s.driver, s.pool}].first) continue;
    ++arrived[{s.driver, s.pool}];
    for (const Slice::Device& d : s.devices)
      devices_.push_back({{s.driver, s.pool, d.name}, d.pci_bus_id, d.uuid});
  }
  for (const auto& [pool, n] : newest)
    if (arrived[pool] < n.second) incomplete_.push_back(pool.first + "/" + pool.second);
}

bool SliceIndex::HasDriver(const std::string& driver) const {
  return std::any_of(devices_.begin(), devices_.end(),
                     [&](const Entry& e) { return e.id.driver == driver; });
}

bool SliceIndex::Has(const DraDevice& d) const {
  return std::any_of(devices_.begin(), devices_.end(), [&](const Entry& e) { return e.id == d; });
}

std::optional<DraDevice> SliceIndex::Find(const store::InventoryDevice& card,
                                          const kubelet::DraRule& rule, std::string* why) const {
  auto one = [&](auto matches, const char* by) -> std::optional<std::optional<DraDevice>> {
    std::set<DraDevice> found;
    for (const Entry& e : devices_)
      if (matches(e)) found.insert(e.id);
    if (found.empty()) return std::nullopt;
    if (found.size() == 1) return std::optional<DraDevice>(*found.begin());
    *why = std::to_string(found.size()) + " devices in the node's ResourceSlices match it by " +
           by + " (" + found.begin()->driver + "/" + found.begin()->device + ", " +
           std::next(found.begin())->driver + "/" + std::next(found.begin())->device + ")";
    return std::optional<DraDevice>();
  };
  if (!card.bus_id.empty())
    if (auto r = one([&](const Entry& e) { return e.pci_bus_id == card.bus_id; }, "pciBusID"))
      return *r;
  const kubelet::KnownDevice known{card.uuid, card.minor >= 0 ? std::to_string(card.minor) : "",
                                   card.bus_id};
  const std::vector<kubelet::KnownDevice> just{known};
  // By name or uuid, never a device whose own address is another card's (a
  // driver that dropped a faulted card and numbered the rest again).
  auto another_address = [&](const Entry& e) {
    return !card.bus_id.empty() && !e.pci_bus_id.empty() && e.pci_bus_id != card.bus_id;
  };
  if (auto r = one(
          [&](const Entry& e) {
            return !another_address(e) && rule.DriverMatches(e.id.driver) &&
                   rule.Find(e.id.device, just) != nullptr;
          },
          "name (--kubelet.dra.device-names)"))
    return *r;
  if (!card.uuid.empty())
    if (auto r =
            one([&](const Entry& e) { return !another_address(e) && e.uuid == card.uuid; }, "uuid"))
      return *r;
  if (devices_.empty())
    *why = "no ResourceSlice of this node lists a device (device plugins only, or no DRA driver)";
  else
    *why = std::string("no device in the node's ResourceSlices names it (by ") +
           kPciBusIdAttribute + (card.bus_id.empty() ? "" : " " + card.bus_id) +
           ", a --kubelet.dra.device-names template or its uuid)" +
           (incomplete_.empty() ? "" : "; pool " + incomplete_.front() + " is incomplete");
  return std::nullopt;
}

std::vector<CardVerdict> VerdictsOf(const std::vector<store::SourceView>& views,
                                    const std::vector<store::InventoryDevice>& inventory) {
  std::map<std::string, CardVerdict> by_key;
  for (const store::InventoryDevice& d : inventory) {
    CardVerdict& v = by_key[d.key];
    v.key = d.key;
    v.bus_id = d.bus_id;
    v.uuid = d.uuid;
    v.minor = d.minor;
  }
  std::map<std::string, std::string> unknown;  // by card: why
  std::set<std::string> covered;               // by a source that sees
  for (const store::SourceView& s : views) {
    for (const store::SourceView::Device& d : s.devices) {
      auto it = by_key.find(d.key);
      if (it == by_key.end()) continue;
      CardVerdict& v = it->second;
      if (s.sight == store::Sight::kSeeing) covered.insert(d.key);
      if (s.sight != store::Sight::kSeeing) {
        unknown.emplace(d.key,
                        s.source + " cannot see" + (s.why.empty() ? "" : " (" + s.why + ")"));
        continue;
      }
      if (!d.seen) unknown.emplace(d.key, s.source + " does not see it");
      // A card it could not read keeps the faults last read (no recovery).
      for (const store::ActiveFault& f : d.faults) {
        if (f.level < store::kUnhealthyFaultLevel) continue;
        if (f.level > v.level) {
          v.level = f.level;
          v.level_name = f.level_name;
        }
        v.why += (v.why.empty() ? "" : "; ") + f.code + " " + f.name + " [" + s.source + "]";
      }
      if (d.healthy == false && v.level < store::kUnhealthyFaultLevel) {
        v.level = store::kUnhealthyFaultLevel;
        v.level_name = "restart_card";
        v.why += (v.why.empty() ? "" : "; ") + s.source + ": reports itself unhealthy";
      }
    }
  }
  // A blind source covers every card the same way: with no view of its
  // own it lists none, so each card it would cover is unknown.
  std::string blind;
  for (const store::SourceView& s : views)
    if (s.sight != store::Sight::kSeeing && s.devices.empty())
      blind += (blind.empty() ? "" : "; ") + s.source + " cannot see" +
               (s.why.empty() ? "" : " (" + s.why + ")");
  if (views.empty()) blind = "no HAL source reads the devices' faults (--hal)";
  std::vector<CardVerdict> out;
  for (auto& [key, v] : by_key) {
    auto u = unknown.find(key);
    if (u != unknown.end() || !blind.empty()) {
      v.known = false;
      v.unknown = u != unknown.end() ? u->second : blind;
    } else if (covered.count(key) == 0) {
      // No source that sees covers it (its driver is no longer NVML's, its
      // vendor none a source lists): nothing says it is healthy.
      v.known = false;
      v.unknown = "no health source covers it";
    }
    out.push_back(std::move(v));
  }
  return out;
}

std::string EffectOf(int level, const std::string& effect, int evict_level) {
  if (effect == "None") return "None";
  if (evict_level > 0 && level >= evict_level) return "NoExecute";
  return "NoSchedule";
}

bool VersionHasEffect(const std::string& version, const std::string& effect) {
  return effect != "None" || version != "v1alpha3";
}

std::string NodeLabelValue(const std::string& node) {
  // A label value: at most 63 of [A-Za-z0-9._-], alphanumeric at both ends.
  const std::string part = DnsPart(node, 63, true);
  if (part == node) return node;
  return DnsPart(node, 63 - 17, true) + "-" + Hex(Fnv({node}), 16);
}

std::string RuleName(const std::string& node, const DraDevice& device) {
  // node (at most 180) "." device (at most 48) "-" 12 hex digits: 242 at
  // most, every part a run of DNS-label characters.
  std::string name = DnsPart(node, 180, true);
  const std::string dev = DnsPart(device.device, 48, false);
  if (!name.empty()) name += ".";
  if (!dev.empty()) name += dev + "-";
  return name + Hex(Fnv({node, device.driver, device.pool, device.device}), 12);
}

std::string RuleBody(const std::string& version, const std::string& node, const Rule& rule) {
  Json meta = {{"name", rule.name},
               {"labels", {{kManagedByLabel, kManagedByValue}, {kNodeLabel, NodeLabelValue(node)}}},
               {"annotations", {{kNodeAnnotation, node}, {kBusAnnotation, rule.bus_id}}}};
  if (!rule.resource_version.empty()) meta["resourceVersion"] = rule.resource_version;
  Json j = {{"apiVersion", std::string(kResourceGroup) + "/" + version},
            {"kind", "DeviceTaintRule"},
            {"metadata", meta},
            {"spec",
             {{"deviceSelector",
               {{"driver", rule.device.driver},
                {"pool", rule.device.pool},
                {"device", rule.device.device}}},
              {"taint", {{"key", kTaintKey}, {"value", rule.value}, {"effect", rule.effect}}}}}};
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

Status ParseRule(const Json& object, const std::string& node, Rule* out) {
  const Json* meta = ObjectIn(object, "metadata");
  const Json* spec = ObjectIn(object, "spec");
  const std::string* name = meta ? StringIn(*meta, "name") : nullptr;
  if (name == nullptr || spec == nullptr || name->size() > kMaxDraNameBytes)
    return Status::InvalidArgument("not a DeviceTaintRule (metadata.name, spec)");
  Rule r;
  r.name = *name;
  if (const std::string* rv = StringIn(*meta, "resourceVersion")) r.resource_version = *rv;
  if (const Json* sel = ObjectIn(*spec, "deviceSelector"))
    for (auto [key, to] : {std::pair{"driver", &r.device.driver},
                           {"pool", &r.device.pool},
                           {"device", &r.device.device}})
      if (const std::string* v = StringIn(*sel, key)) *to = v->substr(0, kMaxDraNameBytes);
  if (const Json* taint = ObjectIn(*spec, "taint")) {
    const std::string* key = StringIn(*taint, "key");
    if (key != nullptr && *key == kTaintKey) {
      if (const std::string* v = StringIn(*taint, "value")) r.value = v->substr(0, 63);
      if (const std::string* e = StringIn(*taint, "effect")) r.effect = e->substr(0, 32);
    }
  }
  const Json* labels = ObjectIn(*meta, "labels");
  const Json* notes = ObjectIn(*meta, "annotations");
  const std::string* managed = labels ? StringIn(*labels, kManagedByLabel) : nullptr;
  const std::string* node_label = labels ? StringIn(*labels, kNodeLabel) : nullptr;
  const std::string* node_name = notes ? StringIn(*notes, kNodeAnnotation) : nullptr;
  r.ours = managed != nullptr && *managed == kManagedByValue && node_label != nullptr &&
           *node_label == NodeLabelValue(node) && node_name != nullptr && *node_name == node;
  if (const std::string* bus = notes ? StringIn(*notes, kBusAnnotation) : nullptr)
    r.bus_id = hal::CanonicalPciAddress(*bus);
  *out = std::move(r);
  return Status::Ok();
}

}  // namespace xpu::sinks
