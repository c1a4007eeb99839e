// The plugin host inside a real tpool::Pool, as the daemon runs it: every job
// is a pool task that calls Host::invoke; fan-out children are nested pool
// tasks joined with help_wait; sleep runs on the blocking lane.
#include <gtest/gtest.h>

#include <atomic>
#include <latch>
#include <memory>
#include <string>
#include <vector>

#include "plugin_test_support.h"
#include "tpool/plugin_host/host.h"
#include "tpool/pool.h"

namespace tpool::plugin_host {
namespace {

using testing::LogRecorder;
using testing::TempDir;

// One job in the pool: its input, its handler (taken when accepted) and its
// result; the JobServices the plugin sees. Children are jobs too.
class PoolJob final : public JobServices {
 public:
  PoolJob(Pool& pool, const Host& host, HandlerRef ref, std::string input)
      : pool_(pool), host_(host), ref_(std::move(ref)), input_(std::move(input)) {}

  static void run(void* self) {
    auto* job = static_cast<PoolJob*>(self);
    job->result = job->host_.invoke(job->ref_, job->input_, *job);
    job->ref_ = HandlerRef();  // the job ended: drop its hold on the plugin
  }
  SubmitOptions options(WaitGroup& wg) const {
    SubmitOptions o;
    o.wait_group = &wg;
    o.lane = ref_ ? ref_.lane() : Lane::kDefault;
    return o;
  }

  std::function<void()> on_progress;
  InvokeResult result;

  bool is_cancelled() const noexcept override { return false; }
  std::optional<std::chrono::nanoseconds> remaining() const noexcept override {
    return std::nullopt;
  }
  void log(LogLevel, std::string_view) noexcept override {}
  void progress(double, std::string_view) noexcept override {
    if (on_progress) on_progress();
  }
  std::vector<InvokeResult> run_children(std::string_view handler,
                                         std::span<const std::string_view> inputs) override {
    HandlerRef ref = host_.find(handler);
    std::vector<std::unique_ptr<PoolJob>> children;
    WaitGroup wg;
    for (std::string_view in : inputs) {
      children.push_back(std::make_unique<PoolJob>(pool_, host_, ref, std::string(in)));
      EXPECT_TRUE(
          pool_.submit({&PoolJob::run, children.back().get()}, children.back()->options(wg)).ok());
    }
    pool_.help_wait(wg);
    std::vector<InvokeResult> out;
    for (auto& c : children) out.push_back(std::move(c->result));
    return out;
  }

