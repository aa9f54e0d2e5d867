#include "hal/kmsg/kmsg.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <functional>
#include <utility>

#include "hal/pci/pci.h"

namespace xpu::hal {
namespace {

bool ParseU64(std::string_view s, uint64_t* out) {
  if (s.empty() || s.size() > 20) return false;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && end == s.data() + s.size();
}

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// The kernel's \xNN escapes, undone; a '\' not followed by xNN is kept.
std::string Unescape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size() && s[i + 1] == 'x') {
      const int hi = HexDigit(s[i + 2]), lo = HexDigit(s[i + 3]);
      if (hi >= 0 && lo >= 0) {
        out.push_back(static_cast<char>(hi * 16 + lo));
        i += 3;
        continue;
      }
    }
    out.push_back(s[i]);
  }
  return out;
}

// Reads "dddd:bb:dd.f" or "dddd:bb:dd" (NVIDIA's form) at `s`, the domain
// of 4 to 8 hex digits (Intel VMD's are 10000 and up); returns the
// normalised address or "".
std::string AddressAt(std::string_view s) {
  // domain(4-8):bus(2):device(2)[.function(1)]
  const auto hex = [](char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; };
  size_t n = 0;  // the domain's digits
  while (n < s.size() && n <= 8 && hex(s[n])) ++n;
  if (n < 4 || n > 8) return "";
  const std::string_view rest = s.substr(n);  // ":bb:dd[.f]"
  if (rest.size() < 6 || rest[0] != ':' || rest[3] != ':') return "";
  if (!IsHex(rest.substr(1, 2)) || !IsHex(rest.substr(4, 2))) return "";
  if (rest.size() > 6 && hex(rest[6])) return "";
  std::string address(s.substr(0, n + 6));
  if (rest.size() >= 7 && rest[6] == '.') {
    if (rest.size() < 8 || rest[7] < '0' || rest[7] > '7') return "";  // not a function
    if (rest.size() > 8 && hex(rest[8])) return "";
    address += rest.substr(6, 2);
  } else {
    address += ".0";  // NVIDIA's form: function 0
  }
  return CanonicalPciAddress(address);  // the one spelling the joins use
}

}  // namespace

Status ParseKmsgRecord(std::string_view raw, KmsgRecord* out) {
  if (raw.size() > kKmsgMaxRecord)
    return Status::InvalidArgument("record longer than " + std::to_string(kKmsgMaxRecord) +
                                   " bytes");
  const size_t semi = raw.find(';');
  const size_t first_nl = raw.find('\n');
  if (semi == std::string_view::npos || (first_nl != std::string_view::npos && first_nl < semi))
    return Status::InvalidArgument("record has no ';' after its prefix");
  std::string_view prefix = raw.substr(0, semi);
  uint64_t fields[3] = {0, 0, 0};
  for (uint64_t& f : fields) {
    const size_t comma = prefix.find(',');
    if (comma == std::string_view::npos || !ParseU64(prefix.substr(0, comma), &f))
      return Status::InvalidArgument("record prefix is not <level>,<sequence>,<time>,<flags>");
    prefix.remove_prefix(comma + 1);
  }
  const std::string_view flags = prefix.substr(0, prefix.find(','));
  if (flags.size() != 1 || (flags[0] != '-' && flags[0] != 'c' && flags[0] != '+'))
    return Status::InvalidArgument("record flags are not '-', 'c' or '+'");
  if (fields[0] > 2047)  // the kernel's facility is 8 bits, then 3 of priority
    return Status::InvalidArgument("record level out of range");
  KmsgRecord r;
  r.facility = static_cast<int>(fields[0] >> 3);
  r.priority = static_cast<int>(fields[0] & 7);
  r.sequence = fields[1];
  r.timestamp_us = fields[2];
  r.flags = flags[0];
  std::string_view rest = raw.substr(semi + 1);
  const size_t nl = rest.find('\n');
  r.text = Unescape(rest.substr(0, nl));
  rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
  // The dictionary: " KEY=VALUE" lines.
  while (!rest.empty()) {
    const size_t end = rest.find('\n');
    std::string_view line = rest.substr(0, end);
    rest = end == std::string_view::npos ? std::string_view() : rest.substr(end + 1);
    if (line.empty()) continue;
    if (line[0] != ' ')
      return Status::InvalidArgument("record continuation line does not start with a space");
    line.remove_prefix(1);
    const size_t eq = line.find('=');
    if (eq == 0 || eq == std::string_view::npos)
      return Status::InvalidArgument("record dictionary line is not KEY=VALUE");
    if (r.dict.size() < 16) r.dict[std::string(line.substr(0, eq))] = Unescape(line.substr(eq + 1));
  }
  *out = std::move(r);
  return Status::Ok();
}

std::string NormalizePciAddress(std::string_view text) {
  for (size_t i = 0; i + 10 <= text.size(); ++i) {
    if (!std::isxdigit(static_cast<unsigned char>(text[i]))) continue;
    if (i > 0 && std::isxdigit(static_cast<unsigned char>(text[i - 1]))) continue;
    std::string a = AddressAt(text.substr(i));
    if (!a.empty()) return a;
  }
  return "";
}

