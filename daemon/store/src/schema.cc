// Opening the journal's file and its schema's history.
//
// The schema is a chain of steps: step v takes a file from PRAGMA
// user_version v - 1 to v, and a new file (version 0) runs them all, so the
// path a file from the field takes is the path every new file takes and is
// tested on every start. A released step is never edited; a change to the
// schema is a new step appended here, kSchemaVersion raised by one (journal.h),
// and a migration test from the previous version (docs/store.md).
//
// The order of open_write_connection is deliberate: nothing is written to the
// file (not even the switch to WAL, which rewrites its header) until it has
// been read as a database of a version this build knows and has passed
// PRAGMA quick_check. A file tpoold cannot read is reported and left as it
// was, never started over.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>

#include "schema.h"
#include "tpool/store/journal.h"

namespace tpool::store {

namespace {

// Version 1, the first schema (issue 17).
//  - jobs: one row per job, every JobRecord field but the labels; seq is the
//    acceptance order (J7), given by the writer, unique and increasing.
//  - an idempotency key is unique among the jobs that have one: the index is
//    partial, so any number of jobs may have none ('').
//  - labels: in their own table, in the request's order (pos), indexed by
//    (key, value) for list()'s label filter.
//  - meta: next_id, one more than the largest id ever accepted (J6), kept
//    apart from jobs because expire() deletes jobs.
constexpr const char* kStep1 = R"sql(
CREATE TABLE meta (
  key TEXT PRIMARY KEY,
  value INTEGER NOT NULL
) WITHOUT ROWID;
INSERT INTO meta (key, value) VALUES ('next_id', 1);
CREATE TABLE jobs (
  id INTEGER PRIMARY KEY,
  seq INTEGER NOT NULL,
  handler TEXT NOT NULL,
  payload BLOB NOT NULL,
  idempotency_key TEXT NOT NULL,
  lane INTEGER NOT NULL,
  timeout_ms INTEGER NOT NULL,
  accepted_unix_ms INTEGER NOT NULL,
  not_before_unix_ms INTEGER NOT NULL,
  attempt INTEGER NOT NULL,
  max_attempts INTEGER NOT NULL,
  backoff_base_ms INTEGER NOT NULL,
  backoff_cap_ms INTEGER NOT NULL,
  state INTEGER NOT NULL,
  output BLOB NOT NULL,
  message TEXT NOT NULL,
  ended_unix_ms INTEGER NOT NULL
);
CREATE UNIQUE INDEX jobs_by_seq ON jobs (seq);
CREATE UNIQUE INDEX jobs_by_key ON jobs (idempotency_key) WHERE idempotency_key <> '';
CREATE TABLE labels (
  job_id INTEGER NOT NULL,
  pos INTEGER NOT NULL,
  key TEXT NOT NULL,
  value TEXT NOT NULL,
  PRIMARY KEY (job_id, pos)
) WITHOUT ROWID;
CREATE INDEX labels_by_key ON labels (key, value);
)sql";

// Version 2: what version 1 lacked.
//  - attempt_messages: every ended attempt's message, oldest first (a retried
//    job's history); a job's rows are ordered by seq, which only grows (an
//    INTEGER PRIMARY KEY is max + 1, and a job's rows are deleted together).
//    A version 1 file kept only the last message: an ended job's becomes its
//    one history entry, as version 2 would have written it.
//  - jobs_by_state_ended: expire() finds ended jobs by (state, ended_unix_ms)
//    instead of scanning the table.
// Version 3: the client's correlation tag (a Stream's), so a replayed job's
// result carries it (issue 17).
constexpr const char* kStep3 = R"sql(
ALTER TABLE jobs ADD COLUMN tag INTEGER NOT NULL DEFAULT 0;
)sql";

// Version 4: expire()'s index holds only ended jobs (partial, state >= 4), so
// a job's accept and start no longer touch it and its end adds one entry
// instead of moving one: two fewer b-tree changes per durable job on the
// writer thread (writer.h, W8; docs/benchmarks.md, "Store"). expire()'s
// statements say `state >= 4` in those words, which is what lets SQLite use a
// partial index.
constexpr const char* kStep4 = R"sql(
DROP INDEX jobs_by_state_ended;
CREATE INDEX jobs_ended ON jobs (ended_unix_ms) WHERE state >= 4;
)sql";

// Version 5: the unique index on jobs (seq) goes. It cost every accept an
// index insert on the writer thread (~0.3 us of ~2.4 us of SQL per durable
// job, docs/benchmarks.md, "Store"), and only two reads at open() used it:
// the pending jobs in seq order (J7: now sorted after the scan that walked
// the whole index anyway) and max(seq) (a scan; open() has just run
// quick_check over every page). seq keeps its meaning: the writer alone gives
// it, increasing (W1), so it stays unique without the index.
constexpr const char* kStep5 = R"sql(
DROP INDEX jobs_by_seq;
)sql";

