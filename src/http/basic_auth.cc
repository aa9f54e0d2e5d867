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

bool BasicAuth::Acquire(MutexLock& lock, const std::string& who, const std::string& address) {
  if (running_ < max_checks_ && pending_ == 0) {
    ++running_;
    return true;
  }
  const auto now = Clock::now();
  if (pending_ >= max_waiters_) {
    // The waiter Release would pick last (most failures, the oldest among
    // equals) gives its place to this one, unless this one ranks lower
    // still: then it is refused at once (adaptive LIFO).
    const std::pair<int, int> mine{FailuresOf(who, now), FailuresOf(address, now)};
    Waiter* worst = nullptr;
    std::pair<int, int> worst_rank;
    for (Waiter& w : waiters_) {
      if (w.granted || w.displaced) continue;
      const std::pair<int, int> rank{FailuresOf(*w.who, now), FailuresOf(*w.address, now)};
      if (worst == nullptr || rank > worst_rank) {  // the oldest first among equals
        worst = &w;
        worst_rank = rank;
      }
    }
    if (worst == nullptr || worst_rank < mine) return false;
    worst->displaced = true;
    --pending_;
    granted_cv_.NotifyAll();
  }
  auto me = waiters_.insert(waiters_.end(), Waiter{&who, &address, ++arrivals_});
  ++pending_;
  // The bound grows while a run it waits behind goes on: recomputed at
  // every wake.
  while (!me->granted && !me->displaced) {
    const auto deadline = now + WaitBound(Clock::now());
    if (Clock::now() >= deadline) break;
    (void)granted_cv_.WaitUntil(lock, deadline);
  }
  const bool got = me->granted;  // Release counted the run for it
  if (!me->granted && !me->displaced) --pending_;
  waiters_.erase(me);
  return got;
}

BasicAuth::Clock::duration BasicAuth::WaitBound(Clock::time_point now) const {
  Clock::duration run = *std::max_element(recent_runs_.begin(), recent_runs_.end());
  for (const auto& start : run_starts_) run = std::max(run, now - start);
  return std::clamp<Clock::duration>(2 * run, kMaxWait, longest_wait_);
}

void BasicAuth::NoteFailure(const std::string& key, Clock::time_point now) {
  if (failures_.size() >= kMaxClients && failures_.count(key) == 0) {
    // Drop the quiet keys first; only if none is quiet, start over.
    for (auto it = failures_.begin(); it != failures_.end();)
      it = now - it->second.last > kFailureMemory ? failures_.erase(it) : std::next(it);
    if (failures_.size() >= kMaxClients) failures_.clear();
  }
  Failures& f = failures_[key];
  f.count = now - f.last > kFailureMemory ? 1 : f.count + 1;
  f.last = now;
}

void BasicAuth::Release(bool failed, const std::string& who, const std::string& address) {
  const auto now = Clock::now();
  if (failed) {
    NoteFailure(who, now);
    NoteFailure(address, now);
  }
  // The run goes to the waiter whose address and user failed least lately
  // (as of now), then whose address did, the newest first.
  Waiter* next = nullptr;
  std::pair<int, int> next_rank;
  for (Waiter& w : waiters_) {
    if (w.granted || w.displaced) continue;
    const std::pair<int, int> rank{FailuresOf(*w.who, now), FailuresOf(*w.address, now)};
    if (next == nullptr || rank < next_rank || (rank == next_rank && w.arrival > next->arrival)) {
      next = &w;
      next_rank = rank;
    }
  }
  if (next == nullptr) {
    --running_;
    return;
  }
  next->granted = true;  // the run passes on: running_ stays
  --pending_;
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
  // The two keys differ even for an empty user name.
  const std::string who = "u" + client + '\0' + user;
  const std::string address = "a" + client;
  std::unique_ptr<crypt_data> data;
  Clock::time_point started;
  {
    MutexLock lock(mu_);
    if (verified_.count(key)) return known ? Result::kOk : Result::kDenied;
    if (denied_.count(key)) return Result::kDenied;
    // crypt_data is about 32 KiB: not on a worker's stack; made before a run
    // is taken, so that nothing can fail while one is held.
    data = std::make_unique<crypt_data>();
    if (probe) {
      if (probe_running_) return Result::kThrottled;
      probe_running_ = true;
    } else if (!Acquire(lock, who, address)) {
      ++throttled_;
      return Result::kThrottled;
    }
    started = Clock::now();
    if (!probe) run_starts_.push_back(started);
  }
  const char* out = crypt_r(password.c_str(), hash.c_str(), data.get());
  const bool ok = out != nullptr && out[0] != '*' && ConstantTimeEqual(out, hash) && known;
  MutexLock lock(mu_);
  if (probe) {
    probe_running_ = false;
  } else {
    run_starts_.erase(std::find(run_starts_.begin(), run_starts_.end(), started));
    recent_runs_[recent_next_++ % recent_runs_.size()] = Clock::now() - started;
    Release(!ok, who, address);
  }
  Remember(ok ? &verified_ : &denied_, key);
  return ok ? Result::kOk : Result::kDenied;
}

void BasicAuth::Clear() {
  MutexLock lock(mu_);
  verified_.clear();
  denied_.clear();
}

int BasicAuth::running() const {
  MutexLock lock(mu_);
  return running_;
}

uint64_t BasicAuth::throttled() const {
  MutexLock lock(mu_);
  return throttled_;
}

}  // namespace xpu::http
