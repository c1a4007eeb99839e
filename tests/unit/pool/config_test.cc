// Config::validate: every field out of range is refused with a sentence that
// names the field, the value given and the allowed range; Pool::create
// returns the same error and starts nothing.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "pool_test_support.h"
#include "tpool/pool.h"

namespace tpool::test {
namespace {

// A valid starting point in every build (a pinned build accepts only its variant).
Config base() {
  Config c;
  c.max_threads = 4;
  c.min_threads = 1;
#if defined(TPOOL_PINNED_VARIANT_GLOBAL_QUEUE)
  c.scheduler_variant = SchedulerVariant::kGlobalQueue;
#elif defined(TPOOL_PINNED_VARIANT_LANE_EXTENSION)
  c.scheduler_variant = SchedulerVariant::kLaneExtension;
#else
  c.scheduler_variant = SchedulerVariant::kWorkStealing;
#endif
  return c;
}

struct Bad {
  std::string name;
  std::function<void(Config&)> change;
  std::vector<std::string> says;  // each must appear in the message
};

std::vector<Bad> bad_configs() {
  return {
      {"max_threads",
       [](Config& c) { c.max_threads = 5000; },
       {"Config.max_threads = 5000", "1..4096"}},
      {"min_threads",
       [](Config& c) { c.min_threads = 5; },
       {"Config.min_threads = 5", "at most max_threads (4"}},
      {"queue_capacity_not_pow2",
       [](Config& c) { c.queue_capacity = 1000; },
       {"Config.queue_capacity = 1000", "a power of two in 2..2^30"}},
      {"queue_capacity_zero",
       [](Config& c) { c.queue_capacity = 0; },
       {"Config.queue_capacity = 0", "power of two"}},
      {"local_queue_capacity",
       [](Config& c) { c.local_queue_capacity = 100; },
       {"Config.local_queue_capacity = 100", "2..65536"}},
      {"local_queue_capacity_big",
       [](Config& c) { c.local_queue_capacity = 1 << 17; },
       {"Config.local_queue_capacity = 131072", "2..65536"}},
      {"wake_coalesce_batch",
       [](Config& c) { c.wake_coalesce_batch = 0; },
       {"Config.wake_coalesce_batch = 0", "1..1024"}},
      {"inject_batch_size",
       [](Config& c) { c.inject_batch_size = 33; },
       {"Config.inject_batch_size = 33", "1..32"}},
      {"steal_batch_size",
       [](Config& c) { c.steal_batch_size = 0; },
       {"Config.steal_batch_size = 0", "local_queue_capacity"}},
      {"steal_batch_size_big",
       [](Config& c) {
         c.local_queue_capacity = 16;
         c.steal_batch_size = 64;
       },
       {"Config.steal_batch_size = 64", "local_queue_capacity"}},
      {"max_submitters",
       [](Config& c) { c.max_submitters = 65; },
       {"Config.max_submitters = 65", "0..64"}},
      {"blocking_workers_without_lanes",
       [](Config& c) {
         c.scheduler_variant = SchedulerVariant::kWorkStealing;
         c.blocking_workers = 1;
       },
       {"Config.blocking_workers = 1", "lane_extension"}},
      {"blocking_workers_all",
       [](Config& c) {
         c.scheduler_variant = SchedulerVariant::kLaneExtension;
         c.blocking_workers = 4;
       },
       {"Config.blocking_workers = 4", "below max_threads (4)"}},
      {"max_overflow_workers",
       [](Config& c) { c.max_overflow_workers = 5000; },
       {"Config.max_overflow_workers = 5000", "0..4096"}},
      {"overflow_without_interval",
       [](Config& c) { c.max_overflow_workers = 2; },
       {"Config.max_overflow_workers = 2", "positive watchdog_interval", "0 ns"}},
      {"watchdog_interval_negative",
       [](Config& c) { c.watchdog_interval = -5ns; },
       {"Config.watchdog_interval = -5", "at least 0"}},
      {"blocking_promotion_timeout",
       [](Config& c) { c.blocking_promotion_timeout = 0ns; },
       {"Config.blocking_promotion_timeout", "positive", "0 ns"}},
  };
}

class ConfigValidate : public ::testing::TestWithParam<Bad> {};

TEST_P(ConfigValidate, NamesFieldValueAndRange) {
  Config c = base();
  ASSERT_TRUE(c.validate().ok()) << c.validate().to_string();
  GetParam().change(c);
  const Status s = c.validate();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  for (const std::string& part : GetParam().says) {
    EXPECT_NE(s.message().find(part), std::string::npos)
        << "message \"" << s.message() << "\" lacks \"" << part << "\"";
  }
  auto r = Pool::create(c);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), s.message());
}

INSTANTIATE_TEST_SUITE_P(Fields, ConfigValidate, ::testing::ValuesIn(bad_configs()),
                         [](const ::testing::TestParamInfo<Bad>& i) { return i.param.name; });

TEST(ConfigValidateEdges, LimitsAreAccepted) {
  Config c = base();
  c.queue_capacity = 2;
  c.local_queue_capacity = 2;
  c.steal_batch_size = 1;
  c.inject_batch_size = 32;
  c.wake_coalesce_batch = 1024;
  c.max_submitters = 64;
  EXPECT_TRUE(c.validate().ok()) << c.validate().to_string();
  c.max_submitters = 0;
  c.max_threads = 0;  // one per core
  c.min_threads = 0;
  EXPECT_TRUE(c.validate().ok()) << c.validate().to_string();
}

