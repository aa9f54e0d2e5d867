#pragma once

#include <absl/container/flat_hash_map.h>
#include <absl/container/flat_hash_set.h>
#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "catalog/catalog.h"
#include "common/mutex.h"
#include "store/device_registry.h"

namespace xpu::store {

using Clock = std::chrono::steady_clock;

// One decoded upstream sample, already scaled to the catalog's base unit.
struct Sample {
  int32_t minor = 0;
  uint32_t metric_id = 0;
  std::string instance;  // sub-entity (link...), empty for whole-device metrics
  double value = 0;
  bool operator==(const Sample&) const = default;
};

// Labels a device lends to every one of its series.
struct DeviceLabels {
  std::string uuid;
  std::string model;
  bool operator==(const DeviceLabels&) const = default;
};

// One exposed series. `entry` is nullptr for an unknown metric ID (exported
// under a generic family when allowed).
struct Row {
  const catalog::Entry* entry;
  uint32_t metric_id;
  int32_t minor;
  std::string_view instance;   // in the SeriesSet's names
  const DeviceLabels* device;  // owned by the SeriesSet; never null
};

// Instance names, each held once: a store's keys hold their positions, a
// SeriesSet's rows view them (at 100,000 series a string in every key and
// every row was 6.4 MB). The store appends while sets share it: a deque's
// elements never move, and one appended is never changed.
using InstanceNames = std::deque<std::string>;

// The set of series at one moment, sorted for exposition: by catalog order
// (unknown IDs last, by ID), then minor, then instance. Immutable once built;
// a new generation is built only when series appear or vanish or device
// labels change, so renderers may cache per generation.
struct SeriesSet {
  uint64_t generation = 0;
  // The catalog the rows' entries point into, kept alive with them (a
  // reload may replace the store's).
  std::shared_ptr<const catalog::Catalog> catalog;
  std::vector<Row> rows;
  // What rows' instances view, kept alive with them; the store may append
  // to it meanwhile: never read it, only its strings through the rows.
  std::shared_ptr<const InstanceNames> names;
  // One copy per device, shared by its rows (saves ~100 bytes per series).
  std::map<int32_t, DeviceLabels> devices;
  DeviceLabels unknown_device;
};

// A consistent view for one scrape: every value is from the same instant.
struct Snapshot {
  std::shared_ptr<const SeriesSet> set;
  std::vector<double> values;  // values[i] belongs to set->rows[i]
};

struct ApplyStats {
  size_t applied = 0;
  size_t duplicates = 0;       // the same series twice in one batch; the last wins
  size_t dropped = 0;          // new series refused by the series cap
  size_t unknown_device = 0;   // minor absent from the authoritative device list
  size_t over_device_cap = 0;  // samples of a new minor beyond Options::max_devices
};

// How long the exporter holds device series back for the device list.
inline constexpr std::chrono::milliseconds kIdentityWait{10000};

// The latest sample per (device, metric, instance). The ingest thread writes
// whole batches under one short lock; a scrape copies values under the same
// lock, so it never sees half a batch, and renders outside it. Series not
// refreshed within `stale_after` disappear at the next snapshot, and so do the
// series of devices that vanish from the device list. Thread-safe.
class MetricStore {
 public:
  struct Options {
    std::chrono::milliseconds stale_after{3000};
    size_t max_series = 50000;
    // Distinct minors held before ListAndWatch answers (and after): bounds
    // the per-device maps a flooding daemon could grow.
    size_t max_devices = 1024;
    // How long data may wait for the device list (ListAndWatch) before its
    // series are published without uuid and model: until then they are
    // held back, so that a device's series never change their label set
    // because of which answer came first (docs/architecture.md). 0: no
    // wait (tests of the store alone); the exporter uses kIdentityWait.
    std::chrono::milliseconds identity_wait{0};
  };
  MetricStore(std::shared_ptr<const catalog::Catalog> catalog, Options options);
  MetricStore(const MetricStore&) = delete;
  MetricStore& operator=(const MetricStore&) = delete;

