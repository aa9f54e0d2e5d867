#pragma once

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "common/part.h"
#include "common/status.h"
#include "common/worker.h"
#include "hal/fault_catalog.h"
#include "hal/kmsg/kmsg.h"
#include "hal/kmsg/kmsg_catalog.h"
#include "hal/kmsg/kmsg_state.h"
#include "hal/source_sampler.h"
#include "store/exemplars.h"
#include "store/ports.h"

namespace xpu::hal {

// Where kernel records come from. Called from the sampler thread only.
class KmsgSource {
 public:
  virtual ~KmsgSource() = default;
  // The next record, waiting up to `wait` for one. Ok: `*record` holds it.
  // Unavailable: none came in time. Exhausted: the ring overwrote records
  // before they were read (counted; reading goes on with the oldest left).
  // IoError: the source is unusable.
  virtual Status Next(std::string* record, std::chrono::nanoseconds wait) = 0;
  virtual std::string name() const = 0;
  // A descriptor (an eventfd) whose becoming readable ends a wait in Next
  // at once (Unavailable): the sampler's Stop, so that a wait may last a
  // whole interval instead of waking to look whether it should stop. -1:
  // none. Set before the first Next.
  void WakeOn(int fd) { wake_fd_ = fd; }
  // Changes when the source starts over with other records (a record file
  // rotated or truncated): their sequence numbers may start again.
  virtual uint64_t generation() const { return 0; }
  // Whether it holds one boot's records only (/dev/kmsg's ring, a FIFO fed
  // on this boot), so that no record of it starts a newer boot.
  virtual bool one_boot() const { return false; }

 protected:
  // Waits until `fd` (-1: none) is readable, the wake descriptor is, or
  // `timeout` passed.
  enum class Woke { kReadable, kWoken, kTimeout };
  Woke WaitReadable(int fd, std::chrono::nanoseconds timeout) const;
  // The longest wait without a wake descriptor (a source used alone, as
  // the tests do), so that a stop is seen soon all the same.
  static constexpr std::chrono::milliseconds kWaitWithoutWake{200};

 private:
  int wake_fd_ = -1;
};

// /dev/kmsg (or another path with its semantics), read from the oldest
// record the kernel still holds. IoError when it cannot be opened.
Status OpenDevKmsg(const std::string& path, std::unique_ptr<KmsgSource>* out);
// A file of records in the kernel's format, one per line ("6,12,3400,-;text"),
// dictionary lines indented by one space after it, followed as it grows and
// as tail -F follows a file: replaced (a new inode at the path) or truncated,
// it is read from its new start within one wait (for nodes without a
// readable /dev/kmsg, fed by a forwarder, and for tests).
Status OpenKmsgFile(const std::string& path, std::unique_ptr<KmsgSource>* out);
// Whether `path` can be opened for reading now (--hal=auto's test: where
// dmesg_restrict is set, /dev/kmsg needs CAP_SYSLOG).
bool KmsgReadable(const std::string& path);

// The kernel-log backend: reads every record from the start of the kernel's
// ring, then follows it; maps each record through the catalog to a device
// (its PCI address) and a fault code; keeps each device's active codes
// (events for KmsgCatalog::event_active_for() after their last record or
// until a reset record, states until a healthy record) and counts every
// fault record; publishes the view to the registry, which joins addresses
// to XDM's devices and writes the source="kmsg" series.
// Start()/Stop() from the owning thread; HandleRecord()/Publish() from the
// sampler thread (or a test, not beside a running sampler).
class KmsgSampler : public SourceSampler {
 public:
  struct Options {
    std::string path = "/dev/kmsg";  // or a record file (a regular file)
    bool user_records = false;       // also records written from userspace (facility != 0)
    std::chrono::milliseconds interval{1000};  // how often the view is published
    // Where the active states are kept across restarts (kmsg_state.h);
    // empty: not kept. Its directory must exist (created by the systemd
    // unit's StateDirectory=, the DaemonSet's hostPath).
    std::string state_file;
    std::string boot_id_path = "/proc/sys/kernel/random/boot_id";
    bool operator==(const Options&) const = default;
  };
  KmsgSampler(Options options, std::shared_ptr<const KmsgCatalog> catalog,
              std::shared_ptr<const FaultCatalog> faults, store::HealthSourcePort* registry,
              prometheus::Registry* self_metrics, store::ExemplarStore* exemplars = nullptr,
              std::function<uint64_t()> now_us = nullptr);  // CLOCK_MONOTONIC, in us
  ~KmsgSampler() override;
  // Part: ends the source's wait at once (wake_fd_), then joins the thread.
  void Stop() override;
  KmsgSampler(const KmsgSampler&) = delete;
  KmsgSampler& operator=(const KmsgSampler&) = delete;

