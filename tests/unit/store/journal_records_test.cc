// The journal's records (journal.h): every field kept, a job's life through
// start, retry, end and requeue, the reads (get, find_key, list), retention
// (expire), ids (J6), recovery (J7) and reopening after a clean close.
#include <algorithm>
#include <chrono>
#include <thread>

#include "store_test_support.h"

namespace tpool::store::testing {
namespace {

std::int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

TEST(JournalRecords, EveryFieldRoundTripsThroughTheFile) {
  TempDir dir;
  const auto o = options_for(dir.file("jobs.db"));
  // A record as the engine could hand it over with all of its fields set,
  // the ones of a finished attempt too.
  JobRecord want = make_job(7, RecordState::kScheduled);
  want.timeout_ms = 0xfffffffffffffff0ULL;  // above INT64_MAX: kept as its bit pattern
  want.attempt = 2;
  want.output = std::string("out\0put", 7);
  want.message = "second attempt failed";
  want.attempt_messages = {"first", "", "second attempt failed"};
  want.ended_unix_ms = 42;
  {
    auto j = open_ok(o);
    ASSERT_TRUE(j);
    Statuses st(1);
    j->append_accepted({want}, st.slot(0));
    ASSERT_TRUE(j->flush().ok());
    EXPECT_TRUE(st.at(0).ok()) << st.at(0).to_string();
    auto got = j->get(7);
    ASSERT_TRUE(got.has_value());
    EXPECT_EQ(diff(want, *got), "");
    auto by_key = j->find_key("key-7");
    ASSERT_TRUE(by_key.has_value());
    EXPECT_EQ(diff(want, *by_key), "");
    auto listed = j->list({});
    ASSERT_EQ(listed.size(), 1u);
    EXPECT_EQ(diff(want, listed[0]), "");
  }
  auto j = open_ok(o);  // from the file, not from anything in memory
  ASSERT_TRUE(j);
  ASSERT_EQ(j->recovered().size(), 1u);
  EXPECT_EQ(diff(want, j->recovered()[0]), "");
}

TEST(JournalRecords, AJobsLifeStartRetryEndRequeueKeepsItsHistory) {
  TempDir dir;
  auto j = open_ok(options_for(dir.file("jobs.db")));
  ASSERT_TRUE(j);
  JobRecord a = make_job(1, RecordState::kScheduled);
  j->append_accepted({a}, {});
  ASSERT_TRUE(j->flush().ok());
  EXPECT_EQ(j->stats().pending, 1u);
  EXPECT_EQ(j->stats().scheduled, 1u);

  j->append_started(1, 1);
  ASSERT_TRUE(j->flush().ok());
  auto r = j->get(1);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->state, RecordState::kRunning);
  EXPECT_EQ(r->attempt, 1u);
  EXPECT_EQ(j->stats().scheduled, 0u);

  // A retry due now is queued; one due later is scheduled.
  j->append_retry(1, now_ms() - 1000, "boom 1");
  ASSERT_TRUE(j->flush().ok());
  r = j->get(1);
  EXPECT_EQ(r->state, RecordState::kQueued);
  EXPECT_EQ(r->attempt_messages, std::vector<std::string>{"boom 1"});
  const std::int64_t later = now_ms() + 3600 * 1000;
  j->append_started(1, 2);
  j->append_retry(1, later, "boom 2");
  ASSERT_TRUE(j->flush().ok());
  r = j->get(1);
  EXPECT_EQ(r->state, RecordState::kScheduled);
  EXPECT_EQ(r->not_before_unix_ms, later);
  EXPECT_EQ(r->attempt, 2u);
  EXPECT_EQ(j->stats().scheduled, 1u);