  // Stores a batch (one upstream message) received at `now`.
  ApplyStats Apply(const std::vector<Sample>& batch, Clock::time_point now);

  // The authoritative device list (from ListAndWatch/ListGpuInfo): series of
  // minors not in it are removed, and labels follow it.
  void SetDevices(const std::map<int32_t, DeviceLabels>& devices);
  // Takes the device list from `registry` from now on: each change there
  // calls SetDevices. The registry must outlive the store's use of it.
  void FollowDevices(DeviceRegistry* registry);

  // Expires stale series as of `now` and returns the current view.
  Snapshot Snap(Clock::time_point now);

  // A reloaded catalog: series whose metric ID it lacks, or whose entry it
  // changed (name, type, scale...), are dropped, since their values were
  // scaled by the old one; the rest keep their values. The next data
  // refills the changed ones.
  void SetCatalog(std::shared_ptr<const catalog::Catalog> catalog);
  std::shared_ptr<const catalog::Catalog> catalog() const;
  // Drops the series `drop(minor, metric_id)` selects (a reload that
  // deselects families or devices); returns how many.
  size_t Drop(const std::function<bool(int32_t minor, uint32_t metric_id)>& drop);

  // Follows the interval XDM really uses (ExporterGetConfig); must be > 0.
  void set_stale_after(std::chrono::milliseconds stale_after);
  std::chrono::milliseconds stale_after() const;

  size_t series_count() const;
  // Instance names held (each once), the empty one included.
  size_t instance_names() const;
  uint64_t dropped_total() const;
  // Whether device series are held back now, waiting for the device list;
  // and whether that wait ran out (series went out without identity).
  bool identity_pending() const;
  bool identity_wait_expired() const;

  // Time of the last Apply that stored anything, if any.
  std::optional<Clock::time_point> last_update() const;
  // When each device last had a sample stored, by minor, with its identity
  // when the device list gave one.
  struct DeviceUpdate {
    int32_t minor;
    std::optional<DeviceLabels> labels;
    Clock::time_point updated;
  };
  std::vector<DeviceUpdate> device_updates() const;

 private:
  struct Key {
    int32_t minor;
    uint32_t metric_id;
    uint32_t instance;  // its position in names_
    bool operator==(const Key&) const = default;
  };
  // Spread over every bit (murmur3's finalizer): open addressing takes the
  // slot from the high bits and a tag from the low ones.
  struct KeyHash {
    size_t operator()(const Key& k) const {
      uint64_t h = (static_cast<uint64_t>(k.metric_id) << 32 | static_cast<uint32_t>(k.minor)) ^
                   (static_cast<uint64_t>(k.instance) * 0x9e3779b97f4a7c15ULL);
      h = (h ^ (h >> 33)) * 0xff51afd7ed558ccdULL;
      h = (h ^ (h >> 33)) * 0xc4ceb9fe1a85ec53ULL;
      return static_cast<size_t>(h ^ (h >> 33));
    }
  };
  struct Series {
    Key key;
    double value;
    Clock::time_point updated;
    uint64_t batch;
  };
  // The index holds positions in series_, hashed and compared by the key
  // there: each key is stored once (a map from keys held a second copy of
  // every key, 4.8 MB at 100,000 series). Looked up by a Key (transparent).
  struct IndexHash {
    using is_transparent = void;
    const std::vector<Series>* series;
    size_t operator()(uint32_t i) const { return KeyHash()((*series)[i].key); }
    size_t operator()(const Key& k) const { return KeyHash()(k); }
  };
  struct IndexEq {
    using is_transparent = void;
    const std::vector<Series>* series;
    bool operator()(uint32_t a, uint32_t b) const { return a == b; }
    bool operator()(const Key& k, uint32_t i) const { return (*series)[i].key == k; }
    bool operator()(uint32_t i, const Key& k) const { return (*series)[i].key == k; }
  };

  void RemoveLocked(size_t index) XPU_REQUIRES(mu_);
  // The position of `name` in names_, appended if new.
  uint32_t InternLocked(std::string_view name) XPU_REQUIRES(mu_);
  // A names_ of only the names series still use, once most are unused (a
  // daemon that renames its links must not grow it without bound).
  void PruneNamesLocked() XPU_REQUIRES(mu_);
  void RebuildLocked() XPU_REQUIRES(mu_);

