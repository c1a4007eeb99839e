// Admission (daemon/engine/src/admission.cc, A1-A6): one pipeline for
// submit and submit_batch, its refusals and their sentences, the in-flight
// limit, draining, stop_when_full, and reject backpressure on a full pool.
#include <future>

#include "engine_test_support.h"

namespace tpool::engine::testing {
namespace {

class EngineAdmission : public EngineBench {};

// A spec and how each path must refuse it (A2).
struct Refusal {
  const char* what;
  JobSpec spec;
  ErrorCode code;
  const char* words;
};

std::vector<Refusal> refusals(std::size_t max_payload) {
  std::vector<Refusal> r;
  r.push_back({"no handler", JobSpec{}, ErrorCode::kInvalidArgument, "names no handler"});
  JobSpec big;
  big.handler = "echo";
  big.payload.assign(max_payload + 1, 'p');
  r.push_back(
      {"payload over the limit", big, ErrorCode::kInvalidArgument, "bytes, over the limit of"});
  JobSpec key;
  key.handler = "echo";
  key.idempotency_key.assign(257, 'k');
  r.push_back(
      {"key too long", key, ErrorCode::kInvalidArgument, "the idempotency key is 257 bytes"});
  JobSpec labels;
  labels.handler = "echo";
  for (int i = 0; i < 33; ++i) labels.labels.emplace_back("k" + std::to_string(i), "v");
  r.push_back({"too many labels", labels, ErrorCode::kInvalidArgument, "has 33 labels"});
  JobSpec label;
  label.handler = "echo";
  label.labels.emplace_back("long", std::string(257, 'v'));
  r.push_back({"label too long", label, ErrorCode::kInvalidArgument, "label 'long' is longer"});
  JobSpec unknown;
  unknown.handler = "no_such_handler";
  r.push_back({"unknown handler", unknown, ErrorCode::kNotFound,
               "no handler named 'no_such_handler' is loaded"});
  return r;
}

TEST_F(EngineAdmission, EachRefusalHasOneSentenceForSubmitAndABatchOfOne) {
  BenchOptions o;
  o.limits.max_payload_bytes = 16;
  start(std::move(o));
  std::uint64_t invalid = 0, not_found = 0;
  for (const Refusal& r : refusals(16)) {
    SCOPED_TRACE(r.what);
    Engine::SubmitResult single = submit(r.spec);
    ASSERT_TRUE(is(single.error, r.code, r.words));
    EXPECT_EQ(single.value.job, nullptr);
    std::vector<JobSpec> one{r.spec};
    std::vector<Engine::SubmitResult> out;
    EXPECT_EQ(batch(one, out), 1u);
    ASSERT_TRUE(out[0].error.has_value());
    // The very same outcome (A2): code, sentence and retry hint.
    EXPECT_EQ(out[0].error->code, single.error->code);
    EXPECT_EQ(out[0].error->message, single.error->message);
    EXPECT_EQ(out[0].error->retry_after, single.error->retry_after);
    // And within a longer batch, between accepted items.
    std::vector<JobSpec> three{spec("echo", "a"), r.spec, spec("echo", "c")};
    std::vector<Engine::SubmitResult> out3;
    EXPECT_EQ(batch(three, out3), 3u);
    EXPECT_TRUE(out3[0].ok());
    EXPECT_TRUE(out3[2].ok());
    ASSERT_TRUE(out3[1].error.has_value());
    EXPECT_EQ(out3[1].error->message, single.error->message);
    (r.code == ErrorCode::kNotFound ? not_found : invalid) += 3;
  }
  ASSERT_TRUE(done_.wait_total(2 * refusals(16).size()));
  EngineSnapshot s = engine().snapshot();
  EXPECT_EQ(s.rejected_invalid, invalid);
  EXPECT_EQ(s.rejected_not_found, not_found);
  // Nothing refused was counted as submitted or ran.
  EXPECT_EQ(counts("echo").submitted, 2 * refusals(16).size());
  EXPECT_EQ(counts("no_such_handler").submitted, 0u);
  EXPECT_EQ(ctl_.calls_now(), static_cast<int>(2 * refusals(16).size()));
}

TEST_F(EngineAdmission, APayloadAtTheLimitIsAccepted) {
  BenchOptions o;
  o.limits.max_payload_bytes = 16;
  start(std::move(o));
  auto c = finish(spec("echo", std::string(16, 'p')));
  EXPECT_EQ(c.state, JobState::kSucceeded);
  EXPECT_EQ(c.output, std::string(16, 'p'));
  JobSpec s = spec("echo");
  s.idempotency_key.assign(256, 'k');
  for (int i = 0; i < 32; ++i) s.labels.emplace_back(std::string(256, 'k'), std::string(256, 'v'));
  EXPECT_TRUE(submit(s).ok());
}

TEST_F(EngineAdmission, AcceptedJobsRunAndReportOnce) {
  start();
  std::vector<std::uint64_t> ids;
  for (int i = 0; i < 50; ++i) ids.push_back(run(spec("echo", std::to_string(i)))->id());
  ASSERT_TRUE(done_.wait_total(ids.size()));
  for (int i = 0; i < 50; ++i) {
    auto c = done_.wait_job(ids[i]);
    EXPECT_EQ(c.state, JobState::kSucceeded);
    EXPECT_EQ(c.output, std::to_string(i));
  }
  EXPECT_TRUE(done_.each_once(ids));
  ASSERT_TRUE(idle());
  EXPECT_EQ(counts("echo").submitted, 50u);
  EXPECT_EQ(counts("echo").succeeded, 50u);
}

TEST_F(EngineAdmission, ABatchAnswersEveryItemInOrder) {
  start();
  std::vector<JobSpec> specs;
  for (int i = 0; i < 20; ++i) specs.push_back(spec(i % 2 ? "echo" : "where", std::to_string(i)));
  std::vector<Engine::SubmitResult> out;
  ASSERT_EQ(batch(specs, out), 20u);
  std::vector<std::uint64_t> ids;
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(out[i].ok()) << i;
    EXPECT_FALSE(out[i].value.deduplicated);
    EXPECT_TRUE(out[i].value.will_notify);
    ids.push_back(out[i].value.job->id());
  }
  // Ids grow in item order (one sequence, A1's order).
  for (int i = 1; i < 20; ++i) EXPECT_LT(ids[i - 1], ids[i]);
  ASSERT_TRUE(done_.wait_total(20));
  for (int i = 0; i < 20; ++i) EXPECT_EQ(done_.wait_job(ids[i]).output, std::to_string(i));
  EXPECT_TRUE(done_.each_once(ids));
}

TEST_F(EngineAdmission, TheLaneFollowsTheRequestOrTheHandlersHint) {
  start();
  auto hint = run(spec("blocking_echo"));
  JobSpec d = spec("blocking_echo");
  d.lane = LaneChoice::kDefault;
  auto forced_default = run(d);
  JobSpec b = spec("echo");
  b.lane = LaneChoice::kBlocking;
  auto forced_blocking = run(b);
  auto plain = run(spec("echo"));
  EXPECT_EQ(hint->lane(), Lane::kBlocking);
  EXPECT_EQ(forced_default->lane(), Lane::kDefault);
  EXPECT_EQ(forced_blocking->lane(), Lane::kBlocking);
  EXPECT_EQ(plain->lane(), Lane::kDefault);
  ASSERT_TRUE(done_.wait_total(4));
}

TEST_F(EngineAdmission, TheInFlightLimitRefusesWithARetryHint) {
  BenchOptions o;
  o.limits.max_inflight_jobs = 2;
  start(std::move(o));
  auto a = run(spec("block"));
  auto b = run(spec("block"));
  ASSERT_TRUE(ctl_.wait_entered(2));
  EXPECT_EQ(engine().in_flight(), 2u);
  Engine::SubmitResult r = submit(spec("echo"));
  ASSERT_TRUE(
      is(r.error, ErrorCode::kExhausted, "2 jobs are in flight (server.max_inflight_jobs)"));
  EXPECT_EQ(r.error->retry_after, 50ms);
  // A batch of one says the same (A2); nothing was submitted.
  std::vector<JobSpec> one{spec("echo")};
  std::vector<Engine::SubmitResult> out;
  EXPECT_EQ(batch(one, out), 1u);
  EXPECT_EQ(out[0].error->message, r.error->message);
  EXPECT_EQ(engine().snapshot().rejected_full, 2u);
  EXPECT_EQ(engine().in_flight(), 2u);
  EXPECT_EQ(counts("echo").submitted, 0u);
  // Room again once a job ended and its task was released (E1).
  ctl_.open_gate();
  ASSERT_TRUE(idle());
  auto c = finish(spec("echo", "after"));
  EXPECT_EQ(c.output, "after");
}

TEST_F(EngineAdmission, DrainingRefusesNewJobsAndLetsRunningOnesFinish) {
  start();
  auto a = run(spec("block", "a"));
  ASSERT_TRUE(ctl_.wait_entered(1));
  engine().begin_drain();
  engine().begin_drain();  // idempotent
  EXPECT_TRUE(engine().draining());
  EXPECT_TRUE(engine().snapshot().draining);
  Engine::SubmitResult r = submit(spec("echo"));
  ASSERT_TRUE(is(r.error, ErrorCode::kUnavailable, "tpoold is draining"));
  std::vector<JobSpec> two{spec("echo"), spec("no_such_handler")};
  std::vector<Engine::SubmitResult> out;
  EXPECT_EQ(batch(two, out), 2u);
  // Draining is checked first: even an unknown handler hears "draining".
  EXPECT_EQ(out[0].error->message, r.error->message);
  EXPECT_EQ(out[1].error->message, r.error->message);
  EXPECT_EQ(engine().snapshot().rejected_draining, 3u);
  EXPECT_EQ(engine().snapshot().rejected_not_found, 0u);
  // The running job is not touched by draining; wait_idle returns once it ended.
  EXPECT_FALSE(a->final());
  EXPECT_FALSE(a->is_cancelled());
  ctl_.open_gate();
  // Woken by the last task end (while draining), not by its timeout.
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE(engine().wait_idle(kHang));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, kHang);
  EXPECT_EQ(done_.wait_job(a->id()).state, JobState::kSucceeded);
  EXPECT_EQ(a->output(), "late:a");
}

