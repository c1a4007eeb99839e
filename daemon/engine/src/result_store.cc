// InMemoryResultStore: the result store in memory (contract and invariants in
// tpool/engine/result_store.h).
#include "tpool/engine/result_store.h"

#include <algorithm>

namespace tpool::engine {

void InMemoryResultStore::put(JobPtr job) {
  const std::uint64_t id = job->id();
  const std::string& key = job->idempotency_key();
  MutexLock lock(mu_);
  if (!key.empty()) keys_.emplace(key, id);  // (S3) the engine checked it is free
  retained_.insert(id, std::move(job));      // (S2) the store's reference
  publish_figures();
}

void InMemoryResultStore::remove(const Job& job) {
  MutexLock lock(mu_);
  // (M2) an ended_ entry, if any, is skipped at the front.
  JobPtr gone = retained_.erase(job.id());
  if (gone == nullptr) return;
  const std::string& key = job.idempotency_key();
  if (!key.empty()) {
    if (auto k = keys_.find(key); k != keys_.end() && k->second == job.id()) keys_.erase(k);
  }
  publish_figures();
}

JobPtr InMemoryResultStore::get(std::uint64_t id) const {
  MutexLock lock(mu_);
  const JobPtr* j = retained_.find(id);
  return j == nullptr ? nullptr : *j;
}

JobPtr InMemoryResultStore::find_key(std::string_view key) const {
  MutexLock lock(mu_);
  auto k = keys_.find(std::string(key));
  if (k == keys_.end()) return nullptr;
  const JobPtr* j = retained_.find(k->second);  // (M1) present while the key is
  return j == nullptr ? nullptr : *j;
}

void InMemoryResultStore::ended(const Job& job, TimePoint at) {
  const std::size_t bytes = job.retained_bytes();
  MutexLock lock(mu_);
  if (!retained_.contains(job.id())) return;
  ended_.push_back(Ended{at, job.id(), bytes});  // (M2)
  bytes_ += bytes;
  evict(at);
}

void InMemoryResultStore::expire(TimePoint now) {
  MutexLock lock(mu_);
  evict(now);
}

void InMemoryResultStore::evict(TimePoint now) {
  // (S4, M2) oldest ended first, while any of the three bounds is exceeded.
  while (!ended_.empty()) {
    const Ended& e = ended_.front();
    const bool too_old = now - e.at > bounds_.retention;
    const bool too_big = bytes_ > bounds_.max_bytes;
    const bool too_many = ended_.size() > bounds_.max_entries;
    if (!too_old && !too_big && !too_many) break;
    if (JobPtr gone = retained_.erase(e.id)) {
      const std::string& key = gone->idempotency_key();
      if (!key.empty()) {
        if (auto k = keys_.find(key); k != keys_.end() && k->second == e.id) keys_.erase(k);
      }
      expired_.fetch_add(1, std::memory_order_relaxed);  // (M3)
    }
    bytes_ -= e.bytes;
    ended_.pop_front();
  }
  publish_figures();
}

void InMemoryResultStore::publish_figures() {
  // (M3) relaxed: copies for reporting only.
  entries_.store(retained_.size(), std::memory_order_relaxed);
  bytes_mirror_.store(bytes_, std::memory_order_relaxed);
}

ResultStoreStats InMemoryResultStore::stats() const {
  return {entries_.load(std::memory_order_relaxed), bytes_mirror_.load(std::memory_order_relaxed),
          expired_.load(std::memory_order_relaxed)};
}

std::vector<JobPtr> InMemoryResultStore::list(std::uint64_t after_id) const {
  std::vector<JobPtr> out;
  {
    MutexLock lock(mu_);
    retained_.for_each([&](std::uint64_t id, const JobPtr& job) {
      if (id > after_id) out.push_back(job);
    });
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a->id() < b->id(); });
  return out;
}

}  // namespace tpool::engine
