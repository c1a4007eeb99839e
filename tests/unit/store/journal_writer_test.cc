// The writer (journal.h J2-J5): group commit, callbacks after COMMIT and in
// order, the order of writes inside one transaction, a failed transaction
// and the recovery from it, a write refused alone, flush()'s report.
//
// Which writes share a transaction is set up, not hoped for: a WriterGate
// holds the writer inside a callback while the writes queue up.
#include <atomic>
#include <future>
#include <thread>

#include "store_test_support.h"

namespace tpool::store::testing {
namespace {

// Yields until the journal has made more than `after` commits, or 30 s
// have passed (a test that waits that long fails on the count it gets).
std::uint64_t commits_after(const Journal& j, std::uint64_t after) {
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (j.stats().commits == after && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::yield();
  }
  return j.stats().commits;
}

// A journal with this linger whose job 1 is accepted and committed: its
// writer has just ended a group (W12: it settles).
std::unique_ptr<Journal> open_after_one_commit(const TempDir& dir,
                                               std::chrono::microseconds linger) {
  auto o = options_for(dir.file("jobs.db"));
  o.linger = linger;
  auto j = open_ok(o);
  if (!j) return j;
  j->append_accepted({make_job(1)}, {});
  EXPECT_TRUE(j->flush().ok());
  return j;
}

// (J2) 5000 accepts from 4 threads, queued while the writer is held: they go
// in ceil(5000 / max_batch) transactions, not 5000, and none is lost.
TEST(JournalWriter, GroupCommitTakesTheQueueUpToMaxBatch) {
  TempDir dir;
  auto o = options_for(dir.file("jobs.db"));
  o.max_batch = 1024;
  auto j = open_ok(o);
  ASSERT_TRUE(j);
  WriterGate gate;
  gate.hold(*j, 1);  // its own transaction: commits == 1
  std::atomic<int> ok{0}, failed{0};
  constexpr std::uint64_t kThreads = 4, kEach = 1250;
  std::vector<std::thread> ts;
  for (std::uint64_t t = 0; t < kThreads; ++t) {
    ts.emplace_back([&, t] {
      for (std::uint64_t i = 0; i < kEach; ++i) {
        JobRecord r = make_job(2 + t * kEach + i);
        j->append_accepted({std::move(r)}, [&](const Status& s) { (s.ok() ? ok : failed)++; });
      }
    });
  }
  for (auto& t : ts) t.join();
  gate.open();
  ASSERT_TRUE(j->flush().ok());
  const JournalStats s = j->stats();
  EXPECT_EQ(ok.load(), 5000);
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(s.records_committed, 5001u);
  EXPECT_LT(s.commits, 5000u);
  EXPECT_EQ(s.commits, 1u + 5u);  // 1024 x 4 + 904
  EXPECT_EQ(s.pending, 5001u);
  EXPECT_EQ(j->list(Filter().limit(10000)).size(), 5001u);
}

// (W6) Writes nobody waits for linger until a waited-for one comes and share
// its commit; a flush() or the journal's close ends the linger at once. The
// linger is a minute here: a test that passes cannot have waited for it.
TEST(JournalWriter, UnwaitedWritesRideInTheNextWaitedForCommit) {
  TempDir dir;
  auto o = options_for(dir.file("jobs.db"));
  o.linger = std::chrono::minutes(1);
  auto j = open_ok(o);
  ASSERT_TRUE(j);
  std::atomic<int> ok{0};
  j->append_accepted({make_job(1)}, [&](const Status& s) { ok += s.ok() ? 1 : 0; });
  ASSERT_TRUE(j->flush().ok());
  const std::uint64_t before = j->stats().commits;
  // A start and an end (no callback), then an accept someone waits for.
  j->append_started(1, 1);
  j->append_ended(1, RecordState::kSucceeded, "out", "", 5);
  std::promise<Status> committed;
  j->append_accepted({make_job(2)}, [&](const Status& s) { committed.set_value(s); });
  ASSERT_TRUE(committed.get_future().get().ok());
  EXPECT_EQ(j->stats().commits, before + 1);  // one transaction for the three
  EXPECT_EQ(j->get(1)->state, RecordState::kSucceeded);
  // Alone, an unwaited write is committed by a flush() without the linger.
  j->append_started(2, 1);
  ASSERT_TRUE(j->flush().ok());
  EXPECT_EQ(j->get(2)->state, RecordState::kRunning);
  EXPECT_EQ(j->stats().commits, before + 2);
  // And by the close: the destructor does not wait a minute either.
  j->append_ended(2, RecordState::kFailed, "", "no", 6);
  j.reset();
  auto again = open_ok(o);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->get(2)->state, RecordState::kFailed);
}

// (W12, W9) Right after a commit the writer settles: a start and an end
// nobody waits for queue without waking it (against the old idle wait,
// where the start woke it: a futex call and a context switch per job when
// one job runs at a time), and still ride in the next waited-for commit.
// After flush() returns the writer is in that wait (it set it up under the
// lock flush() reacquires), so the count below is deterministic.
TEST(JournalWriter, AWriteNobodyWaitsForRightAfterACommitDoesNotWakeTheWriter) {
  TempDir dir;
  auto j = open_after_one_commit(dir, std::chrono::minutes(1));
  ASSERT_TRUE(j);
  const std::uint64_t commits = j->stats().commits;
  const std::uint64_t wakes = j->writer_wakes_for_testing();
  j->append_started(1, 1);
  j->append_ended(1, RecordState::kSucceeded, "out", "", 5);
  EXPECT_EQ(j->writer_wakes_for_testing(), wakes)
      << "a start or end appended while the writer settles after a commit woke it (W12)";
  std::promise<Status> committed;
  j->append_accepted({make_job(2)}, [&](const Status& s) { committed.set_value(s); });
  EXPECT_EQ(j->writer_wakes_for_testing(), wakes + 1) << "a waited-for write wakes it (W9)";
  ASSERT_TRUE(committed.get_future().get().ok());
  EXPECT_EQ(j->stats().commits, commits + 1);  // the start, the end and the accept: one
  EXPECT_EQ(j->get(1)->state, RecordState::kSucceeded);
}

// (W12, W6) A group begun while the writer settles lingers only to the end
// of that wait: a lone start, appended after a commit and followed by
// nothing, is committed by the writer on its own (not lost in an idle wait
// it was never woken from) within the linger. The test gives up after 30 s;
// the linger is 50 ms.
TEST(JournalWriter, AWriteQueuedWhileTheWriterSettlesIsCommittedWithinTheLinger) {
  TempDir dir;
  auto j = open_after_one_commit(dir, std::chrono::milliseconds(50));
  ASSERT_TRUE(j);
  const std::uint64_t commits = j->stats().commits;
  j->append_started(1, 1);
  ASSERT_EQ(commits_after(*j, commits), commits + 1)
      << "a start queued during the settle was never committed";
  EXPECT_EQ(j->get(1)->state, RecordState::kRunning);
}

// (J2) An accept of more jobs than max_batch is one write: it is never split
// across transactions.
TEST(JournalWriter, AnAcceptLargerThanMaxBatchGoesWhole) {
  TempDir dir;
  auto o = options_for(dir.file("jobs.db"));
  o.max_batch = 4;
  auto j = open_ok(o);
  ASSERT_TRUE(j);
  WriterGate gate;
  gate.hold(*j, 1);
  std::vector<JobRecord> ten;
  for (std::uint64_t id = 10; id < 20; ++id) ten.push_back(make_job(id));
  j->append_accepted({make_job(2)}, {});
  j->append_accepted(std::move(ten), {});
  j->append_accepted({make_job(3)}, {});
  gate.open();
  ASSERT_TRUE(j->flush().ok());
  // [hold], [2], [10..19], [3]: the big one alone, the others not with it.
  EXPECT_EQ(j->stats().commits, 4u);
  EXPECT_EQ(j->stats().records_committed, 13u);
}

// (J1, J4) When a callback runs, its write is committed: another connection
// to the file sees it, and so do the journal's own reads (J8).
TEST(JournalWriter, CallbacksRunAfterCommitInAppendOrder) {
  TempDir dir;
  const auto o = options_for(dir.file("jobs.db"));
  auto j = open_ok(o);
  ASSERT_TRUE(j);
  std::mutex mu;
  std::vector<std::uint64_t> order;
  std::vector<std::uint64_t> seen_by_other_connection;
  for (std::uint64_t id = 1; id <= 20; ++id) {
    j->append_accepted({make_job(id)}, [&, id](const Status& s) {
      EXPECT_TRUE(s.ok()) << s.to_string();
      RawDb other(o.path, SQLITE_OPEN_READONLY);
      const bool there =
          other.query_int("SELECT count(*) FROM jobs WHERE id = " + std::to_string(id)) == 1 &&
          j->get(id).has_value();
      std::lock_guard lk(mu);
      order.push_back(id);
      if (there) seen_by_other_connection.push_back(id);
    });
  }
  ASSERT_TRUE(j->flush().ok());
  std::vector<std::uint64_t> want;
  for (std::uint64_t id = 1; id <= 20; ++id) want.push_back(id);
  EXPECT_EQ(order, want);
  EXPECT_EQ(seen_by_other_connection, want);
}

// (W6, W9, W10) max_batch records nobody waits for end the linger too: the
// append that fills the group wakes the writer. First 32 starts are applied
// while the writer lingers (W10; seen as the write lock it holds), then the
// writer goes back to its linger (seen as its thread asleep) before the last
// 8 come; the linger is a minute and the test gives up after 30 s, so it
// fails when the writer sleeps through the append that fills the group.
TEST(JournalWriter, AFullBatchEndsTheLingerWithoutAWaitedWrite) {
  TempDir dir;
  auto o = options_for(dir.file("jobs.db"));
  o.linger = std::chrono::minutes(1);
  o.max_batch = 40;
  auto j = open_ok(o);
  ASSERT_TRUE(j);
  std::vector<JobRecord> jobs;
  for (std::uint64_t id = 1; id <= 40; ++id) jobs.push_back(make_job(id));
  j->append_accepted(std::move(jobs), {});
  ASSERT_TRUE(j->flush().ok());
  const std::uint64_t before = j->stats().commits;
  WriteLockProbe probe(o.path);
  for (std::uint64_t id = 1; id <= 32; ++id) j->append_started(id, 1);
  ASSERT_TRUE(probe.wait_until_locked());
  ASSERT_TRUE(wait_until_thread_sleeps("tpool-journal"));
  for (std::uint64_t id = 33; id <= 40; ++id) j->append_started(id, 1);
  EXPECT_EQ(commits_after(*j, before), before + 1);
  EXPECT_EQ(j->get(40)->state, RecordState::kRunning);
}

// (W10) Records nobody waits for are applied while the writer lingers (its
// transaction is open: another connection cannot take the write lock), and
// commit with the waited-for write that ends the linger, in one transaction:
// a failure of it fails them all.
TEST(JournalWriter, LingeringRecordsAreAppliedEarlyAndCommitWithTheNextAccept) {
  TempDir dir;
  auto o = options_for(dir.file("jobs.db"));
  o.linger = std::chrono::minutes(1);
  auto j = open_ok(o);
  ASSERT_TRUE(j);
  std::vector<JobRecord> jobs;
  for (std::uint64_t id = 1; id <= 80; ++id) jobs.push_back(make_job(id));
  j->append_accepted(std::move(jobs), {});
  ASSERT_TRUE(j->flush().ok());
  const std::uint64_t before = j->stats().commits;

  WriteLockProbe probe(o.path);

  // 40 starts (more than the 32 that start applying), nobody waits.
  for (std::uint64_t id = 1; id <= 40; ++id) j->append_started(id, 1);
  EXPECT_TRUE(probe.wait_until_locked()) << "the lingering starts were not applied early";
  EXPECT_EQ(j->stats().commits, before);  // applied, not committed
  EXPECT_EQ(j->get(1)->state, RecordState::kQueued);
  std::promise<Status> committed;
  j->append_accepted({make_job(100)}, [&](const Status& st) { committed.set_value(st); });
  ASSERT_TRUE(committed.get_future().get().ok());
  EXPECT_EQ(j->stats().commits, before + 1);  // the 40 starts and the accept: one commit
  EXPECT_EQ(j->get(1)->state, RecordState::kRunning);
  EXPECT_EQ(j->get(40)->state, RecordState::kRunning);
  EXPECT_EQ(j->stats().records_committed, 80u + 40u + 1u);

  // The same, failing: the early-applied records go with the group.
  j->inject_commit_failures_for_testing(1);
  for (std::uint64_t id = 41; id <= 80; ++id) j->append_started(id, 1);
  EXPECT_TRUE(probe.wait_until_locked());
  std::promise<Status> failed;
  j->append_accepted({make_job(101)}, [&](const Status& st) { failed.set_value(st); });
  EXPECT_EQ(failed.get_future().get().code(), StatusCode::kIoError);
  EXPECT_EQ(j->get(41)->state, RecordState::kQueued);
  EXPECT_EQ(j->get(80)->state, RecordState::kQueued);
  EXPECT_FALSE(j->get(101));
  EXPECT_FALSE(probe.locked());
}

// (J3) An accept, its start and its end queued together are applied in that
// order in one transaction: the end finds the job and the start before it.
TEST(JournalWriter, WritesOfOneJobApplyInAppendOrderInOneTransaction) {
  TempDir dir;
  auto j = open_ok(options_for(dir.file("jobs.db")));
  ASSERT_TRUE(j);
  WriterGate gate;
  gate.hold(*j, 1);
  Statuses st(2);
  j->append_accepted({make_job(7)}, st.slot(0));
  j->append_started(7, 1);
  j->append_ended(7, RecordState::kSucceeded, "result", "done", 1234, st.slot(1));
  EXPECT_EQ(j->stats().commits, 1u);  // the gate's
  gate.open();
  ASSERT_TRUE(j->flush().ok());
  EXPECT_EQ(j->stats().commits, 2u);  // all three in one
  EXPECT_TRUE(st.at(0).ok());
  EXPECT_TRUE(st.at(1).ok()) << st.at(1).to_string();
  auto r = j->get(7);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->state, RecordState::kSucceeded);
  EXPECT_EQ(r->attempt, 1u);
  EXPECT_EQ(r->output, "result");
  EXPECT_EQ(r->attempt_messages, std::vector<std::string>{"done"});
  EXPECT_EQ(r->ended_unix_ms, 1234);
  EXPECT_EQ(j->stats().pending, 1u);  // the gate's job
}