TEST_F(EngineAdmission, WaitIdleTimesOutWhileAJobRuns) {
  start();
  run(spec("block"));
  ASSERT_TRUE(ctl_.wait_entered(1));
  engine().begin_drain();
  EXPECT_FALSE(engine().wait_idle(1ms));
  ctl_.open_gate();
  EXPECT_TRUE(engine().wait_idle(kHang));
}

// stop_when_full (A1): the first item refused for room ends the call, its
// spec and those after it are left intact, and its index is returned.
TEST_F(EngineAdmission, StopWhenFullLeavesTheRestIntactAtTheInFlightLimit) {
  BenchOptions o;
  o.limits.max_inflight_jobs = 2;
  start(std::move(o));
  std::vector<JobSpec> specs;
  for (int i = 0; i < 5; ++i) {
    JobSpec s = spec("block", "p" + std::to_string(i));
    s.labels.emplace_back("i", std::to_string(i));
    s.tag = 100 + i;
    specs.push_back(s);
  }
  std::vector<Engine::SubmitResult> out;
  ASSERT_EQ(batch(specs, out, /*stop_when_full=*/true), 2u);
  EXPECT_TRUE(out[0].ok());
  EXPECT_TRUE(out[1].ok());
  ASSERT_TRUE(is(out[2].error, ErrorCode::kExhausted, "jobs are in flight"));
  for (int i = 2; i < 5; ++i) {
    EXPECT_EQ(specs[i].handler, "block") << i;
    EXPECT_EQ(specs[i].payload, "p" + std::to_string(i)) << i;
    ASSERT_EQ(specs[i].labels.size(), 1u) << i;
    EXPECT_EQ(specs[i].tag, 100u + i) << i;
  }
  // Only the item that ended the call was refused; the rest were not looked at.
  EXPECT_EQ(engine().snapshot().rejected_full, 1u);
  EXPECT_EQ(counts("block").submitted, 2u);
  // The retry with the rest, once there is room, takes them.
  ctl_.open_gate();
  ASSERT_TRUE(idle());
  std::vector<JobSpec> rest(std::make_move_iterator(specs.begin() + 2),
                            std::make_move_iterator(specs.begin() + 4));
  ASSERT_EQ(batch(rest, out, true), 2u);
  ASSERT_TRUE(out[0].ok());
  EXPECT_EQ(done_.wait_job(out[0].value.job->id()).output, "late:p2");
  EXPECT_EQ(done_.wait_job(out[1].value.job->id()).output, "late:p3");
}

