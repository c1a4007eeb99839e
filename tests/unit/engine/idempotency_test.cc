// Idempotency keys (admission.cc steps 2 and A5, result_store.h S3/S4): a
// repeat of a key answers with the first job, a different request under the
// same key is a conflict, a keyed item is treated like any other by
// stop_when_full, and a key is free again once its job's retention ended.
#include <future>

#include "engine_test_support.h"

namespace tpool::engine::testing {
namespace {

class EngineIdempotency : public EngineBench {};

TEST_F(EngineIdempotency, ARepeatOfAKeyWhileRunningIsTheSameJobAndIsNotified) {
  start();
  Engine::SubmitResult first = submit(keyed("block", "p", "key-1"));
  ASSERT_TRUE(first.ok());
  EXPECT_FALSE(first.value.deduplicated);
  ASSERT_TRUE(ctl_.wait_entered(1));
  // A second caller, with its own DoneFn.
  Recorder second_done;
  Engine::SubmitResult again =
      engine().submit(keyed("block", "p", "key-1"), &Recorder::on_done, &second_done);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again.value.deduplicated);
  EXPECT_TRUE(again.value.will_notify);
  EXPECT_EQ(again.value.job, first.value.job);
  EXPECT_EQ(engine().snapshot().deduplicated, 1u);
  EXPECT_EQ(counts("block").submitted, 1u);
  ctl_.open_gate();
  // Both callers hear the one job's end, once each.
  EXPECT_EQ(done_.wait_job(first.value.job->id()).output, "late:p");
  EXPECT_EQ(second_done.wait_job(first.value.job->id()).output, "late:p");
  ASSERT_TRUE(idle());
  EXPECT_EQ(done_.calls_for(first.value.job->id()), 1);
  EXPECT_EQ(second_done.calls_for(first.value.job->id()), 1);
  EXPECT_EQ(ctl_.calls_now(), 1);
}

TEST_F(EngineIdempotency, ARepeatAfterTheJobEndedIsAnsweredAtOnceWithoutNotification) {
  start();
  auto c = finish(keyed("echo", "p", "key-2"));
  ASSERT_EQ(c.state, JobState::kSucceeded);
  Engine::SubmitResult again = submit(keyed("echo", "p", "key-2"));
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again.value.deduplicated);
  EXPECT_FALSE(again.value.will_notify);  // read the result now
  EXPECT_EQ(again.value.job->id(), c.id);
  EXPECT_TRUE(again.value.job->final());
  EXPECT_EQ(again.value.job->output(), "p");
  ASSERT_TRUE(idle());
  EXPECT_EQ(done_.calls_for(c.id), 1);  // not called again for the repeat
  EXPECT_EQ(ctl_.calls_now(), 1);
}

TEST_F(EngineIdempotency, ARepeatWithoutDoneFnIsNotRegistered) {
  start();
  Engine::SubmitResult first = submit(keyed("block", "p", "k"));
  ASSERT_TRUE(first.ok());
  Engine::SubmitResult again = engine().submit(keyed("block", "p", "k"), nullptr, nullptr);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again.value.deduplicated);
  EXPECT_FALSE(again.value.will_notify);
  ctl_.open_gate();
  done_.wait_job(first.value.job->id());
}

