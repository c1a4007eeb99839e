// The job engine in-process, with a real pool and the real example plugins
// (dlopen): retention by time, bytes and count under an injected clock,
// idempotency within and after the window, fan-out, cancellation, drain.
#include <gtest/gtest.h>

#include <latch>
#include <thread>
#include <vector>

#include "tpool/engine/engine.h"

namespace tpool::engine {
namespace {

class ManualClock final : public tpool::Clock {
 public:
  std::chrono::nanoseconds now() const noexcept override {
    return std::chrono::nanoseconds(ns_.load(std::memory_order_relaxed));
  }
  void advance(std::chrono::nanoseconds d) { ns_.fetch_add(d.count(), std::memory_order_relaxed); }

 private:
  std::atomic<std::int64_t> ns_{1'000'000'000};
};

class EngineTest : public ::testing::Test {
 protected:
  void start(EngineLimits limits) {
    plugin_host::HostConfig hc;
    hc.dirs = {TPOOL_PLUGIN_DIR};
    hc.log_sink = [](plugin_host::LogLevel, std::string_view, std::string_view) {};
    auto h = plugin_host::Host::load(hc);
    ASSERT_TRUE(h.ok()) << h.status().message();
    host_ = std::move(h).value();
    tpool::Config pc;
    pc.max_threads = 3;
    pc.min_threads = 3;
    pc.queue_capacity = 1024;
    pc.scheduler_variant = SchedulerVariant::kLaneExtension;
    pc.blocking_workers = 1;
    pc.backpressure = Backpressure::kReject;
    auto p = Pool::create(pc);
    ASSERT_TRUE(p.ok()) << p.status().message();
    pool_ = std::move(p).value();
    engine_ = std::make_unique<Engine>(*pool_, *host_, limits, &clock_);
  }
  void TearDown() override {
    if (pool_) (void)pool_->shutdown(ShutdownMode::kCancelPending);
    engine_.reset();
    pool_.reset();
    host_.reset();
  }

  // Submits and waits for the end through the done callback (a latch).
  JobPtr run(JobSpec spec) {
    std::latch done(1);
    auto sub = engine_->submit(
        std::move(spec), [](void* l, Job&) { static_cast<std::latch*>(l)->count_down(); }, &done);
    EXPECT_TRUE(sub.ok()) << (sub.ok() ? "" : sub.error->message);
    if (!sub.ok()) return nullptr;
    if (sub.value.will_notify) done.wait();
    return sub.value.job;
  }
  static JobSpec spec(std::string handler, std::string payload, bool retain = true) {
    JobSpec s;
    s.handler = std::move(handler);
    s.payload = std::move(payload);
    s.retain = retain;
    return s;
  }

