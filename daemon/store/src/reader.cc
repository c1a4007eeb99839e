// The journal's reads (J8): reader.h has the rules (R1-R3).
#include "reader.h"

#include <limits>
#include <string>
#include <utility>

#include "schema.h"

namespace tpool::store::detail {

namespace {

// (R2) BEGIN (deferred: the first SELECT takes the snapshot) ... COMMIT. The
// COMMIT of a read-only transaction writes nothing; it only ends the snapshot,
// which must not outlive the read (sqlite.h: a held snapshot stops
// checkpoints).
class ReadTxn {
 public:
  ReadTxn(Stmt& begin, Stmt& end) : end_(end), ok_(step_all(begin) == SQLITE_OK) {}
  ~ReadTxn() {
    if (ok_) step_all(end_);
  }
  ReadTxn(const ReadTxn&) = delete;
  ReadTxn& operator=(const ReadTxn&) = delete;
  bool ok() const noexcept { return ok_; }

 private:
  Stmt& end_;
  bool ok_;
};

std::string select_jobs(const char* rest) {
  return std::string("SELECT ") + kJobColumns + " FROM job_view " + rest;
}

}  // namespace

JobRecord decode_job(const Stmt& s) {
  JobRecord r;
  r.id = static_cast<std::uint64_t>(s.int64(0));
  r.handler = s.bytes(1);
  r.payload = s.bytes(2);
  r.idempotency_key = s.bytes(3);
  r.lane = static_cast<std::uint32_t>(s.int64(4));
  r.timeout_ms = static_cast<std::uint64_t>(s.int64(5));  // stored as its int64 bit pattern
  r.accepted_unix_ms = s.int64(6);
  r.not_before_unix_ms = s.int64(7);
  r.attempt = static_cast<std::uint32_t>(s.int64(8));
  r.max_attempts = static_cast<std::uint32_t>(s.int64(9));
  r.backoff_base_ms = static_cast<std::uint32_t>(s.int64(10));
  r.backoff_cap_ms = static_cast<std::uint32_t>(s.int64(11));
  r.state = static_cast<RecordState>(s.int64(12));
  r.output = s.bytes(13);
  r.message = s.bytes(14);
  r.ended_unix_ms = s.int64(15);
  r.tag = static_cast<std::uint64_t>(s.int64(16));  // its int64 bit pattern (schema 3)
  return r;
}

Result<std::unique_ptr<Reader>> Reader::open(const std::string& path) {
  auto db = open_read_connection(path);
  if (!db.ok()) return db.status();
  std::unique_ptr<Reader> r(new Reader(std::move(db).value()));
  if (Status s = r->prepare(path); !s.ok()) return s;
  return r;
}

Status Reader::prepare(const std::string& path) {
  MutexLock lk(mu_);
  const std::pair<Stmt*, std::string> all[] = {
      {&begin_, "BEGIN"},
      {&end_, "COMMIT"},
      {&by_id_, select_jobs("WHERE id = ?1")},
      {&by_key_, select_jobs("WHERE idempotency_key = ?1 AND idempotency_key <> ''")},
      // Every filter is a parameter that matches everything when empty/zero,
      // so one statement serves every ListFilter. ?2 is a bit mask of states
      // (bit n: state n).
      {&list_, select_jobs("WHERE id > ?1"
                           " AND (?2 = 0 OR ((?2 >> state) & 1) = 1)"
                           " AND (?3 = '' OR handler = ?3)"
                           " AND (?4 = '' OR EXISTS (SELECT 1 FROM labels l WHERE"
                           " l.job_id = job_view.id AND l.key = ?4 AND (?5 = '' OR l.value = ?5)))"
                           " ORDER BY id LIMIT ?6")},
      {&pending_, select_jobs("WHERE state IN (1, 2, 3) ORDER BY seq")},
      {&labels_, "SELECT key, value FROM labels WHERE job_id = ?1 ORDER BY pos"},
      {&messages_, "SELECT message FROM attempt_messages WHERE job_id = ?1 ORDER BY seq"},
  };
  for (const auto& [stmt, sql] : all) {
    const int rc = stmt->prepare(db_, sql);
    if (rc != SQLITE_OK) {
      return Status::Corruption("the store file " + path + " lacks what schema version " +
                                std::to_string(kSchemaVersion) + " has (SQLite: " + db_.errmsg() +
                                "): restore it from a backup, or move it aside to start an "
                                "empty journal");
    }
  }
  return Status::Ok();
}

int Reader::fill(JobRecord& r) {
  const auto id = static_cast<std::int64_t>(r.id);
  {
    StmtScope s(labels_);
    s->bind(1, id);
    int rc;
    while ((rc = s->step()) == SQLITE_ROW) r.labels.emplace_back(s->bytes(0), s->bytes(1));
    if (rc != SQLITE_DONE) return rc;
  }
  StmtScope s(messages_);
  s->bind(1, id);
  int rc;
  while ((rc = s->step()) == SQLITE_ROW) r.attempt_messages.push_back(s->bytes(0));
  return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

int Reader::collect(Stmt& stmt, std::vector<JobRecord>& out) {
  {
    StmtScope s(stmt);  // bound by the caller; reset before fill() runs its own
    int rc;
    while ((rc = s->step()) == SQLITE_ROW) out.push_back(decode_job(stmt));
    if (rc != SQLITE_DONE) return rc;
  }
  for (JobRecord& r : out) {
    if (const int rc = fill(r); rc != SQLITE_OK) return rc;
  }
  return SQLITE_OK;
}

std::optional<JobRecord> Reader::get(std::uint64_t id) {
  if (id > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) return {};
  MutexLock lk(mu_);
  ReadTxn txn(begin_, end_);
  if (!txn.ok()) return {};  // (R3)
  by_id_.bind(1, static_cast<std::int64_t>(id));
  std::vector<JobRecord> out;
  if (collect(by_id_, out) != SQLITE_OK || out.empty()) return {};
  return std::move(out.front());
}

std::optional<JobRecord> Reader::find_key(std::string_view key) {
  if (key.empty()) return {};
  MutexLock lk(mu_);
  ReadTxn txn(begin_, end_);
  if (!txn.ok()) return {};
  by_key_.bind_text(1, key);
  std::vector<JobRecord> out;
  if (collect(by_key_, out) != SQLITE_OK || out.empty()) return {};
  return std::move(out.front());
}

std::vector<JobRecord> Reader::list(const ListFilter& f) {
  std::int64_t mask = 0;
  for (RecordState s : f.states) {
    const int v = static_cast<int>(s);
    if (v >= 1 && v <= 62) mask |= std::int64_t{1} << v;
  }
  // A filter of only unknown states matches nothing, not everything.
  if (!f.states.empty() && mask == 0) return {};
  const auto max = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
  if (f.after_id >= max || f.limit == 0) return {};
  const auto limit = static_cast<std::int64_t>(std::min<std::uint64_t>(f.limit, max));

  MutexLock lk(mu_);
  ReadTxn txn(begin_, end_);
  if (!txn.ok()) return {};
  list_.bind(1, static_cast<std::int64_t>(f.after_id));
  list_.bind(2, mask);
  list_.bind_text(3, f.handler);
  list_.bind_text(4, f.label_key);
  list_.bind_text(5, f.label_key.empty() ? std::string_view() : f.label_value);
  list_.bind(6, limit);
  std::vector<JobRecord> out;
  if (collect(list_, out) != SQLITE_OK) return {};
  return out;
}

Result<std::vector<JobRecord>> Reader::pending() {
  MutexLock lk(mu_);
  ReadTxn txn(begin_, end_);
  if (!txn.ok()) return Status::IoError("could not begin a read: " + db_.errmsg());
  std::vector<JobRecord> out;
  if (collect(pending_, out) != SQLITE_OK) {
    return Status::IoError("could not read the pending jobs: " + db_.errmsg());
  }
  return out;
}

}  // namespace tpool::store::detail
