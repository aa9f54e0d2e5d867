#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"
#include "hal/attribute_files.h"
#include "hal/pci_address.h"

// The `pci` HAL backend's reading of the kernel's PCI sysfs
// (Documentation/ABI/testing/sysfs-bus-pci and sysfs-bus-pci-devices-aer_stats;
// docs/hal.md lists every file). Parsers are pure; PciScanner does the I/O.
namespace xpu::hal {

// Limits on what the tree can make the scanner hold (docs/reliability.md).
inline constexpr size_t kMaxPciDevices = 4096;  // entries of /sys/bus/pci/devices
inline constexpr size_t kMaxAerCounters = 64;   // lines of one aer_dev_* file
inline constexpr size_t kMaxHwmonSensors = 64;  // sensors per device

// "8 GT/s", "8.0 GT/s PCIe", "2.5 GT/s" (every spelling kernels have used)
// -> transfers per second; nullopt for "Unknown", "Unknown speed" or
// anything else.
std::optional<double> ParseLinkSpeed(std::string_view text);
// "16\n" -> 16; nullopt when not a lane count (0 means the link is down and
// is returned as 0).
std::optional<int> ParseLinkWidth(std::string_view text);
// "0x10de\n" -> 0x10de (vendor, device, class).
std::optional<uint32_t> ParseHex(std::string_view text);
// "-1\n", "0\n" -> the NUMA node; nullopt when malformed.
std::optional<int> ParseInt(std::string_view text);
// One aer_dev_{correctable,nonfatal,fatal} file: "RxErr 0\nBadTLP 3\n...
// TOTAL_ERR_COR 3\n" -> (name, count) in file order, the TOTAL_ line included.
Status ParseAerFile(std::string_view text, std::vector<std::pair<std::string, uint64_t>>* out);
// A class filter entry: 4 hex digits match base class and subclass
// ("0302"), 6 match the whole class code ("030200"); "0x" optional.
std::optional<std::pair<uint32_t, int>> ParseClassFilter(std::string_view text);

struct PciAer {
  std::string severity;  // correctable, nonfatal, fatal
  std::string type;      // the kernel's name: RxErr, BadTLP, ..., or "total"
  uint64_t count = 0;
};

struct PciSensor {
  std::string kind;    // temperature, power, energy
  std::string sensor;  // hwmon name and channel: "nvidia/temp1", or its label
  double value = 0;    // base units: celsius, watts, joules
};

// One device as read from <root>/bus/pci/devices/<address>/. Absent files
// leave their fields empty: conventional PCI has no link files, AER needs
// kernel 4.19 and an AER-capable device, hwmon a driver that provides it.
struct PciDevice {
  std::string address;  // canonical
  uint32_t vendor = 0, device = 0, class_code = 0;
  int numa_node = -1;
  std::optional<bool> enabled;
  std::string power_state;  // D0, D1, D2, D3hot, D3cold, unknown; empty if absent
  std::optional<double> current_link_speed, max_link_speed;  // transfers/s
  std::optional<int> current_link_width, max_link_width;
  // The other end of the link: the bridge or downstream port the device sits
  // under in /sys/devices (its parent directory), when that is a PCI device
  // with link files; empty for a device on the root bus.
  std::string port;
  std::optional<double> port_max_link_speed;
  std::optional<int> port_max_link_width;
  std::vector<PciAer> aer;  // named counters (the TOTAL_ line only if none)
  // TOTAL_ERR_FATAL beyond the fatal lines' sum (ReadAer): a fatal error the
  // lines do not tell.
  uint64_t aer_fatal_unattributed = 0;
  std::string driver;  // bound driver's name; empty when unbound
  std::vector<PciSensor> hwmon;
  std::vector<std::string> errors;  // files that exist but could not be parsed
  // A fact read every scan (the class, device id, current link, power
  // state, fatal AER counters, driver) exists and could not be read: what
  // this scan holds of the card is not its state (a failed read is no
  // recovery and no fault; PciSampler keeps its last faults).
  bool unread = false;
};

struct PciFilter;
// The filter of --hal.pci.classes and --hal.pci.vendors (4-digit vendor IDs,
// "0x" optional); InvalidArgument names the bad entry.
Status MakePciFilter(const std::vector<std::string>& classes,
                     const std::vector<std::string>& vendors, PciFilter* out);

struct PciFilter {
  // (class, digits): 4-digit entries compare class >> 8.
  std::vector<std::pair<uint32_t, int>> classes = {
      {0x0302, 4}, {0x0380, 4}, {0x1200, 4}, {0x0b40, 4}};
  std::vector<uint32_t> vendors;  // empty: any; listed vendors' VGA (0x0300) count too
  bool Matches(uint32_t class_code, uint32_t vendor) const;
  bool operator==(const PciFilter&) const = default;
};

// What a scan reads of each device (docs/hal.md, "Cadences"). kFaults: what
// can raise a fault, read every interval: presence and identity (class,
// vendor, device), the bound driver, the current link speed and width, the
// power state and the fatal AER counters. kWhole adds what changes slowly or
// is only a gauge: the NUMA id, enable, the maximum link and the port's, the correctable
// and non-fatal AER counters and hwmon (a directory walk).
enum class PciScanDepth { kWhole, kFaults };

// Whether two scans' devices are the same function: address, vendor,
// device and class (a card replaced at an address is another).
bool SamePciFunction(const PciDevice& a, const PciDevice& b);
// Copies into `into` the facts a kFaults scan does not read, from a whole
// scan of the same function (`from`).
void KeepSlowPciFacts(const PciDevice& from, PciDevice* into);

// What a scanner keeps between scans (PciSampler's, its thread's): each
// card's files held open (HeldFiles), and how each function of the bus was
// judged by its directory entry's inode: the functions found not to be
// accelerators (a NIC, a bridge, an SR-IOV virtual function), and the cards
// with their class and vendor. A kFaults scan judges neither again while its
// entry is the same (a card's hot swap makes the entry anew), reading only a
// card's class (it is there, and still of that class); a whole scan judges
// every function again.
struct PciScanCache {
  HeldFiles files;
  std::map<std::string, uint64_t> not_cards;  // path -> inode of its entry
  struct Card {
    uint64_t inode = 0;
    uint32_t class_code = 0, vendor = 0;
  };
  std::map<std::string, Card> cards;  // path -> as judged
  // Every function's canonical address in the last scan's listing, cards or
  // not (what the bus shows at all).
  std::set<std::string> listed;
};

// Reads the devices under <sysfs_root>/bus/pci/devices that pass `filter`,
// sorted by address. An error means the tree itself is unusable (no such
// directory); a device's unreadable file is noted in its `errors`.
// Called from one thread at a time.
class PciScanner {
 public:
  PciScanner(std::string sysfs_root, PciFilter filter)
      : root_(std::move(sysfs_root)), filter_(std::move(filter)) {}
  // With `cache`, what it keeps is used and kept up.
  Status Scan(std::vector<PciDevice>* out, PciScanDepth depth = PciScanDepth::kWhole,
              PciScanCache* cache = nullptr) const;
  const std::string& root() const { return root_; }
  const PciFilter& filter() const { return filter_; }

