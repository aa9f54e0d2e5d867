#include "hal/pci/pci.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <memory>
#include <tuple>

#include "common/file_util.h"
#include "common/label.h"
#include "hal/sysfs/sysfs_backend.h"

namespace xpu::hal {
namespace {

namespace fs = std::filesystem;

constexpr size_t kMaxLabelBytes = 256;  // as every label from outside

// The value of a one-line attribute: without its final newline and
// surrounding blanks.
std::string_view Line(std::string_view text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.remove_suffix(1);
  while (!text.empty() && text.front() == ' ') text.remove_prefix(1);
  return text;
}

std::optional<uint64_t> ParseUnsigned(std::string_view s) {
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || s.empty()) return std::nullopt;
  return v;
}

// hwmon channels the driver provides under <dev>/hwmon/hwmon*/: temperature
// (millidegrees), power (microwatts; the average when there is one) and
// energy (microjoules), named by their label or "<hwmon name>/<channel>".
void ReadHwmon(const std::string& dir, PciDevice* d) {
  std::error_code ec;
  fs::directory_iterator hw(dir + "/hwmon", ec);
  if (ec) return;
  for (; hw != fs::directory_iterator(); hw.increment(ec)) {
    if (ec) return;
    const std::string h = hw->path().string();
    std::string name;
    if (ReadAttribute(h + "/name", &name).ok()) name = std::string(Line(name));
    if (name.empty()) name = hw->path().filename().string();
    fs::directory_iterator files(h, ec);
    if (ec) continue;
    for (; files != fs::directory_iterator(); files.increment(ec)) {
      if (ec) break;
      const std::string f = files->path().filename().string();
      struct Kind {
        const char* prefix;
        const char* suffix;
        const char* kind;
        double scale;
      };
      static constexpr Kind kKinds[] = {{"temp", "_input", "temperature", 1e-3},
                                        {"power", "_average", "power", 1e-6},
                                        {"power", "_input", "power", 1e-6},
                                        {"energy", "_input", "energy", 1e-6}};
      for (const Kind& k : kKinds) {
        const std::string_view v(f);
        const size_t pl = std::strlen(k.prefix), sl = std::strlen(k.suffix);
        if (v.size() <= pl + sl || v.substr(0, pl) != k.prefix ||
            v.substr(v.size() - sl) != k.suffix)
          continue;
        const std::string channel = f.substr(0, f.size() - sl);  // "temp1"
        if (!ParseUnsigned(std::string_view(channel).substr(pl))) continue;
        // power1_input beside power1_average: the average is the steadier.
        if (std::string_view(k.suffix) == "_input" && std::string_view(k.kind) == "power" &&
            ::access((h + "/" + channel + "_average").c_str(), F_OK) == 0)
          continue;
        std::string text;
        if (!ReadAttribute(h + "/" + f, &text).ok()) continue;
        int64_t raw = 0;
        const std::string_view t = Line(text);
        auto [end, perr] = std::from_chars(t.data(), t.data() + t.size(), raw);
        if (perr != std::errc() || end != t.data() + t.size() || t.empty()) continue;
        std::string label;
        if (ReadAttribute(h + "/" + channel + "_label", &label).ok()) label = Line(label);
        if (d->hwmon.size() >= kMaxHwmonSensors) return;
        std::string sensor = label.empty() ? name + "/" + channel : label;
        SanitizeLabelValue(&sensor, kMaxLabelBytes);  // file contents become a label
        d->hwmon.push_back({k.kind, std::move(sensor), static_cast<double>(raw) * k.scale});
      }
    }
  }
  std::sort(d->hwmon.begin(), d->hwmon.end(), [](const PciSensor& a, const PciSensor& b) {
    return std::tie(a.kind, a.sensor) < std::tie(b.kind, b.sensor);
  });
}

}  // namespace

std::optional<double> ParseLinkSpeed(std::string_view text) {
  std::string_view v = Line(text);
  // "<number> GT/s" with an optional " PCIe" after it (kernels since 5.x).
  const size_t gts = v.find(" GT/s");
  if (gts == std::string_view::npos || gts == 0) return std::nullopt;
  const std::string_view rest = v.substr(gts + 5);
  if (!rest.empty() && rest != " PCIe") return std::nullopt;
  const std::string_view number = v.substr(0, gts);
  double d = 0;
  auto [end, ec] = std::from_chars(number.data(), number.data() + number.size(), d);
  if (ec != std::errc() || end != number.data() + number.size() || !(d > 0) || d > 1000)
    return std::nullopt;
  return d * 1e9;
}

