// tpool::store::Journal: the durable record of accepted jobs (issue 17), an
// embedded SQLite 3 database in WAL mode.
//
// The journal knows jobs as plain records (JobRecord below), not as the
// engine's Job objects: the engine depends on the store, never the reverse
// (docs/architecture.md, "Arrows"). It is standard C++ plus libsqlite3.
//
// What it promises (numbered, cited in journal.cc and by the engine):
//  (J1) Durability: a record appended with append_accepted() is on disk
//       (COMMIT with synchronous=FULL returned, so the WAL was fsync'd) before
//       its Committed callback runs with an ok Status. A caller acknowledges
//       a durable job to its client only from that callback.
//  (J2) Group commit: one writer thread owns the write connection. It takes
//       every queued write (accepts, starts, ends, retries, removals) at once,
//       up to max_batch records, applies them in one transaction and commits
//       once: one fsync for the whole group. Writes nobody waits for (no
//       Committed callback) may wait up to options.linger for company. No caller thread ever
//       touches the disk for a write; append_*() only enqueue (a mutex and a vector push) and
//       return.
//  (J3) Order: writes are applied in the order their append_*() calls took
//       the queue's lock. A start or end appended after its job's accept is
//       applied after it (possibly in the same transaction).
//  (J4) Callbacks run on the writer thread, after COMMIT (or after the
//       transaction failed, with the error), in append order, with no lock of
//       the journal held: they must not block on the journal's own
//       completions (a flush() from a callback deadlocks).
//  (J5) Failure: a failed transaction is rolled back; every write in it gets
//       the error (IoError naming the file and SQLite's message; disk full
//       says so). The journal stays usable: the next group tries again.
//       healthy() is false from a failed commit until a commit succeeds.
//  (J6) Ids: next_id_floor() is one more than the largest id ever
//       appended, so ids handed out after a restart never repeat one from
//       before, even of a job since deleted. open() takes the larger of the
//       largest id in the file + 1 and meta's floor, which expire() raises to
//       that in its own transaction before it deletes a row (rows leave only
//       there): no accept pays for a write of the floor.
//  (J7) Recovery: open() reads the pending jobs (accepted, not ended: states
//       kQueued, kScheduled, kRunning) in acceptance order (the order their
//       accepts were applied), for the engine to replay.
//  (J8) Reads (get, find_key, list, pending, stats) use their own connection
//       and see every committed transaction; they never wait for the writer.
//  (J9) Incarnations: each open() claims the next incarnation number (a new
//       file a random one in [1, kIncarnationMask], then one more each open,
//       wrapping, never 0) and commits it before returning, so two opens of one file never share
//       one, whether or not the first accepted a job. The engine puts it in the top bits of its job
//       ids (engine.h, JobId): ids are unique across restarts.
//  (J10) One process at a time: open() takes an exclusive flock on PATH.lock
//       (created beside the file, holding the pid) before it writes anything,
//       and the Journal holds it until destroyed. A second open of the same
//       path, from this process or another, is refused (kFailedPrecondition,
//       naming the holder's pid): two daemons on one store would each replay
//       the other's pending jobs. The kernel drops the lock when the process
//       dies, so a crash never leaves the store locked.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tpool/common/status.h"

namespace tpool::store {

// A job's state as the journal stores it (the integer is the on-disk value:
// append only, never renumber).
enum class RecordState : std::uint8_t {
  kQueued = 1,     // accepted, waiting for a worker (or for its retry's backoff)
  kScheduled = 2,  // accepted, not to run before not_before_unix_ms
  kRunning = 3,    // an attempt started (a restart replays it: at-least-once)
  kSucceeded = 4,
  kFailed = 5,
  kCancelled = 6,
  kTimedOut = 7,
};
bool is_final(RecordState s) noexcept;  // kSucceeded .. kTimedOut
std::string_view to_string(RecordState s) noexcept;

// One job as the journal keeps it. Times are wall-clock milliseconds since
// the Unix epoch (they must mean the same thing after a restart); 0 = none.
struct JobRecord {
  std::uint64_t id = 0;
  std::string handler;
  std::string payload;
  std::string idempotency_key;  // empty: none
  std::vector<std::pair<std::string, std::string>> labels;
  std::uint32_t lane = 0;        // the engine's lane value, opaque here
  std::uint64_t timeout_ms = 0;  // the request's own limit, 0 = none
  std::int64_t accepted_unix_ms = 0;
  std::int64_t not_before_unix_ms = 0;  // delayed / backoff: run at or after
  std::uint32_t attempt = 0;            // attempts started so far
  std::uint32_t max_attempts = 1;       // >= 1
  std::uint32_t backoff_base_ms = 0;
  std::uint32_t backoff_cap_ms = 0;
  std::uint64_t tag = 0;  // the client's correlation tag (a Stream's), opaque here
  RecordState state = RecordState::kQueued;
  // When final: the outcome. attempt_messages holds every ended attempt's
  // message, oldest first (a retried job's history); an end with an empty
  // message leaves none.
  std::string output;
  std::string message;
  std::vector<std::string> attempt_messages;
  std::int64_t ended_unix_ms = 0;
};

struct JournalOptions {
  std::string path;              // the database file; its directory must exist and be writable
  std::size_t max_batch = 1024;  // records per transaction at most (J2)
  // How long the writer waits for more when nothing queued is waited for
  // (no Committed callback, no flush()), so such writes share the next
  // waited-for commit (writer.h, W6); 0: commit at once.
  std::chrono::microseconds linger{2000};
  // Ended jobs are deleted this long after they ended (expire()).
  std::chrono::milliseconds retention{300000};
};

// A filter for list(): empty fields match everything.
struct ListFilter {
  std::vector<RecordState> states;  // any of these
  std::string handler;
  std::string label_key, label_value;  // a label with this key (and value, if not empty)
  std::uint64_t after_id = 0;          // paging: ids greater than this
  std::size_t limit = 100;
};

struct JournalStats {
  std::uint64_t commits = 0;            // successful transactions
  std::uint64_t records_committed = 0;  // writes in them
  std::uint64_t commit_errors = 0;      // failed transactions
  std::uint64_t file_bytes = 0;         // database + WAL on disk
  std::uint64_t pending = 0;            // jobs not final (queued, scheduled, running)
  std::uint64_t scheduled = 0;          // of which kScheduled
  std::uint64_t expired = 0;            // ended jobs deleted by retention, ever
  // The last commits' latencies (seconds) and sizes since the previous call,
  // for the metrics exporter's histograms (drained by take_commit_samples()).
};

struct CommitSample {
  double seconds;         // the writer's time applying the transaction and committing it
                          // (BEGIN to COMMIT returned, less any linger in between: writer.h, W10)
  std::uint32_t records;  // writes in the transaction
};

class Journal {
 public:
  using Committed = std::function<void(const Status&)>;