TEST(ConfigValidateEdges, TinyPoolStillRuns) {
  Config c = base();
  c.queue_capacity = 2;
  c.local_queue_capacity = 2;
  c.steal_batch_size = 1;
  c.max_submitters = 0;
  auto r = Pool::create(c);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  std::atomic<int> n{0};
  auto f = [&] { n.fetch_add(1); };
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(r.value()->submit(task_of(f)).ok());
  EXPECT_EQ(r.value()->register_submitter().status().code(), StatusCode::kFull);
  ASSERT_TRUE(r.value()->shutdown(ShutdownMode::kDrain, kBound).ok());
  EXPECT_EQ(n.load(), 100);
}

#if defined(TPOOL_PINNED_VARIANT_GLOBAL_QUEUE) || defined(TPOOL_PINNED_VARIANT_WORK_STEALING) || \
    defined(TPOOL_PINNED_VARIANT_LANE_EXTENSION)
TEST(ConfigValidatePinned, OtherVariantIsRefusedNamingTheSwitch) {
  for (SchedulerVariant v : {SchedulerVariant::kGlobalQueue, SchedulerVariant::kWorkStealing,
                             SchedulerVariant::kLaneExtension}) {
    Config c = base();
    if (v == c.scheduler_variant) continue;
    c.scheduler_variant = v;
    const Status s = c.validate();
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.message().find("TPOOL_SCHEDULER_VARIANT"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find(std::string(to_string(v))), std::string::npos) << s.message();
  }
}
#endif

// Config::resolved() is the one place the defaults are computed: the pool
// runs exactly what it returns (Pool::config()), and validate() judges it.
TEST(ConfigResolved, FillsTheDefaultsAsThePoolRunsThem) {
  const std::size_t cores = std::max(1u, std::thread::hardware_concurrency());
  Config c = base();
  c.max_threads = 0;
  c.min_threads = 0;
  Config r = c.resolved();
  EXPECT_EQ(r.max_threads, cores);
  EXPECT_EQ(r.min_threads, cores);
  EXPECT_EQ(c.max_threads, 0u) << "resolved() returns a copy";
  EXPECT_EQ(r.queue_capacity, c.queue_capacity);
  EXPECT_EQ(r.name, c.name);

  c.max_threads = 3;
  c.min_threads = 0;
  EXPECT_EQ(c.resolved().min_threads, 3u) << "min_threads 0 means max_threads";
  c.min_threads = 2;
  EXPECT_EQ(c.resolved().min_threads, 2u) << "a given min_threads is kept";
  EXPECT_EQ(c.resolved().max_threads, 3u);

  auto pool = Pool::create(c);
  ASSERT_TRUE(pool.ok()) << pool.status().to_string();
  EXPECT_EQ(pool.value()->config().max_threads, c.resolved().max_threads);
  EXPECT_EQ(pool.value()->config().min_threads, c.resolved().min_threads);
  ASSERT_TRUE(pool.value()->shutdown(ShutdownMode::kDrain, kBound).ok());

  Config d = base();
  d.max_threads = 0;
  d.min_threads = 0;
  auto dp = Pool::create(d);
  ASSERT_TRUE(dp.ok()) << dp.status().to_string();
  EXPECT_EQ(dp.value()->config().max_threads, cores);
  EXPECT_EQ(dp.value()->config().min_threads, cores);
  ASSERT_TRUE(dp.value()->shutdown(ShutdownMode::kDrain, kBound).ok());
}

#if !defined(TPOOL_PINNED_VARIANT_GLOBAL_QUEUE) && !defined(TPOOL_PINNED_VARIANT_WORK_STEALING)
TEST(ConfigResolved, BlockingWorkersAllStartWithThePool) {
  Config c = base();
  c.scheduler_variant = SchedulerVariant::kLaneExtension;
  c.max_threads = 4;
  c.min_threads = 1;
  c.blocking_workers = 2;
  const Config r = c.resolved();
  EXPECT_EQ(r.min_threads, 3u) << "every blocking worker plus one default-lane worker";
  EXPECT_EQ(r.blocking_workers, 2u);
  auto pool = Pool::create(c);
  ASSERT_TRUE(pool.ok()) << pool.status().to_string();
  EXPECT_EQ(pool.value()->config().min_threads, 3u);
  ASSERT_TRUE(pool.value()->shutdown(ShutdownMode::kDrain, kBound).ok());
}
#endif

// validate() judges max_threads 0 as the core count: blocking_workers must
// stay below it.
#if !defined(TPOOL_PINNED_VARIANT_GLOBAL_QUEUE) && !defined(TPOOL_PINNED_VARIANT_WORK_STEALING)
TEST(ConfigResolved, ValidateJudgesTheResolvedMaxThreads) {
  const std::size_t cores = std::max(1u, std::thread::hardware_concurrency());
  Config c = base();
  c.scheduler_variant = SchedulerVariant::kLaneExtension;
  c.max_threads = 0;
  c.min_threads = 0;
  c.blocking_workers = cores;
  const Status s = c.validate();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("below max_threads (" + std::to_string(cores) + ")"),
            std::string::npos)
      << s.message();
  if (cores > 1) {
    c.blocking_workers = cores - 1;
    EXPECT_TRUE(c.validate().ok()) << c.validate().to_string();
  }
}
#endif

TEST(ToString, NamesEveryEnum) {
  EXPECT_EQ(to_string(Lane::kBlocking), "blocking");
  EXPECT_EQ(to_string(QueueKind::kChaseLev), "chase_lev");
  EXPECT_EQ(to_string(SchedulerVariant::kLaneExtension), "lane_extension");
  EXPECT_EQ(to_string(TaskOutcome::kCancelled), "cancelled");
  EXPECT_EQ(Status::Full("x").to_string().find("x") != std::string::npos, true);
}

}  // namespace
}  // namespace tpool::test
