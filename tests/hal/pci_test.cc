// The pci backend: parsers on the kernel's spellings, a scanner over fixture
// trees in the kernel's layout, the tracker's joins and resets, and one
// scan of this machine's real /sys checked against lspci.
#include "hal/pci/pci.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>

#include "hal/backend.h"
#include "hal/flags.h"
#include "hal/hal.h"
#include "hal/pci/pci_sampler.h"
#include "store/device_registry.h"
#include "support/metrics_util.h"
#include "support/test_util.h"
#include "support/views_util.h"

namespace xpu::hal {
namespace {

namespace fs = std::filesystem;

// The default --hal.gauge-interval: scans after the first read faults only.
constexpr std::chrono::milliseconds kGaugeInterval{10000};

TEST(PciParseTest, LinkSpeedInEverySpellingKernelsHaveUsed) {
  EXPECT_EQ(ParseLinkSpeed("2.5 GT/s\n"), 2.5e9);     // 4.x
  EXPECT_EQ(ParseLinkSpeed("8 GT/s\n"), 8e9);         // 4.x
  EXPECT_EQ(ParseLinkSpeed("8.0 GT/s PCIe\n"), 8e9);  // 5.x+
  EXPECT_EQ(ParseLinkSpeed("16.0 GT/s PCIe\n"), 16e9);
  EXPECT_EQ(ParseLinkSpeed("32.0 GT/s PCIe\n"), 32e9);
  EXPECT_EQ(ParseLinkSpeed("64.0 GT/s PCIe\n"), 64e9);
  EXPECT_EQ(ParseLinkSpeed("Unknown\n"), std::nullopt);
  EXPECT_EQ(ParseLinkSpeed("Unknown speed\n"), std::nullopt);
  EXPECT_EQ(ParseLinkSpeed("fast\n"), std::nullopt);
  EXPECT_EQ(ParseLinkSpeed("8 GT/s PCIe extra\n"), std::nullopt);
  EXPECT_EQ(ParseLinkSpeed("-8 GT/s\n"), std::nullopt);
  EXPECT_EQ(ParseLinkWidth("16\n"), 16);
  EXPECT_EQ(ParseLinkWidth("0\n"), 0);  // link down
  EXPECT_EQ(ParseLinkWidth("x16\n"), std::nullopt);
  EXPECT_EQ(ParseLinkWidth("99\n"), std::nullopt);
}

TEST(PciParseTest, IdsAddressesAndClassFilters) {
  EXPECT_EQ(ParseHex("0x10de\n"), 0x10deu);
  EXPECT_EQ(ParseHex("0x030200\n"), 0x030200u);
  EXPECT_EQ(ParseHex("zz\n"), std::nullopt);
  EXPECT_EQ(ParseInt("-1\n"), -1);
  EXPECT_EQ(CanonicalPciAddress("0000:3b:00.0"), "0000:3b:00.0");
  EXPECT_EQ(CanonicalPciAddress("00000000:3B:00.0"), "0000:3b:00.0");  // NVIDIA's bus_id
  EXPECT_EQ(CanonicalPciAddress("3b:00.1"), "0000:3b:00.1");
  EXPECT_EQ(CanonicalPciAddress("0000:3b:00.8"), "");
  // A 32-bit domain (Intel VMD's devices sit at 10000: and up) is one, as
  // the kernel writes it; NVIDIA's 8-digit form of it is the same address.
  EXPECT_EQ(CanonicalPciAddress("10000:e1:00.0"), "10000:e1:00.0");
  EXPECT_EQ(CanonicalPciAddress("00010000:E1:00.0"), "10000:e1:00.0");
  EXPECT_EQ(CanonicalPciAddress("100000000:e1:00.0"), "") << "more than 8 digits";
  EXPECT_EQ(CanonicalPciAddress("nonsense"), "");
  EXPECT_EQ(ParseClassFilter("0302"), std::make_pair(0x0302u, 4));
  EXPECT_EQ(ParseClassFilter("0x030200"), std::make_pair(0x030200u, 6));
  EXPECT_EQ(ParseClassFilter("03020"), std::nullopt);
  PciFilter f;
  ASSERT_TRUE(MakePciFilter({"0302", "0x120000"}, {}, &f).ok());
  EXPECT_TRUE(f.Matches(0x030200, 0x10de));
  EXPECT_TRUE(f.Matches(0x120000, 0x1ded));
  EXPECT_FALSE(f.Matches(0x120001, 0x1ded));  // 6 digits: exact
  EXPECT_FALSE(f.Matches(0x030000, 0x10de));  // VGA: only for listed vendors
  ASSERT_TRUE(MakePciFilter({"0302"}, {"0x10de"}, &f).ok());
  EXPECT_TRUE(f.Matches(0x030000, 0x10de));
  EXPECT_FALSE(f.Matches(0x030200, 0x1002));
  EXPECT_FALSE(MakePciFilter({"3d"}, {}, &f).ok());
  EXPECT_FALSE(MakePciFilter({"0302"}, {"0x12345"}, &f).ok());
  // The defaults watch what accelerators are: NVIDIA's 3D controllers, AMD's
  // Instinct MI100/MI200 (display controllers, 0x0380) and MI300
  // (processing accelerators), co-processors; not a BMC's VGA or a NIC.
  const PciFilter defaults;
  EXPECT_TRUE(defaults.Matches(0x030200, 0x10de));
  EXPECT_TRUE(defaults.Matches(0x038000, 0x1002));
  EXPECT_TRUE(defaults.Matches(0x120000, 0x1002));
  EXPECT_TRUE(defaults.Matches(0x0b4000, 0x8086));
  EXPECT_FALSE(defaults.Matches(0x030000, 0x1a03));
  EXPECT_FALSE(defaults.Matches(0x020000, 0x15b3));
  PciFilter flags;
  ASSERT_TRUE(MakePciFilter(HalOptions().pci_classes, {}, &flags).ok());
  EXPECT_EQ(flags, defaults) << "--hal.pci.classes' default is the filter's";
}

TEST(PciParseTest, AerCountersAsTheKernelWritesThem) {
  std::vector<std::pair<std::string, uint64_t>> c;
  ASSERT_TRUE(ParseAerFile("RxErr 2\nBadTLP 0\nBadDLLP 1\nRollover 0\nTimeout 0\n"
                           "NonFatalErr 0\nCorrIntErr 0\nHeaderOF 0\nTOTAL_ERR_COR 3\n",
                           &c)
                  .ok());
  ASSERT_EQ(c.size(), 9u);
  EXPECT_EQ(c[0], std::make_pair(std::string("RxErr"), uint64_t{2}));
  EXPECT_EQ(c[8], std::make_pair(std::string("TOTAL_ERR_COR"), uint64_t{3}));
  EXPECT_TRUE(ParseAerFile("", &c).ok());
  EXPECT_TRUE(c.empty());
  EXPECT_FALSE(ParseAerFile("RxErr 2", &c).ok());  // truncated
  EXPECT_FALSE(ParseAerFile("RxErr two\n", &c).ok());
  EXPECT_FALSE(ParseAerFile("Rx Err 2\n", &c).ok());
  std::string many;
  for (int i = 0; i < 100; ++i) many += "E" + std::to_string(i) + " 1\n";
  EXPECT_FALSE(ParseAerFile(many, &c).ok());
}

// A sysfs tree in the kernel's layout: <root>/bus/pci/devices/<addr> are
// symlinks into <root>/devices/pci0000:00/, as on a real machine.
class PciTreeTest : public ::testing::Test {
 protected:
  // `under`: the port's directory below devices/ (empty: the root bus).
  std::string Dev(const std::string& addr, const std::string& under = "pci0000:00") {
    const std::string real = dir_.path() + "/devices/" + under + "/" + addr;
    fs::create_directories(real);
    fs::create_directories(dir_.path() + "/bus/pci/devices");
    const std::string link = dir_.path() + "/bus/pci/devices/" + addr;
    if (!fs::exists(link)) fs::create_directory_symlink(real, link);
    return real;
  }
  static void Write(const std::string& path, const std::string& text) {
    fs::create_directories(fs::path(path).parent_path());
    std::ofstream(path) << text;
  }
  // An H100-like 3D controller: Gen5 x16, AER, bound to "nvidia", hwmon.
  std::string Gpu(const std::string& addr, const std::string& under = "pci0000:00") {
    const std::string d = Dev(addr, under);
    Write(d + "/vendor", "0x10de\n");
    Write(d + "/device", "0x2330\n");
    Write(d + "/class", "0x030200\n");
    Write(d + "/numa_node", "1\n");
    Write(d + "/enable", "1\n");
    Write(d + "/power_state", "D0\n");
    Write(d + "/current_link_speed", "32.0 GT/s PCIe\n");
    Write(d + "/max_link_speed", "32.0 GT/s PCIe\n");
    Write(d + "/current_link_width", "16\n");
    Write(d + "/max_link_width", "16\n");
    Write(d + "/aer_dev_correctable", "RxErr 5\nBadTLP 1\nTOTAL_ERR_COR 6\n");
    Write(d + "/aer_dev_nonfatal", "Undefined 0\nCmpltTO 0\nTOTAL_ERR_NONFATAL 0\n");
    Write(d + "/aer_dev_fatal", "TOTAL_ERR_FATAL 0\n");
    fs::create_directories(dir_.path() + "/bus/pci/drivers/nvidia");
    fs::create_directory_symlink("../../../bus/pci/drivers/nvidia", d + "/driver");
    Write(d + "/hwmon/hwmon3/name", "nvidia\n");
    Write(d + "/hwmon/hwmon3/temp1_input", "45000\n");
    Write(d + "/hwmon/hwmon3/temp1_label", "edge\n");
    Write(d + "/hwmon/hwmon3/power1_input", "300000000\n");
    Write(d + "/hwmon/hwmon3/power1_average", "250500000\n");
    Write(d + "/hwmon/hwmon3/energy1_input", "5000000000000\n");
    return d;
  }
  // A root port (the slot) with its maxima; returns its path under devices/.
  std::string Port(const std::string& addr, const std::string& max_speed, int max_width) {
    const std::string under = "pci0000:00/" + addr;
    const std::string d = dir_.path() + "/devices/" + under;
    Write(d + "/vendor", "0x8086\n");
    Write(d + "/class", "0x060400\n");
    Write(d + "/max_link_speed", max_speed + "\n");
    Write(d + "/max_link_width", std::to_string(max_width) + "\n");
    return under;
  }
  // Gpu() under a port.
  std::string GpuIn(const std::string& under, const std::string& addr) {
    Dev(addr, under);
    return Gpu(addr, under);
  }
  // A GPU at 0000:10:00.0 trained x4 of x16, listed by XDM as minor 0.
  void NarrowGpuKnownToXdm(store::DeviceRegistry* reg) {
    const std::string d = Gpu("0000:10:00.0");
    Write(d + "/current_link_width", "4\n");
    store::DeviceInfo xdm;
    xdm.minor = 0;
    xdm.uuid = "GPU-0";
    xdm.bus_id = "0000:10:00.0";
    reg->SetXdmDevices({xdm});
  }
  std::vector<PciDevice> Scan(PciFilter filter = PciFilter()) {
    std::vector<PciDevice> out;
    EXPECT_TRUE(PciScanner(dir_.path(), filter).Scan(&out).ok());
    return out;
  }
  xpu::testing::TempDir dir_;
};

TEST_F(PciTreeTest, ReadsEveryFileOfAnAcceleratorAndSkipsOtherClasses) {
  Gpu("0000:3b:00.0");
  const std::string nic = Dev("0000:5e:00.0");
  Write(nic + "/vendor", "0x15b3\n");
  Write(nic + "/class", "0x020000\n");
  const auto devs = Scan();
  ASSERT_EQ(devs.size(), 1u);
  const PciDevice& d = devs[0];
  EXPECT_EQ(d.address, "0000:3b:00.0");
  EXPECT_EQ(d.vendor, 0x10deu);
  EXPECT_EQ(d.device, 0x2330u);
  EXPECT_EQ(d.numa_node, 1);
  EXPECT_EQ(d.enabled, true);
  EXPECT_EQ(d.power_state, "D0");
  EXPECT_EQ(d.current_link_speed, 32e9);
  EXPECT_EQ(d.max_link_width, 16);
  EXPECT_EQ(d.driver, "nvidia");
  // Named counters only: the TOTAL_ lines would double sum(); a file with
  // nothing but its total stands for itself.
  ASSERT_EQ(d.aer.size(), 5u);
  EXPECT_EQ(d.aer[0].severity, "correctable");
  EXPECT_EQ(d.aer[0].type, "RxErr");
  EXPECT_EQ(d.aer[0].count, 5u);
  EXPECT_EQ(d.aer[4].severity, "fatal");
  EXPECT_EQ(d.aer[4].type, "total");
  ASSERT_EQ(d.hwmon.size(), 3u);
  EXPECT_EQ(d.hwmon[0].kind, "energy");
  EXPECT_DOUBLE_EQ(d.hwmon[0].value, 5e6);
  EXPECT_EQ(d.hwmon[1].kind, "power");  // the average, not the input
  EXPECT_DOUBLE_EQ(d.hwmon[1].value, 250.5);
  EXPECT_EQ(d.hwmon[2].sensor, "edge");
  EXPECT_DOUBLE_EQ(d.hwmon[2].value, 45);
  EXPECT_TRUE(d.errors.empty()) << d.errors.front();
}

TEST_F(PciTreeTest, ConventionalPciWithoutLinkAerOrDriverIsNotAnError) {
  const std::string d = Dev("0000:00:04.0");
  Write(d + "/vendor", "0x1ded\n");
  Write(d + "/device", "0x8000\n");  // every PCI function has its vendor, device and class
  Write(d + "/class", "0x120000\n");
  const auto devs = Scan();
  ASSERT_EQ(devs.size(), 1u);
  EXPECT_FALSE(devs[0].current_link_speed);
  EXPECT_TRUE(devs[0].aer.empty());
  EXPECT_EQ(devs[0].driver, "");
  EXPECT_TRUE(devs[0].errors.empty());
}

TEST_F(PciTreeTest, UnknownSpeedIsAnAnswerButGarbageIsNoted) {
  const std::string d = Gpu("0000:3b:00.0");
  Write(d + "/current_link_speed", "Unknown\n");
  Write(d + "/max_link_width", "wide\n");
  Write(d + "/aer_dev_fatal", std::string(100000, 'x'));  // huge
  const auto devs = Scan();
  ASSERT_EQ(devs.size(), 1u);
  EXPECT_FALSE(devs[0].current_link_speed);
  EXPECT_FALSE(devs[0].max_link_width);
  EXPECT_EQ(devs[0].errors.size(), 2u);  // max_link_width, aer_dev_fatal
  EXPECT_EQ(devs[0].driver, "nvidia");   // the rest still read
}

TEST_F(PciTreeTest, LabelsFromFilesAreValidUtf8AndBounded) {
  const std::string d = Gpu("0000:3b:00.0");
  Write(d + "/hwmon/hwmon3/temp1_label", "edge\xff" + std::string(1000, 'x') + "\n");
  const auto devs = Scan();
  ASSERT_EQ(devs.size(), 1u);
  ASSERT_EQ(devs[0].hwmon.size(), 3u);
  const std::string& label = devs[0].hwmon[2].sensor;
  EXPECT_LE(label.size(), 256u);
  EXPECT_EQ(label.substr(0, 7), "edge\xEF\xBF\xBD");  // U+FFFD for the bad byte
}

TEST_F(PciTreeTest, UnreadableAndFifoFilesDoNotHangOrStopTheScan) {
  const std::string d = Gpu("0000:3b:00.0");
  fs::remove(d + "/power_state");
  ASSERT_EQ(::mkfifo((d + "/power_state").c_str(), 0600), 0);
  const auto devs = Scan();  // would block forever on a FIFO read
  ASSERT_EQ(devs.size(), 1u);
  EXPECT_EQ(devs[0].power_state, "");
  EXPECT_EQ(devs[0].errors.size(), 1u);
}

TEST_F(PciTreeTest, MissingTreeIsAnError) {
  std::vector<PciDevice> out;
  EXPECT_FALSE(PciScanner(dir_.path() + "/nope", PciFilter()).Scan(&out).ok());
}

// An unbound driver is a fault for a function that lost its driver, or for
// a card a layer names (its driver did not load); a function never bound
// since the exporter started that no layer names (a co-processor with no
// driver loaded, left so on purpose) is none.
TEST_F(PciTreeTest, AnUnboundDriverIsAFaultForACardThatHadOneOrThatALayerNames) {
  const std::string never = Gpu("0000:3b:00.0");
  fs::remove(never + "/driver");
  const std::string lost = Gpu("0000:5e:00.0");
  const std::string named = Gpu("0000:86:00.0");
  fs::remove(named + "/driver");
  store::DeviceRegistry reg;
  store::DeviceInfo xdm;
  xdm.minor = 7;
  xdm.bus_id = "0000:86:00.0";
  reg.SetXdmDevices({xdm});
  prometheus::Registry self;
  PciSampler sampler(PciScanner(dir_.path(), PciFilter()), FaultCatalog::Builtin(),
                     std::chrono::seconds(1), kGaugeInterval, &reg, &self);
  ASSERT_TRUE(sampler.SampleOnce());
  fs::remove(lost + "/driver");
  ASSERT_TRUE(sampler.SampleOnce());
  ASSERT_TRUE(sampler.SampleOnce());  // the registry's inventory from the first view
  auto unbound = [&](const std::string& bus) {
    return xpu::testing::MetricValue(reg, "xpu_device_fault_active",
                                     {{"bus_id", bus}, {"code", kFaultDriverUnbound}});
  };
  EXPECT_EQ(unbound("0000:3b:00.0"), -1) << "never bound, named by no layer";
  EXPECT_EQ(unbound("0000:5e:00.0"), 1) << "lost its driver";
  EXPECT_EQ(unbound("0000:86:00.0"), 1) << "XDM names it: its driver did not load";
}

// A reload that changes what the bus holds for a card (--hal.pci.classes,
// --hal.pci.vendors, --hal.pci.sysfs-root) starts the tracker afresh: the
// cards the old sampler tracked that the new one does not look for are not
// lost cards (they were each pci_device_lost, isolate_card, until a
// restart). A reload that keeps them hands the tracker over, so a card gone
// meanwhile is still lost.
TEST_F(PciTreeTest, AReloadThatNoLongerLooksForACardDoesNotLoseIt) {
  Gpu("0000:3b:00.0");
  const std::string accel = Gpu("0000:5e:00.0");
  Write(accel + "/class", "0x120000\n");
  store::DeviceRegistry reg;
  prometheus::Registry self, self2, self3;
  auto lost = [&](const std::string& bus) {
    return xpu::testing::MetricValue(reg, "xpu_device_fault_active",
                                     {{"bus_id", bus}, {"code", kFaultDeviceLost}});
  };
  auto old =
      std::make_unique<PciSampler>(PciScanner(dir_.path(), PciFilter()), FaultCatalog::Builtin(),
                                   std::chrono::seconds(1), kGaugeInterval, &reg, &self);
  ASSERT_TRUE(old->SampleOnce());
  PciFilter gpus_only;
  ASSERT_TRUE(MakePciFilter({"0302"}, {}, &gpus_only).ok());
  auto next =
      std::make_unique<PciSampler>(PciScanner(dir_.path(), gpus_only), FaultCatalog::Builtin(),
                                   std::chrono::seconds(1), kGaugeInterval, &reg, &self2);
  next->TakeOver(*old);
  old.reset();
  ASSERT_TRUE(next->SampleOnce());
  ASSERT_TRUE(next->SampleOnce());
  EXPECT_NE(lost("0000:5e:00.0"), 1) << "not looked for is not lost";
  EXPECT_NE(lost("0000:3b:00.0"), 1);
  // A card the new filter still looks for goes on: one that lost its
  // driver before a reload that changed the filter is still unbound.
  fs::remove(dir_.path() + "/devices/pci0000:00/0000:3b:00.0/driver");
  ASSERT_TRUE(next->SampleOnce());
  auto unbound = [&] {
    return xpu::testing::MetricValue(reg, "xpu_device_fault_active",
                                     {{"bus_id", "0000:3b:00.0"}, {"code", kFaultDriverUnbound}});
  };
  ASSERT_EQ(unbound(), 1);
  PciFilter wider;
  ASSERT_TRUE(MakePciFilter({"0302", "0b40"}, {}, &wider).ok());
  prometheus::Registry self4;
  auto widened =
      std::make_unique<PciSampler>(PciScanner(dir_.path(), wider), FaultCatalog::Builtin(),
                                   std::chrono::seconds(1), kGaugeInterval, &reg, &self4);
  widened->TakeOver(*next);
  next = std::move(widened);
  ASSERT_TRUE(next->SampleOnce());
  EXPECT_EQ(unbound(), 1) << "a reload that changed the filter forgot the card lost its driver";
  fs::create_directory_symlink("../../../bus/pci/drivers/nvidia",
                               dir_.path() + "/devices/pci0000:00/0000:3b:00.0/driver");
  // The same settings: the tracker goes on, and a card gone during the
  // reload is lost.
  auto same =
      std::make_unique<PciSampler>(PciScanner(dir_.path(), gpus_only), FaultCatalog::Builtin(),
                                   std::chrono::seconds(1), kGaugeInterval, &reg, &self3);
  same->TakeOver(*next);
  next.reset();
  fs::remove(dir_.path() + "/bus/pci/devices/0000:3b:00.0");
  ASSERT_TRUE(same->SampleOnce());
  EXPECT_EQ(lost("0000:3b:00.0"), 1);
}

// The fatal file as kernels write it when the named lines do not tell the
// error: an event counted in TOTAL_ERR_FATAL alone (a kernel that does not
// read an endpoint's status for a fatal error), and a status bit the kernel
// has no name for, printed by its number. Each is a fatal error, the card
// seen. Before, the first read healthy (the total dropped beside the named
// zeros) and the second was refused as garbage: the card not seen, for good.
TEST_F(PciTreeTest, AFatalErrorTheNamedLinesDoNotTellIsOneAllTheSame) {
  const std::string gpu = Gpu("0000:3b:00.0");
  store::DeviceRegistry reg;
  prometheus::Registry self;
  PciSampler sampler(PciScanner(dir_.path(), PciFilter()), FaultCatalog::Builtin(),
                     std::chrono::seconds(1), kGaugeInterval, &reg, &self);
  auto view = [&] {
    for (const store::PciDeviceView& v : reg.PciDevices())
      if (v.bus_id == "0000:3b:00.0") return v;
    return store::PciDeviceView{};
  };
  auto codes = [&] {
    std::vector<std::string> out;
    for (const store::ActiveFault& f : view().faults) out.push_back(f.code);
    return out;
  };
  auto fatal_sum = [](const store::PciDeviceView& v) {
    uint64_t n = 0;
    for (const auto& a : v.aer) n += a.severity == "fatal" ? a.count : 0;
    return n;
  };
  Write(gpu + "/aer_dev_fatal", "Undefined 0\nDLP 0\nSDES 0\nTOTAL_ERR_FATAL 0\n");
  ASSERT_TRUE(sampler.SampleOnce());
  ASSERT_TRUE(view().faults.empty());
  Write(gpu + "/aer_dev_fatal", "Undefined 0\nDLP 0\nSDES 0\nTOTAL_ERR_FATAL 1\n");
  ASSERT_TRUE(sampler.SampleOnce());
  EXPECT_TRUE(view().seen);
  EXPECT_EQ(codes(), std::vector<std::string>{kFaultAerFatal});
  EXPECT_EQ(fatal_sum(view()), 0u) << "no series of its own: it could move back";
  Write(gpu + "/aer_dev_fatal",
        "Undefined 0\nDLP 0\nSDES 0\ndev_fatal_errs_bit[26] 2\nTOTAL_ERR_FATAL 2\n");
  ASSERT_TRUE(sampler.SampleOnce());
  EXPECT_TRUE(view().seen) << "a numbered bit's line is no garbage";
  EXPECT_EQ(codes(), std::vector<std::string>{kFaultAerFatal});
  EXPECT_EQ(fatal_sum(view()), 2u) << "the numbered bit's count";
  std::vector<std::pair<std::string, uint64_t>> c;
  EXPECT_FALSE(ParseAerFile("bit[\n", &c).ok());
  EXPECT_FALSE(ParseAerFile("bit[1] \n", &c).ok());
  EXPECT_FALSE(ParseAerFile("bit[12345] 1\n", &c).ok());
  EXPECT_FALSE(ParseAerFile("[1] 1\n", &c).ok());
  EXPECT_FALSE(ParseAerFile("bit[1]x 1\n", &c).ok());
}

// Where held files are not to be had (no inotify instance: a node's
// max_user_instances used up), a card's directory that cannot be opened for
// want of descriptors is a card not read this scan, not one gone (the
// sampler then keeps its view and faults, and counts no reset). Before, it
// was left out of the scan: lost (pci_device_lost, isolate_card), and a
// reset counted when it came back. The scanner alone runs while descriptors
// are short: a sanitizer's runtime needs some for its own checks.
TEST_F(PciTreeTest, ACardNotOpenedForWantOfDescriptorsIsNotLost) {
  Gpu("0000:3b:00.0");
  const PciScanner scanner(dir_.path(), PciFilter());
  rlimit old{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &old), 0);
  // Descriptors up to the next free one and `spare` more.
  auto limit_to = [&](rlim_t spare) {
    const int next = dup(2);
    ASSERT_GE(next, 0);
    close(next);
    rlimit l = old;
    l.rlim_cur = static_cast<rlim_t>(next) + spare;
    ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &l), 0);
  };
  limit_to(0);
  auto cache = std::make_unique<PciScanCache>();  // no inotify to be had: no held files
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &old), 0);
  ASSERT_FALSE(cache->files.holding());
  std::vector<PciDevice> scan;
  ASSERT_TRUE(scanner.Scan(&scan, PciScanDepth::kWhole, cache.get()).ok());
  ASSERT_EQ(scan.size(), 1u);
  ASSERT_FALSE(scan[0].unread);
  limit_to(1);  // the listing's descriptor, none for the card's directory
  const Status s = scanner.Scan(&scan, PciScanDepth::kFaults, cache.get());
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &old), 0);
  ASSERT_TRUE(s.ok()) << s.message();
  ASSERT_EQ(scan.size(), 1u) << "a card not opened is not a card gone";
  EXPECT_EQ(scan[0].address, "0000:3b:00.0");
  EXPECT_TRUE(scan[0].unread);
  EXPECT_FALSE(scan[0].errors.empty());
  ASSERT_TRUE(scanner.Scan(&scan, PciScanDepth::kFaults, cache.get()).ok());
  ASSERT_EQ(scan.size(), 1u);
  EXPECT_FALSE(scan[0].unread);
}