TEST_F(EngineIdempotency, TheSameKeyWithAnotherPayloadOrHandlerIsAConflict) {
  start();
  Engine::SubmitResult first = submit(keyed("block", "p", "key-3"));
  ASSERT_TRUE(first.ok());
  const std::string id = std::to_string(first.value.job->id());
  Engine::SubmitResult other_payload = submit(keyed("block", "q", "key-3"));
  ASSERT_TRUE(is(other_payload.error, ErrorCode::kFailedPrecondition,
                 "idempotency key 'key-3' was already used by job " + id +
                     " with a different handler or payload; use a new key"));
  Engine::SubmitResult other_handler = submit(keyed("echo", "p", "key-3"));
  ASSERT_TRUE(is(other_handler.error, ErrorCode::kFailedPrecondition, "already used by job " + id));
  // A batch of one says the same (A2).
  std::vector<JobSpec> one{keyed("block", "q", "key-3")};
  std::vector<Engine::SubmitResult> out;
  EXPECT_EQ(batch(one, out), 1u);
  EXPECT_EQ(out[0].error->message, other_payload.error->message);
  EXPECT_EQ(engine().snapshot().rejected_conflict, 3u);
  EXPECT_EQ(engine().snapshot().deduplicated, 0u);
  EXPECT_EQ(counts("echo").submitted, 0u);
  ctl_.open_gate();
  done_.wait_job(first.value.job->id());
  // Still a conflict after the job ended, while it is retained.
  EXPECT_TRUE(is(submit(keyed("block", "q", "key-3")).error, ErrorCode::kFailedPrecondition,
                 "already used"));
}

TEST_F(EngineIdempotency, ARepeatWithinOneBatchIsAnsweredByTheEarlierItem) {
  start();
  std::vector<JobSpec> specs{keyed("echo", "p", "dup"), spec("echo", "x"),
                             keyed("echo", "p", "dup"), keyed("echo", "other", "dup")};
  // Its own recorder: the DoneFn runs once per item that will_notify, and
  // items 0 and 2 are answered by one job.
  Recorder items;
  std::vector<Engine::SubmitResult> out(specs.size());
  ASSERT_EQ(engine().submit_batch(specs, &Recorder::on_done, &items, nullptr, out, false), 4u);
  ASSERT_TRUE(out[0].ok());
  EXPECT_FALSE(out[0].value.deduplicated);
  ASSERT_TRUE(out[2].ok());
  EXPECT_TRUE(out[2].value.deduplicated);
  EXPECT_EQ(out[2].value.job, out[0].value.job);
  EXPECT_TRUE(out[2].value.will_notify || out[2].value.job->final());
  EXPECT_TRUE(is(out[3].error, ErrorCode::kFailedPrecondition, "already used"));
  const std::size_t expected = out[2].value.will_notify ? 3 : 2;
  ASSERT_TRUE(items.wait_total(expected));
  ASSERT_TRUE(idle());
  EXPECT_EQ(items.calls_for(out[0].value.job->id()), out[2].value.will_notify ? 2 : 1);
  EXPECT_EQ(items.calls_for(out[1].value.job->id()), 1);
  EXPECT_EQ(counts("echo").submitted, 2u);
  EXPECT_EQ(ctl_.calls_now(), 2);
}

// inv 3: a repeat that races the job's end either registers its DoneFn
// (will_notify, then it is called once) or finds the job final (read it
// now); never a waiter that is not called.
TEST_F(EngineIdempotency, ARepeatRacingTheJobsEndIsNotifiedOrFindsItFinal) {
  start();
  Recorder repeats;
  int notified = 0;
  for (int i = 0; i < 300; ++i) {
    const std::string key = "race-" + std::to_string(i);
    ASSERT_TRUE(engine().submit(keyed("echo", "p", key), nullptr, nullptr).ok());
    Engine::SubmitResult again =
        engine().submit(keyed("echo", "p", key), &Recorder::on_done, &repeats);
    ASSERT_TRUE(again.ok());
    ASSERT_TRUE(again.value.deduplicated);
    if (again.value.will_notify) {
      ++notified;
      EXPECT_EQ(repeats.wait_job(again.value.job->id()).output, "p");
    } else {
      EXPECT_TRUE(again.value.job->final());
      EXPECT_EQ(again.value.job->output(), "p");
    }
  }
  ASSERT_TRUE(idle());
  EXPECT_EQ(repeats.total(), static_cast<std::size_t>(notified));
  EXPECT_TRUE(repeats.each_once({}));
}

