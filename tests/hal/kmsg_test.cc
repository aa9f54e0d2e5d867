// The kmsg backend: the kernel's record format, the kernel-log catalog on
// real driver lines (as NVIDIA's, amdgpu's and the PCIe core's code prints
// them and as bug reports show them), and the sampler's device state, with a
// fake clock and a real DeviceRegistry. The real /dev/kmsg is read by
// e2e_kmsg.
#include "hal/kmsg/kmsg.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <prometheus/registry.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <future>
#include <thread>

#include "common/file_util.h"
#include "hal/fault_catalog.h"
#include "hal/kmsg/kmsg_catalog.h"
#include "hal/kmsg/kmsg_sampler.h"
#include "hal/kmsg/kmsg_state.h"
#include "hal/pci_address.h"
#include "store/device_registry.h"
#include "support/metrics_util.h"
#include "support/test_util.h"
#include "support/views_util.h"

namespace xpu::hal {
namespace {

TEST(KmsgRecordTest, ParsesThePrefixTextAndDictionary) {
  KmsgRecord r;
  ASSERT_TRUE(ParseKmsgRecord("3,1234,5678901,-,caller=T42;pcieport 0000:00:01.0: AER: x\\x0a"
                              "y\n SUBSYSTEM=pci\n DEVICE=+pci:0000:00:01.0\n",
                              &r)
                  .ok());
  EXPECT_EQ(r.facility, 0);
  EXPECT_EQ(r.priority, 3);
  EXPECT_EQ(r.sequence, 1234u);
  EXPECT_EQ(r.timestamp_us, 5678901u);
  EXPECT_EQ(r.flags, '-');
  EXPECT_EQ(r.text, "pcieport 0000:00:01.0: AER: x\ny");  // \x0a unescaped
  EXPECT_EQ(r.dict.at("SUBSYSTEM"), "pci");
  EXPECT_EQ(r.dict.at("DEVICE"), "+pci:0000:00:01.0");
  // Written from userspace: facility 1 (LOG_USER), as the kernel forces.
  ASSERT_TRUE(ParseKmsgRecord("11,352,33210946087,-;xpu probe\n", &r).ok());
  EXPECT_EQ(r.facility, 1);
  EXPECT_EQ(r.priority, 3);
  // A continuation fragment.
  ASSERT_TRUE(ParseKmsgRecord("6,9,10,c;more", &r).ok());
  EXPECT_EQ(r.flags, 'c');
  EXPECT_EQ(r.text, "more");
}

TEST(KmsgRecordTest, RefusesWhatIsNotARecord) {
  KmsgRecord r;
  for (const std::string& bad : std::vector<std::string>{
           "", ";text", "3,1,2;no flags", "3,1,2,x;bad flag", "a,1,2,-;level", "3,-1,2,-;seq",
           "3,1,99999999999999999999999,-;time", "99999,1,2,-;level too big", "3,1,2,-\ntext;late",
           "3,1,2,-;t\nNOSPACE=1\n", "3,1,2,-;t\n =v\n", std::string(kKmsgMaxRecord + 1, 'x')}) {
    EXPECT_FALSE(ParseKmsgRecord(bad, &r).ok()) << bad.substr(0, 60);
  }
}

TEST(KmsgRecordTest, FindsPciAddressesInText) {
  EXPECT_EQ(NormalizePciAddress("amdgpu 0000:03:00.0: amdgpu: ring gfx timeout"), "0000:03:00.0");
  EXPECT_EQ(NormalizePciAddress("NVRM: GPU 0000:2B:00.1: fallen"), "0000:2b:00.1");
  EXPECT_EQ(NormalizePciAddress("NVRM: Xid (PCI:0000:3b:00): 79"), "0000:3b:00.0");
  // Intel VMD's domains are 10000 and up: five digits or more, at most 8.
  EXPECT_EQ(NormalizePciAddress("no address 12:34 here 10000:E1:00.0"), "10000:e1:00.0");
  EXPECT_EQ(NormalizePciAddress("nine digits 100000000:00:00.0"), "");
  EXPECT_EQ(NormalizePciAddress("three 000:00:00.0, a bus of one 0000:0:00.0"), "");
  EXPECT_EQ(NormalizePciAddress(""), "");
}

// Each pattern on the lines its driver prints: the code and device it gives.
TEST(KmsgCatalogTest, RealDriverLinesMapToDevicesAndCodes) {
  auto cat = KmsgCatalog::Builtin();
  struct Case {
    const char* line;
    const char* address;
    const char* code;  // "" for reset/healthy records
    KmsgEffect effect;
  };
  const Case cases[] = {
      // NVIDIA (open-gpu-kernel-modules kernel_rc.c and bug reports).
      {"NVRM: Xid (PCI:0000:2b:00): 79, GPU has fallen off the bus.", "0000:2b:00.0", "0x10DE004F",
       KmsgEffect::kFault},
      {"NVRM: Xid (PCI:0000:cb:00): 13, pid='<unknown>', name=<unknown>, Graphics SM Warp "
       "Exception on (GPC 0, TPC 1, SM 0): Out Of Range Address",
       "0000:cb:00.0", "0x10DE000D", KmsgEffect::kFault},
      {"NVRM: Xid (PCI:0000:dc:00): 45, pid=1818990, name=python3, Ch 00000001 caused by "
       "previous Xid 149",
       "0000:dc:00.0", "0x10DE002D", KmsgEffect::kFault},
      {"NVRM: Xid (PCI:0000:10:1c): 63, pid=1896, Row Remapper: New row marked for remapping, "
       "reset gpu to activate.",
       "0000:10:1c.0", "0x10DE003F", KmsgEffect::kFault},
      {"NVRM: Xid (PCI:0000:3b:00 GPU-I:01): 94, pid=77, name=train, Contained: SM (0x1).",
       "0000:3b:00.0", "0x10DE005E", KmsgEffect::kFault},
      {"NVRM: Xid (0000:01:00): 31, Ch 0000000b, engmask 00000120, intr 10000000", "0000:01:00.0",
       "0x10DE001F", KmsgEffect::kFault},
      {"NVRM: Xid (PCI:00000000:3B:00): 48, pid=1, DBE (double bit error)", "0000:3b:00.0",
       "0x10DE0030", KmsgEffect::kFault},
      {"NVRM: GPU 0000:2b:00.0: GPU has fallen off the bus.", "0000:2b:00.0", "0x10DE004F",
       KmsgEffect::kFault},
      // amdgpu (dev_err with the device's address; newer kernels drop "amdgpu: ").
      {"amdgpu 0000:08:00.0: amdgpu: ring gfx_0.0.0 timeout, signaled seq=13441142, emitted "
       "seq=13441144",
       "0000:08:00.0", "0x10020001", KmsgEffect::kFault},
      {"amdgpu 0000:28:00.0: ring gfx_0.0.0 timeout, signaled seq=1, emitted seq=3", "0000:28:00.0",
       "0x10020001", KmsgEffect::kFault},
      {"amdgpu 0000:03:00.0: amdgpu: GPU reset begin!", "0000:03:00.0", "0x10020002",
       KmsgEffect::kFault},
      {"amdgpu 0000:03:00.0: amdgpu: GPU reset(2) succeeded!", "0000:03:00.0", "",
       KmsgEffect::kHealthy},
      {"amdgpu 0000:03:00.0: amdgpu: GPU reset(3) failed", "0000:03:00.0", "0x10020004",
       KmsgEffect::kFault},
      {"amdgpu 0000:1c:00.0: {1}uncorrectable hardware error(ERREVENT_ATHUB_INTERRUPT) "
       "detected!",
       "0000:1c:00.0", "0x10020003", KmsgEffect::kFault},
      {"amdgpu 0000:c1:00.0: amdgpu: 2 uncorrectable hardware errors detected in umc block",
       "0000:c1:00.0", "0x10020003", KmsgEffect::kFault},
      // PCIe AER (drivers/pci/pcie/aer.c), old and new severity words.
      {"nvidia 0000:03:00.0: PCIe Bus Error: severity=Uncorrected (Fatal), type=Transaction "
       "Layer, (Requester ID)",
       "0000:03:00.0", "0xFD000001", KmsgEffect::kFault},
      {"pcieport 0000:03:04.0: PCIe Bus Error: severity=Uncorrectable (Fatal), "
       "type=Transaction Layer, (Receiver ID)",
       "0000:03:04.0", "0xFD000001", KmsgEffect::kFault},
      {"amdgpu 0000:43:00.0: PCIe Bus Error: severity=Uncorrected (Non-Fatal), "
       "type=Transaction Layer, (Requester ID)",
       "0000:43:00.0", "0xFD000002", KmsgEffect::kFault},
      // Behind Intel VMD, whose domains are 10000 and up.
      {"nvidia 10000:E1:00.0: AER: PCIe Bus Error: severity=Uncorrected (Fatal), "
       "type=Inaccessible, (Unregistered Agent ID)",
       "10000:e1:00.0", "0xFD000001", KmsgEffect::kFault},
      {"amdgpu 10000:03:00.0: amdgpu: ring gfx timeout, signaled seq=1, emitted seq=2",
       "10000:03:00.0", "0x10020001", KmsgEffect::kFault},
  };
  for (const Case& c : cases) {
    auto m = cat->Match(c.line, "");
    ASSERT_TRUE(m.has_value()) << c.line;
    EXPECT_EQ(m->address, c.address) << c.line;
    EXPECT_EQ(m->code, c.code) << c.line;
    EXPECT_EQ(m->pattern->effect, c.effect) << c.line;
  }
  // Every code a pattern raises is in the fault catalog, with its level.
  auto faults = FaultCatalog::Builtin();
  for (const KmsgPattern& p : cat->patterns()) {
    if (p.effect != KmsgEffect::kFault || p.numbered) continue;
    char code[16];
    std::snprintf(code, sizeof code, "0x%08X", p.code);
    EXPECT_TRUE(faults->Lookup(code).known) << p.name << " " << code;
  }
  for (int xid : {8,  13, 31, 32, 38, 43, 45, 46, 48,  54,  56,  57,  61,  62,  63,
                  64, 68, 69, 74, 79, 92, 94, 95, 109, 119, 120, 121, 140, 143, 154}) {
    char code[16];
    std::snprintf(code, sizeof code, "0x%08X", 0x10DE0000 + xid);
    EXPECT_TRUE(faults->Lookup(code).known) << "Xid " << xid;
  }
  EXPECT_EQ(faults->Lookup("0x10DE004F").level, FaultLevel::kIsolateCard);  // RESTART_BM
  EXPECT_EQ(faults->Lookup("0x10DE005F").level, FaultLevel::kResetCard);    // RESET_GPU
  EXPECT_EQ(faults->Lookup("0x10DE000D").level, FaultLevel::kRestartJob);   // RESTART_APP
  EXPECT_EQ(faults->Lookup("0x10DE003F").level, FaultLevel::kNone);         // IGNORE
  EXPECT_TRUE(cat->IsState("0x10DE004F"));
  EXPECT_FALSE(cat->IsState("0x10DE000D"));
}

TEST(KmsgCatalogTest, LinesThatAreNotFaultsMatchNothing) {
  auto cat = KmsgCatalog::Builtin();
  for (const char* line :
       {"NVRM: GPU at PCI:0000:2b:00: GPU-0b11d014-1685-04bd-26ed-5fc0bc1c44ae",
        "NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.54.15",
        "pcieport 0000:00:01.0: AER: Uncorrected (Fatal) error received: 0000:03:00.0",
        "nvidia 0000:03:00.0: PCIe Bus Error: severity=Corrected, type=Physical Layer, "
        "(Receiver ID)",
        "amdgpu 0000:03:00.0: amdgpu: 3 correctable hardware errors detected in umc block, no "
        "user action is needed.",
        "NVRM: Xid (PCI:0000:3b:00): 70000, over 65535",  // not a number we map
        "e1000e 0000:00:1f.6 eno1: NIC Link is Up 1000 Mbps Full Duplex", ""}) {
    EXPECT_FALSE(cat->Match(line, "").has_value()) << line;
  }
  EXPECT_EQ(cat->DriverOf("NVRM: GPU at PCI:0000:2b:00: GPU-x"), "nvidia");
  EXPECT_EQ(cat->DriverOf("amdgpu 0000:03:00.0: amdgpu: SMU is initialized"), "amdgpu");
  EXPECT_EQ(cat->DriverOf("e1000e 0000:00:1f.6"), "");
}

TEST(KmsgCatalogTest, BadCatalogsAreRefusedWithWhere) {
  std::shared_ptr<const KmsgCatalog> c;
  const char* bad[] = {
      "patterns: [{name: a, driver: d, regex: '^(', code: '0x1'}]",             // bad regex
      "patterns: [{name: a, driver: d, regex: '^x', code: 'zz'}]",              // bad code
      "patterns: [{name: a, driver: d, regex: '^x'}]",                          // no code
      "patterns: [{name: a, driver: d, regex: '^x', effect: reset, code: 1}]",  // code on reset
      "patterns: [{name: a, driver: d, regex: '^(?P<other>x)', code: 1}]",      // unknown group
      "patterns: [{name: a, regex: '^x', code: 1}]",                            // no driver
      "patterns: [{name: a, driver: d, regex: '^x', code: 1, extra: 2}]",       // unknown key
      "patterns: [{name: a, driver: d, regex: '^(?P<number>\\d+)', code: '0x10DE0001'}]",  // base
      "patterns: [{name: a, driver: d, regex: '^(a)(b)(c)(d)(e)(f)(g)(h)', code: 1}]",     // groups
      "event_active_for: 500ms\npatterns: []",
      "event_active_for: 0s\npatterns: []",
      "states: [nothex]\npatterns: []",
      "drivers: [{name: n}]\npatterns: []",
      "nothing: here",
      // Not anchored at the driver's own prefix: a search anywhere in the text.
      "patterns: [{name: a, driver: d, regex: 'NVRM: Xid', code: 1}]",
      "patterns: [{name: a, driver: d, regex: '^.*NVRM: Xid', code: 1}]",
      "patterns: [{name: a, driver: d, regex: '^.+NVRM: Xid', code: 1}]",
      "patterns: [{name: a, driver: d, regex: '^(.*)NVRM: Xid', code: 1}]",
      "patterns: [{name: a, driver: d, regex: '^(?:(?P<address>.*))NVRM', code: 1}]",
      "patterns: [{name: a, driver: d, regex: '^[\\s\\S]*NVRM: Xid', code: 1}]",
      "patterns: [{name: a, driver: d, regex: '^[^;]*NVRM: Xid', code: 1}]",
      "patterns: [{name: a, driver: d, regex: '^\\s*NVRM: Xid', code: 1}]",
      "patterns: [{name: a, driver: d, regex: '^(?s).*NVRM: Xid', code: 1}]",
      "patterns: [{name: a, driver: d, regex: '^\\C*NVRM: Xid', code: 1}]",
      // The same past the first atom's syntax: an empty or a wild alternative,
      // any non-space, a class of every byte, a letter of any script, a space.
      "patterns: [{name: a, driver: d, regex: '^(?:|.*)NVRM: Xid', code: 1}]",
      "patterns: [{name: a, driver: d, regex: '^(?:a|.*)NVRM: Xid', code: 1}]",
      "patterns: [{name: a, driver: d, regex: '^(?:x|(?:y|.+))NVRM: Xid', code: 1}]",
      "patterns: [{name: a, driver: d, regex: '^\\S+ NVRM: Xid', code: 1}]",
      "patterns: [{name: a, driver: d, regex: '^(?P<address>\\S+) x', code: 1}]",
      "patterns: [{name: a, driver: d, regex: '^[\\x00-\\x7f]+NVRM: Xid', code: 1}]",
      "patterns: [{name: a, driver: d, regex: '^\\pL+ NVRM: Xid', code: 1}]",
      "patterns: [{name: a, driver: d, regex: '^ NVRM: Xid', code: 1}]",
  };
  for (const char* text : bad) {
    Status s = KmsgCatalog::Parse(text, "k.yml", &c);
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << text;
    EXPECT_EQ(s.message().rfind("k.yml", 0), 0u) << s.message();
  }
  // Anchored at a driver's own words, in any case (RE2's (?i) also takes the
  // Kelvin sign for k and the long s for s: still a driver's name).
  for (const char* regex :
       {"^(?i)nvrm: xid", "^(?i)kfd: ", "^(?i)scsi ", "^mlx5_core ",
        "^(?i)[A-Za-z0-9_.-]+ (?P<address>[0-9a-f:.]+): x", "^\\w+ x", "^(?:The )?GPU "}) {
    const Status s = KmsgCatalog::Parse(
        std::string("patterns: [{name: a, driver: d, regex: '") + regex + "', code: 1}]", "k.yml",
        &c);
    EXPECT_TRUE(s.ok()) << regex << ": " << s.message();
  }
  std::string many = "patterns:\n";
  for (size_t i = 0; i <= kMaxKmsgPatterns; ++i)
    many += "  - {name: p, driver: d, regex: '^x', code: '0x1'}\n";
  EXPECT_FALSE(KmsgCatalog::Parse(many, "k.yml", &c).ok());
  EXPECT_FALSE(KmsgCatalog::Parse("patterns: [{name: a, driver: d, regex: '^" +
                                      std::string(kMaxKmsgPatternLength + 1, 'a') + "', code: 1}]",
                                  "k.yml", &c)
                   .ok());
}

// The sampler's state, driven record by record with a fake clock.
class KmsgSamplerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store::DeviceInfo a, b;
    a.minor = 0;
    a.uuid = "GPU-a";
    a.bus_id = "00000000:3B:00.0";  // NVIDIA's spelling: joined all the same
    b.minor = 1;
    b.uuid = "GPU-b";
    b.bus_id = "0000:03:00.0";
    registry_.SetXdmDevices({a, b});
    sampler_ = std::make_unique<KmsgSampler>(KmsgSampler::Options{}, KmsgCatalog::Builtin(),
                                             FaultCatalog::Builtin(), &registry_, &metrics_,
                                             &exemplars_, [this] { return now_us_; });
  }
  // A kernel record at `t_us`.
  void Record(const std::string& text, uint64_t t_us, int facility = 0) {
    sampler_->HandleRecord(std::to_string(facility * 8 + 3) + "," + std::to_string(++seq_) + "," +
                           std::to_string(t_us) + ",-;" + text + "\n");
  }
  const store::DeviceView& Device(int32_t minor) {
    sampler_->Publish();
    view_ = xpu::testing::ViewOf(registry_, "kmsg");
    for (const auto& v : view_)
      if (v.minor == minor) return v;
    ADD_FAILURE() << "minor " << minor << " not in the view";
    return view_.at(0);
  }
  std::vector<std::string> Codes(int32_t minor) {
    std::vector<std::string> out;
    for (const auto& f : Device(minor).faults) out.push_back(f.code);
    return out;
  }
  double Metric(const std::string& name, const std::map<std::string, std::string>& labels = {}) {
    return xpu::testing::MetricValue(metrics_, name, labels);
  }
  // Options that keep the states in `dir`, this boot "boot-1".
  static KmsgSampler::Options StatesIn(const xpu::testing::TempDir& dir) {
    std::ofstream(dir.File("boot_id")) << "boot-1\n";
    KmsgSampler::Options o;
    o.state_file = dir.File("kmsg-states.json");
    o.boot_id_path = dir.File("boot_id");
    return o;
  }
  // An exporter started (again) with `o`, on the fixture's clock: its
  // sampler takes its states back.
  void StartWith(const KmsgSampler::Options& o) {
    sampler_ =
        std::make_unique<KmsgSampler>(o, KmsgCatalog::Builtin(), FaultCatalog::Builtin(),
                                      &registry_, &metrics_, nullptr, [this] { return now_us_; });
    sampler_->RestoreStates();
  }