// A card whose directory goes between the reads of one scan (its class and
// vendor read, then every other file gone: the `device` file every PCI
// function has is missing) is not read, not present and healthy with no
// driver, link or AER to fault it.
TEST_F(PciTreeTest, ACardWithoutItsDeviceFileIsNotReadAsHealthy) {
  const std::string gpu = Gpu("0000:3b:00.0");
  store::DeviceRegistry reg;
  prometheus::Registry self;
  PciSampler sampler(PciScanner(dir_.path(), PciFilter()), FaultCatalog::Builtin(),
                     std::chrono::seconds(1), kGaugeInterval, &reg, &self);
  Write(gpu + "/aer_dev_fatal", "Undefined 1\nTOTAL_ERR_FATAL 1\n");
  ASSERT_TRUE(sampler.SampleOnce());
  for (const char* f : {"device", "power_state", "current_link_speed", "current_link_width",
                        "aer_dev_fatal", "driver"})
    fs::remove(gpu + "/" + f);
  ASSERT_TRUE(sampler.SampleOnce());
  const std::vector<store::SourceView> views = reg.SourceViews();
  bool found = false;
  for (const store::SourceView& v : views) {
    if (v.source != store::kSourcePci) continue;
    for (const store::SourceView::Device& d : v.devices) {
      if (d.bus_id != "0000:3b:00.0") continue;
      found = true;
      EXPECT_FALSE(d.seen) << "a card not read is not seen";
    }
  }
  EXPECT_TRUE(found);
}

