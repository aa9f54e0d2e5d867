#include "hal/kmsg/kmsg_state.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

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

// A state file's writes are short (one small file, an fsync): a holder
// longer than this is stuck, and this write is counted and retried later.
constexpr std::chrono::seconds kStateLockWait{2};

// flock(LOCK_EX) on `fd`, given up after `wait`: 0, or the errno
// (EWOULDBLOCK: still held by another at the deadline).
int LockWithin(int fd, std::chrono::milliseconds wait) {
  const auto deadline = std::chrono::steady_clock::now() + wait;
  while (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    if (err != EWOULDBLOCK && err != EINTR) return err;
    if (std::chrono::steady_clock::now() >= deadline) return EWOULDBLOCK;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // the holder's fsync
  }
  return 0;
}

// Temporary files a crashed writer left (`prefix`*): under the lock no
// writer holds one.
void RemoveLeftovers(const std::string& dir, const std::string& prefix) {
  std::error_code ec;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() > prefix.size() && name.compare(0, prefix.size(), prefix) == 0)
      std::filesystem::remove(it->path(), ec);
  }
}

}  // namespace

std::string SerializeKmsgStates(const KmsgSavedStates& s) {
  Json states = Json::object();
  for (const auto& [address, codes] : s.states) states[address] = codes;
  Json events = Json::object();
  for (const auto& [address, codes] : s.events) events[address] = codes;
  return Json{{"version", 1}, {"boot_id", s.boot_id}, {"states", states}, {"events", events}}
             .dump() +
         "\n";
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
  if (auto events = j.find("events"); events != j.end()) {
    if (!events->is_object() || events->size() > kMaxKmsgDevices)
      return Bad("events is not an object within bounds");
    for (const auto& [address, codes] : events->items()) {
      if (CanonicalPciAddress(address) != address)
        return Bad("'" + address + "' is no PCI address");
      if (!codes.is_object() || codes.size() > kMaxKmsgCodesPerDevice)
        return Bad(address + ": events are not an object within bounds");
      std::map<std::string, uint64_t>& kept = s.events[address];
      for (const auto& [code, at] : codes.items()) {
        if (NormalizeFaultCode(code) != code) return Bad(address + ": not a fault code");
        if (!at.is_number_unsigned()) return Bad(address + ": " + code + ": not a kernel time");
        kept[code] = at.get<uint64_t>();
      }
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
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "."
                          : slash == 0               ? "/"
                                                     : path.substr(0, slash);
  // One writer at a time: two exporters on one host directory (a rollout's
  // old and new pod, both pid 1 in their own namespaces; a unit beside a
  // pod) take turns on an exclusive lock beside the file.
  const std::string lock_path = path + ".lock";
  // Read-only is enough for flock, and lets a writer of another user (a
  // unit's dynamic user beside a root pod) take a lock file it did not make.
  const int lfd = open(lock_path.c_str(), O_RDONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (lfd < 0) return Status::IoError("cannot lock " + lock_path + ": " + ErrnoText(errno));
  const auto unlock = [lfd] { close(lfd); };  // closing releases the lock
  if (const int err = LockWithin(lfd, kStateLockWait); err != 0) {
    // A filesystem without locks: the temporary name is still this call's.
    if (err != ENOLCK && err != EOPNOTSUPP) {
      unlock();
      return Status::IoError("cannot write " + path + ": " +
                             (err == EWOULDBLOCK
                                  ? "another writer holds " + lock_path
                                  : "cannot lock " + lock_path + ": " + ErrnoText(err)));
    }
  }
  RemoveLeftovers(dir, path.substr(slash == std::string::npos ? 0 : slash + 1) + ".tmp.");
  // A name only this call can hold (mkstemp: O_EXCL on a random suffix),
  // not the pid: two pid 1s would share it.
  std::string tmp = path + ".tmp.XXXXXX";
  const int fd = mkostemp(tmp.data(), O_CLOEXEC);
  if (fd < 0) {
    const int e = errno;
    unlock();
    return Status::IoError("cannot write " + tmp + ": " + ErrnoText(e));
  }
  const bool written = fchmod(fd, 0644) == 0 && WriteAll(fd, content) && fsync(fd) == 0;
  const int err = errno;
  close(fd);
  if (!written || rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = written ? errno : err;
    unlink(tmp.c_str());
    unlock();
    return Status::IoError("cannot write " + path + ": " + ErrnoText(e));
  }
  // The rename itself lasts once the directory is on disk.
  const int dfd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    fsync(dfd);
    close(dfd);
  }
  unlock();
  return Status::Ok();
}

Status MakeStateDirectory(const std::string& dir) {
  struct stat st {};
  if (stat(dir.c_str(), &st) == 0)
    return S_ISDIR(st.st_mode) ? Status::Ok() : Status::IoError(dir + " is not a directory");
  // Each missing folder, owner only (it says which cards failed how).
  for (size_t at = dir.find('/', 1);; at = dir.find('/', at + 1)) {
    const std::string part = dir.substr(0, at);
    if (mkdir(part.c_str(), 0700) != 0 && errno != EEXIST)
      return Status::IoError("cannot make " + part + ": " + ErrnoText(errno));
    if (at == std::string::npos) break;
  }
  if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    return Status::IoError("cannot make " + dir);
  return Status::Ok();
}

}  // namespace xpu::hal
