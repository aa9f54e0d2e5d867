#include "exposition/negotiate.h"

#include <gtest/gtest.h>

#include <string>

namespace xpu::exposition {
namespace {

// The Content-Type a scrape with this Accept header is answered with (it
// names the format and its version).
std::string Ct(std::string_view accept) { return NegotiateFormat(accept).content_type; }
// Whether it is answered in either OpenMetrics version.
bool PrefersOpenMetrics(std::string_view accept) {
  return NegotiateFormat(accept).format == Format::kOpenMetrics;
}

TEST(NegotiateTest, TheFormatWrittenMatchesTheContentType) {
  EXPECT_EQ(NegotiateFormat("application/openmetrics-text;version=0.0.1").format,
            Format::kOpenMetrics);
  EXPECT_EQ(NegotiateFormat("application/openmetrics-text").format, Format::kOpenMetrics);
  EXPECT_EQ(NegotiateFormat("text/plain").format, Format::kText);
  EXPECT_EQ(NegotiateFormat("*/*").format, Format::kText);
}

// Prometheus 2.42's scrape Accept header, and those of older servers and
// other clients.
TEST(NegotiateTest, AcceptNegotiatesOpenMetricsAsPrometheusAsks) {
  EXPECT_TRUE(PrefersOpenMetrics(
      "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;"
      "q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"));
  EXPECT_TRUE(
      PrefersOpenMetrics("application/openmetrics-text; version=0.0.1,text/plain;"
                         "version=0.0.4;q=0.5,*/*;q=0.1"));
  EXPECT_TRUE(PrefersOpenMetrics("Application/OpenMetrics-Text"));
  EXPECT_TRUE(PrefersOpenMetrics("text/plain;q=0.5, application/openmetrics-text;q=0.5"));
  EXPECT_FALSE(PrefersOpenMetrics(""));
  EXPECT_FALSE(PrefersOpenMetrics("*/*"));
  EXPECT_FALSE(PrefersOpenMetrics("text/plain;version=0.0.4"));
  EXPECT_FALSE(PrefersOpenMetrics("application/openmetrics-text;q=0.2,text/plain;q=0.9"));
  EXPECT_FALSE(PrefersOpenMetrics("application/openmetrics-text;q=0"));
  EXPECT_FALSE(PrefersOpenMetrics("application/openmetrics-text;version=2.0.0"));
  EXPECT_FALSE(PrefersOpenMetrics("application/openmetrics-text;q=nonsense"));
  // Only the first 64 ranges are read.
  std::string many;
  for (int i = 0; i < 64; ++i) many += "a/b,";
  EXPECT_FALSE(PrefersOpenMetrics(many + "application/openmetrics-text"));
}

// The exact Accept headers Prometheus sends (scrape/scrape.go of each
// release), and proto-first with native histograms: the best served format
// by q, the version asked for.
TEST(NegotiateTest, NegotiationFollowsQValuesOfServedTypesOnly) {
  // Prometheus 2.x (2.42 with exemplar storage; 2.5x default).
  EXPECT_EQ(Ct("application/openmetrics-text;version=1.0.0,application/"
               "openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;"
               "q=0.5,*/*;q=0.1"),
            kOpenMetricsContentType);
  // Prometheus 3.0-3.3.
  EXPECT_EQ(Ct("application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.5,"
               "application/openmetrics-text;version=0.0.1;q=0.4,text/plain;version=1.0.0;"
               "escaping=allow-utf-8;q=0.3,text/plain;version=0.0.4;q=0.2,*/*;q=0.1"),
            kOpenMetricsContentType);
  // Prometheus 3.4+ with native histograms (protobuf first; 4's default).
  EXPECT_EQ(Ct("application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;"
               "encoding=delimited;q=0.6,application/openmetrics-text;version=1.0.0;"
               "escaping=allow-utf-8;q=0.5,application/openmetrics-text;version=0.0.1;q=0.4,"
               "text/plain;version=1.0.0;escaping=allow-utf-8;q=0.3,text/plain;version=0.0.4;"
               "q=0.2,*/*;q=0.1"),
            kOpenMetricsContentType);
  // scrape_protocols: [PrometheusText0.0.4] only, and proto-only with */*.
  EXPECT_EQ(Ct("text/plain;version=0.0.4;q=0.5,*/*;q=0.1"), kTextContentType);
  EXPECT_EQ(Ct("application/vnd.google.protobuf;proto=io.prometheus.client."
               "MetricFamily;encoding=delimited;q=0.5,*/*;q=0.1"),
            kTextContentType);
  // The version asked for.
  EXPECT_EQ(Ct("application/openmetrics-text;version=0.0.1"), kOpenMetrics001ContentType);
  EXPECT_EQ(Ct("application/openmetrics-text;version=0.0.1;q=0.9,application/"
               "openmetrics-text;version=1.0.0;q=0.8"),
            kOpenMetrics001ContentType);
  // Wildcards, specificity, refusals and junk.
  EXPECT_EQ(Ct(""), kTextContentType);
  EXPECT_EQ(Ct("*/*"), kTextContentType);  // curl
  EXPECT_EQ(Ct("application/*"), kOpenMetricsContentType);
  EXPECT_EQ(Ct("text/*"), kTextContentType);
  EXPECT_EQ(Ct("application/openmetrics-text;q=0,*/*"), kTextContentType);
  EXPECT_EQ(Ct("application/openmetrics-text;version=2.0.0"), kTextContentType);
  EXPECT_EQ(Ct("application/json"), kTextContentType);
  EXPECT_EQ(Ct("application/openmetrics-text;q=nonsense"), kTextContentType);
  EXPECT_EQ(Ct("application/openmetrics-text;version=1.0.0;version=0.0.1;q=0.9;q=0.1;x=y"),
            kOpenMetricsContentType);
  EXPECT_EQ(Ct("application/openmetrics-text;q=0.2,text/plain;q=0.9"), kTextContentType);
}

}  // namespace
}  // namespace xpu::exposition