  // Part: the state of the sampler it replaces when it reads the same log
  // (Seed).
  void TakeOver(Part& old) override;
  // What it was built with. Any thread, while the sampler lives.
  const Options& options() const { return options_; }
  const std::shared_ptr<const KmsgCatalog>& catalog() const { return catalog_; }

  // One record as read from the source. A record read already (same
  // sequence number, stamp and text: a source reopened, a record file
  // rewritten and read again from its start, a rebuilt sampler reading the
  // ring again) is skipped (KmsgBootMemory); a record of a newer boot (a
  // record file spanning a reboot) clears what the earlier boot raised, as
  // the reboot cleared it; one stamped after this boot's clock (an earlier
  // boot's, in a record file) raises nothing.
  void HandleRecord(std::string_view raw);
  // The source is read again from a start (reopened, a record file
  // rewritten or replaced): records may come that were read before. Run
  // calls it; tests may.
  void StartPass() { memory_.StartPass(); }
  // Expires events and hands the view to the registry; keeps the active
  // states in the state file when they changed since they were last kept
  // (once RestoreStates has run).
  void Publish();
  // Takes the states kept by the last run of this boot (a file of another
  // boot is removed: the reboot was the remedy); a file that cannot be read
  // or parsed is refused (logged, counted) and the sampler starts without
  // it. The sampler thread calls it first; tests may.
  void RestoreStates();

  struct Active {
    uint64_t last_us = 0;  // the record's kernel time
    bool state = false;
    std::string pattern;  // of the last record
    // Taken back from the state file and not told since: its time is the
    // file's (kKeptEventSlackUs late), the next record's replaces it.
    bool kept = false;
  };
  // An event's time is written to the state file this much later than its
  // record's, and written again only once a record passes it: a code
  // repeating every second rewrites the file once a minute, not each
  // second, and a restart keeps it active a little longer, never shorter.
  static constexpr uint64_t kKeptEventSlackUs = 60000000;
  // A record of a code that another pattern gave within this long is the
  // same event told again (NVIDIA's Xid 79 line and its "fallen off the
  // bus" line): one event.
  static constexpr uint64_t kRetoldWithinUs = 1000000;
  struct Device {
    std::map<std::string, Active> codes;
    std::map<std::string, uint64_t> events;  // fault records, by code
    // Codes with a record written since the sampler started (not replayed
    // from the ring): their raise leaves an exemplar naming the pod.
    std::set<std::string> fresh;
    // unplaced_'s only: the last reset and healthy record of each address
    // of the driver (kernel time), applied where the faults are placed on
    // that address's card (ApplyClears).
    struct Cleared {
      uint64_t reset_us = 0, healthy_us = 0;
    };
    std::map<std::string, Cleared> cleared;
    // unplaced_'s only: the driver's cards when a record was read while it
    // had several (which one is not known: none of them is vouched for
    // while it is active, however the driver's cards change since).
    std::set<std::string> candidates;
  };
  // What a reload's new sampler takes over from the old one (after Stop,
  // before Start): the devices' codes and counts and the last record read,
  // so the ring it reads again is neither counted twice nor lost.
  struct State {
    std::map<std::string, Device> devices;
    KmsgBootMemory memory;   // the records read, so none is handled twice
    bool caught_up = false;  // the ring was read to its end
    // The state file the predecessor used, and whether it consulted it.
    std::string state_file;
    bool restored = false;
    std::string boot_id;
    // Records a one-boot source skipped (KmsgSampler::NoteGap).
    std::optional<uint64_t> next_sequence;
    uint64_t blind_to_silence_until_us = 0;
    std::map<std::string, Device> unplaced;  // KmsgSampler::unplaced_
    bool keep_states = true;                 // KmsgSampler::keep_states_
  };
  State state() const {
    return State{devices_,  memory_,     caught_up_,     options_.state_file,
                 restored_, boot_id_,    next_sequence_, blind_to_silence_until_us_,
                 unplaced_, keep_states_};
  }
  void Seed(State s);

