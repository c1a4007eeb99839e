// detail::EventCount (tpool/pool/event_count.h) on its own: the waiter's
// prepare / re-check / commit protocol against notify_all and notify_one,
// timed waits, and the `notified` bit (inv 4). Every wait is bounded: a lost
// wake-up fails the test within kBound instead of hanging it.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>
#include <vector>

#include "pool_test_support.h"
#include "tpool/pool/event_count.h"

namespace tpool::test {
namespace {

using detail::EventCount;

// A condition in an atomic, waited for with the protocol of the header.
struct Flag {
  std::atomic<bool> set{false};
  EventCount ec;

  void wait() {
    while (!set.load(std::memory_order_acquire)) {
      const EventCount::Key key = ec.prepare_wait();
      if (set.load(std::memory_order_acquire)) {
        ec.cancel_wait();
        break;
      }
      ec.commit_wait(key);
    }
  }
  void raise() {
    set.store(true, std::memory_order_release);
    ec.notify_all();
  }
};

// Waits (polling with a bound, from the test thread only) until `n` threads
// are registered on ec.
bool registered(const EventCount& ec, std::uint32_t n) {
  const auto until = std::chrono::steady_clock::now() + kBound;
  while (ec.waiters() < n) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::yield();
  }
  return true;
}

TEST(EventCount, NotifyWithNobodyWaitingLeavesNoWaiter) {
  EventCount ec;
  ec.notify_all();
  ec.notify_one();
  EXPECT_FALSE(ec.has_waiters());
  const EventCount::Key key = ec.prepare_wait();
  EXPECT_EQ(ec.waiters(), 1u);
  ec.cancel_wait();
  EXPECT_EQ(ec.waiters(), 0u);
  // The notifies before prepare_wait did not move the epoch: nobody waited.
  EXPECT_EQ(ec.prepare_wait().epoch(), key.epoch());
  ec.cancel_wait();
}

TEST(EventCount, NotifyBetweenPrepareAndCommitMakesCommitReturn) {
  EventCount ec;
  const EventCount::Key key = ec.prepare_wait();
  ec.notify_all();
  ec.commit_wait(key);  // would sleep for good if the notify were lost
  EXPECT_FALSE(ec.has_waiters());
}

TEST(EventCount, SleepingWaiterIsWokenByNotifyAll) {
  for (int round = 0; round < 200; ++round) {
    Flag f;
    auto waiter = std::async(std::launch::async, [&] { f.wait(); });
    if (round % 2 == 0) {  // odd rounds race the raise
      ASSERT_TRUE(registered(f.ec, 1));
    }
    f.raise();
    ASSERT_EQ(waiter.wait_for(kBound), std::future_status::ready)
        << "round " << round << ": the waiter was never woken";
  }
}

TEST(EventCount, NotifyAllWakesEveryWaiterAndLaterNotifiesAreFree) {
  Flag f;
  constexpr int kWaiters = 4;
  std::vector<std::future<void>> ws;
  for (int i = 0; i < kWaiters; ++i) {
    ws.push_back(std::async(std::launch::async, [&] { f.wait(); }));
  }
  ASSERT_TRUE(registered(f.ec, kWaiters));
  const EventCount::Key before = f.ec.prepare_wait();  // one more: ours
  f.raise();
  // (inv 4) Every registered waiter is notified now: a second notify_all
  // finds `notified` set and leaves the epoch where the first put it.
  f.ec.notify_all();
  const EventCount::Key after_first = f.ec.prepare_wait();
  EXPECT_EQ(after_first.epoch(), before.epoch() + 1);
  f.ec.cancel_wait();
  f.ec.cancel_wait();
  for (auto& w : ws) ASSERT_EQ(w.wait_for(kBound), std::future_status::ready);
}

TEST(EventCount, PrepareAfterANotifyNeedsANewNotify) {
  // (inv 4) prepare_wait clears `notified`: a waiter that registers after a
  // notify is woken by the next one, not skipped as already notified.
  Flag first;
  auto a = std::async(std::launch::async, [&] { first.wait(); });
  ASSERT_TRUE(registered(first.ec, 1));
  first.raise();  // sets `notified`
  ASSERT_EQ(a.wait_for(kBound), std::future_status::ready);
  // The same event count, a new condition and a new waiter.
  std::atomic<bool> ready{false};
  auto c = std::async(std::launch::async, [&] {
    while (!ready.load(std::memory_order_acquire)) {
      const EventCount::Key key = first.ec.prepare_wait();
      if (ready.load(std::memory_order_acquire)) {
        first.ec.cancel_wait();
        break;
      }
      first.ec.commit_wait(key);
    }
  });
  ASSERT_TRUE(registered(first.ec, 1));
  ready.store(true, std::memory_order_release);
  first.ec.notify_all();
  if (c.wait_for(kBound) != std::future_status::ready) {
    first.ec.notify_one();  // notify_one ignores `notified`: let the thread end
    FAIL() << "notify_all skipped a waiter that registered after the last notify";
  }
}

TEST(EventCount, NotifyOneWakesOneWaiter) {
  EventCount ec;
  std::atomic<int> tokens{0};
  std::atomic<int> woke{0};
  auto take = [&] {
    for (;;) {
      int t = tokens.load(std::memory_order_acquire);
      if (t > 0 && tokens.compare_exchange_strong(t, t - 1)) break;
      const EventCount::Key key = ec.prepare_wait();
      if (tokens.load(std::memory_order_acquire) > 0) {
        ec.cancel_wait();
        continue;
      }
      ec.commit_wait(key);
    }
    woke.fetch_add(1);
  };
  auto a = std::async(std::launch::async, take);
  auto b = std::async(std::launch::async, take);
  ASSERT_TRUE(registered(ec, 2));
  tokens.fetch_add(1, std::memory_order_release);
  ec.notify_one();
  const auto until = std::chrono::steady_clock::now() + kBound;
  while (woke.load() < 1 && std::chrono::steady_clock::now() < until) std::this_thread::yield();
  ASSERT_EQ(woke.load(), 1);
  tokens.fetch_add(1, std::memory_order_release);
  ec.notify_one();
  ASSERT_EQ(a.wait_for(kBound), std::future_status::ready);
  ASSERT_EQ(b.wait_for(kBound), std::future_status::ready);
  EXPECT_EQ(woke.load(), 2);
}

TEST(EventCount, CommitWaitUntilTimesOutAndUnregisters) {
  EventCount ec;
  const EventCount::Key key = ec.prepare_wait();
  EXPECT_FALSE(ec.commit_wait_until(key, std::chrono::steady_clock::now() + 1ms));
  EXPECT_FALSE(ec.has_waiters());
  const EventCount::Key k2 = ec.prepare_wait();
  ec.notify_all();
  EXPECT_TRUE(ec.commit_wait_until(k2, std::chrono::steady_clock::now() + kBound));
  EXPECT_FALSE(ec.has_waiters());
}

// Many waiters and notifiers on one event count, each waiter for its own
// condition (as the pool's wait() callers share done_ec): every waiter ends.
TEST(EventCount, ManyWaitersEachForItsOwnCondition) {
  constexpr int kPairs = 8;
  constexpr int kRounds = 300 / static_cast<int>(kTsanDiv);
  EventCount ec;
  std::vector<std::atomic<int>> seq(kPairs);
  std::vector<std::future<void>> fs;
  for (int i = 0; i < kPairs; ++i) {
    fs.push_back(std::async(std::launch::async, [&, i] {
      for (int r = 1; r <= kRounds; ++r) {
        while (seq[i].load(std::memory_order_acquire) < r) {
          const EventCount::Key key = ec.prepare_wait();
          if (seq[i].load(std::memory_order_acquire) >= r) {
            ec.cancel_wait();
            break;
          }
          ec.commit_wait(key);
        }
      }
    }));
    fs.push_back(std::async(std::launch::async, [&, i] {
      for (int r = 1; r <= kRounds; ++r) {
        seq[i].store(r, std::memory_order_release);
        ec.notify_all();
        std::this_thread::yield();
      }
    }));
  }
  for (auto& f : fs) ASSERT_EQ(f.wait_for(kBound), std::future_status::ready);
  EXPECT_FALSE(ec.has_waiters());
}

}  // namespace
}  // namespace tpool::test