// (W7) A start folds into its end only with nothing of its job between them;
// (W8) the one-UPDATE path for queued and running jobs, the general path for
// a scheduled one, and an end with no message adds no history row.
TEST(JournalWriter, StartsFoldIntoTheirEndsAndScheduledJobsTakeTheGeneralPath) {
  TempDir dir;
  const auto o = options_for(dir.file("jobs.db"));
  auto j = open_ok(o);
  ASSERT_TRUE(j);
  Statuses st(1);
  j->append_accepted({make_job(7), make_job(8, RecordState::kScheduled), make_job(9),
                      make_job(10, RecordState::kScheduled)},
                     st.slot(0));
  ASSERT_TRUE(j->flush().ok());
  ASSERT_TRUE(st.at(0).ok());
  EXPECT_EQ(j->stats().pending, 4u);
  EXPECT_EQ(j->stats().scheduled, 2u);

  WriterGate gate;
  gate.hold(*j, 11);
  // 7: start, retry, start, end: only the second start folds.
  j->append_started(7, 1);
  j->append_retry(7, 0, "boom");
  j->append_started(7, 2);
  j->append_ended(7, RecordState::kSucceeded, "out", "", 1234);
  // 8: scheduled, cancelled before it ran.
  j->append_ended(8, RecordState::kCancelled, "", "cancelled before it ran", 1235);
  // 9: started, still running.
  j->append_started(9, 3);
  // 10: scheduled, then due and started, then ended, in one group.
  j->append_started(10, 1);
  j->append_ended(10, RecordState::kFailed, "", "it broke", 1236);
  gate.open();
  ASSERT_TRUE(j->flush().ok());

  auto r7 = j->get(7);
  ASSERT_TRUE(r7);
  EXPECT_EQ(r7->state, RecordState::kSucceeded);
  EXPECT_EQ(r7->attempt, 2u);
  EXPECT_EQ(r7->output, "out");
  EXPECT_EQ(r7->attempt_messages, std::vector<std::string>{"boom"});
  auto r8 = j->get(8);
  ASSERT_TRUE(r8);
  EXPECT_EQ(r8->state, RecordState::kCancelled);
  EXPECT_EQ(r8->attempt, 0u);
  EXPECT_EQ(r8->attempt_messages, std::vector<std::string>{"cancelled before it ran"});
  auto r9 = j->get(9);
  ASSERT_TRUE(r9);
  EXPECT_EQ(r9->state, RecordState::kRunning);
  EXPECT_EQ(r9->attempt, 3u);
  auto r10 = j->get(10);
  ASSERT_TRUE(r10);
  EXPECT_EQ(r10->state, RecordState::kFailed);
  EXPECT_EQ(r10->attempt, 1u);
  EXPECT_EQ(r10->attempt_messages, std::vector<std::string>{"it broke"});
  // Pending: 9 and the gate's job; scheduled: none left.
  EXPECT_EQ(j->stats().pending, 2u);
  EXPECT_EQ(j->stats().scheduled, 0u);
  j.reset();
  RawDb raw(o.path);
  EXPECT_EQ(raw.query_int("SELECT count(*) FROM attempt_messages WHERE job_id = 7"), 1);
}

