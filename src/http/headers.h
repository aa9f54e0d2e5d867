#pragma once

#include <string>
#include <string_view>

namespace xpu::http {

// Request-header parsing, pure and separate from the server so that it can be
// tested and fuzzed on its own. Every function takes any bytes a client sends.

// Whether an Accept-Encoding value admits gzip ("gzip", "deflate, gzip;q=0.5",
// "*;q=1"); a q of 0 refuses it.
bool AcceptsGzip(const std::string& accept_encoding);

// The reason phrase of an HTTP status the server answers with ("Status" for
// one it does not know).
const char* ReasonPhrase(int status);

// The content codings /metrics serves.
enum class ContentCoding { kIdentity, kGzip, kZstd };

// The coding an Accept-Encoding value asks for: zstd or gzip (x-gzip), by
// the highest q (a coding not named takes the q of "*", else it is not
// acceptable; q=0 refuses), zstd on a tie; identity when neither is
// acceptable or identity's own q is higher. At most 64 entries are read.
ContentCoding NegotiateContentCoding(std::string_view accept_encoding);

// The exposition formats /metrics serves.
enum class MetricsFormat { kText, kOpenMetrics100, kOpenMetrics001 };

// The format an Accept value asks for (RFC 9110 12.5.1): the served format
// with the highest q wins, each taking the q of its most specific range
// (application/openmetrics-text;version=1.0.0 or 0.0.1, no version for
// either, text/plain 0.0.4 or 1.0.0, application/*, text/*, */*); types we
// do not serve (protobuf) are ignored; unknown and repeated parameters
// (escaping=...) are tolerated; ties go to OpenMetrics 1.0.0, then 0.0.1.
// No acceptable range at all: the text format. At most 64 ranges are read.
MetricsFormat NegotiateMetricsFormat(std::string_view accept);

// Whether NegotiateMetricsFormat picks either OpenMetrics version.
bool PrefersOpenMetrics(std::string_view accept);

// Standard base64 with padding; empty for malformed input or input over 4 KiB.
std::string Base64Decode(const std::string& in);

// Splits "Basic base64(user:password)" into its parts; false if malformed.
bool ParseBasicAuth(const std::string& authorization, std::string* user, std::string* password);

}  // namespace xpu::http
