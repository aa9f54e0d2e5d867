#pragma once

#include <string>
#include <string_view>

namespace xpu::http {

// Request-header parsing, pure and separate from the server so that it can be
// tested and fuzzed on its own. Every function takes any bytes a client sends.

// Whether an Accept-Encoding value admits gzip ("gzip", "deflate, gzip;q=0.5",
// "*;q=1"); a q of 0 refuses it.
bool AcceptsGzip(const std::string& accept_encoding);

// Whether an Accept value prefers the OpenMetrics text format
// ("application/openmetrics-text; version=1.0.0" or 0.0.1) to the Prometheus
// text format (text/plain; version=0.0.4, or any other type): its highest q
// is above theirs, or equal (Prometheus lists OpenMetrics first). At most
// 64 media ranges are read; a q of 0 refuses.
bool PrefersOpenMetrics(std::string_view accept);

// Standard base64 with padding; empty for malformed input or input over 4 KiB.
std::string Base64Decode(const std::string& in);

// Splits "Basic base64(user:password)" into its parts; false if malformed.
bool ParseBasicAuth(const std::string& authorization, std::string* user, std::string* password);

// Whether `line` (a request line without its CR LF) is "METHOD SP TARGET SP
// HTTP/1.0|1.1" with a token method and a target free of spaces and control
// bytes. civetweb 1.15 echoes the version part of a bad request line into its
// own error status line, control bytes included (response splitting), so
// HeadGuard refuses such lines before civetweb parses them.
bool ValidRequestLine(std::string_view line);

}  // namespace xpu::http
