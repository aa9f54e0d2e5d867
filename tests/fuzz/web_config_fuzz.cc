// --web.config.file YAML (exporter-toolkit format). File names inside point
// nowhere useful; the parser must refuse them cleanly.
#include "fuzz_util.h"
#include "http/web_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::shared_ptr<const xpu::http::WebConfig> cfg;
  (void)xpu::http::WebConfig::Parse(xpu::fuzz::AsString(data, size), "fuzz", &cfg);
  return 0;
}