TEST_F(EngineAdmission, WithoutStopWhenFullEveryItemIsAnswered) {
  BenchOptions o;
  o.limits.max_inflight_jobs = 2;
  start(std::move(o));
  std::vector<JobSpec> specs(5, spec("block"));
  std::vector<Engine::SubmitResult> out;
  ASSERT_EQ(batch(specs, out, /*stop_when_full=*/false), 5u);
  EXPECT_TRUE(out[0].ok());
  EXPECT_TRUE(out[1].ok());
  for (int i = 2; i < 5; ++i)
    EXPECT_TRUE(is(out[i].error, ErrorCode::kExhausted, "in flight")) << i;
  EXPECT_EQ(engine().snapshot().rejected_full, 3u);
}

// A4: the pool's default is kBlock here; the engine asks for kReject itself,
// so a submit to a full pool is refused at once instead of parking the
// caller (a gRPC thread in the daemon).
TEST_F(EngineAdmission, AFullPoolRefusesAtOnceAndNeverBlocksTheCaller) {
  BenchOptions o;
  o.threads = 1;
  o.queue_capacity = 4;
  o.pool_backpressure = Backpressure::kBlock;
  start(std::move(o));
  auto first = run(spec("block"));
  ASSERT_TRUE(ctl_.wait_entered(1));
  // Fill the rest of the descriptors, each submit on another thread with a
  // bound, so a blocking submit fails the test instead of hanging it.
  std::vector<JobPtr> held{first};
  std::optional<Error> refusal;
  for (int i = 0; i < 64 && !refusal; ++i) {
    auto f = std::async(std::launch::async, [&] { return submit(spec("block")); });
    ASSERT_EQ(f.wait_for(std::chrono::seconds(10)), std::future_status::ready)
        << "submit " << i << " blocked on a full pool (A4: the engine must ask for kReject)";
    Engine::SubmitResult r = f.get();
    if (r.ok()) {
      held.push_back(r.value.job);
    } else {
      refusal = r.error;
    }
  }
  ASSERT_TRUE(
      is(refusal, ErrorCode::kExhausted,
         "the pool has no free task slot (all 4 are queued or running, pool.queue_capacity)"));
  EXPECT_EQ(refusal->retry_after, 50ms);
  EXPECT_LE(held.size(), 4u);
  EXPECT_EQ(engine().snapshot().rejected_full, 1u);
  // A batch gets the same sentence for the items the pool refused (A2).
  std::vector<JobSpec> two(2, spec("echo"));
  std::vector<Engine::SubmitResult> out;
  auto f = std::async(std::launch::async, [&] { return batch(two, out); });
  ASSERT_EQ(f.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_EQ(f.get(), 2u);
  EXPECT_EQ(out[0].error->message, refusal->message);
  EXPECT_EQ(out[1].error->message, refusal->message);
  // Refused jobs gave their in-flight slot back (A6 and E1) and never ran.
  EXPECT_EQ(engine().in_flight(), held.size());
  EXPECT_EQ(counts("echo").submitted, 0u);
  ctl_.open_gate();
  ASSERT_TRUE(done_.wait_total(held.size()));
  ASSERT_TRUE(idle());
  EXPECT_EQ(ctl_.calls_now(), static_cast<int>(held.size()));
}

TEST_F(EngineAdmission, StopWhenFullLeavesTheRestIntactWhenThePoolIsFull) {
  BenchOptions o;
  o.threads = 1;
  o.queue_capacity = 4;
  start(std::move(o));
  Error refusal;
  auto held = fill_pool(&refusal);
  ASSERT_FALSE(held.empty());
  ctl_.wait_entered(1);
  std::vector<JobSpec> specs;
  for (int i = 0; i < 3; ++i) specs.push_back(spec("echo", "r" + std::to_string(i)));
  specs[1].idempotency_key = "k1";
  // Item 0 is built, then refused: its key and labels come back from the
  // job (Job::take_spec), which keeps them apart from the rest.
  specs[0].idempotency_key = "k0";
  specs[0].labels.emplace_back("team", "a");
  std::vector<Engine::SubmitResult> out;
  ASSERT_EQ(batch(specs, out, /*stop_when_full=*/true), 0u);
  EXPECT_EQ(out[0].error->message, refusal.message);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(specs[i].payload, "r" + std::to_string(i)) << i;
  EXPECT_EQ(specs[0].idempotency_key, "k0");
  EXPECT_EQ(specs[0].labels, (Labels{{"team", "a"}}));
  EXPECT_EQ(specs[0].handler, "echo");
  EXPECT_EQ(specs[1].idempotency_key, "k1");
  // Refused retained jobs left the store (A6): nothing of them is findable.
  EXPECT_EQ(engine().snapshot().retained_entries, 0u);
  EXPECT_EQ(engine().in_flight(), held.size());
  ctl_.open_gate();
  ASSERT_TRUE(idle());
  ASSERT_EQ(batch(specs, out, true), 3u);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(out[i].ok()) << i;
    EXPECT_EQ(done_.wait_job(out[i].value.job->id()).output, "r" + std::to_string(i));
  }
}