// (W13) Ends in a row go into `ends` in one INSERT (sixteen at most); when one
// of them is not a live job's first end (an unknown job, one that had ended,
// the same job twice, a scheduled job), SQLite refuses the whole statement
// and each end is applied alone: the outcome is what ends one at a time give,
// the refused ones named, the figures right.
TEST(JournalWriter, EndsInARowAreRecordedTogetherOrSortedOutOneByOne) {
  TempDir dir;
  const auto o = options_for(dir.file("jobs.db"));
  auto j = open_ok(o);
  ASSERT_TRUE(j);
  std::vector<JobRecord> jobs;
  for (std::uint64_t id = 1; id <= 39; ++id) jobs.push_back(make_job(id));
  jobs.push_back(make_job(40, RecordState::kScheduled));
  j->append_accepted(std::move(jobs), {});
  j->append_ended(30, RecordState::kFailed, "", "ended first", 900);
  ASSERT_TRUE(j->flush().ok());

  WriterGate gate;
  gate.hold(*j, 100);
  // Twenty ends of live jobs, each after its start (folded, W7): 16 + 4.
  for (std::uint64_t id = 1; id <= 20; ++id) {
    j->append_started(id, 1);
    j->append_ended(id, RecordState::kSucceeded, "out " + std::to_string(id),
                    id % 2 == 0 ? "even " + std::to_string(id) : "", 1000 + id);
  }
  // Runs that SQLite refuses, each end then applied alone: one for each
  // reason, split by a start of a job that is still running (24, 25, 26).
  Statuses st(9);
  j->append_ended(21, RecordState::kSucceeded, "o21", "", 2001, st.slot(0));
  j->append_ended(999, RecordState::kSucceeded, "", "", 2002, st.slot(1));  // unknown
  j->append_started(24, 1);
  j->append_ended(30, RecordState::kSucceeded, "", "", 2003, st.slot(2));  // had ended
  j->append_ended(22, RecordState::kCancelled, "", "m22", 2004, st.slot(3));
  j->append_started(25, 1);
  j->append_ended(23, RecordState::kTimedOut, "o23", "", 2005, st.slot(4));
  j->append_ended(23, RecordState::kSucceeded, "", "", 2006, st.slot(5));  // twice
  j->append_started(26, 1);
  j->append_ended(40, RecordState::kCancelled, "", "m40", 2007, st.slot(6));  // scheduled
  j->append_ended(27, RecordState::kSucceeded, "", "", 2008, st.slot(7));
  j->append_ended(28, RecordState::kSucceeded, "", "", 2009, st.slot(8));
  gate.open();
  EXPECT_EQ(j->flush().code(), StatusCode::kInvalidArgument);

  for (std::uint64_t id = 1; id <= 20; ++id) {
    auto r = j->get(id);
    ASSERT_TRUE(r) << id;
    EXPECT_EQ(r->state, RecordState::kSucceeded) << id;
    EXPECT_EQ(r->attempt, 1u) << id;
    EXPECT_EQ(r->output, "out " + std::to_string(id));
    EXPECT_EQ(r->ended_unix_ms, static_cast<std::int64_t>(1000 + id));
    EXPECT_EQ(r->attempt_messages,
              id % 2 == 0 ? std::vector<std::string>{r->message} : std::vector<std::string>{})
        << id;
    EXPECT_EQ(r->message, id % 2 == 0 ? "even " + std::to_string(id) : "") << id;
  }
  for (const std::size_t ok : {0, 3, 4, 6, 7, 8}) {
    EXPECT_TRUE(st.at(ok).ok()) << ok << ": " << st.at(ok).to_string();
  }
  EXPECT_NE(st.at(1).message().find("no such job"), std::string::npos) << st.at(1).to_string();
  EXPECT_NE(st.at(2).message().find("already ended (failed)"), std::string::npos)
      << st.at(2).to_string();
  EXPECT_NE(st.at(5).message().find("already ended (timed out)"), std::string::npos)
      << st.at(5).to_string();
  EXPECT_EQ(j->get(21)->output, "o21");
  EXPECT_EQ(j->get(22)->state, RecordState::kCancelled);
  EXPECT_EQ(j->get(22)->attempt_messages, std::vector<std::string>{"m22"});
  EXPECT_EQ(j->get(23)->state, RecordState::kTimedOut);
  EXPECT_EQ(j->get(23)->output, "o23");
  EXPECT_EQ(j->get(24)->state, RecordState::kRunning);
  EXPECT_EQ(j->get(30)->attempt_messages, std::vector<std::string>{"ended first"});
  EXPECT_EQ(j->get(40)->state, RecordState::kCancelled);
  EXPECT_EQ(j->get(40)->attempt_messages, std::vector<std::string>{"m40"});
  EXPECT_EQ(j->get(28)->state, RecordState::kSucceeded);
  EXPECT_FALSE(j->get(999));
  // A start after the end is dropped (W8: the end wins), even though the
  // job's own row still says queued.
  j->append_started(21, 5);
  ASSERT_TRUE(j->flush().ok());
  EXPECT_EQ(j->get(21)->state, RecordState::kSucceeded);
  EXPECT_EQ(j->get(21)->attempt, 0u);
  // 40 accepted, 27 ended (30 before; 1-23, 27, 28 and 40 now), and the
  // gate's job.
  EXPECT_EQ(j->stats().pending, 14u);
  EXPECT_EQ(j->stats().scheduled, 0u);
  j.reset();
  RawDb raw(o.path, SQLITE_OPEN_READONLY);
  EXPECT_EQ(raw.query_int("SELECT count(*) FROM ends"), 27);
  EXPECT_EQ(raw.query_int("SELECT count(*) FROM ends WHERE id NOT IN (SELECT id FROM jobs)"), 0);
}

