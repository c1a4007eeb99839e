// Durable jobs (issue 17, items 2, 3 and 5): the engine with a real SQLite
// journal (daemon/engine/src/durable.cc, D1-D7; tpool/store/journal.h,
// J1-J9). A "restart" is the engine and the journal destroyed and opened
// again on the same file; a crash is a journal written as a crashed daemon
// leaves it (accepted and started records, no end), then opened by a new
// engine. The kill -9 of a real tpoold under load is in
// tests/integration/daemon/durable_test.cc.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <future>

#include "engine_test_support.h"
#include "store_test_support.h"
#include "tpool/store/journal.h"

namespace tpool::engine::testing {
namespace {

using namespace std::chrono_literals;
using store::JobRecord;
using store::Journal;
using store::RecordState;

std::int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

class Durable : public EngineBench {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("tpool-durable-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override {
    EngineBench::TearDown();
    journal_.reset();
    std::filesystem::remove_all(dir_);
  }

  std::string path() const { return (dir_ / "jobs.db").string(); }

  void open_journal() {
    store::JournalOptions o;
    o.path = path();
    auto j = Journal::open(o);
    ASSERT_TRUE(j.ok()) << j.status().message();
    journal_ = std::move(j).value();
  }
  // The engine on the journal (opened first when it is not).
  void start_durable(EngineLimits l = BenchOptions::test_limits(),
                     const tpool::Clock* clock = nullptr) {
    if (journal_ == nullptr) open_journal();
    BenchOptions o;
    o.limits = l;
    o.clock = clock;
    o.journal = journal_.get();
    start(std::move(o));
  }
  // A clean stop: the pool drained, the engine gone, the journal flushed
  // and closed (what a restart of tpoold does).
  void restart() {
    ctl_.open_gate();
    if (pool_) (void)pool_->shutdown(ShutdownMode::kDrain, kHang);
    engine_.reset();
    pool_.reset();
    host_.reset();
    journal_.reset();
  }
  static JobSpec durable(std::string handler, std::string payload) {
    JobSpec s = spec(std::move(handler), std::move(payload));
    s.durable = true;
    s.retain = true;
    return s;
  }
  std::optional<JobRecord> record(std::uint64_t id) {
    EXPECT_TRUE(journal_->flush().ok());
    return journal_->get(id);
  }

