// The pool's parking (issue 15 item 4; docs/wake-protocol.md, "Event
// counts"): each kind of waiter, once it is registered on its event count
// (PoolStats::blocked_*), is released by exactly the event the protocol says
// notifies it, and by nothing else in the test. The pool used to sleep in
// 1 ms rounds, which hid a missing wake; now a missing wake leaves the waiter
// asleep until its deadline. Each waiter gets kBound as its deadline (a hang
// guard) and must return well before it: at the deadline a waiter takes one
// last look and would find its condition true, so "returned at all" proves
// nothing; "returned before its deadline" proves it was woken.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <thread>

#include "pool_test_support.h"
#include "tpool/pool.h"

namespace tpool::test {
namespace {

// Polls stats() (from the test thread, with the hang bound) until `field`
// reaches n: the waiter is registered, so it is asleep or about to be.
// A waiter woken by a notify returns within milliseconds; one whose wake was
// lost returns only at its deadline, kBound after it began.
const std::chrono::nanoseconds kWoken = kBound / 2;

class Stopwatch {
 public:
  std::chrono::nanoseconds elapsed() const { return std::chrono::steady_clock::now() - start_; }

 private:
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

template <class Field>
bool until_registered(Pool& p, Field field, std::size_t n) {
  const auto until = std::chrono::steady_clock::now() + kBound;
  while (p.stats().*field < n) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::yield();
  }
  return true;
}

class Parking : public ::testing::TestWithParam<SchedulerVariant> {
 protected:
  // One worker, two descriptors (the DescCaches are off at this size), a
  // blocking submit with no timeout: the smallest pool that blocks.
  Config cfg() const {
    Config c;
    c.min_threads = 1;
    c.max_threads = 1;
    c.queue_capacity = 2;
    c.scheduler_variant = GetParam();
    c.backpressure = Backpressure::kBlock;
    c.block_timeout = std::chrono::nanoseconds(-1);
    return c;
  }
  void TearDown() override {
    gate_.open();
    if (pool_) (void)pool_->shutdown(ShutdownMode::kDrain, kBound);
  }
  static void held(void* c) { static_cast<Event*>(c)->wait(); }

