#pragma once

#include <map>
#include <set>
#include <string>

#include "common/mutex.h"

namespace xpu::http {

// Checks HTTP basic credentials against bcrypt hashes (exporter-toolkit's
// basic_auth_users). bcrypt costs tens of milliseconds by design, so
// credentials that verified are remembered (as a SHA-256 of user, password
// and hash, at most 1024 of them) until Clear(); an unknown user still
// costs one bcrypt, so timing does not reveal user names. At most
// `max_checks` bcrypt runs happen at once: a request that would start one
// more is throttled at once, without bcrypt (remembered credentials never
// need a run, so a flood of wrong passwords cannot slow a known scraper).
// Thread-safe: called from every HTTP worker.
class BasicAuth {
 public:
  enum class [[nodiscard]] Result{kOk, kDenied, kThrottled};
  explicit BasicAuth(int max_checks = 2) : max_checks_(max_checks > 0 ? max_checks : 1) {}

  // Whether the Authorization header `authorization` names a user of `users`
  // with the right password; kThrottled when it would need a bcrypt run and
  // max_checks are running. Probes (--web.probes-require-auth) have one run
  // of their own, so a flood elsewhere never throttles them.
  Result Verify(const std::map<std::string, std::string>& users, const std::string& authorization,
                bool probe = false);
  bool Check(const std::map<std::string, std::string>& users, const std::string& authorization) {
    return Verify(users, authorization) == Result::kOk;
  }
  // Forgets what verified (the users changed).
  void Clear();

 private:
  const int max_checks_;
  Mutex mu_;
  std::set<std::string> verified_ XPU_GUARDED_BY(mu_);
  int running_ XPU_GUARDED_BY(mu_) = 0;             // bcrypt runs now
  bool probe_running_ XPU_GUARDED_BY(mu_) = false;  // the probes' own run
};

}  // namespace xpu::http