  Statuses st(4);
  j->append_started(1, 3);
  j->append_ended(1, RecordState::kFailed, "out", "boom 3", 99, st.slot(0));
  ASSERT_TRUE(j->flush().ok());
  EXPECT_TRUE(st.at(0).ok());
  r = j->get(1);
  EXPECT_EQ(r->state, RecordState::kFailed);
  EXPECT_EQ(r->output, "out");
  EXPECT_EQ(r->message, "boom 3");
  EXPECT_EQ(r->ended_unix_ms, 99);
  EXPECT_EQ(r->attempt_messages, (std::vector<std::string>{"boom 1", "boom 2", "boom 3"}));
  EXPECT_EQ(j->stats().pending, 0u);

  // An end after the end is refused alone, and so is a start after it.
  j->append_ended(1, RecordState::kSucceeded, "x", "y", 100, st.slot(1));
  j->append_started(1, 4);
  EXPECT_EQ(j->flush().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.at(1).code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.at(1).message().find("already ended"), std::string::npos) << st.at(1).message();
  EXPECT_EQ(j->get(1)->state, RecordState::kFailed);
  EXPECT_TRUE(j->healthy());  // a refused write is not a failed commit

  // A dead letter made runnable again: counters reset, history kept.
  j->append_requeued(1, 0, 6, st.slot(2));
  ASSERT_TRUE(j->flush().ok());
  EXPECT_TRUE(st.at(2).ok());
  r = j->get(1);
  EXPECT_EQ(r->state, RecordState::kQueued);
  EXPECT_EQ(r->attempt, 0u);
  EXPECT_EQ(r->max_attempts, 6u);
  EXPECT_EQ(r->output, "");
  EXPECT_EQ(r->message, "");
  EXPECT_EQ(r->ended_unix_ms, 0);
  EXPECT_EQ(r->attempt_messages.size(), 3u);
  EXPECT_EQ(j->stats().pending, 1u);
  j->append_requeued(1, 0, 6, st.slot(3));  // not final: refused
  EXPECT_EQ(j->flush().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.at(3).code(), StatusCode::kInvalidArgument);
}

TEST(JournalRecords, WritesForUnknownJobsChangeNothing) {
  TempDir dir;
  auto j = open_ok(options_for(dir.file("jobs.db")));
  ASSERT_TRUE(j);
  Statuses st(2);
  j->append_started(5, 1);
  j->append_retry(5, 0, "m");
  j->append_ended(5, RecordState::kSucceeded, "", "", 1, st.slot(0));
  j->append_ended(5, RecordState::kRunning, "", "", 1, st.slot(1));  // not a final state
  EXPECT_EQ(j->flush().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.at(0).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.at(1).code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(j->get(5).has_value());
  EXPECT_TRUE(j->list({}).empty());
  EXPECT_EQ(j->stats().pending, 0u);
}

TEST(JournalRecords, ListFiltersByStateHandlerAndLabelAndPages) {
  TempDir dir;
  auto j = open_ok(options_for(dir.file("jobs.db")));
  ASSERT_TRUE(j);
  // 1..10: handler odd/even; team red for multiples of 3, else blue; job 10
  // alone has the label "solo"; 2 and 4 succeeded, 6 failed.
  std::vector<JobRecord> all;
  for (std::uint64_t id = 1; id <= 10; ++id) {
    all.push_back(make_job(id));
    if (id == 10) all.back().labels.emplace_back("solo", "");
  }
  j->append_accepted(all, {});
  j->append_ended(2, RecordState::kSucceeded, "", "", 1);
  j->append_ended(4, RecordState::kSucceeded, "", "", 1);
  j->append_ended(6, RecordState::kFailed, "", "", 1);
  ASSERT_TRUE(j->flush().ok());

  using V = std::vector<std::uint64_t>;
  auto ids = [&](const ListFilter& f) { return ids_of(j->list(f)); };
  EXPECT_EQ(ids(ListFilter{}), (V{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}));
  EXPECT_EQ(ids(Filter().states({RecordState::kSucceeded})), (V{2, 4}));
  EXPECT_EQ(ids(Filter().states({RecordState::kFailed, RecordState::kSucceeded})), (V{2, 4, 6}));
  EXPECT_EQ(ids(Filter().states({RecordState::kRunning})), V{});
  EXPECT_EQ(ids(Filter().handler("odd")), (V{1, 3, 5, 7, 9}));
  EXPECT_EQ(ids(Filter().handler("even").label("team", "red")), (V{6}));
  EXPECT_EQ(ids(Filter().label("team", "red")), (V{3, 6, 9}));
  EXPECT_EQ(ids(Filter().label("team")).size(), 10u);  // any value
  EXPECT_EQ(ids(Filter().label("solo")), V{10});
  EXPECT_EQ(ids(Filter().label("nobody")), V{});
  EXPECT_EQ(ids(Filter().states({RecordState::kQueued}).handler("even")), (V{8, 10}));
  EXPECT_EQ(ids(Filter().limit(0)), V{});

  // Paging: after_id and limit walk every job once, in id order.
  V paged;
  Filter page;
  page.limit(3);
  for (;;) {
    V got = ids(page);
    ASSERT_LE(got.size(), 3u);
    if (got.empty()) break;
    paged.insert(paged.end(), got.begin(), got.end());
    page.after(got.back());
  }
  EXPECT_EQ(paged, ids(ListFilter{}));
}

TEST(JournalRecords, FindKeyFindsTheJobHoldingTheKeyOnly) {
  TempDir dir;
  auto j = open_ok(options_for(dir.file("jobs.db")));
  ASSERT_TRUE(j);
  JobRecord unkeyed = make_job(2);
  unkeyed.idempotency_key.clear();
  JobRecord unkeyed2 = make_job(3);
  unkeyed2.idempotency_key.clear();  // any number of jobs may have no key
  j->append_accepted({make_job(1), unkeyed, unkeyed2}, {});
  ASSERT_TRUE(j->flush().ok());
  ASSERT_TRUE(j->find_key("key-1"));
  EXPECT_EQ(j->find_key("key-1")->id, 1u);
  EXPECT_FALSE(j->find_key("key-2"));
  EXPECT_FALSE(j->find_key(""));
  EXPECT_EQ(j->list({}).size(), 3u);
}

TEST(JournalRecords, ExpireDeletesEndedJobsPastRetentionWithTheirRows) {
  TempDir dir;
  auto o = options_for(dir.file("jobs.db"));
  o.retention = std::chrono::milliseconds(1000);
  auto j = open_ok(o);
  ASSERT_TRUE(j);
  j->append_accepted({make_job(1), make_job(2), make_job(3)}, {});
  j->append_ended(1, RecordState::kSucceeded, "o", "m", 1000);
  j->append_ended(2, RecordState::kCancelled, "o", "m", 5000);
  j->expire(2000);  // 1000 + 1000 <= 2000: job 1 goes; 5000 + 1000 > 2000: job 2 stays
  ASSERT_TRUE(j->flush().ok());
  EXPECT_FALSE(j->get(1));
  EXPECT_TRUE(j->get(2));
  EXPECT_TRUE(j->get(3));  // not ended: never expires
  EXPECT_EQ(j->stats().expired, 1u);
  {
    RawDb raw(o.path, SQLITE_OPEN_READONLY);
    EXPECT_EQ(raw.query_int("SELECT count(*) FROM labels WHERE job_id = 1"), 0);
    EXPECT_EQ(raw.query_int("SELECT count(*) FROM attempt_messages WHERE job_id = 1"), 0);
    EXPECT_EQ(raw.query_int("SELECT count(*) FROM labels WHERE job_id = 2"), 3);
  }
  // Its key went with it (S4): a new job may take it.
  JobRecord again = make_job(4);
  again.idempotency_key = "key-1";
  Statuses st(1);
  j->append_accepted({again}, st.slot(0));
  j->expire(6000);
  ASSERT_TRUE(j->flush().ok());
  EXPECT_TRUE(st.at(0).ok()) << st.at(0).to_string();
  EXPECT_EQ(j->find_key("key-1")->id, 4u);
  EXPECT_FALSE(j->get(2));
  EXPECT_TRUE(j->get(3));
  EXPECT_EQ(j->stats().expired, 2u);
}

// An expire() with nothing to delete writes nothing: the -wal file does not
// grow (an idle daemon's sweep every second costs no fsync'd page). The
// control: an expire() that deletes does make it grow.
TEST(JournalRecords, AnExpireWithNothingToDeleteWritesNothing) {
  TempDir dir;
  auto o = options_for(dir.file("jobs.db"));
  o.retention = std::chrono::milliseconds(1000);
  auto j = open_ok(o);
  ASSERT_TRUE(j);
  j->append_accepted({make_job(1), make_job(2)}, {});
  j->append_ended(1, RecordState::kSucceeded, "o", "m", 1000);
  j->expire(1500);  // the first one raises the id floor (J6): one page
  ASSERT_TRUE(j->flush().ok());
  const auto wal_size = [&] { return std::filesystem::file_size(o.path + "-wal"); };
  const auto before = wal_size();
  for (int i = 0; i < 3; ++i) j->expire(1500);  // job 1 is not due before 2000
  ASSERT_TRUE(j->flush().ok());
  EXPECT_EQ(wal_size(), before);
  EXPECT_TRUE(j->get(1));
  j->expire(2000);
  ASSERT_TRUE(j->flush().ok());
  EXPECT_FALSE(j->get(1));
  EXPECT_GT(wal_size(), before);
}

TEST(JournalRecords, IdsFloorOutlivesDeletedJobsAndRestarts) {
  TempDir dir;
  const auto o = options_for(dir.file("jobs.db"));
  {
    auto j = open_ok(o);
    ASSERT_TRUE(j);
    EXPECT_EQ(j->next_id_floor(), 1u);
    j->append_accepted({make_job(5)}, {});
    j->append_accepted({make_job(9)}, {});
    ASSERT_TRUE(j->flush().ok());
  }
  {
    auto j = open_ok(o);
    ASSERT_TRUE(j);
    EXPECT_EQ(j->next_id_floor(), 10u);
    j->append_ended(9, RecordState::kSucceeded, "", "", 1);
    j->expire(1'000'000'000);               // job 9, the largest id, is deleted
    j->append_accepted({make_job(3)}, {});  // a smaller id does not lower the floor
    ASSERT_TRUE(j->flush().ok());
    EXPECT_FALSE(j->get(9));
  }
  auto j = open_ok(o);
  ASSERT_TRUE(j);
  EXPECT_EQ(j->next_id_floor(), 10u);
}

TEST(JournalRecords, EachOpenClaimsTheNextIncarnation) {
  // (J9) A new file starts at a random incarnation; each open after it is
  // one more, whether the run before accepted jobs or not, and survives a
  // crash (it is committed before open() returns).
  TempDir dir;
  const auto o = options_for(dir.file("jobs.db"));
  std::uint32_t first = 0;
  {
    auto j = open_ok(o);
    ASSERT_TRUE(j);
    first = j->incarnation();
    EXPECT_GE(first, 1u);
    EXPECT_LE(first, kIncarnationMask);  // ids stay below 2^63 (SQLite integers)
  }
  std::uint32_t expect = first;
  for (int i = 0; i < 3; ++i) {
    auto j = open_ok(o);
    ASSERT_TRUE(j);
    expect = expect == kIncarnationMask ? 1 : expect + 1;
    EXPECT_EQ(j->incarnation(), expect);
  }
  // Another file: another (random) start, almost surely not the same one.
  TempDir other;
  auto k = open_ok(options_for(other.file("jobs.db")));
  ASSERT_TRUE(k);
  EXPECT_GE(k->incarnation(), 1u);
}

TEST(JournalRecords, ReopenAfterCleanCloseRecoversThePendingJobsOnly) {
  TempDir dir;
  const auto o = options_for(dir.file("jobs.db"));
  {
    auto j = open_ok(o);
    ASSERT_TRUE(j);
    for (std::uint64_t id = 1; id <= 5; ++id) j->append_accepted({make_job(id)}, {});
    j->append_started(3, 1);
    j->append_ended(2, RecordState::kSucceeded, "", "", 1);
    j->append_ended(4, RecordState::kTimedOut, "", "", 1);
    // No flush: closing applies what is queued.
  }
  // A clean close checkpoints the WAL into the database and removes it.
  EXPECT_FALSE(exists(o.path + "-wal"));
  auto j = open_ok(o);
  ASSERT_TRUE(j);
  EXPECT_EQ(ids_of(j->recovered()), (std::vector<std::uint64_t>{1, 3, 5}));
  EXPECT_EQ(j->recovered()[1].state, RecordState::kRunning);
  EXPECT_EQ(j->get(4)->state, RecordState::kTimedOut);
  const JournalStats s = j->stats();
  EXPECT_EQ(s.pending, 3u);
  EXPECT_EQ(s.scheduled, 0u);
  EXPECT_GT(s.file_bytes, 0u);
}

// (J3, J7) Four threads accept at once: after a reopen every job is there
// once, and each thread's jobs come back in the order that thread appended
// them (its appends took the queue's lock in that order).
TEST(JournalRecords, RecoveredIsInAcceptanceOrderAcrossThreads) {
  TempDir dir;
  const auto o = options_for(dir.file("jobs.db"));
  constexpr std::uint64_t kThreads = 4, kEach = 500;
  {
    auto j = open_ok(o);
    ASSERT_TRUE(j);
    std::vector<std::thread> ts;
    for (std::uint64_t t = 0; t < kThreads; ++t) {
      ts.emplace_back([&j, t] {
        for (std::uint64_t i = 1; i <= kEach; ++i) {
          JobRecord r = make_job(t * 100000 + i);
          r.idempotency_key.clear();
          j->append_accepted({std::move(r)}, {});
        }
      });
    }
    for (auto& t : ts) t.join();
    ASSERT_TRUE(j->flush().ok());
    EXPECT_EQ(j->stats().records_committed, kThreads * kEach);
  }
  auto j = open_ok(o);
  ASSERT_TRUE(j);
  std::vector<std::uint64_t> got = ids_of(j->recovered());
  ASSERT_EQ(got.size(), kThreads * kEach);
  std::vector<std::uint64_t> last(kThreads, 0);
  for (std::uint64_t id : got) {
    const std::uint64_t t = id / 100000;
    ASSERT_LT(t, kThreads);
    EXPECT_GT(id, last[t]) << "thread " << t << "'s jobs out of order";
    last[t] = id;
  }
  std::sort(got.begin(), got.end());
  EXPECT_EQ(std::adjacent_find(got.begin(), got.end()), got.end()) << "a job recovered twice";
  EXPECT_EQ(j->next_id_floor(), (kThreads - 1) * 100000 + kEach + 1);
}

TEST(JournalRecords, RecordStateNamesAndFinality) {
  EXPECT_FALSE(is_final(RecordState::kQueued));
  EXPECT_FALSE(is_final(RecordState::kScheduled));
  EXPECT_FALSE(is_final(RecordState::kRunning));
  EXPECT_TRUE(is_final(RecordState::kSucceeded));
  EXPECT_TRUE(is_final(RecordState::kTimedOut));
  EXPECT_EQ(to_string(RecordState::kScheduled), "scheduled");
  EXPECT_EQ(to_string(RecordState::kTimedOut), "timed out");
}

}  // namespace
}  // namespace tpool::store::testing