  uint64_t now_us_ = 1'000'000'000;  // 1000 s since boot
  uint64_t seq_ = 0;
  store::DeviceRegistry registry_;
  store::ExemplarStore exemplars_;
  prometheus::Registry metrics_;
  std::unique_ptr<KmsgSampler> sampler_;
  std::vector<store::DeviceView> view_;
};

// A log that fails to read (here a directory, which opens and then answers
// EISDIR) keeps the source blind: after the error no view goes out until a
// read works again (one did, between the error and the retry, and made it
// seeing with up at 0).
TEST_F(KmsgSamplerTest, AReadErrorKeepsTheSourceBlindUntilAReadWorks) {
  xpu::testing::TempDir dir;
  KmsgSampler::Options o;
  o.path = dir.path();  // not a regular file: read as /dev/kmsg is
  o.interval = std::chrono::milliseconds(50);
  KmsgSampler s(o, KmsgCatalog::Builtin(), FaultCatalog::Builtin(), &registry_, &metrics_);
  KmsgSampler::State caught_up;
  caught_up.caught_up = true;  // as a predecessor that had read the ring hands over
  s.Seed(caught_up);
  s.Start();
  auto blind = [&] {
    for (const store::SourceView& v : registry_.SourceViews())
      if (v.source == "kmsg") return v.sight == store::Sight::kBlind;
    return false;
  };
  ASSERT_TRUE(xpu::testing::WaitFor(blind, std::chrono::seconds(10)));
  // Ten intervals of errors and retries: no view published.
  EXPECT_FALSE(xpu::testing::WaitFor([&] { return registry_.fault_views_set().of("kmsg") > 0; },
                                     std::chrono::milliseconds(500)));
  EXPECT_TRUE(blind());
  s.Stop();
}

// /dev/null in /dev/kmsg's place (systemd-nspawn does this) reads end of
// file, which /dev/kmsg never does: the source is blind, and says why, not a
// silent log that shows every card healthy; --hal=auto does not take it.
// An empty record file is a log with nothing in it yet.
TEST_F(KmsgSamplerTest, ADeviceThatReadsEndOfFileIsNoKernelLog) {
  KmsgSampler::Options o;
  o.path = "/dev/null";
  o.interval = std::chrono::milliseconds(50);
  KmsgSampler s(o, KmsgCatalog::Builtin(), FaultCatalog::Builtin(), &registry_, &metrics_);
  s.Start();
  std::string why;
  EXPECT_TRUE(xpu::testing::WaitFor([&] {
    for (const store::SourceView& v : registry_.SourceViews())
      if (v.source == "kmsg" && v.sight == store::Sight::kBlind) why = v.why;
    return !why.empty();
  }));
  EXPECT_NE(why.find("end of file"), std::string::npos) << why;
  EXPECT_FALSE(xpu::testing::WaitFor([&] { return registry_.fault_views_set().of("kmsg") > 0; },
                                     std::chrono::milliseconds(300)))
      << "a view went out: the source said it sees";
  s.Stop();
  EXPECT_FALSE(KmsgReadable("/dev/null"));
  xpu::testing::TempDir dir;
  std::ofstream(dir.File("empty")).flush();
  EXPECT_TRUE(KmsgReadable(dir.File("empty")));
  if (KmsgReadable("/dev/kmsg")) {
    const int fd = open("/dev/kmsg", O_RDONLY | O_NONBLOCK);
    char c = 0;
    EXPECT_NE(read(fd, &c, 1), 0) << "this kernel's /dev/kmsg read end of file";
    close(fd);
  }
}

// /dev/kmsg's kind of source for a test: a FIFO the sampler reads one record
// at a time, each written once the one before was read (FIONREAD: nothing
// left in it), so that one read takes one record, as on the ring.
class FifoLog {
 public:
  FifoLog() {
    EXPECT_EQ(mkfifo(path_.c_str(), 0600), 0);
    writer_ = open(path_.c_str(), O_RDWR | O_NONBLOCK);  // keeps it open
    EXPECT_GE(writer_, 0);
  }
  ~FifoLog() { close(writer_); }
  FifoLog(const FifoLog&) = delete;
  FifoLog& operator=(const FifoLog&) = delete;
  const std::string& path() const { return path_; }
  void Write(const std::string& record) {
    ASSERT_TRUE(xpu::testing::WaitFor([&] {
      int left = -1;
      return ioctl(writer_, FIONREAD, &left) == 0 && left == 0;
    }));
    ASSERT_EQ(write(writer_, record.data(), record.size()), static_cast<ssize_t>(record.size()));
  }

 private:
  xpu::testing::TempDir dir_;
  const std::string path_ = dir_.File("kmsg");
  int writer_ = -1;
};

// /dev/kmsg holds one boot: the kernel stamps a record before it numbers it,
// so a printk preempted between the two (a vCPU stolen, a soft lockup) is
// stamped seconds before the record numbered ahead of it. That is no new
// boot: an Xid 79 (a state, kept until a reboot) stays. Read here through
// /dev/kmsg's kind of source (a FIFO: one record a read, as the records are
// written one at a time).
TEST_F(KmsgSamplerTest, ARecordStampedBeforeTheOneAheadOfItOnTheRingIsNoNewBoot) {
  FifoLog log;
  KmsgSampler::Options o;
  o.path = log.path();
  o.interval = std::chrono::milliseconds(50);
  KmsgSampler s(o, KmsgCatalog::Builtin(), FaultCatalog::Builtin(), &registry_, &metrics_);
  s.Start();
  auto write_record = [&](const std::string& r) { log.Write(r); };
  auto codes = [&] {
    std::vector<std::string> out;
    for (const store::DeviceView& v : xpu::testing::ViewOf(registry_, "kmsg"))
      if (v.minor == 0)
        for (const auto& f : v.faults) out.push_back(f.code);
    return out;
  };
  const std::vector<std::string> fell_off{"0x10DE004F"};
  write_record("3,10,5000000,-;NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.\n");
  ASSERT_TRUE(xpu::testing::WaitFor([&] { return codes() == fell_off; }))
      << ::testing::PrintToString(codes());
  write_record("6,11,2000000,-;usb 1-1: new high-speed USB device number 2\n");
  write_record("6,12,5100000,-;usb 1-1: new high-speed USB device number 3\n");
  EXPECT_FALSE(
      xpu::testing::WaitFor([&] { return codes() != fell_off; }, std::chrono::milliseconds(500)))
      << "the Xid 79 was cleared: " << ::testing::PrintToString(codes());
  s.Stop();
}