// A5: concurrent submits of one key make exactly one job.
TEST_F(EngineIdempotency, ConcurrentSubmitsOfOneKeyMakeOneJob) {
  start();
  constexpr int kThreads = 8;
  std::vector<std::future<Engine::SubmitResult>> fs;
  std::atomic<int> ready{0};
  for (int t = 0; t < kThreads; ++t) {
    fs.push_back(std::async(std::launch::async, [&] {
      ready.fetch_add(1);
      while (ready.load() < kThreads) std::this_thread::yield();  // start together
      return engine().submit(keyed("block", "same", "race"), nullptr, nullptr);
    }));
  }
  std::vector<Engine::SubmitResult> rs;
  for (auto& f : fs) rs.push_back(f.get());
  int fresh = 0;
  for (auto& r : rs) {
    ASSERT_TRUE(r.ok()) << r.error->message;
    EXPECT_EQ(r.value.job, rs[0].value.job);
    if (!r.value.deduplicated) ++fresh;
  }
  EXPECT_EQ(fresh, 1);
  EXPECT_EQ(engine().snapshot().deduplicated, static_cast<std::uint64_t>(kThreads - 1));
  EXPECT_EQ(counts("block").submitted, 1u);
  ctl_.open_gate();
  ASSERT_TRUE(idle());
  EXPECT_EQ(ctl_.calls_now(), 1);
}

// stop_when_full treats a keyed item like any other (A1): refused for room,
// it ends the call, its spec (key included) is left intact, the key is not
// taken, and the retry makes the job.
TEST_F(EngineIdempotency, StopWhenFullTreatsAKeyedItemLikeAnyOther) {
  BenchOptions o;
  o.limits.max_inflight_jobs = 1;
  start(std::move(o));
  auto holder = run(spec("block"));
  ASSERT_TRUE(ctl_.wait_entered(1));
  for (bool key_first : {true, false}) {
    SCOPED_TRACE(key_first ? "keyed item first" : "unkeyed item first");
    std::vector<JobSpec> specs;
    specs.push_back(key_first ? keyed("echo", "a", "swf") : spec("echo", "a"));
    specs.push_back(key_first ? spec("echo", "b") : keyed("echo", "b", "swf"));
    std::vector<Engine::SubmitResult> out;
    ASSERT_EQ(batch(specs, out, /*stop_when_full=*/true), 0u);
    ASSERT_TRUE(is(out[0].error, ErrorCode::kExhausted, "in flight"));
    EXPECT_EQ(specs[0].payload, "a");
    EXPECT_EQ(specs[1].payload, "b");
    EXPECT_EQ((key_first ? specs[0] : specs[1]).idempotency_key, "swf");
    // The key was not taken by the refused item.
    EXPECT_EQ(engine().snapshot().retained_entries, 0u);
  }
  // Again with a holder in flight: the keyed item ends the call with its
  // spec intact, and the retry of it makes the job.
  ctl_.open_gate();
  ASSERT_TRUE(idle());
  ctl_.close_gate();  // no handler is waiting: nothing is in flight
  auto holder2 = run(spec("block"));
  std::vector<JobSpec> specs{keyed("echo", "k", "swf2"), spec("echo", "u")};
  std::vector<Engine::SubmitResult> out;
  ASSERT_EQ(batch(specs, out, true), 0u);
  EXPECT_EQ(specs[0].idempotency_key, "swf2");
  EXPECT_EQ(specs[0].payload, "k");
  ctl_.open_gate();
  ASSERT_TRUE(idle());
  std::vector<JobSpec> retry{std::move(specs[0])};
  ASSERT_EQ(batch(retry, out, true), 1u);
  ASSERT_TRUE(out[0].ok());
  EXPECT_FALSE(out[0].value.deduplicated);
  EXPECT_EQ(out[0].value.job->idempotency_key(), "swf2");
  EXPECT_EQ(done_.wait_job(out[0].value.job->id()).output, "k");
}