std::optional<int> ParseLinkWidth(std::string_view text) {
  auto v = ParseUnsigned(Line(text));
  if (!v || *v > 32) return std::nullopt;  // x32 is the widest link PCIe defines
  return static_cast<int>(*v);
}

std::optional<uint32_t> ParseHex(std::string_view text) {
  std::string_view v = Line(text);
  if (v.size() > 2 && v[0] == '0' && (v[1] == 'x' || v[1] == 'X')) v.remove_prefix(2);
  if (!IsHex(v) || v.size() > 8) return std::nullopt;
  uint32_t out = 0;
  std::from_chars(v.data(), v.data() + v.size(), out, 16);
  return out;
}

std::optional<int> ParseInt(std::string_view text) {
  std::string_view v = Line(text);
  int out = 0;
  auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  if (ec != std::errc() || end != v.data() + v.size() || v.empty()) return std::nullopt;
  return out;
}

Status ParseAerFile(std::string_view text, std::vector<std::pair<std::string, uint64_t>>* out) {
  out->clear();
  if (!text.empty() && text.back() != '\n')
    return Status::InvalidArgument("AER counters are truncated (no final newline)");
  size_t start = 0;
  while (start < text.size()) {
    const size_t nl = text.find('\n', start);
    const std::string_view line = text.substr(start, nl - start);
    start = nl + 1;
    if (line.empty()) continue;
    const size_t sp = line.find(' ');
    const std::string_view name = line.substr(0, sp);
    uint64_t count = 0;
    bool count_ok = false;
    if (sp != std::string_view::npos) {
      const std::string_view digits = line.substr(sp + 1);
      auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), count);
      count_ok = ec == std::errc() && end == digits.data() + digits.size() && !digits.empty();
    }
    // A status bit the kernel has no name for is printed by its number:
    // "dev_fatal_errs_bit[26] 1" (aer.c's stats attributes).
    std::string_view stem = name;
    if (const size_t open = name.find('['); open != std::string_view::npos) {
      const std::string_view bit = name.substr(open + 1);
      const bool bit_ok =
          bit.size() >= 2 && bit.size() <= 4 && bit.back() == ']' &&
          std::all_of(bit.begin(), bit.end() - 1, [](char c) { return c >= '0' && c <= '9'; });
      stem = bit_ok ? name.substr(0, open) : std::string_view();
    }
    const bool name_ok =
        !stem.empty() && name.size() <= 64 && std::all_of(stem.begin(), stem.end(), [](char c) {
          return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_';
        });
    if (!name_ok || !count_ok)
      return Status::InvalidArgument("AER counters: a line is not \"<name> <count>\"");
    if (out->size() >= kMaxAerCounters)
      return Status::InvalidArgument("AER counters: more than " + std::to_string(kMaxAerCounters) +
                                     " lines");
    out->emplace_back(std::string(name), count);
  }
  return Status::Ok();
}

std::optional<std::pair<uint32_t, int>> ParseClassFilter(std::string_view text) {
  std::string_view v = Line(text);
  if (v.size() > 2 && v[0] == '0' && (v[1] == 'x' || v[1] == 'X')) v.remove_prefix(2);
  if (!IsHex(v) || (v.size() != 4 && v.size() != 6)) return std::nullopt;
  uint32_t c = 0;
  std::from_chars(v.data(), v.data() + v.size(), c, 16);
  return std::make_pair(c, static_cast<int>(v.size()));
}

Status MakePciFilter(const std::vector<std::string>& classes,
                     const std::vector<std::string>& vendors, PciFilter* out) {
  PciFilter f;
  f.classes.clear();
  for (const std::string& c : classes) {
    auto parsed = ParseClassFilter(c);
    if (!parsed)
      return Status::InvalidArgument("--hal.pci.classes: '" + c +
                                     "' is not a class of 4 or 6 hex digits (0302, 0x030200)");
    f.classes.push_back(*parsed);
  }
  for (const std::string& v : vendors) {
    auto parsed = ParseHex(v);
    if (!parsed || *parsed > 0xffff)
      return Status::InvalidArgument("--hal.pci.vendors: '" + v + "' is not a vendor ID (0x10de)");
    f.vendors.push_back(*parsed);
  }
  *out = std::move(f);
  return Status::Ok();
}