// A forwarder feeding a FIFO writes what it has, several records in one
// write (a dictionary line among them) and a record split over two writes:
// every record is read, as from /dev/kmsg, one at a time. Before, a FIFO was
// read as /dev/kmsg (one record a read): the records of one write were
// taken for one record, refused as malformed, and the Xid in them was lost.
TEST_F(KmsgSamplerTest, AFifoFedSeveralRecordsAtOnceReadsEachOfThem) {
  FifoLog log;
  KmsgSampler::Options o;
  o.path = log.path();
  o.interval = std::chrono::milliseconds(50);
  KmsgSampler s(o, KmsgCatalog::Builtin(), FaultCatalog::Builtin(), &registry_, &metrics_);
  s.Start();
  auto codes = [&](int32_t minor) {
    std::vector<std::string> out;
    for (const store::DeviceView& v : xpu::testing::ViewOf(registry_, "kmsg"))
      if (v.minor == minor)
        for (const auto& f : v.faults) out.push_back(f.code);
    return out;
  };
  log.Write(
      "6,0,1000000,-;usb 1-1: new high-speed USB device number 2\n"
      "3,1,1000100,-;NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.\n"
      " SUBSYSTEM=pci\n"
      " DEVICE=+pci:0000:3b:00.0\n"
      "3,2,1000200,-;NVRM: Xid (PCI:0000:03:00): 79, pid=2, GPU has fallen off the bus.\n"
      "6,3,1000300,-;usb 1-1: new high-spe");
  log.Write("ed USB device number 3\n");
  ASSERT_TRUE(xpu::testing::WaitFor([&] {
    return codes(0) == std::vector<std::string>{"0x10DE004F"} &&
           codes(1) == std::vector<std::string>{"0x10DE004F"};
  })) << ::testing::PrintToString(codes(0))
      << " " << ::testing::PrintToString(codes(1));
  EXPECT_EQ(Metric("xpu_kmsg_malformed_records_total"), 0);
  EXPECT_EQ(Metric("xpu_kmsg_lost_records_total"), 0) << "every number read";
  // A line longer than any record, written in parts: dropped alone, and said
  // once; the record after it is read whole.
  log.Write(std::string(20000, 'x'));
  log.Write(std::string(20000, 'y'));
  log.Write(std::string(20000, 'z') + "\n6,4,1000400,-;usb 1-1: USB disconnect\n" +
            "3,5,1000500,-;NVRM: Xid (PCI:0000:03:00): 79, pid=3, GPU has fallen off the bus.\n");
  ASSERT_TRUE(xpu::testing::WaitFor([&] {
    return Metric("xpu_kmsg_fault_records_total", {{"pattern", "nvidia_xid"}}) == 3;
  }));
  EXPECT_EQ(Metric("xpu_kmsg_malformed_records_total"), 1);
  EXPECT_EQ(Metric("xpu_kmsg_lost_records_total"), 0);
  s.Stop();
}

// Records the ring overwrote before they were read are told by the numbers
// skipped (/dev/kmsg's, here through a FIFO: one record a read), counted,
// and for the event window after the last of them the log's silence vouches
// for no card: each card is not seen (Unknown), while a fault read after the
// gap still shows. A reopen that reads the ring again from its oldest record
// skips nothing. Before, the cards read healthy all along.
TEST_F(KmsgSamplerTest, RecordsOverwrittenUnreadMakeTheLogsSilenceVouchForNoCard) {
  FifoLog log;
  std::atomic<uint64_t> now{1'000'000'000};  // 1000 s since boot
  KmsgSampler::Options o;
  o.path = log.path();
  o.interval = std::chrono::milliseconds(50);
  KmsgSampler s(o, KmsgCatalog::Builtin(), FaultCatalog::Builtin(), &registry_, &metrics_,
                &exemplars_, [&] { return now.load(); });
  s.Start();
  auto write_record = [&](uint64_t seq, uint64_t t_us, const std::string& text) {
    log.Write("6," + std::to_string(seq) + "," + std::to_string(t_us) + ",-;" + text + "\n");
  };

  // Each inventory card as the kmsg source shows it: seen, and its codes.
  auto cards = [&] {
    std::map<int32_t, std::pair<bool, size_t>> out;
    for (const store::SourceView& v : registry_.SourceViews())
      if (v.source == "kmsg")
        for (const auto& d : v.devices) out[d.minor] = {d.seen, d.faults.size()};
    return out;
  };
  using Cards = std::map<int32_t, std::pair<bool, size_t>>;
  write_record(0, 990'000'000, "Linux version 6.1.0");
  write_record(1, 991'000'000, "usb 1-1: new high-speed USB device");
  ASSERT_TRUE(xpu::testing::WaitFor([&] {
    return cards() == Cards{{0, {true, 0}}, {1, {true, 0}}};
  })) << ::testing::PrintToString(cards());
  EXPECT_EQ(Metric("xpu_kmsg_lost_records_total"), 0);
  // Numbers 2 to 6 were overwritten before they were read.
  write_record(7, 995'000'000, "NVRM: Xid (PCI:0000:03:00): 13, pid=1, name=a, Graphics Exception");
  EXPECT_TRUE(xpu::testing::WaitFor([&] {
    return cards() == Cards{{0, {false, 0}}, {1, {false, 1}}};
  })) << ::testing::PrintToString(cards());
  EXPECT_EQ(Metric("xpu_kmsg_lost_records_total"), 5);
  // The window of the last record skipped (10 minutes) passes.
  now = 995'000'000 + 600'000'000 + 1;
  write_record(8, 1'595'000'000, "usb 1-1: USB disconnect");
  EXPECT_TRUE(xpu::testing::WaitFor([&] {
    return cards() == Cards{{0, {true, 0}}, {1, {true, 0}}};
  })) << ::testing::PrintToString(cards());
  EXPECT_EQ(Metric("xpu_kmsg_lost_records_total"), 5);
  s.Stop();
}

// An idle log is waited on up to the next publish (a wake-up or two a
// second, not five), and Stop ends the wait at once: with a minute's
// interval, on /dev/kmsg's kind of source (poll), on a record file (naps)
// and on a device that reads end of file (blind, retried each interval),
// the sampler stops long before its wait would have ended.
TEST_F(KmsgSamplerTest, StopEndsAWaitThatWouldLastAnInterval) {
  xpu::testing::TempDir dir;
  const std::string file = dir.File("kmsg");
  std::ofstream(file) << "6,1,1000,-;usb 1-1: new high-speed USB device\n";
  const std::string fifo = dir.File("fifo");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  const int writer = open(fifo.c_str(), O_RDWR | O_NONBLOCK);  // keeps the FIFO open
  ASSERT_GE(writer, 0);
  // /dev/null: read() answers 0 at once (not /dev/kmsg's behaviour): blind,
  // and the retry an interval later is the wait Stop must end.
  for (const std::string& path : {file, fifo, std::string("/dev/null")}) {
    KmsgSampler::Options o;
    o.path = path;
    o.interval = std::chrono::minutes(1);
    KmsgSampler s(o, KmsgCatalog::Builtin(), FaultCatalog::Builtin(), &registry_, &metrics_);
    s.Start();
    const store::Sight sight = path == "/dev/null" ? store::Sight::kBlind : store::Sight::kSeeing;
    ASSERT_TRUE(xpu::testing::WaitFor([&] {
      for (const store::SourceView& v : registry_.SourceViews())
        if (v.source == "kmsg") return v.sight == sight;
      return false;
    })) << path;
    const auto t0 = std::chrono::steady_clock::now();
    s.Stop();
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(30))
        << path << ": the wait was not ended by Stop";
    registry_.CloseSource("kmsg");
  }
  close(writer);
}

TEST_F(KmsgSamplerTest, EventsStayActiveForTheirWindowAndAreCountedEachTime) {
  const uint64_t window = 600'000'000;  // the built-in catalog's 10m
  Record("NVRM: Xid (PCI:0000:3b:00): 13, pid=1, name=a, Graphics Exception", now_us_ - 1000);
  Record("NVRM: Xid (PCI:0000:3b:00): 13, pid=2, name=b, Graphics Exception", now_us_ - 500);
  EXPECT_EQ(Codes(0), std::vector<std::string>{"0x10DE000D"});
  ASSERT_EQ(Device(0).events.size(), 1u);
  EXPECT_EQ(Device(0).events[0].count, 2u);  // each record counts
  EXPECT_EQ(Device(0).events[0].level_name, "restart_job");
  EXPECT_TRUE(Codes(1).empty());  // the other device: said nothing
  now_us_ += window - 1000;
  EXPECT_EQ(Codes(0).size(), 1u);  // the later record keeps it
  now_us_ += 1000;
  EXPECT_TRUE(Codes(0).empty());             // expired
  EXPECT_EQ(Device(0).events[0].count, 2u);  // the count stays
  // An old record (replayed at start) past its window raises nothing now.
  Record("NVRM: Xid (PCI:0000:3b:00): 31, pid=3, name=c, MMU Fault", now_us_ - window - 1);
  EXPECT_TRUE(Codes(0).empty());
  EXPECT_EQ(Metric("xpu_kmsg_fault_records_total", {{"pattern", "nvidia_xid"}}), 3);
}

TEST_F(KmsgSamplerTest, StatesStayUntilAHealthyRecordAndResetsClearEvents) {
  Record("amdgpu 0000:03:00.0: amdgpu: ring gfx_0.0.0 timeout, signaled seq=1, emitted seq=2",
         now_us_ - 10);
  Record("amdgpu 0000:03:00.0: amdgpu: GPU reset(1) failed", now_us_ - 5);
  EXPECT_EQ(Codes(1), (std::vector<std::string>{"0x10020001", "0x10020004"}));
  now_us_ += 3600'000'000ull;  // an hour on: the event expired, the state did not
  EXPECT_EQ(Codes(1), std::vector<std::string>{"0x10020004"});
  Record("amdgpu 0000:03:00.0: amdgpu: GPU reset(2) succeeded!", now_us_ - 1);
  EXPECT_TRUE(Codes(1).empty());
  // Xid 79 is a state: it outlives the event window.
  Record("NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.", now_us_);
  now_us_ += 3600'000'000ull;
  EXPECT_EQ(Codes(0), std::vector<std::string>{"0x10DE004F"});
}

// NVIDIA's driver tells a card off the bus twice, in the same millisecond:
// "NVRM: Xid (PCI:...): 79, ... GPU has fallen off the bus." and "NVRM: GPU
// 0000:3b:00.0: GPU has fallen off the bus.". Both patterns give 0x10DE004F:
// one event, counted once (it was counted twice). The same pattern twice is
// two records, and another pattern a second later another event.
TEST_F(KmsgSamplerTest, OneEventToldByTwoPatternsAtOnceIsCountedOnce) {
  Record("NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=x, GPU has fallen off the bus.",
         now_us_ - 3'000'000);
  Record("NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.", now_us_ - 2'999'000);
  ASSERT_EQ(Device(0).events.size(), 1u);
  EXPECT_EQ(Device(0).events[0].count, 1u);
  EXPECT_EQ(Codes(0), std::vector<std::string>{"0x10DE004F"});
  Record("NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.", now_us_ - 2'998'000);
  EXPECT_EQ(Device(0).events[0].count, 2u);
  Record("NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=x, GPU has fallen off the bus.",
         now_us_ - 1'000'000);
  EXPECT_EQ(Device(0).events[0].count, 3u);
  EXPECT_EQ(Metric("xpu_kmsg_fault_records_total", {{"pattern", "nvidia_xid"}}), 2);
  EXPECT_EQ(Metric("xpu_kmsg_fault_records_total", {{"pattern", "nvidia_fallen_off_the_bus"}}), 2);
}

TEST_F(KmsgSamplerTest, OtherDevicesUserRecordsAndUnmatchedLinesDoNotRaise) {
  Record("NVRM: Xid (PCI:0000:99:00): 79, GPU has fallen off the bus.", now_us_);  // not XDM's
  Record("NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.", now_us_, /*user=*/1);
  Record("amdgpu 0000:03:00.0: amdgpu: SMU driver if version not matched", now_us_);
  sampler_->HandleRecord("garbage without a prefix");
  EXPECT_TRUE(Codes(0).empty());
  EXPECT_TRUE(Codes(1).empty());
  EXPECT_EQ(Metric("xpu_kmsg_unmatched_records_total", {{"driver", "amdgpu"}}), 1);
  EXPECT_EQ(Metric("xpu_kmsg_malformed_records_total"), 1);
  // Only XDM's devices are in the view, each once.
  sampler_->Publish();
  EXPECT_EQ(xpu::testing::ViewOf(registry_, "kmsg").size(), 2u);
}

// A fault written after the sampler started leaves an exemplar naming the
// pod holding the device; one replayed from the ring (older) does not, as
// the pod holding it now may not be the one that held it then.
TEST_F(KmsgSamplerTest, AFreshRecordNamesThePodHoldingTheDevice) {
  store::PodAssignment p;
  p.uuid = "GPU-b";
  p.namespace_ = "ml";
  p.pod = "train-0";
  p.container = "main";
  registry_.SetPodAssignments({p});
  const store::LabelPairs series = {
      {"minor", "1"},         {"uuid", "GPU-b"},       {"bus_id", "0000:03:00.0"},
      {"code", "0x10020003"}, {"level", "reset_card"}, {"source", "kmsg"}};
  uint64_t cursor = registry_.raises().end();
  Record("amdgpu 0000:03:00.0: amdgpu: 1 uncorrectable hardware errors detected in umc block",
         now_us_ - 1);  // before the sampler started: replayed
  sampler_->Publish();
  EXPECT_FALSE(exemplars_.Find("xpu_device_fault_events_total", series).has_value());
  EXPECT_TRUE(registry_.raises().Since(&cursor).empty()) << "a replayed record is no live raise";
  Record("amdgpu 0000:03:00.0: amdgpu: 2 uncorrectable hardware errors detected in umc block",
         now_us_ + 1);
  sampler_->Publish();
  auto e = exemplars_.Find("xpu_device_fault_events_total", series);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->labels,
            (store::LabelPairs{{"namespace", "ml"}, {"pod", "train-0"}, {"container", "main"}}));
  // A fresh record is a live raise (the Node's Events), with its address.
  std::vector<store::FaultRaise> raised = registry_.raises().Since(&cursor);
  ASSERT_EQ(raised.size(), 1u);
  EXPECT_EQ(raised[0].source, "kmsg");
  EXPECT_EQ(raised[0].minor, "1");
  EXPECT_EQ(raised[0].bus_id, "0000:03:00.0");
  EXPECT_EQ(raised[0].fault.code, "0x10020003");
  EXPECT_EQ(raised[0].fault.level_name, "reset_card");
  // A fresh record of an address no layer knows as a card yet raises
  // nothing then (a NIC's AER is no card of ours); once the card is known
  // (here XDM lists it late), its raise is told, once.
  Record("NVRM: Xid (PCI:0000:5e:00): 79, pid=1, name=a, GPU has fallen off the bus.", now_us_ + 2);
  sampler_->Publish();
  EXPECT_TRUE(registry_.raises().Since(&cursor).empty());
  store::DeviceInfo late;
  late.minor = 7;
  late.uuid = "GPU-late";
  late.bus_id = "0000:5e:00.0";
  std::vector<store::DeviceInfo> devices = registry_.Devices();
  devices.push_back(late);
  registry_.SetXdmDevices(devices);
  sampler_->Publish();
  raised = registry_.raises().Since(&cursor);
  ASSERT_EQ(raised.size(), 1u) << "a raise is news when written, told once the card is known";
  EXPECT_EQ(raised[0].minor, "7");
  EXPECT_EQ(raised[0].bus_id, "0000:5e:00.0");
  EXPECT_EQ(raised[0].fault.level_name, "isolate_card");
  sampler_->Publish();
  EXPECT_TRUE(registry_.raises().Since(&cursor).empty()) << "told once";
  bool active = false;
  for (const store::DeviceView& v : xpu::testing::ViewOf(registry_, "kmsg"))
    active |= v.minor == 7 && v.faults.size() == 1;
  EXPECT_TRUE(active) << "the fault itself is on the page";
}

