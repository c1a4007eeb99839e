// The writer thread and group commit (J2-J5); the rules W1-W12 are in writer.h.
#include "writer.h"

#include <pthread.h>

#include <algorithm>
#include <chrono>
#include <limits>
#include <optional>
#include <unordered_map>
#include <utility>

namespace tpool::store::detail {

namespace {

bool is_constraint(int rc) noexcept {
  return (rc & 0xff) == SQLITE_CONSTRAINT;
}

constexpr auto kMaxId = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());

std::string job_text(std::uint64_t id) {
  return "job " + std::to_string(id);
}

// The columns Writer::bind_job binds, in its order.
constexpr int kJobColumns = 18;

// `rows` rows of `columns` numbered parameters, "(?1, ?2), (?3, ?4)": row
// r's column c is ?(r * columns + c).
std::string parameter_rows(std::size_t rows, int columns) {
  std::string sql;
  int p = 1;
  for (std::size_t r = 0; r < rows; ++r) {
    sql += r == 0 ? "(" : ", (";
    for (int c = 0; c < columns; ++c, ++p) sql += (c == 0 ? "?" : ", ?") + std::to_string(p);
    sql += ")";
  }
  return sql;
}

// An INSERT of `rows` jobs (W11), kJobColumns parameters per row.
std::string insert_sql(std::size_t rows) {
  return "INSERT INTO jobs (id, seq, handler, payload, idempotency_key, lane, timeout_ms, "
         "accepted_unix_ms, not_before_unix_ms, attempt, max_attempts, backoff_base_ms, "
         "backoff_cap_ms, state, output, message, ended_unix_ms, tag) VALUES " +
         parameter_rows(rows, kJobColumns);
}

// (W13) An INSERT of `rows` ends, Writer::bind_update's six parameters per
// row. A row whose job is not queued or running (scheduled, or not in the
// journal) gets a NULL state, which the NOT NULL constraint refuses; an end
// already recorded, the primary key. Either way SQLite aborts the statement
// (ON CONFLICT ABORT, the default): none of its rows stay, and the
// transaction goes on.
std::string ends_sql(std::size_t rows) {
  return "INSERT INTO ends (id, state, output, message, ended_unix_ms, attempt) "
         "SELECT v.column1, CASE WHEN j.state IN (1, 3) THEN v.column2 END, v.column3, "
         "v.column4, v.column5, v.column6 FROM (VALUES " +
         parameter_rows(rows, 6) + ") AS v LEFT JOIN jobs j ON j.id = v.column1";
}

}  // namespace

void Writer::Delta::move(int from_state, RecordState to) noexcept {
  const auto live = [](int s) { return s >= 1 && s <= 3; };  // kQueued..kRunning
  const int t = static_cast<int>(to);
  pending += static_cast<int>(live(t)) - static_cast<int>(live(from_state));
  scheduled += static_cast<int>(t == 2) - static_cast<int>(from_state == 2);
}

void Writer::Delta::add(const Delta& o) noexcept {
  pending += o.pending;
  scheduled += o.scheduled;
  expired += o.expired;
  records += o.records;
}

Writer::Writer(Db db, std::string path, std::size_t max_batch, std::chrono::microseconds linger,
               std::int64_t next_seq, std::uint64_t pending, std::uint64_t scheduled)
    : path_(std::move(path)),
      max_batch_(max_batch),
      linger_(linger),
      db_(std::move(db)),
      next_seq_(next_seq),
      pending_(pending),
      scheduled_(scheduled) {}

Writer::~Writer() {
  stop();
}

