#include "kubernetes/hami.h"

#include <charconv>
#include <nlohmann/json.hpp>

#include "common/json_depth.h"
#include "common/label.h"
#include "kubernetes/pod_watcher.h"

namespace xpu::kubernetes::hami {
namespace {

std::vector<std::string_view> Split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  size_t start = 0;
  for (size_t i = 0; i <= s.size(); ++i) {
    if (i == s.size() || s[i] == sep) {
      out.push_back(s.substr(start, i - start));
      start = i + 1;
    }
  }
  return out;
}

// A whole decimal in [0, max].
bool Number(std::string_view s, int64_t max, int64_t* out) {
  int64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || v < 0 || v > max) return false;
  *out = v;
  return true;
}

// A text field as a label value: bounded, valid UTF-8.
std::string Field(std::string_view s) {
  std::string v(s.substr(0, kMaxFieldBytes));
  SanitizeLabelValue(&v, kMaxFieldBytes);
  return v;
}

constexpr int64_t kMaxMib = int64_t{1} << 40;  // a mebibyte count no device reaches
constexpr int64_t kMaxCores = 100000;

bool KeyBetween(std::string_view key, std::string_view prefix, std::string_view suffix) {
  return key.size() > prefix.size() + suffix.size() && key.substr(0, prefix.size()) == prefix &&
         key.substr(key.size() - suffix.size()) == suffix;
}

}  // namespace

bool IsAllocatedAnnotation(std::string_view key) {
  return KeyBetween(key, "hami.io/", "-devices-allocated");
}

bool IsRegisterAnnotation(std::string_view key) {
  return KeyBetween(key, "hami.io/node-", "-register");
}

Status ParseAllocated(std::string_view value, std::vector<std::vector<Grant>>* containers) {
  if (value.size() > kMaxAnnotationBytes)
    return Status::InvalidArgument("longer than " + std::to_string(kMaxAnnotationBytes) + " bytes");
  std::vector<std::vector<Grant>> out;
  std::vector<std::string_view> parts = Split(value, ';');
  if (!parts.empty() && parts.back().empty()) parts.pop_back();  // the trailing ';'
  if (parts.size() > kMaxContainers)
    return Status::InvalidArgument("more than " + std::to_string(kMaxContainers) + " containers");
  for (size_t c = 0; c < parts.size(); ++c) {
    std::vector<Grant> grants;
    std::vector<std::string_view> devices = Split(parts[c], ':');
    if (!devices.empty() && devices.back().empty()) devices.pop_back();  // the trailing ':'
    if (devices.size() > kMaxDevicesPerContainer)
      return Status::InvalidArgument("container " + std::to_string(c) + ": more than " +
                                     std::to_string(kMaxDevicesPerContainer) + " devices");
    for (std::string_view d : devices) {
      std::vector<std::string_view> f = Split(d, ',');
      Grant g;
      if (f.size() != 4 || f[0].empty())
        return Status::InvalidArgument("container " + std::to_string(c) +
                                       ": want UUID,type,memory,cores per device");
      if (!Number(f[2], kMaxMib, &g.memory_mib) || !Number(f[3], kMaxCores, &g.cores))
        return Status::InvalidArgument("container " + std::to_string(c) +
                                       ": memory and cores must be whole numbers >= 0");
      g.uuid = Field(f[0]);
      g.type = Field(f[1]);
      grants.push_back(std::move(g));
    }
    out.push_back(std::move(grants));
  }
  *containers = std::move(out);
  return Status::Ok();
}

Status ParseRegister(std::string_view value, std::vector<Registered>* devices) {
  if (value.size() > kMaxAnnotationBytes)
    return Status::InvalidArgument("longer than " + std::to_string(kMaxAnnotationBytes) + " bytes");
  std::vector<Registered> out;
  const size_t first = value.find_first_not_of(" \t\r\n");
  if (first != std::string_view::npos && value[first] == '[') {
    if (!JsonNestingWithin(value, kMaxJsonDepth))
      return Status::InvalidArgument("nested deeper than " + std::to_string(kMaxJsonDepth));
    nlohmann::json j = nlohmann::json::parse(value, nullptr, /*allow_exceptions=*/false);
    if (!j.is_array()) return Status::InvalidArgument("not a JSON array of devices");
    if (j.size() > kMaxNodeDevices)
      return Status::InvalidArgument("more than " + std::to_string(kMaxNodeDevices) + " devices");
    for (const auto& d : j) {
      if (!d.is_object() || !d.contains("id") || !d["id"].is_string())
        return Status::InvalidArgument("a device without a string \"id\"");
      Registered r;
      r.uuid = Field(d["id"].get<std::string>());
      auto num = [&](const char* key, int64_t max, int64_t* outv) {
        if (!d.contains(key)) return true;
        const auto& v = d[key];
        if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > max) return false;
        *outv = v.get<int64_t>();
        return true;
      };
      if (!num("count", kMaxCores, &r.split_count) || !num("devmem", kMaxMib, &r.memory_mib) ||
          !num("devcore", kMaxCores, &r.cores))
        return Status::InvalidArgument("device " + r.uuid +
                                       ": count, devmem and devcore must be whole numbers >= 0");
      if (d.contains("type") && d["type"].is_string()) r.type = Field(d["type"].get<std::string>());
      r.healthy = d.contains("health") && d["health"].is_boolean() && d["health"].get<bool>();
      out.push_back(std::move(r));
    }
    *devices = std::move(out);
    return Status::Ok();
  }
  std::vector<std::string_view> parts = Split(value, ':');
  if (!parts.empty() && parts.back().empty()) parts.pop_back();
  if (parts.size() > kMaxNodeDevices)
    return Status::InvalidArgument("more than " + std::to_string(kMaxNodeDevices) + " devices");
  for (std::string_view d : parts) {
    std::vector<std::string_view> f = Split(d, ',');
    if (f.size() < 7 || f[0].empty())
      return Status::InvalidArgument("want UUID,count,memory,cores,type,numa,healthy per device");
    Registered r;
    r.uuid = Field(f[0]);
    int64_t numa = 0;
    if (!Number(f[1], kMaxCores, &r.split_count) || !Number(f[2], kMaxMib, &r.memory_mib) ||
        !Number(f[3], kMaxCores, &r.cores) || !Number(f[5], 1 << 20, &numa))
      return Status::InvalidArgument("device " + r.uuid +
                                     ": count, memory, cores and numa must be whole numbers >= 0");
    if (f[6] != "true" && f[6] != "false")
      return Status::InvalidArgument("device " + r.uuid + ": healthy must be true or false");
    r.type = Field(f[4]);
    r.healthy = f[6] == "true";
    out.push_back(std::move(r));
  }
  *devices = std::move(out);
  return Status::Ok();
}

}  // namespace xpu::kubernetes::hami