// Version 6: a job's end is a row of its own, in `ends`, instead of an
// UPDATE of its jobs row (writer.h, W7, W8, W13). The UPDATE rewrote the row
// (it grows by the output: SQLite deletes and re-inserts the cell) and added
// an entry to jobs_ended; an INSERT into `ends` appends (ids end roughly in
// order) and sixteen ends go in one statement. A raw SQLite loop of the
// daemon's Stream pattern (100 accepts and the previous 100 ends per
// commit, synchronous=FULL) spent 2.9 us of CPU per job with the UPDATE and
// 2.1 with the ends rows (docs/benchmarks.md, "Store").
//  - ends: the final state, output, message, end time and the attempt of
//    the start folded into the end (W7; 0 if none). A job has a row there
//    exactly when it has ended; its jobs row then keeps what it had before
//    the end (never read: job_view prefers the end).
//  - ends_by_time: expire() finds ended jobs by their end time, as
//    jobs_ended did, which goes.
//  - job_view: a job as one row, what every read selects: the end's columns
//    when it has one, attempt the larger of the two.
//  - Ended jobs of an older file move their end into ends; their jobs row
//    drops its copy of the output and message.
constexpr const char* kStep6 = R"sql(
CREATE TABLE ends (
  id INTEGER PRIMARY KEY,
  state INTEGER NOT NULL,
  output BLOB NOT NULL,
  message TEXT NOT NULL,
  ended_unix_ms INTEGER NOT NULL,
  attempt INTEGER NOT NULL
);
CREATE INDEX ends_by_time ON ends (ended_unix_ms);
INSERT INTO ends (id, state, output, message, ended_unix_ms, attempt)
  SELECT id, state, output, message, ended_unix_ms, attempt FROM jobs WHERE state >= 4;
UPDATE jobs SET output = x'', message = '' WHERE state >= 4;
DROP INDEX jobs_ended;
CREATE VIEW job_view AS
  SELECT j.id AS id, j.seq AS seq, j.handler AS handler, j.payload AS payload,
         j.idempotency_key AS idempotency_key, j.lane AS lane, j.timeout_ms AS timeout_ms,
         j.accepted_unix_ms AS accepted_unix_ms, j.not_before_unix_ms AS not_before_unix_ms,
         max(j.attempt, coalesce(e.attempt, 0)) AS attempt, j.max_attempts AS max_attempts,
         j.backoff_base_ms AS backoff_base_ms, j.backoff_cap_ms AS backoff_cap_ms,
         coalesce(e.state, j.state) AS state, coalesce(e.output, j.output) AS output,
         coalesce(e.message, j.message) AS message,
         coalesce(e.ended_unix_ms, j.ended_unix_ms) AS ended_unix_ms, j.tag AS tag
  FROM jobs j LEFT JOIN ends e ON e.id = j.id;
)sql";

constexpr const char* kStep2 = R"sql(
CREATE TABLE attempt_messages (
  seq INTEGER PRIMARY KEY,
  job_id INTEGER NOT NULL,
  message TEXT NOT NULL
);
CREATE INDEX attempt_messages_by_job ON attempt_messages (job_id, seq);
CREATE INDEX jobs_by_state_ended ON jobs (state, ended_unix_ms);
INSERT INTO attempt_messages (job_id, message)
  SELECT id, message FROM jobs WHERE state >= 4 ORDER BY seq;
)sql";

}  // namespace

std::string_view schema_step_sql(int version) noexcept {
  static_assert(kSchemaVersion == 6, "a new schema version needs its step here");
  switch (version) {
    case 1:
      return kStep1;
    case 2:
      return kStep2;
    case 3:
      return kStep3;
    case 4:
      return kStep4;
    case 5:
      return kStep5;
    case 6:
      return kStep6;
    default:
      return {};
  }
}

namespace detail {

namespace {

std::string uid_text() {
  return std::to_string(static_cast<unsigned long>(geteuid()));
}

}  // namespace

Status check_directory(const std::string& path) {
  std::string dir = std::filesystem::path(path).parent_path().string();
  if (dir.empty()) dir = ".";
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) {
    const int err = errno;
    return Status::IoError("the store directory " + dir + " (of " + path + ") cannot be used: " +
                           std::strerror(err) + ": create it, writable by this user (uid " +
                           uid_text() + "), or set [store] path to a file in another directory");
  }
  if (!S_ISDIR(st.st_mode)) {
    return Status::IoError("the store directory " + dir + " (of " + path +
                           ") is not a directory: set [store] path to a file in a directory");
  }
  if (::access(dir.c_str(), W_OK | X_OK) != 0) {
    return Status::IoError("the store directory " + dir + " is not writable by this user (uid " +
                           uid_text() + "): SQLite creates " + path +
                           "-wal and -shm beside the file; chown it or make it writable, or set "
                           "[store] path to a file in a directory this user can write");
  }
  if (::access(path.c_str(), F_OK) == 0 && ::access(path.c_str(), R_OK | W_OK) != 0) {
    return Status::IoError("the store file " + path + " is not readable and writable by this " +
                           "user (uid " + uid_text() + "): chown it to this user, or set " +
                           "[store] path to another file");
  }
  return Status::Ok();
}

