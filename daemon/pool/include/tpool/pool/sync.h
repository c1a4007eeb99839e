// The mutex/condition-variable policy the parking code is written against
// (sleep_wake.h, event_count.h), as atomics.h is the atomics policy: the pool
// compiles them with StdSync, the Relacy models with RelacySync
// (tests/model/relacy/relacy_atomics.h), so a model checks the same source.
//
// A policy provides Mutex, CondVar, lock(m), unlock(m), wait(cv, m) (called
// with m held; returns with m held), notify_one(cv), notify_all(cv). StdSync
// also has wait_until(cv, m, deadline) for the pool's timed waits.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

#include "tpool/common/mutex.h"

namespace tpool::detail {

// tpool::Mutex (annotated for clang's thread-safety analysis) and
// std::condition_variable. The parking mutexes guard no member (everything
// they order is atomic: they close the window between a waiter's check and
// its wait, sleep_wake.h inv 4, event_count.h inv 5), so nothing is
// GUARDED_BY them; the annotations check that every lock is paired with its
// unlock and that a wait is called with the mutex held.
struct StdSync {
  using Mutex = tpool::Mutex;
  using CondVar = std::condition_variable;
  static void lock(Mutex& m) ACQUIRE(m) { m.lock(); }
  static void unlock(Mutex& m) noexcept RELEASE(m) { m.unlock(); }
  static void wait(CondVar& cv, Mutex& m) REQUIRES(m) {
    std::unique_lock<std::mutex> lk(m.native(), std::adopt_lock);
    cv.wait(lk);
    (void)lk.release();  // still held: the caller unlocks
  }
  // False on timeout.
  template <class Clock, class Duration>
  static bool wait_until(CondVar& cv, Mutex& m, std::chrono::time_point<Clock, Duration> deadline)
      REQUIRES(m) {
    std::unique_lock<std::mutex> lk(m.native(), std::adopt_lock);
    const bool woken = cv.wait_until(lk, deadline) == std::cv_status::no_timeout;
    (void)lk.release();  // still held: the caller unlocks
    return woken;
  }
  static void notify_one(CondVar& cv) noexcept { cv.notify_one(); }
  static void notify_all(CondVar& cv) noexcept { cv.notify_all(); }
};

}  // namespace tpool::detail
