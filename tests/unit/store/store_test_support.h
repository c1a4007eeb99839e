// What the journal's tests share: a temporary directory, records with every
// field set, a field-by-field comparison, a raw SQLite connection for what
// the Journal's API does not show, and a gate that holds the writer thread
// so that writes queue up and go into one transaction.
#pragma once

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tpool/store/journal.h"

namespace tpool::store::testing {

// A fresh directory under /tmp (mkdtemp), removed with what is in it.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = "/tmp/tpool-store-test-XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr) {
      ADD_FAILURE() << "mkdtemp failed: " << std::strerror(errno);
    }
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    ::chmod(path_.c_str(), 0700);  // a test may have taken the write bit away
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

inline JournalOptions options_for(const std::string& path) {
  JournalOptions o;
  o.path = path;
  return o;
}

inline std::unique_ptr<Journal> open_ok(const JournalOptions& o) {
  auto j = Journal::open(o);
  EXPECT_TRUE(j.ok()) << j.status().to_string();
  return j.ok() ? std::move(j).value() : nullptr;
}

// A new job with every field set to something other than its default and
// derived from the id, so two jobs never look alike. Bytes that trip text
// handling on purpose: a NUL and 0xff in the payload and output.
inline JobRecord make_job(std::uint64_t id, RecordState state = RecordState::kQueued) {
  JobRecord r;
  r.id = id;
  r.handler = id % 2 == 1 ? "odd" : "even";
  r.payload = std::string("pay\0load\xff-", 10) + std::to_string(id);
  r.idempotency_key = "key-" + std::to_string(id);
  r.labels = {
      {"team", id % 3 == 0 ? "red" : "blue"}, {"zeta", "1"}, {"alpha", "\xc3\xa9t\xc3\xa9"}};
  r.lane = 2;
  r.timeout_ms = 30000 + id;
  r.accepted_unix_ms = 1'700'000'000'000 + static_cast<std::int64_t>(id);
  r.not_before_unix_ms = r.accepted_unix_ms + 5000;
  r.attempt = 0;
  r.max_attempts = 4;
  r.backoff_base_ms = 100;
  r.backoff_cap_ms = 60000;
  r.tag = 0xfeedface00000000ull + id;  // above 2^63: kept as its bit pattern
  r.state = state;
  return r;
}

// "" when equal, else the first field that differs with both values.
inline std::string diff(const JobRecord& want, const JobRecord& got) {
  std::ostringstream o;
#define TPOOL_STORE_FIELD(f) \
  if (!(want.f == got.f)) {  \
    o << #f " differs";      \
    return o.str();          \
  }
  TPOOL_STORE_FIELD(id)
  TPOOL_STORE_FIELD(handler)
  TPOOL_STORE_FIELD(payload)
  TPOOL_STORE_FIELD(idempotency_key)
  TPOOL_STORE_FIELD(labels)
  TPOOL_STORE_FIELD(lane)
  TPOOL_STORE_FIELD(timeout_ms)
  TPOOL_STORE_FIELD(accepted_unix_ms)
  TPOOL_STORE_FIELD(not_before_unix_ms)
  TPOOL_STORE_FIELD(attempt)
  TPOOL_STORE_FIELD(max_attempts)
  TPOOL_STORE_FIELD(backoff_base_ms)
  TPOOL_STORE_FIELD(backoff_cap_ms)
  TPOOL_STORE_FIELD(tag)
  TPOOL_STORE_FIELD(state)
  TPOOL_STORE_FIELD(output)
  TPOOL_STORE_FIELD(message)
  TPOOL_STORE_FIELD(attempt_messages)
  TPOOL_STORE_FIELD(ended_unix_ms)
#undef TPOOL_STORE_FIELD
  return "";
}

// A ListFilter built field by field (designated initializers of a struct
// with defaults trip -Wmissing-field-initializers).
class Filter {
 public:
  Filter& states(std::vector<RecordState> s) {
    f_.states = std::move(s);
    return *this;
  }
  Filter& handler(std::string h) {
    f_.handler = std::move(h);
    return *this;
  }
  Filter& label(std::string key, std::string value = "") {
    f_.label_key = std::move(key);
    f_.label_value = std::move(value);
    return *this;
  }
  Filter& after(std::uint64_t id) {
    f_.after_id = id;
    return *this;
  }
  Filter& limit(std::size_t n) {
    f_.limit = n;
    return *this;
  }
  operator const ListFilter&() const { return f_; }  // NOLINT(google-explicit-constructor)

 private:
  ListFilter f_;
};

inline std::vector<std::uint64_t> ids_of(const std::vector<JobRecord>& rs) {
  std::vector<std::uint64_t> out;
  for (const JobRecord& r : rs) out.push_back(r.id);
  return out;
}

// A raw connection, for checks below the Journal's API (user_version, the
// rows of a table) and for building files by hand.
class RawDb {
 public:
  explicit RawDb(const std::string& path, int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE) {
    if (sqlite3_open_v2(path.c_str(), &db_, flags, nullptr) != SQLITE_OK) {
      ADD_FAILURE() << "sqlite3_open_v2(" << path << "): " << sqlite3_errmsg(db_);
    }
  }
  ~RawDb() { sqlite3_close_v2(db_); }
  RawDb(const RawDb&) = delete;
  RawDb& operator=(const RawDb&) = delete;