  ManualClock clock_;
  std::unique_ptr<plugin_host::Host> host_;
  std::unique_ptr<Pool> pool_;
  std::unique_ptr<Engine> engine_;
};

TEST_F(EngineTest, RetentionByTime) {
  EngineLimits l;
  l.retention = std::chrono::milliseconds(1000);
  start(l);
  auto a = run(spec("echo", "a"));
  ASSERT_EQ(a->state(), JobState::kSucceeded);
  EXPECT_TRUE(engine_->find(a->id()).ok());
  clock_.advance(std::chrono::milliseconds(999));
  engine_->expire();
  EXPECT_TRUE(engine_->find(a->id()).ok());
  clock_.advance(std::chrono::milliseconds(2));
  engine_->expire();
  auto gone = engine_->find(a->id());
  ASSERT_FALSE(gone.ok());
  EXPECT_EQ(gone.error->code, ErrorCode::kNotFound);
  EXPECT_EQ(engine_->snapshot().retained_entries, 0u);
  EXPECT_EQ(engine_->snapshot().expired, 1u);
}

TEST_F(EngineTest, RetentionByBytesDropsTheOldestFirst) {
  EngineLimits l;
  l.max_retained_bytes = 3 * (512 + 1000);  // room for three 1000-byte results
  start(l);
  std::vector<std::uint64_t> ids;
  for (int i = 0; i < 5; ++i) ids.push_back(run(spec("echo", std::string(1000, 'a' + i)))->id());
  EngineSnapshot s = engine_->snapshot();
  EXPECT_EQ(s.retained_entries, 3u);
  EXPECT_LE(s.retained_bytes, l.max_retained_bytes);
  EXPECT_FALSE(engine_->find(ids[0]).ok());
  EXPECT_FALSE(engine_->find(ids[1]).ok());
  for (int i = 2; i < 5; ++i) EXPECT_EQ(engine_->find(ids[i]).value->output()[0], 'a' + i);
}

TEST_F(EngineTest, RetentionByCountAndUnretainedJobsAreNotKept) {
  EngineLimits l;
  l.max_retained_entries = 2;
  start(l);
  auto x = run(spec("echo", "x", /*retain=*/false));
  EXPECT_FALSE(engine_->find(x->id()).ok());
  std::vector<std::uint64_t> ids;
  for (int i = 0; i < 4; ++i) ids.push_back(run(spec("echo", "y"))->id());
  EXPECT_EQ(engine_->snapshot().retained_entries, 2u);
  EXPECT_FALSE(engine_->find(ids[1]).ok());
  EXPECT_TRUE(engine_->find(ids[3]).ok());
}

TEST_F(EngineTest, IdempotencyKeyHoldsForTheRetentionWindowOnly) {
  EngineLimits l;
  l.retention = std::chrono::milliseconds(1000);
  start(l);
  JobSpec s = spec("echo", "once");
  s.idempotency_key = "k";
  auto first = run(s);
  auto again = engine_->submit(s, nullptr, nullptr);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again.value.deduplicated);
  EXPECT_EQ(again.value.job->id(), first->id());
  JobSpec other = s;
  other.payload = "twice";
  auto conflict = engine_->submit(other, nullptr, nullptr);
  ASSERT_FALSE(conflict.ok());
  EXPECT_EQ(conflict.error->code, ErrorCode::kFailedPrecondition);
  clock_.advance(std::chrono::milliseconds(1001));
  engine_->expire();
  auto fresh = run(s);  // the window has passed: a new job
  EXPECT_NE(fresh->id(), first->id());
}

TEST_F(EngineTest, FanOutRunsChildrenAsNestedTasks) {
  start({});
  auto j = run(spec("fanout", "64 hash 100:x"));
  ASSERT_EQ(j->state(), JobState::kSucceeded) << j->message();
  std::size_t lines = std::count(j->output().begin(), j->output().end(), '\n');
  EXPECT_GE(lines, 63u);
  auto bad = run(spec("fanout", "3 no_such_handler x"));
  EXPECT_EQ(bad->state(), JobState::kFailed);
  EXPECT_NE(bad->message().find("no_such_handler"), std::string::npos) << bad->message();
}

TEST_F(EngineTest, CancelQueuedAndRunningDeadlineAndDrain) {
  start({});
  // The blocking lane has one worker: the second sleep waits behind the first.
  auto first = engine_->submit(spec("sleep", "600000"), nullptr, nullptr);
  auto second = engine_->submit(spec("sleep", "600000"), nullptr, nullptr);
  ASSERT_TRUE(first.ok() && second.ok());
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (first.value.job->state() != JobState::kRunning &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();
  }
  ASSERT_EQ(first.value.job->state(), JobState::kRunning);
  second.value.job->cancel();
  EXPECT_EQ(second.value.job->state(), JobState::kCancelled);  // queued: ends at once
  JobSpec timed = spec("sleep", "600000");
  timed.lane = LaneChoice::kDefault;
  timed.deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(50);
  auto t = run(timed);
  EXPECT_EQ(t->state(), JobState::kTimedOut);
  engine_->begin_drain();
  auto late = engine_->submit(spec("echo", "x"), nullptr, nullptr);
  ASSERT_FALSE(late.ok());
  EXPECT_EQ(late.error->code, ErrorCode::kUnavailable);
  engine_->cancel_all();
  EXPECT_TRUE(engine_->wait_idle(std::chrono::seconds(20)));
  EXPECT_EQ(first.value.job->state(), JobState::kCancelled);
  EngineSnapshot s = engine_->snapshot();
  EXPECT_EQ(s.in_flight, 0u);
  EXPECT_EQ(s.rejected_draining, 1u);
}

TEST_F(EngineTest, InFlightLimitAndCapacityWaiter) {
  EngineLimits l;
  l.max_inflight_jobs = 1;
  start(l);
  auto hold = engine_->submit(spec("sleep", "600000"), nullptr, nullptr);
  ASSERT_TRUE(hold.ok());
  auto full = engine_->submit(spec("echo", "x"), nullptr, nullptr);
  ASSERT_FALSE(full.ok());
  EXPECT_EQ(full.error->code, ErrorCode::kExhausted);
  EXPECT_GT(full.error->retry_after.count(), 0);
  struct Waiter final : CapacityWaiter {
    std::latch called{1};
    void on_capacity() override { called.count_down(); }
  } waiter;
  ASSERT_TRUE(engine_->wait_for_capacity(&waiter));
  hold.value.job->cancel();
  waiter.called.wait();  // the end of the held job made room
  auto now_ok = run(spec("echo", "x", false));
  EXPECT_EQ(now_ok->output(), "x");
}

TEST_F(EngineTest, BatchGivesEachItemItsOutcomeInOrderAndStopsWhereRoomEnds) {
  EngineLimits l;
  l.max_inflight_jobs = 3;
  start(l);
  auto hold = engine_->submit(spec("sleep", "600000"), nullptr, nullptr);  // 1 in flight
  ASSERT_TRUE(hold.ok());
  std::latch ended(2);
  DoneFn count_down = [](void* latch, Job&) { static_cast<std::latch*>(latch)->count_down(); };

  // Without stop_when_full every item is answered: two fit, one is refused
  // for room, two are bad requests.
  std::vector<JobSpec> specs;
  specs.push_back(spec("echo", "a", false));
  specs.push_back(spec("", "x"));
  specs.push_back(spec("no_such_handler", "x"));
  specs.push_back(spec("echo", "b", false));
  specs.push_back(spec("echo", "c", false));
  std::vector<Engine::SubmitResult> out(specs.size());
  ASSERT_EQ(engine_->submit_batch(specs, count_down, &ended, nullptr, out, false), specs.size());
  ASSERT_TRUE(out[0].ok() && out[3].ok());
  EXPECT_TRUE(out[0].value.will_notify);
  EXPECT_EQ(out[1].error->code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(out[2].error->code, ErrorCode::kNotFound);
  EXPECT_EQ(out[4].error->code, ErrorCode::kExhausted);
  ended.wait();
  EXPECT_EQ(out[0].value.job->output(), "a");
  EXPECT_EQ(out[3].value.job->output(), "b");
  EXPECT_LT(out[0].value.job->id(), out[3].value.job->id());  // ids in item order

  // With stop_when_full the batch stops at the first item refused for room
  // and leaves it and the rest intact for a retry.
  std::latch ended2(2);
  std::vector<JobSpec> more;
  for (const char* p : {"d", "e", "f", "g"}) more.push_back(spec("echo", p, true));
  std::vector<Engine::SubmitResult> out2(more.size());
  // The two echo jobs above ended, but their in-flight slots are returned
  // only when their tasks end: wait for that.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (engine_->in_flight() != 1 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();
  }
  ASSERT_EQ(engine_->in_flight(), 1u);
  ASSERT_EQ(engine_->submit_batch(more, count_down, &ended2, nullptr, out2, true), 2u);
  EXPECT_TRUE(out2[0].ok() && out2[1].ok());
  EXPECT_EQ(out2[2].error->code, ErrorCode::kExhausted);
  EXPECT_EQ(more[2].payload, "f");
  EXPECT_EQ(more[3].payload, "g");
  ended2.wait();
  // Retained (Submit-like) batch jobs are in the result store.
  auto found = engine_->find(out2[1].value.job->id());
  ASSERT_TRUE(found.ok());
  EXPECT_EQ(found.value->output(), "e");
  hold.value.job->cancel();
}

TEST_F(EngineTest, BatchJobsAreCancelledWhileQueuedAndTimeOutPastTheirDeadline) {
  start({});
  // The blocking lane has one worker: the batch's sleeps queue behind this one.
  auto hold = engine_->submit(spec("sleep", "600000"), nullptr, nullptr);
  ASSERT_TRUE(hold.ok());
  std::latch ended(2);
  DoneFn count_down = [](void* latch, Job&) { static_cast<std::latch*>(latch)->count_down(); };
  std::vector<JobSpec> specs;
  specs.push_back(spec("sleep", "600000", false));
  specs.push_back(spec("sleep", "600000", false));
  specs[1].deadline = std::chrono::steady_clock::now() - std::chrono::milliseconds(1);
  std::vector<Engine::SubmitResult> out(specs.size());
  ASSERT_EQ(engine_->submit_batch(specs, count_down, &ended, nullptr, out, true), 2u);
  ASSERT_TRUE(out[0].ok() && out[1].ok());
  out[0].value.job->cancel();
  EXPECT_EQ(out[0].value.job->state(), JobState::kCancelled);  // queued: ends at once
  hold.value.job->cancel();
  ended.wait();
  EXPECT_EQ(out[1].value.job->state(), JobState::kTimedOut);
}

TEST_F(EngineTest, JobIdsCarryTheIncarnationAndForeignOnesAreNotFound) {
  // Issue 13, item 4: an id from another incarnation (a restarted daemon) is
  // NOT_FOUND with a sentence, even when its sequence number is one this
  // engine has handed out.
  EngineLimits l;
  l.incarnation = 0xabcdef;
  start(l);
  auto job = run(spec("echo", "mine"));
  ASSERT_NE(job, nullptr);
  EXPECT_EQ(JobId::incarnation(job->id()), 0xabcdefu);
  EXPECT_EQ(engine_->incarnation(), 0xabcdefu);
  EXPECT_TRUE(engine_->find(job->id()).ok());
  const std::uint64_t sequence = job->id() & JobId::kSequenceMask;
  for (std::uint32_t other : {0u, 1u, 0xabcdeeu, 0xffffffu}) {
    const std::uint64_t foreign = JobId::make(other, sequence);
    auto found = engine_->find(foreign);
    ASSERT_FALSE(found.ok()) << foreign;
    EXPECT_EQ(found.error->code, ErrorCode::kNotFound);
    EXPECT_EQ(found.error->message,
              "job " + std::to_string(foreign) + " is from another run of tpoold (incarnation " +
                  std::to_string(other) +
                  ", now 11259375): tpoold restarted since this job was accepted; its result is "
                  "gone, submit the job again");
  }
  // Drawn ones are never 0 (the ids of a tpoold before incarnations) and fit
  // in 24 bits.
  for (int i = 0; i < 1000; ++i) {
    const std::uint32_t inc = JobId::draw_incarnation();
    EXPECT_NE(inc, 0u);
    EXPECT_LE(inc, JobId::kIncarnationMask);
  }
}

}  // namespace
}  // namespace tpool::engine
