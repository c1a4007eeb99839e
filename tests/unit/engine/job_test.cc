// The job (tpool/engine/job.h, inv 1-6) and the engine around it: how a
// handler's answer becomes a final state, waiters (DoneFn exactly once),
// ids, counters in snapshot(), capacity waiters (E3), thread_init.
#include <map>
#include <random>
#include <set>
#include <thread>

#include "tpool/engine/thread_job.h"

#include "engine_test_support.h"

namespace tpool::engine::testing {
namespace {

class EngineJob : public EngineBench {};

TEST(EngineJobId, MakeAndIncarnationRoundTrip) {
  const std::uint64_t id = JobId::make(0xabcdef, 12345);
  EXPECT_EQ(JobId::incarnation(id), 0xabcdefu);
  EXPECT_EQ(id & JobId::kSequenceMask, 12345u);
  // Only 24 bits of incarnation and 40 of sequence are kept.
  EXPECT_EQ(JobId::incarnation(JobId::make(0x1abcdef, 1)), 0xabcdefu);
  EXPECT_EQ(JobId::make(1, JobId::kSequenceMask + 2) & JobId::kSequenceMask, 1u);
  for (int i = 0; i < 100; ++i) {
    const std::uint32_t inc = JobId::draw_incarnation();
    EXPECT_NE(inc, 0u);
    EXPECT_LE(inc, JobId::kIncarnationMask);
  }
}

TEST(EngineJobState, NamesAndFinality) {
  EXPECT_EQ(to_string(JobState::kQueued), "queued");
  EXPECT_EQ(to_string(JobState::kRunning), "running");
  EXPECT_EQ(to_string(JobState::kSucceeded), "succeeded");
  EXPECT_EQ(to_string(JobState::kFailed), "failed");
  EXPECT_EQ(to_string(JobState::kCancelled), "cancelled");
  EXPECT_EQ(to_string(JobState::kTimedOut), "timed_out");
  EXPECT_FALSE(is_final(JobState::kQueued));
  EXPECT_FALSE(is_final(JobState::kRunning));
  EXPECT_TRUE(is_final(JobState::kSucceeded));
  EXPECT_TRUE(is_final(JobState::kFailed));
  EXPECT_TRUE(is_final(JobState::kCancelled));
  EXPECT_TRUE(is_final(JobState::kTimedOut));
}

TEST_F(EngineJob, IdsCarryTheIncarnationAndASequenceFromOne) {
  BenchOptions o;
  o.limits.incarnation = 77;
  start(std::move(o));
  auto a = run(spec("echo"));
  auto b = run(spec("echo"));
  EXPECT_EQ(JobId::incarnation(a->id()), 77u);
  EXPECT_EQ(a->id() & JobId::kSequenceMask, 1u);
  EXPECT_EQ(b->id() & JobId::kSequenceMask, 2u);
  ASSERT_TRUE(done_.wait_total(2));
}

TEST_F(EngineJob, AnEngineWithoutAnIncarnationDrawsOne) {
  BenchOptions o;
  o.limits.incarnation = 0;
  start(std::move(o));
  EXPECT_NE(engine().incarnation(), 0u);
  auto a = run(spec("echo"));
  EXPECT_EQ(JobId::incarnation(a->id()), engine().incarnation());
  done_.wait_job(a->id());
}

// How the handler's answer becomes the job's final state (JobTask::execute).
TEST_F(EngineJob, TheHandlersAnswerDecidesTheFinalState) {
  BenchOptions o;
  o.max_output_bytes = 1000;
  start(std::move(o));
  struct Case {
    JobSpec spec;
    JobState state;
    std::string message;  // contained in the job's message
  };
  std::vector<Case> cases = {
      {spec("echo", "x"), JobState::kSucceeded, ""},
      {spec("fail", "1:it broke"), JobState::kFailed, "it broke"},
      {spec("fail", "2"), JobState::kFailed, "failed with status 2"},
      {spec("fail", "42:own code"), JobState::kFailed, "own code"},
      // A handler that says cancelled without being cancelled: cancelled.
      {spec("fail", "3:stopped"), JobState::kCancelled, "stopped"},
      {spec("fail", "4:deadline"), JobState::kCancelled, "deadline"},
      {spec("big", "1001"), JobState::kFailed, "1000"},
      {spec("big", "1000"), JobState::kSucceeded, ""},
  };
  std::vector<std::uint64_t> ids;
  for (auto& c : cases) ids.push_back(run(c.spec)->id());
  for (std::size_t i = 0; i < cases.size(); ++i) {
    Recorder::Call got = done_.wait_job(ids[i]);
    EXPECT_EQ(got.state, cases[i].state) << i << ": " << got.message;
    EXPECT_NE(got.message.find(cases[i].message), std::string::npos) << i << ": " << got.message;
  }
  ASSERT_TRUE(idle());
  EXPECT_EQ(counts("fail").failed, 3u);
  EXPECT_EQ(counts("fail").cancelled, 2u);
  EXPECT_EQ(counts("big").failed, 1u);
  EXPECT_EQ(counts("big").succeeded, 1u);
}

TEST_F(EngineJob, AJobMovesQueuedRunningFinalAndReportsItsTimes) {
  start(BenchOptions::with_threads(1));
  const auto wall_before = std::chrono::system_clock::now();
  auto holder = run(spec("block", "h"));
  ASSERT_TRUE(ctl_.wait_entered(1));
  auto queued = run(spec("echo", "q"));
  EXPECT_EQ(holder->state(), JobState::kRunning);
  EXPECT_EQ(queued->state(), JobState::kQueued);
  EXPECT_EQ(queued->run_time(), std::chrono::microseconds(0));
  EXPECT_EQ(holder->progress_snapshot(), std::make_pair(0.5, std::string("waiting for the gate")));
  EXPECT_GE(holder->accepted_wall() + 1s, wall_before);
  EXPECT_LE(holder->accepted_wall(), std::chrono::system_clock::now() + 1s);
  ctl_.open_gate();
  done_.wait_job(queued->id());
  EXPECT_EQ(queued->state(), JobState::kSucceeded);
  EXPECT_EQ(holder->state(), JobState::kSucceeded);
  // The queued job waited at least as long as the holder ran before it.
  EXPECT_GE(queued->wait_time().count(), 0);
  EXPECT_GT(holder->run_time().count(), 0);
  const auto rt = holder->run_time();
  EXPECT_EQ(holder->run_time(), rt);  // frozen once final
}

TEST_F(EngineJob, MoreWaitersAreCalledOnceAndARemovedOneNever) {
  start();
  auto j = run(spec("block"));
  Recorder second, removed;
  EXPECT_TRUE(j->add_waiter(&Recorder::on_done, &second));
  EXPECT_TRUE(j->add_waiter(&Recorder::on_done, &removed));
  EXPECT_TRUE(j->remove_waiter(&Recorder::on_done, &removed));
  EXPECT_FALSE(j->remove_waiter(&Recorder::on_done, &removed));  // no longer there
  ctl_.open_gate();
  done_.wait_job(j->id());
  second.wait_job(j->id());
  ASSERT_TRUE(idle());
  EXPECT_EQ(second.calls_for(j->id()), 1);
  EXPECT_EQ(removed.total(), 0u);
  // Once final, a new waiter is refused (read the result now), never called.
  Recorder late;
  EXPECT_FALSE(j->add_waiter(&Recorder::on_done, &late));
  EXPECT_EQ(late.total(), 0u);
}

TEST_F(EngineJob, TheFirstWaiterCanBeRemovedToo) {
  start();
  auto j = run(spec("block"));
  EXPECT_TRUE(j->remove_waiter(&Recorder::on_done, &done_));
  ctl_.open_gate();
  ASSERT_TRUE(eventually([&] { return j->final(); }));
  ASSERT_TRUE(idle());
  EXPECT_EQ(done_.total(), 0u);
}

// inv 1: exactly one caller ends a job. Cancels from another thread race the
// workers and the enforce pass; every job reports exactly once and the
// counters add up.
TEST_F(EngineJob, DoneFnRunsExactlyOnceUnderRacingEnders) {
  BenchOptions o;
  o.threads = 3;
  o.queue_capacity = 1024;
  o.limits.cancel_grace = 0ms;
  start(std::move(o));
  constexpr int kJobs = 300;
  std::vector<JobPtr> jobs;
  std::vector<std::uint64_t> ids;
  for (int i = 0; i < kJobs; ++i) {
    JobSpec s = spec(i % 3 == 0 ? "spin" : "echo", std::to_string(i));
    if (i % 7 == 0) s.deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(i);
    jobs.push_back(run(s));
    ids.push_back(jobs.back()->id());
  }
  std::atomic<bool> stop{false};
  std::thread enforcer([&] {
    while (!stop.load()) engine().enforce();
  });
  std::thread canceller([&] {
    for (int i = kJobs - 1; i >= 0; --i) jobs[i]->cancel();
  });
  canceller.join();
  const bool all = done_.wait_total(kJobs);
  stop.store(true);
  enforcer.join();
  ASSERT_TRUE(all) << done_.total() << " of " << kJobs << " reported";
  ASSERT_TRUE(idle());
  EXPECT_TRUE(done_.each_once(ids));
  std::uint64_t ended = 0;
  for (const auto& h : engine().snapshot().handlers) {
    EXPECT_EQ(h.submitted, h.succeeded + h.failed + h.cancelled + h.timed_out) << h.handler;
    ended += h.succeeded + h.failed + h.cancelled + h.timed_out;
  }
  EXPECT_EQ(ended, static_cast<std::uint64_t>(kJobs));
  for (auto& j : jobs) EXPECT_TRUE(j->final());
}

TEST_F(EngineJob, SnapshotCountersAddUp) {
  BenchOptions o;
  o.limits.max_inflight_jobs = 3;
  o.limits.cancel_grace = 0ms;
  start(std::move(o));
  finish(spec("echo"));
  finish(spec("fail", "1:no"));
  JobSpec late = spec("echo");
  late.deadline = std::chrono::steady_clock::now() - 1ms;
  finish(late);
  auto spin = run(spec("spin"));
  ASSERT_TRUE(ctl_.wait_entered(1));
  spin->cancel();
  done_.wait_job(spin->id());
  JobSpec r = spec("echo", "kept");
  r.retain = true;
  finish(r);
  ASSERT_TRUE(idle());  // every slot back before the in-flight limit is used up
  (void)submit(spec(""));
  (void)submit(spec("missing"));
  auto b1 = run(spec("block"));
  auto b2 = run(spec("block"));
  auto b3 = run(spec("block"));
  (void)submit(spec("echo"));  // in-flight limit
  Engine::SubmitResult k = submit(keyed("echo", "p", "k"));
  EXPECT_FALSE(k.ok());  // full as well
  ctl_.open_gate();
  ASSERT_TRUE(done_.wait_total(8));
  ASSERT_TRUE(idle());
  auto k1 = finish(keyed("echo", "p", "k"));
  (void)submit(keyed("echo", "p", "k"));      // deduplicated
  (void)submit(keyed("echo", "other", "k"));  // conflict
  engine().begin_drain();
  (void)submit(spec("echo"));
  ASSERT_TRUE(idle());
  EngineSnapshot s = engine().snapshot();
  EXPECT_EQ(s.in_flight, 0u);
  EXPECT_EQ(s.rejected_invalid, 1u);
  EXPECT_EQ(s.rejected_not_found, 1u);
  EXPECT_EQ(s.rejected_full, 2u);
  EXPECT_EQ(s.rejected_conflict, 1u);
  EXPECT_EQ(s.rejected_draining, 1u);
  EXPECT_EQ(s.deduplicated, 1u);
  EXPECT_EQ(s.retained_entries, 2u);  // the retained echo and the keyed one
  EXPECT_EQ(s.expired, 0u);
  EXPECT_TRUE(s.draining);
  ASSERT_EQ(s.handlers.size(), 4u);  // sorted by name; "missing" never counted
  EXPECT_EQ(s.handlers[0].handler, "block");
  EXPECT_EQ(s.handlers[1].handler, "echo");
  EXPECT_EQ(s.handlers[2].handler, "fail");
  EXPECT_EQ(s.handlers[3].handler, "spin");
  EXPECT_EQ(s.handlers[0].submitted, 3u);
  EXPECT_EQ(s.handlers[0].succeeded, 3u);
  EXPECT_EQ(s.handlers[1].submitted, 4u);
  EXPECT_EQ(s.handlers[1].succeeded, 3u);
  EXPECT_EQ(s.handlers[1].timed_out, 1u);
  EXPECT_EQ(s.handlers[2].failed, 1u);
  EXPECT_EQ(s.handlers[3].cancelled, 1u);
  for (const auto& h : s.handlers) {
    EXPECT_EQ(h.submitted, h.succeeded + h.failed + h.cancelled + h.timed_out) << h.handler;
  }
  (void)k1;
}

class CountingWaiter final : public CapacityWaiter {
 public:
  void on_capacity() override {
    std::lock_guard lock(mu);
    ++calls;
    cv.notify_all();
  }
  bool wait(int n) {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, kHang, [&] { return calls >= n; });
  }
  std::mutex mu;
  std::condition_variable cv;
  int calls = 0;
};

// E3: a waiter registered while jobs are in flight is woken once by a task
// end; with nothing in flight it is not registered at all.
TEST_F(EngineJob, CapacityWaitersAreWokenOnceByATaskEnd) {
  start();
  CountingWaiter w;
  EXPECT_FALSE(engine().wait_for_capacity(&w));  // nothing in flight: retry now
  auto j = run(spec("block"));
  EXPECT_TRUE(engine().wait_for_capacity(&w));
  CountingWaiter w2;
  EXPECT_TRUE(engine().wait_for_capacity(&w2));
  ctl_.open_gate();
  ASSERT_TRUE(w.wait(1));
  ASSERT_TRUE(idle());
  // One task end wakes one waiter (the first registered); the second waits
  // for the next end.
  EXPECT_EQ(w2.calls, 0);
  finish(spec("echo"));
  ASSERT_TRUE(w2.wait(1));
  ASSERT_TRUE(idle());
  EXPECT_EQ(w.calls, 1);
  EXPECT_EQ(w2.calls, 1);
}

// E3 under races: a waiter registered while a job is ending is either
// refused (nothing in flight: retry now) or woken, never lost.
TEST_F(EngineJob, ACapacityWaiterRacingATaskEndIsNeverLost) {
  BenchOptions o;
  o.threads = 2;
  start(std::move(o));
  constexpr int kRounds = 300;
  CountingWaiter w;
  int registered = 0;
  for (int i = 0; i < kRounds; ++i) {
    (void)engine().submit(spec("echo"), nullptr, nullptr);
    if (engine().wait_for_capacity(&w)) {
      ++registered;
      ASSERT_TRUE(w.wait(registered)) << "round " << i << ": a registered waiter was never woken";
    }
  }
  ASSERT_TRUE(idle());
  std::lock_guard lock(w.mu);
  EXPECT_EQ(w.calls, registered);
}

// A1 and E3 together, as a Stream uses them: submit with stop_when_full,
// keep what was not consumed, wait for capacity, resubmit. Every item runs
// exactly once, in spite of an in-flight limit far below the item count.
class Pump final : public CapacityWaiter {
 public:
  void on_capacity() override {
    std::lock_guard lock(mu);
    woken = true;
    cv.notify_all();
  }
  bool wait_woken() {
    std::unique_lock lock(mu);
    const bool ok = cv.wait_for(lock, kHang, [&] { return woken; });
    woken = false;
    return ok;
  }
  std::mutex mu;
  std::condition_variable cv;
  bool woken = false;
};

TEST_F(EngineJob, StopWhenFullAndCapacityWaitersCarryAStreamThroughTheLimit) {
  BenchOptions o;
  o.threads = 2;
  o.limits.max_inflight_jobs = 4;
  start(std::move(o));
  constexpr int kItems = 400;
  std::vector<JobSpec> pending;
  for (int i = 0; i < kItems; ++i) {
    JobSpec s = spec("echo", std::to_string(i));
    s.tag = static_cast<std::uint64_t>(i);
    if (i % 50 == 0) s.idempotency_key = "pump-" + std::to_string(i);  // keyed items too
    pending.push_back(std::move(s));
  }
  Pump pump;
  std::vector<Engine::SubmitResult> out;
  std::map<std::uint64_t, std::string> expect;  // job id -> output
  int rounds = 0;
  while (!pending.empty()) {
    ASSERT_LT(++rounds, 100 * kItems) << "no progress";
    const std::size_t consumed = batch(pending, out, /*stop_when_full=*/true);
    for (std::size_t k = 0; k < consumed; ++k) {
      ASSERT_TRUE(out[k].ok()) << out[k].error->message;
      EXPECT_FALSE(out[k].value.deduplicated);
      expect[out[k].value.job->id()] = std::to_string(out[k].value.job->tag());
    }
    pending.erase(pending.begin(), pending.begin() + static_cast<std::ptrdiff_t>(consumed));
    if (pending.empty()) break;
    ASSERT_TRUE(is(out[consumed].error, ErrorCode::kExhausted, "in flight"));
    if (engine().wait_for_capacity(&pump)) {
      ASSERT_TRUE(pump.wait_woken());
    }
  }
  ASSERT_EQ(expect.size(), static_cast<std::size_t>(kItems));
  ASSERT_TRUE(done_.wait_total(kItems));
  for (const auto& [id, output] : expect) EXPECT_EQ(done_.wait_job(id).output, output);
  std::vector<std::uint64_t> ids;
  for (const auto& [id, output] : expect) ids.push_back(id);
  EXPECT_TRUE(done_.each_once(ids));
  ASSERT_TRUE(idle());
  EXPECT_EQ(counts("echo").submitted, static_cast<std::uint64_t>(kItems));
  EXPECT_EQ(counts("echo").succeeded, static_cast<std::uint64_t>(kItems));
}

TEST(EngineThreadJob, AScopeNamesTheJobAndRestoresTheOuterOne) {
  const ThreadJob* t = this_thread_job();
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->handler, nullptr);
  {
    ThreadJobScope outer("outer", 1);
    EXPECT_EQ(std::string_view(t->handler, t->handler_len), "outer");
    EXPECT_EQ(t->job_id, 1u);
    {
      ThreadJobScope inner("inner", 2);  // help_wait running a job inside a parent
      EXPECT_EQ(std::string_view(t->handler, t->handler_len), "inner");
      EXPECT_EQ(t->job_id, 2u);
    }
    EXPECT_EQ(std::string_view(t->handler, t->handler_len), "outer");
    EXPECT_EQ(t->job_id, 1u);
    // Another thread has its own (T1).
    std::thread([] { EXPECT_EQ(this_thread_job()->handler, nullptr); }).join();
  }
  EXPECT_EQ(t->handler, nullptr);
  EXPECT_EQ(t->job_id, 0u);
}