// A record the source hands out again (a reopened log, a rebuilt sampler
// seeded with its predecessor's state) is not counted twice; a record
// stamped in the future is taken as written now; a record whose text names
// no address is placed by its DEVICE entry.
TEST_F(KmsgSamplerTest, RecordsReadAgainAreCountedOnce) {
  const std::string xid = "3,7,999000000,-;NVRM: Xid (PCI:0000:3b:00): 13, pid=1, x\n";
  sampler_->HandleRecord(xid);
  sampler_->HandleRecord(xid);  // the same sequence number again
  ASSERT_EQ(Device(0).events.size(), 1u);
  EXPECT_EQ(Device(0).events[0].count, 1u);
  KmsgSampler next(KmsgSampler::Options{}, KmsgCatalog::Builtin(), FaultCatalog::Builtin(),
                   &registry_, &metrics_, nullptr, [this] { return now_us_; });
  next.Seed(sampler_->state());
  next.HandleRecord(xid);  // the ring, read again from its start
  next.HandleRecord("3,8,999000001,-;NVRM: Xid (PCI:0000:3b:00): 13, pid=2, y\n");
  next.Publish();
  const std::vector<store::DeviceView> seen = xpu::testing::ViewOf(registry_, "kmsg");
  auto zero = std::find_if(seen.begin(), seen.end(), [](const auto& v) { return v.minor == 0; });
  ASSERT_NE(zero, seen.end()) << "device 0 is not in the rebuilt sampler's view";
  ASSERT_EQ(zero->events.size(), 1u);
  EXPECT_EQ(zero->events[0].count, 2u);
  // From the future: active for one window from now, not from then.
  sampler_->HandleRecord("3,9,99999999999999,-;NVRM: Xid (PCI:0000:3b:00): 31, pid=3, z\n");
  now_us_ += 600'000'001;
  EXPECT_TRUE(Codes(0).empty());
  // "[drm:amdgpu_job_timedout ...]" has no address: the DEVICE entry gives it.
  sampler_->HandleRecord(
      "3,10," + std::to_string(now_us_) +
      ",-;[drm:amdgpu_job_timedout [amdgpu]] *ERROR* ring gfx timeout, signaled seq=1\n"
      " SUBSYSTEM=pci\n DEVICE=+pci:0000:03:00.0\n");
  EXPECT_EQ(Codes(1), std::vector<std::string>{"0x10020001"});
}

// Only the hardware can raise a fault: kernel lines whose text carries
// words a user chose (a file name, a process name) shaped as a driver's
// record, on the default kernel-only path (facility 0), raise nothing. The
// kernel prints each of these itself: the NULL-argv exec warning (since
// 5.18) with the caller's path, a USB device's product string and HID and
// input names (which the device chooses), an OOM-kill line with a cgroup
// path, and audit/AppArmor lines with a path: each holds a driver's whole
// line, which a pattern searching anywhere would match. And where the kernel names the device
// (dev_printk's DEVICE entry), the text must name the same one.
TEST_F(KmsgSamplerTest, KernelLinesWithUserChosenTextRaiseNothing) {
  const std::string xid = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus";
  const std::string aer =
      "nvidia 0000:3b:00.0: PCIe Bus Error: severity=Uncorrected (Fatal), type=Transaction Layer";
  const std::string reset = "amdgpu 0000:03:00.0: amdgpu: GPU reset(1) failed";
  const std::string ras =
      "amdgpu 0000:03:00.0: amdgpu: 2 uncorrectable hardware errors detected in umc block";
  std::vector<std::string> lines;
  for (const std::string& shaped : {xid, aer, reset, ras}) {
    lines.push_back("process 'f' launched '/tmp/a/" + shaped +
                    "' with NULL argv: empty string added");
    lines.push_back(
        "audit: type=1400 audit(1700000000.123:42): apparmor=\"DENIED\" "
        "operation=\"open\" profile=\"p\" name=\"/tmp/" +
        shaped + "\" pid=4242 comm=\"cat\" requested_mask=\"r\"");
    // Lines whose user-chosen part can hold the whole driver line (a
    // process's comm, 15 bytes, cannot: such a line would prove nothing).
    lines.push_back("usb 1-1: Product: " + shaped);  // a USB device names itself
    lines.push_back("hid-generic 0003:046D:C52B.0001: input,hidraw0: USB HID v1.11 Keyboard [" +
                    shaped + "] on usb-0000:00:14.0-1/input0");
    lines.push_back("input: " + shaped +
                    " as /devices/pci0000:00/0000:00:14.0/usb1/1-1/1-1:1.0/input/input5");
    lines.push_back(
        "oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,"
        "mems_allowed=0,global_oom,task_memcg=/kubepods/" +
        shaped + ",task=python3,pid=4242,uid=0");
    lines.push_back("Kernel panic - not syncing: " + shaped);  // quoted, not authored
    // A packet log (iptables -j LOG, nft log, ebtables): the kernel's own
    // record, whose text starts with a prefix of the rule writer's choice
    // (127 bytes in nft), any separator after it, then the packet.
    lines.push_back(shaped +
                    " IN=eth0 OUT= MAC=52:54:00:12:34:56:52:54:00:65:43:21:08:00 SRC=10.0.0.1 "
                    "DST=10.0.0.2 LEN=60 TOS=0x00 PREC=0x00 TTL=64 ID=1 DF PROTO=TCP SPT=1234 "
                    "DPT=80 WINDOW=64240 RES=0x00 SYN URGP=0");
    lines.push_back(shaped +
                    ",IN=br0 OUT=br0 PHYSIN=veth1 PHYSOUT=veth2 SRC=10.0.0.1 DST=10.0.0.2 LEN=60");
    lines.push_back(shaped + "IN= OUT=lo ARP HTYPE=1 PTYPE=0x0800 OPCODE=1");
    lines.push_back(shaped +
                    " IN=eth0 OUT= SRC=fe80:0000:0000:0000:0000:0000:0000:0001 "
                    "DST=ff02:0000:0000:0000:0000:0000:0000:0001 LEN=72 TC=0 HOPLIMIT=1");
    lines.push_back(shaped + " IN=br0 OUT= MAC=01:80:c2:00:00:0e:52:54:00:12:34:56:88:cc");  // LLDP
    lines.push_back(shaped +
                    " IN=br0 OUT= MACSRC=52:54:00:12:34:56 MACDST=01:80:c2:00:00:03 "
                    "MACPROTO=888e");
    lines.push_back(shaped +
                    "IN=eth0 OUT= MAC source = 52:54:00:12:34:56 MAC dest = "
                    "01:80:c2:00:00:0e proto = 0x88cc");
  }
  // Each forged line holds a driver's whole line: a pattern that searched
  // anywhere in the text would raise on every one of them.
  for (const std::string& line : lines) {
    bool holds = false;
    for (const std::string& shaped : {xid, aer, reset, ras})
      holds = holds || line.find(shaped) != std::string::npos;
    EXPECT_TRUE(holds) << line;
  }
  uint64_t t = now_us_ - 1000;
  for (const std::string& line : lines) Record(line, ++t);
  // The driver's words, but the kernel attached another device to them.
  sampler_->HandleRecord("3,900," + std::to_string(++t) + ",-;" + reset +
                         "\n SUBSYSTEM=pci\n DEVICE=+pci:0000:3b:00.0\n");
  sampler_->HandleRecord("3,901," + std::to_string(++t) + ",-;" + aer +
                         "\n SUBSYSTEM=pci\n DEVICE=+pci:0000:03:00.0\n");
  EXPECT_TRUE(Codes(0).empty()) << Codes(0).front();
  EXPECT_TRUE(Codes(1).empty()) << Codes(1).front();
  EXPECT_LE(Metric("xpu_kmsg_fault_records_total", {{"pattern", "nvidia_xid"}}), 0);  // -1: none
  // The same words as the driver's own record raise at once: the test sees
  // a raise when there is one.
  seq_ = 1000;
  Record(xid, ++t);
  Record(reset, ++t);
  EXPECT_EQ(Codes(0), std::vector<std::string>{"0x10DE004F"});
  EXPECT_EQ(Codes(1), std::vector<std::string>{"0x10020004"});
  // A process that names itself like a packet log's fields (15 bytes, the
  // most a name holds) does not hide the driver's record that names it.
  const double counted = Metric("xpu_kmsg_fault_records_total", {{"pattern", "nvidia_xid"}});
  int n = 0;
  for (const char* name : {"IN= OUT=", "IN= OUT= MAC=", "IN= OUT= HTYPE="}) {
    Record("NVRM: Xid (PCI:0000:3b:00): 13, pid=7, name=" + std::string(name) +
               ", Graphics SM Warp Exception on (GPC 0, TPC 1, SM 0): Out Of Range Address",
           ++t);
    EXPECT_EQ(Codes(0), (std::vector<std::string>{"0x10DE000D", "0x10DE004F"})) << name;
    EXPECT_EQ(Metric("xpu_kmsg_fault_records_total", {{"pattern", "nvidia_xid"}}), counted + ++n)
        << name;
  }
}

// effect: reset clears the event-like codes of its device, not its states.
// An address the log names stands for the card it belongs to: another
// function of the card's device (AER tells the function that saw the
// error), or the port above the card's link (with DPC the port reports its
// link's fatal errors: "pcieport 0000:00:01.0: ..."), where one card is
// there. A port above two cards, and a function of no card, name none.
TEST_F(KmsgSamplerTest, AnotherFunctionOrThePortOfACardsLinkStandsForTheCard) {
  store::PciDeviceView a, b, c;
  a.bus_id = "0000:3b:00.0";
  a.port = "0000:3a:00.0";
  b.bus_id = "0000:03:00.0";
  b.port = "0000:00:01.0";
  c.bus_id = "0000:04:00.0";  // a third card, beside minor 1 under one switch port
  c.port = "0000:02:00.0";
  store::DeviceInfo x;
  x.minor = 2;
  x.bus_id = "0000:04:00.0";
  store::PciDeviceView d = c;
  d.bus_id = "0000:05:00.0";  // a fourth, under the same port as the third
  registry_.SetXdmDevices({registry_.Devices()[0], registry_.Devices()[1], x});
  registry_.SetPciDevices({b, c, a, d});
  const std::string fatal =
      ": PCIe Bus Error: severity=Uncorrected (Fatal), type=Transaction Layer";
  uint64_t t = now_us_ - 1000;
  Record("pcieport 0000:00:01.0" + fatal + ", (Receiver ID)", ++t);    // minor 1's port
  Record("nvidia 0000:3b:00.1" + fatal + ", (Requester ID)", ++t);     // minor 0, function 1
  Record("nvidia 0000:3b:00.1" + fatal + ", (Requester ID)", ++t);     // again: counted twice
  Record("pcieport 0000:02:00.0" + fatal + ", (Receiver ID)", ++t);    // above two cards
  Record("mlx5_core 0000:40:00.1" + fatal + ", (Requester ID)", ++t);  // no card's
  EXPECT_EQ(Codes(1), std::vector<std::string>{"0xFD000001"});
  EXPECT_EQ(Codes(0), std::vector<std::string>{"0xFD000001"});
  EXPECT_TRUE(Codes(2).empty()) << Codes(2).front();
  uint64_t events = 0;
  for (const auto& e : Device(0).events) events += e.count;
  EXPECT_EQ(events, 2u);
}

