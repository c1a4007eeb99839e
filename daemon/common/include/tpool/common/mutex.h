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
#pragma once

#include <chrono>
#include <condition_variable>
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
