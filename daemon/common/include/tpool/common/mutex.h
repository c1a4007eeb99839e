// tpool::Mutex, tpool::MutexLock, tpool::CondVar: std::mutex and
// std::condition_variable with clang thread-safety annotations.
//
// Costs nothing over the std types (every member is an inline forward). Use
// them for every mutex-protected member in the daemon and the pool, and mark
// the members GUARDED_BY(mu_) (tpool/common/thread_annotations.h).
//
//   mutable tpool::Mutex mu_;
//   int count_ GUARDED_BY(mu_) = 0;
//   void add() EXCLUDES(mu_) { tpool::MutexLock lk(mu_); ++count_; }
//
// CondVar waits on a MutexLock: the analysis sees the mutex held before and
// after the wait (the wait's unlock/relock is inside the std type and
// invisible to it, which is the semantics callers rely on).
//
// tpool::WordMutex / WordLock: a mutex of one 32-bit word, for a lock that
// lives in objects made by the million (each engine Job has one), where
// std::mutex's 40 bytes are most of the cost. No CondVar waits on it.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <utility>

#include "tpool/common/thread_annotations.h"

namespace tpool {

class CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void lock() ACQUIRE() { mu_.lock(); }
  void unlock() RELEASE() { mu_.unlock(); }
  bool try_lock() TRY_ACQUIRE(true) { return mu_.try_lock(); }
  // For code that must hand a std::mutex to a std API (std::scoped_lock of
  // several mutexes is not used: take them one by one in the documented order).
  std::mutex& native() noexcept { return mu_; }

 private:
  std::mutex mu_;
};

// Holds a Mutex for its scope; unlock()/lock() allow a documented window
// without it (the analysis tracks both).
class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) ACQUIRE(mu) : lk_(mu.native()) {}
  ~MutexLock() RELEASE() = default;
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  void unlock() RELEASE() { lk_.unlock(); }
  void lock() ACQUIRE() { lk_.lock(); }

 private:
  friend class CondVar;
  std::unique_lock<std::mutex> lk_;
};

// WordMutex: Drepper's futex mutex ("Futexes Are Tricky", mutex 3) on
// std::atomic's wait/notify (a futex on Linux for a 4-byte word). Not
// recursive, not fair; for short critical sections.
//
//  (1) state_ is 0 (free), 1 (held, nobody waits) or 2 (held, maybe a
//      waiter). Only a CAS 0 -> 1 or an exchange to 2 takes the lock (each
//      returns the old value: taken iff it was 0), only unlock() frees it.
//  (2) A thread sets 2 before it waits and waits only while the word is 2,
//      so an unlock() that frees a lock some thread waits for sees 2 and
//      wakes one; the woken thread sets 2 again as it takes the lock (it
//      cannot know whether others still wait), so it wakes the next in turn.
//      At worst one wake-up too many, never one too few.
//  (3) The taking CAS or exchange is acquire and unlock()'s exchange is
//      release: what one holder wrote is visible to the next.
class CAPABILITY("mutex") WordMutex {
 public:
  WordMutex() = default;
  WordMutex(const WordMutex&) = delete;
  WordMutex& operator=(const WordMutex&) = delete;

  void lock() ACQUIRE() {
    std::uint32_t free = 0;
    // (1, 3) The uncontended path: one CAS.
    if (state_.compare_exchange_strong(free, 1, std::memory_order_acquire,
                                       std::memory_order_relaxed)) {
      return;
    }
    lock_contended();
  }
  void unlock() RELEASE() {
    // (2, 3) Release: our writes before the next holder's acquire.
    if (state_.exchange(0, std::memory_order_release) == 2) state_.notify_one();
  }
  bool try_lock() TRY_ACQUIRE(true) {
    std::uint32_t free = 0;
    return state_.compare_exchange_strong(free, 1, std::memory_order_acquire,
                                          std::memory_order_relaxed);
  }

 private:
  void lock_contended() {
    // (2) Mark the lock contended as we try to take it; 0 back means ours.
    while (state_.exchange(2, std::memory_order_acquire) != 0) {
      // Returns at once if the word is no longer 2 (freed meanwhile).
      state_.wait(2, std::memory_order_relaxed);
    }
  }

  std::atomic<std::uint32_t> state_{0};
};
static_assert(sizeof(WordMutex) == 4, "one word: that is its point");

// Holds a WordMutex for its scope, like MutexLock.
class SCOPED_CAPABILITY WordLock {
 public:
  explicit WordLock(WordMutex& mu) ACQUIRE(mu) : mu_(mu) { mu_.lock(); }
  ~WordLock() RELEASE() {
    if (held_) mu_.unlock();
  }
  WordLock(const WordLock&) = delete;
  WordLock& operator=(const WordLock&) = delete;

  void unlock() RELEASE() {
    mu_.unlock();
    held_ = false;
  }
  void lock() ACQUIRE() {
    mu_.lock();
    held_ = true;
  }

 private:
  WordMutex& mu_;
  bool held_ = true;
};

class CondVar {
 public:
  void notify_one() noexcept { cv_.notify_one(); }
  void notify_all() noexcept { cv_.notify_all(); }

  void wait(MutexLock& lk) { cv_.wait(lk.lk_); }
  template <class Pred>
  void wait(MutexLock& lk, Pred pred) {
    cv_.wait(lk.lk_, std::move(pred));
  }
  template <class Rep, class Period, class Pred>
  bool wait_for(MutexLock& lk, const std::chrono::duration<Rep, Period>& d, Pred pred) {
    return cv_.wait_for(lk.lk_, d, std::move(pred));
  }
  template <class Clock, class Duration, class Pred>
  bool wait_until(MutexLock& lk, const std::chrono::time_point<Clock, Duration>& t, Pred pred) {
    return cv_.wait_until(lk.lk_, t, std::move(pred));
  }
  template <class Clock, class Duration>
  std::cv_status wait_until(MutexLock& lk, const std::chrono::time_point<Clock, Duration>& t) {
    return cv_.wait_until(lk.lk_, t);
  }

 private:
  std::condition_variable cv_;
};

}  // namespace tpool
