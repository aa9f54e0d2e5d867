#pragma once

#include <string_view>

#include "exposition/text_format.h"

namespace xpu::exposition {

// What a scrape is answered in: the format written and the Content-Type
// that names the version asked for.
struct Negotiated {
  Format format = Format::kText;
  const char* content_type = kTextContentType;
};

// The format an Accept value asks for (RFC 9110 12.5.1): the served format
// with the highest q wins, each taking the q of its most specific range
// (application/openmetrics-text;version=1.0.0 or 0.0.1, no version for
// either, text/plain 0.0.4 or 1.0.0, application/*, text/*, */*); types we
// do not serve (protobuf) are ignored; unknown and repeated parameters
// (escaping=...) are tolerated; ties go to OpenMetrics 1.0.0, then 0.0.1.
// No acceptable range at all: the text format. At most 64 ranges are read.
// Pure; any bytes a client sends.
Negotiated NegotiateFormat(std::string_view accept);

}  // namespace xpu::exposition
