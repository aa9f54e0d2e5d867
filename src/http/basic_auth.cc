#include "http/basic_auth.h"

#include <crypt.h>
#include <openssl/evp.h>

#include <memory>

#include "http/headers.h"

namespace xpu::http {
namespace {

constexpr size_t kMaxRemembered = 1024;
constexpr size_t kMaxClients = 4096;
constexpr std::chrono::seconds kFailureMemory{60};

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

void Remember(std::set<std::string>* set, const std::string& key) {
  if (set->size() >= kMaxRemembered) set->clear();
  set->insert(key);
}

}  // namespace

int BasicAuth::FailuresOf(const std::string& client, Clock::time_point now) {
  auto it = failures_.find(client);
  if (it == failures_.end()) return 0;
  if (now - it->second.last > kFailureMemory) {
    failures_.erase(it);
    return 0;
  }
  return it->second.count;
}

bool BasicAuth::Acquire(MutexLock& lock, const std::string& client) {
  if (running_ < max_checks_ && waiters_.empty()) {
    ++running_;
    return true;
  }
  if (waiters_.size() >= kMaxWaiters) return false;
  const auto now = Clock::now();
  auto me = waiters_.insert(waiters_.end(), Waiter{&client, ++arrivals_});
  const auto deadline = now + kMaxWait;
  while (!me->granted) {
    if (!granted_cv_.WaitUntil(lock, deadline) && !me->granted) break;
  }
  const bool got = me->granted;  // Release counted the run for it
  waiters_.erase(me);
  return got;
}

void BasicAuth::Release(bool failed, const std::string& client) {
  if (failed) {
    if (failures_.size() >= kMaxClients && failures_.count(client) == 0) failures_.clear();
    Failures& f = failures_[client];
    f.count = Clock::now() - f.last > kFailureMemory ? 1 : f.count + 1;
    f.last = Clock::now();
  }
  // The run goes to the waiter whose address failed least lately (as of
  // now), the newest first.
  const auto now = Clock::now();
  Waiter* next = nullptr;
  int next_failures = 0;
  for (Waiter& w : waiters_) {
    if (w.granted) continue;
    const int f = FailuresOf(*w.client, now);
    if (next == nullptr || f < next_failures || (f == next_failures && w.arrival > next->arrival)) {
      next = &w;
      next_failures = f;
    }
  }
  if (next == nullptr) {
    --running_;
    return;
  }
  next->granted = true;  // the run passes on: running_ stays
  granted_cv_.NotifyAll();
}

BasicAuth::Result BasicAuth::Verify(const std::map<std::string, std::string>& users,
                                    const std::string& authorization, const std::string& client,
                                    bool probe) {
  std::string user, password;
  if (!ParseBasicAuth(authorization, &user, &password)) return Result::kDenied;
  auto it = users.find(user);
  const bool known = it != users.end();
  const std::string hash = known ? it->second : kDummyHash;
  const std::string key = Sha256(user + '\0' + password + '\0' + hash);
  // Failures are scored per address and user name: a flood for one user
  // does not push back another user's first check from the same address.
  const std::string who = client + '\0' + user;
  {
    MutexLock lock(mu_);
    if (verified_.count(key)) return known ? Result::kOk : Result::kDenied;
    if (denied_.count(key)) return Result::kDenied;
    if (probe) {
      if (probe_running_) return Result::kThrottled;
      probe_running_ = true;
    } else if (!Acquire(lock, who)) {
      ++throttled_;
      return Result::kThrottled;
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
    Release(!ok, who);
  }
  Remember(ok ? &verified_ : &denied_, key);
  return ok ? Result::kOk : Result::kDenied;
}

void BasicAuth::Clear() {
  MutexLock lock(mu_);
  verified_.clear();
  denied_.clear();
}

uint64_t BasicAuth::throttled() const {
  MutexLock lock(mu_);
  return throttled_;
}

}  // namespace xpu::http
