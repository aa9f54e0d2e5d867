#pragma once

#include <algorithm>
#include <array>
#include <chrono>
#include <list>
#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/mutex.h"

namespace xpu::http {

// Checks HTTP basic credentials against bcrypt hashes (exporter-toolkit's
// basic_auth_users). bcrypt costs tens of milliseconds by design, so no
// attacker may turn it against a valid client:
// - credentials that verified are remembered (as a SHA-256 of user,
//   password and hash, at most 1024) until Clear(), and so are credentials
//   that failed: a flood repeating a wrong password costs no bcrypt after
//   its first try;
// - at most `max_checks` bcrypt runs happen at once; a check that finds them
//   taken waits for one, among at most `max_waiters`
//   (each wait holds an HTTP worker: fewer than the workers, so a flood
//   cannot park them all); a newcomer that finds them all waiting takes
//   the place of the one ranked last (below), which is refused (kThrottled),
//   or is refused itself if it ranks lower still. A freed run goes
//   to the waiter whose client address and user name have failed least
//   lately, then whose address has, the newest among equals (adaptive LIFO:
//   the flood's oldest tries give up), so a valid client is checked within
//   about one run even while its own address floods wrong passwords (for
//   its own user name from its own address nothing tells it from the
//   flood: it competes);
// - a wait lasts about two runs: twice the longest of the last runs or of
//   the one going on longest, at least kMaxWait and at most `longest_wait`.
//   bcrypt's cost is set by the hash, and a run's time by the CPU the node
//   gives (a cgroup limit, a slow core, a loaded machine): a fixed wait
//   shorter than a run would refuse every client that has to wait;
// - an unknown user still costs one bcrypt, so timing does not reveal user
//   names.
// Thread-safe: called from every HTTP worker.
class BasicAuth {
 public:
  enum class [[nodiscard]] Result{kOk, kDenied, kThrottled};
  explicit BasicAuth(int max_checks = 2, int max_waiters = 15,
                     std::chrono::milliseconds longest_wait = kLongestWait)
      : max_checks_(max_checks > 0 ? max_checks : 1),
        max_waiters_(static_cast<size_t>(max_waiters > 0 ? max_waiters : 1)),
        longest_wait_(std::max(longest_wait, kMaxWait)) {}

  // Whether the Authorization header `authorization` names a user of `users`
  // with the right password; kThrottled when it needed a bcrypt run and none
  // came free in time. `client` is the peer's address (fairness). Probes
  // (--web.probes-require-auth) have one run of their own.
  Result Verify(const std::map<std::string, std::string>& users, const std::string& authorization,
                const std::string& client = "", bool probe = false);
  bool Check(const std::map<std::string, std::string>& users, const std::string& authorization) {
    return Verify(users, authorization) == Result::kOk;
  }
  // Forgets what verified or failed (the users changed).
  void Clear();
  // Checks refused because no run came free in time (any thread).
  uint64_t throttled() const;
  // bcrypt runs going on now, the probes' apart (any thread).
  int running() const;

  // The shortest and, by default, the longest a check waits for a run.
  static constexpr std::chrono::milliseconds kMaxWait{500};
  static constexpr std::chrono::milliseconds kLongestWait{4000};

 private:
  using Clock = std::chrono::steady_clock;
  struct Waiter {
    const std::string* who;      // address and user name (the caller's)
    const std::string* address;  // address alone
    uint64_t arrival;            // newer: larger
    bool granted = false;        // a run passed on to it
    bool displaced = false;      // refused for a newer waiter
  };
  // Takes a bcrypt run, waiting as above; false: throttled.
  bool Acquire(MutexLock& lock, const std::string& who, const std::string& address)
      XPU_REQUIRES(mu_);
  void Release(bool failed, const std::string& who, const std::string& address) XPU_REQUIRES(mu_);
  // How long a check that arrived waits for a run, as of `now`.
  Clock::duration WaitBound(Clock::time_point now) const XPU_REQUIRES(mu_);
  void NoteFailure(const std::string& key, Clock::time_point now) XPU_REQUIRES(mu_);
  int FailuresOf(const std::string& client, Clock::time_point now) XPU_REQUIRES(mu_);

  const int max_checks_;
  const size_t max_waiters_;
  const std::chrono::milliseconds longest_wait_;
  mutable Mutex mu_;
  CondVar granted_cv_;
  std::set<std::string> verified_ XPU_GUARDED_BY(mu_);
  std::set<std::string> denied_ XPU_GUARDED_BY(mu_);
  int running_ XPU_GUARDED_BY(mu_) = 0;             // bcrypt runs now
  bool probe_running_ XPU_GUARDED_BY(mu_) = false;  // the probes' own run
  std::list<Waiter> waiters_ XPU_GUARDED_BY(mu_);
  size_t pending_ XPU_GUARDED_BY(mu_) = 0;  // waiters neither granted nor displaced
  uint64_t arrivals_ XPU_GUARDED_BY(mu_) = 0;
  uint64_t throttled_ XPU_GUARDED_BY(mu_) = 0;
  // When each bcrypt run going on began (the probes' apart), and how long
  // the last few took (the wait's measure).
  std::vector<Clock::time_point> run_starts_ XPU_GUARDED_BY(mu_);
  std::array<Clock::duration, 8> recent_runs_ XPU_GUARDED_BY(mu_){};
  size_t recent_next_ XPU_GUARDED_BY(mu_) = 0;
  // Recent failures by address and user name, and by address (forgotten
  // after a quiet minute; at most 4096 keys, the quiet ones dropped first).
  struct Failures {
    int count = 0;
    Clock::time_point last;
  };
  std::unordered_map<std::string, Failures> failures_ XPU_GUARDED_BY(mu_);
};

}  // namespace xpu::http