// A card replaced at one address whose first scan cannot be read whole (a
// fatal AER counter that will not read): what was read of the new card, not
// seen; never the old card's driver, vendor or link. The same card's torn
// scan still shows its last view.
TEST_F(PciTreeTest, AReplacedCardsUnreadFirstScanShowsNoneOfTheOldCard) {
  const std::string gpu = Gpu("0000:3b:00.0");
  store::DeviceRegistry reg;
  prometheus::Registry self;
  PciSampler sampler(PciScanner(dir_.path(), PciFilter()), FaultCatalog::Builtin(),
                     std::chrono::seconds(1), kGaugeInterval, &reg, &self);
  ASSERT_TRUE(sampler.SampleOnce());
  auto view = [&] {
    for (const store::PciDeviceView& v : reg.PciDevices())
      if (v.bus_id == "0000:3b:00.0") return v;
    return store::PciDeviceView{};
  };
  ASSERT_EQ(view().driver, "nvidia");
  Write(gpu + "/power_state", "D3cold\n");  // bound and powered off: a fault
  ASSERT_TRUE(sampler.SampleOnce());
  ASSERT_EQ(view().faults.size(), 1u);
  // The same card, its fatal counters torn: its last view and faults, not seen.
  Write(gpu + "/aer_dev_fatal", "garbage\n");
  ASSERT_TRUE(sampler.SampleOnce());
  EXPECT_FALSE(view().seen);
  EXPECT_EQ(view().driver, "nvidia") << "the same card's last view";
  EXPECT_EQ(view().faults.size(), 1u) << "a failed read is no recovery";
  // Another vendor's card in its place, unbound, its counters torn too.
  Write(gpu + "/vendor", "0x1002\n");
  Write(gpu + "/device", "0x74a1\n");
  Write(gpu + "/current_link_width", "8\n");
  Write(gpu + "/max_link_width", "8\n");  // an x8 card
  fs::remove(gpu + "/driver");
  ASSERT_TRUE(sampler.SampleOnce());
  const store::PciDeviceView v = view();
  EXPECT_FALSE(v.seen);
  EXPECT_EQ(v.vendor, "0x1002") << "what was read of the new card";
  EXPECT_EQ(v.driver, "") << "not the old card's driver";
  EXPECT_EQ(v.current_link_width, 8);
  EXPECT_TRUE(v.faults.empty()) << "not the old card's faults";
  EXPECT_FALSE(v.bound_before) << "the old card's binding is not the new one's";
  // Read whole, then bound: a card of its own, no reset counted.
  Write(gpu + "/aer_dev_fatal", "TOTAL_ERR_FATAL 0\n");
  Write(gpu + "/power_state", "D0\n");
  ASSERT_TRUE(sampler.SampleOnce());
  fs::create_directories(dir_.path() + "/bus/pci/drivers/amdgpu");
  fs::create_directory_symlink("../../../bus/pci/drivers/amdgpu", gpu + "/driver");
  ASSERT_TRUE(sampler.SampleOnce());
  EXPECT_TRUE(view().seen);
  EXPECT_EQ(view().driver, "amdgpu");
  EXPECT_EQ(view().resets_observed, 0U) << "the old card's leaving is not the new card's reset";
  EXPECT_TRUE(view().faults.empty());
}

