// tpool::store::Journal: open, close and the calls that hand over to the
// writer (writer.cc, J2-J6) or the reader (reader.cc, J8). journal.h has the
// promises J1-J8; docs/store.md the file, its schema and what to do when it
// fails.
//
// Lifecycle: open() runs on the caller's thread: the write connection
// (schema.cc: checks, WAL, migrations), the id floor and next seq, the read
// connection, the pending jobs (J7), then the writer thread starts. ~Journal
// reverses it: the writer applies what is queued and ends (its callbacks run
// first, and may still read), then the read connection closes, then the write
// connection, last, so that SQLite checkpoints the WAL into the database and
// removes the -wal file (a read-only connection closing last could not).
#include "tpool/store/journal.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <mutex>
#include <random>
#include <utility>

#include "reader.h"
#include "schema.h"
#include "writer.h"

namespace tpool::store {

bool is_final(RecordState s) noexcept {
  return s >= RecordState::kSucceeded && s <= RecordState::kTimedOut;
}

std::string_view to_string(RecordState s) noexcept {
  switch (s) {
    case RecordState::kQueued:
      return "queued";
    case RecordState::kScheduled:
      return "scheduled";
    case RecordState::kRunning:
      return "running";
    case RecordState::kSucceeded:
      return "succeeded";
    case RecordState::kFailed:
      return "failed";
    case RecordState::kCancelled:
      return "cancelled";
    case RecordState::kTimedOut:
      return "timed out";
  }
  return "unknown";
}

struct Journal::Impl {
  ~Impl() {
    if (lock_fd >= 0) ::close(lock_fd);  // (J10) releases the flock
  }
  int lock_fd = -1;  // (J10) PATH.lock, flock'd exclusively while open
  JournalOptions options;
  std::vector<JobRecord> recovered;
  std::uint64_t next_id_floor = 1;
  std::uint32_t incarnation = 1;
  std::unique_ptr<detail::Writer> writer;
  std::unique_ptr<detail::Reader> reader;
};

namespace {

std::int64_t now_unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::uint64_t file_size(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? static_cast<std::uint64_t>(st.st_size) : 0;
}

// (J10) Takes PATH.lock exclusively (flock, not waiting) and writes this
// process's pid in it, for the message the next one gets.
Status lock_store(const std::string& path, int& fd_out) {
  const std::string lock = path + ".lock";
  const int fd = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) {
    const int err = errno;
    return Status::IoError("the store's lock file " + lock + " cannot be opened: " +
                           std::strerror(err) + ": make its directory writable by this user, " +
                           "or set [store] path to a file in another directory");
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char buf[32] = {};
    const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
    ::close(fd);
    std::string holder = n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : std::string();
    while (!holder.empty() && (holder.back() == '\n' || holder.back() == ' ')) holder.pop_back();
    if (err != EWOULDBLOCK) {
      return Status::IoError("the store's lock file " + lock +
                             " cannot be locked: " + std::strerror(err));
    }
    return Status::FailedPrecondition(
        "the store file " + path + " is in use by another process" +
        (holder.empty() ? std::string() : " (pid " + holder + ")") +
        ": two tpoold must not share one store (each would replay the other's jobs); stop "
        "the other one, or give this one its own [store] path");
  }
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd, 0) != 0 ||
      ::pwrite(fd, pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size())) {
    // Only the message a second process gets would lack the pid: go on.
  }
  fd_out = fd;
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<Journal>> Journal::open(JournalOptions options) {
  // SQLite's memory statistics take a global mutex on every allocation; the
  // journal never reads them. Settable only before SQLite initializes: a
  // process that used SQLite first keeps them (SQLITE_MISUSE, ignored).
  static std::once_flag no_memstatus;
  std::call_once(no_memstatus, [] { (void)sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0); });
  if (options.path.empty()) {
    return Status::InvalidArgument("the store path is empty: set [store] path to a file");
  }
  if (options.max_batch == 0) {
    return Status::InvalidArgument("the store's max_batch is 0: it must be at least 1");
  }
  auto impl = std::make_unique<Impl>();
  impl->options = std::move(options);
  const std::string& path = impl->options.path;

  // (J10) The directory's checks come first (their messages say more than a
  // failed lock would), then the lock, then anything that writes.
  if (Status s = detail::check_directory(path); !s.ok()) return s;
  if (Status s = lock_store(path, impl->lock_fd); !s.ok()) return s;
  auto wdb = detail::open_write_connection(path);
  if (!wdb.ok()) return wdb.status();
  detail::Db db = std::move(wdb).value();

  // (J6) The floor is the larger of what meta kept and what the rows say: a
  // file written by hand (or a meta row lost) cannot make ids repeat.
  std::int64_t floor = 1, next_seq = 1;
  int rc = db.query_int(
      "SELECT max(coalesce((SELECT value FROM meta WHERE key = 'next_id'), 1), "
      "coalesce((SELECT max(id) FROM jobs), 0) + 1)",
      floor);
  if (rc == SQLITE_OK) rc = db.query_int("SELECT coalesce(max(seq), 0) + 1 FROM jobs", next_seq);
  if (rc != SQLITE_OK) return detail::file_error(path, "read its id floor", rc, db.errmsg());
  impl->next_id_floor = static_cast<std::uint64_t>(floor);

  // (J9) This open's incarnation: one more than the last one's, written
  // (and fsync'd: autocommit, synchronous=FULL) before any job is accepted.
  // A meta row, not schema: a file without it starts at 1.
  std::int64_t last = 0;
  rc = db.query_int("SELECT coalesce((SELECT value FROM meta WHERE key = 'incarnation'), 0)", last);
  if (rc != SQLITE_OK) return detail::file_error(path, "read its incarnation", rc, db.errmsg());
  // A new file starts at a random one, so a store deleted and made anew
  // does not hand out the ids of the one before (probability 2^-24).
  std::uint64_t next = 0;
  if (last == 0) {
    std::random_device rd;
    while (next == 0) next = rd() & kIncarnationMask;
  } else {
    next = (static_cast<std::uint64_t>(last) & kIncarnationMask) + 1;
    if (next > kIncarnationMask) next = 1;
  }
  const std::string claim = "INSERT INTO meta (key, value) VALUES ('incarnation', " +
                            std::to_string(next) +
                            ") ON CONFLICT (key) DO UPDATE SET value = excluded.value";
  rc = db.exec(claim.c_str());
  if (rc != SQLITE_OK) return detail::file_error(path, "record this start", rc, db.errmsg());
  impl->incarnation = static_cast<std::uint32_t>(next);

  auto reader = detail::Reader::open(path);
  if (!reader.ok()) return reader.status();
  impl->reader = std::move(reader).value();
  auto pending = impl->reader->pending();  // (J7)
  if (!pending.ok()) {
    return Status::IoError("the store file " + path + ": " + pending.status().message());
  }
  impl->recovered = std::move(pending).value();
  std::uint64_t scheduled = 0;
  for (const JobRecord& r : impl->recovered) {
    scheduled += r.state == RecordState::kScheduled ? 1 : 0;
  }

  impl->writer = std::make_unique<detail::Writer>(std::move(db), path, impl->options.max_batch,
                                                  impl->options.linger, next_seq,
                                                  impl->recovered.size(), scheduled);
  if (Status s = impl->writer->prepare(); !s.ok()) return s;
  impl->writer->start();
  return std::unique_ptr<Journal>(new Journal(std::move(impl)));
}

