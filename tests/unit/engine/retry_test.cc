// Retries and delayed jobs (issue 17, items 4 and 5): the engine's scheduler
// (daemon/engine/src/scheduler.h, K1-K5; engine.cc, E6; admission.cc, A7)
// with the real plugin host and the engine_testkit plugin's "flaky" handler,
// which reads its attempt number through the ABI 1.1 host call.
//
// The schedule is checked against an injected clock with a fixed jitter: a
// job is due exactly at its backoff, not a millisecond before (the tests
// advance the clock and call run_scheduled(); no sleeps).
#include <gtest/gtest.h>

#include "engine_test_support.h"
#include "scheduler.h"

namespace tpool::engine::testing {
namespace {

using namespace std::chrono_literals;

TEST(Backoff, FullJitterUnderTheDoublingCeilingAndTheCap) {
  // base 100 ms, cap 1 s: ceilings 100, 200, 400, 800, 1000, 1000, ...
  EXPECT_EQ(backoff_delay(100ms, 1000ms, 1, 0.5), 50ms);
  EXPECT_EQ(backoff_delay(100ms, 1000ms, 2, 0.5), 100ms);
  EXPECT_EQ(backoff_delay(100ms, 1000ms, 4, 0.5), 400ms);
  EXPECT_EQ(backoff_delay(100ms, 1000ms, 5, 0.5), 500ms);   // capped at 1 s
  EXPECT_EQ(backoff_delay(100ms, 1000ms, 60, 0.5), 500ms);  // no overflow
  EXPECT_EQ(backoff_delay(100ms, 1000ms, 3, 0.0), 0ms);     // full jitter reaches 0
  EXPECT_LT(backoff_delay(100ms, 1000ms, 3, 0.999999), 400ms + 1ms);
  EXPECT_EQ(backoff_delay(0ms, 1000ms, 3, 0.5), 0ms);  // base 0: at once
  // cap 0: no cap but the hour
  EXPECT_EQ(backoff_delay(1000ms, 0ms, 40, 0.5), std::chrono::milliseconds(30min));
}

class Retry : public EngineBench {
 protected:
  void start_manual(EngineLimits l = BenchOptions::test_limits()) {
    BenchOptions o;
    o.limits = l;
    o.clock = &clock_;  // the scheduler's thread is off (K5): run_scheduled() drives it
    start(std::move(o));
  }
  static JobSpec flaky(std::string payload, std::uint32_t max_attempts,
                       std::chrono::milliseconds base = 0ms, std::chrono::milliseconds cap = 0ms) {
    JobSpec s = spec("flaky", std::move(payload));
    s.max_attempts = max_attempts;
    s.backoff_base = base;
    s.backoff_cap = cap;
    s.retain = true;
    return s;
  }
  // Waits until the job is SCHEDULED (its failed attempt's task handed it
  // to the scheduler) or final.
  bool waits(const JobPtr& j) {
    return eventually([&] {
      return (j->state() == JobState::kScheduled && engine().snapshot().scheduled == 1 &&
              engine().in_flight() == 0) ||
             j->final();
    });
  }
  ManualClock clock_;
};

TEST_F(Retry, ARetryableFailureRunsAgainUntilItSucceeds) {
  start();  // the real clock: the scheduler's thread queues each retry (base 0: at once)
  auto j = run(flaky("2", 3));
  ASSERT_NE(j, nullptr);
  Recorder::Call c = done_.wait_job(j->id());
  EXPECT_EQ(c.state, JobState::kSucceeded) << c.message;
  EXPECT_EQ(c.output, "ok on attempt 3");
  EXPECT_EQ(j->attempts(), 3u);
  const std::vector<std::string> history = j->attempt_messages();
  ASSERT_EQ(history.size(), 2u);
  EXPECT_EQ(history[0], "attempt 1: attempt 1 failed");
  EXPECT_EQ(history[1], "attempt 2: attempt 2 failed");
  EXPECT_EQ(engine().snapshot().retried, 2u);
  EXPECT_EQ(done_.calls_for(j->id()), 1);  // reported once, when final
  EXPECT_EQ(counts("flaky").submitted, 1u);
  EXPECT_EQ(counts("flaky").succeeded, 1u);
}

TEST_F(Retry, TheLastAttemptsFailureIsFinalAndCountsTheAttempts) {
  start();
  Recorder::Call c = finish(flaky("9", 3));
  EXPECT_EQ(c.state, JobState::kFailed);
  EXPECT_EQ(c.message, "attempt 3 failed (attempt 3 of 3)");
  auto j = engine().find(c.id).value;
  ASSERT_NE(j, nullptr);
  EXPECT_EQ(j->attempts(), 3u);
  EXPECT_EQ(j->attempt_messages().size(), 3u);  // every attempt's outcome is kept
  EXPECT_EQ(counts("flaky").failed, 1u);
}

TEST_F(Retry, APermanentFailureIsNotRetried) {
  start();
  for (const char* status : {"10", "2"}) {  // TPOOL_STATUS_PERMANENT, TPOOL_STATUS_INVALID_INPUT
    Recorder::Call c = finish(flaky(std::string("9:") + status, 5));
    EXPECT_EQ(c.state, JobState::kFailed);
    EXPECT_NE(c.message.find("(attempt 1 of 5; not retried: the handler said the failure is "
                             "permanent)"),
              std::string::npos)
        << c.message;
  }
  EXPECT_EQ(engine().snapshot().retried, 0u);
}

TEST_F(Retry, WithoutMaxAttemptsAJobRunsOnce) {
  start();
  Recorder::Call c = finish(flaky("1", 1));
  EXPECT_EQ(c.state, JobState::kFailed);
  EXPECT_EQ(c.message, "attempt 1 failed");  // the message as before retries existed
  EXPECT_TRUE(engine().find(c.id).value->attempt_messages().empty());
}

double half() {
  return 0.5;
}

TEST_F(Retry, RetriesFollowTheBackoffScheduleToTheMillisecond) {
  EngineLimits l = BenchOptions::test_limits();
  l.jitter = &half;
  start_manual(l);
  // base 1 s, cap 3 s, jitter 0.5: waits of 500 ms, 1000 ms, 1500 ms (capped: 0.5 * 3 s).
  auto j = run(flaky("3", 4, 1000ms, 3000ms));
  ASSERT_NE(j, nullptr);
  for (std::chrono::milliseconds wait : {500ms, 1000ms, 1500ms}) {
    ASSERT_TRUE(waits(j)) << to_string(j->state());
    ASSERT_EQ(j->state(), JobState::kScheduled) << j->message();
    clock_.advance(wait - 1ms);
    EXPECT_EQ(engine().run_scheduled(), 0u) << "queued before its backoff of " << wait.count();
    EXPECT_EQ(j->state(), JobState::kScheduled);
    clock_.advance(1ms);
    EXPECT_EQ(engine().run_scheduled(), 1u) << "not queued at its backoff of " << wait.count();
  }
  Recorder::Call c = done_.wait_job(j->id());
  EXPECT_EQ(c.state, JobState::kSucceeded);
  EXPECT_EQ(c.output, "ok on attempt 4");
}

TEST_F(Retry, ADelayedJobIsScheduledUntilItsTimeThenRunsOnce) {
  start_manual();
  JobSpec s = spec("echo", "later");
  s.delay = 5000ms;
  s.retain = true;
  auto j = run(std::move(s));
  ASSERT_NE(j, nullptr);
  EXPECT_EQ(j->state(), JobState::kScheduled);
  EXPECT_EQ(engine().find(j->id()).value, j);  // Get sees it, SCHEDULED
  EXPECT_EQ(engine().snapshot().scheduled, 1u);
  EXPECT_EQ(engine().in_flight(), 0u);  // it holds no in-flight slot while it waits (A7)
  clock_.advance(4999ms);
  EXPECT_EQ(engine().run_scheduled(), 0u);
  clock_.advance(1ms);
  EXPECT_EQ(engine().run_scheduled(), 1u);
  Recorder::Call c = done_.wait_job(j->id());
  EXPECT_EQ(c.state, JobState::kSucceeded);
  EXPECT_EQ(c.output, "later");
  EXPECT_EQ(ctl_.calls, 1);
  EXPECT_EQ(engine().snapshot().scheduled, 0u);
  clock_.advance(1h);
  EXPECT_EQ(engine().run_scheduled(), 0u);  // ran once
}

TEST_F(Retry, CancellingAScheduledJobEndsItAndTheSchedulerDropsIt) {
  start_manual();
  JobSpec s = spec("echo", "never");
  s.delay = 1000ms;
  auto j = run(std::move(s));
  ASSERT_NE(j, nullptr);
  j->cancel();
  Recorder::Call c = done_.wait_job(j->id());
  EXPECT_EQ(c.state, JobState::kCancelled);
  EXPECT_NE(c.message.find("was cancelled before its handler started"), std::string::npos);
  clock_.advance(1000ms);
  EXPECT_EQ(engine().run_scheduled(), 0u);  // (K3) dropped when due
  EXPECT_EQ(engine().snapshot().scheduled, 0u);
  EXPECT_EQ(ctl_.calls, 0);
}

// (K6) A cancelled call's jobs waiting in the scheduler end now, by its
// group flag: only that call's, and a second cancel ends nothing more. The
// others run when due; the ended ones are dropped then (K3).
TEST_F(Retry, ACancelledCallsScheduledJobsEndNowAndNoOtherCallsDo) {
  start_manual();
  std::atomic<bool> a{false}, b{false};
  auto delayed = [&](const char* payload, std::chrono::milliseconds delay,
                     const std::atomic<bool>* group) {
    JobSpec s = spec("echo", payload);
    s.delay = delay;
    Engine::SubmitResult r = engine().submit(std::move(s), &Recorder::on_done, &done_, group);
    EXPECT_TRUE(r.ok());
    return r.value.job;
  };
  auto a1 = delayed("a1", 1000ms, &a);
  auto a2 = delayed("a2", 2000ms, &a);
  auto b1 = delayed("b1", 1000ms, &b);
  auto none = delayed("none", 1000ms, nullptr);
  ASSERT_TRUE(a1 && a2 && b1 && none);
  a.store(true);
  EXPECT_EQ(engine().cancel_scheduled(&a), 2u);
  EXPECT_EQ(done_.wait_job(a1->id()).state, JobState::kCancelled);
  EXPECT_EQ(done_.wait_job(a2->id()).state, JobState::kCancelled);
  EXPECT_EQ(b1->state(), JobState::kScheduled);
  EXPECT_EQ(none->state(), JobState::kScheduled);
  EXPECT_EQ(engine().cancel_scheduled(&a), 0u);  // already ended, still held (K3)
  EXPECT_EQ(engine().cancel_scheduled(nullptr), 0u);
  clock_.advance(1000ms);
  EXPECT_EQ(engine().run_scheduled(), 2u);  // b1 and none; a1 dropped
  EXPECT_EQ(done_.wait_job(b1->id()).state, JobState::kSucceeded);
  EXPECT_EQ(done_.wait_job(none->id()).state, JobState::kSucceeded);
  clock_.advance(1000ms);
  EXPECT_EQ(engine().run_scheduled(), 0u);  // a2 dropped
  EXPECT_EQ(engine().snapshot().scheduled, 0u);
}

TEST_F(Retry, CancellingAJobWaitingToRetryNamesItsLastFailure) {
  EngineLimits l = BenchOptions::test_limits();
  l.jitter = &half;
  start_manual(l);
  auto j = run(flaky("5", 5, 1000ms));
  ASSERT_NE(j, nullptr);
  ASSERT_TRUE(waits(j));
  j->cancel();
  Recorder::Call c = done_.wait_job(j->id());
  EXPECT_EQ(c.state, JobState::kCancelled);
  EXPECT_NE(c.message.find("was cancelled while waiting to retry after attempt 1 of 5 failed: "
                           "attempt 1: attempt 1 failed"),
            std::string::npos)
      << c.message;
}

TEST_F(Retry, ADrainEndsTheScheduledJobsAndRefusesNewDelayedOnes) {
  start_manual();
  JobSpec s = spec("echo", "x");
  s.delay = 1h;
  auto j = run(std::move(s));
  ASSERT_NE(j, nullptr);
  engine().begin_drain();
  Recorder::Call c = done_.wait_job(j->id());
  EXPECT_EQ(c.state, JobState::kCancelled);
  EXPECT_NE(c.message.find("tpoold is draining"), std::string::npos) << c.message;
  JobSpec t = spec("echo", "y");
  t.delay = 1s;
  Engine::SubmitResult r = submit(std::move(t));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error->code, ErrorCode::kUnavailable);
}

TEST_F(Retry, TheSchedulersBoundRefusesDelayedJobsButNeverARetry) {
  EngineLimits l = BenchOptions::test_limits();
  l.max_scheduled_jobs = 1;
  l.jitter = &half;
  start_manual(l);
  JobSpec a = spec("echo", "a");
  a.delay = 1h;
  ASSERT_NE(run(std::move(a)), nullptr);
  JobSpec b = spec("echo", "b");
  b.delay = 1h;
  Engine::SubmitResult r = submit(std::move(b));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error->code, ErrorCode::kExhausted);
  EXPECT_NE(r.error->message.find("max_scheduled_jobs"), std::string::npos);
  // A retry is accepted work: it waits even over the bound.
  auto j = run(flaky("1", 2, 1000ms));
  ASSERT_NE(j, nullptr);
  ASSERT_TRUE(eventually([&] { return engine().snapshot().scheduled == 2; }));
  clock_.advance(500ms);
  EXPECT_EQ(engine().run_scheduled(), 1u);
  EXPECT_EQ(done_.wait_job(j->id()).output, "ok on attempt 2");
  engine().begin_drain();  // ends "a"
}

