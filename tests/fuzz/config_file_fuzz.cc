// --config.file YAML, through the real flag parser (the file is written to a
// temporary path, as an operator's would be).
#include <unistd.h>

#include <fstream>
#include <iostream>

#include "app/config.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = [] {
    char tmpl[] = "/tmp/xpu-fuzz-config.XXXXXX";
    const int fd = mkstemp(tmpl);
    if (fd < 0) abort();
    close(fd);
    std::cerr.rdbuf(nullptr);  // the parser's one-line errors, by the million
    std::cout.rdbuf(nullptr);
    return std::string(tmpl);
  }();
  std::ofstream(path, std::ios::trunc | std::ios::binary)
      .write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  std::string flag = "--config.file";
  std::string file = path;
  std::string prog = "xpu-exporter";
  char* argv[] = {prog.data(), flag.data(), file.data(), nullptr};
  xpu::app::Config cfg;
  const std::optional<int> rc = xpu::app::ParseFlags(3, argv, &cfg);
  if (rc && *rc != 0 && *rc != 2) abort();
  return 0;
}
