#include "hal/kmsg/kmsg_sampler.h"

#include <fcntl.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <set>
#include <thread>

#include "common/file_util.h"
#include "hal/fault_events.h"
#include "hal/kmsg/kmsg_state.h"
#include "hal/pci/pci.h"

namespace xpu::hal {
namespace {

uint64_t MonotonicUs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000u + static_cast<uint64_t>(ts.tv_nsec) / 1000u;
}

// `path` opened to read if it is a regular file, else -1 (errno set). Never
// blocks: a FIFO put there with no writer would hold the open (and the
// sampler's Stop with it) until one came.
int OpenRegularFile(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return -1;
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    errno = EINVAL;  // "not a regular file"
    return -1;
  }
  return fd;
}

// Records as a file or a FIFO holds them, taken out of the bytes read: a
// record is a line not starting with a space, with the indented lines after
// it. A line longer than any record can be (kMaxPending without a whole
// record in it) is dropped alone, and the rest of it as it comes; the
// records after it are read. One source's, on its thread.
class KmsgRecordSplitter {
 public:
  static constexpr size_t kMaxPending = 4 * kKmsgMaxRecord;
  // Takes `data` in; false when it made a line too long (dropped: say so).
  bool Append(std::string_view data) {
    if (skipping_) {  // the rest of a line dropped as too long
      const size_t nl = data.find('\n');
      if (nl == std::string_view::npos) return true;
      data.remove_prefix(nl + 1);
      skipping_ = false;
    }
    pending_.append(data);
    if (pending_.size() <= kMaxPending) return true;
    const size_t nl = pending_.find('\n');
    if (nl == std::string::npos) {
      pending_.clear();
      skipping_ = true;
    } else {
      pending_.erase(0, nl + 1);
    }
    return false;
  }
  // The first whole record: complete when the next record's line has begun,
  // or, at the end of what was written (`at_end`), when it ends in '\n'.
  bool Take(std::string* record, bool at_end) {
    size_t end = 0;
    for (;;) {
      const size_t nl = pending_.find('\n', end);
      if (nl == std::string::npos) return false;
      end = nl + 1;
      if (end < pending_.size() && pending_[end] == ' ') continue;  // its dictionary
      if (end == pending_.size() && !at_end) return false;
      break;
    }
    record->assign(pending_, 0, end);
    pending_.erase(0, end);
    return true;
  }
  void Clear() {
    pending_.clear();
    skipping_ = false;
  }
  static Status TooLong(const std::string& path) {
    return Status::InvalidArgument(path + ": a line over " + std::to_string(kMaxPending) +
                                   " bytes, dropped");
  }

 private:
  std::string pending_;  // bytes read, not yet a whole record
  bool skipping_ = false;
};

// /dev/kmsg: one record per read(), EPIPE after an overwrite. A FIFO (a
// forwarder's) holds one boot's records too, but as bytes: what its writers
// wrote, several records or part of one a read; they are taken out one at
// a time as from a file.
class DevKmsg : public KmsgSource {
 public:
  DevKmsg(std::string path, int fd) : path_(std::move(path)), fd_(fd) {
    struct stat st {};
    stream_ = fstat(fd_, &st) == 0 && S_ISFIFO(st.st_mode);
  }
  ~DevKmsg() override { close(fd_); }
  std::string name() const override { return path_; }
  bool one_boot() const override { return true; }
  Status Next(std::string* record, std::chrono::nanoseconds wait) override {
    if (stream_) return NextOfStream(record, wait);
    char buf[kKmsgMaxRecord];
    for (int tries = 0; tries < 2; ++tries) {
      const ssize_t n = read(fd_, buf, sizeof buf);
      if (n > 0) {
        record->assign(buf, static_cast<size_t>(n));
        return Status::Ok();
      }
      if (n < 0 && errno == EPIPE) return Status::Exhausted("records overwritten before read");
      if (n < 0 && errno == EINTR) continue;
      // A record larger than the buffer is skipped by the kernel: one bad
      // record, not a broken source.
      if (n < 0 && errno == EINVAL) return Status::InvalidArgument("record over the read buffer");
      if (n < 0 && errno != EAGAIN) return Status::IoError(path_ + ": " + ErrnoText(errno));
      // /dev/kmsg never reads end of file (EAGAIN when it holds nothing
      // new): this is no kernel log (/dev/null where a container runtime
      // put it in /dev/kmsg's place, a FIFO no one writes), and a log that
      // cannot be read is blind, not silent.
      if (n == 0)
        return Status::IoError(path_ +
                               ": reads end of file, as no kernel log does (is it /dev/null?)");
      if (tries == 1) break;
      if (WaitReadable(fd_, wait) != Woke::kReadable) break;
    }
    return Status::Unavailable("no record");
  }

 private:
  // A FIFO's: the records in what was read, one a call; a record whose end
  // has not come is held (KmsgRecordSplitter: a line too long dropped and
  // said, as a file's).
  Status NextOfStream(std::string* record, std::chrono::nanoseconds wait) {
    const auto until = std::chrono::steady_clock::now() + wait;
    for (;;) {
      if (split_.Take(record, /*at_end=*/false)) return Status::Ok();
      char buf[kKmsgMaxRecord];
      const ssize_t n = read(fd_, buf, sizeof buf);
      if (n > 0) {
        if (!split_.Append(std::string_view(buf, static_cast<size_t>(n))))
          return KmsgRecordSplitter::TooLong(path_);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno != EAGAIN) return Status::IoError(path_ + ": " + ErrnoText(errno));
      // Nothing more written for now: the record held is whole if it ends
      // its line (its dictionary, if any, came with it).
      if (split_.Take(record, /*at_end=*/true)) return Status::Ok();
      if (n == 0)  // no writer holds it open
        return Status::IoError(path_ +
                               ": reads end of file, as no kernel log does (is it /dev/null?)");
      const auto now = std::chrono::steady_clock::now();
      if (now >= until || WaitReadable(fd_, std::chrono::duration_cast<std::chrono::nanoseconds>(
                                                until - now)) != Woke::kReadable)
        return Status::Unavailable("no record");
    }
  }

