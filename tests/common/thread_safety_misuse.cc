// Compiled by thread_safety_check.sh, never linked: with XPU_MISUSE=0 it must
// compile under clang's -Wthread-safety -Werror; with each other value it
// must not, each time for the misuse it names. It shows that the locking
// annotations in src/ (common/mutex.h) are checked, not decoration.
#include "common/mutex.h"

class Counter {
 public:
  void Bump() XPU_EXCLUDES(mu_) {
    xpu::MutexLock lock(mu_);
    ++n_;
  }
  void BumpTwiceUnlockingBetween() {
    xpu::MutexLock lock(mu_);
    ++n_;
    lock.Unlock();
    lock.Lock();
    BumpLocked();
  }
  void Wait() {
    xpu::MutexLock lock(mu_);
    while (n_ == 0) cv_.Wait(lock);
  }
#if XPU_MISUSE == 1
  void Bad() { ++n_; }  // writes without the lock
#elif XPU_MISUSE == 2
  int Bad() {
    xpu::MutexLock lock(mu_);
    lock.Unlock();
    return n_;  // reads after releasing it
  }
#elif XPU_MISUSE == 3
  void Bad() { BumpLocked(); }  // calls a REQUIRES function without it
#elif XPU_MISUSE == 4
  void Bad() {
    xpu::MutexLock lock(mu_);
    Bump();  // takes the lock again (EXCLUDES)
  }
#elif XPU_MISUSE == 5
  void Bad() {
    xpu::MutexLock second(mu_);
    xpu::MutexLock first(order_);  // against XPU_ACQUIRED_BEFORE
  }
#endif

 private:
  void BumpLocked() XPU_REQUIRES(mu_) { ++n_; }
  void Ordered() {
    xpu::MutexLock first(order_);
    xpu::MutexLock second(mu_);
    ++n_;
  }
  xpu::Mutex order_ XPU_ACQUIRED_BEFORE(mu_);
  xpu::Mutex mu_;
  xpu::CondVar cv_;
  int n_ XPU_GUARDED_BY(mu_) = 0;
};