  Event gate_;
  std::unique_ptr<Pool> pool_;
};

// A submit blocked for a descriptor (kBlock, no timeout) is woken by the
// release of the descriptor of a task that ends: release_desc notifies
// free_ec. Nothing else would wake it: no other submit, no shutdown.
TEST_P(Parking, BlockedSubmitIsReleasedByACompletion) {
  TPOOL_CREATE_OR_SKIP(pool_, cfg());
  ASSERT_TRUE(pool_->submit({&Parking::held, &gate_}).ok());  // runs, held
  ASSERT_TRUE(pool_->submit({&Parking::held, &gate_}).ok());  // queued behind it
  ASSERT_EQ(pool_->try_submit({&Parking::held, &gate_}).status().code(), StatusCode::kFull);
  std::atomic<int> ran{0};
  auto count = [&] { ran.fetch_add(1); };
  auto blocked = std::async(std::launch::async, [&] { return pool_->submit(task_of(count)); });
  ASSERT_TRUE(until_registered(*pool_, &PoolStats::blocked_submits, 1));
  gate_.open();
  if (blocked.wait_for(kBound) != std::future_status::ready) {
    (void)pool_->shutdown(ShutdownMode::kDrain, kBound);  // shutdown wakes it: let it end
    FAIL() << "a submit blocked for a descriptor slept on after two tasks ended";
  }
  ASSERT_TRUE(blocked.get().ok());
  ASSERT_TRUE(pool_->shutdown(ShutdownMode::kDrain, kBound).ok());
  EXPECT_EQ(ran.load(), 1);
  EXPECT_EQ(pool_->stats().blocked_submits, 0u);
}

// A submit blocked for a descriptor is woken by shutdown, and fails with
// Shutdown.
TEST_P(Parking, BlockedSubmitIsReleasedByShutdown) {
  TPOOL_CREATE_OR_SKIP(pool_, cfg());
  ASSERT_TRUE(pool_->submit({&Parking::held, &gate_}).ok());
  ASSERT_TRUE(pool_->submit({&Parking::held, &gate_}).ok());
  auto nop = [] {};
  auto blocked = std::async(std::launch::async, [&] { return pool_->submit(task_of(nop)); });
  ASSERT_TRUE(until_registered(*pool_, &PoolStats::blocked_submits, 1));
  auto stopping =
      std::async(std::launch::async, [&] { return pool_->shutdown(ShutdownMode::kDrain, kBound); });
  ASSERT_EQ(blocked.wait_for(kBound), std::future_status::ready);
  EXPECT_EQ(blocked.get().status().code(), StatusCode::kShutdown);
  gate_.open();
  EXPECT_TRUE(stopping.get().ok());
}

// wait() on a task that has not ended sleeps on done_ec; finish() notifies
// it when the task ends.
TEST_P(Parking, WaitIsReleasedByTheTasksEnd) {
  TPOOL_CREATE_OR_SKIP(pool_, cfg());
  SubmitOptions o;
  o.waitable = true;
  auto h = pool_->submit({&Parking::held, &gate_}, o);
  ASSERT_TRUE(h.ok());
  Stopwatch clock;
  auto waiting = std::async(std::launch::async, [&] { return pool_->wait(h.value(), kBound); });
  ASSERT_TRUE(until_registered(*pool_, &PoolStats::blocked_waits, 1));
  gate_.open();
  const Result<TaskOutcome> r = waiting.get();
  EXPECT_LT(clock.elapsed(), kWoken) << "wait() slept until its deadline after the task ended";
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r.value(), TaskOutcome::kCompleted);
}

// A help_wait with nothing to run sleeps on help_ec; the group's last done(),
// called by a thread outside the pool, wakes it (the waker the group holds).
TEST_P(Parking, HelpWaitIsReleasedByADoneFromOutsideThePool) {
  TPOOL_CREATE_OR_SKIP(pool_, cfg());
  WaitGroup wg;
  wg.add(1);
  std::atomic<int> joined{-1};
  std::atomic<std::int64_t> took_ns{0};
  auto join = [&] {
    Stopwatch clock;
    joined.store(this_task::pool()->help_wait(wg, kBound) ? 1 : 0);
    took_ns.store(clock.elapsed().count());
  };
  WaitGroup parent;
  SubmitOptions o;
  o.wait_group = &parent;
  ASSERT_TRUE(pool_->submit(task_of(join), o).ok());
  ASSERT_TRUE(until_registered(*pool_, &PoolStats::blocked_help_waits, 1));
  wg.done();
  ASSERT_TRUE(parent.wait(kBound + kBound));
  EXPECT_EQ(joined.load(), 1);
  EXPECT_LT(std::chrono::nanoseconds(took_ns.load()), kWoken)
      << "help_wait slept until its deadline after its group reached zero";
}

// The only worker sleeps inside help_wait; it counts as awake, so the wake
// protocol wakes nobody for a new task. notify() notifies help_ec: the
// helper wakes, runs the task, and the task ends its group.
TEST_P(Parking, HelpWaitIsWokenByWorkItCanRun) {
  TPOOL_CREATE_OR_SKIP(pool_, cfg());
  WaitGroup wg;
  wg.add(1);
  std::atomic<int> joined{-1};
  std::atomic<std::int64_t> took_ns{0};
  auto join = [&] {
    Stopwatch clock;
    joined.store(this_task::pool()->help_wait(wg, kBound) ? 1 : 0);
    took_ns.store(clock.elapsed().count());
  };
  WaitGroup parent;
  SubmitOptions o;
  o.wait_group = &parent;
  ASSERT_TRUE(pool_->submit(task_of(join), o).ok());
  ASSERT_TRUE(until_registered(*pool_, &PoolStats::blocked_help_waits, 1));
  auto release = [&] { wg.done(); };
  ASSERT_TRUE(pool_->submit(task_of(release)).ok());
  ASSERT_TRUE(parent.wait(kBound + kBound));
  EXPECT_EQ(joined.load(), 1);
  EXPECT_LT(std::chrono::nanoseconds(took_ns.load()), kWoken)
      << "help_wait slept until its deadline while a task it could run was queued";
}

// shutdown(kDrain) sleeps on idle_ec until accepted == finished; the worker
// that ends the last task notifies it on its way to park.
TEST_P(Parking, ShutdownIsReleasedByTheLastTasksEnd) {
  TPOOL_CREATE_OR_SKIP(pool_, cfg());
  ASSERT_TRUE(pool_->submit({&Parking::held, &gate_}).ok());
  Stopwatch clock;
  auto stopping =
      std::async(std::launch::async, [&] { return pool_->shutdown(ShutdownMode::kDrain, kBound); });
  ASSERT_TRUE(until_registered(*pool_, &PoolStats::blocked_shutdowns, 1));
  gate_.open();
  const Status s = stopping.get();
  EXPECT_LT(clock.elapsed(), kWoken) << "shutdown slept until its deadline after the last task";
  EXPECT_TRUE(s.ok()) << s.to_string();
}

INSTANTIATE_TEST_SUITE_P(Variants, Parking,
                         ::testing::Values(SchedulerVariant::kWorkStealing,
                                           SchedulerVariant::kGlobalQueue,
                                           SchedulerVariant::kLaneExtension),
                         [](const auto& p) { return std::string(to_string(p.param)); });

}  // namespace
}  // namespace tpool::test