  const std::string path_;
  const int fd_;
  bool stream_ = false;
  KmsgRecordSplitter split_;  // a FIFO's bytes read, not yet a whole record
};

// A file of records, followed as it grows and across every rewrite, as
// tail -F follows a file and further: a record is a line not starting with
// a space, with the indented lines after it. At the end of what was
// written the path is looked at again (a stat): a new file there (another
// inode) is opened and read from its start; the same file grown shorter
// (truncated), or changed before the read offset (rewritten in place to
// the same length or longer: the last bytes read are no longer there) is
// read again from its start. Each is a new generation; the sampler knows
// the records it read already (KmsgBootMemory). A path that is gone keeps
// the old file.
class KmsgFile : public KmsgSource {
 public:
  KmsgFile(std::string path, int fd) : path_(std::move(path)), fd_(fd) { Identify(); }
  ~KmsgFile() override { close(fd_); }
  std::string name() const override { return path_; }
  uint64_t generation() const override { return generation_; }
  Status Next(std::string* record, std::chrono::nanoseconds wait) override {
    const auto until = std::chrono::steady_clock::now() + wait;
    for (;;) {
      if (TakeRecord(record, /*at_end=*/false)) return Status::Ok();
      // Back from the end of what was written, or the file written since
      // it was last looked at (a rewrite between two reads): what comes
      // now may be another file, or this one written afresh.
      if ((at_end_ || Written()) && StartedOver()) continue;
      if (no_longer_a_file_)
        return Status::IoError(path_ + ": no longer a regular file (opened anew as what it is)");
      char buf[16384];
      const ssize_t n = read(fd_, buf, sizeof buf);
      if (n < 0 && errno != EINTR) return Status::IoError(path_ + ": " + ErrnoText(errno));
      if (n > 0) {
        at_end_ = false;
        nap_ = kShortestNap;
        offset_ += n;
        std::string_view data(buf, static_cast<size_t>(n));
        KeepTail(data);
        // More than any record can be without a whole one in it: the line
        // at its start is dropped, and said (counted malformed).
        if (!split_.Append(data)) return KmsgRecordSplitter::TooLong(path_);
        continue;
      }
      if (n == 0) {
        if (TakeRecord(record, /*at_end=*/true)) return Status::Ok();
        if (!at_end_) {
          at_end_ = true;
          continue;  // the path is looked at once at once
        }
      }
      const auto now = std::chrono::steady_clock::now();
      if (now >= until) return Status::Unavailable("no record");
      // A file has no poll(): looked at again after a nap that grows while
      // nothing comes (20 ms after a record, up to a second), never past
      // `until` (the sampler's next publish, so a record written meanwhile
      // is read before it): an idle log costs a wake-up or two a second.
      // The sampler's Stop ends the nap (WaitReadable on no descriptor).
      const auto nap = std::min<std::chrono::nanoseconds>(nap_, until - now);
      if (WaitReadable(-1, nap) == Woke::kWoken) return Status::Unavailable("no record");
      nap_ = std::min(nap_ * 2, kLongestNap);
    }
  }

 private:
  bool TakeRecord(std::string* record, bool at_end) { return split_.Take(record, at_end); }

  // The last bytes read (what a rewrite in place would change).
  void KeepTail(std::string_view read) {
    if (read.size() >= kTail) {
      tail_.assign(read.substr(read.size() - kTail));
    } else {
      tail_.append(read);
      if (tail_.size() > kTail) tail_.erase(0, tail_.size() - kTail);
    }
  }
  bool TailStillThere() const {
    if (tail_.empty()) return true;
    char buf[kTail];
    const ssize_t n = pread(fd_, buf, tail_.size(), offset_ - static_cast<off_t>(tail_.size()));
    return n == static_cast<ssize_t>(tail_.size()) && std::string_view(buf, tail_.size()) == tail_;
  }