// A1 with stop_when_full: an item after the one that ends the call is not
// consumed, so it gets no outcome and is not counted, even when it is one
// that check() refuses (invalid) and the refusal of room comes later, when
// the run before it goes to the pool. Its retry answers it exactly once.
TEST_F(EngineAdmission, StopWhenFullDoesNotAnswerARefusedItemAfterTheStop) {
  BenchOptions o;
  o.threads = 1;
  o.queue_capacity = 2;
  start(std::move(o));
  auto holder = run(spec("block"));  // one descriptor of two
  ASSERT_TRUE(ctl_.wait_entered(1));
  ASSERT_TRUE(eventually([&] { return pool().stats().live_descriptors == 1; }));
  std::vector<JobSpec> specs{spec("block", "a"), spec("block", "b"), spec("", "invalid"),
                             spec("missing", "unknown")};
  std::vector<Engine::SubmitResult> out;
  ASSERT_EQ(batch(specs, out, /*stop_when_full=*/true), 1u);  // the pool took "a" only
  EXPECT_TRUE(out[0].ok());
  ASSERT_TRUE(is(out[1].error, ErrorCode::kExhausted, "no free task slot"));
  EXPECT_FALSE(out[2].error.has_value()) << "not consumed, yet answered: " << out[2].error->message;
  EXPECT_FALSE(out[3].error.has_value()) << "not consumed, yet answered: " << out[3].error->message;
  EngineSnapshot s = engine().snapshot();
  EXPECT_EQ(s.rejected_invalid, 0u);
  EXPECT_EQ(s.rejected_not_found, 0u);
  EXPECT_EQ(s.rejected_full, 1u);
  EXPECT_EQ(specs[2].payload, "invalid");
  // The retry of the rest, once there is room: each item answered once.
  ctl_.open_gate();
  ASSERT_TRUE(quiet());
  std::vector<JobSpec> rest(std::make_move_iterator(specs.begin() + 1),
                            std::make_move_iterator(specs.end()));
  ASSERT_EQ(batch(rest, out, true), 3u);
  EXPECT_TRUE(out[0].ok());
  EXPECT_TRUE(is(out[1].error, ErrorCode::kInvalidArgument, "names no handler"));
  EXPECT_TRUE(is(out[2].error, ErrorCode::kNotFound, "no handler named 'missing'"));
  s = engine().snapshot();
  EXPECT_EQ(s.rejected_invalid, 1u);
  EXPECT_EQ(s.rejected_not_found, 1u);
  ASSERT_TRUE(done_.wait_total(3));
}