// (J5) A transaction that fails is rolled back whole, every write in it gets
// the error (naming the file), healthy() is false until a commit succeeds,
// and the journal keeps working.
TEST(JournalWriter, AFailedCommitFailsItsWholeGroupAndTheNextOneRecovers) {
  TempDir dir;
  const auto o = options_for(dir.file("jobs.db"));
  auto j = open_ok(o);
  ASSERT_TRUE(j);
  {
    WriterGate gate;
    gate.hold(*j, 1);
    Statuses st(2);
    std::atomic<int> healthy_in_callback{-1};
    j->append_accepted({make_job(2)}, [&](const Status& s) {
      healthy_in_callback = j->healthy() ? 1 : 0;
      st.slot(0)(s);
    });
    j->append_ended(1, RecordState::kSucceeded, "o", "m", 5);
    j->append_accepted({make_job(3)}, st.slot(1));
    j->inject_commit_failures_for_testing(1);
    gate.open();
    const Status f = j->flush();
    EXPECT_EQ(f.code(), StatusCode::kIoError) << f.to_string();
    for (std::size_t i = 0; i < 2; ++i) {
      EXPECT_EQ(st.at(i).code(), StatusCode::kIoError);
      EXPECT_NE(st.at(i).message().find(o.path), std::string::npos) << st.at(i).message();
      EXPECT_NE(st.at(i).message().find("injected"), std::string::npos) << st.at(i).message();
    }
    EXPECT_EQ(healthy_in_callback.load(), 0);
  }
  EXPECT_FALSE(j->healthy());
  EXPECT_EQ(j->stats().commit_errors, 1u);
  EXPECT_EQ(j->stats().commits, 1u);
  // Rolled back: nothing of the group is there.
  EXPECT_FALSE(j->get(2));
  EXPECT_FALSE(j->get(3));
  EXPECT_EQ(j->get(1)->state, RecordState::kQueued);
  EXPECT_EQ(j->stats().pending, 1u);

  Statuses st(1);
  j->append_accepted({make_job(4)}, st.slot(0));
  ASSERT_TRUE(j->flush().ok());
  EXPECT_TRUE(st.at(0).ok());
  EXPECT_TRUE(j->healthy());
  EXPECT_TRUE(j->get(4));
  EXPECT_TRUE(j->flush().ok());  // the failure was reported once
  // What was committed before and after survives a reopen; the rest does not.
  j.reset();
  j = open_ok(o);
  ASSERT_TRUE(j);
  EXPECT_EQ(ids_of(j->recovered()), (std::vector<std::uint64_t>{1, 4}));
}