  void Identify() {
    struct stat st {};
    if (fstat(fd_, &st) == 0) {
      dev_ = st.st_dev;
      ino_ = st.st_ino;
    }
  }
  // Whether the open file's modification time moved since StartedOver
  // last looked (an fstat).
  bool Written() const {
    struct stat st {};
    return fstat(fd_, &st) == 0 &&
           std::make_pair(st.st_mtim.tv_sec, st.st_mtim.tv_nsec) != written_;
  }
  // Whether the path now holds another file, or this one truncated below
  // what was read or rewritten before it: then read from its start.
  bool StartedOver() {
    struct stat st {};
    if (stat(path_.c_str(), &st) != 0) return false;  // gone: nothing new to read yet
    const auto changed = std::make_pair(st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
    const bool written = changed != written_;
    written_ = changed;
    if (st.st_dev != dev_ || st.st_ino != ino_) {
      if (!S_ISREG(st.st_mode)) {  // a FIFO now: read as one, by a source opened anew
        no_longer_a_file_ = true;
        return false;
      }
      const int fd = OpenRegularFile(path_);
      if (fd < 0) return false;  // tried again at the next end
      close(fd_);
      fd_ = fd;
      Identify();
    } else if (st.st_size < offset_ || (written && !TailStillThere())) {
      if (lseek(fd_, 0, SEEK_SET) != 0) return false;
    } else {
      return false;
    }
    offset_ = 0;
    split_.Clear();
    tail_.clear();
    at_end_ = false;
    ++generation_;
    return true;
  }

  bool no_longer_a_file_ = false;  // the path holds another kind of file now
  static constexpr size_t kTail = 256;
  static constexpr std::chrono::milliseconds kShortestNap{20};
  static constexpr std::chrono::milliseconds kLongestNap{1000};
  std::chrono::milliseconds nap_ = kShortestNap;  // the next wait for more
  const std::string path_;
  int fd_;
  dev_t dev_ = 0;
  ino_t ino_ = 0;
  off_t offset_ = 0;  // read so far
  uint64_t generation_ = 0;
  KmsgRecordSplitter split_;                 // held until a whole record is in it
  std::string tail_;                         // the last kTail bytes read, ending at offset_
  bool at_end_ = false;                      // the last read found the end of what was written
  std::pair<time_t, long> written_{-1, -1};  // the file's mtime when last looked at
};

}  // namespace

Status OpenDevKmsg(const std::string& path, std::unique_ptr<KmsgSource>* out) {
  const int fd = open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return Status::IoError("cannot open " + path + ": " + ErrnoText(errno));
  *out = std::make_unique<DevKmsg>(path, fd);
  return Status::Ok();
}

Status OpenKmsgFile(const std::string& path, std::unique_ptr<KmsgSource>* out) {
  const int fd = OpenRegularFile(path);
  if (fd < 0) return Status::IoError("cannot open " + path + ": " + ErrnoText(errno));
  *out = std::make_unique<KmsgFile>(path, fd);
  return Status::Ok();
}

bool KmsgReadable(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return false;
  // A device must not read end of file (DevKmsg::Next). A one-byte read of
  // /dev/kmsg answers EINVAL (a record is longer), of a ring with nothing
  // new EAGAIN; this descriptor's position is its own. A FIFO is not read
  // here: what it holds is its reader's.
  struct stat st {};
  bool readable = true;
  if (fstat(fd, &st) == 0 && S_ISCHR(st.st_mode)) {
    char c = 0;
    readable = read(fd, &c, 1) != 0;
  }
  close(fd);
  return readable;
}

KmsgSampler::KmsgSampler(Options options, std::shared_ptr<const KmsgCatalog> catalog,
                         std::shared_ptr<const FaultCatalog> faults,
                         store::HealthSourcePort* registry, prometheus::Registry* self_metrics,
                         store::ExemplarStore* exemplars, std::function<uint64_t()> now_us)
    : SourceSampler({store::kSourceKmsg,
                     "xpu_kmsg_up",
                     "Whether the kernel log (--hal.kmsg.path) could be read at the last try.",
                     {}},
                    options.interval, registry, self_metrics),
      options_(std::move(options)),
      catalog_(std::move(catalog)),
      faults_(std::move(faults)),
      exemplars_(exemplars),
      now_us_(now_us ? std::move(now_us) : MonotonicUs),
      started_us_(now_us_()),
      records_(prometheus::BuildCounter()
                   .Name("xpu_kmsg_fault_records_total")
                   .Help("Kernel log records that the kernel-log catalog mapped to a device, by "
                         "pattern.")
                   .Register(*self_metrics)),
      unmatched_(prometheus::BuildCounter()
                     .Name("xpu_kmsg_unmatched_records_total")
                     .Help("Kernel log records of an accelerator driver that name a PCI device "
                           "but match no pattern of the catalog, by driver.")
                     .Register(*self_metrics)),
      overwritten_(prometheus::BuildCounter()
                       .Name("xpu_kmsg_overwritten_total")
                       .Help("Times the kernel's ring overwrote records before the exporter read "
                             "them (EPIPE).")
                       .Register(*self_metrics)
                       .Add({})),
      malformed_(prometheus::BuildCounter()
                     .Name("xpu_kmsg_malformed_records_total")
                     .Help("Kernel log records that were not in the kernel's record format.")
                     .Register(*self_metrics)
                     .Add({})),
      dropped_(prometheus::BuildCounter()
                   .Name("xpu_kmsg_dropped_total")
                   .Help("Fault records dropped because the per-device state was full (devices "
                         "or codes).")
                   .Register(*self_metrics)
                   .Add({})),
      other_boot_(prometheus::BuildCounter()
                      .Name("xpu_kmsg_other_boot_records_total")
                      .Help("Kernel log records stamped after this boot's clock (an earlier "
                            "boot's, in a record file): they raise nothing.")
                      .Register(*self_metrics)
                      .Add({})),
      without_address_(prometheus::BuildCounter()
                           .Name("xpu_kmsg_records_without_address_total")
                           .Help("Kernel log fault records that name no PCI device, by driver: "
                                 "published on the one card of that driver; where it has "
                                 "several, none of them is vouched for by the log's silence "
                                 "(each Unknown) while the fault is active.")
                           .Register(*self_metrics)),
      lost_(prometheus::BuildCounter()
                .Name("xpu_kmsg_lost_records_total")
                .Help("Kernel log records never read (numbers skipped on /dev/kmsg): the ring "
                      "overwrote them first, before the exporter started included. For the "
                      "event window after the last of them, the log's silence vouches for no "
                      "card (each card Unknown).")
                .Register(*self_metrics)
                .Add({})),
      state_errors_(
          prometheus::BuildCounter()
              .Name("xpu_kmsg_state_file_errors_total")
              .Help("Kernel-log state file (--hal.state-dir) failures, by op: read (a "
                    "file refused as unreadable, corrupt or oversized; the exporter "
                    "starts without it) or write (retried at each publish until it works).")
              .Register(*self_metrics)),
      wake_fd_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
  for (const char* op : {"read", "write"}) state_errors_.Add({{"op", op}});
}

