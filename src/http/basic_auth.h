#pragma once

#include <map>
#include <mutex>
#include <set>
#include <string>

namespace xpu::http {

// Checks HTTP basic credentials against bcrypt hashes (exporter-toolkit's
// basic_auth_users). bcrypt costs tens of milliseconds by design, so
// credentials that verified are remembered (as a SHA-256 of user, password
// and hash, at most 1024 of them) until Clear(); an unknown user still
// costs one bcrypt, so timing does not reveal user names. Thread-safe: called
// from every HTTP worker.
class BasicAuth {
 public:
  // Whether the Authorization header `authorization` names a user of `users`
  // with the right password.
  bool Check(const std::map<std::string, std::string>& users, const std::string& authorization);
  // Forgets what verified (the users changed).
  void Clear();

 private:
  std::mutex mu_;
  std::set<std::string> verified_;  // guarded by mu_
};

}  // namespace xpu::http