TEST_F(Retry, FieldsLeftAtZeroTakeTheHandlersPolicyThenTheDefault) {
  EngineLimits l = BenchOptions::test_limits();
  l.retry = {2, 0ms, 0ms};
  l.handler_retry.emplace_back("flaky", RetryPolicy{4, 0ms, 0ms});
  BenchOptions o;
  o.limits = l;
  start(std::move(o));
  // flaky's own policy: 4 attempts, so failing 3 succeeds.
  Recorder::Call c = finish(flaky("3", 0));
  EXPECT_EQ(c.state, JobState::kSucceeded) << c.message;
  EXPECT_EQ(c.output, "ok on attempt 4");
  // A request's own value wins over the policy.
  c = finish(flaky("3", 1));
  EXPECT_EQ(c.state, JobState::kFailed);
  // Another handler takes [retry]: "fail" fails both of its 2 attempts.
  JobSpec f = spec("fail", "1:still broken");
  c = finish(std::move(f));
  EXPECT_EQ(c.message, "still broken (attempt 2 of 2)");
}

TEST_F(Retry, BadRetryAndDelayFieldsAreRefusedWithTheValue) {
  start_manual();
  Engine::SubmitResult r = submit(flaky("0", 101));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error->message.find("use 1 to 100"), std::string::npos) << r.error->message;
  r = submit(flaky("0", 3, 2000ms, 1000ms));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error->message.find("below backoff_base_ms"), std::string::npos);
  JobSpec far = spec("echo");
  far.delay = std::chrono::hours(24 * 31);
  r = submit(std::move(far));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error->message.find("use at most"), std::string::npos);
}

}  // namespace
}  // namespace tpool::engine::testing