  void exec(const std::string& sql) {
    char* err = nullptr;
    if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
      ADD_FAILURE() << sql << ": " << (err ? err : "?");
    }
    sqlite3_free(err);
  }
  // The first column of the first row; -1 (and a failure) on error.
  std::int64_t query_int(const std::string& sql) {
    sqlite3_stmt* s = nullptr;
    std::int64_t v = -1;
    if (sqlite3_prepare_v2(db_, sql.c_str(), -1, &s, nullptr) == SQLITE_OK &&
        sqlite3_step(s) == SQLITE_ROW) {
      v = sqlite3_column_int64(s, 0);
    } else {
      ADD_FAILURE() << sql << ": " << sqlite3_errmsg(db_);
    }
    sqlite3_finalize(s);
    return v;
  }

 private:
  sqlite3* db_ = nullptr;
};

inline std::string read_file(const std::string& path) {
  std::string out;
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return out;
  char buf[8192];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  std::fclose(f);
  return out;
}

inline void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

inline bool exists(const std::string& path) {
  return ::access(path.c_str(), F_OK) == 0;
}

// Holds the writer thread inside a Committed callback (J4: callbacks run on
// it, and it takes no new group until they return). Writes appended while it
// is held queue up, and the writer takes them together when it is opened
// (J2), so a test knows which writes share a transaction without timing.
// Declare it after the Journal: its destructor opens it, so a failed test
// never leaves ~Journal waiting for a held writer.
class WriterGate {
 public:
  ~WriterGate() { open(); }
  // Appends an accept of job `id` whose callback holds the writer; returns
  // once the writer is inside it.
  void hold(Journal& j, std::uint64_t id) {
    j.append_accepted({make_job(id)}, [this](const Status& s) {
      EXPECT_TRUE(s.ok()) << s.to_string();
      std::unique_lock lk(mu_);
      entered_ = true;
      cv_.notify_all();
      cv_.wait(lk, [this] { return opened_; });
    });
    std::unique_lock lk(mu_);
    cv_.wait(lk, [this] { return entered_; });
  }
  void open() {
    std::lock_guard lk(mu_);
    opened_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool entered_ = false, opened_ = false;
};

// Whether another connection (the journal's writer) holds the file's write
// lock, i.e. has a transaction open: BEGIN IMMEDIATE fails busy at once.
class WriteLockProbe {
 public:
  explicit WriteLockProbe(const std::string& path) {
    if (sqlite3_open_v2(path.c_str(), &db_, SQLITE_OPEN_READWRITE, nullptr) != SQLITE_OK) {
      ADD_FAILURE() << "sqlite3_open_v2(" << path << "): " << sqlite3_errmsg(db_);
    }
  }
  ~WriteLockProbe() { sqlite3_close_v2(db_); }
  WriteLockProbe(const WriteLockProbe&) = delete;
  WriteLockProbe& operator=(const WriteLockProbe&) = delete;
  bool locked() {
    const int rc = sqlite3_exec(db_, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr);
    if (rc == SQLITE_OK) sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    return rc == SQLITE_BUSY;
  }
  // Polls (bounded: 30 s) until locked(); false if it never was.
  bool wait_until_locked() {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (!locked()) {
      if (std::chrono::steady_clock::now() >= deadline) return false;
      std::this_thread::yield();
    }
    return true;
  }

 private:
  sqlite3* db_ = nullptr;
};

// Polls (bounded: 30 s) until this process's thread named `name` sleeps
// (state S in /proc/self/task/TID/stat); false if none did. The journal's
// writer is "tpool-journal": asleep, it waits on its condition variable.
inline bool wait_until_thread_sleeps(const std::string& name) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < deadline) {
    for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
      std::string comm;
      std::getline(std::ifstream(task.path() / "comm"), comm);
      if (comm != name) continue;
      std::string stat;
      std::getline(std::ifstream(task.path() / "stat"), stat);
      // "tid (comm) S ...": the state follows the last ')'.
      const auto paren = stat.rfind(')');
      if (paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] == 'S') {
        return true;
      }
    }
    std::this_thread::yield();
  }
  return false;
}

// Collects the Status each callback was given, by slot.
class Statuses {
 public:
  explicit Statuses(std::size_t n) : got_(n), ran_(n, false) {}
  Journal::Committed slot(std::size_t i) {
    return [this, i](const Status& s) {
      std::lock_guard lk(mu_);
      got_[i] = s;
      ran_[i] = true;
    };
  }
  Status at(std::size_t i) {
    std::lock_guard lk(mu_);
    EXPECT_TRUE(ran_[i]) << "callback " << i << " did not run";
    return got_[i];
  }

 private:
  std::mutex mu_;
  std::vector<Status> got_;
  std::vector<bool> ran_;
};

}  // namespace tpool::store::testing
