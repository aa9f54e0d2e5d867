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

// The pieces of a header list value (RFC 9110 5.6), for those who
// negotiate with them (exposition/negotiate.h): spaces and tabs trimmed off
// both ends; ASCII case-insensitive equality; a q parameter's value, wholly
// a number in [0, 1], else 0 (refused).
std::string_view Trim(std::string_view s);
bool EqualsNoCase(std::string_view a, std::string_view b);
double QValue(std::string_view value);

// Standard base64 with padding; empty for malformed input or input over 4 KiB.
std::string Base64Decode(const std::string& in);

// Splits "Basic base64(user:password)" into its parts; false if malformed.
bool ParseBasicAuth(const std::string& authorization, std::string* user, std::string* password);

}  // namespace xpu::http
