// tpool::engine::ResultStore: where the engine keeps the jobs a client may
// ask about again (Wait, Get, Cancel, a repeated idempotency key), and for how
// long (retention by time, bytes and count).
//
// The engine talks to the store only through this interface; InMemoryResultStore
// is the one backend today, and the durable-store issue (17) adds a second one
// (SQLite) behind the same methods. A backend knows nothing of the engine's
// admission, counters or locks: it sees Jobs through their public interface
// (job.h) and times the engine hands it (the engine owns the clock, so tests
// and backends need none).
//
// Contract shared by every method and backend:
//  (S1) Thread safety: every method is safe from any thread at any time
//       (gRPC threads, pool workers, the daemon's sweep thread). A method
//       never blocks beyond the backend's own short lock (or I/O, for a
//       durable backend), never calls back into the engine and never runs a
//       Job's waiters, so the engine may call it while holding its own locks.
//  (S2) Ownership: put() takes one reference to the Job (inv 4 in job.h); the
//       store drops it when the job's retention ends (or on remove()). A Job
//       returned by get()/find_key() is shared: the caller may keep it past
//       its retention, it is simply no longer findable.
//  (S3) An idempotency key names at most one stored job. put() of a keyed
//       job whose key is held by another stored job is a caller bug: the
//       engine looks the key up first, under its own admission lock, so two
//       submits of one key never both reach put().
//  (S4) Retention starts when a job ends (ended()), not when it is stored: a
//       queued or running job is never evicted, whatever the bounds. Past
//       its retention (time) or when the bounds are exceeded (bytes, count:
//       oldest ended first) the job and its key are forgotten together; a
//       later get() of the id or find_key() of the key finds nothing, and
//       the key may be used again for a new job.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tpool/common/id_map.h"
#include "tpool/common/mutex.h"
#include "tpool/engine/job.h"

namespace tpool::engine {

// How long and how much the store keeps (server.results.* in the config).
struct RetentionBounds {
  std::chrono::milliseconds retention{300000};
  std::size_t max_bytes = 64u << 20;
  std::size_t max_entries = 100000;
};

// A point-in-time view for metrics and AdminService.Stats.
struct ResultStoreStats {
  std::uint64_t entries = 0;  // stored jobs, live and ended
  std::uint64_t bytes = 0;    // Job::retained_bytes() of the ended ones
  std::uint64_t expired = 0;  // ended jobs forgotten by retention, ever
};

class ResultStore {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;

  virtual ~ResultStore() = default;

  // Stores job under job->id() and, when it has one, its idempotency key
  // (S2, S3). Called before the job is handed to the pool, so a job that
  // ends at once is already here when ended() comes.
  virtual void put(JobPtr job) = 0;
  // Forgets a job put() that was never submitted (the pool refused it): its
  // id and key, as if it had never been stored. No-op for an unknown id.
  virtual void remove(const Job& job) = 0;
  // The stored job with this id, or null (never stored, or retention ended).
  virtual JobPtr get(std::uint64_t id) const = 0;
  // The stored job holding this idempotency key, or null (S3, S4).
  virtual JobPtr find_key(std::string_view key) const = 0;
  // job (stored, now final) ended at `at`: its retention starts (S4), and
  // anything the bounds no longer allow is evicted. No-op for a job not
  // stored (or already removed).
  virtual void ended(const Job& job, TimePoint at) = 0;
  // Evicts what is past its retention at `now` (the daemon's sweep, about
  // once a second) and what the bounds no longer allow.
  virtual void expire(TimePoint now) = 0;
  virtual ResultStoreStats stats() const = 0;
  // The stored jobs with an id above after_id, by id ascending (ListJobs:
  // the caller filters and pages).
  virtual std::vector<JobPtr> list(std::uint64_t after_id) const = 0;
};

// The in-memory backend: a flat hash map by id (IdMap: a 24-byte slot per
// job, no node), a hash map by key (few jobs have one), and a FIFO of the
// ended jobs in the order they ended (retention evicts from its front).
//
//  (M1) retained_, keys_, ended_ and bytes_ are guarded by mu_; a key in
//       keys_ maps to an id in retained_, and eviction removes both (S4).
//  (M2) ended_ holds each stored, ended job once, oldest first; bytes_ is
//       the sum of its entries' bytes. An entry whose job was remove()d is
//       skipped when it reaches the front (remove() never searches ended_).
//  (M3) entries_/bytes_mirror_/expired_ are relaxed copies for stats():
//       figures read only for reporting, a stale one is fine.
class InMemoryResultStore final : public ResultStore {
 public:
  explicit InMemoryResultStore(RetentionBounds bounds) : bounds_(bounds) {}

  void put(JobPtr job) override EXCLUDES(mu_);
  void remove(const Job& job) override EXCLUDES(mu_);
  JobPtr get(std::uint64_t id) const override EXCLUDES(mu_);
  JobPtr find_key(std::string_view key) const override EXCLUDES(mu_);
  void ended(const Job& job, TimePoint at) override EXCLUDES(mu_);
  void expire(TimePoint now) override EXCLUDES(mu_);
  ResultStoreStats stats() const override;
  std::vector<JobPtr> list(std::uint64_t after_id) const override EXCLUDES(mu_);

 private:
  void evict(TimePoint now) REQUIRES(mu_);
  void publish_figures() REQUIRES(mu_);

  struct Ended {
    TimePoint at;
    std::uint64_t id;
    std::size_t bytes;
  };

  const RetentionBounds bounds_;
  mutable Mutex mu_;
  IdMap<JobPtr> retained_ GUARDED_BY(mu_);
  std::unordered_map<std::string, std::uint64_t> keys_ GUARDED_BY(mu_);
  std::deque<Ended> ended_ GUARDED_BY(mu_);
  std::size_t bytes_ GUARDED_BY(mu_) = 0;
  std::atomic<std::uint64_t> entries_{0};       // (M3)
  std::atomic<std::uint64_t> bytes_mirror_{0};  // (M3)
  std::atomic<std::uint64_t> expired_{0};       // (M3)
};

}  // namespace tpool::engine