bool IsPacketLog(std::string_view text) {
  for (size_t at = text.find("IN="); at != std::string_view::npos; at = text.find("IN=", at + 3)) {
    const size_t end = text.find(' ', at + 3);  // the interface's name, maybe empty
    if (end == std::string_view::npos || text.substr(end, 5) != " OUT=") continue;
    // And the packet's own fields after them (an IP packet's addresses and
    // length, an ARP header, ebtables' MAC line): more than the 15 bytes of
    // a process name, which a driver's line may carry ("name=IN= OUT=").
    const std::string_view rest = text.substr(end);
    const auto has = [&](std::string_view field) {
      return rest.find(field) != std::string_view::npos;
    };
    if ((has(" SRC=") && has(" DST=") && has(" LEN=")) || (has(" HTYPE=") && has(" OPCODE=")) ||
        has(" MAC source = ") || has(" MACSRC="))
      return true;
    // A frame that is neither IP nor ARP (LLDP, EAPOL: bridge and netdev
    // logs) shows its MAC header alone: "MAC=" and six bytes or more.
    for (size_t m = rest.find(" MAC="); m != std::string_view::npos;
         m = rest.find(" MAC=", m + 5)) {
      const std::string_view mac = rest.substr(m + 5, 17);
      bool bytes = mac.size() == 17;
      for (size_t k = 0; bytes && k < 17; ++k)
        bytes = k % 3 == 2 ? mac[k] == ':' : std::isxdigit(static_cast<unsigned char>(mac[k])) != 0;
      if (bytes) return true;
    }
  }
  return false;
}

KmsgBootMemory::Verdict KmsgBootMemory::Restart(const Seen& first) {
  seen_.clear();
  first_ = first;
  seen_.push_back(first);
  return Verdict::kNewBoot;
}

void KmsgBootMemory::Remember(size_t at, const Seen& s) {
  seen_.insert(seen_.begin() + static_cast<std::ptrdiff_t>(at), s);
  if (seen_.size() > kKmsgRememberedRecords) seen_.pop_front();
}

KmsgBootMemory::Verdict KmsgBootMemory::NoteOfOneBoot(uint64_t sequence, uint64_t stamp_us,
                                                      std::string_view text) {
  pass_last_ = sequence;
  if (!seen_.empty() && sequence <= seen_.back().sequence) return Verdict::kReadAlready;
  const Seen s{sequence, stamp_us, std::hash<std::string_view>{}(text)};
  if (seen_.empty()) first_ = s;
  Remember(seen_.size(), s);
  return Verdict::kNew;
}

KmsgBootMemory::Verdict KmsgBootMemory::Note(uint64_t sequence, uint64_t stamp_us,
                                             std::string_view text) {
  const Seen s{sequence, stamp_us, std::hash<std::string_view>{}(text)};
  const std::optional<uint64_t> before = std::exchange(pass_last_, sequence);
  if (before && sequence <= *before) return Restart(s);  // numbered again in one pass
  if (seen_.empty()) {
    first_ = s;
    seen_.push_back(s);
    return Verdict::kNew;
  }
  const auto earlier = [](uint64_t a, uint64_t b) { return a + kKmsgBootMarginUs < b; };
  const Seen& last = seen_.back();
  if (sequence > last.sequence) {  // the common case: the next record
    // A later number stamped well before: the clock started again (not a
    // printk preempted between its stamp and its number).
    if (stamp_us + kKmsgPreemptedStampUs < last.stamp_us) return Restart(s);
    Remember(seen_.size(), s);
    return Verdict::kNew;
  }
  auto at = std::lower_bound(seen_.begin(), seen_.end(), sequence,
                             [](const Seen& a, uint64_t seq) { return a.sequence < seq; });
  if (at != seen_.end() && at->sequence == sequence)  // one number, one record per boot
    return at->stamp_us == stamp_us && at->hash == s.hash ? Verdict::kReadAlready : Restart(s);
  if (sequence == first_.sequence)
    return first_.stamp_us == stamp_us && first_.hash == s.hash ? Verdict::kReadAlready
                                                                : Restart(s);
  // Before the boot's first record: no reader goes back past the start it
  // had (the ring only drops its oldest; a forwarder keeps its latest): a
  // boot that started again.
  if (sequence < first_.sequence) return Restart(s);
  if (at == seen_.begin()) {  // read and forgotten: this boot's if its stamp fits
    return earlier(stamp_us, first_.stamp_us) || earlier(seen_.front().stamp_us, stamp_us)
               ? Restart(s)
               : Verdict::kReadAlready;
  }
  // A number between two read (one a forwarder left out before): new if
  // its stamp fits between theirs.
  if (earlier(stamp_us, std::prev(at)->stamp_us) || earlier(at->stamp_us, stamp_us))
    return Restart(s);
  Remember(static_cast<size_t>(at - seen_.begin()), s);
  return Verdict::kNew;
}

}  // namespace xpu::hal
