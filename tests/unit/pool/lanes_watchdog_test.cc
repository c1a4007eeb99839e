// Lanes, the watchdog with overflow workers (driven by manual ticks and an
// injected clock: no sleeps), cross-pool submits, latency histograms and the
// build-time switches as this build sees them.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "pool_test_support.h"
#include "tpool/pool.h"

namespace tpool::test {
namespace {

// ---- lanes -----------------------------------------------------------------

class Lanes : public ::testing::TestWithParam<std::tuple<bool, QueueKind>> {
 protected:
  void TearDown() override {
    gate_.open();
    pool_.reset();
  }
  Event gate_;
  Counter blocking_running_;
  std::function<void()> blocking_ = [this] {
    EXPECT_EQ(this_task::lane(), Lane::kBlocking);
    blocking_running_.add();
    gate_.wait();
  };
  std::unique_ptr<Pool> pool_;
};

// Blocking tasks held on a gate fill the blocking lane; CPU tasks on the
// default lane keep completing meanwhile. Default workers take blocking work
// only with cpu_helps_blocking.
TEST_P(Lanes, BlockedBlockingLaneDoesNotStarveTheDefaultLane) {
  const auto [cpu_helps, queue] = GetParam();
  Config c;
  c.scheduler_variant = SchedulerVariant::kLaneExtension;
  c.queue_kind = queue;
  c.max_threads = 3;
  c.min_threads = 3;
  c.blocking_workers = 1;
  c.cpu_helps_blocking = cpu_helps;
  TPOOL_CREATE_OR_SKIP(pool_, c);
  {
    const PoolStats st = pool_->stats();
    EXPECT_EQ(st.lanes[1].workers, 1u);
    EXPECT_EQ(st.lanes[0].workers, 2u);
  }
  // Without help, four held blocking tasks: one runs, three wait in the lane.
  // With help, one: more would take the default workers too, by design.
  const int held = cpu_helps ? 1 : 4;
  SubmitOptions blocking;
  blocking.lane = Lane::kBlocking;
  for (int i = 0; i < held; ++i) ASSERT_TRUE(pool_->submit(task_of(blocking_), blocking).ok());
  ASSERT_TRUE(blocking_running_.wait_at_least(1));

  WaitGroup cpu;
  std::atomic<int> cpu_ran{0};
  std::atomic<int> cpu_wrong_lane{0};
  auto cpu_task = [&] {
    if (this_task::lane() != Lane::kDefault) cpu_wrong_lane.fetch_add(1);
    cpu_ran.fetch_add(1);
  };
  SubmitOptions o;
  o.wait_group = &cpu;
  for (int i = 0; i < 500; ++i) ASSERT_TRUE(pool_->submit(task_of(cpu_task), o).ok());
  ASSERT_TRUE(cpu.wait(kBound)) << "default lane starved: " << cpu_ran.load() << " of 500 ran";
  EXPECT_EQ(cpu_wrong_lane.load(), 0);
  EXPECT_EQ(blocking_running_.value(), 1);

  // One more blocking-lane task that does not block.
  WaitGroup probe;
  std::atomic<int> probe_ran{0};
  auto probe_task = [&] { probe_ran.fetch_add(1); };
  SubmitOptions po = blocking;
  po.wait_group = &probe;
  ASSERT_TRUE(pool_->submit(task_of(probe_task), po).ok());
  if (cpu_helps) {
    ASSERT_TRUE(probe.wait(kBound)) << "no default worker helped the blocking lane";
    EXPECT_EQ(probe_ran.load(), 1);
  } else {
    // Only the blocking worker drains that lane, and it is held.
    EXPECT_FALSE(probe.wait(1ms));
    EXPECT_EQ(probe_ran.load(), 0);
    // Still queued: the held worker's own queue (spilled from the lane's
    // inject ring) or the ring itself.
    const PoolStats st = pool_->stats();
    EXPECT_EQ(st.lanes[1].inject_depth + st.local_depth_sum, static_cast<std::uint64_t>(held));
    // Per lane: all of it with the blocking lane (its ring or its worker's
    // own queue); the default workers' queues are empty (all 500 ran).
    EXPECT_EQ(st.lanes[1].inject_depth + st.lanes[1].local_depth, static_cast<std::uint64_t>(held));
    EXPECT_EQ(st.lanes[0].local_depth, 0u);
    EXPECT_EQ(st.lanes[0].local_depth + st.lanes[1].local_depth, st.local_depth_sum);
  }
  gate_.open();
  ASSERT_TRUE(pool_->shutdown(ShutdownMode::kDrain, kBound).ok());
  const PoolStats st = pool_->stats();
  EXPECT_EQ(probe_ran.load(), 1);
  EXPECT_EQ(st.lanes[1].completed, static_cast<std::uint64_t>(held) + 1);
  EXPECT_EQ(st.lanes[0].completed, 500u);
  EXPECT_EQ(st.live_descriptors, 0u);
}

INSTANTIATE_TEST_SUITE_P(HelpSettings, Lanes,
                         ::testing::Combine(::testing::Bool(),
                                            ::testing::Values(QueueKind::kRing,
                                                              QueueKind::kChaseLev)),
                         [](const ::testing::TestParamInfo<std::tuple<bool, QueueKind>>& i) {
                           return std::string(std::get<0>(i.param) ? "cpu_helps_blocking"
                                                                   : "no_help") +
                                  "_" + std::string(to_string(std::get<1>(i.param)));
                         });

TEST(LanesOff, BlockingWorkWithoutBlockingWorkersRunsOnTheDefaultLane) {
  Config c = config_for({SchedulerVariant::kWorkStealing, QueueKind::kRing, 2});
  std::unique_ptr<Pool> pool;
  TPOOL_CREATE_OR_SKIP(pool, c);
  Lane seen = Lane::kBlocking;
  auto f = [&] { seen = this_task::lane(); };
  SubmitOptions o;
  o.lane = Lane::kBlocking;
  o.waitable = true;
  auto h = pool->submit(task_of(f), o);
  ASSERT_TRUE(h.ok());
  ASSERT_TRUE(pool->wait(h.value(), kBound).ok());
  EXPECT_EQ(seen, Lane::kDefault);
  EXPECT_EQ(pool->stats().lanes[0].completed, 1u);
  EXPECT_EQ(pool->stats().lanes[1].completed, 0u);
}

// ---- watchdog and overflow workers -------------------------------------------

// The default lane has two workers in every variant; lane_extension adds a
// blocking worker, held separately so it cannot help the default lane.
class Watchdog : public ::testing::TestWithParam<SchedulerVariant> {
 protected:
  void TearDown() override {
    gate_.open();
    pool_.reset();
  }
  Config watched_config(std::size_t max_overflow) {
    Config c;
    c.scheduler_variant = GetParam();
    const bool lanes = GetParam() == SchedulerVariant::kLaneExtension;
    c.max_threads = lanes ? 3 : 2;
    c.min_threads = c.max_threads;
    c.blocking_workers = lanes ? 1 : 0;
    c.max_overflow_workers = max_overflow;
    c.watchdog_interval = 1ms;  // only checked for > 0: the test ticks
    c.blocking_promotion_timeout = 100ms;
    c.watchdog_driver = WatchdogDriver::kManual;
    c.clock = &clock_;
    c.name = "wd";
    return c;
  }
  std::size_t core_workers() const {
    return GetParam() == SchedulerVariant::kLaneExtension ? 3 : 2;
  }
  // Stall both default-lane workers (and hold the blocking worker).
  void stall_default_lane() {
    std::int64_t expect = 0;
    if (GetParam() == SchedulerVariant::kLaneExtension) {
      SubmitOptions b;
      b.lane = Lane::kBlocking;
      ASSERT_TRUE(pool_->submit(task_of(held_), b).ok());
      ASSERT_TRUE(running_.wait_at_least(++expect));
    }
    for (int i = 0; i < 2; ++i) {
      ASSERT_TRUE(pool_->submit(task_of(held_), {}).ok());
      ASSERT_TRUE(running_.wait_at_least(++expect));
    }
  }
  bool all_parked(std::size_t n) {
    return eventually([&] {
      const PoolStats st = pool_->stats();
      return st.parked_workers == n && st.busy_workers == 0;
    });
  }

