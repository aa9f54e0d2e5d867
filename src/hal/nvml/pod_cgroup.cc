#include "hal/nvml/pod_cgroup.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <utility>
#include <vector>

#include "common/file_util.h"

namespace xpu::hal {
namespace {

bool IsLowerHex(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); }

// A uid the kubelet names a pod's cgroup by, as the whole of `s`: its
// metadata.uid (36 characters, its four separators all '-' or all '_', as
// the systemd driver escapes them), written with '-'; or a static pod's (the
// md5 of its config, 32 hex digits: what its mirror pod's
// kubernetes.io/config.mirror says).
bool UidIs(std::string_view s, std::string* uid) {
  if (s.size() == 32) {
    for (const char c : s)
      if (!IsLowerHex(c)) return false;
    uid->assign(s);
    return true;
  }
  if (s.size() != 36) return false;
  const char sep = s[8];
  if (sep != '-' && sep != '_') return false;
  for (size_t i = 0; i < s.size(); ++i) {
    const bool at_sep = i == 8 || i == 13 || i == 18 || i == 23;
    if (at_sep ? s[i] != sep : !IsLowerHex(s[i])) return false;
  }
  uid->assign(s);
  for (char& c : *uid)
    if (c == '_') c = '-';
  return true;
}

// A pod's cgroup: "pod<uid>" (cgroupfs), "[kubelet-]kubepods[-<qos>]-pod<uid>.slice"
// (systemd). The uid, of either length, ends the name (before ".slice").
bool PodSegment(std::string_view seg, std::string* uid) {
  if (seg.ends_with(".slice")) seg.remove_suffix(6);
  for (const size_t len : {size_t{36}, size_t{32}}) {
    if (seg.size() < 3 + len) continue;
    const std::string_view before = seg.substr(0, seg.size() - len);
    if (before != "pod" &&
        !(before.ends_with("-pod") && before.find("kubepods") != std::string_view::npos))
      continue;
    if (UidIs(seg.substr(seg.size() - len), uid)) return true;
  }
  return false;
}

// A container's cgroup under its pod's: "<id>", "cri-containerd-<id>.scope",
// "docker-<id>.scope", "crio-<id>.scope"; the id 64 hex digits.
bool ContainerSegment(std::string_view seg, std::string* id) {
  if (seg.ends_with(".scope")) seg.remove_suffix(6);
  if (const size_t dash = seg.rfind('-'); dash != std::string_view::npos)
    seg.remove_prefix(dash + 1);
  if (seg.size() != 64) return false;
  for (const char c : seg)
    if (!IsLowerHex(c)) return false;
  id->assign(seg);
  return true;
}

bool ParsePath(std::string_view path, PodCgroup* out) {
  std::vector<std::string_view> segs;
  while (!path.empty()) {
    const size_t slash = path.find('/');
    const std::string_view seg = path.substr(0, slash);
    if (!seg.empty()) segs.push_back(seg);
    if (slash == std::string_view::npos) break;
    path.remove_prefix(slash + 1);
  }
  bool under_kubepods = false;
  bool pod_may_follow = false;  // the leading ".."s, or a QoS class right after them
  for (size_t i = 0; i < segs.size(); ++i) {
    // Read from inside a cgroup namespace (an unprivileged container on
    // cgroup v2), another process's path is relative to the reader's own
    // cgroup, "/../../pod<uid>/<id>": the kubelet's tree is above it, and
    // the segment after the ".."s may be a pod, or the QoS class of one in
    // another class than the reader's ("/../../../besteffort/pod<uid>/<id>",
    // cgroupfs). The kernel writes ".." only there: after a name it is no
    // path of its, and proves nothing.
    if (segs[i] == "..") {
      if (i > 0 && segs[i - 1] != "..") return false;
      pod_may_follow = true;
      continue;
    }
    const bool next_to_parents = std::exchange(pod_may_follow, false);
    if (next_to_parents && segs[i - 1] == ".." &&
        (segs[i] == "burstable" || segs[i] == "besteffort")) {
      pod_may_follow = true;
      continue;
    }
    // The kubelet's own tree first ("kubepods", "kubepods.slice",
    // "kubelet-kubepods.slice"): a "pod<uid>" anywhere else is not its.
    if (segs[i].find("kubepods") != std::string_view::npos &&
        segs[i].find("-pod") == std::string_view::npos) {
      under_kubepods = true;
      continue;
    }
    PodCgroup found;
    if (!(under_kubepods || next_to_parents) || !PodSegment(segs[i], &found.pod_uid)) continue;
    if (i + 1 >= segs.size() || !ContainerSegment(segs[i + 1], &found.container_id)) return false;
    *out = std::move(found);
    return true;
  }
  return false;
}

}  // namespace

bool ParsePodCgroup(std::string_view text, PodCgroup* out) {
  if (text.size() > kMaxCgroupFileBytes) return false;
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    // "hierarchy-id:controllers:path"
    const size_t a = line.find(':');
    const size_t b = a == std::string_view::npos ? a : line.find(':', a + 1);
    if (b == std::string_view::npos) continue;
    line.remove_prefix(b + 1);
    if (ParsePath(line, out)) return true;
  }
  return false;
}

bool ReadPodCgroup(const std::string& proc, unsigned pid, PodCgroup* out, bool* in_pod,
                   std::string* why) {
  const std::string path = proc + "/" + std::to_string(pid) + "/cgroup";
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    *why = path + ": " + ErrnoText(errno);
    return false;
  }
  std::string text;
  char buf[4096];
  for (;;) {
    const ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      *why = path + ": " + ErrnoText(errno);
      close(fd);
      return false;
    }
    if (n == 0) break;
    text.append(buf, static_cast<size_t>(n));
    if (text.size() > kMaxCgroupFileBytes) {
      *why = path + ": longer than " + std::to_string(kMaxCgroupFileBytes) + " bytes";
      close(fd);
      return false;
    }
  }
  close(fd);
  *in_pod = ParsePodCgroup(text, out);
  return true;
}

}  // namespace xpu::hal