Journal::Journal(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Journal::~Journal() {
  impl_->writer->stop();  // applies everything queued; its callbacks may still read
  impl_->reader.reset();  // then the read connection
  impl_->writer.reset();  // the write connection last: it checkpoints and removes the -wal
}

const std::vector<JobRecord>& Journal::recovered() const noexcept {
  return impl_->recovered;
}

std::uint64_t Journal::next_id_floor() const noexcept {
  return impl_->next_id_floor;
}

std::uint32_t Journal::incarnation() const noexcept {
  return impl_->incarnation;
}

void Journal::append_accepted(std::vector<JobRecord> jobs, Committed done) {
  detail::Write w;
  w.kind = detail::Write::Kind::kAccepted;
  w.jobs = std::move(jobs);
  w.done = std::move(done);
  impl_->writer->append(std::move(w));
}

void Journal::append_started(std::uint64_t id, std::uint32_t attempt) {
  detail::Write w;
  w.kind = detail::Write::Kind::kStarted;
  w.id = id;
  w.attempt = attempt;
  impl_->writer->append(std::move(w));
}

void Journal::append_retry(std::uint64_t id, std::int64_t not_before_unix_ms, std::string message) {
  detail::Write w;
  w.kind = detail::Write::Kind::kRetry;
  w.id = id;
  w.at_unix_ms = not_before_unix_ms;
  // "In the future" as of the call: the engine decided on the retry now.
  w.state = not_before_unix_ms > now_unix_ms() ? RecordState::kScheduled : RecordState::kQueued;
  w.message = std::move(message);
  impl_->writer->append(std::move(w));
}

void Journal::append_ended(std::uint64_t id, RecordState final_state, std::string output,
                           std::string message, std::int64_t ended_unix_ms, Committed done) {
  detail::Write w;
  w.kind = detail::Write::Kind::kEnded;
  w.id = id;
  w.state = final_state;
  w.output = std::move(output);
  w.message = std::move(message);
  w.at_unix_ms = ended_unix_ms;
  w.done = std::move(done);
  impl_->writer->append(std::move(w));
}

void Journal::append_requeued(std::uint64_t id, std::uint32_t attempt, std::uint32_t max_attempts,
                              Committed done) {
  detail::Write w;
  w.kind = detail::Write::Kind::kRequeued;
  w.id = id;
  w.attempt = attempt;
  w.max_attempts = max_attempts;
  w.done = std::move(done);
  impl_->writer->append(std::move(w));
}

Status Journal::flush() {
  return impl_->writer->flush();
}

std::optional<JobRecord> Journal::get(std::uint64_t id) const {
  return impl_->reader->get(id);
}

std::optional<JobRecord> Journal::find_key(std::string_view idempotency_key) const {
  return impl_->reader->find_key(idempotency_key);
}

std::vector<JobRecord> Journal::list(const ListFilter& filter) const {
  return impl_->reader->list(filter);
}

void Journal::expire(std::int64_t now_unix_ms) {
  detail::Write w;
  w.kind = detail::Write::Kind::kExpire;
  // ended_unix_ms + retention <= now  <=>  ended_unix_ms <= now - retention
  w.at_unix_ms = now_unix_ms - static_cast<std::int64_t>(impl_->options.retention.count());
  impl_->writer->append(std::move(w));
}

bool Journal::healthy() const noexcept {
  return impl_->writer->healthy();
}

JournalStats Journal::stats() const {
  JournalStats s;
  impl_->writer->fill(s);
  const std::string& path = impl_->options.path;
  s.file_bytes = file_size(path) + file_size(path + "-wal");
  return s;
}

std::vector<CommitSample> Journal::take_commit_samples() {
  return impl_->writer->take_samples();
}

const std::string& Journal::path() const noexcept {
  return impl_->options.path;
}

std::uint64_t Journal::writer_wakes_for_testing() const {
  return impl_->writer->wakes();
}

void Journal::inject_commit_failures_for_testing(int n, bool disk_full) {
  impl_->writer->inject_failures(n, disk_full);
}

}  // namespace tpool::store
