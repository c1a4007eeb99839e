// The journal's read side (J8): its own read-only connection, used by one
// caller at a time under mu_, so reads never wait for the writer thread (WAL
// lets a reader and a writer run at once) and the writer never waits for them.
//
//  (R1) db_ and its statements are guarded by mu_: a SQLite connection opened
//       with SQLITE_OPEN_NOMUTEX must not be used by two threads at once.
//  (R2) Each read runs in one read transaction (ReadTxn), so a job and its
//       labels and messages come from one snapshot: an expire() committed
//       between the row and its labels cannot show a job without them.
//  (R3) A read that fails (an I/O error) returns nothing, like a missing job:
//       the reads' signatures carry no Status. pending(), read once at open,
//       does return its error.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sqlite.h"
#include "tpool/common/mutex.h"
#include "tpool/common/status.h"
#include "tpool/store/journal.h"

namespace tpool::store::detail {

class Reader {
 public:
  // Opens the read connection and prepares its statements.
  static Result<std::unique_ptr<Reader>> open(const std::string& path);

  std::optional<JobRecord> get(std::uint64_t id) EXCLUDES(mu_);
  std::optional<JobRecord> find_key(std::string_view key) EXCLUDES(mu_);
  std::vector<JobRecord> list(const ListFilter& filter) EXCLUDES(mu_);
  // (J7) Jobs not final, in acceptance (seq) order.
  Result<std::vector<JobRecord>> pending() EXCLUDES(mu_);

 private:
  explicit Reader(Db db) : db_(std::move(db)) {}
  Status prepare(const std::string& path) EXCLUDES(mu_);
  // The rows of a prepared SELECT of kJobColumns, each with its labels and
  // attempt messages; SQLITE_OK or the first error.
  int collect(Stmt& s, std::vector<JobRecord>& out) REQUIRES(mu_);
  int fill(JobRecord& r) REQUIRES(mu_);

  Mutex mu_;
  // (R1) The connection first: members are destroyed in reverse order, so
  // its statements are finalized before it closes.
  Db db_ GUARDED_BY(mu_);
  Stmt begin_ GUARDED_BY(mu_);
  Stmt end_ GUARDED_BY(mu_);
  Stmt by_id_ GUARDED_BY(mu_);
  Stmt by_key_ GUARDED_BY(mu_);
  Stmt list_ GUARDED_BY(mu_);
  Stmt pending_ GUARDED_BY(mu_);
  Stmt labels_ GUARDED_BY(mu_);
  Stmt messages_ GUARDED_BY(mu_);
};

// Decodes a row of kJobColumns (labels and attempt_messages are separate).
JobRecord decode_job(const Stmt& s);

}  // namespace tpool::store::detail