  std::filesystem::path dir_;
  std::unique_ptr<Journal> journal_;
};

TEST_F(Durable, WithoutAStoreADurableJobIsFailedPrecondition) {
  start();
  Engine::SubmitResult r = submit(durable("echo", "x"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error->code, ErrorCode::kFailedPrecondition);
  EXPECT_NE(r.error->message.find("[store] path"), std::string::npos) << r.error->message;
  EXPECT_EQ(counts("echo").submitted, 0u);
}

TEST_F(Durable, AcknowledgedOnlyOnceCommittedThenItsEndIsRecorded) {
  start_durable();
  // The gate holds the job in its handler: the accept is on disk (J1, D1)
  // while the job has not ended, so the record cannot have come from its end.
  Engine::SubmitResult r = submit(durable("block", "held"));
  ASSERT_TRUE(r.ok()) << r.error->message;
  const std::uint64_t id = r.value.job->id();
  std::optional<JobRecord> rec = journal_->get(id);  // no flush: the ack implies the commit
  ASSERT_TRUE(rec.has_value());
  EXPECT_EQ(rec->handler, "block");
  EXPECT_EQ(rec->payload, "held");
  EXPECT_FALSE(store::is_final(rec->state));
  ctl_.open_gate();
  Recorder::Call c = done_.wait_job(id);
  EXPECT_EQ(c.state, JobState::kSucceeded);
  ASSERT_TRUE(idle());
  rec = record(id);
  ASSERT_TRUE(rec.has_value());
  EXPECT_EQ(rec->state, RecordState::kSucceeded);
  EXPECT_EQ(rec->attempt, 1u);  // the started record
  // A non-durable job leaves no record.
  Recorder::Call plain = finish(spec("echo", "memory only"));
  EXPECT_FALSE(record(plain.id).has_value());
}

TEST_F(Durable, TheStoreDefaultsMakeJobsDurablePerHandler) {
  EngineLimits l = BenchOptions::test_limits();
  l.durable = false;
  l.handler_durable = {{"echo", true}};
  start_durable(l);
  Recorder::Call e = finish(spec("echo", "kept"));
  Recorder::Call f = finish(spec("flaky", "0"));
  EXPECT_TRUE(record(e.id).has_value());
  EXPECT_FALSE(record(f.id).has_value());
}

TEST_F(Durable, AFailedCommitRefusesTheRunAndNothingOfItRuns) {
  start_durable();
  journal_->inject_commit_failures_for_testing(1, /*disk_full=*/true);
  std::vector<JobSpec> specs;
  for (int i = 0; i < 3; ++i) specs.push_back(durable("echo", "lost " + std::to_string(i)));
  std::vector<Engine::SubmitResult> out;
  EXPECT_EQ(batch(specs, out), 3u);
  for (const auto& r : out) {
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error->code, ErrorCode::kExhausted);  // disk full: RESOURCE_EXHAUSTED (D6)
    EXPECT_NE(r.error->message.find("disk is full"), std::string::npos) << r.error->message;
    EXPECT_NE(r.error->message.find("without durable"), std::string::npos) << r.error->message;
  }
  EXPECT_EQ(engine().snapshot().store_refused, 3u);
  EXPECT_EQ(ctl_.calls_now(), 0);
  EXPECT_EQ(engine().in_flight(), 0u);
  // Non-durable jobs run meanwhile; the next commit works again.
  EXPECT_EQ(finish(spec("echo", "memory")).state, JobState::kSucceeded);
  EXPECT_EQ(finish(durable("echo", "kept")).state, JobState::kSucceeded);
  // Any other I/O error: UNAVAILABLE.
  journal_->inject_commit_failures_for_testing(1, /*disk_full=*/false);
  Engine::SubmitResult r = submit(durable("echo", "io"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error->code, ErrorCode::kUnavailable);
  EXPECT_EQ(engine().snapshot().store_refused, 4u);
}

TEST_F(Durable, ACrashedRunsJobsReplayInAcceptanceOrderAndRunAgain) {
  // What a daemon killed at this point leaves: four accepted jobs, the
  // second one started (attempt 1), none ended.
  open_journal();
  std::vector<JobRecord> recs;
  for (int i = 0; i < 4; ++i) {
    JobRecord r;
    r.id = (std::uint64_t{1} << 40) + 10 + static_cast<std::uint64_t>(i);
    r.handler = "flaky";
    r.payload = "0";
    r.accepted_unix_ms = 1;
    recs.push_back(r);
  }
  recs[3].handler = "no_such_handler";
  journal_->append_accepted(recs, {});
  journal_->append_started(recs[1].id, 1);
  ASSERT_TRUE(journal_->flush().ok());
  journal_.reset();

  open_journal();
  ASSERT_EQ(journal_->recovered().size(), 4u);
  BenchOptions o;
  o.threads = 1;  // one worker: jobs end in the order they were queued
  o.journal = journal_.get();
  start(std::move(o));
  EXPECT_EQ(engine().recover(), 3u);
  EXPECT_EQ(engine().snapshot().replayed, 3u);
  std::vector<JobPtr> jobs;
  for (int i = 0; i < 3; ++i) {
    Expected<JobPtr> f = engine().find(recs[static_cast<std::size_t>(i)].id);
    ASSERT_TRUE(f.ok()) << f.error->message;
    jobs.push_back(f.value);
  }
  ASSERT_TRUE(eventually([&] {
    return std::all_of(jobs.begin(), jobs.end(), [](const auto& j) { return j->final(); });
  }));
  EXPECT_EQ(jobs[0]->output(), "ok on attempt 1");
  // Replayed under their first acceptance's time, not the restart's.
  EXPECT_EQ(jobs[0]->accepted_wall(), std::chrono::system_clock::time_point(
                                          std::chrono::milliseconds(recs[0].accepted_unix_ms)));
  // The interrupted one runs again as attempt 2 (D4: at-least-once, its
  // handler sees the higher number), with the interruption in its history.
  EXPECT_EQ(jobs[1]->output(), "ok on attempt 2");
  ASSERT_FALSE(jobs[1]->attempt_messages().empty());
  EXPECT_NE(jobs[1]->attempt_messages()[0].find("interrupted"), std::string::npos);
  EXPECT_EQ(jobs[2]->output(), "ok on attempt 1");
  ASSERT_TRUE(idle());
  // Acceptance order: the journal's ended times cannot tell, the worker can.
  std::optional<JobRecord> r0 = record(recs[0].id), r1 = record(recs[1].id),
                           r2 = record(recs[2].id), r3 = record(recs[3].id);
  ASSERT_TRUE(r0 && r1 && r2 && r3);
  EXPECT_EQ(r0->state, RecordState::kSucceeded);
  EXPECT_EQ(r1->state, RecordState::kSucceeded);
  EXPECT_EQ(r1->attempt, 2u);
  EXPECT_LE(r0->ended_unix_ms, r2->ended_unix_ms);
  // A handler no longer loaded: FAILED, saying so.
  EXPECT_EQ(r3->state, RecordState::kFailed);
  EXPECT_NE(r3->message.find("not loaded"), std::string::npos) << r3->message;
}

TEST_F(Durable, ResultsAndKeysSurviveARestartAndIdsDoNotRepeat) {
  start_durable();
  JobSpec first = durable("echo", "once");
  first.idempotency_key = "order-42";
  Recorder::Call c = finish(first);
  ASSERT_EQ(c.state, JobState::kSucceeded);
  const std::uint32_t inc1 = engine().incarnation();
  ASSERT_TRUE(idle());
  const int calls = ctl_.calls_now();
  restart();

  start_durable();
  EXPECT_NE(engine().incarnation(), inc1);  // (J9) the next one
  // Get/Wait of the old id: the ended record (D5).
  Expected<JobPtr> f = engine().find(c.id);
  ASSERT_TRUE(f.ok()) << f.error->message;
  EXPECT_EQ(f.value->state(), JobState::kSucceeded);
  EXPECT_EQ(f.value->output(), "once");
  // Its acceptance time is the journal's (before the restart), and it
  // neither waited nor ran in this process.
  std::optional<JobRecord> rec = record(c.id);
  ASSERT_TRUE(rec);
  EXPECT_EQ(f.value->accepted_wall(), std::chrono::system_clock::time_point(
                                          std::chrono::milliseconds(rec->accepted_unix_ms)));
  EXPECT_EQ(f.value->wait_time().count(), 0);
  EXPECT_EQ(f.value->run_time().count(), 0);
  // The client retries after the crash with the same key: the first
  // result, and the handler does not run again.
  JobSpec again = durable("echo", "once");
  again.idempotency_key = "order-42";
  Engine::SubmitResult r = submit(std::move(again));
  ASSERT_TRUE(r.ok()) << r.error->message;
  EXPECT_TRUE(r.value.deduplicated);
  EXPECT_FALSE(r.value.will_notify);  // ended: read it now
  EXPECT_EQ(r.value.job->id(), c.id);
  EXPECT_EQ(r.value.job->output(), "once");
  EXPECT_EQ(ctl_.calls_now(), calls);  // the handler did not run
  // The key with another payload is still a conflict.
  JobSpec other = durable("echo", "twice");
  other.idempotency_key = "order-42";
  Engine::SubmitResult conflict = submit(std::move(other));
  ASSERT_FALSE(conflict.ok());
  EXPECT_EQ(conflict.error->code, ErrorCode::kFailedPrecondition);
  // New ids carry the new incarnation: none repeats one from before.
  Recorder::Call n = finish(durable("echo", "new"));
  EXPECT_EQ(JobId::incarnation(n.id), engine().incarnation());
  EXPECT_NE(n.id, c.id);
}

TEST_F(Durable, ADelayedDurableJobSurvivesAShutdownAndRunsOnce) {
  ManualClock clock;
  start_durable(BenchOptions::test_limits(), &clock);
  JobSpec later = durable("flaky", "0");
  later.delay = 1h;
  Engine::SubmitResult r = submit(std::move(later));
  ASSERT_TRUE(r.ok()) << r.error->message;
  const std::uint64_t id = r.value.job->id();
  EXPECT_EQ(record(id)->state, RecordState::kScheduled);
  // A drain ends it here, CANCELLED, but not in the journal (D7).
  engine().begin_drain();
  EXPECT_EQ(r.value.job->state(), JobState::kCancelled);
  std::optional<JobRecord> rec = record(id);
  ASSERT_TRUE(rec.has_value());
  EXPECT_EQ(rec->state, RecordState::kScheduled);
  EXPECT_GT(rec->not_before_unix_ms, now_ms() + 50 * 60 * 1000);
  restart();

  ManualClock clock2;
  start_durable(BenchOptions::test_limits(), &clock2);
  EXPECT_EQ(engine().recover(), 1u);
  Expected<JobPtr> f = engine().find(id);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f.value->state(), JobState::kScheduled);  // still an hour to go
  EXPECT_EQ(engine().run_scheduled(), 0u);
  clock2.advance(61min);
  EXPECT_EQ(engine().run_scheduled(), 1u);
  ASSERT_TRUE(eventually([&] { return f.value->final(); }));
  EXPECT_EQ(f.value->output(), "ok on attempt 1");  // once
  ASSERT_TRUE(idle());
  EXPECT_EQ(record(id)->state, RecordState::kSucceeded);
}

TEST_F(Durable, RetriesAreRecordedWithEveryAttemptsMessage) {
  start_durable();
  JobSpec s = durable("flaky", "2");
  s.max_attempts = 3;
  Recorder::Call c = finish(std::move(s));
  ASSERT_EQ(c.state, JobState::kSucceeded) << c.message;
  ASSERT_TRUE(idle());
  std::optional<JobRecord> rec = record(c.id);
  ASSERT_TRUE(rec.has_value());
  EXPECT_EQ(rec->state, RecordState::kSucceeded);
  EXPECT_EQ(rec->attempt, 3u);
  ASSERT_GE(rec->attempt_messages.size(), 2u);
  EXPECT_EQ(rec->attempt_messages[0], "attempt 1: attempt 1 failed");
  EXPECT_EQ(rec->attempt_messages[1], "attempt 2: attempt 2 failed");
}

TEST_F(Durable, KeyedDurableItemsInARowShareOneCommit) {
  start_durable();
  auto batch_of = [](const std::vector<std::string>& keys) {
    std::vector<JobSpec> specs;
    for (const auto& k : keys) {
      JobSpec s = durable("echo", "p-" + k);
      s.idempotency_key = k;
      specs.push_back(std::move(s));
    }
    return specs;
  };
  ASSERT_TRUE(journal_->flush().ok());
  const std::uint64_t commits = journal_->stats().commits;
  std::vector<JobSpec> specs = batch_of({"k1", "k2", "k3", "k2", "k4"});
  // No DoneFn: k2's two items would both be reported to it (each item gets
  // its answer), which the fixture's once-per-job check forbids.
  std::vector<Engine::SubmitResult> out(specs.size());
  EXPECT_EQ(engine().submit_batch(specs, nullptr, nullptr, nullptr, out, false), 5u);
  for (const auto& r : out) ASSERT_TRUE(r.ok()) << r.error->message;
  // (A9) one transaction for the four accepts, taken before any start or end.
  EXPECT_EQ(journal_->stats().commits, commits + 1);
  EXPECT_TRUE(out[3].value.deduplicated);  // k2 again: the run's own job
  EXPECT_EQ(out[3].value.job, out[1].value.job);
  ASSERT_TRUE(idle());
  EXPECT_EQ(counts("echo").submitted, 4u);

  // A failed commit refuses the run and the repeat within it alike.
  journal_->inject_commit_failures_for_testing(1, /*disk_full=*/true);
  specs = batch_of({"k5", "k5", "k6"});
  out.assign(specs.size(), {});
  EXPECT_EQ(engine().submit_batch(specs, nullptr, nullptr, nullptr, out, false), 3u);
  for (const auto& r : out) {
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error->code, ErrorCode::kExhausted);
  }
  ASSERT_TRUE(idle());
  EXPECT_EQ(counts("echo").submitted, 4u);
  // Not remembered: the keys are free for a new try.
  specs = batch_of({"k5"});
  EXPECT_EQ(batch(specs, out), 1u);
  ASSERT_TRUE(out[0].ok());
  EXPECT_FALSE(out[0].value.deduplicated);
}

TEST_F(Durable, AnswerByResultRunsOnlyOnceCommittedAndAFailedCommitEndsTheJobsFailed) {
  // (D8) A Stream's submit: accepted at once, run from the commit's
  // callback; the handler never runs before the accept is on disk.
  start_durable();
  std::vector<JobSpec> specs;
  for (int i = 0; i < 3; ++i) specs.push_back(durable("echo", "r" + std::to_string(i)));
  std::vector<Engine::SubmitResult> out(specs.size());
  ASSERT_EQ(engine().submit_batch(specs, &Recorder::on_done, &done_, nullptr, out,
                                  /*stop_when_full=*/true, /*ack_by_result=*/true),
            3u);
  for (const auto& r : out) {
    ASSERT_TRUE(r.ok()) << r.error->message;
    EXPECT_TRUE(r.value.will_notify);
    const Recorder::Call c = done_.wait_job(r.value.job->id());
    EXPECT_EQ(c.state, JobState::kSucceeded);
    // Ended, so its accept was committed before it ran (J3: the end is
    // applied after the accept; the record exists).
    EXPECT_TRUE(record(c.id).has_value());
  }
  EXPECT_EQ(counts("echo").submitted, 3u);
  // A failed commit: the jobs end FAILED with the store's sentence, never
  // run, and give their slots back.
  const int calls = ctl_.calls_now();
  journal_->inject_commit_failures_for_testing(1, /*disk_full=*/true);
  specs.clear();
  specs.push_back(durable("echo", "lost"));
  out.assign(1, {});
  ASSERT_EQ(engine().submit_batch(specs, &Recorder::on_done, &done_, nullptr, out, true, true), 1u);
  ASSERT_TRUE(out[0].ok());
  const Recorder::Call lost = done_.wait_job(out[0].value.job->id());
  EXPECT_EQ(lost.state, JobState::kFailed);
  EXPECT_NE(lost.message.find("disk is full"), std::string::npos) << lost.message;
  ASSERT_TRUE(idle());
  EXPECT_EQ(ctl_.calls_now(), calls);
  EXPECT_EQ(engine().snapshot().store_refused, 1u);
  EXPECT_FALSE(journal_->flush().ok());              // the flush reports the failed accept (J5)
  EXPECT_FALSE(journal_->get(lost.id).has_value());  // never on disk
}

TEST_F(Durable, AnExecutesJobIsNotWaitedForAndAFailedCommitIsItsRefusal) {
  // (D8) Execute submits one job with ack_by_result: submit() returns before
  // the accept is committed (no gRPC thread held on the disk), and the job
  // runs only once it is. The writer is held in an earlier commit's
  // callback (J4), so the accept cannot commit until the test lets it go.
  start_durable();
  store::testing::WriterGate gate;
  gate.hold(*journal_, 1);  // id 1: below every id this engine hands out (its incarnation's bits)

  const int calls = ctl_.calls_now();
  auto submitted = std::async(std::launch::async, [this] {
    return engine().submit(durable("echo", "not waited"), &Recorder::on_done, &done_, nullptr,
                           /*ack_by_result=*/true);
  });
  // A bound on a call that must not block, not a delay: a submit that
  // waited for the commit would still be waiting when it expires.
  const bool returned = submitted.wait_for(30s) == std::future_status::ready;
  EXPECT_TRUE(returned) << "submit with ack_by_result waited for the held commit";
  EXPECT_EQ(ctl_.calls_now(), calls);  // not run: its accept is not on disk yet
  gate.open();
  const Engine::SubmitResult r = submitted.get();
  ASSERT_TRUE(r.ok()) << r.error->message;
  const Recorder::Call c = done_.wait_job(r.value.job->id());
  EXPECT_EQ(c.state, JobState::kSucceeded);
  EXPECT_TRUE(record(c.id).has_value());
  EXPECT_FALSE(Engine::store_refusal(*r.value.job).has_value());

  // A failed commit: FAILED, never run, and the refusal a waited-for submit
  // would have returned (D6): a full disk is kExhausted with a retry hint,
  // any other I/O error kUnavailable.
  for (const bool full : {true, false}) {
    const int before = ctl_.calls_now();
    // Everything queued is committed first (the last job's ended record was
    // appended before its result was delivered), so the injected failure
    // falls on this job's accept and on nothing else.
    ASSERT_TRUE(journal_->flush().ok());
    const std::uint64_t commits = journal_->stats().commits;
    journal_->inject_commit_failures_for_testing(1, /*disk_full=*/full);
    const Engine::SubmitResult lost =
        engine().submit(durable("echo", "lost"), &Recorder::on_done, &done_, nullptr, true);
    ASSERT_TRUE(lost.ok()) << lost.error->message;
    EXPECT_EQ(done_.wait_job(lost.value.job->id()).state, JobState::kFailed);
    const std::optional<Error> refusal = Engine::store_refusal(*lost.value.job);
    ASSERT_TRUE(refusal.has_value());
    EXPECT_EQ(refusal->code, full ? ErrorCode::kExhausted : ErrorCode::kUnavailable);
    EXPECT_EQ(refusal->retry_after, full ? 1000ms : 0ms);
    EXPECT_EQ(refusal->message, lost.value.job->message());
    EXPECT_NE(refusal->message.find("could not record the job"), std::string::npos)
        << refusal->message;
    EXPECT_EQ(ctl_.calls_now(), before);
    EXPECT_FALSE(journal_->flush().ok());  // the failed accept (J5)
    // A job never on disk gets no end written either: no transaction since.
    EXPECT_EQ(journal_->stats().commits, commits);
  }
  ASSERT_TRUE(idle());
}

TEST_F(Durable, ASubmitBatchIsAnsweredFromItsCommitAndItsThreadDoesNotWait) {
  // (D9) submit_batch with a Committed callback: the unkeyed durable run is
  // not waited for on the calling thread; the callback runs once it is on
  // disk (or its commit failed), never before, and out[] is complete then.
  start_durable();
  struct Acked {
    std::promise<void> called;
    std::atomic<int> calls{0};
    static void fn(void* arg) {
      auto* self = static_cast<Acked*>(arg);
      if (self->calls.fetch_add(1) == 0) self->called.set_value();
    }
  };
  store::testing::WriterGate gate;
  gate.hold(*journal_, 1);  // id 1: below every id this engine hands out (its incarnation's bits)

  const int calls = ctl_.calls_now();
  Acked acked;
  std::vector<JobSpec> specs;
  for (int i = 0; i < 3; ++i) specs.push_back(durable("echo", "acked " + std::to_string(i)));
  std::vector<Engine::SubmitResult> out(specs.size());
  auto submitted = std::async(std::launch::async, [&] {
    return engine().submit_batch(specs, nullptr, nullptr, nullptr, out, false, false,
                                 {&Acked::fn, &acked});
  });
  // A bound on a call that must not block, not a delay (as above).
  const bool returned = submitted.wait_for(30s) == std::future_status::ready;
  EXPECT_TRUE(returned) << "submit_batch with a Committed callback waited for the held commit";
  EXPECT_EQ(acked.calls.load(), 0) << "answered before the commit";
  EXPECT_EQ(ctl_.calls_now(), calls);  // not run: not on disk yet
  gate.open();
  EXPECT_EQ(submitted.get(), specs.size());
  acked.called.get_future().wait();
  EXPECT_EQ(acked.calls.load(), 1);
  for (const auto& r : out) {
    ASSERT_TRUE(r.ok()) << r.error->message;
    EXPECT_TRUE(record(r.value.job->id()).has_value());  // on disk when answered
    EXPECT_FALSE(Engine::store_refusal(*r.value.job).has_value());
  }

  // A failed commit: the callback still runs once, and each item's job
  // carries the refusal the caller answers with (D6).
  ASSERT_TRUE(journal_->flush().ok());
  journal_->inject_commit_failures_for_testing(1, /*disk_full=*/true);
  Acked lost;
  std::vector<JobSpec> more;
  more.push_back(durable("echo", "lost"));
  std::vector<Engine::SubmitResult> lost_out(1);
  engine().submit_batch(more, nullptr, nullptr, nullptr, lost_out, false, false,
                        {&Acked::fn, &lost});
  lost.called.get_future().wait();
  ASSERT_TRUE(lost_out[0].ok());
  const std::optional<Error> refusal = Engine::store_refusal(*lost_out[0].value.job);
  ASSERT_TRUE(refusal.has_value());
  EXPECT_EQ(refusal->code, ErrorCode::kExhausted);
  EXPECT_FALSE(journal_->flush().ok());                                  // the failed accept (J5)
  EXPECT_FALSE(journal_->get(lost_out[0].value.job->id()).has_value());  // never on disk
  EXPECT_FALSE(engine().find(lost_out[0].value.job->id()).ok());         // nor listed or found

  // Nothing to wait for (non-durable; keyed durable, committed under
  // keyed_mu_ as before: A5): the callback has run when submit_batch returns.
  for (const bool keyed : {false, true}) {
    Acked now;
    std::vector<JobSpec> one;
    one.push_back(keyed ? durable("echo", "keyed") : spec("echo", "plain"));
    if (keyed) one[0].idempotency_key = "d9-key";
    std::vector<Engine::SubmitResult> one_out(1);
    engine().submit_batch(one, nullptr, nullptr, nullptr, one_out, false, false,
                          {&Acked::fn, &now});
    EXPECT_EQ(now.calls.load(), 1) << (keyed ? "keyed" : "non-durable");
    ASSERT_TRUE(one_out[0].ok());
    if (keyed) {
      EXPECT_TRUE(record(one_out[0].value.job->id()).has_value());
    }
  }
  ASSERT_TRUE(idle());
}

TEST_F(Durable, AJobACallDroppedKeepsRunning) {
  start_durable();
  std::atomic<bool> group{false};
  std::vector<JobSpec> specs;
  specs.push_back(durable("block", "kept"));
  std::vector<Engine::SubmitResult> out;
  ASSERT_EQ(batch(specs, out, false, &group), 1u);
  ASSERT_TRUE(out[0].ok());
  group.store(true);  // the Stream was cancelled (D7): not the durable job
  EXPECT_FALSE(out[0].value.job->is_cancelled());
  ctl_.open_gate();
  EXPECT_EQ(done_.wait_job(out[0].value.job->id()).state, JobState::kSucceeded);
}

// ---- ListJobs and Retry (listing.cc, L1-L2) ----

class Listing : public EngineBench {
 protected:
  JobPtr retained(std::string handler, std::string payload,
                  std::vector<std::pair<std::string, std::string>> labels = {}) {
    JobSpec s = spec(std::move(handler), std::move(payload));
    s.retain = true;
    s.labels = std::move(labels);
    auto j = run(std::move(s));
    if (j != nullptr) done_.wait_job(j->id());
    return j;
  }
  static std::vector<std::uint64_t> ids(const std::vector<JobPtr>& js) {
    std::vector<std::uint64_t> out;
    for (const auto& j : js) out.push_back(j->id());
    return out;
  }
};

TEST_F(Listing, FiltersByStateHandlerAndLabelAPageAtATime) {
  start();
  auto ok1 = retained("echo", "a", {{"team", "red"}});
  auto bad1 = retained("fail", "5:broken", {{"team", "red"}});
  auto ok2 = retained("echo", "b", {{"team", "blue"}});
  auto bad2 = retained("fail", "5:broken again", {{"team", "blue"}});
  (void)finish(spec("echo", "not retained"));  // Execute-like: never listed
  ASSERT_TRUE(idle());
  bool more = true;
  EXPECT_EQ(ids(engine().list({}, &more)),
            (std::vector<std::uint64_t>{ok1->id(), bad1->id(), ok2->id(), bad2->id()}));
  EXPECT_FALSE(more);
  ListFilter dead;
  dead.states = {JobState::kFailed, JobState::kTimedOut};
  EXPECT_EQ(ids(engine().list(dead, &more)), (std::vector<std::uint64_t>{bad1->id(), bad2->id()}));
  ListFilter echo;
  echo.handler = "echo";
  EXPECT_EQ(ids(engine().list(echo, &more)), (std::vector<std::uint64_t>{ok1->id(), ok2->id()}));
  ListFilter blue;
  blue.label_key = "team";
  blue.label_value = "blue";
  EXPECT_EQ(ids(engine().list(blue, &more)), (std::vector<std::uint64_t>{ok2->id(), bad2->id()}));
  blue.label_value = "";  // any value
  EXPECT_EQ(engine().list(blue, &more).size(), 4u);
  // Pages of 3: the token is the last id; nothing twice, nothing missed.
  ListFilter page;
  page.limit = 3;
  auto first = engine().list(page, &more);
  EXPECT_EQ(first.size(), 3u);
  EXPECT_TRUE(more);
  page.after_id = first.back()->id();
  auto second = engine().list(page, &more);
  EXPECT_EQ(ids(second), (std::vector<std::uint64_t>{bad2->id()}));
  EXPECT_FALSE(more);
}

TEST_F(Listing, RetryRunsAnEndedJobAgainAsANewJobAndRefusesTheOthers) {
  start();
  auto bad = retained("fail", "5:broken", {{"team", "red"}});
  ASSERT_EQ(bad->state(), JobState::kFailed);
  Engine::SubmitResult r = engine().retry(bad->id(), &Recorder::on_done, &done_);
  ASSERT_TRUE(r.ok()) << r.error->message;
  EXPECT_NE(r.value.job->id(), bad->id());
  Recorder::Call c = done_.wait_job(r.value.job->id());
  EXPECT_EQ(c.state, JobState::kFailed);  // the same input fails the same way
  EXPECT_EQ(c.message, "broken");
  EXPECT_EQ(r.value.job->labels(), bad->labels());
  EXPECT_EQ(r.value.job->payload(), "5:broken");  // kept: it did not succeed
  // A succeeded job (its payload released) and a running one: refused.
  auto ok = retained("echo", "fine");
  Engine::SubmitResult again = engine().retry(ok->id(), nullptr, nullptr);
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.error->code, ErrorCode::kFailedPrecondition);
  EXPECT_NE(again.error->message.find("submit a new job"), std::string::npos);
  JobSpec b = spec("block", "held");
  b.retain = true;
  auto running = run(std::move(b));
  ASSERT_TRUE(eventually([&] { return running->state() == JobState::kRunning; }));
  again = engine().retry(running->id(), nullptr, nullptr);
  ASSERT_FALSE(again.ok());
  EXPECT_NE(again.error->message.find("wait for it to end"), std::string::npos);
  ctl_.open_gate();
  done_.wait_job(running->id());
  // A cancelled one runs again.
  JobSpec later = spec("echo", "later");
  later.retain = true;
  later.delay = std::chrono::hours(1);
  auto scheduled = run(std::move(later));
  scheduled->cancel();
  done_.wait_job(scheduled->id());
  Engine::SubmitResult re = engine().retry(scheduled->id(), &Recorder::on_done, &done_);
  ASSERT_TRUE(re.ok()) << re.error->message;
  EXPECT_EQ(done_.wait_job(re.value.job->id()).output, "later");  // no delay the second time
  EXPECT_EQ(engine().retry(12345, nullptr, nullptr).error->code, ErrorCode::kNotFound);
}