namespace {

// The first row of a one-column pragma as text ("ok", "wal").
int pragma_text(const Db& db, const char* pragma, std::string& out) {
  Stmt s;
  int rc = s.prepare(db, pragma);
  if (rc != SQLITE_OK) return rc;
  StmtScope scope(s);
  rc = scope->step();
  if (rc == SQLITE_ROW) {
    out = scope->bytes(0);
    return SQLITE_OK;
  }
  return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

Result<Db> open_connection(const std::string& path, int flags, const char* what) {
  sqlite3* raw = nullptr;
  const int rc = sqlite3_open_v2(path.c_str(), &raw, flags | SQLITE_OPEN_NOMUTEX, nullptr);
  Db db(raw);  // closed on every error path; sqlite3_open_v2 may allocate one even then
  if (rc != SQLITE_OK) return file_error(path, what, rc, db.errmsg());
  sqlite3_extended_result_codes(db.get(), 1);
  sqlite3_busy_timeout(db.get(), kBusyTimeoutMs);
  return db;
}

// Applies steps from+1 .. kSchemaVersion in one transaction: a failed step
// leaves the file as it was (version `from`).
Status migrate(Db& db, const std::string& path, std::int64_t from) {
  auto fail = [&](int step, int rc, const std::string& msg) {
    db.exec("ROLLBACK");
    // The file's content disagreeing with a step (an object of the same name,
    // a row breaking a constraint) is the file's problem; anything else is
    // the disk's or the system's (file_error sorts those).
    const int primary = rc & 0xff;
    if (primary != SQLITE_ERROR && primary != SQLITE_CONSTRAINT && primary != SQLITE_MISMATCH) {
      return file_error(path, "migrate its schema", rc, msg);
    }
    return Status::Corruption("migrating the store file " + path + " from schema version " +
                              std::to_string(from) + " to " + std::to_string(kSchemaVersion) +
                              " failed at step " + std::to_string(step) + " (SQLite: " + msg +
                              "); the file was left at version " + std::to_string(from) +
                              " (the migration is one transaction): restore it from a backup, "
                              "or move it aside to start an empty journal");
  };
  int rc = db.exec("BEGIN IMMEDIATE");
  if (rc != SQLITE_OK) return file_error(path, "begin its migration", rc, db.errmsg());
  // Read again under the write lock: another process may have migrated it.
  std::int64_t now = 0;
  rc = db.query_int("PRAGMA user_version", now);
  if (rc != SQLITE_OK) return fail(0, rc, db.errmsg());
  for (std::int64_t v = now + 1; v <= kSchemaVersion; ++v) {
    const std::string sql(schema_step_sql(static_cast<int>(v)));
    rc = db.exec(sql.c_str());
    if (rc != SQLITE_OK) return fail(static_cast<int>(v), rc, db.errmsg());
  }
  const std::string set = "PRAGMA user_version = " + std::to_string(kSchemaVersion);
  rc = db.exec(set.c_str());
  if (rc != SQLITE_OK) return fail(kSchemaVersion, rc, db.errmsg());
  rc = db.exec("COMMIT");
  if (rc != SQLITE_OK) return fail(kSchemaVersion, rc, db.errmsg());
  return Status::Ok();
}

}  // namespace

Status file_error(const std::string& path, const char* what, int rc, const std::string& errmsg) {
  const std::string said = " (SQLite: " + errmsg + ")";
  if (is_corruption(rc)) {
    return Status::Corruption(
        "the store file " + path + " is not a usable SQLite database: could not " + what + said +
        "; tpoold will not start over it: restore it from a backup, or move it (with its -wal "
        "file) aside to start an empty journal, losing the jobs it held");
  }
  switch (rc & 0xff) {
    case SQLITE_FULL:
      return Status::IoError("could not " + std::string(what) + " the store file " + path +
                             ": the disk is full" + said +
                             "; free space on its filesystem, or set [store] path to another one");
    case SQLITE_CANTOPEN:
    case SQLITE_READONLY:
    case SQLITE_PERM:
    case SQLITE_AUTH:
      return Status::IoError("could not " + std::string(what) + " the store file " + path + said +
                             ": check that this user (uid " + uid_text() +
                             ") can read and write it, its -wal and -shm files and its directory, "
                             "or set [store] path");
    default:
      return Status::IoError("could not " + std::string(what) + " the store file " + path + said +
                             ": check the disk and the file");
  }
}

// A new journal is created 0600 before SQLite opens it: it holds payloads
// and outputs, and SQLite gives the -wal and -shm files the database's mode
// (its own default would be 0644 less the umask).
Status create_private(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd >= 0) {
    ::close(fd);
    return Status::Ok();
  }
  const int err = errno;
  if (err == EEXIST) return Status::Ok();  // there already: checked as it is
  return Status::IoError("could not create the store file " + path + ": " + std::strerror(err) +
                         ": check that this user (uid " + uid_text() +
                         ") can write its directory, or set [store] path");
}

