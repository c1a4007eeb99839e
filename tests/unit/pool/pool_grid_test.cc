// Every behaviour of the pool's API against every variant: scheduler variant
// (global_queue, work_stealing, lane_extension) x queue kind (ring,
// chase_lev) x worker count (1, 2, 4, 8). Tasks are held with gates (events),
// never with sleeps; every wait is bounded so a hang fails with a message.
#include <gtest/gtest.h>

#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "pool_test_support.h"
#include "tpool/pool.h"

namespace tpool::test {
namespace {

class PoolGrid : public ::testing::TestWithParam<Variant> {
 protected:
  void TearDown() override {
    gate_.open();
    destroy_pool_bounded(pool_);
  }
  Config cfg() const { return config_for(GetParam()); }
  std::size_t workers() const { return GetParam().workers; }
  bool lanes() const { return cfg().blocking_workers > 0; }

  // Occupy every worker with a task held by gate_, one task at a time, each
  // seen running before the next is submitted.
  void hold_all_workers() {
    for (std::size_t i = 0; i < workers(); ++i) {
      ASSERT_TRUE(pool_->submit(task_of(held_)).ok());
      ASSERT_TRUE(held_running_.wait_at_least(static_cast<std::int64_t>(i) + 1))
          << "held task " << i << " of " << workers() << " never started";
    }
  }

  Event gate_;
  Counter held_running_;
  std::function<void()> held_ = [this] {
    held_running_.add();
    gate_.wait();
  };
  std::unique_ptr<Pool> pool_;
};

TEST_P(PoolGrid, SubmitRunsEveryTaskOnAWorker) {
  TPOOL_CREATE_OR_SKIP(pool_, cfg());
  constexpr std::size_t kTasks = 1000 / kTsanDiv;
  Ledger ledger(kTasks);
  auto items = ledger.items();
  std::atomic<int> off_worker{0};
  WaitGroup wg;
  SubmitOptions o;
  o.wait_group = &wg;
  for (auto& it : items) {
    ASSERT_TRUE(pool_->submit({&Ledger::run, &it}, o).ok());
  }
  ASSERT_TRUE(wg.wait(kBound));
  EXPECT_EQ(ledger.exactly_once(), "");
  EXPECT_EQ(off_worker.load(), 0);
  const PoolStats st = pool_->stats();
  EXPECT_EQ(st.submitted, kTasks);
  EXPECT_EQ(st.workers, workers());
}

TEST_P(PoolGrid, TaskSeesItsPoolAndWorker) {
  TPOOL_CREATE_OR_SKIP(pool_, cfg());
  Pool* seen_pool = nullptr;
  int seen_worker = -2;
  auto f = [&] {
    seen_pool = this_task::pool();
    seen_worker = this_task::worker_index();
  };
  SubmitOptions o;
  o.waitable = true;
  auto h = pool_->submit(task_of(f), o);
  ASSERT_TRUE(h.ok());
  ASSERT_TRUE(pool_->wait(h.value(), kBound).ok());
  EXPECT_EQ(seen_pool, pool_.get());
  EXPECT_GE(seen_worker, 0);
  EXPECT_LT(seen_worker, static_cast<int>(workers()));
  EXPECT_EQ(this_task::pool(), nullptr);
  EXPECT_EQ(this_task::worker_index(), -1);
  EXPECT_FALSE(this_task::is_cancelled());
}

TEST_P(PoolGrid, NullTaskIsInvalidArgument) {
  TPOOL_CREATE_OR_SKIP(pool_, cfg());
  auto r = pool_->submit(Task{nullptr, nullptr});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
}

TEST_P(PoolGrid, TrySubmitOnAFullPoolIsFullWithTheCapacity) {
  Config c = cfg();
  c.queue_capacity = 8;
  TPOOL_CREATE_OR_SKIP(pool_, c);
  // Every descriptor taken by a task that cannot end before the gate opens.
  for (int i = 0; i < 8; ++i) ASSERT_TRUE(pool_->submit(task_of(held_)).ok()) << i;
  int ran = 0;
  auto f = [&] { ++ran; };
  auto r = pool_->try_submit(task_of(f));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kFull);
  EXPECT_NE(r.status().message().find("queue_capacity=8"), std::string::npos)
      << r.status().message();
  // A submit that says "reject" behaves the same.
  SubmitOptions o;
  o.backpressure = Backpressure::kReject;
  auto r2 = pool_->submit(task_of(f), o);
  ASSERT_FALSE(r2.ok());
  EXPECT_EQ(r2.status().code(), StatusCode::kFull);
  EXPECT_EQ(pool_->stats().rejected_full, 2u);
  EXPECT_EQ(pool_->stats().live_descriptors, 8u);
  gate_.open();
  ASSERT_TRUE(pool_->shutdown(ShutdownMode::kDrain, kBound).ok());
  EXPECT_EQ(ran, 0);
  EXPECT_EQ(pool_->stats().live_descriptors, 0u);
}

TEST_P(PoolGrid, SubmitBatchAcceptsAPrefix) {
  Config c = cfg();
  c.queue_capacity = 16;
  TPOOL_CREATE_OR_SKIP(pool_, c);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(pool_->submit(task_of(held_)).ok());
  Ledger ledger(20);
  auto items = ledger.items();
  // Held too: a task that ended would free its descriptor for the batch's
  // next round, and the accepted prefix would depend on timing.
  struct Gated {
    Ledger::Item* item;
    Event* gate;
  };
  std::vector<Gated> gated;
  for (auto& it : items) gated.push_back({&it, &gate_});
  auto run_gated = [](void* p) {
    auto* g = static_cast<Gated*>(p);
    g->gate->wait();
    Ledger::run(g->item);
  };
  std::vector<Task> tasks;
  for (auto& g : gated) tasks.push_back({run_gated, &g});
  SubmitOptions o;
  o.backpressure = Backpressure::kReject;
  auto r = pool_->submit_batch(tasks, o);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_EQ(r.value(), 12u);  // 16 descriptors, 4 held
  EXPECT_EQ(pool_->stats().rejected_full, 8u);
  // Nothing at all free: the whole batch is refused with Full.
  auto r2 = pool_->submit_batch(std::span<const Task>(tasks).subspan(12), o);
  ASSERT_FALSE(r2.ok());
  EXPECT_EQ(r2.status().code(), StatusCode::kFull);
  gate_.open();
  ASSERT_TRUE(pool_->shutdown(ShutdownMode::kDrain, kBound).ok());
  for (std::size_t i = 0; i < 20; ++i) {
    EXPECT_EQ(ledger.ran[i].load(), i < 12 ? 1 : 0) << "task " << i;
  }
}

TEST_P(PoolGrid, SubmitBatchWaitableHandles) {
  TPOOL_CREATE_OR_SKIP(pool_, cfg());
  Ledger ledger(64);
  auto items = ledger.items();
  std::vector<Task> tasks;
  for (auto& it : items) tasks.push_back({&Ledger::run, &it});
  std::vector<TaskHandle> handles(tasks.size());
  SubmitOptions o;
  o.waitable = true;
  auto r = pool_->submit_batch(tasks, o, handles);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r.value(), tasks.size());
  for (TaskHandle h : handles) {
    auto w = pool_->wait(h, kBound);
    ASSERT_TRUE(w.ok()) << w.status().to_string();
    EXPECT_EQ(w.value(), TaskOutcome::kCompleted);
  }
  EXPECT_EQ(ledger.exactly_once(), "");
  EXPECT_EQ(pool_->stats().live_descriptors, 0u);
}