// Each fact at its cadence (issue 51): after the first, whole, scan the
// sampler reads only what raises a fault (the driver, the current link, the
// power state, the fatal AER counters), and keeps the slow facts (the
// maximum link, hwmon, the other AER counters) of its last whole scan. A
// fault is seen at the next scan all the same.
TEST_F(PciTreeTest, SlowFactsAreReadAtTheirCadenceAndFaultsEveryScan) {
  const std::string gpu = Gpu("0000:3b:00.0");
  store::DeviceRegistry reg;
  prometheus::Registry self;
  auto sampler = [&](std::chrono::milliseconds gauge) {
    return std::make_unique<PciSampler>(PciScanner(dir_.path(), PciFilter()),
                                        FaultCatalog::Builtin(), std::chrono::seconds(1), gauge,
                                        &reg, &self);
  };
  auto split = sampler(kGaugeInterval);
  ASSERT_TRUE(split->SampleOnce());
  Write(gpu + "/hwmon/hwmon3/temp1_input", "91000\n");
  Write(gpu + "/aer_dev_correctable", "RxErr 7\nBadTLP 1\nTOTAL_ERR_COR 8\n");
  Write(gpu + "/max_link_width", "8\n");
  Write(gpu + "/aer_dev_fatal", "TOTAL_ERR_FATAL 1\n");
  Write(gpu + "/power_state", "D3cold\n");
  ASSERT_TRUE(split->SampleOnce());
  auto view = [&] {
    const auto v = reg.PciDevices();
    return v.size() == 1 ? v[0] : store::PciDeviceView{};
  };
  auto temperature = [](const store::PciDeviceView& v) {
    for (const auto& s : v.hwmon)
      if (s.sensor == "edge") return s.value;
    return -1.0;
  };
  auto count = [](const store::PciDeviceView& v, const std::string& severity,
                  const std::string& type) -> int64_t {
    for (const auto& a : v.aer)
      if (a.severity == severity && a.type == type) return static_cast<int64_t>(a.count);
    return -1;
  };
  store::PciDeviceView v = view();
  EXPECT_EQ(v.power_state, "D3cold");              // read every scan
  EXPECT_EQ(count(v, "fatal", "total"), 1);        // read every scan
  EXPECT_EQ(v.max_link_width, 16);                 // kept from the whole scan
  EXPECT_DOUBLE_EQ(temperature(v), 45);            // kept, not dropped
  EXPECT_EQ(count(v, "correctable", "RxErr"), 5);  // kept
  std::vector<std::string> codes;
  for (const auto& f : v.faults) codes.push_back(f.code);
  EXPECT_NE(std::find(codes.begin(), codes.end(), kFaultAerFatal), codes.end());
  EXPECT_NE(std::find(codes.begin(), codes.end(), kFaultUnexpectedD3cold), codes.end());
  // A gauge interval no longer than the interval reads everything each scan.
  split.reset();
  auto whole = sampler(std::chrono::seconds(1));
  ASSERT_TRUE(whole->SampleOnce());
  v = view();
  EXPECT_EQ(v.max_link_width, 8);
  EXPECT_DOUBLE_EQ(temperature(v), 91);
  EXPECT_EQ(count(v, "correctable", "RxErr"), 7);
}

// Between whole scans (the review's cases): a card that appears, or is
// replaced at its address by another device id, is judged against its own
// maxima from its first sample (a whole scan at once), not a predecessor's
// or none; a maximum that fails to read in a whole scan keeps the last one.
TEST_F(PciTreeTest, ACardNewOrReplacedBetweenWholeScansHasItsOwnMaxima) {
  const std::string first = Gpu("0000:3b:00.0");
  store::DeviceRegistry reg;
  prometheus::Registry self;
  PciSampler sampler(PciScanner(dir_.path(), PciFilter()), FaultCatalog::Builtin(),
                     std::chrono::seconds(1), kGaugeInterval, &reg, &self);
  ASSERT_TRUE(sampler.SampleOnce());  // whole
  auto view = [&](const std::string& bus) {
    for (const store::PciDeviceView& v : reg.PciDevices())
      if (v.bus_id == bus) return v;
    return store::PciDeviceView{};
  };
  const std::string second = Gpu("0000:5e:00.0");
  Write(second + "/max_link_width", "8\n");
  Write(second + "/current_link_width", "8\n");
  ASSERT_TRUE(sampler.SampleOnce());  // within the gauge interval
  EXPECT_EQ(view("0000:5e:00.0").max_link_width, 8) << "a new card's own maximum";
  // Replaced: another device id at the first card's address, an x8 card.
  Write(first + "/device", "0x2331\n");
  Write(first + "/max_link_width", "8\n");
  Write(first + "/current_link_width", "8\n");
  for (uint32_t i = 0; i < kNarrowSamplesForFault + 1; ++i) ASSERT_TRUE(sampler.SampleOnce());
  EXPECT_EQ(view("0000:3b:00.0").max_link_width, 8) << "the new card's maximum, not the old x16";
  EXPECT_TRUE(view("0000:3b:00.0").faults.empty()) << "an x8 card at x8 is not downtrained";
  // A maximum that cannot be read at a whole scan keeps the last one read.
  Write(second + "/max_link_width", "garbage\n");
  PciSampler every(PciScanner(dir_.path(), PciFilter()), FaultCatalog::Builtin(),
                   std::chrono::seconds(1), std::chrono::seconds(1), &reg, &self);
  every.SeedTracker(sampler.tracker_state());
  Write(second + "/max_link_width", "8\n");
  ASSERT_TRUE(every.SampleOnce());
  Write(second + "/max_link_width", "garbage\n");
  ASSERT_TRUE(every.SampleOnce());
  EXPECT_EQ(view("0000:5e:00.0").max_link_width, 8) << "one bad read keeps the last maximum";
}