  // Opens (creating if absent) the database at options.path, checks it and
  // migrates its schema to the current version, reads the pending jobs and
  // the id floor, and starts the writer thread. Errors, each naming the file
  // and what to do: the directory missing or not writable (kIoError); not a
  // database or failing PRAGMA quick_check (kCorruption: integrity_check
  // less its index-against-table cross-check, which would make every start
  // O(rows x indexes); schema.cc); a schema
  // version newer than this build knows (kFailedPrecondition); the store in
  // use by another open (kFailedPrecondition, J10). It never starts fresh
  // over a file it cannot read.
  static Result<std::unique_ptr<Journal>> open(JournalOptions options);

  ~Journal();  // flushes what is queued, stops the writer, closes
  Journal(const Journal&) = delete;
  Journal& operator=(const Journal&) = delete;

  // (J7) Jobs accepted and not ended when open() read the file, in
  // acceptance order. Read once by the engine at start.
  const std::vector<JobRecord>& recovered() const noexcept;
  // (J6)
  std::uint64_t next_id_floor() const noexcept;
  // (J9) This open's incarnation, in [1, kIncarnationMask].
  std::uint32_t incarnation() const noexcept;

  // Writes (J2-J5). Each enqueues and returns at once; done (may be empty)
  // runs on the writer thread after the write's transaction.
  // A new job (its whole record, state kQueued or kScheduled).
  void append_accepted(std::vector<JobRecord> jobs, Committed done);
  // An attempt began: state kRunning, attempt = the attempt's number (1-based).
  void append_started(std::uint64_t id, std::uint32_t attempt);
  // An attempt ended and the job will run again at not_before_unix_ms (a
  // retry): state back to kQueued (kScheduled if not_before is in the
  // future), attempt's message appended to attempt_messages.
  void append_retry(std::uint64_t id, std::int64_t not_before_unix_ms, std::string message);
  // The job ended: final state, output, message (appended to
  // attempt_messages too, unless empty: writer.h, W8), ended_unix_ms.
  void append_ended(std::uint64_t id, RecordState final_state, std::string output,
                    std::string message, std::int64_t ended_unix_ms, Committed done = {});
  // A final job made runnable again (Retry of a dead letter): state kQueued,
  // attempt and max_attempts as given, output/message cleared, history kept.
  void append_requeued(std::uint64_t id, std::uint32_t attempt, std::uint32_t max_attempts,
                       Committed done = {});
  // Blocks until everything appended before the call is committed (or
  // failed); its Status is the first failure among them. A failure is
  // reported by one flush(): the first one called after the failed write was
  // appended (a later flush() does not report it again; the write's own
  // callback and healthy() did). Called from a Committed callback it would
  // deadlock (J4), so there it returns kFailedPrecondition at once instead.
  Status flush();

  // Reads (J8).
  std::optional<JobRecord> get(std::uint64_t id) const;
  std::optional<JobRecord> find_key(std::string_view idempotency_key) const;
  std::vector<JobRecord> list(const ListFilter& filter) const;

  // Deletes ended jobs whose ended_unix_ms + retention <= now_unix_ms.
  // Enqueued as a write (J2); returns at once.
  void expire(std::int64_t now_unix_ms);

  bool healthy() const noexcept;  // (J5)
  JournalStats stats() const;
  std::vector<CommitSample> take_commit_samples();
  const std::string& path() const noexcept;

  // For tests (J5): the next n transactions fail at COMMIT as if the disk had
  // refused the write (SQLITE_IOERR, or SQLITE_FULL with disk_full): they are
  // rolled back through the same path as a real failure.
  void inject_commit_failures_for_testing(int n, bool disk_full = false);
  // For tests (writer.h, W9 and W12): how many times an append_*() call has
  // woken the writer thread so far.
  std::uint64_t writer_wakes_for_testing() const;

 private:
  struct Impl;
  explicit Journal(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The incarnations' range (J9): 23 bits. The engine puts an incarnation in
// the top 24 bits of a job id (JobId), and the journal keeps ids as SQLite
// integers (signed 64-bit): the top bit must stay 0.
inline constexpr std::uint32_t kIncarnationMask = (std::uint32_t{1} << 23) - 1;

// The schema version this build writes (PRAGMA user_version).
inline constexpr int kSchemaVersion = 6;

// The SQL that takes a file from schema version - 1 to version (1: the first
// schema, from an empty file), for 1 <= version <= kSchemaVersion; empty
// otherwise. Each step is history: it is never edited once released, a change
// is a new step (docs/store.md). Tests build a version 1 file with it.
std::string_view schema_step_sql(int version) noexcept;

}  // namespace tpool::store