// A batch the pool accepts in part: the accepted prefix runs, the tail is
// refused with the pool's sentence and gives its slots back.
TEST_F(EngineAdmission, ABatchThePoolTakesInPartAnswersTheTailWithThePoolsSentence) {
  BenchOptions o;
  o.threads = 1;
  o.queue_capacity = 4;
  start(std::move(o));
  auto first = run(spec("block"));
  ASSERT_TRUE(ctl_.wait_entered(1));
  std::vector<JobSpec> specs(8, spec("block"));
  std::vector<Engine::SubmitResult> out;
  ASSERT_EQ(batch(specs, out), 8u);
  std::size_t ok = 0;
  for (std::size_t i = 0; i < 8; ++i) {
    if (out[i].ok()) {
      EXPECT_EQ(ok, i) << "the accepted items are a prefix";
      ++ok;
    } else {
      EXPECT_TRUE(is(out[i].error, ErrorCode::kExhausted, "the pool has no free task slot"));
    }
  }
  EXPECT_GE(ok, 1u);
  EXPECT_LE(ok, 3u);
  EXPECT_EQ(engine().in_flight(), 1 + ok);
  EXPECT_EQ(engine().snapshot().rejected_full, 8 - ok);
  EXPECT_EQ(counts("block").submitted, 1 + ok);
  ctl_.open_gate();
  ASSERT_TRUE(done_.wait_total(1 + ok));
}

