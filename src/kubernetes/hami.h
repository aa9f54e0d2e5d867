#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

// HAMi's annotation protocol for shared devices (docs/kubernetes.md): what
// the scheduler granted each container, and what each node's device plugin
// registered. Pure parsers; every limit below is in docs/reliability.md.
namespace xpu::kubernetes::hami {

inline constexpr size_t kMaxAnnotationBytes = size_t{64} * 1024;
inline constexpr size_t kMaxContainers = 64;
inline constexpr size_t kMaxDevicesPerContainer = 64;
inline constexpr size_t kMaxNodeDevices = 256;
inline constexpr size_t kMaxFieldBytes = 256;

// Pod annotations "hami.io/<type>-devices-allocated" (vgpu for NVIDIA) and
// node annotations "hami.io/node-<type>-register".
bool IsAllocatedAnnotation(std::string_view key);
bool IsRegisterAnnotation(std::string_view key);

// One device share granted to a container.
struct Grant {
  std::string uuid;
  std::string type;
  int64_t memory_mib = 0;  // 0: no memory limit given
  int64_t cores = 0;       // percent of the device's cores; 0: none given
  bool operator==(const Grant&) const = default;
};

// "UUID,type,memoryMiB,cores:" per device, ";" per container, in the pod
// spec's container order (an empty entry for a container with none).
// InvalidArgument names the first fault; nothing is returned then.
Status ParseAllocated(std::string_view value, std::vector<std::vector<Grant>>* containers);

// One device as a node's device plugin registered it for sharing.
struct Registered {
  std::string uuid;
  int64_t split_count = 0;  // how many containers may share it
  int64_t memory_mib = 0;   // memory shared out
  int64_t cores = 0;        // cores shared out, percent
  std::string type;
  bool healthy = false;
  bool operator==(const Registered&) const = default;
};

// "UUID,count,memoryMiB,cores,type,numa,healthy:" per device, or the JSON
// array newer HAMi writes ([{"id","count","devmem","devcore","type",
// "health"...}]).
Status ParseRegister(std::string_view value, std::vector<Registered>* devices);

}  // namespace xpu::kubernetes::hami