// A binary fan-out tree from inside tasks: nested submits take the owner's
// LIFO slot and local queue; the tree's size is counted exactly.
struct Tree {
  Pool* pool;
  WaitGroup* wg;
  std::atomic<std::uint64_t>* nodes;
  int depth;
  static void run(void* c) {
    auto* t = static_cast<Tree*>(c);
    t->nodes->fetch_add(1, std::memory_order_relaxed);
    if (t->depth == 0) {
      delete t;
      return;
    }
    for (int k = 0; k < 2; ++k) {
      auto* child = new Tree{t->pool, t->wg, t->nodes, t->depth - 1};
      SubmitOptions o;
      o.wait_group = t->wg;
      if (!this_task::pool()->submit({&Tree::run, child}, o).ok()) delete child;
    }
    delete t;
  }
};

TEST_P(PoolGrid, NestedFanOutFromTasks) {
  TPOOL_CREATE_OR_SKIP(pool_, cfg());
  std::atomic<std::uint64_t> nodes{0};
  WaitGroup wg;
  SubmitOptions o;
  o.wait_group = &wg;
  constexpr int kDepth = kTsanDiv > 1 ? 9 : 12;
  ASSERT_TRUE(pool_->submit({&Tree::run, new Tree{pool_.get(), &wg, &nodes, kDepth}}, o).ok());
  ASSERT_TRUE(wg.wait(kBound));
  EXPECT_EQ(nodes.load(), (std::uint64_t{1} << (kDepth + 1)) - 1);
  ASSERT_TRUE(pool_->shutdown(ShutdownMode::kDrain, kBound).ok());
  const PoolStats st = pool_->stats();
  EXPECT_EQ(st.completed, nodes.load());
  EXPECT_EQ(st.live_descriptors, 0u);
}

// Workers that submit under Backpressure::kBlock into a pool with far fewer
// descriptors than the tree has nodes: a worker short of a descriptor runs
// queued work, and with nothing to run (every descriptor held by a running
// task, perhaps nested in its own stack) runs the new task itself
// (caller-runs). Without both, every worker ends up waiting on descriptors
// that only their own queued or nested tasks would free.
TEST_P(PoolGrid, NestedFanOutThroughATinyPoolDoesNotDeadlock) {
  Config c = cfg();
  c.queue_capacity = 8;
  c.backpressure = Backpressure::kBlock;
  TPOOL_CREATE_OR_SKIP(pool_, c);
  std::atomic<std::uint64_t> nodes{0};
  WaitGroup wg;
  SubmitOptions o;
  o.wait_group = &wg;
  constexpr int kDepth = 8;
  ASSERT_TRUE(pool_->submit({&Tree::run, new Tree{pool_.get(), &wg, &nodes, kDepth}}, o).ok());
  ASSERT_TRUE(wg.wait(kBound)) << "nested submits under backpressure deadlocked";
  EXPECT_EQ(nodes.load(), (std::uint64_t{1} << (kDepth + 1)) - 1);
  ASSERT_TRUE(pool_->shutdown(ShutdownMode::kDrain, kBound).ok());
  EXPECT_EQ(pool_->stats().live_descriptors, 0u);
}