void KmsgSampler::RestoreStates() {
  restored_ = true;
  if (options_.state_file.empty()) return;
  const size_t slash = options_.state_file.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : options_.state_file.substr(0, slash);
  // An operator's directory that is not there yet is made, as systemd's
  // StateDirectory= would; where it cannot be, states are not kept.
  if (Status s = dir.empty() ? Status::Ok() : MakeStateDirectory(dir); !s.ok()) {
    spdlog::warn("kmsg: states are not kept across restarts: {}", s.message());
    return;
  }
  boot_id_ = ReadBootId(options_.boot_id_path);
  if (boot_id_.empty()) {
    spdlog::warn("kmsg: no boot id at {}: states are not kept across restarts",
                 options_.boot_id_path);
    return;
  }
  struct stat st {};
  if (stat(options_.state_file.c_str(), &st) != 0 && errno == ENOENT) return;  // a first run
  std::string text;
  KmsgSavedStates saved;
  Status s = ReadTextFile(options_.state_file, "kmsg state file", &text, kMaxKmsgStateFileBytes);
  if (s.ok()) s = ParseKmsgStates(text, &saved);
  if (!s.ok()) {
    state_errors_.Add({{"op", "read"}}).Increment();
    // Kept aside, not written over at the first publish: what it holds (a
    // newer release's, or a file torn by hand) may be a card's only record
    // of a state whose line has left the ring.
    // A name no earlier refusal holds: none is written over.
    std::string aside = options_.state_file + ".refused";
    if (struct stat held{}; stat(aside.c_str(), &held) == 0)
      aside += "." + std::to_string(static_cast<long long>(time(nullptr)));
    if (rename(options_.state_file.c_str(), aside.c_str()) == 0) {
      spdlog::warn("kmsg: {}; starting without the kept states (the file is kept as {})",
                   s.message(), aside);
    } else {
      keep_states_ = false;
      spdlog::warn(
          "kmsg: {}; starting without the kept states, and keeping none this run (it "
          "could not be moved to {}: {})",
          s.message(), aside, ErrnoText(errno));
    }
    return;
  }
  if (saved.boot_id != boot_id_) {
    spdlog::info("kmsg: the kept states are from another boot: cleared by the reboot");
    unlink(options_.state_file.c_str());
    return;
  }
  // Each code taken back is not told since the restart (for a state no
  // record time, for an event the file's): the ring's replay of its lines
  // counts them as before the restart (the pair NVIDIA prints for one Xid 79
  // is one event, not two), and the next record's time replaces the file's.
  size_t restored = 0;
  auto take_back = [&](const std::string& address, const std::string& code) -> Active* {
    auto it = devices_.find(address);
    if (it == devices_.end()) {
      if (devices_.size() >= kMaxKmsgDevices) return nullptr;
      it = devices_.emplace(address, Device{}).first;
    }
    if (it->second.codes.size() >= kMaxKmsgCodesPerDevice) return nullptr;
    Active& a = it->second.codes[code];
    a.kept = true;
    ++restored;
    return &a;
  };
  for (const auto& [address, codes] : saved.states)
    for (const std::string& code : codes)
      if (catalog_->IsState(code))  // else no longer a state in this catalog: it would never clear
        if (Active* a = take_back(address, code)) a->state = true;
  // Events still in their window, with their last record's time (this
  // boot's clock): shown until it ends, as if their records were read again
  // (where they are gone, a rotated record file, the card is not vouched for
  // meanwhile).
  for (const auto& [address, codes] : saved.events)
    for (const auto& [code, last_us] : codes)
      if (!catalog_->IsState(code))  // a state now: its record says so, not this
        if (Active* a = take_back(address, code)) a->last_us = std::max(a->last_us, last_us);
  saved.boot_id.clear();
  kept_ = std::move(saved);
  spdlog::info(
      "kmsg: {} state(s) and event(s) kept from before the restart (states until a healthy "
      "record, events until their window ends)",
      restored);
}

std::optional<uint64_t> KmsgSampler::KeptEventTime(const std::string& address,
                                                   const std::string& code) const {
  if (!kept_) return std::nullopt;
  auto d = kept_->events.find(address);
  if (d == kept_->events.end()) return std::nullopt;
  auto c = d->second.find(code);
  if (c == d->second.end()) return std::nullopt;
  return c->second;
}

