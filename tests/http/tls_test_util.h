#pragma once

#include <cstdlib>
#include <memory>
#include <string>

#include "http/web_config.h"

namespace xpu::http {

// A self-signed certificate and key under `dir`, made with the openssl CLI.
inline bool MakeCert(const std::string& dir, const std::string& name) {
  const std::string cmd =
      "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=127.0.0.1 -keyout " + dir + "/" +
      name + ".key -out " + dir + "/" + name + ".crt 2>/dev/null";
  return std::system(cmd.c_str()) == 0;
}

// A web config serving `name`'s pair from `dir`, with `rest` (more
// top-level keys) after it.
inline std::shared_ptr<const WebConfig> TlsConfigFor(const std::string& dir,
                                                     const std::string& name,
                                                     const std::string& rest = "") {
  std::shared_ptr<const WebConfig> cfg;
  const Status s = WebConfig::Parse("tls_server_config:\n  cert_file: " + dir + "/" + name +
                                        ".crt\n  key_file: " + dir + "/" + name + ".key\n" + rest,
                                    "test", &cfg);
  return s.ok() ? cfg : nullptr;
}

}  // namespace xpu::http