// An SR-IOV virtual function is part of its physical card, not a card of
// its own; a card in a 32-bit PCI domain (Intel VMD) is one.
TEST_F(PciTreeTest, VirtualFunctionsAreNoCardsAndA32BitDomainIsOne) {
  const std::string pf = Gpu("0000:3b:00.0");
  const std::string vf = Gpu("0000:3b:00.4");
  fs::create_directory_symlink(pf, vf + "/physfn");
  Gpu("10000:e1:00.0");
  std::vector<PciDevice> out;
  ASSERT_TRUE(PciScanner(dir_.path(), PciFilter()).Scan(&out).ok());
  std::vector<std::string> addresses;
  for (const PciDevice& d : out) addresses.push_back(d.address);
  EXPECT_EQ(addresses, (std::vector<std::string>{"0000:3b:00.0", "10000:e1:00.0"}));
}

// The tracker keys each card by its address; the registry's one join names
// it from XDM's list (NVIDIA's spelling of the address too), present or not.
TEST_F(PciTreeTest, TheRegistryNamesTheTrackersCardsByBusIdAndTheTrackerCountsResets) {
  Gpu("0000:3b:00.0");
  store::DeviceInfo xdm;
  xdm.minor = 2;
  xdm.uuid = "GPU-2";
  xdm.bus_id = "00000000:3B:00.0";
  store::DeviceRegistry reg;
  reg.SetXdmDevices({xdm});
  auto named = [&reg](std::vector<store::PciDeviceView> v) {
    reg.SetPciDevices(std::move(v));
    return reg.PciDevices();
  };
  PciTracker t;
  auto v = t.Update(Scan());
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].minor, "") << "the tracker names nothing";
  EXPECT_EQ(v[0].vendor, "0x10de");
  EXPECT_EQ(named(v)[0].minor, "2");
  EXPECT_EQ(named(v)[0].uuid, "GPU-2");
  EXPECT_EQ(v[0].resets_observed, 0u);
  // The driver unbinds: present, unbound; then it binds again: one reset.
  const std::string d = dir_.path() + "/devices/pci0000:00/0000:3b:00.0";
  fs::remove(d + "/driver");
  v = t.Update(Scan());
  EXPECT_EQ(v[0].driver, "");
  EXPECT_TRUE(v[0].present);
  fs::create_directory_symlink("../../../bus/pci/drivers/nvidia", d + "/driver");
  v = t.Update(Scan());
  EXPECT_EQ(v[0].resets_observed, 1u);
  // It falls off the bus: kept as absent, with its identity; then returns.
  fs::remove(dir_.path() + "/bus/pci/devices/0000:3b:00.0");
  v = t.Update(Scan());
  ASSERT_EQ(v.size(), 1u);
  EXPECT_FALSE(v[0].present);
  EXPECT_EQ(named(v)[0].uuid, "GPU-2");
  fs::create_directory_symlink(d, dir_.path() + "/bus/pci/devices/0000:3b:00.0");
  v = t.Update(Scan());
  EXPECT_TRUE(v[0].present);
  EXPECT_EQ(v[0].resets_observed, 2u);
}

// The pci backend's families are written by the registry from the view the
// sampler publishes (store::PciFamilies), as the kmsg view's are: none before
// a view, all of them from the first one.
TEST_F(PciTreeTest, TheRegistryWritesThePciFamiliesFromThePciView) {
  Gpu("0000:3b:00.0");
  store::DeviceRegistry reg;
  PciTracker t;
  for (const auto& f : reg.Collect()) EXPECT_EQ(f.name.rfind("xpu_pci", 0), std::string::npos);
  reg.SetPciDevices(t.Update(Scan()));
  std::map<std::string, size_t> series;
  for (const auto& f : reg.Collect()) series[f.name] = f.metric.size();
  EXPECT_EQ(series["xpu_pci_driver_bound"], 1u);
  // current, max and capable (no port above it in this tree)
  EXPECT_EQ(series["xpu_pcie_link_speed_transfers_per_second"], 3u);
  EXPECT_EQ(series["xpu_pcie_link_width_lanes"], 3u);
  EXPECT_EQ(series["xpu_pcie_aer_errors_total"], 5u);
  EXPECT_EQ(series["xpu_pci_power_state"], 1u);
  EXPECT_EQ(series["xpu_hwmon_temperature_celsius"], 1u);
  EXPECT_EQ(series["xpu_hwmon_power_watts"], 1u);
  EXPECT_EQ(series["xpu_hwmon_energy_joules_total"], 1u);
  EXPECT_EQ(series["xpu_device_resets_observed_total"], 1u);
}

// The parser meets real kernel output: this machine's network controllers
// (class 0200), read by the scanner and by lspci, must agree.
// A scanner that keeps its files open and its verdicts on the bus's other
// functions (PciScanCache) reads what a fresh scan reads, after whatever
// changed: a file written in place or renamed over, a link moved, a card
// removed, a NIC's address taken by a card. Only what a fast scan does not
// judge again (a NIC's class changed in place) waits for the whole scan.
TEST_F(PciTreeTest, ACachedScanReadsWhatAFreshScanReads) {
  const std::string a = Gpu("0000:3b:00.0");
  const std::string b = Gpu("0000:5e:00.0");
  const std::string nic = Dev("0000:86:00.0");
  Write(nic + "/vendor", "0x15b3\n");
  Write(nic + "/class", "0x020000\n");
  PciScanner scanner(dir_.path(), PciFilter());
  PciScanCache cache;
  auto same = [&](PciScanDepth depth, const char* after) {
    std::vector<PciDevice> cached, fresh;
    ASSERT_TRUE(scanner.Scan(&cached, depth, &cache).ok());
    ASSERT_TRUE(scanner.Scan(&fresh, depth).ok());
    ASSERT_EQ(cached.size(), fresh.size()) << after;
    for (size_t i = 0; i < fresh.size(); ++i) {
      EXPECT_EQ(cached[i].address, fresh[i].address) << after;
      EXPECT_EQ(cached[i].device, fresh[i].device) << after;
      EXPECT_EQ(cached[i].driver, fresh[i].driver) << after;
      EXPECT_EQ(cached[i].power_state, fresh[i].power_state) << after;
      EXPECT_EQ(cached[i].current_link_width, fresh[i].current_link_width) << after;
      EXPECT_EQ(cached[i].current_link_speed, fresh[i].current_link_speed) << after;
      ASSERT_EQ(cached[i].aer.size(), fresh[i].aer.size()) << after;
      for (size_t k = 0; k < fresh[i].aer.size(); ++k)
        EXPECT_EQ(cached[i].aer[k].count, fresh[i].aer[k].count) << after;
    }
  };
  same(PciScanDepth::kWhole, "the first scan");
  same(PciScanDepth::kFaults, "nothing changed");
  EXPECT_GT(cache.files.held(), 0u) << "a card's files are held between scans";
  EXPECT_EQ(cache.not_cards.size(), 1u) << "the NIC is judged once";
  EXPECT_TRUE(cache.files.Holding(dir_.path() + "/bus/pci/devices/0000:3b:00.0"));
  EXPECT_FALSE(cache.files.Holding(dir_.path() + "/bus/pci/devices/0000:86:00.0"))
      << "a NIC's files are neither held nor watched";

  Write(a + "/current_link_width", "0\n");  // in place
  same(PciScanDepth::kFaults, "a link down, written in place");
  Write(a + "/aer_dev_fatal.new", "TOTAL_ERR_FATAL 2\n");
  fs::rename(a + "/aer_dev_fatal.new", a + "/aer_dev_fatal");  // as xdm-sim writes
  same(PciScanDepth::kFaults, "a fatal AER, renamed over");
  fs::remove(b + "/driver");
  same(PciScanDepth::kFaults, "a driver unbound");
  fs::create_directories(dir_.path() + "/bus/pci/drivers/vfio-pci");
  fs::create_directory_symlink("../../../bus/pci/drivers/vfio-pci", b + "/driver");
  same(PciScanDepth::kFaults, "bound to another driver");
  Write(b + "/power_state", "D3cold\n");
  same(PciScanDepth::kFaults, "D3cold");

  // The card at b leaves the bus: its files are let go.
  const size_t held = cache.files.held();
  fs::remove(dir_.path() + "/bus/pci/devices/0000:5e:00.0");
  fs::remove_all(b);
  same(PciScanDepth::kFaults, "a card gone");
  EXPECT_LT(cache.files.held(), held);

  // A card where the NIC was (hot swap: a new directory): found at once.
  fs::remove(dir_.path() + "/bus/pci/devices/0000:86:00.0");
  fs::remove_all(nic);
  Gpu("0000:86:00.0");
  std::vector<PciDevice> now;
  ASSERT_TRUE(scanner.Scan(&now, PciScanDepth::kFaults, &cache).ok());
  ASSERT_EQ(now.size(), 2u);
  EXPECT_EQ(now[1].address, "0000:86:00.0");
  same(PciScanDepth::kFaults, "a card in the NIC's place");

  // A function's class rewritten in place (no sysfs does this; a tree a
  // test writes may): judged again by the next whole scan.
  const std::string other = Dev("0000:af:00.0");
  Write(other + "/vendor", "0x8086\n");
  Write(other + "/class", "0x060400\n");
  same(PciScanDepth::kWhole, "a bridge added");
  Write(other + "/class", "0x030200\n");
  Write(other + "/vendor", "0x10de\n");
  ASSERT_TRUE(scanner.Scan(&now, PciScanDepth::kFaults, &cache).ok());
  EXPECT_EQ(now.size(), 2u) << "a fast scan does not judge a known function again";
  same(PciScanDepth::kWhole, "the whole scan judges it");
  ASSERT_TRUE(scanner.Scan(&now, PciScanDepth::kFaults, &cache).ok());
  EXPECT_EQ(now.size(), 3u);
  // A known card's vendor is not read again by a fast scan (a card's vendor
  // made another's in place waits for the whole scan); its class is, and a
  // class changed in place is judged anew at once.
  Write(other + "/vendor", "0x8086\n");
  ASSERT_TRUE(scanner.Scan(&now, PciScanDepth::kFaults, &cache).ok());
  ASSERT_EQ(now.size(), 3u);
  EXPECT_EQ(now[2].address, "0000:af:00.0");
  EXPECT_EQ(now[2].vendor, 0x10deu) << "a fast scan does not read a known card's vendor";
  Write(other + "/vendor", "0x10de\n");
  Write(other + "/class", "0x060400\n");
  same(PciScanDepth::kFaults, "a known card made a bridge in place");
  // A known card whose files are gone while its entry is still listed (it
  // left the bus between the listing and its reads): no card, as a fresh
  // scan says, not a card whose driver is gone.
  for (const auto& f : fs::directory_iterator(a)) fs::remove_all(f.path());
  same(PciScanDepth::kFaults, "a known card's files gone under its listed entry");
}

