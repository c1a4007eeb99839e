// Cancellation and deadlines: a queued job ends at once (Job::cancel) or
// through the pool's on_cancel (E5, A3); a running one when its handler
// returns, or by the engine's deadline thread (E4, inv 5): TIMED_OUT once its
// deadline passed, CANCELLED cancel_grace after it was told to stop, its
// late result dropped. Also the group flag, cancel_all and drain.
#include <future>

#include "engine_test_support.h"

namespace tpool::engine::testing {
namespace {

class EngineCancel : public EngineBench {
 protected:
  // One worker, held by a "block" job, so what is submitted next stays queued.
  JobPtr hold_the_worker() {
    auto j = run(spec("block", "holder"));
    EXPECT_TRUE(ctl_.wait_entered(1));
    return j;
  }
  static BenchOptions one_worker() {
    BenchOptions o;
    o.threads = 1;
    return o;
  }
};

TEST_F(EngineCancel, AQueuedJobCancelledEndsAtOnceAndNeverRuns) {
  start(one_worker());
  auto holder = hold_the_worker();
  auto queued = run(spec("echo", "never"));
  EXPECT_EQ(queued->state(), JobState::kQueued);
  queued->cancel();
  // Final before cancel() returned, reported on this thread (DoneFn contract).
  ASSERT_TRUE(queued->final());
  EXPECT_EQ(queued->state(), JobState::kCancelled);
  Recorder::Call c = done_.wait_job(queued->id());
  EXPECT_EQ(c.thread, std::this_thread::get_id());
  EXPECT_EQ(c.message, "job " + std::to_string(queued->id()) +
                           " (echo) was cancelled before its handler started (a cancel request, "
                           "the caller went away, or tpoold shut down)");
  EXPECT_TRUE(queued->output().empty());
  queued->cancel();  // again: nothing more happens
  const std::uint64_t pool_cancelled = pool().stats().cancelled;
  ctl_.open_gate();
  ASSERT_TRUE(idle());
  // The pool dequeued the cancelled task and called on_cancel (A3): it
  // found the job final and only released it; DoneFn ran once.
  EXPECT_EQ(done_.calls_for(queued->id()), 1);
  EXPECT_EQ(pool().stats().cancelled, pool_cancelled + 1);
  EXPECT_EQ(ctl_.calls_now(), 1);  // the holder only
  EXPECT_EQ(counts("echo").cancelled, 1u);
  EXPECT_EQ(counts("echo").succeeded, 0u);
}

// (inv 4) Once every task has ended, a job is held by its holders only: the
// test's JobPtr, and the result store's while it retains the job. Each way a
// task's reference ends is here: run (echo), ended by the handler's failure,
// cancelled while queued (the pool's on_cancel, after Job::cancel), and the
// worker's own task (block). A reference counted for a task and never taken
// back, or taken back twice, shows as a count off by one (or a crash).
TEST_F(EngineCancel, WhenTheTasksHaveEndedOnlyTheHoldersHoldTheJob) {
  start(one_worker());
  auto holder = hold_the_worker();
  JobSpec kept = spec("echo", "kept");
  kept.retain = true;
  auto retained = run(std::move(kept));
  auto plain = run(spec("echo", "plain"));
  auto failed = run(spec("fail", "1:it broke"));
  auto cancelled = run(spec("echo", "never"));
  EXPECT_EQ(plain.use_count(), 2u) << "queued: the test's and the task's";
  cancelled->cancel();
  ctl_.open_gate();
  ASSERT_TRUE(done_.wait_total(5));
  ASSERT_TRUE(quiet());
  EXPECT_EQ(retained.use_count(), 2u) << "the test's and the result store's";
  EXPECT_EQ(plain.use_count(), 1u);
  EXPECT_EQ(failed.use_count(), 1u);
  EXPECT_EQ(cancelled.use_count(), 1u);
  EXPECT_EQ(holder.use_count(), 1u);
  JobPtr copy = plain;
  EXPECT_EQ(plain.use_count(), 2u);
  JobPtr moved = std::move(copy);
  EXPECT_EQ(copy, nullptr);
  EXPECT_EQ(moved.use_count(), 2u);
  moved.reset();
  EXPECT_EQ(plain.use_count(), 1u);
}

TEST_F(EngineCancel, ARunningJobCancelledEndsWhenItsHandlerReturns) {
  start();
  auto j = run(spec("spin"));
  ASSERT_TRUE(ctl_.wait_entered(1));
  EXPECT_EQ(j->state(), JobState::kRunning);
  EXPECT_FALSE(j->is_cancelled());
  j->cancel();
  EXPECT_TRUE(j->is_cancelled());
  Recorder::Call c = done_.wait_job(j->id());
  EXPECT_EQ(c.state, JobState::kCancelled);
  EXPECT_EQ(c.message, "spin saw the cancellation and stopped");
  EXPECT_NE(c.thread, std::this_thread::get_id());  // the worker ended it
  ASSERT_TRUE(idle());
  EXPECT_EQ(counts("spin").cancelled, 1u);
  EXPECT_EQ(engine().snapshot().ignored_cancellation, 0u);
}

TEST_F(EngineCancel, CancellingAnEndedJobChangesNothing) {
  start();
  auto c = finish(spec("echo", "done"));
  JobSpec r = spec("echo", "kept");
  r.retain = true;
  auto kept = finish(r);
  auto j = engine().find(kept.id).value;
  j->cancel();
  EXPECT_EQ(j->state(), JobState::kSucceeded);
  EXPECT_EQ(j->output(), "kept");
  EXPECT_EQ(done_.calls_for(kept.id), 1);
  EXPECT_EQ(counts("echo").cancelled, 0u);
}

TEST_F(EngineCancel, TheGroupFlagCancelsARunningJob) {
  start();
  std::atomic<bool> group{false};
  Engine::SubmitResult r = engine().submit(spec("spin"), &Recorder::on_done, &done_, &group);
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(ctl_.wait_entered(1));
  EXPECT_FALSE(r.value.job->is_cancelled());
  group.store(true);
  EXPECT_TRUE(r.value.job->is_cancelled());
  EXPECT_EQ(done_.wait_job(r.value.job->id()).state, JobState::kCancelled);
  ASSERT_TRUE(idle());
}

TEST_F(EngineCancel, AQueuedJobOfACancelledGroupEndsBeforeItsHandler) {
  start(one_worker());
  auto holder = hold_the_worker();
  std::atomic<bool> group{false};
  std::vector<JobSpec> specs{spec("echo", "a"), spec("echo", "b")};
  std::vector<Engine::SubmitResult> out;
  ASSERT_EQ(batch(specs, out, false, &group), 2u);
  group.store(true);  // the call went away; its jobs are still queued
  ctl_.open_gate();
  for (auto& o : out) {
    Recorder::Call c = done_.wait_job(o.value.job->id());
    EXPECT_EQ(c.state, JobState::kCancelled);
    EXPECT_NE(c.message.find("was cancelled before its handler started"), std::string::npos)
        << c.message;
  }
  ASSERT_TRUE(idle());
  EXPECT_EQ(ctl_.calls_now(), 1);  // neither echo ran
}

// A3 and E5: a job past its deadline while queued ends through the pool's
// on_cancel, on the single path and the batch path alike, with one sentence;
// the pool counts it cancelled and its handler never runs.
TEST_F(EngineCancel, ADeadlineThatPassesWhileQueuedEndsTheJobThroughThePool) {
  start(one_worker());
  auto holder = hold_the_worker();
  const auto past = std::chrono::steady_clock::now() - 1ms;
  JobSpec one = spec("echo", "single");
  one.deadline = past;
  auto single = run(one);
  std::vector<JobSpec> specs(3, spec("echo", "batched"));
  for (auto& s : specs) s.deadline = past;
  std::vector<Engine::SubmitResult> out;
  ASSERT_EQ(batch(specs, out), 3u);
  std::vector<JobPtr> jobs{single};
  for (auto& o : out) {
    ASSERT_TRUE(o.ok());
    jobs.push_back(o.value.job);
  }
  for (auto& j : jobs) EXPECT_EQ(j->state(), JobState::kQueued);
  const std::uint64_t pool_cancelled = pool().stats().cancelled;
  ctl_.open_gate();
  for (auto& j : jobs) {
    Recorder::Call c = done_.wait_job(j->id());
    EXPECT_EQ(c.state, JobState::kTimedOut);
    EXPECT_EQ(c.message, "job " + std::to_string(j->id()) +
                             " (echo) timed out while queued, before its handler started; raise "
                             "its timeout or the call's deadline, or submit less at once");
  }
  ASSERT_TRUE(idle());
  EXPECT_EQ(pool().stats().cancelled, pool_cancelled + jobs.size())
      << "each job must reach the pool with its own token (A3), so the pool ends it";
  EXPECT_EQ(ctl_.calls_now(), 1);
  EXPECT_EQ(counts("echo").timed_out, jobs.size());
  EXPECT_TRUE(done_.each_once({}));
}

TEST_F(EngineCancel, AJobSeesItsDeadline) {
  start();
  JobSpec d = spec("deadline");
  d.deadline = std::chrono::steady_clock::now() + std::chrono::hours(1);
  EXPECT_EQ(finish(d).output, "some");
  EXPECT_EQ(finish(spec("deadline")).output, "none");
  auto j = run(spec("echo"));
  EXPECT_FALSE(j->remaining().has_value());
  d.handler = "echo";
  auto k = run(d);
  ASSERT_TRUE(k->remaining().has_value());
  EXPECT_GT(*k->remaining(), std::chrono::minutes(59));
  EXPECT_FALSE(k->deadline_passed());
  ASSERT_TRUE(done_.wait_total(4));
}

// E4, inv 5: the deadline thread's pass ends a running job TIMED_OUT once its
// deadline passed, whatever its handler does; the handler keeps its worker
// (and the job its in-flight slot) until it returns, and its result is
// dropped.
TEST_F(EngineCancel, ADeadlineThatPassesWhileRunningEndsTheJobTimedOut) {
  start();
  JobSpec s = spec("block", "too late");
  s.deadline = std::chrono::steady_clock::now() + 200ms;
  auto j = run(s);
  ASSERT_TRUE(ctl_.wait_entered(1));
  engine().enforce();
  if (std::chrono::steady_clock::now() < s.deadline) {
    EXPECT_EQ(j->state(), JobState::kRunning);  // not before its deadline
  }
  // Wait for the deadline itself (the job's token reports it), not a delay.
  ASSERT_TRUE(eventually([&] { return j->deadline_passed(); }));
  EXPECT_EQ(j->state(), JobState::kRunning);  // nobody ended it yet
  engine().enforce();
  ASSERT_TRUE(j->final());
  EXPECT_EQ(j->state(), JobState::kTimedOut);
  Recorder::Call c = done_.wait_job(j->id());
  EXPECT_EQ(c.thread, std::this_thread::get_id());  // the enforcing thread ended it
  EXPECT_EQ(c.message, "job " + std::to_string(j->id()) +
                           " (block) timed out; its handler has not returned (it does not check "
                           "cancellation) and keeps a worker until it does");
  // Still inside its handler: in flight and in the running set (E1, E4).
  EXPECT_EQ(engine().in_flight(), 1u);
  std::vector<RunningJob> rj = engine().running();
  ASSERT_EQ(rj.size(), 1u);
  EXPECT_EQ(rj[0].id, j->id());
  EXPECT_EQ(rj[0].handler, "block");
  EXPECT_EQ(rj[0].state, JobState::kTimedOut);
  EXPECT_EQ(engine().snapshot().running_after_end, 1u);
  EXPECT_EQ(engine().snapshot().ignored_cancellation, 0u);  // within cancel_grace
  // The handler returns: its output is dropped, nothing changes, no second report.
  ctl_.open_gate();
  ASSERT_TRUE(ctl_.wait_left(1));
  ASSERT_TRUE(idle());
  EXPECT_EQ(j->state(), JobState::kTimedOut);
  EXPECT_TRUE(j->output().empty());
  // inv 1, 2: only the winner wrote the result; the worker's late finish
  // changed nothing (not even the message the caller already read).
  EXPECT_EQ(j->message(), c.message);
  EXPECT_EQ(done_.calls_for(j->id()), 1);
  EXPECT_TRUE(engine().running().empty());
  engine().enforce();
  EXPECT_EQ(engine().snapshot().running_after_end, 0u);
  EXPECT_EQ(counts("block").timed_out, 1u);
  EXPECT_EQ(counts("block").succeeded, 0u);
}

// A cancel that comes after the deadline passed (in the daemon: gRPC
// cancels the call because the call's deadline, which is the job's, ended)
// does not turn the time-out into a cancellation: the job ends TIMED_OUT
// whichever came first to end it, the deadline thread or the cancel.
TEST_F(EngineCancel, ACancelAfterTheDeadlinePassedLeavesARunningJobTimedOut) {
  start();
  JobSpec s = spec("block");
  s.deadline = std::chrono::steady_clock::now() + 50ms;
  auto j = run(s);
  ASSERT_TRUE(ctl_.wait_entered(1));
  ASSERT_TRUE(eventually([&] { return j->deadline_passed(); }));
  j->cancel();
  EXPECT_TRUE(j->deadline_passed());
  ctl_.open_gate();  // the handler returns OK: the host discards it
  Recorder::Call c = done_.wait_job(j->id());
  EXPECT_EQ(c.state, JobState::kTimedOut) << c.message;
  EXPECT_NE(c.message.find("past its deadline"), std::string::npos) << c.message;
  ASSERT_TRUE(idle());
  EXPECT_EQ(counts("block").timed_out, 1u);
  EXPECT_EQ(counts("block").cancelled, 0u);
}

TEST_F(EngineCancel, ACancelAfterTheDeadlinePassedLeavesAQueuedJobTimedOut) {
  start(one_worker());
  auto holder = hold_the_worker();
  JobSpec s = spec("echo");
  s.deadline = std::chrono::steady_clock::now() - 1ms;
  auto j = run(s);
  j->cancel();
  ASSERT_TRUE(j->final());
  EXPECT_EQ(j->state(), JobState::kTimedOut);
  EXPECT_EQ(done_.wait_job(j->id()).message,
            "job " + std::to_string(j->id()) +
                " (echo) timed out while queued, before its handler started; raise its timeout "
                "or the call's deadline, or submit less at once");
  ctl_.open_gate();
  ASSERT_TRUE(idle());
  EXPECT_EQ(counts("echo").timed_out, 1u);
  EXPECT_EQ(ctl_.calls_now(), 1);
}

TEST_F(EngineCancel, TheDeadlineThreadEndsARunningJobOnItsOwn) {
  BenchOptions o;
  o.limits.enforce_interval = 2ms;
  start(std::move(o));
  JobSpec s = spec("block");
  s.deadline = std::chrono::steady_clock::now() + 50ms;
  auto j = run(s);
  // Nobody calls enforce(): the engine's thread must end it.
  Recorder::Call c = done_.wait_job(j->id());
  EXPECT_EQ(c.state, JobState::kTimedOut);
  EXPECT_NE(c.thread, std::this_thread::get_id());
  EXPECT_FALSE(ctl_.wait_left(1, 0ms));  // its handler is still inside
  ctl_.open_gate();
  ASSERT_TRUE(idle());
  EXPECT_EQ(done_.calls_for(j->id()), 1);
}

// E4: a cancelled job whose handler ignores the cancellation is ended
// CANCELLED by the engine cancel_grace after the deadline thread first saw
// it told to stop, and counted once in ignored_cancellation.
TEST_F(EngineCancel, AHandlerIgnoringCancelIsEndedAfterCancelGrace) {
  BenchOptions o;
  o.limits.cancel_grace = 0ms;
  start(std::move(o));
  auto j = run(spec("block", "ignored"));
  ASSERT_TRUE(ctl_.wait_entered(1));
  j->cancel();
  EXPECT_EQ(j->state(), JobState::kRunning);  // cancel() ends only a queued job
  engine().enforce();                         // first sight of the stop
  EXPECT_EQ(j->state(), JobState::kRunning);
  engine().enforce();  // cancel_grace (0) later
  ASSERT_EQ(j->state(), JobState::kCancelled);
  Recorder::Call c = done_.wait_job(j->id());
  EXPECT_EQ(c.message, "job " + std::to_string(j->id()) +
                           " (block) was cancelled; its handler did not return within 0 ms "
                           "(server.cancel_grace_ms) and keeps a worker until it does");
  EngineSnapshot s = engine().snapshot();
  EXPECT_EQ(s.ignored_cancellation, 1u);
  EXPECT_EQ(s.running_after_end, 1u);
  engine().enforce();
  EXPECT_EQ(engine().snapshot().ignored_cancellation, 1u);  // counted once
  std::vector<RunningJob> rj = engine().running();
  ASSERT_EQ(rj.size(), 1u);
  EXPECT_EQ(rj[0].state, JobState::kCancelled);
  ctl_.open_gate();
  ASSERT_TRUE(idle());
  EXPECT_TRUE(j->output().empty());    // "late:ignored" was dropped
  EXPECT_EQ(j->message(), c.message);  // (inv 1, 2) the loser wrote nothing
  EXPECT_EQ(done_.calls_for(j->id()), 1);
  // The host did not count the same call again (one of the two, never both).
  EXPECT_EQ(host_->counters().ignored_cancellation, 0u);
  EXPECT_EQ(counts("block").cancelled, 1u);
}

TEST_F(EngineCancel, WithinCancelGraceTheHandlersOwnAnswerEndsTheJob) {
  BenchOptions o;
  o.limits.cancel_grace = std::chrono::hours(1);
  start(std::move(o));
  auto j = run(spec("block", "x"));
  ASSERT_TRUE(ctl_.wait_entered(1));
  j->cancel();
  for (int i = 0; i < 3; ++i) engine().enforce();
  EXPECT_EQ(j->state(), JobState::kRunning);
  EXPECT_EQ(engine().snapshot().running_after_end, 0u);
  std::vector<RunningJob> rj = engine().running();
  ASSERT_EQ(rj.size(), 1u);
  EXPECT_EQ(rj[0].state, JobState::kRunning);
  ctl_.open_gate();
  // It returned OK after the cancellation: the host reports it cancelled and
  // counts it; the engine does not count it again.
  Recorder::Call c = done_.wait_job(j->id());
  EXPECT_EQ(c.state, JobState::kCancelled);
  EXPECT_NE(c.message.find("its output is discarded"), std::string::npos) << c.message;
  EXPECT_TRUE(c.output.empty());
  ASSERT_TRUE(idle());
  EXPECT_EQ(host_->counters().ignored_cancellation, 1u);
  engine().enforce();
  EXPECT_EQ(engine().snapshot().ignored_cancellation, 0u);
}

TEST_F(EngineCancel, AGroupJobEndedByTheEngineStopsReadingTheGroupFlag) {
  BenchOptions o;
  o.limits.cancel_grace = 0ms;
  start(std::move(o));
  auto group = std::make_unique<std::atomic<bool>>(false);
  Engine::SubmitResult r = engine().submit(spec("block"), &Recorder::on_done, &done_, group.get());
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(ctl_.wait_entered(1));
  group->store(true);  // the call is cancelled
  engine().enforce();
  engine().enforce();
  ASSERT_EQ(done_.wait_job(r.value.job->id()).state, JobState::kCancelled);
  // inv 6: once the job reported, its group flag may be gone; the job still
  // reads as cancelled without touching it.
  group.reset();
  EXPECT_TRUE(r.value.job->is_cancelled());
  ctl_.open_gate();
  ASSERT_TRUE(idle());
}

TEST_F(EngineCancel, CancelAllStopsRunningHandlersAndRefusesNewJobs) {
  start(BenchOptions::with_threads(3));
  auto a = run(spec("spin"));
  auto b = run(spec("spin"));
  ASSERT_TRUE(ctl_.wait_entered(2));
  auto queued_behind = run(spec("echo"));  // a third worker takes it at once or later
  engine().cancel_all();
  EXPECT_TRUE(engine().draining());
  EXPECT_TRUE(is(submit(spec("echo")).error, ErrorCode::kUnavailable, "draining"));
  EXPECT_EQ(done_.wait_job(a->id()).state, JobState::kCancelled);
  EXPECT_EQ(done_.wait_job(b->id()).state, JobState::kCancelled);
  done_.wait_job(queued_behind->id());
  EXPECT_TRUE(engine().wait_idle(kHang));
  EXPECT_EQ(engine().snapshot().rejected_draining, 1u);
}

TEST_F(EngineCancel, CancelAllEndsQueuedJobsBeforeTheirHandler) {
  start(one_worker());
  auto holder = hold_the_worker();
  auto q1 = run(spec("echo", "1"));
  auto q2 = run(spec("echo", "2"));
  engine().cancel_all();
  ctl_.open_gate();
  for (auto& q : {q1, q2}) {
    Recorder::Call c = done_.wait_job(q->id());
    EXPECT_EQ(c.state, JobState::kCancelled);
    EXPECT_NE(c.message.find("before its handler started"), std::string::npos);
  }
  EXPECT_TRUE(engine().wait_idle(kHang));
  EXPECT_EQ(ctl_.calls_now(), 1);
}

// Drain as the daemon does it: stop accepting, the pool cancels what is
// queued (kCancelPending), running handlers finish, the engine goes idle.
TEST_F(EngineCancel, DrainWithCancelPendingEndsQueuedJobsThroughThePool) {
  start(one_worker());
  auto holder = hold_the_worker();
  std::vector<JobPtr> queued;
  for (int i = 0; i < 3; ++i) queued.push_back(run(spec("echo", std::to_string(i))));
  engine().begin_drain();
  auto shut = std::async(std::launch::async,
                         [&] { return pool().shutdown(ShutdownMode::kCancelPending, kHang); });
  for (auto& q : queued) {
    Recorder::Call c = done_.wait_job(q->id());
    EXPECT_EQ(c.state, JobState::kCancelled);
    EXPECT_EQ(c.message, "job " + std::to_string(q->id()) +
                             " (echo) was cancelled before its handler started (a cancel "
                             "request, the caller went away, or tpoold shut down)");
  }
  EXPECT_FALSE(holder->final());  // the running handler is not touched
  ctl_.open_gate();
  ASSERT_TRUE(shut.get().ok());
  EXPECT_TRUE(engine().wait_idle(kHang));
  EXPECT_EQ(done_.wait_job(holder->id()).state, JobState::kSucceeded);
  EXPECT_EQ(ctl_.calls_now(), 1);
  EXPECT_EQ(counts("echo").cancelled, 3u);
}

}  // namespace
}  // namespace tpool::engine::testing
