// The journal's write side: the queue, the writer thread and group commit
// (J2-J5). journal.h has the promises; these are the rules that keep them,
// cited in writer.cc.
//
//  (W1) The write connection, its statements and next_seq_ belong to the
//       writer thread: Journal::open prepares them before start(), the thread
//       alone uses them after, and they are finalized after join(). They need
//       no lock, and no other thread may touch them.
//  (W2) queue_ holds the writes in ticket order. A ticket is given under mu_
//       when a write is appended, so ticket order is the order the append_*()
//       calls took the lock (J3). The writer takes a prefix of the queue (the
//       whole queue when it holds at most max_batch records) and applies it
//       in one transaction, in queue order: transactions follow ticket order
//       and so does every write inside one.
//  (W3) completed_ is the last ticket whose transaction has ended (committed
//       or rolled back) and whose callbacks have run; it only grows, and
//       flush() waits on it. The writer holds no lock while it runs SQL or
//       callbacks (J4); mu_ is held only to append, take, account and wake.
//  (W4) flush_floor_ is the first ticket no flush() has claimed yet: each
//       flush() claims [flush_floor_, its last ticket] and reports the first
//       failure in that range. failures_ holds, in ticket order, the ticket
//       ranges of failed groups and the tickets of writes refused alone,
//       from the lowest ticket some flush() may still claim or is waiting
//       for; past kMaxFailures the oldest are dropped (a flush() then reports
//       a later failure of its range, still not Ok).
//  (W5) The figures (commits, records, errors, pending, scheduled, expired,
//       samples) change only in the writer, under mu_, once a transaction's
//       outcome is known and before its callbacks run; healthy_ too (J5), so
//       a callback that gets an error already sees healthy() false.
//  (W6) Linger: when nothing queued is waited for (no write has a Committed
//       callback: the engine's start, retry and end records, expiry) and no
//       flush() waits, the writer waits up to `linger` for more before it
//       commits, so those writes ride in the next waited-for commit (the
//       next accept) instead of costing an fsync of their own: a client
//       submitting one durable job at a time pays one fsync per job, not
//       three. waited_ counts the queued writes with a callback; a write
//       with one, a flush(), max_batch records queued or stop() ends the
//       linger at once. A write nobody waits for is durable up to `linger`
//       later than without it; the engine's lifecycle records tolerate that
//       (durable.cc, D3: a crash replays the job, at-least-once).
//  (W7) Folding: a job's start and its end in one group (the common case: a
//       short job's two records ride the same commit, W6) are applied as one
//       write, the end's row in `ends`, which also carries the start's
//       attempt (job_view shows the larger of the job's and the end's); the
//       start is skipped. Only when nothing else of that job (a retry, a
//       requeue, another start) lies between them in the group. The group is
//       one transaction, so the file after its commit reads the same as with
//       both applied; the figures too (the start changes neither pending nor
//       scheduled: running is as pending as queued).
//  (W8) A start or an end first tries the statement that assumes the job is
//       queued or running (`... state IN (1, 3)`, and for a start no end
//       recorded; for an end, an end already there is ignored), the common
//       case; only when it changes no row does the writer read the job's
//       state (unknown, ended, or scheduled: job_view) and take the general
//       path. An end with an empty message adds no row to attempt_messages
//       (a history entry that says nothing; the engine's own history of a
//       job has none either).
//  (W9) append() wakes the writer only when its write can end one of the
//       writer's waits: the writer waits for work (idle_, not while it
//       settles after a commit: W12) and the queue was empty; or the write
//       is waited for, or fills the group to max_batch, or brings kPreApply
//       records to apply (the linger's predicate, W10).
//       stop() and flush() notify for the rest of those predicates. Any other
//       wake-up would find its wait's predicate still false and sleep again:
//       a futex call and a context switch per start and end record, during
//       the linger, on a 2-core machine.
//  (W10) Applying while lingering: when kPreApply records nobody waits for
//       are queued during the linger, the writer takes them into the group,
//       opens the group's transaction (BEGIN) if it is not open yet and
//       applies them, then lingers on until the same deadline. The waited-for
//       write that ends the linger then finds the transaction holding the
//       others' work and pays only for its own and the fsync: a Stream's
//       accept no longer waits for the previous message's hundred end
//       records. Still one transaction per group (J2), in ticket
//       order (W2), max_batch records at most; an error while applying fails
//       the whole group as before (J5) and ends the pre-applying. A
//       CommitSample's seconds count the time spent applying and
//       committing, not the lingering in between.
//  (W11) Rows of an accept go in kInsertRows at a time: one multi-row
//       INSERT binds kInsertRows jobs, the rest go one by one (the
//       single-row statement), in the accept's order, so seq still follows
//       it (J7). One statement step for sixteen rows saves SQLite's
//       per-statement work (~0.3 us of ~0.8 us per row, docs/benchmarks.md,
//       "Store"). A constraint failure inside a chunk cannot say which row:
//       the accept is rolled back to its savepoint and applied again one row
//       at a time, which names the job (a caller's bug, never the hot path).
//  (W12) Settling after a commit: when linger is on, the writer that has
//       just ended a group waits up to `linger` for the next write without
//       setting idle_, so by W9 a write nobody waits for (a job's start
//       record, the first write after an accept's commit when one job runs
//       at a time) queues without waking it; a group whose first write came
//       in that wait lingers only until the wait's end, not `linger` past
//       that write, so W6's bound holds (each write is committed at most
//       `linger` after it was appended). Anything W9 wakes for (a waited
//       write, a full group, a chunk to pre-apply, flush(), stop()) ends the
//       wait as before. Past it with nothing queued, the writer waits as
//       idle_ (W9). One timed wake-up per burst of traffic, against a futex
//       wake and a context switch per job that the start record cost.
//
//  (W13) Ends in a row go together (schema 6: an end is a row of `ends`,
//       not an UPDATE of the job's row): a run of ends of a final state,
//       with only folded starts (W7) between them, goes into `ends` in one
//       INSERT of up to kEndRows rows, each row checked by a join with jobs
//       (queued or running, as W8's statement). A row that fails the check
//       (an unknown or scheduled job: its state comes out NULL) or that is
//       already there (the primary key) makes SQLite abort the statement,
//       which undoes all of its rows and leaves the transaction open; the
//       run is then applied write by write (W8 and the general path), which
//       names the refused ones as before. Ends of different jobs commute, so
//       inserting a run's rows before their history entries changes nothing
//       a reader can see; a job's own writes keep their order (W2).
// The wake is a plain condition variable: the writer waits on work_cv_ with
// mu_ held until the queue is not empty or stop() was called; append() pushes
// and notifies under the same mutex, so a push between the writer's check and
// its wait cannot be missed (the wait releases mu_ atomically).
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "sqlite.h"
#include "tpool/common/mutex.h"
#include "tpool/store/journal.h"