// A fault record whose pattern matched but that names no device (a DRM
// error printed without its device, no DEVICE entry) was dropped, uncounted:
// the cards read healthy through it. Now it is counted; on the one card of
// its driver (the bus tells each card's driver) it is that card's fault;
// where the driver holds several cards, or no card's driver is known, the
// log's silence vouches for none of them while it is active (each not
// seen), and its window ends that.
TEST_F(KmsgSamplerTest, AFaultThatNamesNoDeviceIsPlacedOnItsDriversOneCardOrVouchesForNone) {
  const std::string timeout =
      "[drm:amdgpu_job_timedout [amdgpu]] *ERROR* ring gfx_0.0.0 timeout, signaled seq=1, "
      "emitted seq=2";
  auto seen = [&](int32_t minor) { return Device(minor).seen; };
  // The fault's window passes: both cards vouched for, no fault on either.
  auto window_passes = [&] {
    now_us_ += 600'000'001;
    EXPECT_TRUE(seen(0));
    EXPECT_TRUE(seen(1));
    EXPECT_TRUE(Codes(0).empty());
    EXPECT_TRUE(Codes(1).empty());
  };
  EXPECT_TRUE(seen(0));
  EXPECT_TRUE(seen(1));
  Record(timeout, now_us_ - 1000);
  EXPECT_EQ(Metric("xpu_kmsg_records_without_address_total", {{"driver", "amdgpu"}}), 1);
  // No card's driver known (no pci source): neither card is vouched for.
  EXPECT_FALSE(seen(0));
  EXPECT_FALSE(seen(1));
  EXPECT_TRUE(Codes(0).empty());
  EXPECT_TRUE(Codes(1).empty());
  // The bus tells: minor 1 is the one amdgpu card, minor 0 NVIDIA's.
  store::PciDeviceView nv, amd;
  nv.bus_id = "0000:3b:00.0";
  nv.vendor = "0x10de";
  nv.driver = "nvidia";
  amd.bus_id = "0000:03:00.0";
  amd.vendor = "0x1002";
  amd.driver = "amdgpu";
  registry_.SetPciDevices({nv, amd});
  EXPECT_EQ(Codes(1), std::vector<std::string>{"0x10020001"});
  EXPECT_TRUE(seen(1));
  EXPECT_TRUE(Codes(0).empty());
  EXPECT_TRUE(seen(0));
  // Its window passes: the fault goes.
  now_us_ += 600'000'000;
  EXPECT_TRUE(Codes(1).empty());
  EXPECT_TRUE(seen(1));
  // Two amdgpu cards: which one is not known; the NVIDIA card is vouched for.
  nv.driver = "amdgpu";
  registry_.SetPciDevices({nv, amd});
  Record(timeout, now_us_ - 1000);
  EXPECT_EQ(Metric("xpu_kmsg_records_without_address_total", {{"driver", "amdgpu"}}), 2);
  EXPECT_FALSE(seen(0));
  EXPECT_FALSE(seen(1));
  EXPECT_TRUE(Codes(0).empty());
  EXPECT_TRUE(Codes(1).empty());
  // Written while both were amdgpu's: which one is still not known, however
  // the driver's cards change since (the one unbound or rebound may be the
  // card that timed out). Before, it was placed on whichever card was the
  // driver's one card at each publish.
  amd.driver = "nvidia";
  registry_.SetPciDevices({nv, amd});
  EXPECT_FALSE(seen(0));
  EXPECT_FALSE(seen(1)) << "an amdgpu card when the record was written";
  EXPECT_TRUE(Codes(0).empty()) << "not placed on the one amdgpu card now";
  nv.driver = "";
  registry_.SetPciDevices({nv, amd});
  EXPECT_FALSE(seen(0));
  EXPECT_FALSE(seen(1));
  window_passes();
  // No card bound to amdgpu when written (its card unbound after a failed
  // reset): the cards without a driver are not vouched for; with none, no
  // card is.
  Record(timeout, now_us_ - 1000);
  EXPECT_FALSE(seen(0));
  EXPECT_TRUE(seen(1));
  EXPECT_TRUE(Codes(0).empty());
  nv.driver = "vfio-pci";
  registry_.SetPciDevices({nv, amd});
  EXPECT_FALSE(seen(0));
  EXPECT_FALSE(seen(1));
  window_passes();
  // A newer boot clears it, as the reboot did.
  Record(timeout, now_us_ - 1000);
  EXPECT_FALSE(seen(0));
  Record("Linux version 6.1.0", 1'000);  // numbered after it, stamped at the boot's start
  EXPECT_TRUE(seen(0));
  EXPECT_TRUE(seen(1));
}

// The job timeout that names no device is usually followed by that card's
// reset, which does name it ("amdgpu 0000:03:00.0: GPU reset(1) succeeded"):
// where the timeout was placed on the driver's one card, the card's healthy
// record after it clears it, as it clears the card's own faults; a timeout
// written after the reset stays. It used to stay for its whole window. Where
// the driver holds several cards, a reset of one does not say which card
// timed out: none is vouched for until the window passes.
TEST_F(KmsgSamplerTest, AResetOfTheOneCardAFaultWasPlacedOnClearsIt) {
  const std::string timeout =
      "[drm:amdgpu_job_timedout [amdgpu]] *ERROR* ring gfx_0.0.0 timeout, signaled seq=1, "
      "emitted seq=2";
  store::PciDeviceView nv, amd;
  nv.bus_id = "0000:3b:00.0";
  nv.vendor = "0x10de";
  nv.driver = "nvidia";
  amd.bus_id = "0000:03:00.0";
  amd.vendor = "0x1002";
  amd.driver = "amdgpu";
  registry_.SetPciDevices({nv, amd});
  Record(timeout, now_us_ - 3000);
  ASSERT_EQ(Codes(1), std::vector<std::string>{"0x10020001"});
  Record("amdgpu 0000:03:00.0: amdgpu: GPU reset(1) succeeded!", now_us_ - 2000);
  EXPECT_TRUE(Codes(1).empty());
  EXPECT_TRUE(Device(1).seen);
  // A timeout after the reset is a fault again.
  Record(timeout, now_us_ - 1000);
  EXPECT_EQ(Codes(1), std::vector<std::string>{"0x10020001"});
  // A second amdgpu card since: the timeout was the one card's when it was
  // written, and that card's reset clears it; the new card was never named.
  nv.driver = "amdgpu";
  registry_.SetPciDevices({nv, amd});
  EXPECT_EQ(Codes(1), std::vector<std::string>{"0x10020001"});
  EXPECT_TRUE(Device(0).seen);
  Record("amdgpu 0000:03:00.0: amdgpu: GPU reset(2) succeeded!", now_us_ - 800);
  EXPECT_TRUE(Codes(1).empty());
  EXPECT_TRUE(Device(0).seen);
  EXPECT_TRUE(Device(1).seen);
  // A timeout written while both are amdgpu's: a reset of one does not say
  // which card timed out; neither is vouched for.
  Record(timeout, now_us_ - 600);
  Record("amdgpu 0000:03:00.0: amdgpu: GPU reset(3) succeeded!", now_us_ - 500);
  EXPECT_FALSE(Device(0).seen);
  EXPECT_FALSE(Device(1).seen);
}

TEST(KmsgCatalogResetTest, AResetClearsEventsButNotStates) {
  std::shared_ptr<const KmsgCatalog> cat;
  ASSERT_TRUE(KmsgCatalog::Parse(R"(states: ["0x2"]
patterns:
  - {name: ev, driver: d, regex: '^ev (?P<address>\S+)', code: "0x1"}
  - {name: st, driver: d, regex: '^st (?P<address>\S+)', code: "0x2"}
  - {name: rs, driver: d, regex: '^rs (?P<address>\S+)', effect: reset}
)",
                                 "t.yml", &cat)
                  .ok());
  store::DeviceRegistry registry;
  store::DeviceInfo a;
  a.minor = 0;
  a.uuid = "U0";
  a.bus_id = "0000:01:00.0";
  registry.SetXdmDevices({a});
  prometheus::Registry metrics;
  uint64_t now = 1'000'000'000;
  KmsgSampler s(KmsgSampler::Options{}, cat, FaultCatalog::Builtin(), &registry, &metrics, nullptr,
                [&] { return now; });
  s.HandleRecord("3,1,999999000,-;ev 0000:01:00.0\n");
  s.HandleRecord("3,2,999999001,-;st 0000:01:00.0\n");
  s.HandleRecord("3,3,999999002,-;rs 0000:01:00.0\n");
  s.Publish();
  std::vector<std::string> codes;
  const std::vector<store::DeviceView> view = xpu::testing::ViewOf(registry, "kmsg");
  ASSERT_EQ(view.size(), 1u);
  for (const auto& f : view[0].faults) codes.push_back(f.code);
  EXPECT_EQ(codes, std::vector<std::string>{"0x00000002"});
}

TEST_F(KmsgSamplerTest, StateIsBounded) {
  // Codes per device: one more distinct Xid than fits is dropped and counted.
  const std::string dev = "NVRM: Xid (PCI:0000:ff:1f): ";
  for (int xid = 1; xid <= static_cast<int>(kMaxKmsgCodesPerDevice) + 1; ++xid)
    Record(dev + std::to_string(xid) + ", x", now_us_);
  EXPECT_EQ(Metric("xpu_kmsg_dropped_total"), 1);
  Record(dev + "1, again", now_us_);  // a code it holds still counts
  EXPECT_EQ(Metric("xpu_kmsg_dropped_total"), 1);
  // Devices: that one and as many more as fit; the rest are dropped.
  for (size_t i = 0; i < kMaxKmsgDevices + 10; ++i) {
    char addr[32];
    std::snprintf(addr, sizeof addr, "%04zx:%02zx:00", i / 256, i % 256);
    Record(std::string("NVRM: Xid (PCI:") + addr + "): 79, gone", now_us_);
  }
  EXPECT_EQ(Metric("xpu_kmsg_dropped_total"), 1 + 11);
}

// Records of as many other addresses as the log holds (AER from many
// virtual functions, say), their events past their window: no longer held
// once published, so a card's fault after them still raises. Before, an
// address was held for good once written, and past the bound a GPU's Xid
// was dropped while the log still vouched for the card.
TEST_F(KmsgSamplerTest, AddressesWithNothingActiveLeaveRoomForACardsFault) {
  for (size_t i = 0; i < kMaxKmsgDevices; ++i) {
    char addr[32];
    std::snprintf(addr, sizeof addr, "%04zx:%02zx:00", 0x100 + i / 256, i % 256);
    Record(std::string("NVRM: Xid (PCI:") + addr + "): 13, pid=1, Graphics Exception",
           now_us_ - 700'000'000);  // 11 minutes ago: out of its window
  }
  EXPECT_TRUE(Codes(0).empty());  // published: the expired are let go
  Record("NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus", now_us_);
  EXPECT_EQ(Codes(0), std::vector<std::string>{"0x10DE004F"});
  EXPECT_EQ(Metric("xpu_kmsg_dropped_total"), 0);
}

// The record file: records appended while the sampler follows it, a
// dictionary line, and a record split across two writes.
TEST(KmsgFileTest, FollowsAFileOfRecords) {
  xpu::testing::TempDir dir;
  const std::string path = dir.File("kmsg");
  std::ofstream(path) << "3,1,10,-;first\n SUBSYSTEM=pci\n DEVICE=+pci:0000:03:00.0\n";
  std::unique_ptr<KmsgSource> src;
  ASSERT_TRUE(OpenKmsgFile(path, &src).ok());
  std::string rec;
  ASSERT_TRUE(src->Next(&rec, std::chrono::milliseconds(500)).ok());
  EXPECT_EQ(rec, "3,1,10,-;first\n SUBSYSTEM=pci\n DEVICE=+pci:0000:03:00.0\n");
  EXPECT_EQ(src->Next(&rec, std::chrono::milliseconds(50)).code(), Status::Code::kUnavailable);
  {
    std::ofstream out(path, std::ios::app);
    out << "3,2,20,-;sec" << std::flush;
    out << "ond\n4,3,30,-;third\n";
  }
  ASSERT_TRUE(src->Next(&rec, std::chrono::milliseconds(500)).ok());
  EXPECT_EQ(rec, "3,2,20,-;second\n");
  ASSERT_TRUE(src->Next(&rec, std::chrono::milliseconds(500)).ok());
  EXPECT_EQ(rec, "4,3,30,-;third\n");
  EXPECT_EQ(OpenKmsgFile(dir.File("absent"), &src).code(), Status::Code::kIoError);
}

