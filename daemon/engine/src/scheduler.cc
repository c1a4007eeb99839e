// Scheduler: delayed jobs and retry backoff (invariants K1..K5 in scheduler.h).
#include "scheduler.h"

#include <pthread.h>

#include <algorithm>
#include <functional>

namespace tpool::engine {

namespace {
constexpr std::chrono::milliseconds kMaxBackoff = std::chrono::hours(1);
}  // namespace

std::chrono::milliseconds backoff_delay(std::chrono::milliseconds base,
                                        std::chrono::milliseconds cap, std::uint32_t failed,
                                        double u01) noexcept {
  if (base.count() <= 0 || failed == 0) return std::chrono::milliseconds(0);
  const std::chrono::milliseconds limit =
      cap.count() > 0 ? std::min(cap, kMaxBackoff) : kMaxBackoff;
  // base * 2^(failed-1), saturating at limit (no overflow: stop doubling once over).
  std::int64_t ceiling = base.count();
  for (std::uint32_t i = 1; i < failed && ceiling < limit.count(); ++i) ceiling *= 2;
  ceiling = std::min<std::int64_t>(ceiling, limit.count());
  const double u = std::clamp(u01, 0.0, 1.0);
  return std::chrono::milliseconds(static_cast<std::int64_t>(u * static_cast<double>(ceiling)));
}

Scheduler::Scheduler(Engine& engine, bool thread) : engine_(engine) {
  if (thread) thread_ = std::thread([this] { loop(); });
}

Scheduler::~Scheduler() {
  {
    MutexLock lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

bool Scheduler::add(JobPtr job, TimePoint due) {
  {
    MutexLock lock(mu_);
    if (closed_) return false;  // (K4)
    const bool earliest = heap_.empty() || due < heap_.front().due;
    heap_.push_back({due, next_seq_++, std::move(job)});
    std::push_heap(heap_.begin(), heap_.end(), std::greater<>{});
    if (!earliest) return true;
  }
  cv_.notify_all();  // the thread's wait ends earlier now
  return true;
}

bool Scheduler::runnable_locked(TimePoint now) const {
  if (!ready_.empty() && !waiting_capacity_) return true;
  return !heap_.empty() && heap_.front().due <= now;
}

std::size_t Scheduler::run_due() {
  MutexLock run(run_mu_);  // (K2)
  std::size_t queued = 0;
  for (;;) {
    JobPtr job;
    {
      MutexLock lock(mu_);
      const TimePoint now = engine_.now();
      while (!heap_.empty() && heap_.front().due <= now) {  // (K1) due: heap_ -> ready_
        std::pop_heap(heap_.begin(), heap_.end(), std::greater<>{});
        ready_.push_back(std::move(heap_.back().job));
        heap_.pop_back();
      }
      waiting_capacity_ = false;
      if (ready_.empty()) return queued;
      job = std::move(ready_.front());
      ready_.pop_front();
    }
    switch (engine_.queue_scheduled(job)) {
      case Engine::Queued::kQueued:
        ++queued;
        break;
      case Engine::Queued::kDropped:  // (K3) it ended while held
        break;
      case Engine::Queued::kNoRoom: {
        {
          MutexLock lock(mu_);
          if (closed_) {
            lock.unlock();
            job->end_scheduled(JobState::kCancelled, job->scheduled_message(false));
            continue;
          }
          ready_.push_front(std::move(job));
          waiting_capacity_ = true;
        }
        // (K5) A task end calls on_capacity; false: there is room now.
        if (engine_.wait_for_capacity(this)) return queued;
        break;
      }
    }
  }
}

void Scheduler::on_capacity() {
  {
    MutexLock lock(mu_);
    waiting_capacity_ = false;
  }
  cv_.notify_all();
}

void Scheduler::close(const std::string& why) {
  std::vector<JobPtr> held;
  {
    MutexLock lock(mu_);
    closed_ = true;  // (K4)
    for (Entry& e : heap_) held.push_back(std::move(e.job));
    heap_.clear();
    for (auto& j : ready_) held.push_back(std::move(j));
    ready_.clear();
  }
  for (const auto& j : held) {
    j->end_scheduled(JobState::kCancelled, j->scheduled_message(false) + "; " + why);
  }
}

std::size_t Scheduler::cancel_group(const std::atomic<bool>* group) {
  if (group == nullptr) return 0;
  std::vector<JobPtr> mine;  // (K6) references: ended after the lock, held on (K3)
  {
    MutexLock lock(mu_);
    for (const Entry& e : heap_) {
      if (e.job->group_cancel_ == group) mine.push_back(e.job);
    }
    for (const JobPtr& j : ready_) {
      if (j->group_cancel_ == group) mine.push_back(j);
    }
  }
  std::size_t ended = 0;
  for (const auto& j : mine) {
    ended += j->end_scheduled(JobState::kCancelled, j->scheduled_message(false)) ? 1 : 0;
  }
  return ended;
}

std::size_t Scheduler::size() const {
  MutexLock lock(mu_);
  return heap_.size() + ready_.size();
}

Scheduler::TimePoint Scheduler::next_due() const {
  MutexLock lock(mu_);
  if (!ready_.empty()) return engine_.now();
  return heap_.empty() ? TimePoint::max() : heap_.front().due;
}

void Scheduler::loop() {
  pthread_setname_np(pthread_self(), "tpool-sched");
  MutexLock lock(mu_);
  while (!stop_) {
    if (runnable_locked(engine_.now())) {
      lock.unlock();
      run_due();
      lock.lock();
      continue;
    }
    if (heap_.empty()) {
      cv_.wait(lock);
    } else {
      // (K5) the thread runs with the real clock only: due is a steady time.
      cv_.wait_until(lock, heap_.front().due);
    }
  }
}

}  // namespace tpool::engine
