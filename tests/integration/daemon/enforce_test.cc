// The engine's enforcement (engine.cc E4, job.h inv 5) in-process, driven by
// hand: enforce_interval 0 (no deadline thread), the misbehave plugin's
// `block` handler, which ignores cancellation, through the real pool and
// dlopen. The handler returns on its own after a bounded time so the pool
// can stop at the end.
#include <gtest/gtest.h>

#include <latch>
#include <thread>

#include "tpool/engine/engine.h"

namespace tpool::engine {
namespace {

class EnforceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    plugin_host::HostConfig hc;
    hc.dirs = {TPOOL_MISBEHAVE_PLUGIN_DIR};
    hc.log_sink = [](plugin_host::LogLevel, std::string_view, std::string_view) {};
    auto h = plugin_host::Host::load(hc);
    ASSERT_TRUE(h.ok()) << h.status().message();
    host_ = std::move(h).value();
    tpool::Config pc;
    pc.max_threads = 2;
    pc.min_threads = 2;
    pc.queue_capacity = 64;
    pc.scheduler_variant = SchedulerVariant::kLaneExtension;
    pc.blocking_workers = 1;
    auto p = Pool::create(pc);
    ASSERT_TRUE(p.ok()) << p.status().message();
    pool_ = std::move(p).value();
    EngineLimits l;
    l.enforce_interval = std::chrono::milliseconds(0);  // enforce() by hand
    l.cancel_grace = std::chrono::milliseconds(0);
    engine_ = std::make_unique<Engine>(*pool_, *host_, l);
  }
  void TearDown() override {
    if (pool_) (void)pool_->shutdown(ShutdownMode::kCancelPending);  // the handler returns
    engine_.reset();
    pool_.reset();
    host_.reset();
  }
  // Bounded: true once the job's handler has been called (the host counts
  // the call just before it), so a cancel from now on reaches the handler,
  // not the engine's check before the call. A hang becomes a failure.
  bool wait_in_handler(const Job& job) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (job.state() != JobState::kRunning || host_->counters().invocations == 0) {
      if (std::chrono::steady_clock::now() >= deadline) return false;
      std::this_thread::yield();
    }
    return true;
  }

  std::unique_ptr<plugin_host::Host> host_;
  std::unique_ptr<Pool> pool_;
  std::unique_ptr<Engine> engine_;
};

TEST_F(EnforceTest, ACancelledJobEndsWithoutItsHandlerAndTheHandlerIsCountedOnce) {
  std::latch ended(1);
  JobSpec s;
  s.handler = "block";
  s.payload = "1500";  // ignores cancellation, returns after 1.5 s on its own
  auto sub = engine_->submit(
      std::move(s), [](void* l, Job&) { static_cast<std::latch*>(l)->count_down(); }, &ended);
  ASSERT_TRUE(sub.ok());
  Job& job = *sub.value.job;
  ASSERT_TRUE(wait_in_handler(job));
  engine_->enforce();  // nothing to do: not told to stop
  EXPECT_EQ(job.state(), JobState::kRunning);
  job.cancel();
  engine_->enforce();  // sees the cancel (grace starts)
  engine_->enforce();  // grace 0 passed: ends the job under its handler
  ended.wait();
  EXPECT_EQ(job.state(), JobState::kCancelled);
  EXPECT_NE(job.message().find("did not return within"), std::string::npos) << job.message();
  auto running = engine_->running();
  ASSERT_EQ(running.size(), 1u);  // the worker is still inside the handler (inv 5)
  EXPECT_EQ(running[0].id, job.id());
  EXPECT_EQ(running[0].state, JobState::kCancelled);
  EXPECT_EQ(engine_->in_flight(), 1u);  // (E1) its task has not ended
  engine_->enforce();
  EngineSnapshot snap = engine_->snapshot();
  EXPECT_EQ(snap.ignored_cancellation, 1u);
  EXPECT_EQ(snap.running_after_end, 1u);
  // When the handler returns at last, its result is dropped and the host
  // does not count the call a second time. (wait_idle is woken only while
  // draining.)
  engine_->begin_drain();
  EXPECT_TRUE(engine_->wait_idle(std::chrono::seconds(30)));
  EXPECT_EQ(job.state(), JobState::kCancelled);
  EXPECT_EQ(host_->counters().ignored_cancellation, 0u);
  engine_->enforce();
  EXPECT_TRUE(engine_->running().empty());
  EXPECT_EQ(engine_->snapshot().ignored_cancellation, 1u);
  EXPECT_EQ(engine_->snapshot().running_after_end, 0u);
}

TEST_F(EnforceTest, ARunningJobPastItsDeadlineEndsTimedOutAtTheNextSweep) {
  std::latch ended(1);
  JobSpec s;
  s.handler = "block";
  s.payload = "1500";
  // The deadline passes while the job runs: whenever this test looks, either
  // the deadline is still ahead (the job runs) or the sweep ends it.
  s.deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(300);
  auto sub = engine_->submit(
      std::move(s), [](void* l, Job&) { static_cast<std::latch*>(l)->count_down(); }, &ended);
  ASSERT_TRUE(sub.ok());
  Job& job = *sub.value.job;
  // Sweep until it ends (bounded): no sleep decides the outcome, the
  // deadline does.
  auto bound = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!job.final() && std::chrono::steady_clock::now() < bound) {
    engine_->enforce();
    std::this_thread::yield();
  }
  ended.wait();
  EXPECT_EQ(job.state(), JobState::kTimedOut) << job.message();
  EXPECT_NE(job.message().find("timed out; its handler has not returned"), std::string::npos)
      << job.message();
  engine_->begin_drain();  // wait_idle is woken only while draining
  EXPECT_TRUE(engine_->wait_idle(std::chrono::seconds(30)));
}

}  // namespace
}  // namespace tpool::engine
