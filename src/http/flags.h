#pragma once

#include <string>

#include "common/flags.h"
#include "http/web_server.h"

namespace xpu::http {

// The HTTP server's flags (listeners, connections, deadlines, probes),
// writing into `o`; `default_listen` is the address --help names when none
// is given. Every one applies at restart: the listeners stay for the
// process's life.
void AddWebFlags(const FlagSet& f, WebOptions* o, const std::string& default_listen);

}  // namespace xpu::http
