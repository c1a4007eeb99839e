// The searching-worker gate (Config::searching_gate; pool_internal.h inv 7;
// docs/algorithms.md, "The searching-worker gate"). A default-lane submit
// skips its wake while a worker is searching; what makes that safe is that
// the last searcher to take a task wakes one more worker. These tests pin
// down that second wake, which nothing else in the pool would make up for:
// two tasks that can only finish together (each waits for the other to
// start) must both run on a pool whose workers were all parked, round after
// round, from an external thread (gRPC's path) and from a registered
// submitter; and a second task must start while the first never returns
// (until the test releases it). Every wait is bounded.
#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <memory>
#include <ostream>
#include <string>

#include "pool_test_support.h"
#include "tpool/pool.h"

namespace tpool::test {
namespace {

constexpr std::size_t kWorkers = 3;
constexpr int kRounds = kTsanDiv > 1 ? 6 : 40;

// wake_coalesce_batch stays 1: with coalescing a submit may skip its wake on
// a worker that is awake but busy, so neither "two tasks run at once" nor "a
// second task starts while the first never returns" is promised (the Spin
// model's STALL claim holds with B = 1 only; the watchdog covers the rest).
struct GatePoint {
  SchedulerVariant scheduler;
  QueueKind queue;
};

std::string point_name(const GatePoint& p) {
  return std::string(to_string(p.scheduler)) + "_" + std::string(to_string(p.queue));
}

// gtest prints the parameter in ctest's test names: the point's name, not bytes.
void PrintTo(const GatePoint& p, std::ostream* os) {
  *os << point_name(p);
}

Config gated(const GatePoint& p) {
  Config c;
  c.scheduler_variant = p.scheduler;
  c.queue_kind = p.queue;
  c.min_threads = kWorkers;
  c.max_threads = kWorkers;
  c.searching_gate = true;
  c.name = "gate";
  return c;
}

// A gated pool; every task a test submits with `o` is counted in `ended`, so
// a round's tasks end before its locals go (the wait group's done() is the
// last thing the pool does for a task, pool inv 3).
class SearchingGate : public ::testing::TestWithParam<GatePoint> {
 protected:
  void SetUp() override {
    TPOOL_CREATE_OR_SKIP(pool, gated(GetParam()));
    o.wait_group = &ended;
  }
  void TearDown() override { destroy_pool_bounded(pool); }  // before `ended` goes
  WaitGroup ended;
  SubmitOptions o;
  std::unique_ptr<Pool> pool;
};

// Two tasks meet: each counts itself in and waits (bounded) for the other.
// One worker cannot run both, so the round passes only if the submit that
// was gated on a searcher got its worker from that searcher's chain wake.
TEST_P(SearchingGate, TwoTasksThatMeetBothRunFromParkedWorkers) {
  for (bool registered : {false, true}) {
    for (int round = 0; round < kRounds; ++round) {
      const std::string where = std::string(registered ? "registered submitter" : "external") +
                                ", round " + std::to_string(round);
      // Even rounds: every worker parked first (the first wake makes a
      // searcher, which the second submit may see). Odd rounds: right after
      // a worker ended a task, while it searches (the test thread spins on
      // the task's flag, so the two submits follow within a microsecond):
      // both submits may skip their wakes on that searcher.
      if (round % 2 == 0) {
        ASSERT_TRUE(eventually([&] { return pool->stats().parked_workers == kWorkers; }))
            << "the workers never all parked, " << where;
      } else {
        std::atomic<bool> ran{false};
        std::function<void()> q = [&] { ran.store(true, std::memory_order_release); };
        ASSERT_TRUE(pool->submit(task_of(q), {}).ok());
        ASSERT_TRUE(eventually([&] { return ran.load(std::memory_order_acquire); }));
      }
      Event met(2);
      Counter finished;
      bool both_met[2] = {false, false};
      std::function<void()> a = [&] {
        met.count_down();
        both_met[0] = met.wait_for();
        finished.add();
      };
      std::function<void()> b = [&] {
        met.count_down();
        both_met[1] = met.wait_for();
        finished.add();
      };
      auto submit_both = [&] {
        return pool->submit(task_of(a), o).ok() && pool->submit(task_of(b), o).ok();
      };
      if (registered) {
        auto slot = pool->register_submitter();
        ASSERT_TRUE(slot.ok()) << slot.status().to_string();
        ASSERT_TRUE(submit_both()) << where;
        // Release only after both ended: the release hands leftovers to the
        // inject ring and wakes, which would hide a missing chain wake.
        ASSERT_TRUE(finished.wait_at_least(2)) << where;
      } else {
        ASSERT_TRUE(submit_both()) << where;
        ASSERT_TRUE(finished.wait_at_least(2)) << where;
      }
      ASSERT_TRUE(ended.wait(kBound)) << where;
      EXPECT_TRUE(both_met[0] && both_met[1])
          << "the two tasks never ran at the same time: the second submit's wake was skipped "
             "on a searcher that took the first and woke nobody (inv 7), "
          << where;
      if (!(both_met[0] && both_met[1])) return;
    }
  }
  EXPECT_GT(pool->stats().parks, 0u);
}

// The model's STALL case: the first task never returns (until released), the
// second must start anyway.
TEST_P(SearchingGate, ASecondTaskStartsWhileTheFirstNeverReturns) {
  for (int round = 0; round < kRounds; ++round) {
    if (round % 2 == 0) {
      ASSERT_TRUE(eventually([&] { return pool->stats().parked_workers == kWorkers; }));
    }
    Event release;
    Counter started;
    std::function<void()> stuck = [&] {
      started.add();
      release.wait();
    };
    std::function<void()> second = [&] { started.add(); };
    ASSERT_TRUE(pool->submit(task_of(stuck), o).ok());
    ASSERT_TRUE(pool->submit(task_of(second), o).ok());
    const bool both = started.wait_at_least(2, kBound / 2);
    release.open();
    ASSERT_TRUE(ended.wait(kBound)) << "round " << round << ": the tasks did not end";
    ASSERT_TRUE(both) << "round " << round << ": " << started.value()
                      << " of 2 tasks started while the first was held";
  }
}

INSTANTIATE_TEST_SUITE_P(
    Points, SearchingGate,
    ::testing::Values(GatePoint{SchedulerVariant::kWorkStealing, QueueKind::kRing},
                      GatePoint{SchedulerVariant::kWorkStealing, QueueKind::kChaseLev},
                      GatePoint{SchedulerVariant::kGlobalQueue, QueueKind::kRing}),
    [](const ::testing::TestParamInfo<GatePoint>& i) { return point_name(i.param); });

// With the gate off nothing is counted; with it on, every worker that parks
// has left the count (nothing searching once all are parked): a leak would
// gate every later submit for good.
TEST(SearchingGateStats, AllParkedMeansNobodySearching) {
  std::unique_ptr<Pool> pool;
  TPOOL_CREATE_OR_SKIP(pool, gated({SchedulerVariant::kWorkStealing, QueueKind::kRing}));
  for (int round = 0; round < 10; ++round) {
    ASSERT_TRUE(eventually([&] { return pool->stats().parked_workers == kWorkers; }));
    Counter done;
    std::function<void()> t = [&] { done.add(); };
    for (int i = 0; i < 8; ++i) ASSERT_TRUE(pool->submit(task_of(t), {}).ok());
    ASSERT_TRUE(done.wait_at_least(8));
  }
  ASSERT_TRUE(eventually([&] { return pool->stats().parked_workers == kWorkers; }));
  EXPECT_EQ(pool->stats().searching_workers, 0u);
}

}  // namespace
}  // namespace tpool::test