TEST(PciRealSysTest, ScannerAgreesWithLspciOnThisMachine) {
  PciFilter f;
  ASSERT_TRUE(MakePciFilter({"0200"}, {}, &f).ok());
  std::vector<PciDevice> devs;
  ASSERT_TRUE(PciScanner("/sys", f).Scan(&devs).ok());
  if (devs.empty()) GTEST_SKIP() << "no network controller on this machine's PCI bus";
  // Through held files, again and again, the real sysfs reads the same.
  PciScanCache cache;
  for (PciScanDepth depth : {PciScanDepth::kWhole, PciScanDepth::kFaults, PciScanDepth::kFaults}) {
    std::vector<PciDevice> cached;
    ASSERT_TRUE(PciScanner("/sys", f).Scan(&cached, depth, &cache).ok());
    ASSERT_EQ(cached.size(), devs.size());
    for (size_t i = 0; i < devs.size(); ++i) {
      EXPECT_EQ(cached[i].address, devs[i].address);
      EXPECT_EQ(cached[i].device, devs[i].device);
      EXPECT_EQ(cached[i].driver, devs[i].driver);
      EXPECT_EQ(cached[i].current_link_width, devs[i].current_link_width);
      EXPECT_TRUE(cached[i].errors.empty()) << cached[i].errors.front();
    }
  }
  EXPECT_GT(cache.files.held(), 0u);
  for (const PciDevice& d : devs) {
    // lspci -n -s <addr>: "3b:00.0 0200: 15b3:1017 (rev 00)"
    const std::string out = xpu::testing::RunCommand("lspci -n -s " + d.address);
    ASSERT_FALSE(out.empty()) << "lspci (pciutils) is needed for this test";
    char ids[32];
    std::snprintf(ids, sizeof ids, "%04x: %04x:%04x", d.class_code >> 8, d.vendor, d.device);
    EXPECT_NE(out.find(ids), std::string::npos) << out << " vs " << ids;
    const std::string k = xpu::testing::RunCommand("lspci -k -s " + d.address + " 2>/dev/null");
    if (!d.driver.empty()) {
      EXPECT_NE(k.find("Kernel driver in use: " + d.driver), std::string::npos) << k;
    } else {
      EXPECT_EQ(k.find("Kernel driver in use"), std::string::npos) << k;
    }
    EXPECT_TRUE(d.errors.empty()) << d.address << ": " << d.errors.front();
    std::string speed;
    if (::access(("/sys/bus/pci/devices/" + d.address + "/current_link_speed").c_str(), F_OK) ==
        0) {
      std::ifstream("/sys/bus/pci/devices/" + d.address + "/current_link_speed") >> speed;
      EXPECT_TRUE(d.current_link_speed || speed == "Unknown") << speed;
    }
  }
}

}  // namespace
}  // namespace xpu::hal

namespace xpu::hal {
namespace {

TEST(HalSelectionTest, AutoNoneOrAListOfRegisteredBackends) {
  HalSelection s;
  ASSERT_TRUE(ParseHalSelection("sysfs,pci", &s).ok());
  EXPECT_TRUE(s.on("sysfs") && s.on("pci") && !s.automatic);
  ASSERT_TRUE(ParseHalSelection("pci", &s).ok());
  EXPECT_TRUE(!s.on("sysfs") && s.on("pci"));
  ASSERT_TRUE(ParseHalSelection("auto", &s).ok());
  EXPECT_TRUE(s.automatic);
  ASSERT_TRUE(ParseHalSelection("none", &s).ok());
  EXPECT_TRUE(!s.automatic && s.names.empty());
  ASSERT_TRUE(ParseHalSelection("pci,kmsg,nvml", &s).ok());
  EXPECT_TRUE(!s.on("sysfs") && s.on("pci") && s.on("kmsg") && s.on("nvml"));
  const Status unknown = ParseHalSelection("sysfs,dcgm", &s);
  EXPECT_FALSE(unknown.ok());
  EXPECT_NE(unknown.message().find("sysfs, pci, kmsg and nvml"), std::string::npos)
      << "the registered names: " << unknown.message();
  EXPECT_FALSE(ParseHalSelection("sysfs,", &s).ok());
  EXPECT_FALSE(ParseHalSelection("", &s).ok());
  // Every registered backend is a word of --hal, in its own folder's row.
  for (const BackendKind& k : BackendKinds()) {
    ASSERT_TRUE(ParseHalSelection(k.name, &s).ok()) << k.name;
    EXPECT_TRUE(s.on(k.name));
    EXPECT_NE(k.make, nullptr) << k.name;
  }
}

}  // namespace
}  // namespace xpu::hal