 private:
  Pool& pool_;
  const Host& host_;
  HandlerRef ref_;
  std::string input_;
};

// lanes: the lane-extension scheduler with one blocking-lane worker; else
// plain work stealing, every worker on the default lane.
std::unique_ptr<Pool> make_pool(std::size_t threads, bool lanes) {
  Config cfg;
  cfg.min_threads = threads;
  cfg.max_threads = threads;
  if (lanes) {
    cfg.scheduler_variant = SchedulerVariant::kLaneExtension;
    cfg.blocking_workers = 1;
  }
  cfg.name = "plugin-test";
  auto pool = Pool::create(cfg);
  EXPECT_TRUE(pool.ok()) << pool.status().message();
  return std::move(pool).value();
}

TEST(PluginsInPool, ExamplesRunAsPoolTasksWithCorrectOutputs) {
  LogRecorder log;
  auto loaded = Host::load(testing::config_for({TPOOL_EXAMPLE_PLUGIN_DIR}, log, /*abort=*/true));
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  auto host = std::move(loaded).value();
  auto pool = make_pool(4, /*lanes=*/true);

  struct Case {
    std::string handler, input;
    JobCode code;
    std::string output_or_message;
  };
  const std::string h2 = "4f8b42c22dd3729b519ba6f68d2da7cc5b2d606d05daed5ad5128cc03e6c6358";
  std::vector<Case> cases = {
      {"echo", "hello", JobCode::kOk, "hello"},
      {"hash", "2:abc", JobCode::kOk, h2},
      {"fanout", "8 hash 2:abc", JobCode::kOk,
       [&] {
         std::string s;
         for (int i = 0; i < 8; ++i) s += h2 + "\n";
         return s;
       }()},
      {"fanout", "3 fanout 2 echo x", JobCode::kOk, "x\nx\n\nx\nx\n\nx\nx\n\n"},
      {"sleep", "1", JobCode::kOk, "slept 1 ms"},
      {"fail", "no", JobCode::kError, "fail: no"},
      {"fail_throw", "no", JobCode::kInternal,
       "handler 'fail_throw' (plugin 'fail_throw' 1.0.0) threw a C++ exception: fail_throw: no "
       "(handlers must catch their exceptions and return a status)"},
  };
  constexpr int kRounds = 50;
  std::vector<std::unique_ptr<PoolJob>> jobs;
  WaitGroup wg;
  for (int round = 0; round < kRounds; ++round) {
    for (const auto& c : cases) {
      jobs.push_back(std::make_unique<PoolJob>(*pool, *host, host->find(c.handler), c.input));
      ASSERT_TRUE(pool->submit({&PoolJob::run, jobs.back().get()}, jobs.back()->options(wg)).ok());
    }
  }
  ASSERT_TRUE(wg.wait());
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    const Case& c = cases[i % cases.size()];
    const InvokeResult& r = jobs[i]->result;
    ASSERT_EQ(r.code, c.code) << c.handler << " " << c.input << ": " << r.message;
    ASSERT_EQ(r.ok() ? r.output : r.message, c.output_or_message) << c.handler << " " << c.input;
  }
  auto stats = pool->stats();
  EXPECT_GT(stats.lanes[static_cast<int>(Lane::kBlocking)].completed, 0u);  // sleep's lane
  EXPECT_EQ(host->counters().handler_exceptions, static_cast<std::uint64_t>(kRounds));
  EXPECT_TRUE(pool->shutdown(ShutdownMode::kDrain).ok());
}

TEST(PluginsInPool, ReloadWithTenThousandQueuedJobsNoneFails) {
  constexpr std::size_t kJobs = 10000;
  constexpr std::size_t kWorkers = 4;
  TempDir dir;
  dir.add(std::string(TPOOL_IT_PLUGIN_DIR) + "/versioned_v1.so", "versioned.so");
  LogRecorder log;
  auto loaded = Host::load(testing::config_for({dir.str()}, log, /*abort=*/true));
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  auto host = std::move(loaded).value();
  auto pool = make_pool(kWorkers, /*lanes=*/false);

  // The first kWorkers jobs to start hold every worker inside the plugin
  // until the reload is done: the other 9996 stay queued, accepted with a
  // reference to version 1.
  constexpr std::size_t kHeld = kWorkers;
  std::atomic<std::size_t> started{0};
  std::latch held(kHeld);
  std::latch gate(1);
  std::vector<std::unique_ptr<PoolJob>> jobs;
  WaitGroup wg;
  for (std::size_t i = 0; i < kJobs; ++i) {
    jobs.push_back(
        std::make_unique<PoolJob>(*pool, *host, host->find("versioned"), std::to_string(i)));
    jobs.back()->on_progress = [&] {
      if (started.fetch_add(1) < kHeld) {
        held.count_down();
        gate.wait();
      }
    };
  }
  for (auto& j : jobs) ASSERT_TRUE(pool->submit({&PoolJob::run, j.get()}, j->options(wg)).ok());
  held.wait();
  dir.replace(std::string(TPOOL_IT_PLUGIN_DIR) + "/versioned_v2.so", "versioned.so");
  ASSERT_TRUE(host->reload().ok());
  EXPECT_EQ(host->find("versioned").info().plugin_version, "2.0.0");
  EXPECT_EQ(host->counters().libraries_closed, 0u);
  EXPECT_EQ(wg.pending(), static_cast<std::int64_t>(kJobs));  // none has ended yet
  gate.count_down();
  ASSERT_TRUE(wg.wait());
  for (std::size_t i = 0; i < kJobs; ++i) {
    ASSERT_TRUE(jobs[i]->result.ok()) << i << ": " << jobs[i]->result.message;
    ASSERT_EQ(jobs[i]->result.output, "v1:" + std::to_string(i));
  }
  // Each job dropped its reference when it ended: v1 closed after the last.
  EXPECT_EQ(host->counters().libraries_closed, 1u);
  EXPECT_TRUE(log.contains("versioned v1 fini"));
  EXPECT_TRUE(pool->shutdown(ShutdownMode::kDrain).ok());
}

}  // namespace
}  // namespace tpool::plugin_host