bool PciFilter::Matches(uint32_t class_code, uint32_t vendor) const {
  const bool listed = std::find(vendors.begin(), vendors.end(), vendor) != vendors.end();
  if (!vendors.empty() && !listed) return false;
  for (const auto& [c, digits] : classes) {
    if (digits == 6 ? class_code == c : (class_code >> 8) == c) return true;
  }
  return listed && (class_code >> 8) == 0x0300;  // a listed vendor's VGA controller
}

bool SamePciFunction(const PciDevice& a, const PciDevice& b) {
  return a.address == b.address && a.vendor == b.vendor && a.device == b.device &&
         a.class_code == b.class_code;
}

void KeepSlowPciFacts(const PciDevice& from, PciDevice* into) {
  into->numa_node = from.numa_node;
  into->enabled = from.enabled;
  into->max_link_speed = from.max_link_speed;
  into->max_link_width = from.max_link_width;
  into->port = from.port;
  into->port_max_link_speed = from.port_max_link_speed;
  into->port_max_link_width = from.port_max_link_width;
  // The fatal counters were read now; the others are the whole scan's.
  std::vector<PciAer> aer;
  for (const PciAer& a : from.aer)
    if (a.severity != "fatal") aer.push_back(a);
  for (PciAer& a : into->aer)
    if (a.severity == "fatal") aer.push_back(std::move(a));
  into->aer = std::move(aer);
  into->hwmon = from.hwmon;
}

Status PciScanner::DeviceDir::Read(const char* name, std::string* out) const {
  return held != nullptr ? held->Read(path, name, out) : ReadAttributeAt(fd, name, path, out);
}

bool PciScanner::DeviceDir::Exists(const char* name) const {
  return held != nullptr ? ::access((path + "/" + name).c_str(), F_OK) == 0
                         : ::faccessat(fd, name, F_OK, 0) == 0;
}

std::string PciScanner::DeviceDir::LinkName(const char* name, bool* failed) const {
  char link[PATH_MAX];
  const ssize_t n = held != nullptr ? ::readlink((path + "/" + name).c_str(), link, sizeof link - 1)
                                    : ::readlinkat(fd, name, link, sizeof link - 1);
  if (n < 0 && errno != ENOENT && failed != nullptr) *failed = true;
  if (n <= 0) return "";
  const std::string_view target(link, static_cast<size_t>(n));
  const size_t slash = target.rfind('/');
  return std::string(slash == std::string_view::npos ? target : target.substr(slash + 1));
}

// A known card's class is read, as it tells that the function is still
// there; its vendor and physfn are not. A class changed in place (no kernel
// does this; a tree a test writes may) is judged anew. A class that cannot
// be read is the card gone only with its directory: one that is there and
// answers an error (or garbage) is a card not read this scan (`*unread`),
// not a card lost.
PciScanner::Known PciScanner::ReadKnownClass(const DeviceDir& device,
                                             const PciScanCache::Card& known,
                                             std::optional<uint32_t>* class_code,
                                             bool* unread) const {
  std::string text;
  Status read = device.Read("class", &text);
  if (!read.ok() &&
      (read.code() == Status::Code::kNotFound || ::access(device.path.c_str(), F_OK) != 0))
    return Known::kGone;
  if (read.ok()) *class_code = ParseHex(text);
  if (!*class_code) {
    *unread = true;
    *class_code = known.class_code;
  }
  return *class_code == known.class_code ? Known::kSame : Known::kChanged;
}