namespace xpu::hal {
namespace {

TEST(PciFaultsTest, EachConditionDerivesItsCode) {
  store::PciDeviceView v;
  v.bus_id = "0000:3b:00.0";
  v.driver = "nvidia";
  v.current_link_speed = v.max_link_speed = 32e9;
  v.current_link_width = v.max_link_width = 16;
  v.power_state = "D0";
  EXPECT_TRUE(DerivePciFaults(v).empty());
  v.current_link_width = 8;  // x8 of x16, lasting
  v.narrow_samples = kNarrowSamplesForFault;
  EXPECT_EQ(DerivePciFaults(v), std::vector<std::string>{kFaultLinkDowntrained});
  v.narrow_samples = kNarrowSamplesForFault - 1;  // not yet: a retrain may be under way
  EXPECT_TRUE(DerivePciFaults(v).empty());
  v.narrow_samples = 0;
  v.current_link_width = 16;
  v.current_link_speed = 2.5e9;  // idle power management: not a fault
  EXPECT_TRUE(DerivePciFaults(v).empty());
  v.current_link_speed.reset();  // "Unknown" where a max is known
  EXPECT_EQ(DerivePciFaults(v), std::vector<std::string>{kFaultLinkDown});
  v.current_link_speed = 32e9;
  v.current_link_width = 0;
  EXPECT_EQ(DerivePciFaults(v), std::vector<std::string>{kFaultLinkDown});
  v.current_link_width = 16;
  v.aer = {{"fatal", "DLP", 0}, {"correctable", "RxErr", 9}};
  EXPECT_TRUE(DerivePciFaults(v).empty());  // correctable errors alone are not a fault
  v.aer = {{"fatal", "DLP", 1}};
  EXPECT_EQ(DerivePciFaults(v), std::vector<std::string>{kFaultAerFatal});
  v.aer.clear();
  v.power_state = "D3cold";
  EXPECT_EQ(DerivePciFaults(v), std::vector<std::string>{kFaultUnexpectedD3cold});
  // Powered off, its link status reads all ones (width 63, read as down;
  // speed Unknown): the power state's, not a link fault besides it.
  v.current_link_width = 0;
  v.current_link_speed.reset();
  EXPECT_EQ(DerivePciFaults(v), std::vector<std::string>{kFaultUnexpectedD3cold});
  v.driver.clear();  // unbound and powered off: only the unbound driver
  EXPECT_EQ(DerivePciFaults(v), std::vector<std::string>{kFaultDriverUnbound});
  v.present = false;
  EXPECT_EQ(DerivePciFaults(v), std::vector<std::string>{kFaultDeviceLost});
  // Conventional PCI: no link files, nothing derived from them.
  store::PciDeviceView plain;
  plain.driver = "virtio-pci";
  EXPECT_TRUE(DerivePciFaults(plain).empty());
}

TEST(PciFaultsTest, EveryDerivedCodeIsInTheBuiltinCatalog) {
  const auto catalog = FaultCatalog::Builtin();
  for (const char* code : {kFaultLinkDowntrained, kFaultLinkDown, kFaultAerFatal, kFaultDeviceLost,
                           kFaultDriverUnbound, kFaultUnexpectedD3cold})
    EXPECT_TRUE(catalog->Lookup(code).known) << code;
}

// A failed scan no longer freezes the last values (issue 32): the pci
// source is blind at once (its share of the health withdrawn), and once its
// last view is older than kStaleIntervals intervals the whole view goes:
// link, AER and fault series, as every source's does.
TEST_F(PciTreeTest, AFailedScanMakesTheSourceBlindAndItsViewGoesWhenStale) {
  store::DeviceRegistry reg;
  auto now = std::chrono::steady_clock::now();
  reg.SetClock([&now] { return now; });
  NarrowGpuKnownToXdm(&reg);
  prometheus::Registry self;
  PciSampler sampler(PciScanner(dir_.path(), PciFilter()), FaultCatalog::Builtin(),
                     std::chrono::milliseconds(1000), kGaugeInterval, &reg, &self);
  auto families = [&] {  // series by family; health only the HAL's
    std::map<std::string, size_t> n;
    for (const auto& f : reg.Collect())
      for (const auto& m : f.metric)
        if (f.name != "xpu_device_health" || m.label.back().value == "pci") ++n[f.name];
    return n;
  };
  for (uint32_t i = 0; i < kNarrowSamplesForFault; ++i) ASSERT_TRUE(sampler.SampleOnce());
  EXPECT_EQ(families()["xpu_device_health"], 1u);
  EXPECT_GT(families()["xpu_pcie_link_width_lanes"], 0u);
  EXPECT_EQ(families()["xpu_device_fault_active"], 1u);
  fs::remove_all(dir_.path() + "/bus");
  now += std::chrono::milliseconds(1000);
  EXPECT_FALSE(sampler.SampleOnce());
  EXPECT_EQ(families().count("xpu_device_health"), 0u) << "a blind source's health on the page";
  EXPECT_GT(families()["xpu_pcie_link_width_lanes"], 0u) << "not stale yet";
  EXPECT_EQ(xpu::testing::MetricValue(reg, "xpu_exporter_source_up", {{"source", "pci"}}), 0);
  for (int i = 0; i < store::kStaleIntervals; ++i) {
    now += std::chrono::milliseconds(1000);
    EXPECT_FALSE(sampler.SampleOnce());
  }
  const auto stale = families();
  EXPECT_EQ(stale.count("xpu_pcie_link_width_lanes"), 0u) << "the stale view's values froze";
  EXPECT_EQ(stale.count("xpu_device_fault_active"), 0u);
  EXPECT_TRUE(reg.PciDevices().empty());
  EXPECT_TRUE(xpu::testing::ViewOf(reg, "pci").empty());
}

TEST_F(PciTreeTest, DerivedFaultsReachTheHalViewAndMakeTheDeviceUnhealthy) {
  store::DeviceRegistry reg;
  NarrowGpuKnownToXdm(&reg);
  prometheus::Registry self;
  PciSampler sampler(PciScanner(dir_.path(), PciFilter()), FaultCatalog::Builtin(),
                     std::chrono::milliseconds(1000), kGaugeInterval, &reg, &self);
  for (uint32_t i = 1; i < kNarrowSamplesForFault; ++i) {
    ASSERT_TRUE(sampler.SampleOnce());
    EXPECT_TRUE(xpu::testing::ViewOf(reg, "pci")[0].faults.empty()) << "sample " << i;
  }
  ASSERT_TRUE(sampler.SampleOnce());
  auto hal = xpu::testing::ViewOf(reg, "pci");
  ASSERT_EQ(hal.size(), 1u);
  EXPECT_EQ(hal[0].minor, 0);
  ASSERT_EQ(hal[0].faults.size(), 1u);
  EXPECT_EQ(hal[0].faults[0].code, kFaultLinkDowntrained);
  EXPECT_EQ(hal[0].healthy, false);  // restart_card: card-level action needed
  double events = 0;
  for (const auto& f : self.Collect())
    if (f.name == "xpu_device_fault_events_total")
      for (const auto& m : f.metric) events += m.counter.value;
  EXPECT_EQ(events, 1);
  ASSERT_TRUE(sampler.SampleOnce());  // still active: not raised again
  for (const auto& f : self.Collect()) {
    if (f.name != "xpu_device_fault_events_total") continue;
    for (const auto& m : f.metric) EXPECT_EQ(m.counter.value, 1);
  }
}

// A failed read is no recovery, and no fault: a card whose fatal AER
// counters, current link speed or class cannot be read this scan (a file
// that answers an error, here a directory: EISDIR) keeps the faults it had,
// raises none it did not have (link down, device lost), and is not seen
// (Unknown) until it reads again. The fatal AER fault is raised once.
TEST_F(PciTreeTest, AFactThatCannotBeReadKeepsTheLastFaultsAndIsNotSeen) {
  // Between whole scans (the fast scan trusts its judgment of a known card)
  // and at every scan whole (each function judged again).
  for (const auto gauge : {kGaugeInterval, std::chrono::milliseconds(1000)}) {
    SCOPED_TRACE(gauge == kGaugeInterval ? "fast scans" : "whole scans");
    // A card of its own each round (the last round's stays on the bus).
    const std::string bus = gauge == kGaugeInterval ? "0000:10:00.0" : "0000:11:00.0";
    store::DeviceRegistry reg;
    const std::string d = Gpu(bus);
    Write(d + "/aer_dev_fatal", "DLP 1\nTOTAL_ERR_FATAL 1\n");
    store::DeviceInfo xdm;
    xdm.minor = 0;
    xdm.uuid = "GPU-0";
    xdm.bus_id = bus;
    reg.SetXdmDevices({xdm});
    prometheus::Registry self;
    PciSampler sampler(PciScanner(dir_.path(), PciFilter()), FaultCatalog::Builtin(),
                       std::chrono::milliseconds(1000), gauge, &reg, &self);
    auto card = [&] {
      for (const auto& v : xpu::testing::ViewOf(reg, "pci"))
        if (v.bus_id == bus) return v;
      ADD_FAILURE() << bus << " not in the view";
      return store::DeviceView();
    };
    auto codes = [&] {
      std::vector<std::string> out;
      for (const auto& f : card().faults) out.push_back(f.code);
      return out;
    };
    auto seen = [&] { return card().seen; };
    auto raises = [&] {
      double n = 0;
      for (const auto& f : self.Collect())
        if (f.name == "xpu_device_fault_events_total")
          for (const auto& m : f.metric)
            for (const auto& l : m.label)
              if (l.name == "bus_id" && l.value == bus) n += m.counter.value;
      return n;
    };
    const std::vector<std::string> fatal{kFaultAerFatal};
    ASSERT_TRUE(sampler.SampleOnce());
    ASSERT_EQ(codes(), fatal);
    EXPECT_TRUE(seen());
    // Each file unreadable in turn (a directory in its place: EISDIR, or
    // EINVAL for the driver link), then back.
    for (const char* file : {"aer_dev_fatal", "current_link_speed", "current_link_width", "class",
                             "vendor", "device", "power_state", "driver"}) {
      const std::string path = d + "/" + file;
      const std::string kept = path + ".kept";
      fs::rename(path, kept);
      fs::create_directory(path);
      ASSERT_TRUE(sampler.SampleOnce()) << file;
      EXPECT_EQ(codes(), fatal) << file << " unreadable";
      // The vendor is read by a whole scan only.
      if (std::string(file) != "vendor" || gauge != kGaugeInterval) {
        EXPECT_FALSE(seen()) << file << " unreadable";
      }
      fs::remove(path);
      fs::rename(kept, path);
      ASSERT_TRUE(sampler.SampleOnce()) << file;
      EXPECT_EQ(codes(), fatal) << file << " read again";
      EXPECT_TRUE(seen()) << file << " read again";
    }
    EXPECT_EQ(raises(), 1) << "a fault cleared by a failed read was raised again";
    // A device that does not answer its config space reads its link width
    // as all ones (63): its link is down, which is seen, not a failed read.
    Write(d + "/current_link_width", "63\n");
    ASSERT_TRUE(sampler.SampleOnce());
    EXPECT_EQ(codes(), (std::vector<std::string>{kFaultLinkDown, kFaultAerFatal}));
    EXPECT_TRUE(seen());
  }
}

// The bus is the inventory: a card the daemon names at an address the bus
// does not show at all (it fell off before the exporter started) is not
// seen by the pci source, neither healthy nor lost; a function the bus
// shows but does not watch (another class) is not judged. Before, no
// source but the kernel log covered such a card, and the log's silence
// called it healthy.
TEST_F(PciTreeTest, ACardTheDaemonNamesThatTheBusDoesNotShowIsNotSeen) {
  store::DeviceRegistry reg;
  Gpu("0000:10:00.0");
  const std::string nic = Dev("0000:30:00.0");
  Write(nic + "/vendor", "0x15b3\n");
  Write(nic + "/class", "0x020000\n");
  std::vector<store::DeviceInfo> xdm(3);
  for (int i = 0; i < 3; ++i) {
    xdm[i].minor = i;
    xdm[i].uuid = "GPU-" + std::to_string(i);
  }
  xdm[0].bus_id = "0000:10:00.0";  // on the bus
  xdm[1].bus_id = "0000:20:00.0";  // not on the bus at all
  xdm[2].bus_id = "0000:30:00.0";  // on the bus, a class the source does not watch
  reg.SetXdmDevices(xdm);
  prometheus::Registry self;
  PciSampler sampler(PciScanner(dir_.path(), PciFilter()), FaultCatalog::Builtin(),
                     std::chrono::milliseconds(1000), kGaugeInterval, &reg, &self);
  ASSERT_TRUE(sampler.SampleOnce());
  std::map<int32_t, std::pair<bool, size_t>> pci;  // minor -> seen, faults
  for (const store::SourceView& v : reg.SourceViews())
    if (v.source == "pci")
      for (const auto& d : v.devices) pci[d.minor] = {d.seen, d.faults.size()};
  EXPECT_EQ(pci, (std::map<int32_t, std::pair<bool, size_t>>{{0, {true, 0}}, {1, {false, 0}}}));
  // The card comes onto the bus: seen, as any card.
  Gpu("0000:20:00.0");
  ASSERT_TRUE(sampler.SampleOnce());
  pci.clear();
  for (const store::SourceView& v : reg.SourceViews())
    if (v.source == "pci")
      for (const auto& d : v.devices) pci[d.minor] = {d.seen, d.faults.size()};
  EXPECT_EQ(pci, (std::map<int32_t, std::pair<bool, size_t>>{{0, {true, 0}}, {1, {true, 0}}}));
}

// A reload builds a new sampler: handed the old one's state, a lasting
// narrow link stays a fault (not cleared and raised again three samples
// later), and the resets seen are not forgotten.
TEST_F(PciTreeTest, ASamplerHandedTheOldOnesStateKeepsANarrowLinkFaultWithoutARaise) {
  store::DeviceRegistry reg;
  NarrowGpuKnownToXdm(&reg);
  prometheus::Registry self;
  auto events = [&] { return xpu::testing::MetricSum(self, "xpu_device_fault_events_total"); };
  auto old =
      std::make_unique<PciSampler>(PciScanner(dir_.path(), PciFilter()), FaultCatalog::Builtin(),
                                   std::chrono::milliseconds(1000), kGaugeInterval, &reg, &self);
  for (uint32_t i = 0; i < kNarrowSamplesForFault; ++i) ASSERT_TRUE(old->SampleOnce());
  ASSERT_EQ(xpu::testing::ViewOf(reg, "pci").size(), 1u);
  ASSERT_EQ(xpu::testing::ViewOf(reg, "pci")[0].faults.size(), 1u);
  ASSERT_EQ(events(), 1);
  PciSampler fresh(PciScanner(dir_.path(), PciFilter()), FaultCatalog::Builtin(),
                   std::chrono::milliseconds(1000), kGaugeInterval, &reg, &self);
  fresh.SeedFaultState(old->fault_state());
  fresh.SeedTracker(old->tracker_state());
  old.reset();
  ASSERT_TRUE(fresh.SampleOnce());
  ASSERT_EQ(xpu::testing::ViewOf(reg, "pci").size(), 1u);
  ASSERT_EQ(xpu::testing::ViewOf(reg, "pci")[0].faults.size(), 1u)
      << "the fault was cleared by the reload";
  EXPECT_EQ(xpu::testing::ViewOf(reg, "pci")[0].faults[0].code, kFaultLinkDowntrained);
  EXPECT_EQ(events(), 1);  // not raised again
}

// What the link is judged against, from fixture trees: each card under its
// own root port. Every case below raised pcie_link_downtrained (restart_card,
// the card unhealthy) on the first sample before the slot was read.
TEST_F(PciTreeTest, LinksAreJudgedAgainstTheSlotAndOverTime) {
  // A Gen5 x16 card in a Gen4 x16 slot, trained at Gen4: as good as it gets.
  std::string d = GpuIn(Port("0000:00:01.0", "16.0 GT/s PCIe", 16), "0000:01:00.0");
  Write(d + "/current_link_speed", "16.0 GT/s PCIe\n");
  // An x16 card in an x8 slot, trained x8.
  d = GpuIn(Port("0000:00:02.0", "32.0 GT/s PCIe", 8), "0000:02:00.0");
  Write(d + "/current_link_width", "8\n");
  // Idle: the link at 2.5 GT/s in a Gen5 slot.
  d = GpuIn(Port("0000:00:03.0", "32.0 GT/s PCIe", 16), "0000:03:00.0");
  Write(d + "/current_link_speed", "2.5 GT/s PCIe\n");
  // Really degraded: x4 of an x16 card in an x16 slot.
  d = GpuIn(Port("0000:00:04.0", "32.0 GT/s PCIe", 16), "0000:04:00.0");
  Write(d + "/current_link_width", "4\n");
  // On the root bus, no port to read: judged against the card alone.
  d = Gpu("0000:05:00.0");
  Write(d + "/current_link_width", "8\n");

  const auto scan = Scan();
  ASSERT_EQ(scan.size(), 5u);
  EXPECT_EQ(scan[0].port, "0000:00:01.0");
  EXPECT_EQ(scan[0].port_max_link_speed, 16e9);
  EXPECT_EQ(scan[1].port_max_link_width, 8);
  EXPECT_TRUE(scan[4].port.empty());
  EXPECT_FALSE(scan[4].port_max_link_width.has_value());

  PciTracker tracker;
  std::vector<store::PciDeviceView> views;
  for (uint32_t i = 0; i < kNarrowSamplesForFault; ++i) views = tracker.Update(Scan());
  ASSERT_EQ(views.size(), 5u);
  EXPECT_EQ(views[0].capable_link_speed(), 16e9);
  EXPECT_EQ(views[1].capable_link_width(), 8);
  EXPECT_EQ(views[4].capable_link_width(), 16);
  EXPECT_TRUE(DerivePciFaults(views[0]).empty()) << "Gen5 card in a Gen4 slot";
  EXPECT_TRUE(DerivePciFaults(views[1]).empty()) << "x16 card in an x8 slot";
  EXPECT_TRUE(DerivePciFaults(views[2]).empty()) << "idle link speed";
  EXPECT_EQ(DerivePciFaults(views[3]), std::vector<std::string>{kFaultLinkDowntrained});
  EXPECT_EQ(DerivePciFaults(views[4]), std::vector<std::string>{kFaultLinkDowntrained});
  // Retrained: the count starts again.
  Write(d + "/current_link_width", "16\n");
  views = tracker.Update(Scan());
  EXPECT_EQ(views[4].narrow_samples, 0u);
  EXPECT_TRUE(DerivePciFaults(views[4]).empty());
  Write(d + "/current_link_width", "8\n");
  views = tracker.Update(Scan());
  EXPECT_TRUE(DerivePciFaults(views[4]).empty()) << "one narrow sample after a retrain";

  // Exported: both ends and the capability.
  store::DeviceRegistry reg;
  reg.SetPciDevices(views);
  const store::DeviceRegistry& pci = reg;
  EXPECT_EQ(xpu::testing::MetricValue(pci, "xpu_pcie_link_speed_transfers_per_second",
                                      {{"bus_id", "0000:01:00.0"}, {"bound", "port_max"}}),
            16e9);
  EXPECT_EQ(xpu::testing::MetricValue(pci, "xpu_pcie_link_speed_transfers_per_second",
                                      {{"bus_id", "0000:01:00.0"}, {"bound", "capable"}}),
            16e9);
  EXPECT_EQ(xpu::testing::MetricValue(pci, "xpu_pcie_link_width_lanes",
                                      {{"bus_id", "0000:02:00.0"}, {"bound", "capable"}}),
            8);
  EXPECT_EQ(xpu::testing::MetricValue(pci, "xpu_pcie_link_width_lanes",
                                      {{"bus_id", "0000:05:00.0"}, {"bound", "port_max"}}),
            -1);  // no port: not exported
}

}  // namespace
}  // namespace xpu::hal

namespace xpu::hal {
namespace {

TEST(PciTrackerTest, ChurningAddressesDoNotGrowItWithoutBound) {
  // A small bound, so that the churn passes it many times over cheaply (the
  // exporter's is kMaxPciDevices); one new address per scan.
  constexpr size_t kBound = 64;
  PciTracker t(kBound);
  std::vector<store::PciDeviceView> v;
  for (int i = 0; i < 20 * static_cast<int>(kBound); ++i) {
    PciDevice d;
    char addr[32];
    std::snprintf(addr, sizeof addr, "%04x:%02x:00.0", i / 256, i % 256);
    d.address = addr;
    d.driver = "x";
    v = t.Update({d});
    ASSERT_LE(v.size(), kBound) << "after scan " << i;
    // The device of this scan is always among them, and present.
    const auto now = std::find_if(v.begin(), v.end(),
                                  [&](const store::PciDeviceView& x) { return x.bus_id == addr; });
    ASSERT_NE(now, v.end()) << "after scan " << i;
    EXPECT_TRUE(now->present);
  }
  EXPECT_EQ(v.size(), kBound);
}

}  // namespace
}  // namespace xpu::hal