Status Writer::prepare() {
  const std::pair<Stmt*, std::string> all[] = {
      // IMMEDIATE: take the write lock at BEGIN, so a busy database fails the
      // group before any of it is applied rather than at its first write.
      {&begin_, "BEGIN IMMEDIATE"},
      {&commit_, "COMMIT"},
      {&rollback_, "ROLLBACK"},
      {&savepoint_, "SAVEPOINT accept"},
      {&release_, "RELEASE accept"},
      {&rollback_to_, "ROLLBACK TO accept"},
      {&insert_job_, insert_sql(1)},
      {&insert_jobs_, insert_sql(kInsertRows)},  // (W11)
      {&insert_label_, "INSERT INTO labels (job_id, pos, key, value) VALUES (?1, ?2, ?3, ?4)"},
      {&insert_message_, "INSERT INTO attempt_messages (job_id, message) VALUES (?1, ?2)"},
      {&state_of_, "SELECT state FROM job_view WHERE id = ?1"},
      {&started_, "UPDATE jobs SET state = 3, attempt = ?2 WHERE id = ?1"},
      {&retry_, "UPDATE jobs SET state = ?2, not_before_unix_ms = ?3 WHERE id = ?1"},
      // (W7) An end without a folded start binds attempt 0; job_view shows
      // the larger of the two attempts.
      {&ended_,
       "INSERT INTO ends (id, state, output, message, ended_unix_ms, attempt) "
       "VALUES (?1, ?2, ?3, ?4, ?5, ?6)"},
      // (W8) The same, when the job is queued or running (not scheduled, not
      // ended: an end already there is the primary key's conflict, ignored,
      // so no row changes and the writer takes the general path).
      {&started_live_,
       "UPDATE jobs SET state = 3, attempt = ?2 WHERE id = ?1 AND state IN (1, 3) "
       "AND NOT EXISTS (SELECT 1 FROM ends WHERE id = ?1)"},
      {&ended_live_,
       "INSERT OR IGNORE INTO ends (id, state, output, message, ended_unix_ms, attempt) "
       "SELECT ?1, ?2, ?3, ?4, ?5, ?6 FROM jobs WHERE id = ?1 AND state IN (1, 3)"},
      {&unended_, "DELETE FROM ends WHERE id = ?1"},
      {&requeued_,
       "UPDATE jobs SET state = 1, attempt = ?2, max_attempts = ?3, output = x'', message = '', "
       "ended_unix_ms = 0 WHERE id = ?1"},
      // (J6) Never decreasing: max() keeps a larger floor already there. Run
      // by expire() before it deletes: rows leave the table only there, so
      // the floor open() computes (this, or the largest id + 1) never falls.
      // Only when it rises, so an idle daemon's expire() writes (and
      // fsyncs) nothing. (SQLite skips an overwrite with identical content
      // anyway; the WHERE says it here rather than relying on that.)
      {&next_id_,
       "UPDATE meta SET value = coalesce((SELECT max(id) FROM jobs), 0) + 1 "
       "WHERE key = 'next_id' AND value < coalesce((SELECT max(id) FROM jobs), 0) + 1"},
      // The ended jobs by their end time (ends_by_time, schema.cc, version
      // 6); their ends rows go last, since the others find the jobs by them.
      {&expire_labels_,
       "DELETE FROM labels WHERE job_id IN (SELECT id FROM ends WHERE ended_unix_ms <= ?1)"},
      {&expire_messages_,
       "DELETE FROM attempt_messages WHERE job_id IN "
       "(SELECT id FROM ends WHERE ended_unix_ms <= ?1)"},
      {&expire_jobs_,
       "DELETE FROM jobs WHERE id IN (SELECT id FROM ends WHERE ended_unix_ms <= ?1)"},
      {&expire_ends_, "DELETE FROM ends WHERE ended_unix_ms <= ?1"},
  };
  const auto lacks = [&] {
    return Status::Corruption("the store file " + path_ + " lacks what schema version " +
                              std::to_string(kSchemaVersion) + " has (SQLite: " + db_.errmsg() +
                              "): restore it from a backup, or move it aside to start an "
                              "empty journal");
  };
  for (const auto& [stmt, sql] : all) {
    if (stmt->prepare(db_, sql) != SQLITE_OK) return lacks();
  }
  for (std::size_t rows = 2; rows <= kEndRows; ++rows) {  // (W13)
    if (ended_rows_[rows].prepare(db_, ends_sql(rows)) != SQLITE_OK) return lacks();
  }
  return Status::Ok();
}

void Writer::start() {
  thread_ = std::thread([this] {
    // Named for top, perf and the tests (which watch it sleep: W10's test).
    pthread_setname_np(pthread_self(), "tpool-journal");
    run();
  });
}

void Writer::stop() {
  {
    MutexLock lk(mu_);
    stopping_ = true;
    work_cv_.notify_one();
  }
  if (thread_.joinable()) thread_.join();
}

void Writer::append(Write w) {
  MutexLock lk(mu_);
  w.ticket = next_ticket_++;  // (W2) the order of the lock is the order of the writes (J3)
  const bool was_empty = queue_.empty();
  const std::size_t w_records = w.records();
  queued_records_ += w_records;
  const bool waited = static_cast<bool>(w.done);
  if (waited) ++waited_;  // (W6)
  queue_.push_back(std::move(w));
  // Under mu_: see the wake in writer.h. Only a write that can end one of
  // the writer's waits is worth a wake-up (W9): its wait for work, or the
  // linger's (waited for, a full group, or a chunk to apply now: W10).
  const bool chunk = queued_records_ >= kPreApply && queued_records_ - w_records < kPreApply;
  if ((idle_ && was_empty) || waited || group_records_ + queued_records_ >= max_batch_ || chunk) {
    ++wakes_;
    work_cv_.notify_one();
  }
}