TEST_P(PoolGrid, RegisteredSubmitterQueueIsStolenByWorkers) {
  TPOOL_CREATE_OR_SKIP(pool_, cfg());
  constexpr std::size_t kTasks = 100;
  Ledger ledger(kTasks);
  auto items = ledger.items();
  std::atomic<int> on_workers{0};
  WaitGroup wg;
  std::thread t([&] {
    auto slot = pool_->register_submitter();
    ASSERT_TRUE(slot.ok()) << slot.status().to_string();
    EXPECT_TRUE(slot.value().active());
    // One slot per thread.
    auto again = pool_->register_submitter();
    EXPECT_EQ(again.status().code(), StatusCode::kInvalidArgument);
    SubmitOptions o;
    o.wait_group = &wg;
    for (auto& it : items) ASSERT_TRUE(pool_->submit({&Ledger::run, &it}, o).ok());
    ASSERT_TRUE(wg.wait(kBound));  // before the slot is released: workers stole them
  });
  t.join();
  EXPECT_EQ(ledger.exactly_once(), "");
  if (GetParam().scheduler != SchedulerVariant::kGlobalQueue) {
    // Every task went through the submitter's own queue, and only stealing
    // takes from it (kTasks < local_queue_capacity, so none spilled).
    EXPECT_GE(pool_->stats().steal_tasks, kTasks);
  }
  (void)on_workers;
}

TEST_P(PoolGrid, ReleasedSubmitterHandsLeftoversToInject) {
  TPOOL_CREATE_OR_SKIP(pool_, cfg());
  hold_all_workers();
  constexpr std::size_t kTasks = 10;
  Ledger ledger(kTasks);
  auto items = ledger.items();
  WaitGroup wg;
  std::uint64_t depth_before = 0;
  std::thread t([&] {
    auto slot = pool_->register_submitter();
    ASSERT_TRUE(slot.ok());
    SubmitOptions o;
    o.wait_group = &wg;
    for (auto& it : items) ASSERT_TRUE(pool_->submit({&Ledger::run, &it}, o).ok());
    depth_before = pool_->stats().submitter_depth;
    slot.value().release();
    EXPECT_FALSE(slot.value().active());
  });
  t.join();
  const PoolStats st = pool_->stats();
  if (GetParam().scheduler != SchedulerVariant::kGlobalQueue) {
    EXPECT_EQ(depth_before, kTasks);
    EXPECT_EQ(st.submitter_depth, 0u);
  }
  EXPECT_EQ(st.lanes[0].inject_depth, kTasks);
  gate_.open();
  ASSERT_TRUE(wg.wait(kBound));
  EXPECT_EQ(ledger.exactly_once(), "");
}

TEST_P(PoolGrid, SubmitterSlotsRunOut) {
  Config c = cfg();
  c.max_submitters = 1;
  TPOOL_CREATE_OR_SKIP(pool_, c);
  Event held, done;
  std::thread t([&] {
    auto slot = pool_->register_submitter();
    ASSERT_TRUE(slot.ok());
    held.open();
    done.wait();
  });
  ASSERT_TRUE(held.wait_for());
  auto r = pool_->register_submitter();
  EXPECT_EQ(r.status().code(), StatusCode::kFull);
  EXPECT_NE(r.status().message().find("max_submitters"), std::string::npos);
  done.open();
  t.join();
  auto r2 = pool_->register_submitter();  // released by t's RAII slot
  EXPECT_TRUE(r2.ok()) << r2.status().to_string();
}

TEST_P(PoolGrid, WaitReportsCompletedFailedCancelled) {
  TPOOL_CREATE_OR_SKIP(pool_, cfg());
  int ran = 0;
  auto ok_fn = [&] { ++ran; };
  auto throw_fn = [] { throw std::runtime_error("task failed"); };
  SubmitOptions o;
  o.waitable = true;
  auto h1 = pool_->submit(task_of(ok_fn), o);
  auto h2 = pool_->submit(task_of(throw_fn), o);
  CancelToken tok;
  tok.cancel();
  int not_run = 0;
  auto never = [&] { ++not_run; };
  SubmitOptions oc = o;
  oc.cancel = &tok;
  auto h3 = pool_->submit(task_of(never), oc);
  ASSERT_TRUE(h1.ok() && h2.ok() && h3.ok());
  EXPECT_EQ(pool_->wait(h1.value(), kBound).value(), TaskOutcome::kCompleted);
  EXPECT_EQ(pool_->wait(h2.value(), kBound).value(), TaskOutcome::kFailed);
  EXPECT_EQ(pool_->wait(h3.value(), kBound).value(), TaskOutcome::kCancelled);
  EXPECT_EQ(ran, 1);
  EXPECT_EQ(not_run, 0);
  const PoolStats st = pool_->stats();
  EXPECT_EQ(st.completed, 1u);
  EXPECT_EQ(st.failed, 1u);
  EXPECT_EQ(st.cancelled, 1u);
  EXPECT_EQ(st.live_descriptors, 0u);
}

