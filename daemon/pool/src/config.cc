// Config validation and defaults, and the small value types of the pool's
// API: CancelToken, WaitGroup, the to_string()s, LocalQueue.
//
// Invariants:
//   (1) Config::resolved() is the one place a default is computed; the pool
//       runs (and Pool::config() returns) exactly what it gives.
//   (2) WaitGroup: the last done() touches the group only under mu_, and a
//       waiter returns only after taking mu_ (see WaitGroup::done()).
#include <algorithm>
#include <string>
#include <thread>

#include "pool_internal.h"

namespace tpool {

namespace {

Status out_of_range(const char* field, std::uint64_t value, const std::string& range) {
  return Status::InvalidArgument(std::string("Config.") + field + " = " + std::to_string(value) +
                                 " is out of range: it must be " + range);
}

}  // namespace

Config Config::resolved() const {
  Config r = *this;
  if (r.max_threads == 0) r.max_threads = std::max(1u, std::thread::hardware_concurrency());
  if (r.min_threads == 0) r.min_threads = r.max_threads;
  const SchedulerVariant variant = kVariantPinned ? kPinnedVariant : r.scheduler_variant;
  if (variant == SchedulerVariant::kLaneExtension && r.blocking_workers > 0) {
    r.min_threads = std::max(r.min_threads, r.blocking_workers + 1);
  }
  return r;
}

Status Config::validate() const {
  // Judged as the pool runs it (resolved()); the messages quote the fields
  // as given, since those are what the caller can change.
  const std::size_t max = resolved().max_threads;
  if (max > 4096) return out_of_range("max_threads", max_threads, "1..4096 (0: one per core)");
  if (min_threads > max) {
    return out_of_range("min_threads", min_threads,
                        "at most max_threads (" + std::to_string(max) + "; 0: max_threads)");
  }
  if (!detail::is_power_of_two(queue_capacity) || queue_capacity < 2 ||
      queue_capacity > (std::size_t{1} << 30)) {
    return out_of_range("queue_capacity", queue_capacity, "a power of two in 2..2^30");
  }
  if (!detail::is_power_of_two(local_queue_capacity) || local_queue_capacity < 2 ||
      local_queue_capacity > 65536) {
    return out_of_range("local_queue_capacity", local_queue_capacity, "a power of two in 2..65536");
  }
  if (lifo_capacity < 1 || lifo_capacity > 256) {
    return out_of_range("lifo_capacity", lifo_capacity, "1..256 (1: the seed's LIFO slot)");
  }
  if (wake_coalesce_batch < 1 || wake_coalesce_batch > 1024) {
    return out_of_range("wake_coalesce_batch", wake_coalesce_batch, "1..1024");
  }
  if (inject_batch_size < 1 || inject_batch_size > 32) {
    return out_of_range("inject_batch_size", inject_batch_size, "1..32");
  }
  if (steal_batch_size < 1 || steal_batch_size > local_queue_capacity / 2 + 1) {
    return out_of_range(
        "steal_batch_size", steal_batch_size,
        "1..local_queue_capacity/2 (" + std::to_string(local_queue_capacity / 2 + 1) + ")");
  }
  if (max_submitters > 64) return out_of_range("max_submitters", max_submitters, "0..64");
  if (blocking_workers > 0 && scheduler_variant != SchedulerVariant::kLaneExtension) {
    return Status::InvalidArgument(
        "Config.blocking_workers = " + std::to_string(blocking_workers) +
        " needs scheduler_variant = lane_extension; set the variant or use 0 blocking workers");
  }
  if (blocking_workers >= max && blocking_workers > 0) {
    return out_of_range("blocking_workers", blocking_workers,
                        "below max_threads (" + std::to_string(max) +
                            "), leaving at least one default-lane worker");
  }
  if (max_overflow_workers > 4096) {
    return out_of_range("max_overflow_workers", max_overflow_workers, "0..4096");
  }
  if (max_overflow_workers > 0 && watchdog_interval.count() <= 0) {
    return Status::InvalidArgument(
        "Config.max_overflow_workers = " + std::to_string(max_overflow_workers) +
        " needs a positive watchdog_interval (it is " + std::to_string(watchdog_interval.count()) +
        " ns)");
  }
  if (watchdog_interval.count() < 0) {
    return Status::InvalidArgument(
        "Config.watchdog_interval = " + std::to_string(watchdog_interval.count()) +
        " ns is out of range: it must be at least 0 ns (0: no watchdog)");
  }
  if (blocking_promotion_timeout.count() <= 0) {
    return Status::InvalidArgument("Config.blocking_promotion_timeout must be positive (it is " +
                                   std::to_string(blocking_promotion_timeout.count()) + " ns)");
  }
  if constexpr (kVariantPinned) {
    if (scheduler_variant != kPinnedVariant) {
      return Status::InvalidArgument(
          std::string("Config.scheduler_variant = ") + std::string(to_string(scheduler_variant)) +
          " but this build pins it to " + std::string(to_string(kPinnedVariant)) +
          " (TPOOL_SCHEDULER_VARIANT); use that variant or rebuild with runtime");
    }
  }
  return Status::Ok();
}

std::string_view to_string(QueueKind k) noexcept {
  return k == QueueKind::kChaseLev ? "chase_lev" : "ring";
}
std::string_view to_string(SchedulerVariant v) noexcept {
  switch (v) {
    case SchedulerVariant::kGlobalQueue:
      return "global_queue";
    case SchedulerVariant::kWorkStealing:
      return "work_stealing";
    case SchedulerVariant::kLaneExtension:
      return "lane_extension";
  }
  return "unknown";
}
std::string_view to_string(TaskOutcome o) noexcept {
  switch (o) {
    case TaskOutcome::kCompleted:
      return "completed";
    case TaskOutcome::kFailed:
      return "failed";
    case TaskOutcome::kCancelled:
      return "cancelled";
  }
  return "unknown";
}

void CancelToken::set_deadline(Clock::time_point d) noexcept {
  const std::int64_t ns = d.time_since_epoch().count();
  const std::uint64_t deadline = ns <= 0 ? 0 : static_cast<std::uint64_t>(ns);  // < 2^63
  std::uint64_t w = word_.load(std::memory_order_relaxed);
  // Release: as cancel(); keeps the cancelled bit a racing cancel() set.
  while (!word_.compare_exchange_weak(w, (w & kCancelledBit) | deadline, std::memory_order_acq_rel,
                                      std::memory_order_relaxed)) {
  }
}

CancelToken::Clock::time_point CancelToken::deadline() const noexcept {
  const std::uint64_t d = word_.load(std::memory_order_relaxed) & ~kCancelledBit;
  if (d == kNoDeadline) return Clock::time_point::max();
  return Clock::time_point(Clock::duration(static_cast<std::int64_t>(d)));
}

CancelToken::Reason CancelToken::reason_of(std::uint64_t w, Clock::time_point now) noexcept {
  if ((w & kCancelledBit) != 0) return Reason::kCancelled;
  const std::int64_t n = now.time_since_epoch().count();
  if (w != kNoDeadline && n >= 0 && static_cast<std::uint64_t>(n) >= w) return Reason::kDeadline;
  return Reason::kNone;
}

CancelToken::Reason CancelToken::reason() const noexcept {
  // Acquire pairs with cancel()'s release: whatever the canceller wrote
  // before cancelling is visible to a task that sees the bit. The clock is
  // read only when a deadline is set.
  const std::uint64_t w = word_.load(std::memory_order_acquire);
  if ((w & kCancelledBit) != 0) return Reason::kCancelled;
  if (w == kNoDeadline) return Reason::kNone;
  return reason_of(w, Clock::now());
}

CancelToken::Reason CancelToken::reason_at(Clock::time_point now) const noexcept {
  // Acquire load: as in reason().
  return reason_of(word_.load(std::memory_order_acquire), now);
}

// Lifetime: a WaitGroup usually lives on its waiter's stack and dies as soon
// as wait() returns, so the last done() must not touch the group after a
// waiter can see zero. Every decrement but the last is a CAS that leaves the
// count positive; the last one happens under mu_, and a waiter returns only
// while holding mu_ (wait() always locks it), that is, after that done() has
// unlocked, its final access to the group.
void WaitGroup::done() noexcept {
  std::int64_t n = pending_.load(std::memory_order_relaxed);
  while (n > 1) {
    // acq_rel: the task's effects happen before a waiter that sees zero (the
    // release sequence reaches the last decrement's release).
    if (pending_.compare_exchange_weak(n, n - 1, std::memory_order_acq_rel,
                                       std::memory_order_relaxed)) {
      return;
    }
  }
  MutexLock lk(mu_);
  // acq_rel pairs with the waiter's acquire load of pending_ under mu_.
  if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    cv_.notify_all();
    // A help_wait sleeping on its pool's event count (wait.cc inv 4): our
    // decrement, then notify_all's fence and its load of the waiter word.
    if (waker_ != nullptr) waker_->notify_all();
  }
}