TEST(JournalWriter, ADiskFullCommitSaysTheDiskIsFull) {
  TempDir dir;
  auto j = open_ok(options_for(dir.file("jobs.db")));
  ASSERT_TRUE(j);
  j->inject_commit_failures_for_testing(1, /*disk_full=*/true);
  Statuses st(1);
  j->append_accepted({make_job(1)}, st.slot(0));
  const Status f = j->flush();
  EXPECT_EQ(f.code(), StatusCode::kIoError);
  EXPECT_NE(f.message().find("the disk is full"), std::string::npos) << f.message();
  EXPECT_EQ(st.at(0).message(), f.message());
  EXPECT_FALSE(j->healthy());
}

// A repeated id or idempotency key (a caller's bug) fails that accept alone,
// all of its jobs, and the rest of the transaction commits.
TEST(JournalWriter, ARefusedAcceptIsUndoneAloneAndTheGroupCommits) {
  TempDir dir;
  auto j = open_ok(options_for(dir.file("jobs.db")));
  ASSERT_TRUE(j);
  WriterGate gate;
  gate.hold(*j, 1);
  Statuses st(4);
  JobRecord same_key = make_job(8);
  same_key.idempotency_key = "key-1";
  j->append_accepted({make_job(5)}, st.slot(0));
  j->append_accepted({make_job(6), make_job(5)}, st.slot(1));  // 5 again: 6 goes too
  j->append_accepted({same_key}, st.slot(2));
  j->append_accepted({make_job(7)}, st.slot(3));
  gate.open();
  EXPECT_EQ(j->flush().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(st.at(0).ok());
  EXPECT_EQ(st.at(1).code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.at(1).message().find("job 5"), std::string::npos) << st.at(1).message();
  EXPECT_EQ(st.at(2).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(st.at(3).ok());
  EXPECT_EQ(ids_of(j->list({})), (std::vector<std::uint64_t>{1, 5, 7}));
  EXPECT_EQ(diff(make_job(5), *j->get(5)), "");
  const JournalStats s = j->stats();
  EXPECT_EQ(s.commits, 2u);
  EXPECT_EQ(s.records_committed, 3u);
  EXPECT_EQ(s.pending, 3u);
  EXPECT_TRUE(j->healthy());
}

// (W11) An accept of 40 jobs goes in two multi-row INSERTs of 16 and 8 rows
// one at a time: every field of every job round-trips, and recovery follows
// the accept's order, which is not its ids' (J7). A repeated key in the
// middle of a chunk refuses that accept alone and names the job, as a
// single-row accept would.
TEST(JournalWriter, ALargeAcceptIsRecordedWholeInOrderAndAChunksRefusalNamesItsJob) {
  TempDir dir;
  const auto o = options_for(dir.file("jobs.db"));
  std::vector<JobRecord> want;
  {
    auto j = open_ok(o);
    ASSERT_TRUE(j);
    for (std::uint64_t i = 0; i < 40; ++i) want.push_back(make_job(i % 2 == 0 ? 100 + i : 200 + i));
    std::vector<JobRecord> bad;
    for (std::uint64_t i = 0; i < 40; ++i) bad.push_back(make_job(300 + i));
    bad[20].idempotency_key = want[3].idempotency_key;  // the second chunk's fifth row
    Statuses st(3);
    j->append_accepted(want, st.slot(0));
    j->append_accepted(bad, st.slot(1));
    j->append_accepted({make_job(400)}, st.slot(2));
    EXPECT_EQ(j->flush().code(), StatusCode::kInvalidArgument);
    EXPECT_TRUE(st.at(0).ok()) << st.at(0).to_string();
    EXPECT_EQ(st.at(1).code(), StatusCode::kInvalidArgument);
    EXPECT_NE(st.at(1).message().find("job 320 was not recorded"), std::string::npos)
        << st.at(1).message();
    EXPECT_TRUE(st.at(2).ok()) << st.at(2).to_string();
    for (const JobRecord& r : want) {
      auto got = j->get(r.id);
      ASSERT_TRUE(got) << r.id;
      EXPECT_EQ(diff(r, *got), "") << r.id;
    }
    EXPECT_FALSE(j->get(300));
    EXPECT_FALSE(j->get(339));
    EXPECT_EQ(j->stats().pending, 41u);
  }
  auto j = open_ok(o);
  ASSERT_TRUE(j);
  std::vector<std::uint64_t> order = ids_of(want);
  order.push_back(400);
  EXPECT_EQ(ids_of(j->recovered()), order);
}

TEST(JournalWriter, AJobThatIsNotNewIsRefused) {
  TempDir dir;
  auto j = open_ok(options_for(dir.file("jobs.db")));
  ASSERT_TRUE(j);
  Statuses st(2);
  j->append_accepted({make_job(1, RecordState::kRunning)}, st.slot(0));
  j->append_accepted({make_job(0)}, st.slot(1));
  EXPECT_EQ(j->flush().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.at(0).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.at(1).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(j->list({}).empty());
}

// (J4) flush() from a callback would wait for the thread it runs on.
TEST(JournalWriter, FlushFromACallbackIsRefusedNotADeadlock) {
  TempDir dir;
  auto j = open_ok(options_for(dir.file("jobs.db")));
  ASSERT_TRUE(j);
  Statuses st(1);
  j->append_accepted({make_job(1)}, [&](const Status&) { st.slot(0)(j->flush()); });
  ASSERT_TRUE(j->flush().ok());
  EXPECT_EQ(st.at(0).code(), StatusCode::kFailedPrecondition);
}

TEST(JournalWriter, CommitSamplesAccountForEveryCommitOnce) {
  TempDir dir;
  auto j = open_ok(options_for(dir.file("jobs.db")));
  ASSERT_TRUE(j);
  for (std::uint64_t id = 1; id <= 50; ++id) j->append_accepted({make_job(id)}, {});
  j->append_ended(3, RecordState::kSucceeded, "", "", 1);
  ASSERT_TRUE(j->flush().ok());
  const JournalStats s = j->stats();
  const auto samples = j->take_commit_samples();
  ASSERT_EQ(samples.size(), s.commits);
  std::uint64_t records = 0;
  for (const CommitSample& c : samples) {
    EXPECT_GE(c.seconds, 0.0);
    records += c.records;
  }
  EXPECT_EQ(records, s.records_committed);
  EXPECT_EQ(records, 51u);
  EXPECT_TRUE(j->take_commit_samples().empty());  // drained
}

}  // namespace
}  // namespace tpool::store::testing