std::atomic<int> g_thread_inits{0};
void count_thread_init() {
  g_thread_inits.fetch_add(1);
}

TEST_F(EngineJob, ThreadInitRunsOnceOnEachThreadThatRunsJobs) {
  BenchOptions o;
  o.threads = 1;
  o.limits.thread_init = &count_thread_init;
  start(std::move(o));
  g_thread_inits.store(0);
  for (int i = 0; i < 20; ++i) finish(spec("echo"));
  EXPECT_EQ(g_thread_inits.load(), 1);
}

TEST_F(EngineJob, TheEngineAnswersForTheLayersBelow) {
  start(BenchOptions::with_threads(3));
  auto hs = engine().handlers();
  ASSERT_FALSE(hs.empty());
  EXPECT_TRUE(std::is_sorted(hs.begin(), hs.end(),
                             [](const auto& a, const auto& b) { return a.name < b.name; }));
  bool found = false;
  for (const auto& h : hs) found |= h.name == "echo" && h.plugin_name == "engine_testkit";
  EXPECT_TRUE(found);
  EXPECT_EQ(engine().pool_stats().workers, 3u);
  EXPECT_EQ(engine().limits().max_inflight_jobs, EngineLimits{}.max_inflight_jobs);
}

TEST_F(EngineJob, AJobsRetainedBytesCountItsResultAndLabels) {
  start();
  JobSpec s = spec("big", "300");
  s.labels = {{"ab", "cde"}};
  s.idempotency_key = "kkkk";
  auto c = finish(s);
  auto j = engine().find(c.id).value;
  ASSERT_NE(j, nullptr);
  EXPECT_EQ(j->retained_bytes(), 512u + 300u + 0u + 4u + 5u);
}