Status Writer::flush() {
  // (J4) The writer thread waiting for its own completions would never wake.
  if (std::this_thread::get_id() == thread_.get_id()) {
    return Status::FailedPrecondition(
        "Journal::flush() was called from a Committed callback, on the journal's writer thread, "
        "where it would wait for itself: flush from another thread");
  }
  MutexLock lk(mu_);
  const std::uint64_t hi = next_ticket_ - 1;
  const std::uint64_t lo = flush_floor_;  // (W4) this call claims [lo, hi]
  flush_floor_ = std::max(flush_floor_, hi + 1);
  const auto waiting = flush_waiting_.insert(lo);
  work_cv_.notify_one();                         // (W6) a flush ends the writer's linger
  while (completed_ < hi) flushed_cv_.wait(lk);  // (W3)
  Status first;
  for (const Failure& f : failures_) {
    if (f.last >= lo && f.first <= hi) {
      first = f.status;
      break;
    }
  }
  flush_waiting_.erase(waiting);
  prune_failures();
  return first;
}

void Writer::prune_failures() {
  // (W4) No flush() can ask about a failure wholly below both the lowest
  // waiting range and the first unclaimed ticket.
  std::uint64_t keep_from = flush_floor_;
  if (!flush_waiting_.empty()) keep_from = std::min(keep_from, *flush_waiting_.begin());
  while (!failures_.empty() && failures_.front().last < keep_from) failures_.pop_front();
  while (failures_.size() > kMaxFailures) failures_.pop_front();
}

bool Writer::healthy() const noexcept {
  return healthy_.load(std::memory_order_relaxed);  // (W5) a report
}

void Writer::fill(JournalStats& out) const {
  MutexLock lk(mu_);
  out.commits = commits_;
  out.records_committed = records_committed_;
  out.commit_errors = commit_errors_;
  out.pending = pending_;
  out.scheduled = scheduled_;
  out.expired = expired_;
}

std::vector<CommitSample> Writer::take_samples() {
  MutexLock lk(mu_);
  std::vector<CommitSample> out(samples_.begin(), samples_.end());
  samples_.clear();
  return out;
}

std::uint64_t Writer::wakes() const {
  MutexLock lk(mu_);
  return wakes_;
}

void Writer::inject_failures(int n, bool disk_full) {
  MutexLock lk(mu_);
  inject_left_ = n;
  inject_full_ = disk_full;
}

void Writer::run() {
  MutexLock lk(mu_);
  // (W12) Set after a commit: until then the writer waits without idle_, so
  // a write nobody waits for does not wake it; a group begun in that wait
  // lingers only up to it.
  std::optional<std::chrono::steady_clock::time_point> settle;
  for (;;) {
    std::optional<std::chrono::steady_clock::time_point> group_until;
    if (settle) {
      while (queue_.empty() && !stopping_) {
        if (work_cv_.wait_until(lk, *settle) == std::cv_status::timeout) break;
      }
      if (!queue_.empty()) group_until = settle;  // its first write came after the commit
      settle.reset();
    }
    idle_ = true;  // (W9) waiting for work: any append wakes it
    while (queue_.empty() && !stopping_) work_cv_.wait(lk);
    idle_ = false;
    if (queue_.empty()) return;  // stopping, and everything appended is applied
    Group g;
    Txn t;
    if (linger_.count() > 0) {  // (W6)
      const auto until = group_until.value_or(std::chrono::steady_clock::now() + linger_);
      for (;;) {
        if (stopping_ || waited_ > 0 || !flush_waiting_.empty() ||
            group_records_ + queued_records_ >= max_batch_) {
          break;
        }
        if (queued_records_ >= kPreApply && t.rc == SQLITE_OK) {
          // (W10) Apply what lingers now, in the open transaction.
          const std::size_t from = g.writes.size();
          take(g);
          lk.unlock();  // (W3) no lock during SQL
          apply_range(g, from, t);
          lk.lock();
          continue;
        }
        if (work_cv_.wait_until(lk, until) == std::cv_status::timeout) break;
      }
    }
    const std::size_t from = g.writes.size();
    take(g);
    lk.unlock();  // (W3) no lock during SQL
    apply_range(g, from, t);
    const Outcome o = finish(g, t);
    lk.lock();
    account(g, o);
    group_records_ = 0;
    lk.unlock();  // (J4) nor during callbacks
    for (std::size_t i = 0; i < g.writes.size(); ++i) {
      if (g.writes[i].done) g.writes[i].done(o.statuses[i]);
    }
    const std::uint64_t last = g.writes.back().ticket;
    g.writes.clear();  // what the callbacks captured goes before flush() returns
    lk.lock();
    completed_ = last;  // (W3)
    flushed_cv_.notify_all();
    if (linger_.count() > 0) settle = std::chrono::steady_clock::now() + linger_;  // (W12)
  }
}