namespace tpool::store::detail {

// One queued write: the arguments of one append_*() call.
struct Write {
  enum class Kind : std::uint8_t { kAccepted, kStarted, kRetry, kEnded, kRequeued, kExpire };
  Kind kind = Kind::kAccepted;
  std::uint64_t ticket = 0;     // (W2)
  std::vector<JobRecord> jobs;  // kAccepted
  std::uint64_t id = 0;
  std::uint32_t attempt = 0;       // kStarted, kRequeued; kEnded: its folded start's (W7), or 0
  bool folded = false;             // kStarted: applied by its end (W7), skipped
  std::uint32_t max_attempts = 0;  // kRequeued
  // kRetry: not_before; kEnded: ended_unix_ms; kExpire: the cutoff (ended at
  // or before it: gone).
  std::int64_t at_unix_ms = 0;
  RecordState state = RecordState::kQueued;  // kRetry: kQueued/kScheduled; kEnded: final
  std::string output, message;
  Journal::Committed done;

  // What counts against max_batch: an accept of n jobs is n records.
  std::size_t records() const noexcept {
    return kind == Kind::kAccepted && jobs.size() > 1 ? jobs.size() : 1;
  }
};

class Writer {
 public:
  // Keeps at most this many CommitSamples between take_samples() calls,
  // dropping the oldest (picked by hand: a scrape every 15 s at 200 commits/s
  // fits; a Journal nobody scrapes keeps 4096 x 16 bytes).
  static constexpr std::size_t kMaxSamples = 4096;
  static constexpr std::size_t kMaxFailures = 1024;  // (W4), picked by hand
  // (W10) Lingering records applied at once when this many are queued:
  // picked by hand, a few wake-ups per Stream message of 100 jobs.
  static constexpr std::size_t kPreApply = 32;
  // (W11) Jobs per multi-row INSERT: picked by measurement (bench_store and a
  // raw SQLite loop: 10 rows save most of it, 25 little more); 16 x 18
  // parameters stay far below SQLite's limit (32,766).
  static constexpr std::size_t kInsertRows = 16;
  // (W13) Ends per INSERT at most: as kInsertRows (6 parameters a row).
  static constexpr std::size_t kEndRows = 16;

