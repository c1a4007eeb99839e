// Statistics: summing the per-context counter blocks, the progress count
// the daemon's systemd watchdog reads, and the PoolStats snapshot.
//
// Invariants (pool_internal.h inv 4: each counter block has one writer, or
// is the shared block written by fetch_add):
//   (1) Every read here is relaxed: a snapshot is a sum of counters read at
//       slightly different times, never a synchronisation point. Only the
//       shutdown handshake (inv 5) orders the accepted/finished sums, by its
//       own fences, not by these loads.
//   (2) sum_finished() is read before sum_accepted() by its callers, so a
//       concurrent task moves both and finished <= accepted still holds.
//   (3) stats() reads a worker's `spawned` and `exited` with acquire (pairs
//       with the releases in start_worker, join_all and worker_main) so a
//       worker counts as running only between its start and its exit.
#include <algorithm>

#include "pool_internal.h"

namespace tpool {

using detail::Worker;

std::uint64_t Pool::Impl::sum_accepted() const {
  std::uint64_t n = 0;
  for_each_counters([&](const detail::Counters& c) {
    n += c.accepted.load(std::memory_order_relaxed) - c.unaccepted.load(std::memory_order_relaxed);
  });
  return n;
}

std::uint64_t Pool::Impl::sum_finished() const {
  std::uint64_t n = 0;
  for_each_counters([&](const detail::Counters& c) {
    n += c.completed.load(std::memory_order_relaxed) + c.failed.load(std::memory_order_relaxed) +
         c.cancelled.load(std::memory_order_relaxed);
  });
  return n;
}

void Pool::Impl::for_each_counters(const std::function<void(const detail::Counters&)>& f) const {
  f(ext);
  for (const auto& w : workers) f(w->counters);
  for (const auto& s : submitters) f(s->counters);
}

std::uint64_t Pool::Impl::progress() const noexcept {
  std::uint64_t n = 0;
  for (const auto& w : workers) n += w->tasks_started.load(std::memory_order_relaxed);
  return n;
}

PoolStats Pool::Impl::stats() const {
  PoolStats st;
  std::uint64_t acquired = 0;
  std::uint64_t released = 0;
  for_each_counters([&](const detail::Counters& c) {
    auto r = [](const std::atomic<std::uint64_t>& a) { return a.load(std::memory_order_relaxed); };
    st.submitted += r(c.submitted);
    st.completed += r(c.completed);
    st.failed += r(c.failed);
    st.cancelled += r(c.cancelled);
    st.rejected_full += r(c.rejected_full);
    st.rejected_shutdown += r(c.rejected_shutdown);
    st.rejected_timeout += r(c.rejected_timeout);
    st.steal_ops += r(c.steal_ops);
    st.steal_tasks += r(c.steal_tasks);
    st.parks += r(c.parks);
    st.wakeups_no_work += r(c.wakeups_no_work);
    st.local_overflows += r(c.local_overflows);
    st.inline_runs += r(c.inline_runs);
    acquired += r(c.acquired);
    released += r(c.released);
    for (std::size_t l = 0; l < kLaneCount; ++l) st.lanes[l].completed += r(c.lane_completed[l]);
  });
  st.live_descriptors = acquired >= released ? acquired - released : 0;
  st.descriptor_capacity = cfg.queue_capacity;
  for (std::size_t l = 0; l < kLaneCount; ++l) {
    st.lanes[l].inject_depth = inject[l]->size_approx();
    st.inject_depth += st.lanes[l].inject_depth;
  }
  for (std::size_t i = 0; i < total_slots; ++i) {
    const Worker& w = *workers[i];
    const std::uint64_t depth = w.local->size_approx();  // the LIFO slot is owner-only (inv 3)
    st.local_depth_sum += depth;
    st.lanes[static_cast<std::size_t>(w.lane)].local_depth += depth;
    st.local_depth_max = std::max(st.local_depth_max, depth);
    for (std::size_t l = 0; l < kLaneCount; ++l) {
      w.wait_hist[l].add_to(st.lanes[l].wait);
      w.run_hist[l].add_to(st.lanes[l].run);
    }
    // (inv 3) Acquire pairs with start_worker's and the joins' release
    // stores of `spawned` and worker_main's release store of `exited`.
    const bool running =
        w.spawned.load(std::memory_order_acquire) && !w.exited.load(std::memory_order_acquire);
    if (!running) continue;
    if (!w.overflow) {
      ++st.workers;
      ++st.lanes[static_cast<std::size_t>(w.lane)].workers;
    }
    if (w.busy.load(std::memory_order_relaxed)) ++st.busy_workers;
    if (w.parked.load(std::memory_order_relaxed)) ++st.parked_workers;
  }
  for (const auto& s : submitters) {
    // Acquire pairs with submitter.cc's CAS/store of in_use (its inv 1).
    if (s->in_use.load(std::memory_order_acquire)) st.submitter_depth += s->queue->size_approx();
  }
  // Relaxed: a sample for statistics (inv 7's count is never negative).
  st.searching_workers = static_cast<std::size_t>(
      std::max<std::int64_t>(0, searching.load(std::memory_order_relaxed)));
  st.stalls_detected = stalls_detected.load(std::memory_order_relaxed);
  st.stalled_now = stalled_now.load(std::memory_order_relaxed);
  st.overflow_spawned = overflow_spawned.load(std::memory_order_relaxed);
  st.overflow_retired = overflow_retired.load(std::memory_order_relaxed);
  st.overflow_active = overflow_active.load(std::memory_order_relaxed);
  st.overflow_max = cfg.max_overflow_workers;
  // Threads registered on an event count (between prepare_wait and the end
  // of their wait): asleep, or about to be.
  st.blocked_submits = free_ec.waiters();
  st.blocked_waits = done_ec.waiters();
  st.blocked_help_waits = help_ec.waiters();
  st.blocked_shutdowns = idle_ec.waiters();
  st.timestamps_enabled = kTimestamps;
  return st;
}

}  // namespace tpool
