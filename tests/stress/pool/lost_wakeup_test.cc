// Bounded lost-wake-up stress of tpool::Pool (label stress; issue 14 item 3).
//
// Over and over: let every worker park (stats().parked_workers, polled with a
// bound), then submit from one kind of producer and require each task it
// submitted to start within kStartBound. A lost wake-up leaves a task queued
// with every worker parked; nothing else in this test would submit again, so
// the task would sit there for good: here it fails the test within the bound,
// naming the producer, the lane, the coalescing batch and the variant. Every
// other round submits without waiting for the workers to park, so the submit
// races workers on their way into the sleep transition (c1..c3).
//
// Producers (docs/wake-protocol.md, "Producers"):
//   external     a thread that is neither a worker nor a registered submitter
//                (a gRPC thread): inject ring, no coalescing tick of its own
//   submitter    a thread holding a SubmitterSlot: its own queue (default
//                lane) or the inject ring, its own tick
//   nested       a task on the default lane submitting into the round's lane:
//                two children on the default lane (the LIFO slot, then the
//                stealable local queue); one child on the blocking lane (a
//                default worker submitting blocking work: the blocking inject
//                ring). One, so that with coalescing no second submit of the
//                round can make up for a wake the first one wrongly skipped.
//   batch        submit_batch of three tasks from an external thread
// Grid: scheduler variant x queue kind x (wake_coalesce_batch {1, 2, 4}, and
// {1, 2} with the searching gate) x lane
// {default, blocking} x producer, with three workers (lane_extension: one of
// them serves the blocking lane).
#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "../../unit/pool/pool_test_support.h"
#include "tpool/pool.h"