 private:
  // Reads the log as it comes and publishes once an interval once caught
  // up (not SourceSampler's fixed-rate Tick).
  void Run() override;

  const Options options_;
  const std::shared_ptr<const KmsgCatalog> catalog_;
  const std::shared_ptr<const FaultCatalog> faults_;
  store::ExemplarStore* const exemplars_;
  const std::function<uint64_t()> now_us_;
  const uint64_t started_us_;
  prometheus::Family<prometheus::Counter>& records_;
  prometheus::Family<prometheus::Counter>& unmatched_;
  prometheus::Counter& overwritten_;
  prometheus::Counter& malformed_;
  prometheus::Counter& dropped_;
  prometheus::Counter& other_boot_;
  prometheus::Family<prometheus::Counter>& without_address_;
  prometheus::Counter& lost_;
  prometheus::Family<prometheus::Counter>& state_errors_;
  // Sampler-thread state.
  std::map<std::string, Device> devices_;  // by PCI address; at most kMaxKmsgDevices
  // Fault records whose pattern matched but that name no address (a DRM
  // error without its device: "[drm:amdgpu_job_timedout [amdgpu]] ..."), by
  // the pattern's driver (as many as the catalog has drivers): those read
  // while the driver held several cards (candidates), or while no card's
  // driver was known (placed at each publish on the one card the driver
  // holds then). One read while the driver held one card is that card's,
  // in devices_. Where not placed, none of the cards is vouched for by the
  // log's silence while such a fault is active: each is listed not seen.
  std::map<std::string, Device> unplaced_;
  // A fault record into `dev` (HandleRecord); false when the device's codes
  // are full (dropped).
  bool AddFaultRecord(Device& dev, const KmsgMatch& m, uint64_t timestamp_us);
  // Forgets the event-like codes whose window has passed by `now` (µs).
  void ExpireEvents(uint64_t now);
  // Where a fault record of `driver` that names no device goes: its one
  // card's device (the driver holds one card as the record is read), else
  // the driver's unplaced faults, noting its cards then; nullptr when
  // dropped (full).
  Device* UnaddressedTarget(const std::string& driver);
  // A reset or healthy record, kept for the faults of its driver that named
  // no device (bounded: kMaxKmsgDevices addresses a driver).
  void NoteUnplacedClear(const KmsgMatch& m, uint64_t timestamp_us);
  KmsgBootMemory memory_;  // the records handled, of the boot last seen
  bool one_boot_ = false;  // the source holds one boot (KmsgSource::one_boot)
  // Records of a one-boot source that were never read (overwritten in the
  // ring first: EPIPE, a reopen, or before the exporter started) are told by
  // the numbers skipped: the next number expected, and until when the log's
  // silence vouches for no card (the last skipped record's window: what it
  // held may be an active fault no one saw).
  std::optional<uint64_t> next_sequence_;
  uint64_t blind_to_silence_until_us_ = 0;
  void NoteGap(uint64_t sequence, uint64_t stamp_us);
  // The view goes out once the ring has been read to its end (or the source
  // is unusable, or a predecessor's state was seeded): until then it would
  // show counts and states not yet replayed.
  bool caught_up_ = false;
  // The state file: this boot's id, whether it was consulted, and what it
  // holds now (nullopt: not known, written at the next Publish).
  std::string boot_id_;
  bool restored_ = false;
  std::optional<KmsgSavedStates> kept_;  // its boot_id empty
  // False once a refused state file could not be moved aside: not written over.
  bool keep_states_ = true;
  // The addresses held that were a card's at the last publish: never let go
  // to make room (their event counts are the card's series).
  std::set<std::string> last_cards_;
  void KeepStates();
  // The time the state file holds for an event (kept_), if it holds it.
  std::optional<uint64_t> KeptEventTime(const std::string& address, const std::string& code) const;
  LogOnce said_;
  // Readable once Stop began (an eventfd, never drained): every source's
  // wait ends at once. -1 where none could be made (waits then end within
  // kWaitWithoutWake).
  const int wake_fd_;
};

// Bounds of the backend's state (docs/reliability.md).
inline constexpr size_t kMaxKmsgDevices = 1024;
inline constexpr size_t kMaxKmsgCodesPerDevice = 64;

}  // namespace xpu::hal
