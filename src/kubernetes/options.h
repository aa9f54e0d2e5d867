#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace xpu::kubernetes {

// Where a pod's service-account credentials are mounted.
inline constexpr const char* kServiceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount";

// The node and the API server (docs/kubernetes.md); the defaults of
// --kubernetes.*.
struct KubernetesOptions {
  // This node's name (--kubernetes.node-name, else $NODE_NAME, which the
  // manifests set from the downward API). Empty: unknown.
  std::string node_name;
  // "auto": in-cluster (KUBERNETES_SERVICE_HOST/PORT) when the service
  // account's token exists and the node name is known; "": off; else the
  // API server's https:// URL.
  std::string api_server = "auto";
  std::string token_file = std::string(kServiceAccountDir) + "/token";
  std::string ca_file = std::string(kServiceAccountDir) + "/ca.crt";
  // Pod labels to export on xpu_device_pod_info (as label_<name>), as
  // regexes matched against the whole label name; empty: none.
  std::vector<std::string> pod_labels;
  // Whether an http:// API server is allowed (--kubernetes.insecure-http):
  // requests, and the bearer token with them, then cross the network in
  // the clear. Off: only https:// is used, and the token never leaves over
  // anything else.
  bool insecure_http = false;
  // How often to read this node's object (HAMi's device register; the
  // condition and the uid the Events name).
  std::chrono::milliseconds node_interval{60000};
  bool operator==(const KubernetesOptions&) const = default;
};

}  // namespace xpu::kubernetes