// The same through a full pool (the pool refuses the keyed job after it was
// put in the store, A6): the key is taken back with it.
TEST_F(EngineIdempotency, AKeyedJobThePoolRefusesLeavesTheKeyFree) {
  BenchOptions o;
  o.threads = 1;
  o.queue_capacity = 2;
  start(std::move(o));
  Error refusal;
  auto held = fill_pool(&refusal);
  ASSERT_TRUE(ctl_.wait_entered(1));
  std::vector<JobSpec> specs{keyed("echo", "v", "full-key")};
  std::vector<Engine::SubmitResult> out;
  ASSERT_EQ(batch(specs, out, /*stop_when_full=*/true), 0u);
  EXPECT_EQ(out[0].error->message, refusal.message);
  EXPECT_EQ(specs[0].idempotency_key, "full-key");
  EXPECT_EQ(specs[0].payload, "v");
  Engine::SubmitResult single = submit(keyed("echo", "v", "full-key"));
  EXPECT_EQ(single.error->message, refusal.message);
  EXPECT_EQ(engine().snapshot().retained_entries, 0u);
  EXPECT_EQ(engine().snapshot().deduplicated, 0u);
  ctl_.open_gate();
  ASSERT_TRUE(idle());
  // The retry makes a fresh job: nothing was deduplicated to a ghost.
  Engine::SubmitResult retry = submit(keyed("echo", "v", "full-key"));
  ASSERT_TRUE(retry.ok());
  EXPECT_FALSE(retry.value.deduplicated);
  EXPECT_EQ(done_.wait_job(retry.value.job->id()).output, "v");
}

// S4: once the job's retention ended, its key is free for a new job.
TEST_F(EngineIdempotency, AKeyIsFreeAgainAfterItsJobsRetentionEnded) {
  ManualClock clock;
  BenchOptions o;
  o.clock = &clock;
  o.limits.retention = 1000ms;
  start(std::move(o));
  auto first = finish(keyed("echo", "p", "expiring"));
  ASSERT_EQ(first.state, JobState::kSucceeded);
  ASSERT_TRUE(idle());
  clock.advance(1000ms);
  engine().expire();
  // Exactly at the retention: still kept ("past its retention" is after).
  Engine::SubmitResult kept = submit(keyed("echo", "p", "expiring"));
  ASSERT_TRUE(kept.ok());
  EXPECT_TRUE(kept.value.deduplicated);
  EXPECT_EQ(kept.value.job->id(), first.id);
  clock.advance(1ms);
  engine().expire();
  EXPECT_EQ(engine().snapshot().expired, 1u);
  EXPECT_TRUE(is(engine().find(first.id).error, ErrorCode::kNotFound, "has expired"));
  // A new job, even with another payload: no conflict with a forgotten job.
  auto second = finish(keyed("echo", "q", "expiring"));
  EXPECT_NE(second.id, first.id);
  EXPECT_EQ(second.output, "q");
  EXPECT_EQ(engine().snapshot().rejected_conflict, 0u);
}

TEST_F(EngineIdempotency, AKeyedJobIsRetainedEvenWithoutRetain) {
  start();
  JobSpec s = keyed("echo", "p", "retained");
  s.retain = false;
  auto c = finish(s);
  Expected<JobPtr> found = engine().find(c.id);
  ASSERT_TRUE(found.ok());
  EXPECT_EQ(found.value->idempotency_key(), "retained");
  EXPECT_EQ(engine().snapshot().retained_entries, 1u);
}

TEST_F(EngineIdempotency, KeysAreIndependent) {
  start();
  auto a = finish(keyed("echo", "p", "a"));
  auto b = finish(keyed("echo", "p", "b"));
  EXPECT_NE(a.id, b.id);
  EXPECT_EQ(engine().snapshot().deduplicated, 0u);
  EXPECT_EQ(engine().snapshot().retained_entries, 2u);
}

}  // namespace
}  // namespace tpool::engine::testing
