#pragma once

// A mutex, its lock and a condition variable that clang's thread-safety
// analysis understands (-Wthread-safety, an error in the clang builds), and
// the annotations that say what each mutex guards:
//
//   Mutex mu_;
//   int count_ XPU_GUARDED_BY(mu_);
//   void BumpLocked() XPU_REQUIRES(mu_);
//
// libstdc++'s std::mutex carries no annotations, so the analysis cannot see
// it; these are thin wrappers around the std types, with the same cost.
// With another compiler the annotations expand to nothing.

#include <chrono>
#include <condition_variable>
#include <mutex>

#if defined(__clang__)
#define XPU_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define XPU_THREAD_ANNOTATION(x)
#endif

#define XPU_CAPABILITY(x) XPU_THREAD_ANNOTATION(capability(x))
#define XPU_SCOPED_CAPABILITY XPU_THREAD_ANNOTATION(scoped_lockable)
#define XPU_GUARDED_BY(x) XPU_THREAD_ANNOTATION(guarded_by(x))
#define XPU_PT_GUARDED_BY(x) XPU_THREAD_ANNOTATION(pt_guarded_by(x))
#define XPU_ACQUIRED_BEFORE(...) XPU_THREAD_ANNOTATION(acquired_before(__VA_ARGS__))
#define XPU_ACQUIRED_AFTER(...) XPU_THREAD_ANNOTATION(acquired_after(__VA_ARGS__))
#define XPU_REQUIRES(...) XPU_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define XPU_ACQUIRE(...) XPU_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define XPU_RELEASE(...) XPU_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define XPU_TRY_ACQUIRE(...) XPU_THREAD_ANNOTATION(try_acquire_capability(__VA_ARGS__))
#define XPU_EXCLUDES(...) XPU_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#define XPU_ASSERT_HELD(x) XPU_THREAD_ANNOTATION(assert_capability(x))
#define XPU_RETURN_CAPABILITY(x) XPU_THREAD_ANNOTATION(lock_returned(x))
#define XPU_NO_THREAD_SAFETY_ANALYSIS XPU_THREAD_ANNOTATION(no_thread_safety_analysis)

namespace xpu {

class CondVar;

// std::mutex as a capability. Lock it with MutexLock.
class XPU_CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void lock() XPU_ACQUIRE() { mu_.lock(); }
  void unlock() XPU_RELEASE() { mu_.unlock(); }
  bool try_lock() XPU_TRY_ACQUIRE(true) { return mu_.try_lock(); }

 private:
  friend class MutexLock;
  std::mutex mu_;
};

// Holds a Mutex for its scope (std::unique_lock underneath, so that CondVar
// can wait on it); Unlock() ends the hold early, Lock() takes it again.
class XPU_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) XPU_ACQUIRE(mu) : lock_(mu.mu_) {}
  ~MutexLock() XPU_RELEASE() = default;
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  void Unlock() XPU_RELEASE() { lock_.unlock(); }
  void Lock() XPU_ACQUIRE() { lock_.lock(); }

 private:
  friend class CondVar;
  std::unique_lock<std::mutex> lock_;
};

// std::condition_variable on a MutexLock. There are no predicate overloads:
// a predicate lambda reads guarded members where the analysis cannot see
// the lock, so callers loop on the condition themselves, where it can:
//
//   while (!ready_) cv_.Wait(lock);
class CondVar {
 public:
  using Clock = std::chrono::steady_clock;

  void Wait(MutexLock& lock) { cv_.wait(lock.lock_); }
  // False once `deadline` passed.
  template <typename C, typename D>
  bool WaitUntil(MutexLock& lock, std::chrono::time_point<C, D> deadline) {
    return cv_.wait_until(lock.lock_, deadline) == std::cv_status::no_timeout;
  }
  template <typename R, typename P>
  bool WaitFor(MutexLock& lock, std::chrono::duration<R, P> d) {
    return WaitUntil(lock, Clock::now() + d);
  }
  void NotifyOne() { cv_.notify_one(); }
  void NotifyAll() { cv_.notify_all(); }

 private:
  std::condition_variable cv_;
};

}  // namespace xpu