TEST_P(PoolGrid, WaitTimesOutThenSucceeds) {
  TPOOL_CREATE_OR_SKIP(pool_, cfg());
  SubmitOptions o;
  o.waitable = true;
  auto h = pool_->submit(task_of(held_), o);
  ASSERT_TRUE(h.ok());
  auto w = pool_->wait(h.value(), 1ms);
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.status().code(), StatusCode::kTimeout);
  gate_.open();
  auto w2 = pool_->wait(h.value(), kBound);  // the handle stayed valid
  ASSERT_TRUE(w2.ok()) << w2.status().to_string();
  EXPECT_EQ(w2.value(), TaskOutcome::kCompleted);
}

TEST_P(PoolGrid, SecondWaitIsStaleHandle) {
  TPOOL_CREATE_OR_SKIP(pool_, cfg());
  auto f = [] {};
  SubmitOptions o;
  o.waitable = true;
  auto h = pool_->submit(task_of(f), o);
  ASSERT_TRUE(h.ok());
  ASSERT_TRUE(pool_->wait(h.value(), kBound).ok());
  // No timeout to spare: a stale handle is answered from its generation
  // without waiting (inv 2), so a generation bump skipped on release shows
  // as Timeout at once instead of a wait of kBound.
  auto again = pool_->wait(h.value(), std::chrono::nanoseconds(0));
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), StatusCode::kStaleHandle) << again.status().to_string();
  EXPECT_EQ(pool_->wait(TaskHandle{}).status().code(), StatusCode::kInvalidArgument);
}

TEST_P(PoolGrid, DetachBeforeAndAfterTheEnd) {
  TPOOL_CREATE_OR_SKIP(pool_, cfg());
  SubmitOptions o;
  o.waitable = true;
  auto f = [] {};
  auto ended = pool_->submit(task_of(f), o);
  ASSERT_TRUE(ended.ok());
  // Seen ended without wait() (which would release it).
  ASSERT_TRUE(eventually([&] { return pool_->stats().completed >= 1; }));
  auto running = pool_->submit(task_of(held_), o);
  ASSERT_TRUE(running.ok());
  pool_->detach(ended.value());    // (about to have) ended: freed by whoever is last
  pool_->detach(running.value());  // not ended: freed when it ends
  gate_.open();
  ASSERT_TRUE(pool_->shutdown(ShutdownMode::kDrain, kBound).ok());
  EXPECT_EQ(pool_->stats().live_descriptors, 0u);
  EXPECT_EQ(pool_->wait(ended.value(), kBound).status().code(), StatusCode::kStaleHandle);
  EXPECT_EQ(pool_->wait(running.value(), kBound).status().code(), StatusCode::kStaleHandle);
}

TEST_P(PoolGrid, WaitGroupCountsEveryTask) {
  TPOOL_CREATE_OR_SKIP(pool_, cfg());
  WaitGroup wg;
  EXPECT_TRUE(wg.wait(0ns));  // empty group: done at once
  SubmitOptions o;
  o.wait_group = &wg;
  std::atomic<int> n{0};
  auto f = [&] { n.fetch_add(1); };
  ASSERT_TRUE(pool_->submit(task_of(held_), o).ok());
  for (int i = 0; i < 200; ++i) ASSERT_TRUE(pool_->submit(task_of(f), o).ok());
  EXPECT_FALSE(wg.wait(1ms));  // the held task keeps it open
  EXPECT_GE(wg.pending(), 1);
  gate_.open();
  ASSERT_TRUE(wg.wait(kBound));
  EXPECT_EQ(wg.pending(), 0);
  EXPECT_EQ(n.load(), 200);
}

// A task fans out and joins its children with help_wait: with one worker the
// parent must run them itself, or the pool deadlocks.
struct Parent {
  int children = 0;
  std::atomic<int> child_runs{0};
  bool joined = false;
  static void child(void* c) { static_cast<Parent*>(c)->child_runs.fetch_add(1); }
  static void run(void* c) {
    auto* p = static_cast<Parent*>(c);
    WaitGroup wg;
    SubmitOptions o;
    o.wait_group = &wg;
    for (int i = 0; i < p->children; ++i) {
      if (!this_task::pool()->submit({&Parent::child, p}, o).ok()) return;
    }
    p->joined = this_task::pool()->help_wait(wg, kBound);
  }
};

TEST_P(PoolGrid, HelpWaitJoinsChildrenWithoutDeadlock) {
  TPOOL_CREATE_OR_SKIP(pool_, cfg());
  // As many parents as workers, so no worker is left free to run children.
  std::deque<Parent> parents;
  std::vector<TaskHandle> hs;
  SubmitOptions o;
  o.waitable = true;
  for (std::size_t i = 0; i < workers(); ++i) {
    parents.emplace_back().children = static_cast<int>(300 / kTsanDiv);
    auto h = pool_->submit({&Parent::run, &parents.back()}, o);
    ASSERT_TRUE(h.ok());
    hs.push_back(h.value());
  }
  for (std::size_t i = 0; i < hs.size(); ++i) {
    auto w = pool_->wait(hs[i], kBound);
    ASSERT_TRUE(w.ok()) << "parent " << i << ": " << w.status().to_string();
    EXPECT_TRUE(parents[i].joined);
    EXPECT_EQ(parents[i].child_runs.load(), static_cast<int>(300 / kTsanDiv));
  }
  // Outside a worker, help_wait is a plain wait.
  WaitGroup wg;
  EXPECT_TRUE(pool_->help_wait(wg, 0ns));
}