TEST_F(Durable, DeadLettersOfAnEarlierRunAreListedAndRetried) {
  start_durable();
  Recorder::Call bad = finish(durable("fail", "5:disk on fire"));
  ASSERT_EQ(bad.state, JobState::kFailed);
  Recorder::Call ok = finish(durable("echo", "fine"));
  ASSERT_TRUE(idle());
  restart();

  start_durable();
  ListFilter dead;
  dead.states = {JobState::kFailed};
  bool more = true;
  auto listed = engine().list(dead, &more);
  ASSERT_EQ(listed.size(), 1u);  // from the journal: not in this run's memory
  EXPECT_EQ(listed[0]->id(), bad.id);
  EXPECT_EQ(listed[0]->message(), "disk on fire");
  EXPECT_FALSE(more);
  EXPECT_EQ(engine().list({}, &more).size(), 2u);
  Engine::SubmitResult r = engine().retry(bad.id, &Recorder::on_done, &done_);
  ASSERT_TRUE(r.ok()) << r.error->message;
  EXPECT_TRUE(r.value.job->durable_requested());  // durable like the first
  EXPECT_EQ(done_.wait_job(r.value.job->id()).message, "disk on fire");
  EXPECT_EQ(engine().retry(ok.id, nullptr, nullptr).error->code, ErrorCode::kFailedPrecondition);
}

}  // namespace
}  // namespace tpool::engine::testing
