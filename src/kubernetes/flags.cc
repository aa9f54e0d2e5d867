#include "kubernetes/flags.h"

namespace xpu::kubernetes {

void AddKubernetesFlags(const FlagSet& f, KubernetesOptions* o) {
  CLI::App& app = f.app;
  f(Applier::kRestart,
    app.add_option("--kubernetes.node-name", o->node_name,
                   "This node's name, on xpu_exporter_build_info and the API-server watch")
        ->envname("NODE_NAME"));
  f(Applier::kWatcher,
    app.add_option("--kubernetes.api-server", o->api_server,
                   "API server URL for pod labels and HAMi quotas; auto: in-cluster when the "
                   "service account exists; empty disables")
        ->capture_default_str());
  f(Applier::kWatcher,
    app.add_flag("--kubernetes.insecure-http", o->insecure_http,
                 "Allow an http:// API server: requests and the bearer token go in the clear "
                 "(a local proxy only)"));
  f(Applier::kWatcher, app.add_option("--kubernetes.token-file", o->token_file,
                                      "Bearer token for the API server (re-read on each connect)")
                           ->capture_default_str());
  f(Applier::kWatcher, app.add_option("--kubernetes.ca-file", o->ca_file,
                                      "CA bundle that signed the API server's certificate")
                           ->capture_default_str());
  f(Applier::kWatcher,
    app.add_option("--kubernetes.pod-labels", o->pod_labels,
                   "Pod labels to export on xpu_device_pod_info (regexes on the name), repeatable")
        ->delimiter(','));
  f(Applier::kWatcher,
    AddDuration(app, "--kubernetes.node-interval", &o->node_interval,
                "How often to read this node's object (HAMi's device register)"));
}

}  // namespace xpu::kubernetes
