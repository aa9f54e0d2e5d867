#include "store/exemplars.h"

#include <algorithm>

namespace xpu::store {

bool ExemplarStore::Fits(const Exemplar& e) {
  size_t runes = 0;
  auto count = [&](const std::string& s) {
    for (unsigned char c : s) runes += (c & 0xC0) != 0x80 ? 1 : 0;
  };
  for (const auto& [k, v] : e.labels) {
    count(k);
    count(v);
  }
  return runes <= kMaxExemplarRunes;
}

std::string ExemplarStore::Key(const std::string& family, LabelPairs labels) {
  std::sort(labels.begin(), labels.end());
  std::string key = family;
  for (const auto& [k, v] : labels) {
    key.push_back('\0');
    key.append(k).push_back('\0');
    key.append(v);
  }
  return key;
}

bool ExemplarStore::Set(const std::string& family, const LabelPairs& labels, Exemplar e) {
  if (!Fits(e)) return false;
  std::string key = Key(family, labels);
  MutexLock lock(mu_);
  auto it = by_series_.find(key);
  if (it == by_series_.end()) {
    if (by_series_.size() >= max_series_) {
      ++refused_;
      return false;
    }
    by_series_.emplace(std::move(key), std::move(e));
    families_.insert(family);
  } else {
    it->second = std::move(e);
  }
  return true;
}

std::optional<Exemplar> ExemplarStore::Find(const std::string& family,
                                            const LabelPairs& labels) const {
  const std::string key = Key(family, labels);
  MutexLock lock(mu_);
  auto it = by_series_.find(key);
  if (it == by_series_.end()) return std::nullopt;
  return it->second;
}

bool ExemplarStore::HasFamily(const std::string& family) const {
  MutexLock lock(mu_);
  return families_.count(family) != 0;
}

size_t ExemplarStore::refused() const {
  MutexLock lock(mu_);
  return refused_;
}

}  // namespace xpu::store