// Regression (found by the fuzz harness): every worker inside help_wait,
// each waiting for work that is queued only after it stopped looking. The
// workers count as awake, so nobody is woken for that work: help_wait must
// keep looking for work while it waits (in rounds), or the pool stands still
// until the timeout.
TEST_P(PoolGrid, HelpWaitOnEveryWorkerStillRunsWorkQueuedLater) {
  TPOOL_CREATE_OR_SKIP(pool_, cfg());
  const std::size_t n = workers();
  std::vector<WaitGroup> groups(n);
  std::vector<int> joined(n, -1);
  Counter entered;
  struct Joiner {
    Pool* pool;
    WaitGroup* wg;
    int* joined;
    Counter* entered;
  };
  std::vector<Joiner> joiners;
  for (std::size_t i = 0; i < n; ++i) {
    groups[i].add(1);  // done by a task submitted once every joiner waits
    joiners.push_back({pool_.get(), &groups[i], &joined[i], &entered});
  }
  auto join = [](void* c) {
    auto* j = static_cast<Joiner*>(c);
    j->entered->add();
    *j->joined = j->pool->help_wait(*j->wg, kBound) ? 1 : 0;
  };
  // One at a time, each seen inside its task before the next, so each
  // worker holds one (a helping worker may also run one nested).
  for (std::size_t i = 0; i < n; ++i) {
    ASSERT_TRUE(pool_->submit({join, &joiners[i]}).ok());
    ASSERT_TRUE(entered.wait_at_least(static_cast<std::int64_t>(i) + 1));
  }
  auto release = [](void* c) { static_cast<WaitGroup*>(c)->done(); };
  for (std::size_t i = 0; i < n; ++i) ASSERT_TRUE(pool_->submit({release, &groups[i]}).ok());
  ASSERT_TRUE(pool_->shutdown(ShutdownMode::kDrain, kBound).ok());
  for (std::size_t i = 0; i < n; ++i) {
    EXPECT_EQ(joined[i], 1) << "help_wait " << i << " of " << n << " timed out";
  }
}

TEST_P(PoolGrid, CancelledBeforeStartCallsOnCancelNotFn) {
  TPOOL_CREATE_OR_SKIP(pool_, cfg());
  hold_all_workers();
  constexpr std::size_t kTasks = 20;
  Ledger ledger(kTasks);
  auto items = ledger.items();
  CancelToken tok;
  WaitGroup wg;
  SubmitOptions o;
  o.cancel = &tok;
  o.on_cancel = &Ledger::cancel;
  o.wait_group = &wg;
  for (auto& it : items) ASSERT_TRUE(pool_->submit({&Ledger::run, &it}, o).ok());
  tok.cancel();  // every one is still queued: the workers are held
  gate_.open();
  ASSERT_TRUE(wg.wait(kBound));
  EXPECT_EQ(ledger.exactly_once(), "");
  EXPECT_EQ(ledger.total_cancelled(), kTasks);
  EXPECT_EQ(ledger.total_ran(), 0u);
  EXPECT_EQ(pool_->stats().cancelled, kTasks);
}

TEST_P(PoolGrid, PassedDeadlineCancels) {
  TPOOL_CREATE_OR_SKIP(pool_, cfg());
  CancelToken tok;
  tok.set_deadline(CancelToken::Clock::now() - 1s);
  EXPECT_EQ(tok.reason(), CancelToken::Reason::kDeadline);
  int ran = 0;
  auto f = [&] { ++ran; };
  SubmitOptions o;
  o.waitable = true;
  o.cancel = &tok;
  auto h = pool_->submit(task_of(f), o);
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(pool_->wait(h.value(), kBound).value(), TaskOutcome::kCancelled);
  EXPECT_EQ(ran, 0);
  CancelToken later;
  later.set_deadline(CancelToken::Clock::now() + std::chrono::hours(1));
  EXPECT_FALSE(later.is_cancelled());
}

// reason_at(now) judges the deadline at a reading the caller took (a worker's
// task start stamp) instead of reading the clock: before the deadline none,
// at and after it kDeadline, and a cancel wins whatever the time.
TEST(CancelTokenAt, ReasonAtJudgesTheDeadlineAtTheGivenReading) {
  const auto d = CancelToken::Clock::time_point(std::chrono::hours(5));
  CancelToken tok;
  EXPECT_EQ(tok.reason_at(d), CancelToken::Reason::kNone);  // no deadline
  tok.set_deadline(d);
  EXPECT_EQ(tok.reason_at(d - std::chrono::nanoseconds(1)), CancelToken::Reason::kNone);
  EXPECT_EQ(tok.reason_at(d), CancelToken::Reason::kDeadline);
  EXPECT_EQ(tok.reason_at(d + std::chrono::hours(1)), CancelToken::Reason::kDeadline);
  tok.cancel();
  EXPECT_EQ(tok.reason_at(d - std::chrono::hours(1)), CancelToken::Reason::kCancelled);
}