// Moves the longest prefix of the queue that keeps the group within
// max_batch records (W2) into g; at least one write when g is empty (an accept
// larger than max_batch goes alone: it is never split).
void Writer::take(Group& g) {
  std::size_t n = 0;
  std::size_t records = 0;
  if (g.records + queued_records_ <= max_batch_) {
    n = queue_.size();  // the common case: the whole queue
    records = queued_records_;
  } else {
    while (n < queue_.size()) {
      const std::size_t r = queue_[n].records();
      if ((n > 0 || !g.writes.empty()) && g.records + records + r > max_batch_) break;
      records += r;
      ++n;
    }
  }
  if (n == queue_.size() && g.writes.empty()) {
    g.writes.swap(queue_);  // O(1)
  } else {
    g.writes.insert(g.writes.end(), std::make_move_iterator(queue_.begin()),
                    std::make_move_iterator(queue_.begin() + static_cast<std::ptrdiff_t>(n)));
    queue_.erase(queue_.begin(), queue_.begin() + static_cast<std::ptrdiff_t>(n));
  }
  g.records += records;
  group_records_ = g.records;
  queued_records_ -= records;
  for (auto it = g.writes.end() - static_cast<std::ptrdiff_t>(n); it != g.writes.end(); ++it) {
    waited_ -= it->done ? 1 : 0;  // (W6)
  }
  if (inject_left_ > 0 && !g.inject) {
    --inject_left_;
    g.inject = true;
    g.inject_full = inject_full_;
  }
}

void Writer::account(const Group& g, const Outcome& o) {
  if (o.committed) {
    ++commits_;
    records_committed_ += o.delta.records;
    const auto shift = [](std::uint64_t v, std::int64_t d) {
      const std::int64_t r = static_cast<std::int64_t>(v) + d;
      return r < 0 ? std::uint64_t{0} : static_cast<std::uint64_t>(r);
    };
    pending_ = shift(pending_, o.delta.pending);
    scheduled_ = shift(scheduled_, o.delta.scheduled);
    expired_ += o.delta.expired;
    samples_.push_back({o.seconds, static_cast<std::uint32_t>(
                                       std::min<std::uint64_t>(o.delta.records, UINT32_MAX))});
    if (samples_.size() > kMaxSamples) samples_.pop_front();
    healthy_.store(true, std::memory_order_relaxed);  // (J5) a commit succeeded
    // A write refused alone is a failure for flush() too (W4).
    for (std::size_t i = 0; i < g.writes.size(); ++i) {
      if (!o.statuses[i].ok()) {
        failures_.push_back({g.writes[i].ticket, g.writes[i].ticket, o.statuses[i]});
      }
    }
    prune_failures();
  } else {
    ++commit_errors_;
    healthy_.store(false, std::memory_order_relaxed);  // (J5) until a commit succeeds
    failures_.push_back({g.writes.front().ticket, g.writes.back().ticket, o.statuses.front()});
    prune_failures();
  }
}

std::string Writer::commit_error(int rc, const std::string& errmsg, std::size_t writes) const {
  std::string s = "the store file " + path_ + " could not commit " + std::to_string(writes) +
                  (writes == 1 ? " write" : " writes");
  if ((rc & 0xff) == SQLITE_FULL) {
    return s + ": the disk is full (SQLite: " + errmsg +
           "); they were rolled back and are not durable: free space on its filesystem, or set "
           "[store] path to another one";
  }
  return s + " (SQLite: " + errmsg +
         "); they were rolled back and are not durable: check the disk and the permissions of "
         "the file, its -wal and its directory";
}

