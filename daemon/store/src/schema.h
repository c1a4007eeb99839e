// Opening the journal's file: the checks before anything is written, the
// connection's settings, and the schema's migrations (schema.cc).
#pragma once

#include <string>

#include "sqlite.h"
#include "tpool/common/status.h"

namespace tpool::store::detail {

// The columns every read of a job selects from job_view (a job's row and its
// end, schema 6), in JobRecord's order (reader.cc decodes them by position).
inline constexpr const char* kJobColumns =
    "id, handler, payload, idempotency_key, lane, timeout_ms, accepted_unix_ms, "
    "not_before_unix_ms, attempt, max_attempts, backoff_base_ms, backoff_cap_ms, state, output, "
    "message, ended_unix_ms, tag";

// How long a connection waits for a lock another connection holds before it
// gives up with SQLITE_BUSY. Picked by hand: our own connections never hold
// one for long (the writer's transactions are short, reads are snapshots), so
// only another process (sqlite3 .backup, a second tpoold by mistake) can make
// it wait, and 5 s is long enough for a backup step and short enough to fail
// a start-up visibly.
inline constexpr int kBusyTimeoutMs = 5000;

// The directory of the file at path exists, is a directory and is writable
// (SQLite creates the -wal and -shm there), and the file, if it exists, is
// readable and writable; IoError saying what to do otherwise.
Status check_directory(const std::string& path);

// The write connection: checks that the directory is writable, that the file
// is a database (PRAGMA quick_check) of a version this build knows, sets WAL
// and synchronous=FULL and migrates the schema to kSchemaVersion in one
// transaction. Errors name the file and say what to do (journal.h, open()).
Result<Db> open_write_connection(const std::string& path);

// The read connection (J8): read-only, opened after the write connection, so
// the file is known good and in WAL mode.
Result<Db> open_read_connection(const std::string& path);

// IoError or Corruption for an error of SQLite's on the file at path while
// doing `what`, naming the file and what to do.
Status file_error(const std::string& path, const char* what, int rc, const std::string& errmsg);

}  // namespace tpool::store::detail