// The token is one word (pool.h): the cancelled bit and the deadline share
// it, so neither write may lose the other, and the deadline's edge values
// keep their meaning: max() is no deadline, one before the epoch has passed.
TEST(CancelTokenWord, CancelAndDeadlineKeepEachOther) {
  EXPECT_EQ(sizeof(CancelToken), 8u);
  const auto d = CancelToken::Clock::time_point(std::chrono::hours(5));
  CancelToken cancelled_first;
  cancelled_first.cancel();
  cancelled_first.set_deadline(d);
  EXPECT_EQ(cancelled_first.reason_at(d - std::chrono::hours(1)), CancelToken::Reason::kCancelled)
      << "set_deadline after cancel() dropped the cancel";
  CancelToken deadline_first;
  deadline_first.set_deadline(d);
  deadline_first.cancel();
  EXPECT_EQ(deadline_first.reason_at(d - std::chrono::hours(1)), CancelToken::Reason::kCancelled);
  CancelToken moved;  // a later deadline replaces an earlier one, in both directions
  moved.set_deadline(d);
  moved.set_deadline(d + std::chrono::hours(1));
  EXPECT_EQ(moved.reason_at(d), CancelToken::Reason::kNone);
  moved.set_deadline(d - std::chrono::hours(1));
  EXPECT_EQ(moved.reason_at(d - std::chrono::minutes(30)), CancelToken::Reason::kDeadline);
  CancelToken none;
  none.set_deadline(CancelToken::Clock::time_point::max());
  EXPECT_EQ(none.reason(), CancelToken::Reason::kNone) << "time_point::max() is no deadline";
  EXPECT_EQ(none.reason_at(CancelToken::Clock::time_point::max()), CancelToken::Reason::kNone);
  CancelToken past;
  past.set_deadline(CancelToken::Clock::time_point(-std::chrono::hours(1)));
  EXPECT_EQ(past.reason(), CancelToken::Reason::kDeadline) << "a deadline before the epoch";
  EXPECT_FALSE(CancelToken().is_cancelled());
  // deadline() reads back what was set, whether or not the bit is set.
  EXPECT_EQ(CancelToken().deadline(), CancelToken::Clock::time_point::max());
  EXPECT_EQ(none.deadline(), CancelToken::Clock::time_point::max());
  EXPECT_EQ(cancelled_first.deadline(), d);
  EXPECT_EQ(deadline_first.deadline(), d);
  EXPECT_EQ(moved.deadline(), d - std::chrono::hours(1));
  EXPECT_EQ(past.deadline(), CancelToken::Clock::time_point()) << "stored as the epoch";
}

// Regression (found by the fuzz harness under TSan): a cancelled task's
// descriptor is not terminal, so wait() cannot free and recycle it, until its
// on_cancel has returned. A worker used to CAS queued -> cancelled and then
// call on_cancel, so a concurrent wait() freed the descriptor under it.
TEST_P(PoolGrid, WaitIsNotAnsweredWhileOnCancelRuns) {
  TPOOL_CREATE_OR_SKIP(pool_, cfg());
  struct Ctx {
    Event entered;
    Event release;
    int ran = 0;
  } ctx;
  CancelToken tok;
  tok.cancel();
  SubmitOptions o;
  o.waitable = true;
  o.cancel = &tok;
  o.on_cancel = [](void* c) {
    auto* x = static_cast<Ctx*>(c);
    x->entered.open();
    ASSERT_TRUE(x->release.wait_for());
  };
  auto h = pool_->submit({[](void* c) { ++static_cast<Ctx*>(c)->ran; }, &ctx}, o);
  ASSERT_TRUE(h.ok()) << h.status().to_string();
  ASSERT_TRUE(ctx.entered.wait_for());
  // on_cancel is running: the task has not ended yet.
  auto early = pool_->wait(h.value(), 0ns);
  EXPECT_EQ(early.status().code(), StatusCode::kTimeout) << early.status().to_string();
  pool_->detach(h.value());  // detach must not free it under on_cancel either
  EXPECT_EQ(pool_->stats().live_descriptors, 1u);
  ctx.release.open();
  ASSERT_TRUE(pool_->shutdown(ShutdownMode::kDrain, kBound).ok());
  EXPECT_EQ(ctx.ran, 0);
  const PoolStats st = pool_->stats();
  EXPECT_EQ(st.cancelled, 1u);
  EXPECT_EQ(st.live_descriptors, 0u);  // the worker freed it, detached, once
}

TEST_P(PoolGrid, RunningTaskReadsItsCancellation) {
  TPOOL_CREATE_OR_SKIP(pool_, cfg());
  CancelToken tok;
  Event started;
  bool before = true;
  bool after = false;
  auto f = [&] {
    before = this_task::is_cancelled();
    started.open();
    gate_.wait();
    after = this_task::is_cancelled();
  };
  SubmitOptions o;
  o.waitable = true;
  o.cancel = &tok;
  auto h = pool_->submit(task_of(f), o);
  ASSERT_TRUE(h.ok());
  ASSERT_TRUE(started.wait_for());
  tok.cancel();
  gate_.open();
  // It started, so it ran to the end: completed, having seen the flag.
  EXPECT_EQ(pool_->wait(h.value(), kBound).value(), TaskOutcome::kCompleted);
  EXPECT_FALSE(before);
  EXPECT_TRUE(after);
}