// A line longer than any record (40 KiB) is dropped alone, and said
// (InvalidArgument: the sampler counts it malformed); the records after it,
// in the same write or in the next ones, are read. It used to take up to
// 16 KiB of good records after it with it, uncounted.
TEST(KmsgFileTest, ALineLongerThanAnyRecordIsDroppedAloneAndSaid) {
  xpu::testing::TempDir dir;
  const std::string path = dir.File("kmsg");
  const std::string xid = "3,3,30,-;NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.\n";
  std::ofstream(path) << "3,1,10,-;first\n"
                      << "3,2,20,-;" << std::string(40 * 1024, 'x') << "\n"
                      << xid;
  std::unique_ptr<KmsgSource> src;
  ASSERT_TRUE(OpenKmsgFile(path, &src).ok());
  std::string rec;
  std::vector<std::string> got;
  int said = 0;
  for (int i = 0; i < 10; ++i) {
    Status s = src->Next(&rec, std::chrono::milliseconds(50));
    if (s.ok()) got.push_back(rec);
    if (s.code() == Status::Code::kInvalidArgument) ++said;
    if (s.code() == Status::Code::kUnavailable) break;
  }
  EXPECT_EQ(got, (std::vector<std::string>{"3,1,10,-;first\n", xid}));
  EXPECT_EQ(said, 1);
  // A long line written in pieces: its rest, when it comes, is dropped too
  // (not read as a record of its own), and the record after it is read.
  {
    std::ofstream out(path, std::ios::app);
    out << "3,4,40,-;" << std::string(40 * 1024, 'y') << std::flush;
    out << std::string(40 * 1024, 'z') << "\n4,5,50,-;after\n";
  }
  got.clear();
  said = 0;
  for (int i = 0; i < 20; ++i) {
    Status s = src->Next(&rec, std::chrono::milliseconds(100));
    if (s.ok()) got.push_back(rec);
    if (s.code() == Status::Code::kInvalidArgument) ++said;
    if (s.code() == Status::Code::kUnavailable && !got.empty()) break;
  }
  EXPECT_EQ(got, (std::vector<std::string>{"4,5,50,-;after\n"}));
  EXPECT_EQ(said, 1);
}

// Followed as tail -F follows a file: a forwarder that replaces the file
// (a new inode at the path) or truncates it is read from the new start,
// as a new generation (its sequence numbers may start again).
TEST(KmsgFileTest, FollowsAFileAcrossReplacementAndTruncation) {
  xpu::testing::TempDir dir;
  const std::string path = dir.File("kmsg");
  std::ofstream(path) << "3,1,10,-;one\n3,2,20,-;two\n";
  std::unique_ptr<KmsgSource> src;
  ASSERT_TRUE(OpenKmsgFile(path, &src).ok());
  std::string rec;
  ASSERT_TRUE(src->Next(&rec, std::chrono::milliseconds(500)).ok());
  ASSERT_TRUE(src->Next(&rec, std::chrono::milliseconds(500)).ok());
  EXPECT_EQ(rec, "3,2,20,-;two\n");
  EXPECT_EQ(src->Next(&rec, std::chrono::milliseconds(50)).code(), Status::Code::kUnavailable);
  const uint64_t first = src->generation();
  // Replaced: written beside it and renamed over it, as logrotate does.
  std::ofstream(dir.File("kmsg.new")) << "3,1,30,-;new one\n";
  std::filesystem::rename(dir.File("kmsg.new"), path);
  ASSERT_TRUE(src->Next(&rec, std::chrono::milliseconds(500)).ok());
  EXPECT_EQ(rec, "3,1,30,-;new one\n");
  EXPECT_NE(src->generation(), first);
  const uint64_t second = src->generation();
  // Truncated in place (copytruncate), then written again.
  std::ofstream(path, std::ios::trunc) << "3,1,40,-;after\n";
  ASSERT_TRUE(src->Next(&rec, std::chrono::milliseconds(500)).ok());
  EXPECT_EQ(rec, "3,1,40,-;after\n");
  EXPECT_NE(src->generation(), second);
  // Gone: nothing, and no error (the forwarder may put it back).
  std::filesystem::remove(path);
  EXPECT_EQ(src->Next(&rec, std::chrono::milliseconds(50)).code(), Status::Code::kUnavailable);
  std::ofstream(path) << "3,1,50,-;back\n";
  ASSERT_TRUE(src->Next(&rec, std::chrono::milliseconds(500)).ok());
  EXPECT_EQ(rec, "3,1,50,-;back\n");
}

// A FIFO put at a record file's path (a forwarder switched to one) with no
// writer yet: not followed as the file's next generation (the source says
// the path is no file now, and the sampler opens it anew as a FIFO), and
// the source does not block in opening it (a sampler's Stop, and so a
// reload, would wait for a writer for ever). Before, the open blocked.
TEST(KmsgFileTest, AFifoPutAtTheFilesPathIsNotOpenedAsItsNextGeneration) {
  xpu::testing::TempDir dir;
  const std::string path = dir.File("kmsg");
  std::ofstream(path) << "3,1,10,-;one\n";
  std::unique_ptr<KmsgSource> src;
  ASSERT_TRUE(OpenKmsgFile(path, &src).ok());
  std::string rec;
  ASSERT_TRUE(src->Next(&rec, std::chrono::milliseconds(500)).ok());
  ASSERT_EQ(mkfifo(dir.File("fifo").c_str(), 0600), 0);
  std::filesystem::rename(dir.File("fifo"), path);
  auto next = std::async(std::launch::async,
                         [&] { return src->Next(&rec, std::chrono::milliseconds(200)).code(); });
  if (next.wait_for(std::chrono::seconds(5)) != std::future_status::ready) {
    ADD_FAILURE() << "blocked opening the FIFO";
    const int w = open(path.c_str(), O_WRONLY | O_NONBLOCK);  // lets it go
    next.wait();
    close(w);
    return;
  }
  EXPECT_EQ(next.get(), Status::Code::kIoError);
}

// Rewritten in place to the same length or longer (a forwarder that
// truncates its file and writes it afresh, read between its writes or
// not): the read offset no longer falls on a record; the file is read again
// from its start, as a new generation.
TEST(KmsgFileTest, FollowsAFileRewrittenInPlace) {
  xpu::testing::TempDir dir;
  const std::string path = dir.File("kmsg");
  std::ofstream(path) << "3,1,10,-;one\n";
  std::unique_ptr<KmsgSource> src;
  ASSERT_TRUE(OpenKmsgFile(path, &src).ok());
  std::string rec;
  ASSERT_TRUE(src->Next(&rec, std::chrono::milliseconds(500)).ok());
  EXPECT_EQ(src->Next(&rec, std::chrono::milliseconds(50)).code(), Status::Code::kUnavailable);
  const uint64_t first = src->generation();
  std::ofstream(path, std::ios::trunc) << "3,2,10,-;two\n";  // the same length
  ASSERT_TRUE(src->Next(&rec, std::chrono::milliseconds(500)).ok());
  EXPECT_EQ(rec, "3,2,10,-;two\n");
  EXPECT_NE(src->generation(), first);
  EXPECT_EQ(src->Next(&rec, std::chrono::milliseconds(50)).code(), Status::Code::kUnavailable);
  std::ofstream(path, std::ios::trunc) << "3,9000,20,-;a longer record than the one read\n";
  ASSERT_TRUE(src->Next(&rec, std::chrono::milliseconds(500)).ok());
  EXPECT_EQ(rec, "3,9000,20,-;a longer record than the one read\n");
  // Appended to: read on, not from the start.
  std::ofstream(path, std::ios::app) << "3,9001,30,-;next\n";
  ASSERT_TRUE(src->Next(&rec, std::chrono::milliseconds(500)).ok());
  EXPECT_EQ(rec, "3,9001,30,-;next\n");
}