TEST_F(EngineAdmission, AShutDownPoolRefusesWithTheShutdownSentence) {
  start();
  ASSERT_TRUE(pool().shutdown(ShutdownMode::kDrain, kHang).ok());
  Engine::SubmitResult r = submit(spec("echo"));
  ASSERT_TRUE(is(r.error, ErrorCode::kUnavailable, "tpoold is shutting down"));
  std::vector<JobSpec> two(2, spec("echo"));
  std::vector<Engine::SubmitResult> out;
  EXPECT_EQ(batch(two, out), 2u);
  EXPECT_EQ(out[0].error->message, r.error->message);
  EXPECT_EQ(out[1].error->message, r.error->message);
  EXPECT_EQ(engine().snapshot().rejected_draining, 3u);
  EXPECT_EQ(engine().in_flight(), 0u);
  EXPECT_EQ(engine().snapshot().retained_entries, 0u);
}

// A5: a keyed item is a run of its own, and the run before it goes to the
// pool first, so item order is kept across runs (ids grow in item order).
TEST_F(EngineAdmission, KeyedItemsSplitTheBatchIntoRunsInItemOrder) {
  start();
  std::vector<JobSpec> specs{spec("echo", "0"), spec("echo", "1"),        keyed("echo", "2", "k2"),
                             spec("echo", "3"), keyed("echo", "4", "k4"), spec("where", "5")};
  std::vector<Engine::SubmitResult> out;
  ASSERT_EQ(batch(specs, out), 6u);
  for (std::size_t i = 0; i < 6; ++i) ASSERT_TRUE(out[i].ok()) << i;
  for (std::size_t i = 1; i < 6; ++i) {
    EXPECT_LT(out[i - 1].value.job->id(), out[i].value.job->id()) << i;
  }
  ASSERT_TRUE(done_.wait_total(6));
  for (std::size_t i = 0; i < 6; ++i) {
    EXPECT_EQ(done_.wait_job(out[i].value.job->id()).output, std::to_string(i));
  }
  // The keyed ones are retained (findable), the others are not.
  EXPECT_TRUE(engine().find(out[2].value.job->id()).ok());
  EXPECT_TRUE(engine().find(out[4].value.job->id()).ok());
  EXPECT_FALSE(engine().find(out[0].value.job->id()).ok());
}

TEST_F(EngineAdmission, ConcurrentSubmittersAllGetAnAnswer) {
  BenchOptions o;
  o.threads = 2;
  o.queue_capacity = 16;
  o.limits.max_inflight_jobs = 8;
  start(std::move(o));
  constexpr int kThreads = 4, kEach = 200;
  std::atomic<int> accepted{0}, refused{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; ++t) {
    ts.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) {
        Engine::SubmitResult r = submit(spec("echo", std::to_string(t * kEach + i)));
        if (r.ok()) {
          accepted.fetch_add(1);
        } else {
          EXPECT_EQ(r.error->code, ErrorCode::kExhausted) << r.error->message;
          refused.fetch_add(1);
        }
      }
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_EQ(accepted + refused, kThreads * kEach);
  ASSERT_TRUE(done_.wait_total(static_cast<std::size_t>(accepted.load())));
  ASSERT_TRUE(idle());
  EngineSnapshot s = engine().snapshot();
  EXPECT_EQ(s.rejected_full, static_cast<std::uint64_t>(refused.load()));
  EXPECT_EQ(counts("echo").submitted, static_cast<std::uint64_t>(accepted.load()));
  EXPECT_EQ(counts("echo").succeeded, static_cast<std::uint64_t>(accepted.load()));
  EXPECT_EQ(done_.total(), static_cast<std::size_t>(accepted.load()));
}

TEST_F(EngineAdmission, ASubmitWithoutDoneFnRunsAndIsNotNotified) {
  start();
  Engine::SubmitResult r = engine().submit(spec("echo", "x"), nullptr, nullptr);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r.value.will_notify);
  ASSERT_TRUE(eventually([&] { return r.value.job->final(); }));
  EXPECT_EQ(r.value.job->output(), "x");
  ASSERT_TRUE(idle());
  EXPECT_EQ(done_.total(), 0u);
}

}  // namespace
}  // namespace tpool::engine::testing
