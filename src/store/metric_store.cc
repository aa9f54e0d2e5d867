#include "store/metric_store.h"

#include <algorithm>

#include "common/metric_family.h"

namespace xpu::store {

MetricStore::MetricStore(std::shared_ptr<const catalog::Catalog> catalog, Options options)
    : options_(options), catalog_(std::move(catalog)), stale_after_(options.stale_after) {
  if (!catalog_) throw std::invalid_argument("MetricStore needs a catalog");
  if (options_.stale_after.count() <= 0) throw std::invalid_argument("stale_after must be > 0");
}

ApplyStats MetricStore::Apply(const std::vector<Sample>& batch, Clock::time_point now) {
  ApplyStats stats;
  MutexLock lock(mu_);
  const uint64_t b = ++batch_;
  // One guess per position; a much smaller batch (a poll of a subset) does
  // not shrink it, a larger one grows it.
  if (hints_.size() < batch.size()) hints_.resize(batch.size(), kNoHint);
  Key probe{};
  int32_t last_minor = -1;
  for (const Sample& s : batch) {
    if (s.minor != last_minor) {  // batches come grouped by device: one map write each
      last_minor = s.minor;
      if (!devices_known_ || devices_.count(s.minor) > 0) {
        auto du = device_updates_.find(s.minor);
        if (du != device_updates_.end()) {
          du->second = now;
        } else if (device_updates_.size() < options_.max_devices) {
          device_updates_.emplace(s.minor, now);
        }
      }
    }
    // XDM sends its series in the same order every time: the series sample
    // i went to last batch is the first guess, checked against the key, so
    // most samples cost no hash lookup (and the lock is held that much
    // shorter for the scrapes that wait on it).
    const size_t i = static_cast<size_t>(&s - batch.data());
    uint32_t at = hints_[i];
    if (at >= series_.size() || series_[at].key.minor != s.minor ||
        series_[at].key.metric_id != s.metric_id ||
        name_views_[series_[at].key.instance] != s.instance) {
      probe.minor = s.minor;
      probe.metric_id = s.metric_id;
      const auto name = name_ids_.find(std::string_view(s.instance));
      auto it = index_.end();
      if (name != name_ids_.end()) {
        probe.instance = name->second;
        it = index_.find(probe);
      }
      if (it == index_.end()) {
        hints_[i] = kNoHint;
        if (devices_known_ && devices_.count(s.minor) == 0) {
          ++stats.unknown_device;
          continue;
        }
        if (device_updates_.count(s.minor) == 0) {  // a minor beyond max_devices
          ++stats.over_device_cap;
          continue;
        }
        if (series_.size() >= options_.max_series) {
          ++stats.dropped;
          continue;
        }
        if (name == name_ids_.end()) probe.instance = InternLocked(s.instance);
        hints_[i] = static_cast<uint32_t>(series_.size());
        series_.push_back(Series{probe, s.value, now, b});
        index_.insert(hints_[i]);  // hashed by the key just stored
        dirty_ = true;
        ++stats.applied;
        continue;
      }
      at = hints_[i] = *it;
    }
    Series& ser = series_[at];
    if (ser.batch == b) ++stats.duplicates;
    ser.value = s.value;
    ser.updated = now;
    ser.batch = b;
    ++stats.applied;
  }
  dropped_total_ += stats.dropped;
  if (stats.applied > 0) last_update_ = now;
  if (stats.applied > 0 && !first_apply_) first_apply_ = now;
  return stats;
}

void MetricStore::RemoveLocked(size_t i) {
  names_maybe_unused_ = true;
  // Each position is hashed by the key at it: taken out while its key is
  // still there, put in once the key that moves has moved.
  index_.erase(static_cast<uint32_t>(i));
  if (i + 1 != series_.size()) {
    index_.erase(static_cast<uint32_t>(series_.size() - 1));
    series_[i] = series_.back();
    series_.pop_back();
    index_.insert(static_cast<uint32_t>(i));
  } else {
    series_.pop_back();
  }
  dirty_ = true;
}

uint32_t MetricStore::InternLocked(std::string_view name) {
  if (auto it = name_ids_.find(name); it != name_ids_.end()) return it->second;
  // Names series left (a reload, a device gone) between two scrapes'
  // rebuilds: let go here too, so that no order of calls grows them.
  if (names_->size() >= kPruneNamesFrom && names_->size() > 2 * series_.size()) PruneNamesLocked();
  const auto id = static_cast<uint32_t>(names_->size());
  names_->emplace_back(name);
  name_views_.emplace_back(names_->back());  // the copy held, never moved
  name_ids_.emplace(name_views_.back(), id);
  return id;
}

void MetricStore::PruneNamesLocked() {
  if (names_->size() < kPruneNamesFrom || !names_maybe_unused_) return;
  names_maybe_unused_ = false;
  std::vector<uint32_t> moved(names_->size(), kNoHint);
  moved[0] = 0;
  size_t used = 1;
  for (const Series& ser : series_) {
    if (moved[ser.key.instance] == kNoHint) moved[ser.key.instance] = static_cast<uint32_t>(used++);
  }
  if (used * 2 > names_->size()) return;
  // A new list: the sets given out keep the old one alive as long as they
  // are read.
  auto names = std::make_shared<InstanceNames>(used);
  for (size_t i = 0; i < moved.size(); ++i) {
    if (moved[i] != kNoHint) (*names)[moved[i]] = (*names_)[i];
  }
  names_ = std::move(names);
  name_ids_.clear();
  name_views_.assign(names_->begin(), names_->end());
  for (size_t i = 0; i < name_views_.size(); ++i)
    name_ids_.emplace(name_views_[i], static_cast<uint32_t>(i));
  // Hashed by the key: every position again once the keys are renamed.
  index_.clear();
  index_.reserve(series_.size());
  for (Series& ser : series_) ser.key.instance = moved[ser.key.instance];
  for (size_t i = 0; i < series_.size(); ++i) index_.insert(static_cast<uint32_t>(i));
  std::fill(hints_.begin(), hints_.end(), kNoHint);
}

size_t MetricStore::instance_names() const {
  MutexLock lock(mu_);
  return names_->size();
}

void MetricStore::FollowDevices(DeviceRegistry* registry) {
  registry->OnXdmDevicesChanged([this](const std::vector<DeviceInfo>& devices) {
    std::map<int32_t, DeviceLabels> labels;
    for (const DeviceInfo& d : devices) labels[d.minor] = {d.uuid, d.model};
    SetDevices(labels);
  });
}

void MetricStore::SetDevices(const std::map<int32_t, DeviceLabels>& devices) {
  MutexLock lock(mu_);
  if (devices_known_ && devices == devices_) return;
  devices_ = devices;
  devices_known_ = true;
  dirty_ = true;
  for (size_t i = series_.size(); i-- > 0;) {
    if (devices_.count(series_[i].key.minor) == 0) RemoveLocked(i);
  }
  for (auto it = device_updates_.begin(); it != device_updates_.end();)
    it = devices_.count(it->first) ? std::next(it) : device_updates_.erase(it);
}

void MetricStore::SetCatalog(std::shared_ptr<const catalog::Catalog> catalog) {
  if (!catalog) throw std::invalid_argument("MetricStore needs a catalog");
  MutexLock lock(mu_);
  for (size_t i = series_.size(); i-- > 0;) {
    const uint32_t id = series_[i].key.metric_id;
    const catalog::Entry* was = catalog_->Find(id);
    const catalog::Entry* now = catalog->Find(id);
    // Unknown IDs stay unknown, or become known: either way the value was
    // stored unscaled only if it was unknown before.
    const bool same = was == nullptr ? now == nullptr : now != nullptr && *was == *now;
    if (!same) RemoveLocked(i);
  }
  catalog_ = std::move(catalog);
  dirty_ = true;
}

std::shared_ptr<const catalog::Catalog> MetricStore::catalog() const {
  MutexLock lock(mu_);
  return catalog_;
}

size_t MetricStore::Drop(const std::function<bool(int32_t, uint32_t)>& drop) {
  MutexLock lock(mu_);
  size_t n = 0;
  for (size_t i = series_.size(); i-- > 0;) {
    if (!drop(series_[i].key.minor, series_[i].key.metric_id)) continue;
    RemoveLocked(i);
    ++n;
  }
  return n;
}

void MetricStore::RebuildLocked() {
  PruneNamesLocked();
  // Family order: catalog order, unknown IDs after, by ID.
  std::unordered_map<uint32_t, size_t> rank;
  const auto& entries = catalog_->entries();
  for (size_t i = 0; i < entries.size(); ++i) rank[entries[i].id] = i;
  auto rank_of = [&](uint32_t id) -> std::pair<size_t, uint32_t> {
    auto it = rank.find(id);
    return it == rank.end() ? std::make_pair(entries.size(), id) : std::make_pair(it->second, 0u);
  };
  order_.clear();
  order_.reserve(series_.size());
  for (size_t i = 0; i < series_.size(); ++i) {
    // Held back: a device whose identity is not known yet.
    if (identity_held_ && devices_.count(series_[i].key.minor) == 0) continue;
    order_.push_back(static_cast<uint32_t>(i));
  }
  // The comparator runs here, under mu_.
  const Series* rows = series_.data();
  const std::string_view* names = name_views_.data();
  std::sort(order_.begin(), order_.end(), [&](uint32_t a, uint32_t b) {
    const Key& x = rows[a].key;
    const Key& y = rows[b].key;
    auto rx = rank_of(x.metric_id), ry = rank_of(y.metric_id);
    if (rx != ry) return rx < ry;
    if (x.minor != y.minor) return x.minor < y.minor;
    const std::string_view xi = names[x.instance];
    const std::string_view yi = names[y.instance];
    if (xi.size() != yi.size()) return xi.size() < yi.size();
    return xi < yi;  // numeric instances sort naturally
  });
  auto set = std::make_shared<SeriesSet>();
  set->generation = ++generation_;
  set->catalog = catalog_;
  set->names = names_;
  set->rows.reserve(order_.size());
  set->devices = devices_;
  for (uint32_t i : order_) {
    const Key& k = series_[i].key;
    auto dev = set->devices.find(k.minor);
    set->rows.push_back(Row{catalog_->Find(k.metric_id), k.metric_id, k.minor,
                            name_views_[k.instance],
                            dev == set->devices.end() ? &set->unknown_device : &dev->second});
  }
  set_ = std::move(set);
  dirty_ = false;
}

Snapshot MetricStore::Snap(Clock::time_point now) {
  Snapshot snap;
  MutexLock lock(mu_);
  const Clock::time_point cutoff = now - stale_after_;
  for (size_t i = series_.size(); i-- > 0;) {
    if (series_[i].updated < cutoff) RemoveLocked(i);
  }
  const bool held = !devices_known_ && first_apply_ && now - *first_apply_ < options_.identity_wait;
  if (held != identity_held_) {
    identity_held_ = held;
    dirty_ = true;
  }
  if (!devices_known_ && first_apply_ && !held) identity_expired_ = true;
  if (dirty_ || !set_) RebuildLocked();
  snap.set = set_;
  snap.values.resize(order_.size());
  for (size_t i = 0; i < order_.size(); ++i) snap.values[i] = series_[order_[i]].value;
  return snap;
}

void MetricStore::set_stale_after(std::chrono::milliseconds stale_after) {
  if (stale_after.count() <= 0) throw std::invalid_argument("stale_after must be > 0");
  MutexLock lock(mu_);
  stale_after_ = stale_after;
}

std::chrono::milliseconds MetricStore::stale_after() const {
  MutexLock lock(mu_);
  return stale_after_;
}

size_t MetricStore::series_count() const {
  MutexLock lock(mu_);
  return series_.size();
}

uint64_t MetricStore::dropped_total() const {
  MutexLock lock(mu_);
  return dropped_total_;
}

std::vector<MetricStore::DeviceUpdate> MetricStore::device_updates() const {
  MutexLock lock(mu_);
  std::vector<DeviceUpdate> out;
  out.reserve(device_updates_.size());
  for (const auto& [minor, when] : device_updates_) {
    auto d = devices_.find(minor);
    out.push_back({minor, d != devices_.end() ? std::optional(d->second) : std::nullopt, when});
  }
  return out;
}

std::vector<prometheus::MetricFamily> DataAgeMetrics::Collect() const {
  prometheus::MetricFamily f = NewFamily(
      "xpu_device_data_age_seconds",
      "Seconds since the device's data last came from XDM: grows through a daemon stall, and "
      "past stale-after, when its series are withdrawn.");
  const Clock::time_point now = clock_();
  for (const MetricStore::DeviceUpdate& d : store_->device_updates()) {
    if (!d.labels) continue;  // its series wait for the device list too
    f.metric.push_back(GaugeSample(
        {{"minor", std::to_string(d.minor)}, {"uuid", d.labels->uuid}, {"model", d.labels->model}},
        std::max(0.0, std::chrono::duration<double>(now - d.updated).count())));
  }
  if (f.metric.empty()) return {};
  return {std::move(f)};
}

bool MetricStore::identity_pending() const {
  MutexLock lock(mu_);
  return identity_held_;
}

bool MetricStore::identity_wait_expired() const {
  MutexLock lock(mu_);
  return identity_expired_ && !devices_known_;
}

std::optional<Clock::time_point> MetricStore::last_update() const {
  MutexLock lock(mu_);
  return last_update_;
}

}  // namespace xpu::store
