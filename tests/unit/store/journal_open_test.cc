// Journal::open: the start-up faults, each with its code and a message that
// names the file (journal.h, open()); a file tpoold cannot read is left as it
// was; and the migration of a version 1 file (schema.cc).
#include <random>

#include "store_test_support.h"

namespace tpool::store::testing {
namespace {

void expect_mentions(const Status& s, const std::vector<std::string>& words) {
  for (const std::string& w : words) {
    EXPECT_NE(s.message().find(w), std::string::npos) << "'" << w << "' not in: " << s.message();
  }
}

TEST(JournalOpen, BadOptionsAreRefused) {
  EXPECT_EQ(Journal::open({}).status().code(), StatusCode::kInvalidArgument);
  TempDir dir;
  auto o = options_for(dir.file("jobs.db"));
  o.max_batch = 0;
  EXPECT_EQ(Journal::open(o).status().code(), StatusCode::kInvalidArgument);
}

// A new journal holds payloads: it and its -wal and -shm are the user's alone.
TEST(JournalOpen, ANewJournalIsPrivateToItsUser) {
  TempDir dir;
  const auto o = options_for(dir.file("jobs.db"));
  const mode_t old_mask = ::umask(022);
  auto j = open_ok(o);
  ::umask(old_mask);
  ASSERT_TRUE(j);
  for (const std::string& f : {o.path, o.path + "-wal", o.path + "-shm"}) {
    struct stat st {};
    ASSERT_EQ(::stat(f.c_str(), &st), 0) << f;
    EXPECT_EQ(st.st_mode & 0777, 0600u) << f;
  }
}

TEST(JournalOpen, AMissingDirectoryIsAnIoErrorNamingIt) {
  TempDir dir;
  const std::string missing = dir.file("not-there");
  auto j = Journal::open(options_for(missing + "/jobs.db"));
  ASSERT_EQ(j.status().code(), StatusCode::kIoError) << j.status().to_string();
  expect_mentions(j.status(), {missing, "create it", "[store] path"});
  EXPECT_FALSE(exists(missing));  // not created behind the operator's back
}

TEST(JournalOpen, ADirectoryThatIsAFileIsAnIoError) {
  TempDir dir;
  write_file(dir.file("plain"), "x");
  auto j = Journal::open(options_for(dir.file("plain") + "/jobs.db"));
  ASSERT_EQ(j.status().code(), StatusCode::kIoError) << j.status().to_string();
  expect_mentions(j.status(), {dir.file("plain"), "not a directory"});
}

TEST(JournalOpen, AnUnwritableDirectoryIsAnIoError) {
  if (::geteuid() == 0) GTEST_SKIP() << "root ignores directory modes";
  TempDir dir;
  const std::string ro = dir.file("ro");
  ASSERT_EQ(::mkdir(ro.c_str(), 0500), 0);
  auto j = Journal::open(options_for(ro + "/jobs.db"));
  ::chmod(ro.c_str(), 0700);
  ASSERT_EQ(j.status().code(), StatusCode::kIoError) << j.status().to_string();
  expect_mentions(j.status(), {ro, "not writable", "chown"});
}

TEST(JournalOpen, RandomBytesAreCorruptionAndTheFileIsLeftAlone) {
  TempDir dir;
  const auto o = options_for(dir.file("jobs.db"));
  std::mt19937 rng(17);  // fixed: the same bytes every run
  std::string bytes(64 * 1024, '\0');
  for (char& c : bytes) c = static_cast<char>(rng());
  write_file(o.path, bytes);
  auto j = Journal::open(o);
  ASSERT_EQ(j.status().code(), StatusCode::kCorruption) << j.status().to_string();
  expect_mentions(j.status(), {o.path, "backup", "aside"});
  EXPECT_EQ(read_file(o.path), bytes);
}

TEST(JournalOpen, ATextFileIsCorruptionNotACrash) {
  TempDir dir;
  const auto o = options_for(dir.file("jobs.db"));
  const std::string text = "[store]\npath = \"/var/lib/tpoold/jobs.db\"\n";
  write_file(o.path, text);
  auto j = Journal::open(o);
  ASSERT_EQ(j.status().code(), StatusCode::kCorruption) << j.status().to_string();
  expect_mentions(j.status(), {o.path, "not a usable SQLite database"});
  EXPECT_EQ(read_file(o.path), text);
}

// A good journal with one b-tree page overwritten: the header is fine, so it
// opens as a database, and PRAGMA quick_check must catch it.
TEST(JournalOpen, AClobberedPageIsCorruption) {
  TempDir dir;
  const auto o = options_for(dir.file("jobs.db"));
  {
    auto j = open_ok(o);
    ASSERT_TRUE(j);
    std::vector<JobRecord> many;
    for (std::uint64_t id = 1; id <= 300; ++id) {
      many.push_back(make_job(id));
      many.back().payload.assign(1000, 'p');
    }
    j->append_accepted(std::move(many), {});
    ASSERT_TRUE(j->flush().ok());
  }
  ASSERT_FALSE(exists(o.path + "-wal"));  // all of it is in the file
  std::int64_t root = 0, page_size = 0;
  {
    RawDb raw(o.path, SQLITE_OPEN_READONLY);
    root = raw.query_int("SELECT rootpage FROM sqlite_schema WHERE name = 'jobs'");
    page_size = raw.query_int("PRAGMA page_size");
  }
  ASSERT_GT(root, 1);
  std::string bytes = read_file(o.path);
  const auto at = static_cast<std::size_t>((root - 1) * page_size);
  ASSERT_LT(at + static_cast<std::size_t>(page_size), bytes.size());
  std::fill_n(bytes.begin() + static_cast<std::ptrdiff_t>(at), page_size, '\xff');
  write_file(o.path, bytes);

  auto j = Journal::open(o);
  ASSERT_EQ(j.status().code(), StatusCode::kCorruption) << j.status().to_string();
  expect_mentions(j.status(), {o.path, "backup", "aside"});
}

TEST(JournalOpen, ANewerSchemaIsAFailedPreconditionAndTheFileIsUnchanged) {
  TempDir dir;
  const auto o = options_for(dir.file("jobs.db"));
  {
    RawDb raw(o.path);
    raw.exec("CREATE TABLE jobs (id INTEGER PRIMARY KEY); PRAGMA user_version = " +
             std::to_string(kSchemaVersion + 1) + ";");
  }
  const std::string before = read_file(o.path);
  auto j = Journal::open(o);
  ASSERT_EQ(j.status().code(), StatusCode::kFailedPrecondition) << j.status().to_string();
  expect_mentions(j.status(), {o.path, "version " + std::to_string(kSchemaVersion + 1),
                               "newer tpoold", "up to " + std::to_string(kSchemaVersion)});
  // Not even switched to WAL (which rewrites the header).
  EXPECT_EQ(read_file(o.path), before);
  EXPECT_FALSE(exists(o.path + "-wal"));
}

TEST(JournalOpen, ADatabaseThatIsNotAJournalIsRefused) {
  TempDir dir;
  const auto o = options_for(dir.file("jobs.db"));
  {
    RawDb raw(o.path);
    raw.exec("CREATE TABLE people (name TEXT)");
  }
  auto j = Journal::open(o);
  ASSERT_EQ(j.status().code(), StatusCode::kFailedPrecondition) << j.status().to_string();
  expect_mentions(j.status(), {o.path, "not a tpoold journal"});
  RawDb raw(o.path, SQLITE_OPEN_READONLY);
  EXPECT_EQ(raw.query_int("SELECT count(*) FROM sqlite_schema"), 1);
}

// A version 1 file, as the first release wrote it: a queued job with labels,
// an ended one, meta's next_id. Raw SQL on purpose: the columns version 1 had.
void write_v1_file(const std::string& path, const std::string& extra_sql = "") {
  RawDb raw(path);
  raw.exec("BEGIN");
  raw.exec(std::string(schema_step_sql(1)));
  raw.exec(
      "INSERT INTO jobs VALUES (1, 1, 'echo', x'00ff', 'k1', 0, 500, 1000, 0, 0, 3, 10, 100, 1, "
      "x'', '', 0);"
      "INSERT INTO jobs VALUES (2, 2, 'echo', x'01', '', 1, 0, 1001, 0, 1, 1, 0, 0, 5, x'6f', "
      "'it broke', 2000);"
      "INSERT INTO labels VALUES (1, 0, 'team', 'red'), (1, 1, 'env', 'prod');"
      "UPDATE meta SET value = 12 WHERE key = 'next_id';");
  raw.exec(extra_sql + "PRAGMA user_version = 1; COMMIT;");
}

TEST(JournalOpen, AVersion1FileIsMigratedWithItsRowsIntact) {
  TempDir dir;
  const auto o = options_for(dir.file("jobs.db"));
  write_v1_file(o.path);
  {
    auto j = open_ok(o);
    ASSERT_TRUE(j);
    EXPECT_EQ(j->next_id_floor(), 12u);
    ASSERT_EQ(j->recovered().size(), 1u);
    const JobRecord& q = j->recovered()[0];
    EXPECT_EQ(q.id, 1u);
    EXPECT_EQ(q.payload, std::string("\0\xff", 2));
    EXPECT_EQ(q.idempotency_key, "k1");
    EXPECT_EQ(q.timeout_ms, 500u);
    EXPECT_EQ(q.max_attempts, 3u);
    EXPECT_EQ(q.backoff_cap_ms, 100u);
    EXPECT_EQ(q.labels,
              (std::vector<std::pair<std::string, std::string>>{{"team", "red"}, {"env", "prod"}}));
    auto ended = j->get(2);
    ASSERT_TRUE(ended);
    EXPECT_EQ(ended->state, RecordState::kFailed);
    EXPECT_EQ(ended->output, "o");
    EXPECT_EQ(ended->message, "it broke");
    // Version 2's history: the one message version 1 kept.
    EXPECT_EQ(ended->attempt_messages, std::vector<std::string>{"it broke"});
    EXPECT_EQ(ended->ended_unix_ms, 2000);
    // And it is a working journal of the current version.
    j->append_ended(1, RecordState::kSucceeded, "done", "ok", 3000);
    j->append_accepted({make_job(12)}, {});
    ASSERT_TRUE(j->flush().ok());
    ASSERT_TRUE(j->get(1));
    EXPECT_EQ(j->get(1)->attempt_messages, std::vector<std::string>{"ok"});
    j->expire(1'000'000);  // both ended jobs, by the version 6 index
    ASSERT_TRUE(j->flush().ok());
    EXPECT_EQ(j->stats().expired, 2u);
    EXPECT_EQ(ids_of(j->list(ListFilter{})), std::vector<std::uint64_t>{12});
  }
  RawDb raw(o.path, SQLITE_OPEN_READONLY);
  EXPECT_EQ(raw.query_int("PRAGMA user_version"), kSchemaVersion);
  // Version 4 replaced version 2's index of every job with one of the ended,
  // which version 6 replaced with the index of `ends`.
  EXPECT_EQ(raw.query_int("SELECT count(*) FROM sqlite_schema WHERE name = 'jobs_by_state_ended'"),
            0);
  EXPECT_EQ(raw.query_int("SELECT count(*) FROM sqlite_schema WHERE name = 'jobs_ended'"), 0);
  EXPECT_EQ(raw.query_int("SELECT count(*) FROM sqlite_schema WHERE name = 'ends_by_time'"), 1);
  // Both ended jobs were found by it: nothing of them is left.
  EXPECT_EQ(raw.query_int("SELECT count(*) FROM ends"), 0);
  EXPECT_EQ(raw.query_int("SELECT count(*) FROM attempt_messages"), 0);
}

// A version 4 file (the last one with the index on jobs (seq)): three pending
// jobs whose acceptance order (seq) is not their id order, as two threads'
// accepts can leave them, and an ended one. After the migration the index is
// gone, recovery still follows seq (J7, now by a sort), and an accept made
// after the open gets a seq above every one in the file: it comes back last.
TEST(JournalOpen, AVersion4FileIsMigratedAndRecoveryStillFollowsAcceptanceOrder) {
  TempDir dir;
  const auto o = options_for(dir.file("jobs.db"));
  {
    RawDb raw(o.path);
    raw.exec("BEGIN");
    for (int v = 1; v <= 4; ++v) raw.exec(std::string(schema_step_sql(v)));
    // id, seq, handler, payload, key, lane, timeout_ms, accepted, not_before,
    // attempt, max_attempts, backoff base, cap, state, output, message,
    // ended_unix_ms, tag
    raw.exec(
        "INSERT INTO jobs VALUES (7, 30, 'echo', x'07', '', 0, 0, 1000, 0, 0, 1, 0, 0, 1, x'', '', "
        "0, 0);"
        "INSERT INTO jobs VALUES (8, 10, 'echo', x'08', '', 0, 0, 1000, 0, 1, 1, 0, 0, 3, x'', '', "
        "0, 0);"
        "INSERT INTO jobs VALUES (9, 20, 'echo', x'09', '', 0, 0, 1000, 0, 0, 1, 0, 0, 1, x'', '', "
        "0, 0);"
        "INSERT INTO jobs VALUES (10, 40, 'echo', x'0a', '', 0, 0, 1000, 0, 1, 1, 0, 0, 4, x'6f', "
        "'', 2000, 0);"
        "UPDATE meta SET value = 11 WHERE key = 'next_id';");
    raw.exec("PRAGMA user_version = 4; COMMIT;");
    ASSERT_EQ(raw.query_int("SELECT count(*) FROM sqlite_schema WHERE name = 'jobs_by_seq'"), 1);
  }
  {
    auto j = open_ok(o);
    ASSERT_TRUE(j);
    EXPECT_EQ(ids_of(j->recovered()), (std::vector<std::uint64_t>{8, 9, 7}));
    EXPECT_EQ(j->recovered()[0].state, RecordState::kRunning);
    ASSERT_TRUE(j->get(10));
    EXPECT_EQ(j->get(10)->output, "o");
    j->append_accepted({make_job(11)}, {});  // its seq: above 40
    ASSERT_TRUE(j->flush().ok());
  }
  RawDb raw(o.path, SQLITE_OPEN_READONLY);
  EXPECT_EQ(raw.query_int("PRAGMA user_version"), kSchemaVersion);
  EXPECT_EQ(raw.query_int("SELECT count(*) FROM sqlite_schema WHERE name = 'jobs_by_seq'"), 0);
  EXPECT_GT(raw.query_int("SELECT seq FROM jobs WHERE id = 11"), 40);
  auto j = open_ok(o);
  ASSERT_TRUE(j);
  EXPECT_EQ(ids_of(j->recovered()), (std::vector<std::uint64_t>{8, 9, 7, 11}));
}

// A version 5 file (the last one whose ends were columns of jobs): a queued
// job, a running one, a succeeded one with its history and a failed one with
// labels. After the migration each ended job's end is its row in `ends`
// (read back whole, attempt included), the pending ones replay as before,
// and the new layout works: a requeue takes the end away, a new end and
// expire() find it by the new index.
TEST(JournalOpen, AVersion5FileIsMigratedWithItsEndsInTheirOwnTable) {
  TempDir dir;
  const auto o = options_for(dir.file("jobs.db"));
  {
    RawDb raw(o.path);
    raw.exec("BEGIN");
    for (int v = 1; v <= 5; ++v) raw.exec(std::string(schema_step_sql(v)));
    // id, seq, handler, payload, key, lane, timeout_ms, accepted, not_before,
    // attempt, max_attempts, backoff base, cap, state, output, message,
    // ended_unix_ms, tag
    raw.exec(
        "INSERT INTO jobs VALUES (1, 1, 'echo', x'01', '', 0, 0, 1000, 0, 0, 1, 0, 0, 1, x'', '', "
        "0, 0);"
        "INSERT INTO jobs VALUES (2, 2, 'echo', x'02', '', 0, 0, 1000, 0, 1, 1, 0, 0, 3, x'', '', "
        "0, 0);"
        "INSERT INTO jobs VALUES (3, 3, 'echo', x'03', 'k3', 0, 0, 1000, 0, 2, 3, 0, 0, 4, "
        "x'6f33', "
        "'done', 2000, 7);"
        "INSERT INTO jobs VALUES (4, 4, 'echo', x'04', '', 0, 0, 1000, 0, 1, 1, 0, 0, 5, x'', "
        "'it broke', 2500, 0);"
        "INSERT INTO attempt_messages (job_id, message) VALUES (3, 'flaked'), (3, 'done'), "
        "(4, 'it broke');"
        "INSERT INTO labels VALUES (4, 0, 'team', 'red');"
        "UPDATE meta SET value = 5 WHERE key = 'next_id';");
    raw.exec("PRAGMA user_version = 5; COMMIT;");
  }
  {
    auto j = open_ok(o);
    ASSERT_TRUE(j);
    EXPECT_EQ(ids_of(j->recovered()), (std::vector<std::uint64_t>{1, 2}));
    EXPECT_EQ(j->stats().pending, 2u);
    auto r3 = j->get(3);
    ASSERT_TRUE(r3);
    EXPECT_EQ(r3->state, RecordState::kSucceeded);
    EXPECT_EQ(r3->attempt, 2u);
    EXPECT_EQ(r3->output, "o3");
    EXPECT_EQ(r3->message, "done");
    EXPECT_EQ(r3->ended_unix_ms, 2000);
    EXPECT_EQ(r3->tag, 7u);
    EXPECT_EQ(r3->attempt_messages, (std::vector<std::string>{"flaked", "done"}));
    EXPECT_EQ(j->find_key("k3")->id, 3u);
    auto r4 = j->get(4);
    ASSERT_TRUE(r4);
    EXPECT_EQ(r4->state, RecordState::kFailed);
    EXPECT_EQ(r4->message, "it broke");
    ListFilter failed;
    failed.states = {RecordState::kFailed};
    EXPECT_EQ(ids_of(j->list(failed)), std::vector<std::uint64_t>{4});

    j->append_requeued(3, 0, 3, {});
    ASSERT_TRUE(j->flush().ok());
    EXPECT_EQ(j->get(3)->state, RecordState::kQueued);
    EXPECT_EQ(j->get(3)->output, "");
    EXPECT_EQ(j->stats().pending, 3u);
    j->append_started(3, 1);
    j->append_ended(3, RecordState::kSucceeded, "again", "", 5000);
    ASSERT_TRUE(j->flush().ok());
    EXPECT_EQ(j->get(3)->output, "again");
    EXPECT_EQ(j->get(3)->attempt, 1u);
    j->expire(3000 + o.retention.count());  // 4 (ended at 2500), not 3 (5000)
    ASSERT_TRUE(j->flush().ok());
    EXPECT_EQ(j->stats().expired, 1u);
    EXPECT_FALSE(j->get(4));
    EXPECT_TRUE(j->get(3));
  }
  RawDb raw(o.path, SQLITE_OPEN_READONLY);
  EXPECT_EQ(raw.query_int("PRAGMA user_version"), kSchemaVersion);
  EXPECT_EQ(raw.query_int("SELECT count(*) FROM sqlite_schema WHERE name = 'jobs_ended'"), 0);
  EXPECT_EQ(raw.query_int("SELECT count(*) FROM ends"), 1);
  EXPECT_EQ(raw.query_int("SELECT count(*) FROM jobs WHERE output <> x'' OR message <> ''"), 0);
  EXPECT_EQ(raw.query_int("SELECT count(*) FROM labels"), 0);
  EXPECT_EQ(raw.query_int("SELECT count(*) FROM attempt_messages WHERE job_id = 4"), 0);
}

// The migration is one transaction: a step that fails leaves version 1.
TEST(JournalOpen, AFailedMigrationLeavesTheFileAtItsVersion) {
  TempDir dir;
  const auto o = options_for(dir.file("jobs.db"));
  // Something named like what step 2 creates: the step fails part-way.
  write_v1_file(o.path, "CREATE INDEX jobs_by_state_ended ON jobs (handler);");
  auto j = Journal::open(o);
  ASSERT_EQ(j.status().code(), StatusCode::kCorruption) << j.status().to_string();
  expect_mentions(j.status(), {o.path, "version 1 to " + std::to_string(kSchemaVersion), "step 2",
                               "left at version 1"});
  RawDb raw(o.path, SQLITE_OPEN_READONLY);
  EXPECT_EQ(raw.query_int("PRAGMA user_version"), 1);
  // Step 2 created attempt_messages before it failed; the rollback took it.
  EXPECT_EQ(raw.query_int("SELECT count(*) FROM sqlite_schema WHERE name = 'attempt_messages'"), 0);
  EXPECT_EQ(raw.query_int("SELECT count(*) FROM jobs"), 2);
}

// (J10) One open at a time: a second open of the same store is refused with
// the holder's pid and what to do, and succeeds once the first is closed.
TEST(JournalOpen, ASecondOpenOfAStoreInUseIsRefusedNamingTheHolder) {
  TempDir dir;
  const auto o = options_for(dir.file("jobs.db"));
  auto first = open_ok(o);
  ASSERT_TRUE(first);
  first->append_accepted({make_job(1)}, {});
  ASSERT_TRUE(first->flush().ok());
  const std::string before = read_file(o.path);
  auto second = Journal::open(o);
  ASSERT_EQ(second.status().code(), StatusCode::kFailedPrecondition) << second.status().to_string();
  expect_mentions(second.status(), {o.path, "in use by another process",
                                    "pid " + std::to_string(::getpid()), "[store] path"});
  EXPECT_EQ(read_file(o.path), before);  // the refused open wrote nothing
  first.reset();
  auto third = open_ok(o);  // the lock went with the first
  ASSERT_TRUE(third);
  ASSERT_EQ(third->recovered().size(), 1u);
}

TEST(JournalOpen, SchemaStepsExistForEveryVersionOnly) {
  for (int v = 1; v <= kSchemaVersion; ++v) EXPECT_FALSE(schema_step_sql(v).empty()) << v;
  EXPECT_TRUE(schema_step_sql(0).empty());
  EXPECT_TRUE(schema_step_sql(kSchemaVersion + 1).empty());
}

}  // namespace
}  // namespace tpool::store::testing