Result<Db> open_write_connection(const std::string& path) {
  if (Status s = check_directory(path); !s.ok()) return s;
  if (Status s = create_private(path); !s.ok()) return s;
  auto opened = open_connection(path, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, "open");
  if (!opened.ok()) return opened.status();
  Db db = std::move(opened).value();
  if (sqlite3_db_readonly(db.get(), "main") == 1) {
    return Status::IoError("the store file " + path + " opened read-only: make it (and its -wal " +
                           "and -shm files) writable by this user (uid " + uid_text() +
                           "), or set [store] path to another file");
  }

  // The first read of the file: a file that is not a database fails here.
  std::int64_t version = 0;
  int rc = db.query_int("PRAGMA user_version", version);
  if (rc != SQLITE_OK) return file_error(path, "read its header", rc, db.errmsg());
  if (version > kSchemaVersion) {
    return Status::FailedPrecondition(
        "the store file " + path + " has schema version " + std::to_string(version) +
        ", written by a newer tpoold; this build knows versions up to " +
        std::to_string(kSchemaVersion) +
        " and will not change the file: run the newer tpoold, "
        "or set [store] path to another file");
  }
  if (version < 0) {
    return Status::Corruption("the store file " + path + " has schema version " +
                              std::to_string(version) +
                              ", which no tpoold writes: restore it from a backup, or move it "
                              "aside to start an empty journal");
  }
  if (version == 0) {
    std::int64_t objects = 0;
    rc = db.query_int("SELECT count(*) FROM sqlite_schema", objects);
    if (rc != SQLITE_OK) return file_error(path, "read its schema", rc, db.errmsg());
    if (objects > 0) {
      return Status::FailedPrecondition(
          "the store file " + path + " is a SQLite database but not a tpoold journal (it has " +
          std::to_string(objects) +
          " tables or indexes and schema version 0); tpoold will not write into it: set [store] "
          "path to another file");
    }
  }

  // PRAGMA quick_check: every page and b-tree structure, without
  // integrity_check's cross-check of each index against its table, which would
  // make every start O(rows x indexes); what it misses (an index entry out of
  // step with its row) SQLite reports as SQLITE_CORRUPT when a query reaches it.
  std::string check;
  rc = pragma_text(db, "PRAGMA quick_check(1)", check);
  if (rc != SQLITE_OK) return file_error(path, "check it", rc, db.errmsg());
  if (check != "ok") {
    return Status::Corruption("the store file " + path + " failed PRAGMA quick_check (" + check +
                              "); tpoold will not start over it: restore it from a backup, or "
                              "move it (with its -wal file) aside to start an empty journal, "
                              "losing the jobs it held");
  }

  std::string mode;
  rc = pragma_text(db, "PRAGMA journal_mode = WAL", mode);
  if (rc != SQLITE_OK) return file_error(path, "switch to WAL mode", rc, db.errmsg());
  if (mode != "wal") {
    return Status::IoError("the store file " + path + " could not be put in WAL mode (it stayed " +
                           mode + "): its filesystem must support shared memory (mmap) and " +
                           "locks; set [store] path to a file on a local filesystem");
  }
  // (J1) With WAL, FULL fsyncs the WAL at every COMMIT: a commit that returned
  // survives a power cut. NORMAL would not (it syncs only at checkpoints).
  rc = db.exec("PRAGMA synchronous = FULL");
  if (rc != SQLITE_OK) return file_error(path, "set synchronous=FULL on", rc, db.errmsg());

  if (version < kSchemaVersion) {
    if (Status s = migrate(db, path, version); !s.ok()) return s;
  }
  return db;
}

Result<Db> open_read_connection(const std::string& path) {
  return open_connection(path, SQLITE_OPEN_READONLY, "open for reading");
}

}  // namespace detail
}  // namespace tpool::store