namespace tpool::test {
namespace {

constexpr std::size_t kWorkers = 3;
// A task that does not start within this bound after its submit returned is
// a lost wake-up (on a 2-core machine shared with builds a wake takes well
// under a millisecond; the bound is generous so load cannot fake a miss).
constexpr std::chrono::seconds kStartBound{kTsanDiv > 1 ? 10 : 2};
constexpr int kRounds = kTsanDiv > 1 ? 4 : 16;

enum class Producer { kExternal, kSubmitter, kNested, kBatch };
constexpr std::array kProducers = {Producer::kExternal, Producer::kSubmitter, Producer::kNested,
                                   Producer::kBatch};

const char* name_of(Producer p) {
  switch (p) {
    case Producer::kExternal:
      return "external";
    case Producer::kSubmitter:
      return "submitter";
    case Producer::kNested:
      return "nested";
    case Producer::kBatch:
      return "batch";
  }
  return "?";
}

struct Point {
  SchedulerVariant scheduler;
  QueueKind queue;
  std::size_t batch;  // wake_coalesce_batch
  bool gate = false;  // searching_gate
};

std::string point_name(const Point& p) {
  return std::string(to_string(p.scheduler)) + "_" + std::string(to_string(p.queue)) + "_b" +
         std::to_string(p.batch) + (p.gate ? "_gate" : "");
}

// gtest prints the parameter in ctest's test names: the point's name, not bytes.
void PrintTo(const Point& p, std::ostream* os) {
  *os << point_name(p);
}

std::vector<Point> all_points() {
  std::vector<Point> out;
  for (SchedulerVariant s : {SchedulerVariant::kGlobalQueue, SchedulerVariant::kWorkStealing,
                             SchedulerVariant::kLaneExtension}) {
    for (QueueKind q : {QueueKind::kRing, QueueKind::kChaseLev}) {
      for (std::size_t b : {1, 2, 4}) out.push_back({s, q, b});
      // The searching gate (pool_internal.h inv 7): it skips wakes too.
      for (std::size_t b : {1, 2}) out.push_back({s, q, b, true});
    }
  }
  return out;
}

// What one round waits for: `expected` task starts.
struct Round {
  Counter started;
  Lane lane = Lane::kDefault;
  std::atomic<int> child_failures{0};
};

void start_task(void* c) {
  static_cast<Round*>(c)->started.add();
}

// The nested producer: runs on the default lane and submits children into
// the round's lane (see the top of the file for how many).
int nested_children(Lane lane) {
  return lane == Lane::kBlocking ? 1 : 2;
}

void parent_task(void* c) {
  auto* r = static_cast<Round*>(c);
  SubmitOptions o;
  o.lane = r->lane;
  const int n = nested_children(o.lane);
  int failed = 0;
  for (int i = 0; i < n; ++i) {
    if (!this_task::pool()->submit({&start_task, r}, o).ok()) ++failed;
  }
  // The round ends (and `r` with it) once every child started, so touch it
  // only if a child could not be submitted: then the round waits out its
  // bound, and the shutdown after the miss waits for this task.
  if (failed != 0) r->child_failures.fetch_add(failed);
}

// After a miss: the stranded tasks point at the round, so end them before
// the round goes out of scope. Cancel rather than drain: a drain waits for a
// worker to run the task, and with the wake lost none may come.
void end_tasks_while_round_lives(Pool& pool, Round& r) {
  const Status s = pool.shutdown(ShutdownMode::kCancelPending, kBound);
  EXPECT_TRUE(s.ok()) << "after the miss the pool did not shut down: " << s.to_string();
  (void)r;
}

class LostWakeup : public ::testing::TestWithParam<Point> {};

TEST_P(LostWakeup, EveryTaskStartsWithinTheBound) {
  const Point& pt = GetParam();
  Config c;
  c.scheduler_variant = pt.scheduler;
  c.queue_kind = pt.queue;
  c.min_threads = kWorkers;
  c.max_threads = kWorkers;
  c.blocking_workers = pt.scheduler == SchedulerVariant::kLaneExtension ? 1 : 0;
  c.wake_coalesce_batch = pt.batch;
  c.searching_gate = pt.gate;
  c.name = "lost_wakeup";
  std::unique_ptr<Pool> pool;
  TPOOL_CREATE_OR_SKIP(pool, c);

  for (Lane lane : {Lane::kDefault, Lane::kBlocking}) {
    for (Producer prod : kProducers) {
      const std::string where = std::string("producer ") + name_of(prod) + ", lane " +
                                (lane == Lane::kDefault ? "default" : "blocking") + ", " +
                                point_name(pt);
      for (int round = 0; round < kRounds; ++round) {
        // Even rounds: every worker parked first. Odd rounds: submit while
        // the workers are still on their way to sleep.
        if (round % 2 == 0) {
          ASSERT_TRUE(eventually([&] { return pool->stats().parked_workers == kWorkers; }))
              << "the workers never all parked (" << pool->stats().parked_workers << " of "
              << kWorkers << "), before round " << round << ", " << where;
        }
        Round r;
        r.lane = lane;
        SubmitOptions o;
        o.lane = lane;
        std::int64_t expected = 1;
        switch (prod) {
          case Producer::kExternal:
            ASSERT_TRUE(pool->submit({&start_task, &r}, o).ok()) << where;
            break;
          case Producer::kSubmitter: {
            auto slot = pool->register_submitter();
            ASSERT_TRUE(slot.ok()) << slot.status().to_string();
            ASSERT_TRUE(pool->submit({&start_task, &r}, o).ok()) << where;
            // Wait before the slot is released: release hands leftovers to
            // the inject ring and wakes, which would hide a lost wake-up.
            if (!r.started.wait_at_least(1, kStartBound)) {
              ADD_FAILURE() << "lost wake-up: the task did not start within " << kStartBound.count()
                            << " s, round " << round << ", " << where;
              return end_tasks_while_round_lives(*pool, r);
            }
            continue;
          }
          case Producer::kNested: {
            expected = nested_children(lane);
            ASSERT_TRUE(pool->submit({&parent_task, &r}, SubmitOptions{}).ok()) << where;
            break;
          }
          case Producer::kBatch: {
            expected = 3;
            const std::array<Task, 3> ts = {Task{&start_task, &r}, Task{&start_task, &r},
                                            Task{&start_task, &r}};
            auto n = pool->submit_batch(ts, o);
            ASSERT_TRUE(n.ok() && n.value() == ts.size()) << where;
            break;
          }
        }
        if (!r.started.wait_at_least(expected, kStartBound)) {
          ADD_FAILURE() << "lost wake-up: " << r.started.value() << " of " << expected
                        << " tasks started within " << kStartBound.count() << " s, round " << round
                        << ", " << where;
          return end_tasks_while_round_lives(*pool, r);
        }
        ASSERT_EQ(r.child_failures.load(), 0) << where;
      }
    }
  }
  ASSERT_TRUE(pool->shutdown(ShutdownMode::kDrain, kBound).ok());
}

INSTANTIATE_TEST_SUITE_P(Grid, LostWakeup, ::testing::ValuesIn(all_points()),
                         [](const ::testing::TestParamInfo<Point>& i) {
                           return point_name(i.param);
                         });

}  // namespace
}  // namespace tpool::test
