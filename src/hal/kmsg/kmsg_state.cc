#include "hal/kmsg/kmsg_state.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "common/fault_code.h"
#include "common/file_util.h"
#include "hal/kmsg/kmsg_sampler.h"
#include "hal/pci/pci.h"

namespace xpu::hal {
namespace {

using Json = nlohmann::json;

Status Bad(const std::string& why) { return Status::InvalidArgument("kmsg state file: " + why); }

// write(2) all of it, through EINTR and short writes.
bool WriteAll(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

}  // namespace

std::string SerializeKmsgStates(const KmsgSavedStates& s) {
  Json states = Json::object();
  for (const auto& [address, codes] : s.states) states[address] = codes;
  return Json{{"version", 1}, {"boot_id", s.boot_id}, {"states", states}}.dump() + "\n";
}

Status ParseKmsgStates(std::string_view text, KmsgSavedStates* out) {
  if (text.size() > kMaxKmsgStateFileBytes)
    return Bad("longer than " + std::to_string(kMaxKmsgStateFileBytes) + " bytes");
  const Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Bad("not a JSON object");
  auto version = j.find("version");
  if (version == j.end() || !version->is_number_integer() || version->get<int64_t>() != 1)
    return Bad("version is not 1");
  auto boot = j.find("boot_id");
  if (boot == j.end() || !boot->is_string() || boot->get_ref<const std::string&>().empty() ||
      boot->get_ref<const std::string&>().size() > 64)
    return Bad("boot_id is not a boot id");
  auto states = j.find("states");
  if (states == j.end() || !states->is_object()) return Bad("states is not an object");
  if (states->size() > kMaxKmsgDevices) return Bad("more devices than the backend holds");
  KmsgSavedStates s;
  s.boot_id = boot->get<std::string>();
  for (const auto& [address, codes] : states->items()) {
    if (CanonicalPciAddress(address) != address) return Bad("'" + address + "' is no PCI address");
    if (!codes.is_array() || codes.size() > kMaxKmsgCodesPerDevice)
      return Bad(address + ": codes are not a list within bounds");
    std::set<std::string>& kept = s.states[address];
    for (const Json& c : codes) {
      if (!c.is_string() || NormalizeFaultCode(c.get<std::string>()) != c.get<std::string>())
        return Bad(address + ": not a fault code");
      kept.insert(c.get<std::string>());
    }
  }
  *out = std::move(s);
  return Status::Ok();
}

std::string ReadBootId(const std::string& path) {
  std::string text;
  if (!ReadTextFile(path, "boot id", &text, 256).ok()) return {};
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text;
}

Status WriteFileAtomically(const std::string& path, const std::string& content) {
  // Named for this process: two exporters on one host path (a rollout's
  // old and new pod) never write into one temporary file.
  const std::string tmp = path + ".tmp." + std::to_string(getpid());
  unlink(tmp.c_str());  // one a crash of this pid's predecessor left
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) return Status::IoError("cannot write " + tmp + ": " + ErrnoText(errno));
  const bool written = WriteAll(fd, content) && fsync(fd) == 0;
  const int err = errno;
  close(fd);
  if (!written || rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = written ? errno : err;
    unlink(tmp.c_str());
    return Status::IoError("cannot write " + path + ": " + ErrnoText(e));
  }
  // The rename itself lasts once the directory is on disk.
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "."
                          : slash == 0               ? "/"
                                                     : path.substr(0, slash);
  const int dfd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    fsync(dfd);
    close(dfd);
  }
  return Status::Ok();
}

}  // namespace xpu::hal