  // next_seq: one more than the largest seq in the file; pending/scheduled:
  // the counts in it (for stats()).
  Writer(Db db, std::string path, std::size_t max_batch, std::chrono::microseconds linger,
         std::int64_t next_seq, std::uint64_t pending, std::uint64_t scheduled);
  ~Writer();  // stop()
  Writer(const Writer&) = delete;
  Writer& operator=(const Writer&) = delete;

  // Prepares the statements (W1); before start().
  Status prepare();
  void start();
  // Applies everything queued, then ends the thread. Idempotent.
  void stop() EXCLUDES(mu_);

  void append(Write w) EXCLUDES(mu_);
  Status flush() EXCLUDES(mu_);
  bool healthy() const noexcept;
  void fill(JournalStats& out) const EXCLUDES(mu_);
  std::vector<CommitSample> take_samples() EXCLUDES(mu_);
  void inject_failures(int n, bool disk_full) EXCLUDES(mu_);
  std::uint64_t wakes() const EXCLUDES(mu_);  // append()'s wake-ups so far (W9)

 private:
  struct Group {
    std::vector<Write> writes;
    std::size_t records = 0;
    bool inject = false, inject_full = false;
  };
  // The figures one transaction changes, applied only if it commits (W5).
  struct Delta {
    std::int64_t pending = 0, scheduled = 0;
    std::uint64_t expired = 0, records = 0;
    void move(int from_state, RecordState to) noexcept;  // from 0: a new job
    void add(const Delta& o) noexcept;
  };
  struct Outcome {
    bool committed = false;
    std::vector<Status> statuses;  // one per write
    Delta delta;
    double seconds = 0;
  };
  // The open transaction of a group being applied (W10), writer thread only.
  struct Txn {
    bool open = false;             // BEGIN ran
    int rc = SQLITE_OK;            // the first error that fails the whole group
    std::vector<Status> statuses;  // one per write applied so far
    Delta delta;
    double seconds = 0;  // spent applying (not lingering)
  };
  struct Failure {
    std::uint64_t first, last;
    Status status;
  };

  void run() EXCLUDES(mu_);
  void take(Group& g) REQUIRES(mu_);
  void account(const Group& g, const Outcome& o) REQUIRES(mu_);
  void prune_failures() REQUIRES(mu_);

