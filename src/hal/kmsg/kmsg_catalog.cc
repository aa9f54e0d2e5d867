#include "hal/kmsg/kmsg_catalog.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cstdio>

#include "common/duration.h"
#include "common/fault_code.h"
#include "common/yaml_util.h"
#include "hal/builtin_kmsg_patterns.h"  // generated: kBuiltinKmsgPatternsYaml
#include "hal/kmsg/kmsg.h"
#include "hal/pci/pci.h"

namespace xpu::hal {
namespace {

Status ParseEffect(const std::string& s, KmsgEffect* out) {
  if (s == "fault") {
    *out = KmsgEffect::kFault;
  } else if (s == "reset") {
    *out = KmsgEffect::kReset;
  } else if (s == "healthy") {
    *out = KmsgEffect::kHealthy;
  } else {
    return Status::InvalidArgument("effect must be fault, reset or healthy");
  }
  return Status::Ok();
}

std::string Scalar(const YAML::Node& n) { return n && n.IsScalar() ? n.as<std::string>() : ""; }

// Whether `regex` starts with '^' and then (past group openers and flags)
// an atom that cannot stand for a run of any text. Refused: no '^', '(?s',
// or a first atom '.', '\s', '\W', '\D', '\C', '\p', '\P' or a class that
// takes spaces ('[^...]', '[\s...]', '[ ...]'): each would reach a
// driver's words quoted inside another kernel message.
bool AnchoredAtTheDriver(const std::string& regex) {
  if (regex.empty() || regex[0] != '^') return false;
  size_t i = 1;
  while (i < regex.size() && regex[i] == '(') {  // group openers and flags
    ++i;
    if (i < regex.size() && regex[i] == '?') {
      const size_t end = regex.find_first_of(":)>", i);
      if (end == std::string::npos) return false;
      if (regex.compare(i, 2, "?P") == 0 && regex[end] == '>') {
        i = end + 1;  // (?P<name>
      } else {
        if (regex.find('s', i) < end) return false;  // (?s: '.' takes newlines too
        i = end + 1;
      }
    }
  }
  if (i >= regex.size()) return false;
  const std::string_view rest(regex.data() + i, regex.size() - i);
  for (const char* wild : {".", "\\s", "\\W", "\\D", "\\C", "\\p", "\\P", "[^", "[\\s", "[ "})
    if (rest.substr(0, std::string_view(wild).size()) == wild) return false;
  return true;
}

// One entry of `patterns`.
Status ParsePattern(const YAML::Node& p, const std::string& origin, size_t i, KmsgPattern* out) {
  const std::string section = "patterns[" + std::to_string(i) + "]";
  const std::string where = yaml::Where(origin, p) + ": " + section;
  if (Status k = yaml::CheckKeys(p, {"name", "driver", "regex", "effect", "code"}, origin, section);
      !k.ok())
    return k;
  KmsgPattern k;
  k.name = Scalar(p["name"]);
  k.driver = Scalar(p["driver"]);
  const std::string regex = Scalar(p["regex"]);
  if (k.name.empty() || k.driver.empty() || regex.empty())
    return Status::InvalidArgument(where + ": name, driver and regex are required");
  if (regex.size() > kMaxKmsgPatternLength)
    return Status::InvalidArgument(where + ": regex longer than " +
                                   std::to_string(kMaxKmsgPatternLength) + " characters");
  // A kernel line's author is known only from where its text starts (the
  // driver's own prefix): a pattern found anywhere in the text would match
  // a driver's words quoted inside another message (a file name in the
  // kernel's NULL-argv exec warning, a process name in a segfault line).
  if (!AnchoredAtTheDriver(regex))
    return Status::InvalidArgument(where +
                                   ": regex must be anchored at the start of the driver's own "
                                   "message ('^NVRM: ...', '^amdgpu ...'), with no wildcard "
                                   "('.', '\\s', '[^...]') first");
  if (Status s = ParseEffect(p["effect"] ? Scalar(p["effect"]) : "fault", &k.effect); !s.ok())
    return Status::InvalidArgument(where + ": " + s.message());
  RE2::Options options;
  options.set_log_errors(false);
  options.set_max_mem(1 << 20);  // bounds what one pattern may compile to
  auto re = std::make_shared<const RE2>(regex, options);
  if (!re->ok()) return Status::InvalidArgument(where + ": bad regex: " + re->error());
  // The same, past what the first atom's spelling tells (an empty or a wild
  // alternative, '\S', a class of every byte): what RE2 says a match may
  // begin with must be a printable character, not any, nor a space. Asked
  // of the pattern read as Latin-1, where (?i) takes no Kelvin sign for k
  // nor long s for s (in UTF-8 those begin with bytes past ASCII), while a
  // class of any character still reaches past it.
  RE2::Options latin1 = options;
  latin1.set_encoding(RE2::Options::EncodingLatin1);
  const RE2 probe(regex, latin1);
  if (std::string least, most;
      !probe.ok() || !probe.PossibleMatchRange(&least, &most, 1) || least.empty() || most.empty() ||
      static_cast<unsigned char>(least[0]) <= ' ' || static_cast<unsigned char>(most[0]) > 0x7f)
    return Status::InvalidArgument(where +
                                   ": regex must be anchored at the start of the driver's own "
                                   "message: a match may begin with any character, or a space");
  for (const auto& [name, index] : re->NamedCapturingGroups()) {
    if (name == "address") {
      k.address_group = index;
    } else if (name == "number") {
      k.number_group = index;
    } else {
      return Status::InvalidArgument(where + ": unknown group '" + name +
                                     "' (address and number are known)");
    }
  }
  if (re->NumberOfCapturingGroups() > 7)
    return Status::InvalidArgument(where + ": more than 7 capturing groups");
  k.regex = std::move(re);
  k.numbered = k.number_group != 0;
  if (k.effect == KmsgEffect::kFault) {
    const std::string code = NormalizeFaultCode(Scalar(p["code"]));
    if (code.empty()) return Status::InvalidArgument(where + ": code must be 1..8 hex digits");
    k.code = static_cast<uint32_t>(std::stoul(code, nullptr, 16));
    if (k.numbered && (k.code & 0xFFFF) != 0)
      return Status::InvalidArgument(where +
                                     ": a numbered pattern's code ends in 0000 (the "
                                     "number, up to 65535, is added to it)");
  } else if (p["code"]) {
    return Status::InvalidArgument(where + ": a " + Scalar(p["effect"]) + " pattern has no code");
  }
  *out = std::move(k);
  return Status::Ok();
}

}  // namespace

Status KmsgCatalog::Parse(const std::string& yaml_text, const std::string& origin,
                          std::shared_ptr<const KmsgCatalog>* out) {
  auto cat = std::make_shared<KmsgCatalog>();
  Status parsed = yaml::ParseDocument(yaml_text, origin, [&](const YAML::Node& root) {
    if (Status k =
            yaml::CheckKeys(root, {"event_active_for", "drivers", "states", "patterns"}, origin);
        !k.ok())
      return k;
    if (root["event_active_for"]) {
      auto d = ParseDuration(Scalar(root["event_active_for"]));
      if (!d || *d < std::chrono::seconds(1) || *d > std::chrono::hours(24 * 7))
        return Status::InvalidArgument(yaml::Where(origin, root["event_active_for"]) +
                                       ": event_active_for must be a duration from 1s to 7d");
      cat->event_active_for_ = std::chrono::duration_cast<std::chrono::seconds>(*d);
    }
    for (const YAML::Node& d : root["drivers"]) {
      if (Status k = yaml::CheckKeys(d, {"name", "prefix"}, origin, "drivers"); !k.ok()) return k;
      Driver driver{Scalar(d["name"]), Scalar(d["prefix"])};
      if (driver.name.empty() || driver.prefix.empty())
        return Status::InvalidArgument(yaml::Where(origin, d) + ": a driver has a name and prefix");
      cat->drivers_.push_back(std::move(driver));
    }
    for (const YAML::Node& s : root["states"]) {
      const std::string code = NormalizeFaultCode(Scalar(s));
      if (code.empty())
        return Status::InvalidArgument(yaml::Where(origin, s) + ": states lists fault codes");
      cat->states_.push_back(code);
    }
    const YAML::Node patterns = root["patterns"];
    if (!patterns || !patterns.IsSequence())
      return Status::InvalidArgument(origin + ": 'patterns' list missing");
    if (patterns.size() > kMaxKmsgPatterns)
      return Status::InvalidArgument(origin + ": more than " + std::to_string(kMaxKmsgPatterns) +
                                     " patterns");
    for (size_t i = 0; i < patterns.size(); ++i) {
      KmsgPattern k;
      if (Status s = ParsePattern(patterns[i], origin, i, &k); !s.ok()) return s;
      cat->patterns_.push_back(std::move(k));
    }
    return Status::Ok();
  });
  if (!parsed.ok()) return parsed;
  *out = std::move(cat);
  return Status::Ok();
}

std::shared_ptr<const KmsgCatalog> KmsgCatalog::Builtin() {
  static const std::shared_ptr<const KmsgCatalog> builtin =
      yaml::ParseBuiltin<KmsgCatalog>(kBuiltinKmsgPatternsYaml, "kmsg_patterns.yaml (built in)");
  return builtin;
}

Status KmsgCatalog::LoadFile(const std::string& path, std::shared_ptr<const KmsgCatalog>* out) {
  return yaml::LoadFile<KmsgCatalog>(path, "kernel-log catalog", out);
}

std::optional<KmsgMatch> KmsgCatalog::Match(std::string_view text,
                                            const std::string& dict_device) const {
  re2::StringPiece input(text.data(), text.size());
  for (const KmsgPattern& p : patterns_) {
    re2::StringPiece groups[8];
    const int n = 1 + std::max(p.address_group, p.number_group);
    if (n > 8 || !p.regex->Match(input, 0, input.size(), RE2::ANCHOR_START, groups, n)) continue;
    KmsgMatch m;
    m.pattern = &p;
    if (p.address_group != 0) {
      // NVIDIA's form has no function digit (function 0) and may have an
      // 8-digit domain: CanonicalPciAddress reads both.
      std::string a(groups[p.address_group].data(), groups[p.address_group].size());
      if (a.find('.') == std::string::npos) a += ".0";
      m.address = CanonicalPciAddress(a);
      // The kernel's own word on the device (dev_printk's DEVICE entry)
      // must agree with the text's: a line about another device is not
      // this one's fault.
      if (!dict_device.empty() && m.address != dict_device) continue;
    }
    if (m.address.empty()) m.address = dict_device;
    if (m.address.empty()) m.address = NormalizePciAddress(text);
    if (p.effect == KmsgEffect::kFault) {
      uint64_t code = p.code;
      if (p.numbered) {
        const re2::StringPiece num = groups[p.number_group];
        uint64_t v = 0;
        bool digits = !num.empty();
        for (char c : num) {
          if (c < '0' || c > '9' || v > 0xFFFF) digits = false;
          if (digits) v = v * 10 + static_cast<uint64_t>(c - '0');
        }
        if (!digits || v > 0xFFFF) continue;  // not a number we map: the next pattern may
        code += v;
      }
      char buf[16];
      std::snprintf(buf, sizeof buf, "0x%08llX",
                    static_cast<unsigned long long>(code & 0xFFFFFFFF));
      m.code = buf;
    }
    return m;
  }
  return std::nullopt;
}

std::string KmsgCatalog::DriverOf(std::string_view text) const {
  for (const Driver& d : drivers_)
    if (text.substr(0, d.prefix.size()) == d.prefix) return d.name;
  return "";
}

bool KmsgCatalog::IsState(const std::string& code) const {
  return std::find(states_.begin(), states_.end(), code) != states_.end();
}

}  // namespace xpu::hal
