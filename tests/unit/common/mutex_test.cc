// tpool::Mutex / MutexLock / CondVar behave as the std types they wrap.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "tpool/common/mutex.h"

namespace {

TEST(Mutex, TryLockFailsWhileHeldAndSucceedsAfter) {
  tpool::Mutex mu;
  bool got = false;
  {
    tpool::MutexLock lk(mu);
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
  tpool::Mutex mu;
  tpool::MutexLock lk(mu);
  lk.unlock();
  std::thread t([&] {
    tpool::MutexLock inner(mu);  // would deadlock if unlock() did not release
  });
  t.join();
  lk.lock();
  EXPECT_FALSE(mu.try_lock());
}

}  // namespace
