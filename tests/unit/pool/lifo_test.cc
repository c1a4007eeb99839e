// The owner's LIFO stack (Config::lifo_capacity; docs/algorithms.md, "The
// owner's LIFO stack"): nested submits run newest first on a busy pool, the
// seed's slot (capacity 1) keeps its order, a full stack spills its older half
// to the stealable local queue, and a worker that went to sleep while another
// held tasks in its stack is handed the older half before the owner runs the
// next one. Tasks are held with gates; every wait is bounded.
#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "pool_test_support.h"
#include "tpool/pool.h"

namespace tpool::test {
namespace {

Config one_lane(std::size_t workers, std::size_t lifo) {
  Config c;
  c.scheduler_variant = SchedulerVariant::kWorkStealing;
  c.max_threads = workers;
  c.min_threads = workers;
  c.lifo_capacity = lifo;
  c.name = "lifo";
  return c;
}

// Children record the order in which they ran, and on which worker.
struct Log {
  std::mutex mu;
  std::vector<int> order;
  std::vector<int> worker;
  void add(int i) {
    std::lock_guard lk(mu);
    order.push_back(i);
    worker.push_back(this_task::worker_index());
  }
};
struct Child {
  Log* log;
  int i;
  static void run(void* c) {
    auto* ch = static_cast<Child*>(c);
    ch->log->add(ch->i);
  }
};

// One worker, so nobody else runs or sleeps: the parent's five children run
// newest first from the stack; with capacity 1 the first takes the slot and
// the other four the local queue, popped oldest first (the seed's order).
TEST(Lifo, NestedChildrenRunNewestFirstAndCapacityOneKeepsTheSeedsOrder) {
  for (std::size_t lifo : {std::size_t{32}, std::size_t{1}}) {
    SCOPED_TRACE("lifo_capacity " + std::to_string(lifo));
    std::unique_ptr<Pool> pool;
    TPOOL_CREATE_OR_SKIP(pool, one_lane(1, lifo));
    Log log;
    std::vector<Child> kids;
    for (int i = 0; i < 5; ++i) kids.push_back({&log, i});
    WaitGroup wg;
    std::function<void()> parent = [&] {
      SubmitOptions o;
      o.wait_group = &wg;
      for (auto& k : kids) ASSERT_TRUE(this_task::pool()->submit({&Child::run, &k}, o).ok());
    };
    ASSERT_TRUE(pool->submit(task_of(parent), {}).ok());
    ASSERT_TRUE(eventually([&] { return pool->stats().completed == 6; }));
    ASSERT_TRUE(wg.wait(kBound));
    const std::vector<int> want =
        lifo > 1 ? std::vector<int>{4, 3, 2, 1, 0} : std::vector<int>{0, 1, 2, 3, 4};
    EXPECT_EQ(log.order, want);
    ASSERT_TRUE(pool->shutdown(ShutdownMode::kDrain, kBound).ok());
  }
}

// A stack of 4 filled by 10 children on a one-worker pool: each time it is
// full its older half goes to the local queue (counted in stats as local
// depth while the parent still runs), and every child runs once.
TEST(Lifo, AFullStackSpillsItsOlderHalfToTheLocalQueue) {
  std::unique_ptr<Pool> pool;
  TPOOL_CREATE_OR_SKIP(pool, one_lane(1, 4));
  Log log;
  std::vector<Child> kids;
  for (int i = 0; i < 10; ++i) kids.push_back({&log, i});
  Event submitted;
  Event release;
  WaitGroup wg;
  std::function<void()> parent = [&] {
    SubmitOptions o;
    o.wait_group = &wg;
    for (auto& k : kids) ASSERT_TRUE(this_task::pool()->submit({&Child::run, &k}, o).ok());
    submitted.open();
    release.wait();
  };
  ASSERT_TRUE(pool->submit(task_of(parent), {}).ok());
  ASSERT_TRUE(submitted.wait_for());
  // Pushes 0-3 fill it; 4 spills 0,1; 6 spills 2,3; 8 spills 4,5: six in
  // the local queue, four (6..9) in the stack.
  EXPECT_EQ(pool->stats().local_depth_sum, 6u);
  release.open();
  ASSERT_TRUE(wg.wait(kBound));
  // The stack newest first, then the local queue oldest first.
  EXPECT_EQ(log.order, (std::vector<int>{9, 8, 7, 6, 0, 1, 2, 3, 4, 5}));
  ASSERT_TRUE(pool->shutdown(ShutdownMode::kDrain, kBound).ok());
}

// Two workers. B is held while A's parent submits 8 children: nobody is
// asleep, so all 8 stay in A's stack, where B cannot see them. Then B is
// released, finds nothing and parks. When A's parent returns, A pops the
// newest child and, B being asleep, hands the older half of the rest to its
// local queue and wakes B, which steals them. The newest child, on A, waits
// until a child has run on B: without the hand-out none ever would, and it
// gives up after 10 s, failing the test.
TEST(Lifo, AWorkerThatWentToSleepIsHandedTheOlderHalf) {
  std::unique_ptr<Pool> pool;
  TPOOL_CREATE_OR_SKIP(pool, one_lane(2, 32));
  int a_index = -1;
  int b_index = -1;
  Counter ran_on_b;
  std::atomic<bool> newest_saw_b{false};
  struct Kid {
    int i;
    int* a_index;
    Counter* ran_on_b;
    std::atomic<bool>* newest_saw_b;
    static void run(void* c) {
      auto* k = static_cast<Kid*>(c);
      if (this_task::worker_index() != *k->a_index) k->ran_on_b->add();
      if (k->i == 7) k->newest_saw_b->store(k->ran_on_b->wait_at_least(1, 10s));
    }
  };
  std::vector<Kid> kids;
  for (int i = 0; i < 8; ++i) kids.push_back({i, &a_index, &ran_on_b, &newest_saw_b});
  Event b_gate;
  Counter b_running;
  std::function<void()> hold_b = [&] {
    b_index = this_task::worker_index();
    b_running.add();
    b_gate.wait();
  };
  Event submitted;
  Event parent_gate;
  WaitGroup wg;
  std::function<void()> parent = [&] {
    a_index = this_task::worker_index();
    SubmitOptions o;
    o.wait_group = &wg;
    for (auto& k : kids) ASSERT_TRUE(this_task::pool()->submit({&Kid::run, &k}, o).ok());
    submitted.open();
    parent_gate.wait();
  };
  ASSERT_TRUE(pool->submit(task_of(hold_b), {}).ok());
  ASSERT_TRUE(b_running.wait_at_least(1));
  ASSERT_TRUE(pool->submit(task_of(parent), {}).ok());
  ASSERT_TRUE(submitted.wait_for());
  ASSERT_NE(a_index, b_index);
  EXPECT_EQ(pool->stats().local_depth_sum, 0u) << "every child in A's stack";
  b_gate.open();
  ASSERT_TRUE(eventually([&] { return pool->stats().parked_workers == 1; }))
      << "B did not park after its task: it must not see A's stack";
  parent_gate.open();
  ASSERT_TRUE(wg.wait(kBound));
  EXPECT_TRUE(newest_saw_b.load())
      << "no child ran on the sleeping worker: A's stack was not handed out";
  EXPECT_GT(ran_on_b.value(), 0);
  ASSERT_TRUE(pool->shutdown(ShutdownMode::kDrain, kBound).ok());
}

// While a worker sleeps, a nested submit past the first goes to the local
// queue, where the woken sleeper can steal it at once (the parent keeps
// running): the stack never hides work from a worker that is already idle.
TEST(Lifo, NestedSubmitsWhileAWorkerSleepsAreStealableAtOnce) {
  std::unique_ptr<Pool> pool;
  TPOOL_CREATE_OR_SKIP(pool, one_lane(2, 32));
  ASSERT_TRUE(eventually([&] { return pool->stats().parked_workers == 2; }));
  Counter ran_elsewhere;
  Event parent_gate;
  int a_index = -1;
  struct Probe {
    int* parent_worker;
    Counter* elsewhere;
    static void run(void* c) {
      auto* p = static_cast<Probe*>(c);
      if (this_task::worker_index() != *p->parent_worker) p->elsewhere->add();
    }
  };
  std::vector<Probe> probes(4, Probe{&a_index, &ran_elsewhere});
  WaitGroup wg;
  std::function<void()> parent = [&] {
    a_index = this_task::worker_index();
    SubmitOptions o;
    o.wait_group = &wg;
    for (auto& p : probes) ASSERT_TRUE(this_task::pool()->submit({&Probe::run, &p}, o).ok());
    // Held until another worker has run one of them: only possible if they
    // are not all hidden in this worker's stack.
    EXPECT_TRUE(ran_elsewhere.wait_at_least(1, 10s)) << "the idle worker never got a child";
    parent_gate.open();
  };
  ASSERT_TRUE(pool->submit(task_of(parent), {}).ok());
  ASSERT_TRUE(parent_gate.wait_for());
  ASSERT_TRUE(wg.wait(kBound));
  ASSERT_TRUE(pool->shutdown(ShutdownMode::kDrain, kBound).ok());
}

TEST(Lifo, CapacityOutOfRangeIsRefusedNamingTheField) {
  for (std::size_t bad : {std::size_t{0}, std::size_t{257}}) {
    Config c = one_lane(1, bad);
    Status s = c.validate();
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.message().find("lifo_capacity"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("1..256"), std::string::npos) << s.message();
  }
}

}  // namespace
}  // namespace tpool::test
