#include "http/basic_auth.h"

#include <crypt.h>
#include <openssl/evp.h>

#include <memory>

#include "http/headers.h"

namespace xpu::http {
namespace {

constexpr size_t kMaxRemembered = 1024;

// A valid bcrypt hash of a random password: unknown users are checked
// against it.
const char kDummyHash[] = "$2y$10$QOauhQNbBCuQDKes6eFzPeMqBSjb7Mr5DUmpZ/VcEd00UAV/LDeSi";

std::string Sha256(const std::string& in) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(in.data(), in.size(), md, &len, EVP_sha256(), nullptr);
  return std::string(reinterpret_cast<const char*>(md), len);
}

bool ConstantTimeEqual(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char d = 0;
  for (size_t i = 0; i < a.size(); ++i) d |= static_cast<unsigned char>(a[i] ^ b[i]);
  return d == 0;
}

}  // namespace

BasicAuth::Result BasicAuth::Verify(const std::map<std::string, std::string>& users,
                                    const std::string& authorization, bool probe) {
  std::string user, password;
  if (!ParseBasicAuth(authorization, &user, &password)) return Result::kDenied;
  auto it = users.find(user);
  const bool known = it != users.end();
  const std::string hash = known ? it->second : kDummyHash;
  const std::string key = Sha256(user + '\0' + password + '\0' + hash);
  {
    MutexLock lock(mu_);
    if (verified_.count(key)) return known ? Result::kOk : Result::kDenied;
    if (probe ? probe_running_ : running_ >= max_checks_) return Result::kThrottled;
    if (probe) {
      probe_running_ = true;
    } else {
      ++running_;
    }
  }
  // crypt_data is about 32 KiB: not on a worker's stack.
  auto data = std::make_unique<crypt_data>();
  const char* out = crypt_r(password.c_str(), hash.c_str(), data.get());
  const bool ok = out != nullptr && out[0] != '*' && ConstantTimeEqual(out, hash) && known;
  MutexLock lock(mu_);
  if (probe) {
    probe_running_ = false;
  } else {
    --running_;
  }
  if (ok) {
    if (verified_.size() >= kMaxRemembered) verified_.clear();
    verified_.insert(key);
  }
  return ok ? Result::kOk : Result::kDenied;
}

void BasicAuth::Clear() {
  MutexLock lock(mu_);
  verified_.clear();
}

}  // namespace xpu::http