TEST_P(PoolGrid, ExceptionFailsTheTaskAndTheWorkerSurvives) {
  TPOOL_CREATE_OR_SKIP(pool_, cfg());
  auto thrower = [] { throw 42; };
  WaitGroup wg;
  SubmitOptions o;
  o.wait_group = &wg;
  for (std::size_t i = 0; i < 10 * workers(); ++i)
    ASSERT_TRUE(pool_->submit(task_of(thrower), o).ok());
  ASSERT_TRUE(wg.wait(kBound));
  std::atomic<int> ok{0};
  auto f = [&] { ok.fetch_add(1); };
  for (int i = 0; i < 50; ++i) ASSERT_TRUE(pool_->submit(task_of(f), o).ok());
  ASSERT_TRUE(wg.wait(kBound));
  EXPECT_EQ(ok.load(), 50);
  const PoolStats st = pool_->stats();
  EXPECT_EQ(st.failed, 10 * workers());
  EXPECT_EQ(st.completed, 50u);
  EXPECT_EQ(st.workers, workers());
}

TEST_P(PoolGrid, BlockedSubmitTimesOut) {
  Config c = cfg();
  c.queue_capacity = 8;
  TPOOL_CREATE_OR_SKIP(pool_, c);
  for (int i = 0; i < 8; ++i) ASSERT_TRUE(pool_->submit(task_of(held_)).ok());
  auto f = [] {};
  SubmitOptions o;
  o.backpressure = Backpressure::kBlock;
  o.block_timeout = 2ms;
  auto r = pool_->submit(task_of(f), o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kTimeout);
  EXPECT_NE(r.status().message().find("queue_capacity"), std::string::npos);
  EXPECT_EQ(pool_->stats().rejected_timeout, 1u);
  // A zero block timeout never waits: Full.
  o.block_timeout = 0ns;
  EXPECT_EQ(pool_->submit(task_of(f), o).status().code(), StatusCode::kFull);
}

TEST_P(PoolGrid, BlockedSubmitGetsTheDescriptorWhenOneFrees) {
  Config c = cfg();
  c.queue_capacity = 8;
  TPOOL_CREATE_OR_SKIP(pool_, c);
  for (int i = 0; i < 8; ++i) ASSERT_TRUE(pool_->submit(task_of(held_)).ok());
  std::atomic<int> ran{0};
  auto f = [&] { ran.fetch_add(1); };
  std::thread t([&] {
    for (int i = 0; i < 16; ++i) ASSERT_TRUE(pool_->submit(task_of(f)).ok());  // blocks
  });
  gate_.open();
  t.join();
  ASSERT_TRUE(pool_->shutdown(ShutdownMode::kDrain, kBound).ok());
  EXPECT_EQ(ran.load(), 16);
}

TEST_P(PoolGrid, BlockedSubmitIsReleasedByShutdown) {
  Config c = cfg();
  c.queue_capacity = 8;
  TPOOL_CREATE_OR_SKIP(pool_, c);
  for (int i = 0; i < 8; ++i) ASSERT_TRUE(pool_->submit(task_of(held_)).ok());
  auto f = [] {};
  Status blocked_result;
  std::thread submitter([&] { blocked_result = pool_->submit(task_of(f)).status(); });
  Status shut;
  std::thread closer([&] { shut = pool_->shutdown(ShutdownMode::kDrain, kBound); });
  submitter.join();  // returns before any held task ends: the gate is closed
  EXPECT_EQ(blocked_result.code(), StatusCode::kShutdown) << blocked_result.to_string();
  gate_.open();
  closer.join();
  EXPECT_TRUE(shut.ok()) << shut.to_string();
  EXPECT_EQ(pool_->stats().live_descriptors, 0u);
}

TEST_P(PoolGrid, ShutdownDrainRunsEverything) {
  TPOOL_CREATE_OR_SKIP(pool_, cfg());
  hold_all_workers();
  constexpr std::size_t kTasks = 500 / kTsanDiv;
  Ledger ledger(kTasks);
  auto items = ledger.items();
  SubmitOptions o;
  o.on_cancel = &Ledger::cancel;
  for (auto& it : items) ASSERT_TRUE(pool_->submit({&Ledger::run, &it}, o).ok());
  Status shut;
  std::thread closer([&] { shut = pool_->shutdown(ShutdownMode::kDrain, kBound); });
  gate_.open();
  closer.join();
  ASSERT_TRUE(shut.ok()) << shut.to_string();
  EXPECT_EQ(ledger.exactly_once(), "");
  EXPECT_EQ(ledger.total_ran(), kTasks);
  const PoolStats st = pool_->stats();
  EXPECT_EQ(st.live_descriptors, 0u);
  EXPECT_EQ(st.submitted, st.completed + st.failed + st.cancelled);
  EXPECT_TRUE(pool_->shutdown(ShutdownMode::kDrain, kBound).ok());  // idempotent
}

TEST_P(PoolGrid, ShutdownCancelPendingCancelsQueuedAndLetsRunningFinish) {
  TPOOL_CREATE_OR_SKIP(pool_, cfg());
  hold_all_workers();
  constexpr std::size_t kTasks = 300 / kTsanDiv;
  Ledger ledger(kTasks);
  auto items = ledger.items();
  Counter cancels;
  struct Ctx {
    Ledger::Item* item;
    Counter* cancels;
  };
  std::vector<Ctx> ctxs;
  for (auto& it : items) ctxs.push_back({&it, &cancels});
  SubmitOptions o;
  o.on_cancel = [](void* c) {
    auto* x = static_cast<Ctx*>(c);
    Ledger::cancel(x->item);
    x->cancels->add();
  };
  auto run = [](void* c) { Ledger::run(static_cast<Ctx*>(c)->item); };
  for (auto& x : ctxs) ASSERT_TRUE(pool_->submit({run, &x}, o).ok());
  Status shut;
  std::thread closer([&] { shut = pool_->shutdown(ShutdownMode::kCancelPending, kBound); });
  // Every queued task is cancelled while the running ones are still held.
  ASSERT_TRUE(cancels.wait_at_least(kTasks));
  EXPECT_FALSE(gate_.is_open());
  gate_.open();
  closer.join();
  ASSERT_TRUE(shut.ok()) << shut.to_string();
  EXPECT_EQ(ledger.exactly_once(), "");
  EXPECT_EQ(ledger.total_cancelled(), kTasks);
  EXPECT_EQ(held_running_.value(), static_cast<std::int64_t>(workers()));
  const PoolStats st = pool_->stats();
  EXPECT_EQ(st.cancelled, kTasks);
  EXPECT_EQ(st.completed, workers());
  EXPECT_EQ(st.live_descriptors, 0u);
}

