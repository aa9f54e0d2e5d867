#include "http/flags.h"

namespace xpu::http {

void AddWebFlags(const FlagSet& f, WebOptions* o, const std::string& default_listen) {
  CLI::App& app = f.app;
  o->listen_addresses.clear();  // a repeatable option appends
  o->probe_listen_addresses.clear();
  f(Applier::kRestart, app.add_flag("--web.probes-require-auth", o->protect_probes,
                                    "Require basic auth on /-/healthy and /-/ready too "
                                    "(on the main port; the probe listener has no auth)"));
  f(Applier::kRestart,
    app.add_option("--web.probe-listen-address", o->probe_listen_addresses,
                   "Address of a listener of the probes' own, repeatable: /-/healthy and "
                   "/-/ready answered off the HTTP workers, plain HTTP, no auth, whatever "
                   "else is connected (default: none; the probes are answered on the main "
                   "port too)"));
  f(Applier::kRestart,
    app.add_option("--web.listen-address", o->listen_addresses,
                   "Address to listen on, repeatable (default " + default_listen + ")"));
  f(Applier::kRestart,
    app.add_option("--web.max-connections", o->max_connections,
                   "HTTP requests served at once, besides the probes' reserved workers")
        ->check(CLI::Range(1, 1024))
        ->capture_default_str());
  f(Applier::kRestart,
    app.add_option("--web.reserved-probe-connections", o->reserved_probe_workers,
                   "HTTP workers on top of --web.max-connections where a request that finds "
                   "every slot taken waits briefly, then gets 503 (the name is older than "
                   "--web.probe-listen-address)")
        ->check(CLI::Range(0, 64))
        ->capture_default_str());
  f(Applier::kRestart, AddDuration(app, "--web.head-timeout", &o->head_timeout,
                                   "Deadline for a connection's TLS handshake and request head"));
  f(Applier::kRestart,
    AddDuration(app, "--web.keep-alive-timeout", &o->keep_alive_timeout,
                "Idle time allowed between two requests on a keep-alive connection"));
  f(Applier::kRestart, AddDuration(app, "--web.response-timeout", &o->response_timeout,
                                   "Deadline for a whole response when the client sends no "
                                   "X-Prometheus-Scrape-Timeout-Seconds"));
  f(Applier::kRestart,
    app.add_option("--web.max-auth-checks", o->max_auth_checks,
                   "Basic-auth password checks (bcrypt) at once; more wait about two runs "
                   "(0.5 to 4 s), then 429")
        ->check(CLI::Range(1, 64))
        ->capture_default_str());
}

}  // namespace xpu::http