// A Job keeps its request in fewer bytes than JobSpecCore (job.h): the
// payload inline up to 16 bytes and in a block of its own past that, the
// handler's name in its counters entry, the deadline in its token, the
// policies as 32-bit milliseconds. What goes in comes back out, at every
// payload length around the inline limit, and a succeeded job's payload is
// released while a failed one's is kept (for Retry, inv 5).
TEST_F(EngineJob, AJobKeepsItsRequestWholeAtEveryPayloadLength) {
  start();
  std::vector<JobPtr> ran_jobs;
  std::vector<std::pair<JobPtr, std::string>> failed_jobs;
  for (const std::size_t n : {0, 1, 15, 16, 17, 64, 4096}) {
    std::string payload(n, 'x');
    for (std::size_t i = 0; i < n; ++i) payload[i] = static_cast<char>(i * 7);  // NULs too
    JobSpec s = spec("echo", payload);
    s.tag = 0xfeedface00000000u + n;
    s.max_attempts = 3;
    s.backoff_base = 250ms;
    s.backoff_cap = std::chrono::milliseconds(3'600'000);
    s.delay = std::chrono::milliseconds(30LL * 24 * 3'600'000);  // the limit: 30 days
    s.timeout = 90s;
    s.deadline = Job::Clock::now() + 90s;
    s.lane = LaneChoice::kBlocking;
    s.retain = true;
    const JobSpec want = s;
    auto j = JobPtr::make(engine(), JobId::make(engine().incarnation(), 1000 + n), std::move(s),
                          host_->find("echo"), Lane::kBlocking, nullptr);
    EXPECT_EQ(j->payload(), payload) << n;
    EXPECT_EQ(j->handler_name(), "echo");
    const JobSpecCore got = j->request();
    EXPECT_EQ(got.handler, "echo");
    EXPECT_EQ(got.payload, payload) << n;
    EXPECT_EQ(got.tag, want.tag);
    EXPECT_EQ(got.max_attempts, 3u);
    EXPECT_EQ(got.backoff_base, 250ms);
    EXPECT_EQ(got.backoff_cap, want.backoff_cap);
    EXPECT_EQ(got.delay, want.delay);
    EXPECT_EQ(got.timeout, 90s);
    EXPECT_EQ(got.deadline, want.deadline);
    EXPECT_EQ(got.lane, LaneChoice::kBlocking);
    EXPECT_TRUE(got.retain);
    EXPECT_FALSE(got.durable);

    // Run: echo's output is the payload.
    auto ran = run(spec("echo", payload));
    const Recorder::Call c = done_.wait_job(ran->id());
    EXPECT_EQ(c.output, payload) << n;
    const std::string failing = "1:" + payload;
    auto failed = run(spec("fail", failing));
    done_.wait_job(failed->id());
    EXPECT_EQ(failed->state(), JobState::kFailed);
    ran_jobs.push_back(std::move(ran));
    failed_jobs.emplace_back(std::move(failed), failing);
  }
  // The workers write the payloads they release after the DoneFn ran: read
  // them once the pool has drained (its workers are done with every task).
  ASSERT_TRUE(pool().shutdown(ShutdownMode::kDrain, kHang).ok());
  for (const JobPtr& j : ran_jobs) EXPECT_TRUE(j->payload().empty()) << "released on success";
  for (const auto& [j, p] : failed_jobs) EXPECT_EQ(j->payload(), p) << "kept for Retry";
  // No deadline reads as none.
  auto j = JobPtr::make(engine(), JobId::make(engine().incarnation(), 999), spec("echo", "p"),
                        host_->find("echo"), Lane::kDefault, nullptr);
  EXPECT_EQ(j->deadline(), Job::Clock::time_point::max());
  EXPECT_EQ(j->remaining(), std::nullopt);
}