// (J2) One transaction for the whole group, opened by its first apply_range
// (W10: possibly while the writer lingers) and ended by finish(); (J5) any
// error that is not one write's own rolls all of it back and fails every write
// in it.
void Writer::apply_range(Group& g, std::size_t from, Txn& t) {
  t.statuses.resize(g.writes.size());
  if (t.rc != SQLITE_OK || from == g.writes.size()) return;
  const auto t0 = std::chrono::steady_clock::now();
  if (!t.open) {
    t.rc = step_all(begin_);
    t.open = t.rc == SQLITE_OK;
  }
  fold(g, from);  // (W7)
  for (std::size_t i = from; t.rc == SQLITE_OK && i < g.writes.size();) {
    if (const std::size_t n = end_run(g, i); n > 0) {  // (W13)
      t.rc = apply_ends(g, i, n, t);
      i += n;
    } else {
      t.rc = apply(g.writes[i], t.statuses[i], t.delta);
      ++i;
    }
  }
  t.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

Writer::Outcome Writer::finish(Group& g, Txn& t) {
  Outcome o;
  o.statuses = std::move(t.statuses);
  o.statuses.resize(g.writes.size());
  const auto t0 = std::chrono::steady_clock::now();
  std::string err;
  int rc = t.rc;
  if (rc == SQLITE_OK && g.inject) {
    rc = g.inject_full ? SQLITE_FULL : SQLITE_IOERR;
    err = "injected by inject_commit_failures_for_testing";
  } else if (rc == SQLITE_OK) {
    rc = step_all(commit_);  // (J1) synchronous=FULL: the WAL is fsync'd before this returns
  }
  if (rc != SQLITE_OK) {
    if (err.empty()) err = db_.errmsg();
    // SQLite may have rolled back already (some I/O errors and SQLITE_FULL do).
    if (sqlite3_get_autocommit(db_.get()) == 0) step_all(rollback_);
    const Status failed = Status::IoError(commit_error(rc, err, g.writes.size()));
    std::fill(o.statuses.begin(), o.statuses.end(), failed);
    return o;
  }
  o.committed = true;
  o.delta = t.delta;
  o.seconds =
      t.seconds + std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return o;
}

// (W7) Marks each start in g.writes[from..] whose end follows in that range,
// with nothing else of its job in between, as folded, and gives its attempt
// to the end. (A start applied by an earlier range of the group is not
// folded: it is already applied.)
void Writer::fold(Group& g, std::size_t from) {
  const auto lifecycle = [](Write::Kind k) {
    return k == Write::Kind::kStarted || k == Write::Kind::kRetry || k == Write::Kind::kEnded ||
           k == Write::Kind::kRequeued;
  };
  std::size_t ends = 0;
  for (std::size_t i = from; i < g.writes.size(); ++i) {
    ends += g.writes[i].kind == Write::Kind::kEnded ? 1 : 0;
  }
  if (ends == 0) return;
  // From the back: next[id] is the index of the job's next lifecycle write.
  std::unordered_map<std::uint64_t, std::size_t> next;
  next.reserve(ends * 2);
  for (std::size_t i = g.writes.size(); i-- > from;) {
    Write& w = g.writes[i];
    if (!lifecycle(w.kind)) continue;
    if (w.kind == Write::Kind::kStarted) {
      const auto it = next.find(w.id);
      if (it != next.end() && g.writes[it->second].kind == Write::Kind::kEnded) {
        w.folded = true;
        g.writes[it->second].attempt = w.attempt;
      }
    }
    next[w.id] = i;
  }
}

// (W13) The length of the run of writes from g.writes[i] whose ends go in one
// statement: ends of a final state, with only folded starts (W7) between
// them, up to kEndRows ends, through the last end; 0 when fewer than two.
std::size_t Writer::end_run(const Group& g, std::size_t i) {
  std::size_t ends = 0, len = 0;
  for (std::size_t k = i; k < g.writes.size() && ends < kEndRows; ++k) {
    const Write& w = g.writes[k];
    if (w.kind == Write::Kind::kStarted && w.folded) continue;
    if (w.kind != Write::Kind::kEnded || !is_final(w.state) || w.id == 0 || w.id > kMaxId) break;
    ++ends;
    len = k - i + 1;
  }
  return ends >= 2 ? len : 0;
}

// (W13) Applies the run g.writes[i, i + n) that end_run() found: its ends in
// one INSERT, then each end's history entry and figures as finish() does
// for one (W8's path: the job was queued or running). If SQLite refused the
// INSERT (some end is not a live job's first), nothing of it stayed, and
// each write of the run is applied alone, which sorts out which.
int Writer::apply_ends(Group& g, std::size_t i, std::size_t n, Txn& t) {
  std::size_t ends = 0;
  for (std::size_t k = i; k < i + n; ++k) ends += g.writes[k].kind == Write::Kind::kEnded ? 1 : 0;
  int rc;
  {
    StmtScope s(ended_rows_[ends]);
    int p = 1;
    for (std::size_t k = i; k < i + n; ++k) {
      const Write& w = g.writes[k];
      if (w.kind != Write::Kind::kEnded) continue;
      s->bind(p, static_cast<std::int64_t>(w.id));
      s->bind(p + 1, static_cast<std::int64_t>(w.state));
      s->bind_blob(p + 2, w.output);
      s->bind_text(p + 3, w.message);
      s->bind(p + 4, w.at_unix_ms);
      s->bind(p + 5, w.attempt);  // (W7)
      p += 6;
    }
    rc = s->step();
  }
  if (rc == SQLITE_DONE) {
    for (std::size_t k = i; k < i + n; ++k) {
      Write& w = g.writes[k];
      if (w.kind != Write::Kind::kEnded) {
        ++t.delta.records;  // a folded start, as apply() counts it
        continue;
      }
      rc = finish(w, static_cast<int>(RecordState::kQueued), w.state, t.delta);
      if (rc != SQLITE_OK) return rc;
    }
    return SQLITE_OK;
  }
  if (!is_constraint(rc)) return rc;
  for (std::size_t k = i; k < i + n; ++k) {
    rc = apply(g.writes[k], t.statuses[k], t.delta);
    if (rc != SQLITE_OK) return rc;
  }
  return SQLITE_OK;
}

int Writer::state_of(std::uint64_t id, int& state) {
  state = 0;
  if (id > kMaxId) return SQLITE_OK;
  StmtScope s(state_of_);
  s->bind(1, static_cast<std::int64_t>(id));
  const int rc = s->step();
  if (rc == SQLITE_ROW) {
    state = static_cast<int>(s->int64(0));
    return SQLITE_OK;
  }
  return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

// Binds r as the row whose first parameter is `first` (kJobColumns of them).
void Writer::bind_job(Stmt& s, int first, const JobRecord& r) {
  s.bind(first, static_cast<std::int64_t>(r.id));
  s.bind(first + 1, next_seq_++);  // (J7) acceptance order; gaps (a rolled-back accept) are fine
  s.bind_text(first + 2, r.handler);
  s.bind_blob(first + 3, r.payload);
  s.bind_text(first + 4, r.idempotency_key);
  s.bind(first + 5, r.lane);
  s.bind(first + 6,
         static_cast<std::int64_t>(r.timeout_ms));  // its bit pattern; decode_job undoes it
  s.bind(first + 7, r.accepted_unix_ms);
  s.bind(first + 8, r.not_before_unix_ms);
  s.bind(first + 9, r.attempt);
  s.bind(first + 10, r.max_attempts);
  s.bind(first + 11, r.backoff_base_ms);
  s.bind(first + 12, r.backoff_cap_ms);
  s.bind(first + 13, static_cast<std::int64_t>(r.state));
  s.bind_blob(first + 14, r.output);
  s.bind_text(first + 15, r.message);
  s.bind(first + 16, r.ended_unix_ms);
  s.bind(first + 17, static_cast<std::int64_t>(r.tag));  // its bit pattern; decode_job undoes it
}

// rs[0 .. n) in one statement (insert_job_ for one row, insert_jobs_ for
// kInsertRows: W11), then their labels and attempt messages.
int Writer::insert_rows(Stmt& stmt, const JobRecord* rs, std::size_t n) {
  {
    StmtScope s(stmt);
    for (std::size_t i = 0; i < n; ++i) {
      bind_job(*s, static_cast<int>(i) * kJobColumns + 1, rs[i]);
    }
    if (s->step() != SQLITE_DONE) return sqlite3_errcode(db_.get());
  }
  for (std::size_t i = 0; i < n; ++i) {
    if (const int rc = insert_extras(rs[i]); rc != SQLITE_OK) return rc;
  }
  return SQLITE_OK;
}

int Writer::insert_extras(const JobRecord& r) {
  const auto id = static_cast<std::int64_t>(r.id);
  for (std::size_t pos = 0; pos < r.labels.size(); ++pos) {
    StmtScope s(insert_label_);
    s->bind(1, id);
    s->bind(2, static_cast<std::int64_t>(pos));
    s->bind_text(3, r.labels[pos].first);
    s->bind_text(4, r.labels[pos].second);
    if (s->step() != SQLITE_DONE) return sqlite3_errcode(db_.get());
  }
  for (const std::string& m : r.attempt_messages) {
    StmtScope s(insert_message_);
    s->bind(1, id);
    s->bind_text(2, m);
    if (s->step() != SQLITE_DONE) return sqlite3_errcode(db_.get());
  }
  return SQLITE_OK;
}

int Writer::apply_accepted(Write& w, Status& own, Delta& d) {
  for (const JobRecord& r : w.jobs) {
    if (r.id == 0 || r.id > kMaxId) {
      own = Status::InvalidArgument(job_text(r.id) + " was not recorded: a journal id is 1 to " +
                                    std::to_string(kMaxId));
      return SQLITE_OK;
    }
    if (r.state != RecordState::kQueued && r.state != RecordState::kScheduled) {
      own = Status::InvalidArgument(job_text(r.id) + " was not recorded: a new job is queued or " +
                                    "scheduled, not " + std::string(to_string(r.state)));
      return SQLITE_OK;
    }
  }
  // A savepoint, so that one accept refused by a constraint (a repeated id or
  // idempotency key: a caller's bug) is undone alone and the group goes on.
  int rc = step_all(savepoint_);
  if (rc != SQLITE_OK) return rc;
  Delta mine;
  rc = apply_accepted_rows(w, true, own, mine);
  if (rc == SQLITE_CONSTRAINT && own.ok()) {
    // (W11) A chunk was refused: again row by row, to name the job.
    rc = step_all(rollback_to_);
    if (rc != SQLITE_OK) return rc;
    mine = Delta{};
    rc = apply_accepted_rows(w, false, own, mine);
  }
  if (!own.ok()) {
    rc = step_all(rollback_to_);
    return rc == SQLITE_OK ? step_all(release_) : rc;
  }
  if (rc != SQLITE_OK) return rc;  // the whole transaction goes
  rc = step_all(release_);
  if (rc != SQLITE_OK) return rc;
  d.add(mine);
  return SQLITE_OK;
}

// The rows of an accept, in its order: chunks of kInsertRows (W11) when
// `chunked`, then one at a time. SQLITE_CONSTRAINT with `own` still Ok: a
// chunk was refused (the caller retries unchunked); `own` set: that row was.
int Writer::apply_accepted_rows(const Write& w, bool chunked, Status& own, Delta& mine) {
  const std::size_t n = w.jobs.size();
  std::size_t i = 0;
  if (chunked) {
    for (; i + kInsertRows <= n; i += kInsertRows) {
      const int rc = insert_rows(insert_jobs_, &w.jobs[i], kInsertRows);
      if (is_constraint(rc)) return SQLITE_CONSTRAINT;
      if (rc != SQLITE_OK) return rc;
    }
  }
  for (; i < n; ++i) {
    const JobRecord& r = w.jobs[i];
    const int rc = insert_rows(insert_job_, &r, 1);
    if (is_constraint(rc)) {
      own = Status::InvalidArgument(job_text(r.id) + " was not recorded, nor the rest of its " +
                                    "accept: the journal already has its id or its idempotency " +
                                    "key (SQLite: " + db_.errmsg() + ")");
      return SQLITE_CONSTRAINT;
    }
    if (rc != SQLITE_OK) return rc;
  }
  for (const JobRecord& r : w.jobs) {
    mine.move(0, r.state);
    ++mine.records;
  }
  return SQLITE_OK;
}

// SQLITE_OK, or an error that fails the whole transaction. A write refused on
// its own (an unknown id, an end after an end) sets `own` and changes nothing.
int Writer::apply(Write& w, Status& own, Delta& d) {
  if (w.kind == Write::Kind::kAccepted) return apply_accepted(w, own, d);
  if (w.kind == Write::Kind::kExpire) {
    {
      StmtScope floor(next_id_);  // (J6) before any row goes
      if (floor->step() != SQLITE_DONE) return sqlite3_errcode(db_.get());
    }
    for (Stmt* s : {&expire_labels_, &expire_messages_}) {
      StmtScope del(*s);
      del->bind(1, w.at_unix_ms);
      if (del->step() != SQLITE_DONE) return sqlite3_errcode(db_.get());
    }
    {
      StmtScope del(expire_jobs_);
      del->bind(1, w.at_unix_ms);
      if (del->step() != SQLITE_DONE) return sqlite3_errcode(db_.get());
      d.expired += static_cast<std::uint64_t>(sqlite3_changes64(db_.get()));
    }
    StmtScope del(expire_ends_);
    del->bind(1, w.at_unix_ms);
    if (del->step() != SQLITE_DONE) return sqlite3_errcode(db_.get());
    ++d.records;
    return SQLITE_OK;
  }

  if (w.kind == Write::Kind::kStarted && w.folded) {
    ++d.records;  // (W7) its end applies it; still a write of the transaction
    return SQLITE_OK;
  }
  if (w.id <= kMaxId &&
      (w.kind == Write::Kind::kStarted || (w.kind == Write::Kind::kEnded && is_final(w.state)))) {
    // (W8) The job is queued or running: one statement, no read.
    StmtScope s(w.kind == Write::Kind::kStarted ? started_live_ : ended_live_);
    bind_update(*s, w);
    if (s->step() != SQLITE_DONE) return sqlite3_errcode(db_.get());
    if (sqlite3_changes64(db_.get()) == 1)
      return finish(w, static_cast<int>(RecordState::kQueued),
                    w.kind == Write::Kind::kStarted ? RecordState::kRunning : w.state, d);
  }

  int from = 0;
  int rc = state_of(w.id, from);
  if (rc != SQLITE_OK) return rc;
  const bool known = from != 0;
  const bool ended = known && is_final(static_cast<RecordState>(from));
  const auto refuse = [&](const std::string& why) {
    own = Status::InvalidArgument(job_text(w.id) + ": " + why);
    return SQLITE_OK;
  };
  RecordState to = w.state;
  Stmt* update = nullptr;
  switch (w.kind) {
    case Write::Kind::kStarted:
      // No callback to tell: a start for a job the journal does not have, or
      // after its end (the end wins), is dropped.
      if (!known || ended) return SQLITE_OK;
      to = RecordState::kRunning;
      update = &started_;
      break;
    case Write::Kind::kRetry:
      if (!known || ended) return SQLITE_OK;  // likewise
      update = &retry_;
      break;
    case Write::Kind::kEnded:
      if (!is_final(w.state)) {
        return refuse("an end must be a final state, not " + std::string(to_string(w.state)));
      }
      if (!known) return refuse("the journal has no such job, so its end was not recorded");
      if (ended) {
        return refuse("it had already ended (" +
                      std::string(to_string(static_cast<RecordState>(from))) +
                      "), so this end was not recorded");
      }
      update = &ended_;
      break;
    case Write::Kind::kRequeued:
      if (!known) return refuse("the journal has no such job, so it was not requeued");
      if (!ended) {
        return refuse("it has not ended (" +
                      std::string(to_string(static_cast<RecordState>(from))) +
                      "), so it was not requeued");
      }
      to = RecordState::kQueued;
      update = &requeued_;
      {
        StmtScope u(unended_);  // its end goes; its history stays
        u->bind(1, static_cast<std::int64_t>(w.id));
        if (u->step() != SQLITE_DONE) return sqlite3_errcode(db_.get());
      }
      break;
    case Write::Kind::kAccepted:
    case Write::Kind::kExpire:
      return SQLITE_OK;  // handled above
  }
  if (update == nullptr) return SQLITE_OK;  // every case above set it or returned

  {
    StmtScope s(*update);
    bind_update(*s, w);
    if (s->step() != SQLITE_DONE) return sqlite3_errcode(db_.get());
  }
  return finish(w, from, to, d);
}

// Binds a start's, retry's, end's or requeue's statement (the general one or
// its W8 twin: the same parameters).
void Writer::bind_update(Stmt& s, const Write& w) {
  s.bind(1, static_cast<std::int64_t>(w.id));
  switch (w.kind) {
    case Write::Kind::kStarted:
      s.bind(2, w.attempt);
      break;
    case Write::Kind::kRetry:
      s.bind(2, static_cast<std::int64_t>(w.state));
      s.bind(3, w.at_unix_ms);
      break;
    case Write::Kind::kEnded:
      s.bind(2, static_cast<std::int64_t>(w.state));
      s.bind_blob(3, w.output);
      s.bind_text(4, w.message);
      s.bind(5, w.at_unix_ms);
      s.bind(6, w.attempt);  // (W7) 0 unless a start was folded into it
      break;
    case Write::Kind::kRequeued:
      s.bind(2, w.attempt);
      s.bind(3, w.max_attempts);
      break;
    case Write::Kind::kAccepted:
    case Write::Kind::kExpire:
      break;
  }
}

// After a lifecycle write's statement: its message into the job's history,
// its move into the figures.
int Writer::finish(const Write& w, int from, RecordState to, Delta& d) {
  // The attempt's message joins the job's history (J: attempt_messages); an
  // end with none adds nothing (W8). A retry's row is kept even if empty: it
  // stands for a failed attempt.
  if (w.kind == Write::Kind::kRetry || (w.kind == Write::Kind::kEnded && !w.message.empty())) {
    StmtScope s(insert_message_);
    s->bind(1, static_cast<std::int64_t>(w.id));
    s->bind_text(2, w.message);
    if (s->step() != SQLITE_DONE) return sqlite3_errcode(db_.get());
  }
  d.move(from, to);
  ++d.records;
  return SQLITE_OK;
}

}  // namespace tpool::store::detail