// A function not known to be a card is judged without holding its files (a
// NIC or a bridge is not watched, nor held, nor counted against the bound):
// the files of a card are held from its reads on. Whether it is a card;
// `*judged`: its class and vendor were read.
bool PciScanner::JudgeFunction(const DeviceDir& device, std::optional<uint32_t>* class_code,
                               std::optional<uint32_t>* vendor, bool* judged) const {
  DeviceDir judge = device;
  if (judge.held != nullptr && !judge.held->Holding(device.path)) judge.held = nullptr;
  if (judge.held == nullptr && judge.fd < 0)
    judge.fd = ::open(device.path.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  std::string text;
  if (judge.Read("class", &text).ok()) *class_code = ParseHex(text);
  if (*class_code && judge.Read("vendor", &text).ok()) *vendor = ParseHex(text);
  // An SR-IOV virtual function is part of its physical card, not a card.
  *judged = class_code->has_value() && vendor->has_value();
  const bool card = *judged && filter_.Matches(**class_code, **vendor) && !judge.Exists("physfn");
  if (judge.fd >= 0 && judge.fd != device.fd) ::close(judge.fd);
  return card;
}

// A known card whose directory is there and could not be opened (out of
// descriptors or memory): the card it was, not read this scan, not lost
// (before, it was lost, and counted a reset when it came back).
PciDevice PciScanner::NotOpened(const std::string& address, const PciScanCache::Card& known,
                                std::string why) {
  PciDevice d;
  d.address = address;
  d.class_code = known.class_code;
  d.vendor = known.vendor;
  d.unread = true;
  d.errors.push_back(std::move(why));
  return d;
}

Status PciScanner::Scan(std::vector<PciDevice>* out, PciScanDepth depth,
                        PciScanCache* cache) const {
  out->clear();
  const std::string dir = root_ + "/bus/pci/devices";
  DirectoryListing listing(dir);
  if (!listing.status().ok()) return listing.status();
  HeldFiles* held = cache != nullptr && cache->files.holding() ? &cache->files : nullptr;
  if (held != nullptr) held->Check();
  std::map<std::string, uint64_t> not_cards;  // this scan's
  std::map<std::string, PciScanCache::Card> cards;
  std::set<std::string> listed;
  size_t seen = 0;
  std::string name;
  uint64_t inode = 0;
  unsigned char type = 0;
  while (listing.Next(&name, &inode, &type)) {
    if (++seen > kMaxPciDevices)
      return Status::IoError(dir + ": more than " + std::to_string(kMaxPciDevices) + " entries");
    const std::string address = CanonicalPciAddress(name);
    if (address.empty()) continue;
    if (cache != nullptr) listed.insert(address);
    DeviceDir device{dir + "/" + name, -1, held};
    const PciScanCache::Card* cached = nullptr;  // judged a card, the same entry
    if (cache != nullptr) {
      auto c = cache->cards.find(device.path);
      if (c != cache->cards.end() && c->second.inode == inode) cached = &c->second;
    }
    // A fast scan reads nothing of a function judged no card, and takes a
    // known card's judgment; a whole scan judges every function again.
    const PciScanCache::Card* known = depth == PciScanDepth::kFaults ? cached : nullptr;
    if (cache != nullptr && depth == PciScanDepth::kFaults) {
      auto it = cache->not_cards.find(device.path);
      if (it != cache->not_cards.end() && it->second == inode) {
        not_cards.insert(*it);
        continue;
      }
    }
    if (held != nullptr) {
      held->Seen(device.path, inode);
    } else {
      // The device's files are read relative to its directory: a path walk
      // of one component each, not of the whole path.
      device.fd = ::open(device.path.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
      if (device.fd < 0) {  // gone since listed, or not opened (NotOpened)
        if (const int err = errno; err != ENOENT && err != ENOTDIR && cached != nullptr) {
          out->push_back(NotOpened(address, *cached, device.path + ": " + ErrnoText(err)));
          cards[device.path] = *cached;
        }
        continue;
      }
    }
    std::optional<uint32_t> class_code, vendor;
    bool unread = false;
    if (known != nullptr) {
      const Known k = ReadKnownClass(device, *known, &class_code, &unread);
      if (k == Known::kGone) {
        if (device.fd >= 0) ::close(device.fd);
        continue;  // gone since listed
      }
      if (k == Known::kSame) {
        vendor = known->vendor;
      } else {
        known = nullptr;
      }
    }
    if (known == nullptr) {
      bool judged = false;
      if (JudgeFunction(device, &class_code, &vendor, &judged)) {
        // judged a card
      } else if (!judged && cached != nullptr && ::access(device.path.c_str(), F_OK) == 0) {
        // A card whose class or vendor cannot be read now (its directory
        // still there): the card it was, not read this scan, not lost.
        class_code = cached->class_code;
        vendor = cached->vendor;
        unread = true;
      } else {
        if (device.fd >= 0) ::close(device.fd);
        if (judged && cache != nullptr) not_cards.emplace(device.path, inode);
        continue;
      }
    }
    PciDevice d;
    d.address = address;
    d.class_code = *class_code;
    d.vendor = *vendor;
    d.unread = unread;
    ReadDevice(device, depth, &d);
    if (device.fd >= 0) ::close(device.fd);
    if (cache != nullptr) cards[device.path] = {inode, *class_code, *vendor};
    out->push_back(std::move(d));
  }
  if (!listing.status().ok()) return listing.status();
  if (cache != nullptr) {
    cache->not_cards = std::move(not_cards);
    cache->cards = std::move(cards);
    cache->listed = std::move(listed);
    if (held != nullptr) held->Sweep();
  }
  std::sort(out->begin(), out->end(),
            [](const PciDevice& a, const PciDevice& b) { return a.address < b.address; });
  return Status::Ok();
}

// The link's upstream end is the device's parent in /sys/devices: the
// directory the bus/pci/devices symlink resolves into, one level up. It is a
// port (a PCI address with link files) unless the device is on a root bus
// ("pci0000:00").
//
// The entry's one link is read (its target is relative in the kernel's
// tree, absolute in some a test writes), not the whole path resolved: that
// read a link a component, 17 system calls a card here.
void PciScanner::ReadPort(const std::string& dir, PciDevice* d) const {
  char link[PATH_MAX];
  const ssize_t n = ::readlink(dir.c_str(), link, sizeof link - 1);
  if (n <= 0) return;
  const fs::path target(std::string(link, static_cast<size_t>(n)));
  const fs::path real =
      (target.is_absolute() ? target : fs::path(dir).parent_path() / target).lexically_normal();
  const fs::path parent = real.parent_path();
  const std::string port = CanonicalPciAddress(parent.filename().string());
  if (port.empty() || port != parent.filename().string()) return;
  std::string text;
  if (ReadAttribute((parent / "max_link_speed").string(), &text).ok())
    d->port_max_link_speed = ParseLinkSpeed(text);
  if (ReadAttribute((parent / "max_link_width").string(), &text).ok()) {
    auto w = ParseLinkWidth(text);
    if (w && *w > 0) d->port_max_link_width = w;
  }
  if (d->port_max_link_speed || d->port_max_link_width) d->port = port;
}

// The AER counters: the fatal ones every scan, the others with a whole
// scan. A fatal file that is there and cannot be read makes the card's scan
// not its state (PciDevice::unread).
void PciScanner::ReadAer(const DeviceDir& device, bool whole, PciDevice* d) const {
  const std::string& dir = device.path;
  std::string text;
  for (const char* severity : {"correctable", "nonfatal", "fatal"}) {
    if (!whole && std::strcmp(severity, "fatal") != 0) continue;
    const std::string file = std::string("aer_dev_") + severity;
    std::vector<std::pair<std::string, uint64_t>> counters;
    Status s = device.Read(file.c_str(), &text);
    if (s.code() == Status::Code::kNotFound) continue;
    if (s.ok()) s = ParseAerFile(text, &counters);
    if (!s.ok()) {
      d->errors.push_back(s.code() == Status::Code::kInvalidArgument
                              ? dir + "/" + file + ": " + s.message()
                              : s.message());
      d->unread = d->unread || std::strcmp(severity, "fatal") == 0;
      continue;
    }
    // The named counters sum to the TOTAL_ line (mostly: below); exporting
    // both would double every sum(). The total stands in only when nothing
    // else does.
    std::optional<uint64_t> total;
    size_t named = 0;
    uint64_t named_sum = 0;
    for (const auto& [name, count] : counters) {
      if (name.rfind("TOTAL_", 0) == 0) {
        total = count;
        continue;
      }
      d->aer.push_back({severity, name, count});
      ++named;
      named_sum = count > UINT64_MAX - named_sum ? UINT64_MAX : named_sum + count;
    }
    if (named == 0 && total) d->aer.push_back({severity, "total", *total});
    // The total counts error events, the named lines status bits: a kernel
    // that does not read an endpoint's status for a fatal error (6.17's AER)
    // counts the event alone, every named line 0. A fatal total above the
    // lines' sum is a fatal error all the same (not a series of its own: an
    // event of several bits would move it back).
    if (std::strcmp(severity, "fatal") == 0 && total && *total > named_sum)
      d->aer_fatal_unattributed = *total - named_sum;
  }
}

void PciScanner::ReadDevice(const DeviceDir& device, PciScanDepth depth, PciDevice* d) const {
  const bool whole = depth == PciScanDepth::kWhole;
  const std::string& dir = device.path;
  // Reads `file` if it exists; a file that exists but does not parse is
  // noted, one that is absent is simply not there on this kernel or device
  // (`*absent`).
  // A fact read every scan (`fast`) that is there and cannot be read makes
  // the scan's view of the card not its state (PciDevice::unread).
  // The current link's files answer EINVAL (Unavailable) when the device
  // does not answer its config space: that is the link's state (down), not
  // a read that failed (`*no_answer`).
  std::string text;
  auto read = [&](const char* file, auto parse, bool fast, bool* no_answer = nullptr,
                  bool* absent = nullptr) {
    Status s = device.Read(file, &text);
    if (s.code() == Status::Code::kNotFound) {
      if (absent != nullptr) *absent = true;
      return decltype(parse(std::string_view()))();
    }
    if (no_answer != nullptr && s.code() == Status::Code::kUnavailable) {
      *no_answer = true;
      return decltype(parse(std::string_view()))();
    }
    if (!s.ok()) {
      d->errors.push_back(s.message());
      d->unread = d->unread || fast;
      return decltype(parse(std::string_view()))();
    }
    auto v = parse(std::string_view(text));
    if (!v) {
      d->errors.push_back(dir + "/" + file + ": unexpected content");
      d->unread = d->unread || fast;
    }
    return v;
  };
  // The device id each scan: with the address, vendor and class it tells a
  // card replaced at the same address, whose kept facts are not its own.
  // Every PCI function has the file: one missing after its class and vendor
  // were read is a directory going as it is read (the card leaving the
  // bus), not a card without it: not read, not present and healthy.
  bool absent = false;
  if (auto v = read("device", ParseHex, true, nullptr, &absent)) d->device = *v;
  if (absent) d->unread = true;
  if (whole) {
    if (auto v = read("numa_node", ParseInt, false)) d->numa_node = *v;
    if (auto v = read("enable", ParseInt, false)) d->enabled = *v > 0;
  }
  // "Unknown" (older kernels: "Unknown speed") is a real answer for a link
  // that is down or not PCIe, not a parse error.
  const auto speed = [](std::string_view t) -> std::optional<std::optional<double>> {
    if (Line(t) == "Unknown" || Line(t) == "Unknown speed") return std::optional<double>();
    auto v = ParseLinkSpeed(t);
    if (!v) return std::nullopt;
    return v;
  };
  // A device that does not answer reads its link status as all ones: the
  // width field's 63 (no link is wider than 32), the speed "Unknown".
  const auto width = [](std::string_view t) -> std::optional<int> {
    if (Line(t) == "63") return 0;
    return ParseLinkWidth(t);
  };
  bool no_answer = false;
  if (auto v = read("current_link_speed", speed, true, &no_answer)) d->current_link_speed = *v;
  d->current_link_width = read("current_link_width", width, true, &no_answer);
  if (no_answer) d->current_link_width = 0;  // down
  if (whole) {
    if (auto v = read("max_link_speed", speed, false)) d->max_link_speed = *v;
    d->max_link_width = read("max_link_width", ParseLinkWidth, false);
    ReadPort(dir, d);
  }
  if (auto v = read(
          "power_state",
          [](std::string_view t) -> std::optional<std::string> {
            std::string_view s = Line(t);
            static constexpr std::string_view kStates[] = {"D0",     "D1",      "D2",   "D3hot",
                                                           "D3cold", "unknown", "error"};
            for (std::string_view k : kStates)
              if (s == k) return std::string(s);
            return std::nullopt;
          },
          true))
    d->power_state = *v;
  ReadAer(device, whole, d);
  bool driver_failed = false;
  d->driver = device.LinkName("driver", &driver_failed);
  d->unread = d->unread || driver_failed;
  SanitizeLabelValue(&d->driver, kMaxLabelBytes);
  if (whole) ReadHwmon(dir, d);
}

}  // namespace xpu::hal
