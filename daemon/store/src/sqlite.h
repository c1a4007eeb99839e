// The store's few wrappers over the SQLite C API: an owned connection (Db), an
// owned prepared statement (Stmt) and a scope that resets one after use
// (StmtScope). Only daemon/store sees sqlite3.h; its public header does not.
//
// A Stmt is prepared once per connection and reused: every use goes through a
// StmtScope, whose destructor resets it and clears its bindings. That matters
// beyond tidiness: a SELECT left un-reset keeps its read transaction (and its
// WAL snapshot) open, which stops checkpoints from moving the WAL back into
// the database and lets the -wal file grow without bound.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "tpool/common/status.h"

namespace tpool::store::detail {

class Db {
 public:
  Db() = default;
  explicit Db(sqlite3* db) noexcept : db_(db) {}
  ~Db() { close(); }
  Db(Db&& o) noexcept : db_(std::exchange(o.db_, nullptr)) {}
  Db& operator=(Db&& o) noexcept {
    if (this != &o) {
      close();
      db_ = std::exchange(o.db_, nullptr);
    }
    return *this;
  }
  Db(const Db&) = delete;
  Db& operator=(const Db&) = delete;

  sqlite3* get() const noexcept { return db_; }
  // sqlite3_close_v2: its statements must be finalized first (they are members
  // declared after the Db in every owner, so destroyed before it).
  void close() noexcept;
  std::string errmsg() const { return db_ ? sqlite3_errmsg(db_) : "no connection"; }

  // Runs SQL without results (pragmas, BEGIN/COMMIT, DDL); the SQLite code.
  int exec(const char* sql) noexcept;
  // The first column of the first row of a query (PRAGMA user_version, a count); the SQLite code on
  // error.
  int query_int(const char* sql, std::int64_t& out) noexcept;

 private:
  sqlite3* db_ = nullptr;
};

class Stmt {
 public:
  Stmt() = default;
  ~Stmt() { sqlite3_finalize(s_); }
  Stmt(Stmt&& o) noexcept : s_(std::exchange(o.s_, nullptr)) {}
  Stmt& operator=(Stmt&& o) noexcept {
    if (this != &o) {
      sqlite3_finalize(s_);
      s_ = std::exchange(o.s_, nullptr);
    }
    return *this;
  }
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;

  // SQLITE_PREPARE_PERSISTENT: it lives as long as the connection.
  int prepare(const Db& db, std::string_view sql) noexcept;

  // Parameters are 1-based. Text and blobs are bound without a copy
  // (SQLITE_STATIC): the caller keeps them alive until the StmtScope ends.
  void bind(int i, std::int64_t v) noexcept { sqlite3_bind_int64(s_, i, v); }
  void bind_text(int i, std::string_view v) noexcept;
  void bind_blob(int i, std::string_view v) noexcept;

  int step() noexcept { return sqlite3_step(s_); }
  std::int64_t int64(int col) const noexcept { return sqlite3_column_int64(s_, col); }
  std::string bytes(int col) const;  // a text or blob column, byte for byte

 private:
  friend class StmtScope;
  sqlite3_stmt* s_ = nullptr;
};

// Resets the statement (and clears its bindings) when the scope ends.
class StmtScope {
 public:
  explicit StmtScope(Stmt& s) noexcept : s_(s) {}
  ~StmtScope() {
    sqlite3_reset(s_.s_);
    sqlite3_clear_bindings(s_.s_);
  }
  StmtScope(const StmtScope&) = delete;
  StmtScope& operator=(const StmtScope&) = delete;
  Stmt* operator->() noexcept { return &s_; }
  Stmt& operator*() noexcept { return s_; }

 private:
  Stmt& s_;
};

// Runs a statement that returns no rows (or whose rows are not wanted);
// SQLITE_OK or the error code.
int step_all(Stmt& s) noexcept;

// The error codes that say the file itself is bad, not the disk or the system.
inline bool is_corruption(int rc) noexcept {
  const int primary = rc & 0xff;
  return primary == SQLITE_NOTADB || primary == SQLITE_CORRUPT;
}

}  // namespace tpool::store::detail
