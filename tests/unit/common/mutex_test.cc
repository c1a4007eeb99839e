// tpool::Mutex / MutexLock / CondVar behave as the std types they wrap;
// tpool::WordMutex / WordLock as a mutex.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include "tpool/common/mutex.h"

namespace {

// The checks both mutexes share, each with its own scoped holder.
template <class M, class Lock>
void try_lock_fails_while_held_and_succeeds_after() {
  M mu;
  bool got = true;
  {
    Lock lk(mu);
    std::thread t([&] {
      got = mu.try_lock();
      if (got) mu.unlock();
    });
    t.join();
    EXPECT_FALSE(got);
  }
  ASSERT_TRUE(mu.try_lock());
  mu.unlock();
}

template <class M, class Lock>
void unlock_and_relock_open_a_window() {
  M mu;
  Lock lk(mu);
  lk.unlock();
  std::thread t([&] {
    Lock inner(mu);  // would deadlock if unlock() did not release
  });
  t.join();
  lk.lock();
  EXPECT_FALSE(mu.try_lock());
}

TEST(Mutex, TryLockFailsWhileHeldAndSucceedsAfter) {
  try_lock_fails_while_held_and_succeeds_after<tpool::Mutex, tpool::MutexLock>();
}

TEST(CondVar, WaitReturnsWhenThePredicateIsMadeTrueUnderTheMutex) {
  tpool::Mutex mu;
  tpool::CondVar cv;
  bool ready = false;  // guarded by mu (a local: not annotatable)
  std::thread t([&] {
    tpool::MutexLock lk(mu);
    ready = true;
    cv.notify_one();
  });
  {
    tpool::MutexLock lk(mu);
    // Bounded, so a lost notify fails the test instead of hanging it.
    EXPECT_TRUE(cv.wait_for(lk, std::chrono::seconds(20), [&] { return ready; }));
  }
  t.join();
}

TEST(MutexLock, UnlockAndRelockOpenAWindowForOtherThreads) {
  unlock_and_relock_open_a_window<tpool::Mutex, tpool::MutexLock>();
}

// ---- WordMutex -----------------------------------------------------------------

TEST(WordMutex, IsOneWordAndTryLockFailsWhileHeld) {
  static_assert(sizeof(tpool::WordMutex) == 4);
  try_lock_fails_while_held_and_succeeds_after<tpool::WordMutex, tpool::WordLock>();
}

// Four threads hammer one lock guarding a plain counter and a pair that must
// stay equal: a lost update or a torn pair is an exclusion failure, a data
// race on them is what TSan (the tsan preset runs this) reports if the
// orderings of the lock were too weak, and a lost wake-up of a waiter hangs
// the test until ctest's timeout.
TEST(WordMutex, ExcludesAndHandsOverUnderContention) {
  tpool::WordMutex mu;
  std::uint64_t count = 0;  // guarded by mu (locals are not annotatable)
  std::uint64_t a = 0, b = 0;
  constexpr int kThreads = 4;
  constexpr int kIters = 50'000;
  std::atomic<int> torn{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; ++t) {
    ts.emplace_back([&] {
      for (int i = 0; i < kIters; ++i) {
        tpool::WordLock lk(mu);
        if (a != b) torn.fetch_add(1, std::memory_order_relaxed);
        ++a;
        ++count;
        if (i % 64 == 0) std::this_thread::yield();  // hold it across a switch: waiters park
        ++b;
      }
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_EQ(count, std::uint64_t{kThreads} * kIters);
  EXPECT_EQ(torn.load(), 0);
  EXPECT_TRUE(mu.try_lock()) << "the lock is free once every holder left";
  mu.unlock();
}

TEST(WordLock, UnlockAndRelockOpenAWindowForOtherThreads) {
  unlock_and_relock_open_a_window<tpool::WordMutex, tpool::WordLock>();
}

}  // namespace