  TestClock clock_;
  Event gate_;
  Counter running_;
  std::function<void()> held_ = [this] {
    running_.add();
    gate_.wait();
  };
  std::unique_ptr<Pool> pool_;
};

TEST_P(Watchdog, StallSpawnsOverflowOnePerTickRetiresAndJoins) {
  TPOOL_CREATE_OR_SKIP(pool_, watched_config(2));
  stall_default_lane();
  constexpr std::size_t kQueued = 200;
  Ledger ledger(kQueued);
  auto items = ledger.items();
  WaitGroup wg;
  SubmitOptions o;
  o.wait_group = &wg;
  for (auto& it : items) ASSERT_TRUE(pool_->submit({&Ledger::run, &it}, o).ok());

  pool_->watchdog_tick();  // no time has passed: nothing is stalled
  PoolStats st = pool_->stats();
  EXPECT_EQ(st.stalls_detected, 0u);
  EXPECT_EQ(st.overflow_spawned, 0u);
  EXPECT_EQ(ledger.total_ran(), 0u) << "the default lane is held: nothing may run yet";

  clock_.advance(150ms);
  pool_->watchdog_tick();
  st = pool_->stats();
  EXPECT_EQ(st.stalls_detected, 2u);
  EXPECT_EQ(st.stalled_now, 2u);
  EXPECT_EQ(st.overflow_spawned, 1u);
  EXPECT_EQ(st.overflow_active, 1u);
  EXPECT_EQ(st.overflow_max, 2u);
  EXPECT_EQ(st.workers, core_workers()) << "overflow workers are not core workers";

  pool_->watchdog_tick();  // still stalled (same tasks): one more, counted once
  st = pool_->stats();
  EXPECT_EQ(st.stalls_detected, 2u);
  EXPECT_EQ(st.overflow_spawned, 2u);
  EXPECT_EQ(st.overflow_active, 2u);

  pool_->watchdog_tick();  // at the limit
  EXPECT_EQ(pool_->stats().overflow_spawned, 2u);

  // The queued work completes on the overflow workers while the lane is stalled.
  ASSERT_TRUE(wg.wait(kBound)) << ledger.total_ran() << " of " << kQueued << " ran";
  EXPECT_EQ(ledger.exactly_once(), "");
  EXPECT_FALSE(gate_.is_open());

  gate_.open();
  // Idle overflow workers retire once parked through more than two ticks and
  // are joined by a later tick: the last was spawned by tick 3, whose retire
  // pass may already count it parked, so that is two or more ticks from here
  // (idle counts 1, 2 in ticks 3, 4; 3 = told to retire; then joined). Tick
  // until both are joined. Not a fixed tick count: a worker told to retire
  // may not get a CPU before the next ticks (it still shows as parked until
  // it runs), so the loop polls, yielding, within the usual bound.
  // First the released tasks end (else a tick would still see them stalled).
  ASSERT_TRUE(eventually([&] { return pool_->stats().busy_workers == 0; }));
  int ticks = 0;
  const bool retired = eventually([&] {
    pool_->watchdog_tick();
    ++ticks;
    return pool_->stats().overflow_retired == 2;
  });
  ASSERT_TRUE(retired) << "overflow workers not retired and joined after " << ticks
                       << " ticks: retired " << pool_->stats().overflow_retired << ", active "
                       << pool_->stats().overflow_active;
  EXPECT_GE(ticks, 2) << "an overflow worker retired before it was idle for two whole ticks";
  EXPECT_EQ(pool_->stats().stalled_now, 0u);
  st = pool_->stats();
  EXPECT_EQ(st.overflow_spawned, 2u);
  EXPECT_EQ(st.overflow_retired, 2u);
  EXPECT_EQ(st.overflow_active, 0u);
  EXPECT_EQ(st.stalls_detected, 2u);

  // The pool still wakes its parked core workers for new work.
  SubmitOptions w;
  w.waitable = true;
  auto f = [] {};
  auto h = pool_->submit(task_of(f), w);
  ASSERT_TRUE(h.ok());
  auto r = pool_->wait(h.value(), kBound);
  EXPECT_TRUE(r.ok()) << "a task submitted after overflow workers retired never ran: "
                      << r.status().to_string();

  // A second stall spawns again into the freed slots.
  running_.reset();
  gate_.reset();
  stall_default_lane();
  clock_.advance(150ms);
  pool_->watchdog_tick();
  st = pool_->stats();
  EXPECT_EQ(st.stalls_detected, 4u);
  EXPECT_EQ(st.overflow_spawned, 3u);
  gate_.open();
  ASSERT_TRUE(pool_->shutdown(ShutdownMode::kDrain, kBound).ok());
  st = pool_->stats();
  EXPECT_EQ(st.overflow_active, 0u);
  EXPECT_EQ(st.overflow_retired, st.overflow_spawned);
  EXPECT_EQ(st.live_descriptors, 0u);
}

TEST_P(Watchdog, NoOverflowWorkersMeansTicksOnlyCount) {
  Config c = watched_config(0);
  c.watchdog_interval = 0ns;
  TPOOL_CREATE_OR_SKIP(pool_, c);
  stall_default_lane();
  clock_.advance(1s);
  pool_->watchdog_tick();  // the watchdog is off: no start times are kept
  const PoolStats st = pool_->stats();
  EXPECT_EQ(st.overflow_spawned, 0u);
  EXPECT_EQ(st.stalls_detected, 0u);
}

INSTANTIATE_TEST_SUITE_P(Variants, Watchdog,
                         ::testing::Values(SchedulerVariant::kGlobalQueue,
                                           SchedulerVariant::kWorkStealing,
                                           SchedulerVariant::kLaneExtension),
                         [](const ::testing::TestParamInfo<SchedulerVariant>& i) {
                           return std::string(to_string(i.param));
                         });

// Shutdown with overflow workers alive and a stalled task, in both modes:
// bounded by its timeout, every task ends exactly once, nothing is left live.
class WatchdogShutdown : public Watchdog {};

TEST_P(WatchdogShutdown, WithOverflowWorkersAndAStalledTask) {
  for (ShutdownMode mode : {ShutdownMode::kDrain, ShutdownMode::kCancelPending}) {
    SCOPED_TRACE(mode == ShutdownMode::kDrain ? "drain" : "cancel_pending");
    gate_.reset();
    running_.reset();
    TPOOL_CREATE_OR_SKIP(pool_, watched_config(2));
    stall_default_lane();
    constexpr std::size_t kQueued = 300;
    Ledger ledger(kQueued);
    auto items = ledger.items();
    SubmitOptions o;
    o.on_cancel = &Ledger::cancel;
    for (auto& it : items) ASSERT_TRUE(pool_->submit({&Ledger::run, &it}, o).ok());
    clock_.advance(150ms);
    pool_->watchdog_tick();
    pool_->watchdog_tick();
    ASSERT_EQ(pool_->stats().overflow_active, 2u);
    // Still stalled: a bounded shutdown reports the timeout.
    const Status early = pool_->shutdown(mode, 1ms);
    EXPECT_EQ(early.code(), StatusCode::kTimeout) << early.to_string();
    Status shut;
    std::thread closer([&] { shut = pool_->shutdown(mode, kBound); });
    gate_.open();  // the test releases the stalled tasks
    closer.join();
    ASSERT_TRUE(shut.ok()) << shut.to_string();
    EXPECT_EQ(ledger.exactly_once(), "");
    const PoolStats st = pool_->stats();
    EXPECT_EQ(st.live_descriptors, 0u);
    EXPECT_EQ(st.overflow_active, 0u);
    EXPECT_EQ(st.overflow_retired, 2u);
    EXPECT_EQ(st.submitted, st.completed + st.failed + st.cancelled);
    pool_->watchdog_tick();  // after shutdown: a no-op
    pool_.reset();
  }
}

INSTANTIATE_TEST_SUITE_P(Variants, WatchdogShutdown,
                         ::testing::Values(SchedulerVariant::kWorkStealing,
                                           SchedulerVariant::kLaneExtension),
                         [](const ::testing::TestParamInfo<SchedulerVariant>& i) {
                           return std::string(to_string(i.param));
                         });

TEST(WatchdogThread, RealThreadTicksAndShutsDown) {
  // The watchdog thread with the real clock: only that it starts and stops
  // cleanly with the pool (timing is covered by the manual tests above).
  Config c = config_for({SchedulerVariant::kWorkStealing, QueueKind::kRing, 2});
  c.max_overflow_workers = 1;
  c.watchdog_interval = 1ms;
  std::unique_ptr<Pool> pool;
  TPOOL_CREATE_OR_SKIP(pool, c);
  std::atomic<int> n{0};
  auto f = [&] { n.fetch_add(1); };
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(pool->submit(task_of(f)).ok());
  ASSERT_TRUE(pool->shutdown(ShutdownMode::kDrain, kBound).ok());
  EXPECT_EQ(n.load(), 100);
}

// ---- two pools submitting into each other --------------------------------------

// A chain that hops between two pools: each task submits the next hop to the
// other pool from a worker of its own. In the default build the worker TLS
// carries the pool's identity, so a worker of A submitting to B goes through
// B's external path, never into A's own queues.
struct Hop {
  Pool* pools[2];
  WaitGroup* wg[2];
  Counter* hops;
  int left;
  int at;
  static void run(void* c) {
    auto* h = static_cast<Hop*>(c);
    if (this_task::pool() != h->pools[h->at]) std::abort();  // ran in the wrong pool
    h->hops->add();
    if (h->left == 0) return;
    --h->left;
    h->at ^= 1;
    SubmitOptions o;
    o.wait_group = h->wg[h->at];
    if (!h->pools[h->at]->submit({&Hop::run, h}, o).ok()) std::abort();
  }
};

TEST(TwoPools, SubmittingIntoEachOtherFromTheirTasks) {
#if TPOOL_SINGLE_POOL
  GTEST_SKIP() << "TPOOL_SINGLE_POOL builds drop the identity check this test is about";
#else
  for (SchedulerVariant v : {SchedulerVariant::kWorkStealing, SchedulerVariant::kGlobalQueue}) {
    std::unique_ptr<Pool> a, b;
    TPOOL_CREATE_OR_SKIP(a, config_for({v, QueueKind::kRing, 2}));
    TPOOL_CREATE_OR_SKIP(b, config_for({v, QueueKind::kChaseLev, 2}));
    constexpr int kChains = 16;
    constexpr int kHops = 500;
    Counter hops;
    WaitGroup wga, wgb;
    std::vector<Hop> chains(kChains);
    for (int i = 0; i < kChains; ++i) {
      chains[i] = Hop{{a.get(), b.get()}, {&wga, &wgb}, &hops, kHops, i % 2};
      SubmitOptions o;
      o.wait_group = chains[i].wg[chains[i].at];
      ASSERT_TRUE(chains[i].pools[chains[i].at]->submit({&Hop::run, &chains[i]}, o).ok());
    }
    // Either pool's group can reach zero while a hop is in flight to the
    // other, so the hops themselves are counted.
    ASSERT_TRUE(hops.wait_at_least(kChains * (kHops + 1)))
        << hops.value() << " of " << kChains * (kHops + 1) << " hops";
    ASSERT_TRUE(a->shutdown(ShutdownMode::kDrain, kBound).ok());
    ASSERT_TRUE(b->shutdown(ShutdownMode::kDrain, kBound).ok());
    EXPECT_EQ(a->stats().completed + b->stats().completed,
              static_cast<std::uint64_t>(kChains * (kHops + 1)));
    EXPECT_EQ(a->stats().live_descriptors + b->stats().live_descriptors, 0u);
  }
#endif
}

// ---- histograms and the timestamps switch -------------------------------------

TEST(Histograms, CountEveryTaskPerLaneWithMonotonePercentiles) {
  Config c;
  c.scheduler_variant = SchedulerVariant::kLaneExtension;
  c.max_threads = 3;
  c.blocking_workers = 1;
  std::unique_ptr<Pool> pool;
  TPOOL_CREATE_OR_SKIP(pool, c);
  auto f = [] {};
  CancelToken cancelled;
  cancelled.cancel();
  SubmitOptions def, blk, gone;
  blk.lane = Lane::kBlocking;
  gone.cancel = &cancelled;
  for (int i = 0; i < 300; ++i) ASSERT_TRUE(pool->submit(task_of(f), def).ok());
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(pool->submit(task_of(f), blk).ok());
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(pool->submit(task_of(f), gone).ok());
  ASSERT_TRUE(pool->shutdown(ShutdownMode::kDrain, kBound).ok());
  const PoolStats st = pool->stats();
  EXPECT_EQ(st.timestamps_enabled, static_cast<bool>(TPOOL_TIMESTAMPS_ENABLED));
  const std::uint64_t expect[2] = {300, 100};
  for (std::size_t l = 0; l < kLaneCount; ++l) {
    SCOPED_TRACE("lane " + std::to_string(l));
    EXPECT_EQ(st.lanes[l].completed, expect[l]);
    for (const HistogramSnapshot* h : {&st.lanes[l].wait, &st.lanes[l].run}) {
      if (!st.timestamps_enabled) {
        EXPECT_EQ(h->count(), 0u);
        EXPECT_EQ(h->sum_ns, 0u);
        EXPECT_EQ(h->percentile_ns(0.99), 0u);
        continue;
      }
      EXPECT_EQ(h->count(), expect[l]);  // cancelled tasks never started: not counted
      std::uint64_t last = 0;
      for (double q : {0.0, 0.5, 0.9, 0.99, 0.999, 1.0}) {
        const std::uint64_t p = h->percentile_ns(q);
        EXPECT_GE(p, last) << "q=" << q;
        last = p;
      }
      EXPECT_GT(last, 0u);
    }
  }
}

TEST(Histograms, RunTimeFromTheInjectedClock) {
  TestClock clock;
  Config c = config_for({SchedulerVariant::kWorkStealing, QueueKind::kRing, 1});
  c.clock = &clock;
  std::unique_ptr<Pool> pool;
  TPOOL_CREATE_OR_SKIP(pool, c);
  // One worker: each task's run interval holds only its own advance.
  auto f = [&] { clock.advance(1ms); };
  for (int i = 0; i < 50; ++i) ASSERT_TRUE(pool->submit(task_of(f)).ok());
  ASSERT_TRUE(pool->shutdown(ShutdownMode::kDrain, kBound).ok());
  const HistogramSnapshot& run = pool->stats().lanes[0].run;
  if (!pool->stats().timestamps_enabled) {
    EXPECT_EQ(run.count(), 0u);
    return;
  }
  ASSERT_EQ(run.count(), 50u);
  EXPECT_EQ(run.sum_ns, 50u * 1'000'000u);
  // 1 ms lies in the bucket [2^19 + 7 * 2^16, 2^20) ns: its upper bound is 2^20.
  EXPECT_EQ(run.percentile_ns(0.5), std::uint64_t{1} << 20);
  EXPECT_EQ(run.percentile_ns(1.0), std::uint64_t{1} << 20);
  EXPECT_EQ(run.count_below(std::uint64_t{1} << 19), 0u);
  EXPECT_EQ(run.count_below(std::uint64_t{1} << 21), 50u);
}

// ---- stats() while the pool grows -------------------------------------------------

TEST(GrowingPool, StatsWhileWorkersStartOnDemand) {
  Config c = config_for({SchedulerVariant::kWorkStealing, QueueKind::kRing, 4});
  c.min_threads = 1;
  std::unique_ptr<Pool> pool;
  TPOOL_CREATE_OR_SKIP(pool, c);
  std::atomic<bool> stop{false};
  std::thread reader([&] {
    while (!stop.load()) {
      const PoolStats st = pool->stats();
      EXPECT_LE(st.workers, 4u);
    }
  });
  Event gate;
  Counter running;
  auto held = [&] {
    running.add();
    gate.wait();
  };
  // Four held tasks need four workers: three start on demand.
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(pool->submit(task_of(held)).ok());
    ASSERT_TRUE(running.wait_at_least(i + 1)) << "worker " << i << " never started";
  }
  EXPECT_EQ(pool->stats().workers, 4u);
  gate.open();
  ASSERT_TRUE(pool->shutdown(ShutdownMode::kDrain, kBound).ok());
  stop.store(true);
  reader.join();
}

}  // namespace
}  // namespace tpool::test
