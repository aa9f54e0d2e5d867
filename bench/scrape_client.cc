// Scrape benchmark client: times sequential scrapes of a /metrics URL over one
// keep-alive connection (libcurl), or measures freshness: how long a sample
// stamped by xdm-sim (--marker-id) takes to become visible in /metrics.
// Prints one line of key=value figures; see bench/run.sh and docs/benchmarks.md.
#include <curl/curl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

size_t Append(char* data, size_t size, size_t n, void* out) {
  static_cast<std::string*>(out)->append(data, size * n);
  return size * n;
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())));
  return v[i];
}

int64_t NowUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void Usage() {
  std::fprintf(stderr,
               "usage: scrape_client URL [--count N] [--gzip]\n"
               "       scrape_client URL --freshness ID --seconds S\n");
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) Usage();
  const std::string url = argv[1];
  int count = 200;
  bool gzip = false;
  int marker = 0;
  double seconds = 5;
  for (int i = 2; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--count") && i + 1 < argc) {
      count = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--gzip")) {
      gzip = true;
    } else if (!std::strcmp(argv[i], "--freshness") && i + 1 < argc) {
      marker = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--seconds") && i + 1 < argc) {
      seconds = std::atof(argv[++i]);
    } else {
      Usage();
    }
  }
  curl_global_init(CURL_GLOBAL_DEFAULT);
  CURL* curl = curl_easy_init();
  std::string body;
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, Append);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &body);
  curl_easy_setopt(curl, CURLOPT_TIMEOUT, 20L);
  if (gzip) curl_easy_setopt(curl, CURLOPT_ACCEPT_ENCODING, "gzip");
  auto scrape = [&]() -> bool {
    body.clear();
    if (curl_easy_perform(curl) != CURLE_OK) return false;
    long code = 0;
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &code);
    return code == 200;
  };

  if (marker == 0) {
    std::vector<double> ms;
    size_t bytes = 0;
    scrape();  // warm the connection and the exporter's render cache
    for (int i = 0; i < count; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      if (!scrape()) {
        std::fprintf(stderr, "scrape %d failed\n", i);
        return 1;
      }
      ms.push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      bytes = body.size();
    }
    curl_off_t wire = 0;  // as sent: compressed with --gzip
    curl_easy_getinfo(curl, CURLINFO_SIZE_DOWNLOAD_T, &wire);
    std::printf("scrapes=%d median_ms=%.3f p99_ms=%.3f max_ms=%.3f bytes=%zu wire_bytes=%lld\n",
                count, Percentile(ms, 0.5), Percentile(ms, 0.99), Percentile(ms, 1.0), bytes,
                static_cast<long long>(wire));
    return 0;
  }

  // Freshness: scrape back to back; each new marker value V first seen at time
  // T gives T - V (an upper bound: it includes up to one scrape of latency).
  const std::string needle = "id=\"" + std::to_string(marker) + "\"";
  std::vector<double> fresh_ms;
  double last = 0;
  const int64_t end = NowUs() + static_cast<int64_t>(seconds * 1e6);
  while (NowUs() < end) {
    if (!scrape()) continue;
    const int64_t seen = NowUs();
    size_t pos = body.find(needle);
    if (pos == std::string::npos) continue;
    pos = body.find("} ", pos);
    if (pos == std::string::npos) continue;
    const double v = std::strtod(body.c_str() + pos + 2, nullptr);
    if (v != last && last != 0)
      fresh_ms.push_back(static_cast<double>(seen - static_cast<int64_t>(v)) / 1000.0);
    last = v;
  }
  std::printf("freshness_samples=%zu median_ms=%.3f p99_ms=%.3f max_ms=%.3f\n", fresh_ms.size(),
              Percentile(fresh_ms, 0.5), Percentile(fresh_ms, 0.99), Percentile(fresh_ms, 1.0));
  return fresh_ms.empty() ? 1 : 0;
}