TEST_P(PoolGrid, ShutdownTimesOutWhileATaskIsHeldThenFinishes) {
  TPOOL_CREATE_OR_SKIP(pool_, cfg());
  ASSERT_TRUE(pool_->submit(task_of(held_)).ok());
  ASSERT_TRUE(held_running_.wait_at_least(1));
  const Status s = pool_->shutdown(ShutdownMode::kDrain, 1ms);
  EXPECT_EQ(s.code(), StatusCode::kTimeout) << s.to_string();
  EXPECT_NE(s.message().find("1 tasks are still queued or running"), std::string::npos)
      << s.message();
  gate_.open();
  EXPECT_TRUE(pool_->shutdown(ShutdownMode::kDrain, kBound).ok());
  EXPECT_EQ(pool_->stats().live_descriptors, 0u);
}

TEST_P(PoolGrid, DestructorOfARunningPoolDrains) {
  TPOOL_CREATE_OR_SKIP(pool_, cfg());
  constexpr std::size_t kTasks = 2000 / kTsanDiv;
  Ledger ledger(kTasks);
  auto items = ledger.items();
  for (auto& it : items) ASSERT_TRUE(pool_->submit({&Ledger::run, &it}).ok());
  pool_.reset();
  EXPECT_EQ(ledger.exactly_once(), "");
}

TEST_P(PoolGrid, SubmitAfterShutdownIsShutdown) {
  TPOOL_CREATE_OR_SKIP(pool_, cfg());
  ASSERT_TRUE(pool_->shutdown(ShutdownMode::kDrain, kBound).ok());
  auto f = [] {};
  auto r = pool_->submit(task_of(f));
  EXPECT_EQ(r.status().code(), StatusCode::kShutdown);
  EXPECT_EQ(pool_->try_submit(task_of(f)).status().code(), StatusCode::kShutdown);
  Task ts[2] = {task_of(f), task_of(f)};
  EXPECT_EQ(pool_->submit_batch(ts).status().code(), StatusCode::kShutdown);
  EXPECT_EQ(pool_->register_submitter().status().code(), StatusCode::kShutdown);
  const PoolStats st = pool_->stats();
  EXPECT_EQ(st.rejected_shutdown, 4u);
  EXPECT_EQ(st.submitted, 0u);
  EXPECT_EQ(st.live_descriptors, 0u);
}

TEST_P(PoolGrid, ShutdownFromATaskIsRefused) {
  TPOOL_CREATE_OR_SKIP(pool_, cfg());
  Status s;
  auto f = [&] { s = this_task::pool()->shutdown(ShutdownMode::kDrain, 0ns); };
  SubmitOptions o;
  o.waitable = true;
  auto h = pool_->submit(task_of(f), o);
  ASSERT_TRUE(h.ok());
  ASSERT_TRUE(pool_->wait(h.value(), kBound).ok());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
}

TEST_P(PoolGrid, StatsAddUpAfterDrain) {
  TPOOL_CREATE_OR_SKIP(pool_, cfg());
  CancelToken cancelled;
  cancelled.cancel();
  auto ok_fn = [] {};
  auto throw_fn = [] { throw std::logic_error("x"); };
  for (int i = 0; i < 300; ++i) {
    SubmitOptions o;
    if (i % 3 == 1) o.cancel = &cancelled;
    Task t = i % 5 == 0 ? task_of(throw_fn) : task_of(ok_fn);
    ASSERT_TRUE(pool_->submit(t, o).ok());
  }
  ASSERT_TRUE(pool_->shutdown(ShutdownMode::kDrain, kBound).ok());
  const PoolStats st = pool_->stats();
  EXPECT_EQ(st.submitted, 300u);
  EXPECT_EQ(st.cancelled, 100u);
  EXPECT_EQ(st.submitted, st.completed + st.failed + st.cancelled);
  EXPECT_EQ(st.lanes[0].completed + st.lanes[1].completed, st.completed + st.failed);
  EXPECT_EQ(st.live_descriptors, 0u);
  EXPECT_EQ(st.inject_depth, 0u);
  EXPECT_EQ(st.local_depth_sum, 0u);
  EXPECT_EQ(pool_->progress(), st.completed + st.failed);
}

INSTANTIATE_TEST_SUITE_P(AllVariants, PoolGrid, ::testing::ValuesIn(all_variants()),
                         [](const ::testing::TestParamInfo<Variant>& i) {
                           return variant_name(i.param);
                         });

}  // namespace
}  // namespace tpool::test
