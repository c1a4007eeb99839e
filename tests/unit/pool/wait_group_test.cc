// WaitGroup lifetime: a group usually lives on its waiter's stack (a task
// that fans out and joins with help_wait, or a thread that waits), so it is
// destroyed as soon as wait() returns. The last done() must not touch the
// group after a waiter can see zero. Under TSan or ASan a late access is a
// use-after-free report; the loops make the window likely to be hit.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <memory>

#include "pool_test_support.h"
#include "tpool/pool.h"

namespace tpool::test {
namespace {

constexpr int kRounds = static_cast<int>(3000 / kTsanDiv);

TEST(WaitGroupLifetime, DeletedRightAfterAnExternalWait) {
  std::unique_ptr<Pool> pool;
  TPOOL_CREATE_OR_SKIP(pool, config_for({SchedulerVariant::kWorkStealing, QueueKind::kRing, 4}));
  std::atomic<int> ran{0};
  auto f = [&] { ran.fetch_add(1, std::memory_order_relaxed); };
  for (int i = 0; i < kRounds; ++i) {
    auto wg = std::make_unique<WaitGroup>();
    SubmitOptions o;
    o.wait_group = wg.get();
    ASSERT_TRUE(pool->submit(task_of(f), o).ok());
    if (i % 2 == 0) {
      ASSERT_TRUE(pool->submit(task_of(f), o).ok());
    }
    ASSERT_TRUE(wg->wait(kBound));
    wg.reset();  // the last done() may still be returning
  }
  ASSERT_TRUE(pool->shutdown(ShutdownMode::kDrain, kBound).ok());
  EXPECT_EQ(ran.load(), kRounds + (kRounds + 1) / 2);  // a second task in every even round
}

struct Joiner {
  std::atomic<int>* children_ran;
  static void child(void* c) { static_cast<Joiner*>(c)->children_ran->fetch_add(1); }
  static void run(void* c) {
    auto* j = static_cast<Joiner*>(c);
    auto wg = std::make_unique<WaitGroup>();  // on the heap, so a late access is caught
    SubmitOptions o;
    o.wait_group = wg.get();
    for (int k = 0; k < 2; ++k) {
      if (!this_task::pool()->submit({&Joiner::child, j}, o).ok()) std::abort();
    }
    if (!this_task::pool()->help_wait(*wg, kBound)) std::abort();
  }
};

TEST(WaitGroupLifetime, DeletedRightAfterHelpWaitInATask) {
  std::unique_ptr<Pool> pool;
  TPOOL_CREATE_OR_SKIP(pool, config_for({SchedulerVariant::kWorkStealing, QueueKind::kRing, 4}));
  std::atomic<int> children{0};
  Joiner j{&children};
  WaitGroup all;
  SubmitOptions o;
  o.wait_group = &all;
  for (int i = 0; i < kRounds; ++i) ASSERT_TRUE(pool->submit({&Joiner::run, &j}, o).ok());
  ASSERT_TRUE(all.wait(kBound));
  ASSERT_TRUE(pool->shutdown(ShutdownMode::kDrain, kBound).ok());
  EXPECT_EQ(children.load(), 2 * kRounds);
}

}  // namespace
}  // namespace tpool::test
