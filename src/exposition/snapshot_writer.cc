#include "exposition/snapshot_writer.h"

#include "exposition/text_format.h"

namespace xpu::exposition {
namespace {

const char* TypeName(const store::Row& row) {
  if (row.entry == nullptr) return "gauge";
  return row.entry->type == catalog::MetricType::kCounter ? "counter" : "gauge";
}

const std::string& FamilyName(const store::Row& row) {
  static const std::string unknown = kUnknownFamily;
  return row.entry ? row.entry->name : unknown;
}

bool SameFamily(const store::Row& a, const store::Row& b) {
  if (a.entry != nullptr || b.entry != nullptr) return a.entry == b.entry;
  return true;  // all unknown IDs share one family
}

const char* kUnknownHelp = "Samples whose XDM metric ID the catalog does not know, by id.";

}  // namespace

std::vector<std::pair<std::string, std::string>> RowLabels(const store::Row& row) {
  std::vector<std::pair<std::string, std::string>> labels;
  labels.emplace_back("minor", std::to_string(row.minor));
  labels.emplace_back("uuid", row.device->uuid);
  labels.emplace_back("model", row.device->model);
  if (row.entry == nullptr) {
    labels.emplace_back("id", std::to_string(row.metric_id));
    if (!row.instance.empty()) labels.emplace_back("instance_id", row.instance);
  } else if (!row.entry->instance_label.empty()) {
    labels.emplace_back(row.entry->instance_label, row.instance);
  }
  return labels;
}

std::shared_ptr<const SnapshotWriter::Rendered> SnapshotWriter::Render(const store::SeriesSet& set,
                                                                       Format format) {
  const bool om = format == Format::kOpenMetrics;
  std::shared_ptr<const Rendered>& cache = cache_[om ? 1 : 0];
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (cache && cache->generation == set.generation) return cache;
  }
  auto r = std::make_shared<Rendered>();
  r->generation = set.generation;
  r->offsets.reserve(set.rows.size() + 1);
  for (size_t i = 0; i < set.rows.size(); ++i) {
    const store::Row& row = set.rows[i];
    r->offsets.push_back(r->text.size());
    if (i == 0 || !SameFamily(set.rows[i - 1], row)) {
      const std::string_view help =
          row.entry ? std::string_view(row.entry->help) : std::string_view(kUnknownHelp);
      if (om) {
        // Catalog counters end in "_total" (CheckEntry), and units are
        // name suffixes, so both always apply.
        const bool counter = row.entry && row.entry->type == catalog::MetricType::kCounter;
        const std::string_view family = OmFamilyName(FamilyName(row), counter);
        AppendOmHeader(family, help, TypeName(row), UnitOf(family), &r->text);
      } else {
        AppendHeader(FamilyName(row), help, TypeName(row), &r->text);
      }
    }
    r->text.append(FamilyName(row));
    AppendLabels(RowLabels(row), &r->text);
    r->text.push_back(' ');
  }
  r->offsets.push_back(r->text.size());
  std::lock_guard<std::mutex> lock(mu_);
  if (!cache || cache->generation < r->generation) cache = r;
  return r;
}

void SnapshotWriter::Append(const store::Snapshot& snap, std::string* out, Format format) {
  if (!snap.set || snap.set->rows.empty()) return;
  std::shared_ptr<const Rendered> r = Render(*snap.set, format);
  out->reserve(out->size() + r->text.size() + snap.values.size() * 16);
  const char* base = r->text.data();
  for (size_t i = 0; i < snap.values.size(); ++i) {
    out->append(base + r->offsets[i], r->offsets[i + 1] - r->offsets[i]);
    AppendValue(snap.values[i], out);
    out->push_back('\n');
  }
}

std::vector<prometheus::MetricFamily> SnapshotWriter::ToFamilies(const store::Snapshot& snap) {
  std::vector<prometheus::MetricFamily> families;
  if (!snap.set) return families;
  for (size_t i = 0; i < snap.set->rows.size(); ++i) {
    const store::Row& row = snap.set->rows[i];
    if (i == 0 || !SameFamily(snap.set->rows[i - 1], row)) {
      prometheus::MetricFamily f;
      f.name = FamilyName(row);
      f.help = row.entry ? row.entry->help : kUnknownHelp;
      f.type = row.entry && row.entry->type == catalog::MetricType::kCounter
                   ? prometheus::MetricType::Counter
                   : prometheus::MetricType::Gauge;
      families.push_back(std::move(f));
    }
    prometheus::ClientMetric m;
    for (auto& [k, v] : RowLabels(row)) m.label.push_back({k, v});
    if (families.back().type == prometheus::MetricType::Counter) {
      m.counter.value = snap.values[i];
    } else {
      m.gauge.value = snap.values[i];
    }
    families.back().metric.push_back(std::move(m));
  }
  return families;
}

}  // namespace xpu::exposition