  // One device's directory, read through held files or, without, relative
  // to its directory open as `fd` (O_PATH).
  struct DeviceDir {
    std::string path;
    int fd = -1;
    HeldFiles* held = nullptr;
    Status Read(const char* name, std::string* out) const;
    bool Exists(const char* name) const;
    // The last part of the symlink `name`'s target; empty when none.
    // `*failed`: it is there and could not be read.
    std::string LinkName(const char* name, bool* failed = nullptr) const;
  };

 private:
  enum class Known { kSame, kChanged, kGone };
  Known ReadKnownClass(const DeviceDir& device, const PciScanCache::Card& known,
                       std::optional<uint32_t>* class_code, bool* unread) const;
  bool JudgeFunction(const DeviceDir& device, std::optional<uint32_t>* class_code,
                     std::optional<uint32_t>* vendor, bool* judged) const;
  void ReadDevice(const DeviceDir& dir, PciScanDepth depth, PciDevice* d) const;
  static PciDevice NotOpened(const std::string& address, const PciScanCache::Card& known,
                             std::string why);
  void ReadAer(const DeviceDir& device, bool whole, PciDevice* d) const;
  void ReadPort(const std::string& dir, PciDevice* d) const;
  const std::string root_;
  const PciFilter filter_;
};

}  // namespace xpu::hal
