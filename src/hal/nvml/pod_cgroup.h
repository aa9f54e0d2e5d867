#pragma once

// Which Kubernetes pod and container a process runs in, from its cgroup
// (`/proc/<pid>/cgroup`), as the kubelet names the cgroups it makes: the
// pod's uid and the container runtime's id. The nvml backend joins the
// processes holding a card's memory to their pods with it (docs/hal.md,
// "Per-process memory"). Pure functions: any thread.

#include <cstddef>
#include <string>
#include <string_view>

namespace xpu::hal {

// A cgroup file is a few lines; more than this is not one.
inline constexpr size_t kMaxCgroupFileBytes = size_t{16} * 1024;

struct PodCgroup {
  // "1f6c2f9e-7a1b-4c2d-9e3f-0a1b2c3d4e5f", as metadata.uid; a static pod's
  // 32 hex digits, as its mirror pod's kubernetes.io/config.mirror.
  std::string pod_uid;
  std::string container_id;  // 64 hex digits, as status.containerStatuses' id after "://"
};

// The pod and container a `/proc/<pid>/cgroup` text names, from the first
// line whose path holds a kubelet pod cgroup: the cgroupfs driver's
// ".../kubepods/burstable/pod<uid>/<id>" and the systemd driver's
// ".../kubepods-burstable-pod<uid_with_underscores>.slice/cri-containerd-<id>.scope"
// (docker-, crio- and bare ids too), also as a reader in a cgroup namespace
// sees them, relative to its own cgroup ("/../../pod<uid>/<id>"). False for a
// process in no pod (a system service, the host) or a text that is not a
// cgroup file.
bool ParsePodCgroup(std::string_view text, PodCgroup* out);

// Reads `<proc>/<pid>/cgroup` (bounded) and parses it. False, with `*why`
// set, when it cannot be read (the process ended, no such /proc); true with
// `*in_pod` false for a process in no pod.
bool ReadPodCgroup(const std::string& proc, unsigned pid, PodCgroup* out, bool* in_pod,
                   std::string* why);

}  // namespace xpu::hal
