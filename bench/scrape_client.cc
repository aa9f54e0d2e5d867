// Scrape benchmark client: times sequential scrapes of a /metrics URL over one
// keep-alive connection (libcurl), or measures freshness: how long a sample
// stamped by xdm-sim (--marker-id) takes to become visible in /metrics.
// Prints one line of key=value figures; see bench/run.sh and docs/benchmarks.md.
#include <curl/curl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
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
               "usage: scrape_client URL [--count N] [--gzip|--gzip-raw|--zstd-raw] [--prometheus] "
               "[--parallel K]\n"
               "       scrape_client URL --freshness ID --seconds S\n"
               "       scrape_client URL --dump   (one scrape's body to stdout; fails on non-200)\n"
               "  --gzip      ask for gzip and inflate (as Prometheus does)\n"
               "  --gzip-raw  ask for gzip, keep it compressed: the exporter's time alone\n"
               "  --zstd-raw  the same with Accept-Encoding: zstd\n"
               "  --prometheus  send Prometheus 2.x's own Accept header (OpenMetrics first)\n"
               "  --parallel K  K scrapers at once, each on its own connection\n"
               "  --each      also print every scrape's time, in order (with --parallel, each\n"
               "              scraper's in turn): where a tail comes from\n");
  std::exit(2);
}

// What Prometheus 2.42 sends (scrape.go, acceptHeader).
constexpr const char* kPrometheusAccept =
    "Accept: application/openmetrics-text;version=1.0.0,application/openmetrics-text;"
    "version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";

// One keep-alive connection that scrapes `url`.
struct Scraper {
  Scraper(const std::string& url, bool gzip, bool gzip_raw, bool prometheus, bool zstd_raw) {
    curl = curl_easy_init();
    curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, Append);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, &body);
    curl_easy_setopt(curl, CURLOPT_TIMEOUT, 20L);
    if (gzip) curl_easy_setopt(curl, CURLOPT_ACCEPT_ENCODING, "gzip");
    if (gzip_raw) headers = curl_slist_append(headers, "Accept-Encoding: gzip");
    if (zstd_raw) headers = curl_slist_append(headers, "Accept-Encoding: zstd");
    if (prometheus) headers = curl_slist_append(headers, kPrometheusAccept);
    if (headers) curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
  }
  ~Scraper() {
    curl_slist_free_all(headers);
    curl_easy_cleanup(curl);
  }
  bool Scrape() {
    body.clear();
    if (curl_easy_perform(curl) != CURLE_OK) return false;
    long code = 0;
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &code);
    return code == 200;
  }
  // `count` timed scrapes after one untimed (the connection's).
  bool Run(int count, std::vector<double>* ms) {
    if (!Scrape()) return false;
    for (int i = 0; i < count; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      if (!Scrape()) return false;
      ms->push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    return true;
  }
  CURL* curl;
  curl_slist* headers = nullptr;
  std::string body;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) Usage();
  const std::string url = argv[1];
  int count = 200;
  bool gzip = false, gzip_raw = false, prometheus = false, zstd_raw = false;
  int marker = 0, parallel = 1;
  double seconds = 5;
  bool dump = false, each = false;
  for (int i = 2; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--count") && i + 1 < argc) {
      count = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--gzip")) {
      gzip = true;
    } else if (!std::strcmp(argv[i], "--gzip-raw")) {
      gzip_raw = true;
    } else if (!std::strcmp(argv[i], "--zstd-raw")) {
      zstd_raw = true;
    } else if (!std::strcmp(argv[i], "--prometheus")) {
      prometheus = true;
    } else if (!std::strcmp(argv[i], "--parallel") && i + 1 < argc) {
      parallel = std::max(1, std::atoi(argv[++i]));
    } else if (!std::strcmp(argv[i], "--freshness") && i + 1 < argc) {
      marker = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--seconds") && i + 1 < argc) {
      seconds = std::atof(argv[++i]);
    } else if (!std::strcmp(argv[i], "--dump")) {
      dump = true;
    } else if (!std::strcmp(argv[i], "--each")) {
      each = true;
    } else {
      Usage();
    }
  }
  curl_global_init(CURL_GLOBAL_DEFAULT);

  if (dump) {  // where no curl is at hand (bench/gpu-cost.sh on a lent machine)
    Scraper one(url, false, false, false, false);
    if (!one.Scrape()) {
      long code = 0;
      curl_easy_getinfo(one.curl, CURLINFO_RESPONSE_CODE, &code);
      std::fprintf(stderr, "scrape_client: %s: no 200 (HTTP %ld)\n", url.c_str(), code);
      return 1;
    }
    std::fwrite(one.body.data(), 1, one.body.size(), stdout);
    return 0;
  }

  if (marker == 0) {
    std::vector<std::unique_ptr<Scraper>> scrapers;
    for (int k = 0; k < parallel; ++k)
      scrapers.push_back(std::make_unique<Scraper>(url, gzip, gzip_raw, prometheus, zstd_raw));
    std::vector<std::vector<double>> ms(static_cast<size_t>(parallel));
    std::vector<std::thread> threads;
    std::atomic<bool> failed{false};
    const auto t0 = std::chrono::steady_clock::now();
    for (int k = 0; k < parallel; ++k)
      threads.emplace_back([&, k] {
        if (!scrapers[static_cast<size_t>(k)]->Run(count, &ms[static_cast<size_t>(k)]))
          failed = true;
      });
    for (auto& t : threads) t.join();
    const double wall_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (failed) {
      std::fprintf(stderr, "a scrape failed\n");
      return 1;
    }
    std::vector<double> all;
    for (const auto& v : ms) all.insert(all.end(), v.begin(), v.end());
    curl_off_t wire = 0;  // as sent: compressed with --gzip
    curl_easy_getinfo(scrapers[0]->curl, CURLINFO_SIZE_DOWNLOAD_T, &wire);
    std::printf(
        "scrapes=%zu median_ms=%.3f p99_ms=%.3f max_ms=%.3f bytes=%zu wire_bytes=%lld "
        "wall_s=%.3f\n",
        all.size(), Percentile(all, 0.5), Percentile(all, 0.99), Percentile(all, 1.0),
        scrapers[0]->body.size(), static_cast<long long>(wire), wall_s);
    if (each) {
      std::printf("each_ms=");
      for (size_t i = 0; i < all.size(); ++i) std::printf("%s%.1f", i ? "," : "", all[i]);
      std::printf("\n");
    }
    return 0;
  }

  Scraper one(url, false, false, false, false);
  std::string& body = one.body;
  auto scrape = [&one] { return one.Scrape(); };

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