  const Options options_;

  mutable Mutex mu_;
  // State below is protected by mu_.
  std::shared_ptr<const catalog::Catalog> catalog_ XPU_GUARDED_BY(mu_);
  std::chrono::milliseconds stale_after_ XPU_GUARDED_BY(mu_);
  std::vector<Series> series_ XPU_GUARDED_BY(mu_);
  std::shared_ptr<InstanceNames> names_ XPU_GUARDED_BY(mu_) =
      std::make_shared<InstanceNames>(1);  // position 0: no instance
  // Views of names_'s own strings, never a null view: an empty instance is
  // copied with memcpy when written.
  absl::flat_hash_map<std::string_view, uint32_t> name_ids_ XPU_GUARDED_BY(mu_){
      {std::string_view(names_->front()), 0}};
  // names_ by position, as views: what Apply compares each sample with (a
  // deque's lookup doubled its time).
  std::vector<std::string_view> name_views_ XPU_GUARDED_BY(mu_){std::string_view(names_->front())};
  // Open addressing: 5 bytes a slot (a node-based set took about 36 a
  // series, 3.7 MB at 100,000).
  absl::flat_hash_set<uint32_t, IndexHash, IndexEq> index_ XPU_GUARDED_BY(mu_){
      0, IndexHash{&series_}, IndexEq{&series_}};
  std::map<int32_t, DeviceLabels> devices_ XPU_GUARDED_BY(mu_);
  bool devices_known_ XPU_GUARDED_BY(mu_) = false;
  std::optional<Clock::time_point> first_apply_
      XPU_GUARDED_BY(mu_);                          // the first batch that stored anything
  bool identity_held_ XPU_GUARDED_BY(mu_) = false;  // rows of unknown identity left out of the set
  bool identity_expired_ XPU_GUARDED_BY(mu_) = false;
  bool dirty_ XPU_GUARDED_BY(mu_) = true;
  uint64_t generation_ XPU_GUARDED_BY(mu_) = 0;
  uint64_t batch_ XPU_GUARDED_BY(mu_) = 0;
  uint64_t dropped_total_ XPU_GUARDED_BY(mu_) = 0;
  std::optional<Clock::time_point> last_update_ XPU_GUARDED_BY(mu_);
  std::map<int32_t, Clock::time_point> device_updates_ XPU_GUARDED_BY(mu_);
  std::shared_ptr<const SeriesSet> set_ XPU_GUARDED_BY(mu_);
  std::vector<uint32_t> order_ XPU_GUARDED_BY(mu_);  // set_->rows[i] is series_[order_[i]]
  // hints_[i]: the series_ index sample i of the previous batch went to
  // (a guess: checked against the key before use).
  static constexpr uint32_t kNoHint = UINT32_MAX;
  // Instance names are let go only once at least this many are held.
  static constexpr size_t kPruneNamesFrom = 64;
  // Whether a series was removed since names were last looked over: only
  // then can a name have become unused (adding names keeps them used), so
  // a rebuild does not scan every series for nothing.
  bool names_maybe_unused_ XPU_GUARDED_BY(mu_) = false;
  std::vector<uint32_t> hints_ XPU_GUARDED_BY(mu_);
};

// xpu_device_data_age_seconds: how long ago each device's data last came
// from XDM, per device of known identity, with its series' labels (minor,
// uuid, model). It keeps growing through a stall and past stale-after, when
// the device's series are withdrawn. Thread-safe, like the store.
class DataAgeMetrics : public prometheus::Collectable {
 public:
  // `clock` is for tests; the store must outlive this.
  explicit DataAgeMetrics(const MetricStore* store, std::function<Clock::time_point()> clock = {})
      : store_(store), clock_(clock ? std::move(clock) : [] { return Clock::now(); }) {}
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  const MetricStore* store_;
  std::function<Clock::time_point()> clock_;
};

}  // namespace xpu::store