bool WaitGroup::wait(std::chrono::nanoseconds timeout) {
  // Always under mu_, even when the count is already zero: see done().
  MutexLock lk(mu_);
  auto ready = [&] { return pending_.load(std::memory_order_acquire) <= 0; };
  if (timeout.count() < 0) {
    cv_.wait(lk, ready);
    return true;
  }
  return cv_.wait_for(lk, timeout, ready);
}

bool WaitGroup::add_waker(detail::EventCount* ec) noexcept {
  MutexLock lk(mu_);
  if (waker_ != nullptr && waker_ != ec) return false;
  waker_ = ec;
  ++waker_refs_;
  return true;
}

void WaitGroup::remove_waker(detail::EventCount* ec) noexcept {
  MutexLock lk(mu_);
  if (waker_ == ec && --waker_refs_ == 0) waker_ = nullptr;
}

namespace detail {

LocalQueue::LocalQueue(QueueKind kind, std::size_t cap) {
  if (kind == QueueKind::kChaseLev) {
    deque_ = std::make_unique<WorkDeque<Entry>>(cap);
  } else {
    ring_ = std::make_unique<RingQueue<Entry>>(cap);
  }
}

std::size_t LocalQueue::push_many(std::span<const Entry> es) noexcept {
  if (ring_) return ring_->push_many(es);
  std::size_t n = 0;
  while (n < es.size() && deque_->push_bottom(es[n])) ++n;
  return n;
}

std::size_t LocalQueue::steal(std::span<Entry> dst, std::size_t max_batch) noexcept {
  if (ring_) return ring_->steal_half(dst, max_batch);
  if (dst.empty()) return 0;
  return deque_->steal_top(dst[0]) ? 1 : 0;  // Chase-Lev: one at a time, no retry
}

}  // namespace detail
}  // namespace tpool
