#include "exposition/snapshot_writer.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <unordered_set>

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

// Copies `s` to `p`; returns the end.
char* Put(char* p, std::string_view s) {
  std::memcpy(p, s.data(), s.size());
  return p + s.size();
}

const char* kUnknownHelp = "Samples whose XDM metric ID the catalog does not know, by id.";

// The fill-in of the family that begins at `row`, if there is one, or
// null; one of another type is emptied unwritten (the snapshot's stands, as
// a clash between collectables does).
const SnapshotWriter::FillIn* FindFillIn(const store::Row& row,
                                         const SnapshotWriter::FillIns* fill_ins) {
  if (fill_ins == nullptr || fill_ins->empty() || row.entry == nullptr) return nullptr;
  const std::string_view name = row.entry->name;
  auto it = std::lower_bound(fill_ins->begin(), fill_ins->end(), name,
                             [](const auto& f, std::string_view n) { return f.name < n; });
  if (it == fill_ins->end() || it->name != name) return nullptr;
  *it->taken = true;
  const bool counter = row.entry->type == catalog::MetricType::kCounter;
  if (it->family->type !=
      (counter ? prometheus::MetricType::Counter : prometheus::MetricType::Gauge))
    return nullptr;
  return &*it;
}

// Writes the fill-in's samples of devices the family had no row for.
void WriteFillIn(const SnapshotWriter::FillIn* fill, const std::unordered_set<std::string>& uuids,
                 PageSink* sink, Format format) {
  AppendSamples(*fill->family, sink->buf(), format, nullptr,
                [&uuids](const prometheus::ClientMetric& m) {
                  for (const auto& l : m.label)
                    if (l.name == "uuid") return uuids.count(l.value) == 0;
                  return true;
                });
  sink->Check();
}

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

void SnapshotWriter::Append(const store::Snapshot& snap, PageSink* sink, Format format,
                            const FillIns* fill_ins) {
  if (!snap.set || snap.set->rows.empty()) return;
  const bool om = format == Format::kOpenMetrics;
  const store::SeriesSet& set = *snap.set;
  // `{minor="3",uuid="...",model="..."` once per device, for this scrape
  // (by minor too: minors missing from the device list share one labels).
  std::map<std::pair<int32_t, const store::DeviceLabels*>, std::string> fragments;
  const store::DeviceLabels* last_device = nullptr;
  int32_t last_minor = 0;
  const std::string* fragment = nullptr;
  std::string instance_label;  // `,link="` for the current family
  std::string escaped;         // a row's labels after the device's, when written out
  std::string line(1024, '\0');
  const FillIn* fill = nullptr;                // the current family's fill-in
  std::unordered_set<std::string> fill_uuids;  // the devices it has rows for
  for (size_t i = 0; i < set.rows.size(); ++i) {
    const store::Row& row = set.rows[i];
    if (i == 0 || !SameFamily(set.rows[i - 1], row)) {
      if (fill != nullptr) WriteFillIn(fill, fill_uuids, sink, format);
      fill = FindFillIn(row, fill_ins);
      fill_uuids.clear();
    }
    if (fill != nullptr) fill_uuids.insert(row.device->uuid);
    std::string* out = sink->buf();
    if (i == 0 || !SameFamily(set.rows[i - 1], row)) {
      const std::string_view help =
          row.entry ? std::string_view(row.entry->help) : std::string_view(kUnknownHelp);
      if (om) {
        // Catalog counters end in "_total" (CheckEntry), and units are
        // name suffixes, so both always apply.
        const bool counter = row.entry && row.entry->type == catalog::MetricType::kCounter;
        const std::string_view family = OmFamilyName(FamilyName(row), counter);
        AppendOmHeader(family, help, TypeName(row), UnitOf(family), out);
      } else {
        AppendHeader(FamilyName(row), help, TypeName(row), out);
      }
      instance_label.clear();
      if (row.entry != nullptr && !row.entry->instance_label.empty())
        instance_label.append(",").append(row.entry->instance_label).append("=\"");
    }
    if (fragment == nullptr || row.device != last_device || row.minor != last_minor) {
      auto [it, fresh] = fragments.try_emplace({row.minor, row.device});
      if (fresh) {
        std::string& f = it->second;
        f.append("{minor=\"").append(std::to_string(row.minor)).append("\",uuid=\"");
        AppendLabelValue(row.device->uuid, &f);
        f.append("\",model=\"");
        AppendLabelValue(row.device->model, &f);
        f.push_back('"');
      }
      last_device = row.device;
      last_minor = row.minor;
      fragment = &it->second;
    }
    // The labels after the device's: the family's instance label and its
    // value, or (unknown IDs, values that need escaping) written out into
    // `escaped` first.
    const bool written_out =
        row.entry == nullptr || (!instance_label.empty() && NeedsEscape(row.instance));
    if (written_out) {
      escaped.clear();
      if (row.entry == nullptr) {
        escaped.append(",id=\"").append(std::to_string(row.metric_id)).push_back('"');
        if (!row.instance.empty()) escaped.append(",instance_id=\"");
      } else {
        escaped.append(instance_label);
      }
      if (row.entry != nullptr || !row.instance.empty()) {
        AppendLabelValue(row.instance, &escaped);
        escaped.push_back('"');
      }
    }
    // The row, assembled in one buffer and appended once: a dozen
    // std::string appends per series would double the render time.
    const std::string& name = FamilyName(row);
    const size_t labels =
        written_out ? escaped.size() : instance_label.size() + row.instance.size() + 1;
    const size_t need = name.size() + fragment->size() + labels + kMaxValueChars + 3;
    if (line.size() < need) line.resize(std::max(need, 2 * line.size()));
    char* p = Put(line.data(), name);
    p = Put(p, *fragment);
    if (written_out) {
      p = Put(p, escaped);
    } else if (!instance_label.empty()) {
      p = Put(Put(p, instance_label), row.instance);
      *p++ = '"';
    }
    *p++ = '}';
    *p++ = ' ';
    p = WriteValue(snap.values[i], p);
    *p++ = '\n';
    out->append(line.data(), p);
    sink->Check();
  }
  if (fill != nullptr) WriteFillIn(fill, fill_uuids, sink, format);
}

void SnapshotWriter::Append(const store::Snapshot& snap, std::string* out, Format format) {
  PageSink sink(out);
  Append(snap, &sink, format);
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