  // Writer thread only (W1).
  void apply_range(Group& g, std::size_t from, Txn& t);  // (W10)
  Outcome finish(Group& g, Txn& t);
  static void fold(Group& g, std::size_t from);  // (W7)
  int apply(Write& w, Status& own, Delta& d);
  int apply_accepted(Write& w, Status& own, Delta& d);
  static std::size_t end_run(const Group& g, std::size_t i);  // (W13)
  int apply_ends(Group& g, std::size_t i, std::size_t n, Txn& t);
  int insert_rows(Stmt& stmt, const JobRecord* rs, std::size_t n);  // (W11)
  int insert_extras(const JobRecord& r);  // its labels and attempt messages
  void bind_job(Stmt& s, int first, const JobRecord& r);
  int apply_accepted_rows(const Write& w, bool chunked, Status& own, Delta& mine);
  static void bind_update(Stmt& s, const Write& w);
  int finish(const Write& w, int from, RecordState to, Delta& d);
  int state_of(std::uint64_t id, int& state);
  std::string commit_error(int rc, const std::string& errmsg, std::size_t writes) const;

  const std::string path_;
  const std::size_t max_batch_;
  const std::chrono::microseconds linger_;  // (W6)

  // (W1) The connection first, so the statements are finalized before it
  // closes (members are destroyed in reverse order).
  Db db_;
  Stmt begin_, commit_, rollback_, savepoint_, release_, rollback_to_;
  Stmt insert_job_, insert_jobs_, insert_label_, insert_message_, state_of_;
  Stmt started_, retry_, ended_, requeued_, next_id_;
  Stmt started_live_, ended_live_;  // (W8)
  Stmt unended_;
  Stmt ended_rows_[kEndRows + 1];  // (W13) [n]: n ends; 0 and 1 unused
  Stmt expire_labels_, expire_messages_, expire_jobs_, expire_ends_;
  std::int64_t next_seq_;

  mutable Mutex mu_;
  CondVar work_cv_;     // the writer waits: queue_ not empty, or stopping_
  CondVar flushed_cv_;  // flush() waits: completed_ moved
  std::vector<Write> queue_ GUARDED_BY(mu_);
  std::size_t queued_records_ GUARDED_BY(mu_) = 0;
  std::size_t waited_ GUARDED_BY(mu_) = 0;         // (W6) queued writes with a Committed callback
  bool idle_ GUARDED_BY(mu_) = false;              // (W9) the writer waits for work
  std::uint64_t wakes_ GUARDED_BY(mu_) = 0;        // (W9) append()'s notifies, for tests
  std::size_t group_records_ GUARDED_BY(mu_) = 0;  // (W10) records taken into the open group
  std::uint64_t next_ticket_ GUARDED_BY(mu_) = 1;
  std::uint64_t completed_ GUARDED_BY(mu_) = 0;  // (W3)
  bool stopping_ GUARDED_BY(mu_) = false;
  int inject_left_ GUARDED_BY(mu_) = 0;
  bool inject_full_ GUARDED_BY(mu_) = false;
  std::uint64_t flush_floor_ GUARDED_BY(mu_) = 1;               // (W4)
  std::multiset<std::uint64_t> flush_waiting_ GUARDED_BY(mu_);  // their range starts
  std::deque<Failure> failures_ GUARDED_BY(mu_);
  // (W5)
  std::uint64_t commits_ GUARDED_BY(mu_) = 0;
  std::uint64_t records_committed_ GUARDED_BY(mu_) = 0;
  std::uint64_t commit_errors_ GUARDED_BY(mu_) = 0;
  std::uint64_t pending_ GUARDED_BY(mu_);
  std::uint64_t scheduled_ GUARDED_BY(mu_);
  std::uint64_t expired_ GUARDED_BY(mu_) = 0;
  std::deque<CommitSample> samples_ GUARDED_BY(mu_);
  // (W5) Relaxed: a health flag read for reports; a reader that must see a
  // given commit's effect orders itself through mu_ (flush()) first.
  std::atomic<bool> healthy_{true};

  std::thread thread_;  // started by start(), joined by stop()
};

}  // namespace tpool::store::detail
