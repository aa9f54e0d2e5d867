#include "hal/sysfs/sysfs_backend.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <utility>

#include "common/fault_code.h"
#include "common/file_util.h"
#include "hal/fault_catalog.h"
#include "hal/pci_address.h"

namespace xpu::hal {
namespace {

namespace fs = std::filesystem;

Status NeedsNewline(std::string_view text, const char* what) {
  if (text.empty()) return Status::InvalidArgument(std::string(what) + " is empty");
  if (text.back() != '\n')
    return Status::InvalidArgument(std::string(what) + " is truncated (no final newline)");
  return Status::Ok();
}

}  // namespace

Status ParseHealthFile(std::string_view text, bool* healthy) {
  Status s = NeedsNewline(text, "health");
  if (!s.ok()) return s;
  if (text == "1\n") {
    *healthy = true;
  } else if (text == "0\n") {
    *healthy = false;
  } else {
    return Status::InvalidArgument("health is neither \"1\" nor \"0\"");
  }
  return Status::Ok();
}

Status ParseUuidFile(std::string_view text, std::string* uuid) {
  Status s = NeedsNewline(text, "uuid");
  if (!s.ok()) return s;
  std::string_view v = text.substr(0, text.size() - 1);
  if (v.empty() || v.size() > 128 || v.find('\n') != std::string_view::npos)
    return Status::InvalidArgument("uuid is not one line of 1..128 characters");
  for (char c : v) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == ':' ||
          c == '.'))
      return Status::InvalidArgument("uuid has a character outside [A-Za-z0-9-_:.]");
  }
  *uuid = std::string(v);
  return Status::Ok();
}

Status ParseFaultCodesFile(std::string_view text, std::vector<std::string>* codes) {
  codes->clear();
  if (text.empty()) return Status::Ok();  // no active faults
  if (text.back() != '\n')
    return Status::InvalidArgument("fault_codes is truncated (no final newline)");
  std::vector<std::string> out;
  size_t start = 0;
  while (start < text.size()) {
    const size_t nl = text.find('\n', start);
    std::string_view line = text.substr(start, nl - start);
    start = nl + 1;
    const std::string code = NormalizeFaultCode(std::string(line));
    if (code.empty())
      return Status::InvalidArgument("fault_codes has a line that is not a hex code");
    out.push_back(code);
    if (out.size() > kMaxFaultCodes)
      return Status::InvalidArgument("fault_codes lists more than " +
                                     std::to_string(kMaxFaultCodes) + " codes");
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  *codes = std::move(out);
  return Status::Ok();
}

Status SysfsBackend::ReadFile(int32_t minor, const char* file, std::string* out) {
  const std::string dir = root_ + "/xpu" + std::to_string(minor);
  return held_.holding() ? held_.Read(dir, file, out) : ReadAttribute(dir + "/" + file, out);
}

Status SysfsBackend::ListDevices(std::vector<HalDeviceId>* out) {
  out->clear();
  DirectoryListing listing(root_);
  if (!listing.status().ok()) return listing.status();
  // A round begins: what the directories said, and the files of devices
  // the last round did not list let go.
  held_.Check();
  held_.Sweep();
  std::string name;
  uint64_t inode = 0;
  unsigned char type = 0;
  // The last round's, taken whole: a device this round does not list is
  // forgotten, and so is every one when the round fails part way.
  std::map<std::string, Known> last = std::exchange(known_, {});
  std::map<std::string, Known> known;
  const auto now = std::chrono::steady_clock::now();
  while (listing.Next(&name, &inode, &type)) {
    if (name.size() < 4 || name.rfind("xpu", 0) != 0) continue;
    const std::string digits = name.substr(3);
    // Canonical decimal only: "xpu01" would alias "xpu1" as minor 1.
    if (digits.size() > 6 || digits.find_first_not_of("0123456789") != std::string::npos ||
        (digits.size() > 1 && digits[0] == '0'))
      continue;
    const std::string path = root_ + "/" + name;
    std::error_code ec;
    if (type != DT_DIR && !fs::is_directory(path, ec)) continue;  // a link: followed
    if (out->size() >= kMaxHalDevices)
      return Status::IoError(root_ + ": more than " + std::to_string(kMaxHalDevices) + " devices");
    held_.Seen(path, inode);
    // Its identity as last read, while its directory is the same and its
    // uuid file the same one (a uuid renamed over it, as a stand-in tree
    // replaces files, lets the held file go: HeldFiles).
    if (auto k = last.find(name); k != last.end() && inode != 0 && k->second.inode == inode &&
                                  now - k->second.read_at < kIdentityMaxAge &&
                                  held_.Holds(path, "uuid")) {
      out->push_back(k->second.id);
      known.insert(last.extract(k));
      continue;
    }
    HalDeviceId id;
    id.minor = std::stoi(digits);
    std::string text;
    if (ReadFile(id.minor, "uuid", &text).ok()) {
      std::string uuid;
      if (ParseUuidFile(text, &uuid).ok()) id.uuid = uuid;
    }
    // Its PCI device, as a class device's `device` link names it (the last
    // part of the target is the address): the key the inventory joins by.
    char link[PATH_MAX];
    if (const ssize_t n = ::readlink((path + "/device").c_str(), link, sizeof link - 1); n > 0) {
      const std::string_view target(link, static_cast<size_t>(n));
      const size_t slash = target.rfind('/');
      id.bus_id = CanonicalPciAddress(
          std::string(slash == std::string_view::npos ? target : target.substr(slash + 1)));
    }
    // Kept only whole: a read that failed is tried again next round.
    if (inode != 0 && !id.uuid.empty() && !id.bus_id.empty()) known[name] = Known{inode, id, now};
    out->push_back(std::move(id));
  }
  if (!listing.status().ok()) return listing.status();
  known_ = std::move(known);
  std::sort(out->begin(), out->end(),
            [](const HalDeviceId& a, const HalDeviceId& b) { return a.minor < b.minor; });
  return Status::Ok();
}

Status SysfsBackend::ReadHealth(int32_t minor, bool* healthy) {
  std::string text;
  Status s = ReadFile(minor, "health", &text);
  if (!s.ok()) return s;
  return ParseHealthFile(text, healthy);
}

Status SysfsBackend::ReadFaultCodes(int32_t minor, std::vector<std::string>* codes) {
  std::string text;
  Status s = ReadFile(minor, "fault_codes", &text);
  if (!s.ok()) return s;
  return ParseFaultCodesFile(text, codes);
}

Status MakeBackend(const std::string& kind, const std::string& root,
                   std::unique_ptr<HalBackend>* out) {
  out->reset();
  if (kind == "none") return Status::Ok();
  if (kind == "sysfs") {
    *out = std::make_unique<SysfsBackend>(root);
    return Status::Ok();
  }
  if (kind == "auto") {
    std::error_code ec;
    if (fs::is_directory(root, ec)) *out = std::make_unique<SysfsBackend>(root);
    return Status::Ok();
  }
  return Status::InvalidArgument("--hal: unknown backend '" + kind + "' (auto, none, sysfs)");
}

}  // namespace xpu::hal
