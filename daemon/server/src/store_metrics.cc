#include "store_metrics.h"

#include <algorithm>

namespace tpool::server {

void StoreMetrics::Histogram::add(double v) {
  ++count;
  sum += v;
  // Cumulative: every bucket whose bound is at or above v.
  auto it = std::lower_bound(bounds.begin(), bounds.end(), v);
  for (auto i = static_cast<std::size_t>(it - bounds.begin()); i < counts.size(); ++i) ++counts[i];
}

StoreMetrics::StoreMetrics(store::Journal& journal) : journal_(journal) {
  MutexLock lock(mu_);
  // A commit is an fsync: ~0.1 ms on a fast SSD with a write cache, tens of
  // ms on a busy disk; the last bounds catch a stalled one.
  commit_seconds_.bounds = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
                            0.025,  0.05,    0.1,    0.25,  0.5,    1,     2.5};
  // Records per transaction: one alone up to a group of max_batch.
  for (double b = 1; b <= 65536; b *= 4) jobs_per_commit_.bounds.push_back(b);
  commit_seconds_.counts.assign(commit_seconds_.bounds.size(), 0);
  jobs_per_commit_.counts.assign(jobs_per_commit_.bounds.size(), 0);
}

void StoreMetrics::drain_locked() {
  for (const store::CommitSample& s : journal_.take_commit_samples()) {
    commit_seconds_.add(s.seconds);
    jobs_per_commit_.add(static_cast<double>(s.records));
  }
}

void StoreMetrics::drain() {
  MutexLock lock(mu_);
  drain_locked();
}

void StoreMetrics::read(Histogram& commit_seconds, Histogram& jobs_per_commit) {
  MutexLock lock(mu_);
  drain_locked();
  commit_seconds = commit_seconds_;
  jobs_per_commit = jobs_per_commit_;
}

}  // namespace tpool::server