void KmsgSampler::KeepStates() {
  if (!restored_ || !keep_states_ || options_.state_file.empty() || boot_id_.empty()) return;
  // The file as it should be: each event's time kKeptEventSlackUs late
  // (the file's own where it was taken back and not told since), or the
  // time the file holds while no record has passed it.
  KmsgSavedStates now;
  bool passed = false;  // a record later than the time the file keeps it until
  for (const auto& [address, dev] : devices_)
    for (const auto& [code, active] : dev.codes) {
      if (active.state) {
        now.states[address].insert(code);
        continue;
      }
      uint64_t at = active.kept ? active.last_us : active.last_us + kKeptEventSlackUs;
      if (const std::optional<uint64_t> held = KeptEventTime(address, code)) {
        if (active.last_us > *held) {
          passed = true;
        } else {
          at = *held;
        }
      }
      now.events[address][code] = at;
    }
  if (kept_ && !passed && *kept_ == now) return;
  KmsgSavedStates file = now;
  file.boot_id = boot_id_;
  if (Status s = WriteFileAtomically(options_.state_file, SerializeKmsgStates(file)); !s.ok()) {
    state_errors_.Add({{"op", "write"}}).Increment();
    if (said_.Raise("state write"))
      spdlog::warn("kmsg: {} (retried at each publish until it works)", s.message());
    return;
  }
  if (said_.Clear("state write")) spdlog::info("kmsg: the state file is written again");
  kept_ = std::move(now);
}

KmsgSampler::~KmsgSampler() {
  Stop();
  if (wake_fd_ >= 0) close(wake_fd_);
}

void KmsgSampler::Stop() {
  worker().RequestStop();  // before the wake, so that the woken loop ends
  if (wake_fd_ >= 0) {
    const uint64_t one = 1;
    (void)!write(wake_fd_, &one, sizeof one);
  }
  SourceSampler::Stop();
}

