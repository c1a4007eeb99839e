// The job store's histograms for /metrics (tpoold_store_commit_duration_seconds,
// tpoold_store_jobs_per_commit): the journal hands out each commit's latency
// and size once (Journal::take_commit_samples, a bounded buffer); this
// accumulates them into cumulative counts, drained by the daemon's
// housekeeping loop every second and by each scrape, so the buffer never
// overflows between scrapes.
#pragma once

#include <cstdint>
#include <vector>

#include "tpool/common/mutex.h"
#include "tpool/store/journal.h"

namespace tpool::server {

class StoreMetrics {
 public:
  // Buckets[i]: samples at or below bounds[i] (cumulative); count and sum of all.
  struct Histogram {
    std::vector<double> bounds;
    std::vector<std::uint64_t> counts;
    std::uint64_t count = 0;
    double sum = 0;
    void add(double v);
  };

  explicit StoreMetrics(store::Journal& journal);

  // Takes the journal's new samples into the histograms. Any thread.
  void drain() EXCLUDES(mu_);
  // drain(), then copies of both histograms.
  void read(Histogram& commit_seconds, Histogram& jobs_per_commit) EXCLUDES(mu_);
  store::Journal& journal() const noexcept { return journal_; }

 private:
  void drain_locked() REQUIRES(mu_);

  store::Journal& journal_;
  Mutex mu_;
  Histogram commit_seconds_ GUARDED_BY(mu_);
  Histogram jobs_per_commit_ GUARDED_BY(mu_);
};

}  // namespace tpool::server