// (job.h inv 7) Jobs freed on one thread are made again in the same memory
// on another (job.cc M1-M2): the pattern of a Stream, whose gRPC thread
// makes the jobs and whose workers free them. And no more than
// kKeptJobBlocks blocks are kept (M3); the rest go back to malloc.
TEST_F(EngineJob, AJobFreedOnAnotherThreadLeavesItsMemoryForTheNextJob) {
  if (!Job::kRecyclesMemory) GTEST_SKIP() << "this build gives Jobs' memory back to malloc";
  start();
  constexpr int kJobs = 64;
  const auto make = [&](std::uint64_t n) {
    return JobPtr::make(engine(), JobId::make(engine().incarnation(), 5000 + n),
                        spec("echo", "0123456789abcdef"), host_->find("echo"), Lane::kDefault,
                        nullptr);
  };
  // Blocks the tests before this one left are handed out first: take them
  // (held until the end), so what follows sees only its own.
  std::vector<JobPtr> earlier;
  for (std::size_t n = Job::kept_blocks_for_testing(); n > 0; --n)
    earlier.push_back(make(90000 + n));
  ASSERT_EQ(Job::kept_blocks_for_testing(), 0u);
  std::vector<JobPtr> first;
  std::set<const void*> blocks;
  for (int i = 0; i < kJobs; ++i) {
    first.push_back(make(static_cast<std::uint64_t>(i)));
    blocks.insert(first.back().get());
  }
  std::thread([&] { first.clear(); }).join();  // freed on another thread
  EXPECT_EQ(Job::kept_blocks_for_testing(), static_cast<std::size_t>(kJobs));
  std::vector<JobPtr> second;
  int reused = 0;
  for (int i = 0; i < kJobs; ++i) {
    second.push_back(make(static_cast<std::uint64_t>(kJobs + i)));
    reused += blocks.count(second.back().get()) != 0 ? 1 : 0;
    EXPECT_EQ(second.back()->payload(), "0123456789abcdef");
  }
  EXPECT_EQ(reused, kJobs) << "a job was made in new memory while freed jobs' blocks were kept";
  second.clear();

  // The bound: free more than it allows, from another thread; what is kept
  // stops at the bound (the frees are on one thread here, so exactly).
  std::vector<JobPtr> many;
  for (std::size_t i = 0; i < Job::kKeptJobBlocks + 500; ++i) many.push_back(make(100000 + i));
  std::thread([&] { many.clear(); }).join();
  EXPECT_EQ(Job::kept_blocks_for_testing(), Job::kKeptJobBlocks);
}

}  // namespace
}  // namespace tpool::engine::testing
