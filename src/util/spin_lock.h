// SpinLock: a small mutex for critical sections of a few dozen nanoseconds.
//
// Debian's absl::Mutex is built with deadlock detection, which costs hundreds of instructions
// per lock; a store shard is held for far less than that. This lock spins briefly (with the
// CPU's pause hint) and then yields, so a preempted holder does not make waiters burn a core.
// Annotated for Clang's thread-safety analysis like absl::Mutex.

#ifndef SLUICE_UTIL_SPIN_LOCK_H_
#define SLUICE_UTIL_SPIN_LOCK_H_

#include <sched.h>

#include <atomic>

#include "absl/base/thread_annotations.h"

namespace sluice::util {

class ABSL_LOCKABLE SpinLock {
 public:
  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() {
    if (!locked_.exchange(true, std::memory_order_acquire)) return;
    LockSlow();
  }
  void Unlock() ABSL_UNLOCK_FUNCTION() { locked_.store(false, std::memory_order_release); }

 private:
  void LockSlow() {
    int spins = 0;
    do {
      while (locked_.load(std::memory_order_relaxed)) {
        if (++spins < 100) {
          CpuRelax();
        } else {
          sched_yield();
        }
      }
    } while (locked_.exchange(true, std::memory_order_acquire));
  }

  static void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
  }

  std::atomic<bool> locked_{false};
};

class ABSL_SCOPED_LOCKABLE SpinLockHolder {
 public:
  explicit SpinLockHolder(SpinLock* lock) ABSL_EXCLUSIVE_LOCK_FUNCTION(lock) : lock_(lock) {
    lock_->Lock();
  }
  ~SpinLockHolder() ABSL_UNLOCK_FUNCTION() { lock_->Unlock(); }
  SpinLockHolder(const SpinLockHolder&) = delete;
  SpinLockHolder& operator=(const SpinLockHolder&) = delete;

 private:
  SpinLock* lock_;
};

}  // namespace sluice::util

#endif  // SLUICE_UTIL_SPIN_LOCK_H_