KmsgSource::Woke KmsgSource::WaitReadable(int fd, std::chrono::nanoseconds timeout) const {
  if (wake_fd_ < 0) timeout = std::min<std::chrono::nanoseconds>(timeout, kWaitWithoutWake);
  timeout = std::max(timeout, std::chrono::nanoseconds::zero());
  // To the nanosecond (ppoll, not poll's milliseconds): a wait up to the
  // grid's next instant ends on it, with the other sources' ticks.
  const auto secs = std::chrono::duration_cast<std::chrono::seconds>(timeout);
  const timespec ts{static_cast<time_t>(secs.count()),
                    static_cast<long>((timeout - secs).count())};  // NOLINT(google-runtime-int)
  // poll() passes over a negative descriptor.
  pollfd p[2] = {{fd, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
  if (ppoll(p, 2, &ts, nullptr) <= 0) return Woke::kTimeout;
  if (fd >= 0 && (p[0].revents & (POLLIN | POLLERR | POLLHUP)) != 0) return Woke::kReadable;
  return (p[1].revents & POLLIN) != 0 ? Woke::kWoken : Woke::kTimeout;
}

void KmsgSampler::TakeOver(Part& old) {
  // The same log: this sampler goes on after the old one's last record.
  auto* o = dynamic_cast<KmsgSampler*>(&old);
  if (o != nullptr && o->options().path == options_.path) Seed(o->state());
}

void KmsgSampler::Seed(State s) {
  // The predecessor consulted the same file already: its boot id goes on,
  // and the first Publish writes it again (kept_ unknown). Another file (a
  // reload changed --hal.state-dir) is consulted by this sampler's Loop.
  if (s.state_file == options_.state_file) {
    restored_ = s.restored;
    boot_id_ = std::move(s.boot_id);
    keep_states_ = s.keep_states;  // a refused file that stayed in place is not written over
  }
  // Caught up only if the predecessor was: a view out of a ring half
  // replayed would show health not yet read.
  caught_up_ = s.caught_up;
  devices_ = std::move(s.devices);
  memory_ = std::move(s.memory);
  next_sequence_ = s.next_sequence;
  blind_to_silence_until_us_ = s.blind_to_silence_until_us;
  unplaced_ = std::move(s.unplaced);
}

void KmsgSampler::HandleRecord(std::string_view raw) {
  KmsgRecord r;
  if (!ParseKmsgRecord(raw, &r).ok()) {
    malformed_.Increment();
    return;
  }
  // Stamped after this boot's clock (beyond the drift of the kernel's
  // clock from CLOCK_MONOTONIC, at most 0.05%): an earlier boot's record.
  const uint64_t now = now_us_();
  if (r.timestamp_us > now + now / 64 + 10000000) {
    other_boot_.Increment();
    // Read, so no gap (only where it is the next: an earlier boot's tail in
    // a FIFO does not move this boot's numbers on).
    if (one_boot_ && r.sequence == next_sequence_.value_or(0)) next_sequence_ = r.sequence + 1;
    return;
  }
  switch (one_boot_ ? memory_.NoteOfOneBoot(r.sequence, r.timestamp_us, r.text)
                    : memory_.Note(r.sequence, r.timestamp_us, r.text)) {
    case KmsgBootMemory::Verdict::kReadAlready:
      return;  // counted already
    case KmsgBootMemory::Verdict::kNewBoot:
      if (!devices_.empty() || !unplaced_.empty())
        spdlog::info(
            "kmsg: the record at sequence {} starts a newer boot: what the earlier boot "
            "raised is cleared, as the reboot cleared it",
            r.sequence);
      devices_.clear();
      unplaced_.clear();
      break;
    case KmsgBootMemory::Verdict::kNew:
      break;
  }
  // Within that drift: taken as written now, so it cannot stay active for
  // longer than its window.
  r.timestamp_us = std::min(r.timestamp_us, now);
  if (one_boot_) NoteGap(r.sequence, r.timestamp_us);     // before any return below
  if (r.facility != 0 && !options_.user_records) return;  // not the kernel's own
  if (IsPacketLog(r.text)) return;  // the kernel's, with a prefix anyone chose
  std::string dict_device;
  if (auto d = r.dict.find("DEVICE"); d != r.dict.end() && d->second.rfind("+pci:", 0) == 0)
    dict_device = CanonicalPciAddress(d->second.substr(5));
  const std::optional<KmsgMatch> m = catalog_->Match(r.text, dict_device);
  if (m && m->address.empty() && m->pattern->effect == KmsgEffect::kFault) {
    // Bounded by the catalog: one entry per driver.
    without_address_.Add({{"driver", m->pattern->driver}}).Increment();
    if (said_.Raise("unplaced:" + m->pattern->driver))
      spdlog::warn(
          "kmsg: a {} fault record names no device ({}): placed on the one {} card, "
          "else none of them is vouched for while it is active",
          m->pattern->driver, m->pattern->name, m->pattern->driver);
    Device* dev = UnaddressedTarget(m->pattern->driver);
    if (dev != nullptr && AddFaultRecord(*dev, *m, r.timestamp_us))
      records_.Add({{"pattern", m->pattern->name}}).Increment();
    return;
  }
  if (!m || m->address.empty()) {
    const std::string driver = catalog_->DriverOf(r.text);
    if (!driver.empty() && !(dict_device.empty() && NormalizePciAddress(r.text).empty()))
      unmatched_.Add({{"driver", driver}}).Increment();
    return;
  }
  if (m->pattern->effect != KmsgEffect::kFault) NoteUnplacedClear(*m, r.timestamp_us);
  auto it = devices_.find(m->address);
  if (it == devices_.end()) {
    if (m->pattern->effect != KmsgEffect::kFault) return;  // nothing to clear
    // Full: an address with nothing active, no raise waiting and no card's
    // at the last publish holds nothing worth its place (AER from many
    // virtual functions, long over): let go, so that a card's fault is not
    // dropped after many others'. A card's stays: its event counts are series.
    if (devices_.size() >= kMaxKmsgDevices) {
      for (auto d = devices_.begin(); d != devices_.end(); ++d) {
        if (d->second.codes.empty() && d->second.fresh.empty() &&
            last_cards_.count(d->first) == 0) {
          devices_.erase(d);
          break;
        }
      }
    }
    if (devices_.size() >= kMaxKmsgDevices) {
      dropped_.Increment();
      return;
    }
    it = devices_.emplace(m->address, Device{}).first;
  }
  Device& dev = it->second;
  switch (m->pattern->effect) {
    case KmsgEffect::kFault:
      if (AddFaultRecord(dev, *m, r.timestamp_us))
        records_.Add({{"pattern", m->pattern->name}}).Increment();
      break;
    case KmsgEffect::kReset:
      for (auto c = dev.codes.begin(); c != dev.codes.end();)
        c = c->second.state ? std::next(c) : dev.codes.erase(c);
      break;
    case KmsgEffect::kHealthy:
      dev.codes.clear();
      break;
  }
}

KmsgSampler::Device* KmsgSampler::UnaddressedTarget(const std::string& driver) {
  // Placed as the driver's cards are when it is read (a record replayed
  // from the ring at start: as they are then): on its one card, at once
  // (that card's own records clear it from then on).
  std::vector<std::string> of;
  for (const store::InventoryDevice& d : registry()->Inventory())
    if (!d.bus_id.empty() && d.driver == driver) of.push_back(d.bus_id);
  if (of.size() != 1) {
    Device* dev = &unplaced_[driver];
    dev->candidates.insert(of.begin(), of.end());  // the inventory's cards: bounded by it
    return dev;
  }
  auto it = devices_.find(of.front());
  if (it != devices_.end()) return &it->second;
  if (devices_.size() >= kMaxKmsgDevices) {
    dropped_.Increment();
    return nullptr;
  }
  return &devices_[of.front()];
}

void KmsgSampler::NoteUnplacedClear(const KmsgMatch& m, uint64_t timestamp_us) {
  auto u = unplaced_.find(m.pattern->driver);
  if (u == unplaced_.end() || u->second.codes.empty()) return;  // nothing to clear
  auto& cleared = u->second.cleared;
  if (cleared.count(m.address) == 0 && cleared.size() >= kMaxKmsgDevices) return;
  Device::Cleared& c = cleared[m.address];
  uint64_t& at = m.pattern->effect == KmsgEffect::kHealthy ? c.healthy_us : c.reset_us;
  at = std::max(at, timestamp_us);
}

void KmsgSampler::NoteGap(uint64_t sequence, uint64_t stamp_us) {
  // Numbers start at 0 each boot and rise by one a record; a reopen reads
  // again from the oldest the ring holds (numbers below the next expected:
  // no gap).
  const uint64_t expected = next_sequence_.value_or(0);
  if (sequence > expected) {
    lost_.Increment(static_cast<double>(sequence - expected));
    const uint64_t window =
        static_cast<uint64_t>(std::chrono::microseconds(catalog_->event_active_for()).count());
    // The records skipped were stamped before this one.
    const uint64_t until = stamp_us + window;
    if (until > now_us_() && until > blind_to_silence_until_us_) {
      blind_to_silence_until_us_ = until;
      spdlog::warn(
          "kmsg: {} record(s) before sequence {} were overwritten before they were read; for "
          "{} s the kernel log's silence vouches for no card",
          sequence - expected, sequence, (until - now_us_()) / 1000000);
    }
  }
  next_sequence_ = std::max(expected, sequence + 1);
}

namespace {

// Every address the log names, as the card it stands for: the card at that
// address, else the one card of another function of the same device (an
// AER error is told by the function that saw it), else the one card whose
// link the address is the port of (with DPC the port reports its link's
// fatal errors); else itself, which the registry keeps only if it is a card
// (a NIC's AER is no card of ours). The maps of functions and ports are
// made only when an address is not a card's.
struct CardsByAddress {
  explicit CardsByAddress(std::vector<store::InventoryDevice> inventory) {
    for (store::InventoryDevice& d : inventory)
      if (!d.bus_id.empty()) cards[d.bus_id] = std::move(d);
  }
  std::string CardOf(const std::string& address) {
    if (cards.count(address) != 0) return address;
    if (by_device.empty())
      for (const auto& [bus_id, card] : cards) {
        by_device[bus_id.substr(0, bus_id.rfind('.'))].insert(bus_id);
        if (!card.port.empty()) by_port[card.port].insert(bus_id);
      }
    std::string card = One(by_device, address.substr(0, address.rfind('.')));
    if (card.empty()) card = One(by_port, address);
    return card.empty() ? address : card;
  }
  std::map<std::string, store::InventoryDevice> cards;  // by address

 private:
  static std::string One(const std::map<std::string, std::set<std::string>>& map,
                         const std::string& key) {
    auto it = map.find(key);
    return it != map.end() && it->second.size() == 1 ? *it->second.begin() : std::string();
  }
  std::map<std::string, std::set<std::string>> by_device, by_port;
};

// The reset and healthy records of `card` (any address of it) clear the
// codes `dev` had before them: a healthy one every code, a reset the
// event-like ones. Those applied are forgotten.
void ApplyClears(KmsgSampler::Device& dev, CardsByAddress& resolve, const std::string& card) {
  for (auto c = dev.cleared.begin(); c != dev.cleared.end();) {
    if (resolve.CardOf(c->first) != card) {
      ++c;
      continue;
    }
    for (auto code = dev.codes.begin(); code != dev.codes.end();) {
      const uint64_t last = code->second.last_us;
      const bool gone =
          last <= c->second.healthy_us || (!code->second.state && last <= c->second.reset_us);
      code = gone ? dev.codes.erase(code) : std::next(code);
    }
    c = dev.cleared.erase(c);
  }
}

}  // namespace

bool KmsgSampler::AddFaultRecord(Device& dev, const KmsgMatch& m, uint64_t timestamp_us) {
  // The codes a device has had (its event series) are bounded too, and so
  // are those active on it (with states kept from before a restart, which
  // have no event series here, they could pass the bound the file is read with).
  if ((dev.events.count(m.code) == 0 && dev.events.size() >= kMaxKmsgCodesPerDevice) ||
      (dev.codes.count(m.code) == 0 && dev.codes.size() >= kMaxKmsgCodesPerDevice)) {
    dropped_.Increment();
    return false;
  }
  auto [code, added] = dev.codes.try_emplace(m.code);
  Active& a = code->second;
  const uint64_t apart =
      timestamp_us > a.last_us ? timestamp_us - a.last_us : a.last_us - timestamp_us;
  const bool retold =
      !added && !a.pattern.empty() && a.pattern != m.pattern->name && apart <= kRetoldWithinUs;
  a.last_us = a.kept ? timestamp_us : std::max(a.last_us, timestamp_us);  // the file's time, late
  a.kept = false;
  a.state = catalog_->IsState(m.code);
  a.pattern = m.pattern->name;
  if (!retold) ++dev.events[m.code];
  if (timestamp_us >= started_us_) dev.fresh.insert(m.code);
  return true;
}

void KmsgSampler::ExpireEvents(uint64_t now) {
  const uint64_t window =
      static_cast<uint64_t>(std::chrono::microseconds(catalog_->event_active_for()).count());
  for (auto* devices : {&devices_, &unplaced_})
    for (auto& [address, dev] : *devices) {
      for (auto c = dev.codes.begin(); c != dev.codes.end();) {
        const bool expired = !c->second.state && now > c->second.last_us + window;
        c = expired ? dev.codes.erase(c) : std::next(c);
      }
    }
}

void KmsgSampler::Publish() {
  const uint64_t now = now_us_();
  ExpireEvents(now);
  CardsByAddress resolve(registry()->Inventory());
  const std::map<std::string, store::InventoryDevice>& cards = resolve.cards;
  // Every address held that is a card's (its own, its port's, another
  // function's): their event counts are summed into the card's series.
  last_cards_.clear();
  for (const auto& [address, dev] : devices_)
    if (cards.count(resolve.CardOf(address)) != 0) last_cards_.insert(address);
  std::map<std::string, store::DeviceView> views;  // by the card's address
  store::DeviceViews view;
  view.coverage = store::Coverage::kAddressedSilent;
  // Records were lost within their window: silence is no health. Every card
  // is listed, not seen (Unknown), with the faults that were read.
  const bool silence_blind = now < blind_to_silence_until_us_;
  auto merge = [&](Device& dev, const std::string& target) {
    store::DeviceView& v = views[target];
    v.bus_id = target;
    v.healthy = true;  // the log judges a card by its faults alone
    v.seen = !silence_blind;
    auto card = cards.find(target);
    // A raise is news when it is written, and told once the card is one of
    // the inventory's: a record of a card not known yet waits for it.
    if (card != cards.end()) {
      const std::string minor = card->second.minor >= 0 ? std::to_string(card->second.minor) : "";
      for (const std::string& code : dev.fresh) {
        const FaultInfo info = faults_->Lookup(code);
        NoteRaise(registry(), exemplars_,
                  {store::kSourceKmsg, minor, card->second.uuid, target, ActiveFaultOf(info),
                   std::chrono::system_clock::now()},
                  /*live=*/true);
      }
      dev.fresh.clear();
    }
    // Several addresses of one card: each code once, their counts summed.
    for (const auto& [code, active] : dev.codes)
      store::AddFault(&v.faults, ActiveFaultOf(faults_->Lookup(code)));
    for (const auto& [code, count] : dev.events) {
      const FaultInfo info = faults_->Lookup(code);
      auto e = std::find_if(v.events.begin(), v.events.end(),
                            [&](const auto& x) { return x.code == info.code; });
      if (e != v.events.end()) {
        e->count += count;
      } else {
        v.events.push_back({info.code, LevelName(info.level), count});
      }
    }
  };
  for (auto& [address, dev] : devices_) merge(dev, resolve.CardOf(address));
  // Active faults that name no card: on the one card bound to their
  // pattern's driver; where it holds several, none of them is vouched for;
  // where it holds none (its card unbound after a failed reset, no card's
  // driver known: no pci source), none of the cards without a driver, else
  // none at all.
  // A reset or healthy record of that one card clears what was written
  // before it, as it clears the card's own faults.
  std::set<std::string> unvouched;
  for (auto& [driver, dev] : unplaced_) {
    std::vector<std::string> of, unbound, all;
    for (const auto& [address, card] : cards) {
      if (card.driver == driver) of.push_back(address);
      if (card.driver.empty()) unbound.push_back(address);
      all.push_back(address);
    }
    if (of.size() == 1 && dev.candidates.empty()) ApplyClears(dev, resolve, of.front());
    if (dev.codes.empty()) {
      dev.fresh.clear();  // expired or cleared unplaced: no raise to tell later
      dev.cleared.clear();
      dev.candidates.clear();
      continue;
    }
    // Written while the driver had several cards: none of those is vouched
    // for, whichever of them it has now (one unbound since may be the one).
    for (const std::string& card : dev.candidates)
      if (cards.count(card) != 0) unvouched.insert(card);
    if (of.size() == 1 && dev.candidates.empty()) {
      merge(dev, of.front());
    } else {
      const std::vector<std::string>& none = !of.empty() ? of : !unbound.empty() ? unbound : all;
      unvouched.insert(none.begin(), none.end());
    }
  }
  for (const auto& [address, card] : cards) {
    if (!silence_blind && unvouched.count(address) == 0) continue;
    store::DeviceView& v = views[address];
    v.bus_id = address;
    v.healthy = true;
    v.seen = false;
  }
  for (auto& [target, v] : views) {
    std::sort(
        v.faults.begin(), v.faults.end(),
        [](const store::ActiveFault& a, const store::ActiveFault& b) { return a.code < b.code; });
    view.devices.push_back(std::move(v));
  }
  registry()->SetDeviceViews(store::kSourceKmsg, std::move(view));
  KeepStates();
}

void KmsgSampler::Run() {
  std::unique_ptr<KmsgSource> source;
  uint64_t generation = 0;
  if (!restored_) RestoreStates();
  auto next_publish = std::chrono::steady_clock::now();
  while (!worker().stopping()) {
    if (!source) {
      struct stat st {};
      const bool file = stat(options_.path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
      Status s = file ? OpenKmsgFile(options_.path, &source) : OpenDevKmsg(options_.path, &source);
      if (!s.ok()) {
        if (said_.Raise("open"))
          spdlog::warn("kmsg: {}; kernel-log faults are not read", s.message());
        // Blind: no view goes out, so the last one ages and is withdrawn.
        Blind(s.message());
        if (!worker().SleepFor(options_.interval)) break;
        continue;
      }
      Seeing();
      if (said_.Clear("open")) spdlog::info("kmsg: reading {} again", options_.path);
      source->WakeOn(wake_fd_);
      one_boot_ = source->one_boot();
      generation = source->generation();
      memory_.StartPass();  // from the oldest record again
      spdlog::info("kmsg: reading the kernel log from {} (from its oldest record)", source->name());
    }
    std::string raw;
    // Up to the next publish: Stop ends the wait (wake_fd_).
    Status s = source->Next(&raw, std::max(std::chrono::steady_clock::duration::zero(),
                                           next_publish - std::chrono::steady_clock::now()));
    if (s.ok()) {
      // Read again from a start (a record file rewritten or replaced): what
      // comes may be known (memory_).
      if (source->generation() != generation) {
        generation = source->generation();
        memory_.StartPass();
      }
      HandleRecord(raw);
    } else if (s.code() == Status::Code::kExhausted) {
      overwritten_.Increment();
    } else if (s.code() == Status::Code::kInvalidArgument) {
      malformed_.Increment();
    } else if (s.code() == Status::Code::kUnavailable) {
      caught_up_ = true;  // the ring is read to its end
    } else if (s.code() == Status::Code::kIoError) {
      spdlog::warn("kmsg: {}", s.message());
      Blind(s.message());
      source.reset();  // reopened after an interval; records read already are skipped
      if (!worker().SleepFor(options_.interval)) break;
      continue;  // no view until a read works: it would say the source sees
    }
    if (caught_up_ && std::chrono::steady_clock::now() >= next_publish) {
      Publish();
      // On the grid the other sources tick on (NextTick): one wake-up.
      next_publish = NextTick(next_publish, std::chrono::steady_clock::now(), options_.interval);
    }
  }
}

}  // namespace xpu::hal
