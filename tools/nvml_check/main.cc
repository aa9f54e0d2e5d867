// nvml_check: reads every card through the nvml backend's own reading code
// (src/hal/nvml/nvml_reader.cc over nvml_library.cc) and compares what it reads
// with what the driver's nvidia-smi says (`nvidia-smi -q -x`): name, UUID,
// bus id, ECC mode, MIG mode, and the temperature within a tolerance. One
// line per card, a verdict last; exit 0 when every card agrees, 1 when one
// does not, 2 when it cannot run. Built by tools/nvml-check, statically
// against libstdc++, so that it runs on a machine with only the driver.
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "hal/nvml/nvml_reader.h"
#include "hal/pci_address.h"

namespace {

using xpu::hal::NvmlDevice;

// What nvidia-smi says of one card.
struct SmiGpu {
  std::string name, uuid, ecc, mig;
  std::optional<int> temperature;
};

// The text between <tag> and </tag> in `block`, trimmed; "" if absent.
std::string Tag(const std::string& block, const std::string& tag) {
  const std::string open = "<" + tag + ">", close = "</" + tag + ">";
  const size_t a = block.find(open);
  if (a == std::string::npos) return "";
  const size_t b = block.find(close, a);
  if (b == std::string::npos) return "";
  std::string v = block.substr(a + open.size(), b - a - open.size());
  while (!v.empty() && (v.back() == ' ' || v.back() == '\n')) v.pop_back();
  while (!v.empty() && (v.front() == ' ' || v.front() == '\n')) v.erase(0, 1);
  return v;
}

// nvidia-smi's XML, by canonical bus id. It is the driver's own tool's
// output, read for a comparison; a block it cannot place is skipped.
std::map<std::string, SmiGpu> ParseSmi(const std::string& xml) {
  std::map<std::string, SmiGpu> out;
  size_t at = 0;
  while ((at = xml.find("<gpu id=\"", at)) != std::string::npos) {
    const size_t id_end = xml.find('"', at + 9);
    const size_t end = xml.find("</gpu>", at);
    if (id_end == std::string::npos || end == std::string::npos) break;
    const std::string bus = xpu::hal::CanonicalPciAddress(xml.substr(at + 9, id_end - at - 9));
    const std::string block = xml.substr(at, end - at);
    SmiGpu g;
    g.name = Tag(block, "product_name");
    g.uuid = Tag(block, "uuid");
    g.ecc = Tag(Tag(block, "ecc_mode"), "current_ecc");
    g.mig = Tag(Tag(block, "mig_mode"), "current_mig");
    const std::string temp = Tag(Tag(block, "temperature"), "gpu_temp");  // "41 C"
    if (!temp.empty() && temp[0] >= '0' && temp[0] <= '9') g.temperature = std::atoi(temp.c_str());
    if (!bus.empty()) out[bus] = g;
    at = end;
  }
  return out;
}

std::string Run(const std::string& command, bool* ok) {
  std::string out;
  FILE* p = popen(command.c_str(), "r");
  if (p == nullptr) {
    *ok = false;
    return out;
  }
  char buf[4096];
  size_t n = 0;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0 && out.size() < (64u << 20)) out.append(buf, n);
  *ok = pclose(p) == 0;
  return out;
}

// One comparison: "what ok", or "what MISMATCH (nvml A, smi B)".
bool Same(const std::string& what, const std::string& nvml, const std::string& smi,
          std::string* line) {
  const bool same = nvml == smi;
  *line += " " + what + (same ? " ok" : " MISMATCH (nvml '" + nvml + "', smi '" + smi + "')");
  return same;
}

}  // namespace

int main(int argc, char** argv) {
  std::string library = "libnvidia-ml.so.1", smi = "nvidia-smi -q -x";
  int tolerance = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--library") {
      library = argv[i + 1];
    } else if (flag == "--smi") {
      smi = argv[i + 1];
    } else if (flag == "--temperature-tolerance") {
      tolerance = std::atoi(argv[i + 1]);
    } else {
      std::fprintf(stderr,
                   "usage: nvml_check [--library PATH] [--smi COMMAND] "
                   "[--temperature-tolerance CELSIUS]\n");
      return 2;
    }
  }
  std::shared_ptr<const xpu::hal::NvmlLibrary> lib;
  if (const xpu::Status s = xpu::hal::NvmlLibrary::Open(library, &lib); !s.ok()) {
    std::printf("nvml-check: CANNOT RUN: %s\n", s.message().c_str());
    return 2;
  }
  for (const std::string& m : lib->missing())
    std::printf("library lacks %s (what needs it is not read)\n", m.c_str());
  std::vector<NvmlDevice> cards;
  if (const xpu::Status s = xpu::hal::ReadNvmlDevices(*lib, &cards); !s.ok()) {
    std::printf("nvml-check: CANNOT RUN: %s\n", s.message().c_str());
    return 2;
  }
  bool ran = false;
  const std::map<std::string, SmiGpu> smi_gpus = ParseSmi(Run(smi, &ran));
  if (!ran || smi_gpus.empty()) {
    std::printf("nvml-check: CANNOT RUN: '%s' gave no GPU\n", smi.c_str());
    return 2;
  }
  int bad = 0;
  for (const NvmlDevice& d : cards) {
    std::string line = d.bus_id + " " + d.uuid + ":";
    auto it = smi_gpus.find(d.bus_id);
    bool same = it != smi_gpus.end() && !d.lost;
    if (d.lost) line += " NVML says the GPU is lost";
    if (it == smi_gpus.end()) {
      line += " not in nvidia-smi's list";
    } else if (!d.lost) {
      const SmiGpu& g = it->second;
      same &= Same("name", d.name, g.name, &line);
      same &= Same("uuid", d.uuid, g.uuid, &line);
      if (d.ecc_enabled) same &= Same("ecc", *d.ecc_enabled ? "Enabled" : "Disabled", g.ecc, &line);
      if (d.mig_enabled) same &= Same("mig", *d.mig_enabled ? "Enabled" : "Disabled", g.mig, &line);
      if (d.temperature_celsius && g.temperature) {
        const int nvml_t = static_cast<int>(*d.temperature_celsius);
        const bool close = std::abs(nvml_t - *g.temperature) <= tolerance;
        line += " temperature " + std::to_string(nvml_t) + " vs " + std::to_string(*g.temperature) +
                " C" + (close ? " ok" : " MISMATCH");
        same &= close;
      }
    }
    for (const std::string& e : d.errors) line += " [" + e + "]";
    std::printf("%s -> %s\n", line.c_str(), same ? "AGREE" : "DISAGREE");
    bad += same ? 0 : 1;
  }
  const size_t extra = smi_gpus.size() > cards.size() ? smi_gpus.size() - cards.size() : 0;
  if (extra > 0) std::printf("nvidia-smi lists %zu GPU(s) NVML did not\n", extra);
  const bool pass = bad == 0 && extra == 0 && !cards.empty();
  std::printf("nvml-check: %s: %zu card(s), %d disagree\n", pass ? "PASS" : "FAIL", cards.size(),
              bad);
  return pass ? 0 : 1;
}
