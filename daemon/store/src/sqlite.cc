#include "sqlite.h"

#include <limits>

namespace tpool::store::detail {

void Db::close() noexcept {
  if (db_ != nullptr) sqlite3_close_v2(db_);
  db_ = nullptr;
}

int Db::exec(const char* sql) noexcept {
  return sqlite3_exec(db_, sql, nullptr, nullptr, nullptr);
}

int Db::query_int(const char* sql, std::int64_t& out) noexcept {
  sqlite3_stmt* s = nullptr;
  int rc = sqlite3_prepare_v2(db_, sql, -1, &s, nullptr);
  if (rc != SQLITE_OK) return rc;
  rc = sqlite3_step(s);
  if (rc == SQLITE_ROW) {
    out = sqlite3_column_int64(s, 0);
    rc = SQLITE_OK;
  }
  // The step's error (if any) is also what finalize returns.
  const int fin = sqlite3_finalize(s);
  return rc == SQLITE_OK ? fin : rc;
}

int Stmt::prepare(const Db& db, std::string_view sql) noexcept {
  sqlite3_finalize(s_);
  s_ = nullptr;
  if (sql.size() > static_cast<std::size_t>(std::numeric_limits<int>::max())) return SQLITE_TOOBIG;
  return sqlite3_prepare_v3(db.get(), sql.data(), static_cast<int>(sql.size()),
                            SQLITE_PREPARE_PERSISTENT, &s_, nullptr);
}

void Stmt::bind_text(int i, std::string_view v) noexcept {
  // nullptr is SQLITE_STATIC (the macro is an old-style cast).
  sqlite3_bind_text64(s_, i, v.data(), v.size(), nullptr, SQLITE_UTF8);
}

void Stmt::bind_blob(int i, std::string_view v) noexcept {
  // A zero-length blob, not NULL, for an empty value (the columns are NOT NULL).
  if (v.empty()) {
    sqlite3_bind_zeroblob(s_, i, 0);
  } else {
    sqlite3_bind_blob64(s_, i, v.data(), v.size(), nullptr);
  }
}

std::string Stmt::bytes(int col) const {
  // sqlite3_column_blob works for text too and never converts the encoding;
  // column_bytes after it gives the length of what it returned.
  const void* p = sqlite3_column_blob(s_, col);
  const int n = sqlite3_column_bytes(s_, col);
  if (p == nullptr || n <= 0) return {};
  return {static_cast<const char*>(p), static_cast<std::size_t>(n)};
}

int step_all(Stmt& s) noexcept {
  StmtScope scope(s);
  int rc;
  while ((rc = scope->step()) == SQLITE_ROW) {
  }
  return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

}  // namespace tpool::store::detail