// One boot's numbers name one record each; a reboot starts numbers and
// stamps again.
TEST(KmsgBootMemoryTest, TellsARecordReadAlreadyFromANewOneAndFromANewBoot) {
  using V = KmsgBootMemory::Verdict;
  KmsgBootMemory m;
  EXPECT_EQ(m.Note(10, 5'000'000, "a"), V::kNew);
  EXPECT_EQ(m.Note(11, 6'000'000, "b"), V::kNew);
  EXPECT_EQ(m.Note(13, 6'000'000, "d"), V::kNew);
  m.StartPass();  // read again from a start
  EXPECT_EQ(m.Note(10, 5'000'000, "a"), V::kReadAlready);
  EXPECT_EQ(m.Note(11, 6'000'000, "b"), V::kReadAlready);
  EXPECT_EQ(m.Note(12, 6'000'000, "c"), V::kNew);  // one left out before
  EXPECT_EQ(m.Note(13, 6'000'000, "d"), V::kReadAlready);
  EXPECT_EQ(m.Note(14, 5'999'000, "e"), V::kNew);  // two CPUs, stamped out of order
  m.StartPass();
  EXPECT_EQ(m.Note(11, 6'000'000, "B"), V::kNewBoot);  // the number, another record
  EXPECT_EQ(m.size(), 1U);
  EXPECT_EQ(m.Note(12, 6'000'100, "c2"), V::kNew);
  m.StartPass();
  EXPECT_EQ(m.Note(3, 100, "early"), V::kNewBoot);  // before the boot's first: started again
  EXPECT_EQ(m.Note(900, 50, "x"), V::kNew);
  EXPECT_EQ(m.Note(901, 400'000'000, "y"), V::kNew);
  EXPECT_EQ(m.Note(902, 1'000, "z"), V::kNewBoot);  // a later number stamped well before
  // In one pass a number going back is a newer boot, whatever it matches
  // (the same kernel booted again writes the same first records).
  EXPECT_EQ(m.Note(903, 2'000, "w"), V::kNew);
  EXPECT_EQ(m.Note(902, 1'000, "z"), V::kNewBoot);
  // Bounded: the oldest are forgotten; one of those read again is this
  // boot's if its stamp fits, a new boot's if it does not.
  KmsgBootMemory big;
  for (uint64_t i = 1; i <= kKmsgRememberedRecords + 100; ++i)
    ASSERT_EQ(big.Note(i, i * 1000, "r" + std::to_string(i)), V::kNew);
  EXPECT_EQ(big.size(), kKmsgRememberedRecords);
  big.StartPass();
  EXPECT_EQ(big.Note(1, 1000, "r1"), V::kReadAlready);  // the first is never forgotten
  EXPECT_EQ(big.Note(50, 50 * 1000, "r50"), V::kReadAlready);
  big.StartPass();
  EXPECT_EQ(big.Note(60, 9'000'000'000, "r60"),
            V::kNewBoot);  // forgotten, and its stamp does not fit
  big.StartPass();
  EXPECT_EQ(big.Note(60, 9'000'000'000, "r60"), V::kReadAlready);
  big.StartPass();
  EXPECT_EQ(big.Note(60, 9'000'000'000, "another r60"), V::kNewBoot);
}

// A record file (a forwarder's copy of /dev/kmsg) keeps the kernel's order
// of numbers, and with it the stamps of a printk preempted between its stamp
// and its number (a stolen vCPU, a soft lockup: seconds before the record
// numbered ahead of it). That is no new boot: an Xid 79 read before stays.
// Before, a later number stamped more than a second before the last was
// taken for a newer boot, and the state (and the kept states' file) cleared.
TEST(KmsgBootMemoryTest, ALaterNumberStampedSecondsBeforeIsNoNewBoot) {
  using V = KmsgBootMemory::Verdict;
  KmsgBootMemory m;
  EXPECT_EQ(m.Note(10, 5'000'000, "xid 79"), V::kNew);
  EXPECT_EQ(m.Note(11, 2'000'000, "preempted"), V::kNew);
  EXPECT_EQ(m.Note(12, 5'100'000, "next"), V::kNew);
  EXPECT_EQ(m.Note(13, 5'200'000'000, "an hour on"), V::kNew);
  EXPECT_EQ(m.Note(14, 3'000'000, "a newer boot's"), V::kNewBoot);  // stamped an hour before
}

TEST_F(KmsgSamplerTest, ARecordFilesPreemptedStampKeepsTheStateReadBefore) {
  sampler_->HandleRecord(
      "3,10,5000000,-;NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.\n");
  sampler_->HandleRecord("6,11,2000000,-;usb 1-1: new high-speed USB device number 2\n");
  EXPECT_EQ(Codes(0), std::vector<std::string>{"0x10DE004F"});
}

// A forwarder's file keeps the previous boot's records: its Xid 79 raises
// no state and no event after the reboot that was its remedy, whether its
// stamps run past this boot's clock or not; the new boot's records all
// raise, their numbers below the old boot's included.
TEST_F(KmsgSamplerTest, ARecordFileSpanningARebootRaisesOnlyTheNewBoot) {
  const auto at = [this](uint64_t seq, uint64_t t_us, const std::string& text) {
    sampler_->HandleRecord("3," + std::to_string(seq) + "," + std::to_string(t_us) + ",-;" + text +
                           "\n");
  };
  const std::string xid79_a = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus";
  const std::string xid79_b = "NVRM: Xid (PCI:0000:03:00): 79, pid=1, GPU has fallen off the bus";
  // An old boot that ran longer than this one has: stamped past its clock.
  at(1, 1'000'000, "Linux version 6.1 (old)");
  at(500, 5'000'000'000, xid79_a);
  EXPECT_TRUE(Codes(0).empty());
  EXPECT_TRUE(Device(0).events.empty());
  EXPECT_EQ(Metric("xpu_kmsg_other_boot_records_total"), 1);
  // An old boot shorter than this one: only the new boot's records tell.
  at(2, 2'000'000, "usb 1-1: new device");
  at(300, 400'000'000, xid79_a);
  at(1, 1'000'000, "Linux version 6.1 (new)");  // the same number, another record
  at(2, 3'000'000, "usb 1-1: new device");
  at(40, 9'000'000, xid79_b);
  EXPECT_TRUE(Codes(0).empty()) << "the old boot's Xid 79 is gone with it";
  EXPECT_TRUE(Device(0).events.empty());
  EXPECT_EQ(Codes(1), std::vector<std::string>{"0x10DE004F"});
  EXPECT_EQ(Device(1).events.at(0).count, 1U);
  // The file read again from its start (rewritten): nothing counted twice.
  sampler_->StartPass();
  at(1, 1'000'000, "Linux version 6.1 (new)");
  at(2, 3'000'000, "usb 1-1: new device");
  at(40, 9'000'000, xid79_b);
  EXPECT_EQ(Codes(1), std::vector<std::string>{"0x10DE004F"});
  EXPECT_EQ(Device(1).events.at(0).count, 1U);
}

// The same kernel booted twice: the new boot's first records are the old
// one's, number, stamp and text; the old boot ran long (more records than
// are remembered). Read in one pass, the new boot's numbers going back
// tell it: the old Xid 79 is gone, the new boot's Xid raises.
TEST_F(KmsgSamplerTest, ANewBootOfTheSameKernelIsToldByItsNumbersGoingBack) {
  const auto at = [this](uint64_t seq, uint64_t t_us, const std::string& text) {
    sampler_->HandleRecord("6," + std::to_string(seq) + "," + std::to_string(t_us) + ",-;" + text +
                           "\n");
  };
  at(0, 0, "Linux version 6.1.0-13-amd64");
  for (uint64_t i = 1; i < 6000; ++i) at(i, i * 100'000, "usb 1-1: event " + std::to_string(i));
  at(6000, 800'000'000, "NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus");
  EXPECT_EQ(Codes(0), std::vector<std::string>{"0x10DE004F"});
  at(0, 0, "Linux version 6.1.0-13-amd64");  // the new boot, as the old began
  at(1, 100'000, "usb 1-1: event 1");
  at(2, 2'000'000, "NVRM: Xid (PCI:0000:03:00): 79, pid=1, GPU has fallen off the bus");
  EXPECT_TRUE(Codes(0).empty());
  EXPECT_EQ(Codes(1), std::vector<std::string>{"0x10DE004F"});
}

// A forwarder that rewrites its file in place, on a running sampler: one
// record replaced by one fresh Xid 79 (numbered 2, then 9000) raises each;
// after 90,000 records, a truncation and one fresh Xid 79 raise at once;
// no record is counted twice.
TEST_F(KmsgSamplerTest, ARecordFileRewrittenInPlaceRaisesWhatIsNew) {
  xpu::testing::TempDir dir;
  const std::string path = dir.File("kmsg");
  std::ofstream(path) << "6,1,1000,-;usb 1-1: new high-speed USB device\n";
  KmsgSampler::Options o;
  o.path = path;
  o.interval = std::chrono::milliseconds(50);
  KmsgSampler s(o, KmsgCatalog::Builtin(), FaultCatalog::Builtin(), &registry_, &metrics_);
  s.Start();
  const auto events = [&](const std::string& bus) -> uint64_t {
    for (const auto& v : xpu::testing::ViewOf(registry_, "kmsg"))
      if (v.bus_id == bus)
        for (const auto& e : v.events)
          if (e.code == "0x10DE004F") return e.count;
    return 0;
  };
  const std::string xid79 =
      ",-;NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus\n";
  ASSERT_TRUE(xpu::testing::WaitFor([&] { return registry_.fault_views_set().of("kmsg") > 0; }));
  std::ofstream(path, std::ios::trunc) << "3,2,2000" << xid79;
  EXPECT_TRUE(xpu::testing::WaitFor([&] { return events("0000:3b:00.0") == 1; }));
  std::ofstream(path, std::ios::trunc)
      << "3,9000,3000,-;NVRM: Xid (PCI:0000:03:00): 79, pid=1, GPU has fallen off the bus\n";
  EXPECT_TRUE(xpu::testing::WaitFor([&] { return events("0000:03:00.0") == 1; }));
  {
    std::ofstream out(path, std::ios::trunc);
    for (uint64_t i = 0; i < 90000; ++i)
      out << "4," << 10000 + i << "," << 4000 + i << ",-;pcieport 0000:00:01.0: AER: x " << i
          << "\n";
    out << "3,2,2000" << xid79;  // read already: not counted again
  }
  std::ofstream(path, std::ios::trunc) << "3,100000,100000" << xid79;
  EXPECT_TRUE(
      xpu::testing::WaitFor([&] { return events("0000:3b:00.0") == 2; }, std::chrono::seconds(10)));
  s.Stop();
  EXPECT_EQ(events("0000:3b:00.0"), 2U);
  EXPECT_EQ(events("0000:03:00.0"), 1U);
}

// The state file's format, and every way it can be wrong.
TEST(KmsgStateTest, RoundTripsAndRefusesWhatIsNotAStateFile) {
  KmsgSavedStates s{"0b4f7d3c-1", {{"0000:3b:00.0", {"0x10DE004F"}}, {"0000:03:00.0", {}}}};
  KmsgSavedStates back;
  ASSERT_TRUE(ParseKmsgStates(SerializeKmsgStates(s), &back).ok());
  EXPECT_EQ(back, s);
  std::string huge = R"({"version":1,"boot_id":"b","states":{},"pad":")";
  huge += std::string(kMaxKmsgStateFileBytes, 'x') + "\"}";
  std::string many = R"({"version":1,"boot_id":"b","states":{)";
  for (size_t i = 0; i <= kMaxKmsgDevices; ++i) {
    char a[32];
    std::snprintf(a, sizeof a, "%s\"%04zx:00:00.0\":[]", i == 0 ? "" : ",", i);
    many += a;
  }
  many += "}}";
  for (const std::string& bad : std::vector<std::string>{
           "", "{", "[]", "null", R"({"version":2,"boot_id":"b","states":{}})",
           R"({"boot_id":"b","states":{}})", R"({"version":1,"boot_id":"","states":{}})",
           R"({"version":1,"boot_id":7,"states":{}})", R"({"version":1,"boot_id":"b","states":[]})",
           R"({"version":1,"boot_id":"b","states":{"3b:00.0":["0x10DE004F"]}})",  // not canonical
           R"({"version":1,"boot_id":"b","states":{"0000:3b:00.0":["Xid 79"]}})",
           R"({"version":1,"boot_id":"b","states":{"0000:3b:00.0":"0x10DE004F"}})",
           R"({"version":1,"boot_id":"b","states":{"0000:3b:00.0":[79]}})", huge, many}) {
    Status st = ParseKmsgStates(bad, &back);
    EXPECT_EQ(st.code(), Status::Code::kInvalidArgument) << bad.substr(0, 80);
    EXPECT_EQ(st.message().rfind("kmsg state file: ", 0), 0u) << st.message();
  }
}

// Two writers on one state file at once (two pods on one host path, both
// pid 1; here two threads of one pid, which shared the old pid-named
// temporary file): every write succeeds, a reader only ever finds a whole
// file, and no temporary file is left.
// The most the sampler can hold (every device it keeps, every code a state
// or an event) is a file the next start takes back. Before, the reader's bound was below
// what the writer could write, and such a file was refused whole.
TEST(KmsgStateTest, TheMostTheSamplerHoldsIsAFileTheNextStartReads) {
  KmsgSavedStates most{std::string(64, 'b'), {}};
  for (size_t i = 0; i < kMaxKmsgDevices; ++i) {
    char raw[32];
    std::snprintf(raw, sizeof raw, "%08zx:ff:1f.7", 0x10000000 + i);  // the longest there are
    const std::string addr = CanonicalPciAddress(raw);
    ASSERT_EQ(addr.size(), 16u) << addr;
    for (size_t c = 0; c < kMaxKmsgCodesPerDevice; ++c) {
      char code[16];
      std::snprintf(code, sizeof code, "0x%08zX", 0xFFFFFF00 + c);
      if (i == 0) {
        most.states[addr].insert(code);
      } else {  // an event's entry is the longer; a kernel time of a century's uptime
        most.events[addr][code] = 3'155'760'000'000'000;
      }
    }
  }
  KmsgSavedStates back;
  const Status s = ParseKmsgStates(SerializeKmsgStates(most), &back);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(back, most);
}

TEST(KmsgStateTest, TwoWritersAtOnceNeverLeaveAFileTheNextStartRefuses) {
  xpu::testing::TempDir dir;
  const std::string path = dir.File("kmsg-states.json");
  std::atomic<int> failed_writes{0};
  std::atomic<bool> done{false};
  const auto writer = [&](const std::string& address) {
    for (int i = 0; i < 200; ++i) {
      KmsgSavedStates s{"boot-" + std::to_string(i), {{address, {"0x10DE004F"}}}};
      if (!WriteFileAtomically(path, SerializeKmsgStates(s)).ok()) ++failed_writes;
    }
  };
  int refused = 0;
  int read = 0;
  std::thread reader([&] {
    while (!done) {
      std::string text;
      if (!ReadTextFile(path, "state", &text, kMaxKmsgStateFileBytes).ok()) continue;
      KmsgSavedStates back;
      ++read;
      if (!ParseKmsgStates(text, &back).ok()) ++refused;
    }
  });
  std::thread a(writer, "0000:3b:00.0");
  std::thread b(writer, "0000:86:00.0");
  a.join();
  b.join();
  done = true;
  reader.join();
  EXPECT_EQ(failed_writes, 0);
  EXPECT_EQ(refused, 0) << "of " << read << " reads";
  std::string text;
  KmsgSavedStates last;
  ASSERT_TRUE(ReadTextFile(path, "state", &text, kMaxKmsgStateFileBytes).ok());
  EXPECT_TRUE(ParseKmsgStates(text, &last).ok()) << text;
  for (const auto& e : std::filesystem::directory_iterator(dir.path()))
    EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos) << e.path();
}

// A crashed writer's temporary file is removed by the next write; the
// temporary name is not the pid's.
TEST(KmsgStateTest, ACrashedWritersTemporaryFileIsRemoved) {
  xpu::testing::TempDir dir;
  const std::string path = dir.File("kmsg-states.json");
  xpu::testing::WriteFile(path + ".tmp.1", "{\"half");
  ASSERT_TRUE(WriteFileAtomically(path, SerializeKmsgStates({"b", {}})).ok());
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp.1"));
  EXPECT_TRUE(std::filesystem::exists(path));
}

// --hal.state-dir naming a directory that is not there: made, owner only,
// and the states are kept in it; one that cannot be made (under a file)
// keeps nothing, and the sampler runs.
TEST(KmsgStateTest, AMissingStateDirectoryIsMade) {
  xpu::testing::TempDir dir;
  const std::string made = dir.File("a") + "/b";
  ASSERT_TRUE(MakeStateDirectory(made).ok());
  struct stat st {};
  ASSERT_EQ(stat(made.c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0700U);
  ASSERT_EQ(stat(dir.File("a").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0700U);
  EXPECT_TRUE(MakeStateDirectory(made).ok());  // there already
  xpu::testing::WriteFile(dir.File("file"), "x");
  const Status s = MakeStateDirectory(dir.File("file") + "/sub");
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("file/sub"), std::string::npos) << s.message();
  EXPECT_FALSE(MakeStateDirectory(dir.File("file")).ok());  // no directory
}

TEST_F(KmsgSamplerTest, StatesAreKeptInAStateDirectoryItMade) {
  xpu::testing::TempDir dir;
  std::ofstream(dir.File("boot_id")) << "boot-1\n";
  KmsgSampler::Options o;
  o.boot_id_path = dir.File("boot_id");
  o.state_file = dir.File("made") + "/kmsg-states.json";
  sampler_ =
      std::make_unique<KmsgSampler>(o, KmsgCatalog::Builtin(), FaultCatalog::Builtin(), &registry_,
                                    &metrics_, nullptr, [this] { return now_us_; });
  sampler_->RestoreStates();
  Record("NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus", now_us_);
  sampler_->Publish();
  EXPECT_NE(xpu::testing::ReadFile(o.state_file).find("0x10DE004F"), std::string::npos);
  EXPECT_EQ(Metric("xpu_kmsg_state_file_errors_total", {{"op", "write"}}), 0);
}

// What the ring forgets is remembered: an Xid 79 kept in the state file
// outlives its record (a ring that wrapped, here a log without it) and the
// exporter's restart; a file from another boot is cleared (the reboot is
// Xid 79's remedy); a corrupt one is refused, counted, and the sampler
// starts without it; a healthy record clears what was kept.
// An exporter restarted while the ring still holds a card's Xid 79 told by
// both of NVIDIA's lines: the state is restored from the file, and the
// replayed pair is still one event (the count the page showed before the
// restart, not one more: a rate would read a new fault). Before, the state
// restored as written at the restart made the second line seem written long
// after the first, so the pair counted twice.
TEST_F(KmsgSamplerTest, ARestartReplayingTheRingCountsAStatesPairOnce) {
  xpu::testing::TempDir dir;
  const KmsgSampler::Options o = StatesIn(dir);
  auto replay = [&] {
    seq_ = 0;
    Record("NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=x, GPU has fallen off the bus.",
           now_us_ - 3'000'000);
    Record("NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.", now_us_ - 2'999'000);
  };
  StartWith(o);
  replay();
  ASSERT_EQ(Device(0).events.size(), 1u);
  ASSERT_EQ(Device(0).events[0].count, 1u);
  now_us_ += 60'000'000;  // restarted a minute later, the ring as it was
  StartWith(o);
  replay();
  ASSERT_EQ(Device(0).events.size(), 1u);
  EXPECT_EQ(Device(0).events[0].count, 1u) << "the same two lines, one event";
  EXPECT_EQ(Codes(0), std::vector<std::string>{"0x10DE004F"});
  // Told again later by one line: another event.
  Record("NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.", now_us_);
  EXPECT_EQ(Device(0).events[0].count, 2u);
}

// An event still in its window (an Xid 13, ten minutes) when the exporter
// restarts is shown after the restart even where its record is gone (a
// record file rotated meanwhile), until its window ends, and not across a
// reboot. Before, only states were kept: the card read healthy for the rest
// of the window.
TEST_F(KmsgSamplerTest, EventsInTheirWindowOutliveARestartWithoutTheirRecord) {
  xpu::testing::TempDir dir;
  const KmsgSampler::Options o = StatesIn(dir);
  StartWith(o);
  Record("NVRM: Xid (PCI:0000:3b:00): 13, pid=1, Graphics SM Warp Exception", now_us_ - 60'000'000);
  const std::vector<std::string> xid13{"0x10DE000D"};
  EXPECT_EQ(Codes(0), xid13);
  now_us_ += 120'000'000;
  StartWith(o);  // restarted; the record is not read again
  EXPECT_EQ(Codes(0), xid13) << "seven minutes of its window left";
  EXPECT_TRUE(Device(0).events.empty()) << "a kept event is no new record";
  now_us_ += 480'000'000;  // its window over, as its record was stamped...
  EXPECT_EQ(Codes(0), xid13) << "...but the file keeps it a minute late, never early";
  now_us_ += 60'000'000;
  EXPECT_TRUE(Codes(0).empty());
  StartWith(o);
  EXPECT_TRUE(Codes(0).empty()) << "not kept past its window";
  // Within its window, then another boot: gone.
  Record("NVRM: Xid (PCI:0000:3b:00): 13, pid=1, Graphics SM Warp Exception", now_us_);
  EXPECT_EQ(Codes(0), xid13);
  std::ofstream(dir.File("boot_id")) << "boot-2\n";
  StartWith(o);
  EXPECT_TRUE(Codes(0).empty());
}

// An event told every second (an Xid storm) rewrites the state file once a
// minute, not every second: its time is kept a minute late, and written
// again only once a record passes it.
// With no daemon answering, a card only the bus knows: its state and its
// event in their window outlive a restart as an XDM card's do.
TEST_F(KmsgSamplerTest, ACardOnlyTheBusKnowsKeepsItsFaultsAcrossARestart) {
  store::DeviceRegistry bus_only;
  store::PciDeviceView card;
  card.bus_id = "0000:5e:00.0";
  card.vendor = "0x10de";
  card.driver = "nvidia";
  bus_only.SetPciDevices({card});
  xpu::testing::TempDir dir;
  const KmsgSampler::Options o = StatesIn(dir);
  auto start = [&] {
    sampler_ =
        std::make_unique<KmsgSampler>(o, KmsgCatalog::Builtin(), FaultCatalog::Builtin(), &bus_only,
                                      &metrics_, nullptr, [this] { return now_us_; });
    sampler_->RestoreStates();
  };
  auto codes = [&] {
    sampler_->Publish();
    std::vector<std::string> out;
    for (const auto& v : xpu::testing::ViewOf(bus_only, "kmsg"))
      if (v.bus_id == card.bus_id)
        for (const auto& f : v.faults) out.push_back(f.code);
    return out;
  };
  start();
  Record("NVRM: Xid (PCI:0000:5e:00): 79, pid=1, GPU has fallen off the bus", now_us_ - 2);
  Record("NVRM: Xid (PCI:0000:5e:00): 13, pid=2, Graphics SM Warp Exception", now_us_ - 1);
  const std::vector<std::string> both{"0x10DE000D", "0x10DE004F"};
  ASSERT_EQ(codes(), both);
  now_us_ += 60'000'000;
  start();  // restarted, the records gone
  EXPECT_EQ(codes(), both);
}

TEST_F(KmsgSamplerTest, AnEventToldEverySecondRewritesTheStateFileOnceAMinute) {
  xpu::testing::TempDir dir;
  const KmsgSampler::Options o = StatesIn(dir);
  StartWith(o);
  std::set<std::string> written;
  for (int i = 0; i < 150; ++i) {
    Record("NVRM: Xid (PCI:0000:3b:00): 13, pid=1, Graphics SM Warp Exception", now_us_);
    ASSERT_EQ(Codes(0), std::vector<std::string>{"0x10DE000D"});  // published: kept
    written.insert(xpu::testing::ReadFile(o.state_file));
    now_us_ += 1'000'000;
  }
  EXPECT_EQ(written.size(), 3u) << "at 0, 61 and 122 s";
}

TEST_F(KmsgSamplerTest, StatesOutliveTheRingWithinABootAndNotAcrossOne) {
  xpu::testing::TempDir dir;
  std::ofstream(dir.File("boot_id")) << "boot-1\n";
  KmsgSampler::Options o;
  o.state_file = dir.File("kmsg-states.json");
  o.boot_id_path = dir.File("boot_id");
  auto make = [&] {
    return std::make_unique<KmsgSampler>(o, KmsgCatalog::Builtin(), FaultCatalog::Builtin(),
                                         &registry_, &metrics_, nullptr,
                                         [this] { return now_us_; });
  };
  sampler_ = make();
  sampler_->RestoreStates();  // no file yet: a first run
  Record("NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus", now_us_ - 5);
  Record("NVRM: Xid (PCI:0000:3b:00): 13, pid=2, Graphics SM Warp Exception", now_us_ - 4);
  EXPECT_EQ(Codes(0).size(), 2u);  // Publish keeps the states, and the event with its time
  KmsgSavedStates kept;
  std::string text = xpu::testing::ReadFile(o.state_file);
  ASSERT_TRUE(ParseKmsgStates(text, &kept).ok()) << text;
  EXPECT_EQ(kept,
            (KmsgSavedStates{"boot-1",
                             {{"0000:3b:00.0", {"0x10DE004F"}}},
                             {{"0000:3b:00.0", {{"0x10DE000D", now_us_ - 4 + 60'000'000}}}}}));
  for (const auto& e : std::filesystem::directory_iterator(dir.path()))
    EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << e.path();

  // Restarted, the ring without the record: the state, and the event within
  // its window (EventsInTheirWindowOutliveARestartWithoutTheirRecord).
  sampler_ = make();
  sampler_->RestoreStates();
  EXPECT_EQ(Codes(0), (std::vector<std::string>{"0x10DE000D", "0x10DE004F"}));
  EXPECT_TRUE(Device(0).events.empty()) << "a kept state is no new record";
  now_us_ += 660'000'000;  // the event's window over (and the file's minute): the state stays
  EXPECT_EQ(Codes(0), std::vector<std::string>{"0x10DE004F"});

  // Another boot: cleared, and the file with it.
  std::ofstream(dir.File("boot_id")) << "boot-2\n";
  sampler_ = make();
  sampler_->RestoreStates();
  EXPECT_TRUE(Codes(0).empty());
  ASSERT_TRUE(ParseKmsgStates(xpu::testing::ReadFile(o.state_file), &kept).ok());
  EXPECT_EQ(kept, (KmsgSavedStates{"boot-2", {}})) << "the old boot's states are gone";

  // Corrupt, or of a newer release (rolled back): refused with a count; the
  // sampler starts without it, and the file is kept aside, not written over
  // (what it holds may be a card's only record of falling off the bus).
  const std::string aside = o.state_file + ".refused";
  int refused = 0;
  for (const std::string& text :
       {std::string("{\"version\":1,\"boot_id\":\"boot-2\",\"states\":{\"x\""),
        std::string("{\"version\":2,\"boot_id\":\"boot-2\",\"states\":{}}")}) {
    SCOPED_TRACE(text);
    std::ofstream(o.state_file) << text;
    sampler_ = make();
    sampler_->RestoreStates();
    EXPECT_TRUE(Codes(0).empty());
    EXPECT_EQ(Metric("xpu_kmsg_state_file_errors_total", {{"op", "read"}}), ++refused);
    Record("NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus", now_us_);
    EXPECT_EQ(Codes(0), std::vector<std::string>{"0x10DE004F"});  // published: states written
    // Kept aside as it was; a second refusal beside the first, not over it.
    const std::string at = refused == 1 ? aside : [&] {
      for (const auto& e : std::filesystem::directory_iterator(dir.path()))
        if (e.path().string().rfind(aside + ".", 0) == 0) return e.path().string();
      return std::string();
    }();
    EXPECT_EQ(xpu::testing::ReadFile(at), text) << at;
    ASSERT_TRUE(ParseKmsgStates(xpu::testing::ReadFile(o.state_file), &kept).ok());
    EXPECT_EQ(kept, (KmsgSavedStates{"boot-2", {{"0000:3b:00.0", {"0x10DE004F"}}}}));
    std::filesystem::remove(o.state_file);
  }

  // A healthy record clears the kept state, on disk too.
  std::shared_ptr<const KmsgCatalog> cat;
  ASSERT_TRUE(KmsgCatalog::Parse(R"(states: ["0x10DE004F"]
patterns:
  - {name: x, driver: nvidia, regex: '^NVRM: Xid \((?P<address>[0-9a-f:]+)\): (?P<number>\d+)', code: "0x10DE0000"}
  - {name: ok, driver: nvidia, regex: '^NVRM: ok (?P<address>\S+)', effect: healthy}
)",
                                 "t.yml", &cat)
                  .ok());
  sampler_ = std::make_unique<KmsgSampler>(o, cat, FaultCatalog::Builtin(), &registry_, &metrics_,
                                           nullptr, [this] { return now_us_; });
  sampler_->RestoreStates();
  Record("NVRM: Xid (0000:3b:00): 79", now_us_);
  EXPECT_EQ(Codes(0), std::vector<std::string>{"0x10DE004F"});
  Record("NVRM: ok 0000:3b:00.0", now_us_);
  EXPECT_TRUE(Codes(0).empty());
  ASSERT_TRUE(ParseKmsgStates(xpu::testing::ReadFile(o.state_file), &kept).ok());
  EXPECT_TRUE(kept.states.empty());
}

// A reload's new sampler: caught up only if its predecessor was (a view out
// of a half-replayed ring would show health not yet read), and the state
// file consulted again when --hal.state-dir changed.
TEST_F(KmsgSamplerTest, ASeededSamplerKeepsItsPredecessorsProgressAndItsOwnStateFile) {
  xpu::testing::TempDir dir;
  std::ofstream(dir.File("boot_id")) << "boot-1\n";
  KmsgSavedStates other{"boot-1", {{"0000:3b:00.0", {"0x10DE004F"}}}};
  std::filesystem::create_directory(dir.File("b"));
  std::ofstream(dir.File("b/kmsg-states.json")) << SerializeKmsgStates(other);
  KmsgSampler::Options o;
  o.boot_id_path = dir.File("boot_id");
  KmsgSampler::State half = sampler_->state();  // never caught up
  EXPECT_FALSE(half.caught_up);
  o.state_file = dir.File("b/kmsg-states.json");
  KmsgSampler next(o, KmsgCatalog::Builtin(), FaultCatalog::Builtin(), &registry_, &metrics_,
                   nullptr, [this] { return now_us_; });
  next.Seed(half);
  EXPECT_FALSE(next.state().caught_up);
  EXPECT_FALSE(next.state().restored) << "another state file: consulted by this sampler";
  next.RestoreStates();
  next.Publish();
  bool xid79 = false;
  for (const auto& v : xpu::testing::ViewOf(registry_, "kmsg"))
    for (const auto& f : v.faults) xid79 |= v.minor == 0 && f.code == "0x10DE004F";
  EXPECT_TRUE(xid79) << "the new directory's kept state was not taken";
}

// A directory that cannot be written: the write is counted and retried at
// the next change, the sampler goes on.
TEST_F(KmsgSamplerTest, AStateFileThatCannotBeWrittenIsCountedNotFatal) {
  xpu::testing::TempDir dir;
  std::ofstream(dir.File("boot_id")) << "boot-1\n";
  KmsgSampler::Options o;
  o.boot_id_path = dir.File("boot_id");
  o.state_file = dir.File("sub") + "/kmsg-states.json";
  std::filesystem::create_directory(dir.File("sub"));
  sampler_ =
      std::make_unique<KmsgSampler>(o, KmsgCatalog::Builtin(), FaultCatalog::Builtin(), &registry_,
                                    &metrics_, nullptr, [this] { return now_us_; });
  sampler_->RestoreStates();
  std::filesystem::remove(dir.File("sub"));  // gone after the start
  Record("NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus", now_us_);
  EXPECT_EQ(Codes(0), std::vector<std::string>{"0x10DE004F"});
  EXPECT_EQ(Metric("xpu_kmsg_state_file_errors_total", {{"op", "write"}}), 1);
}

}  // namespace
}  // namespace xpu::hal
