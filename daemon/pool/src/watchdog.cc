// The watchdog: every watchdog_interval, count stalled workers, start one
// overflow worker, wake a sleeper per lane with queued work, retire idle
// overflow workers (docs/algorithms.md, "Watchdog and overflow workers").
//
// Invariants:
//   (1) tick() runs under spawn_mu, on the watchdog thread or the manual
//       driver's caller, never after join_all set `stop`: it is the only
//       place an overflow worker is started, joined (reaped) or told to
//       retire, and Worker::wd_* are its alone.
//   (2) A stall is judged on one TaskStamp word (start and lane of the same
//       task), read with acquire against run_task's release store.
//   (3) Each stalled task counts once in stalls_detected (wd_stalled_task
//       remembers the task number it counted).
//   (4) Overflow workers drain both lanes and keep no LIFO slot, so retiring
//       one never strands a task (submit.cc enqueue).
#include <string>

#include "pool_internal.h"

namespace tpool {

using detail::Worker;

void Pool::Impl::watchdog_main() {
  MutexLock lk(wd_mu);
  while (!wd_stop) {
    // The real clock paces the thread; tick() judges stalls on cfg.clock.
    // join_all() sets wd_stop under wd_mu and then notifies.
    const auto until = std::chrono::steady_clock::now() + cfg.watchdog_interval;
    while (!wd_stop && wd_cv.wait_until(lk, until) != std::cv_status::timeout) {
    }
    if (wd_stop) break;
    lk.unlock();
    tick();
    lk.lock();
  }
}

// The watchdog's stall rule (docs/algorithms.md, "Watchdog"): a worker is
// stalled when it has run one task for longer than
// blocking_promotion_timeout, whatever its lane or the task's, except a
// blocking worker running a blocking-lane task (blocking work may block:
// that is what the lane is for). A blocking worker that helped the default
// lane and got stuck there is stalled like a default worker: its own lane
// waits behind it. Watchdog thread (or the manual driver) only.
bool Pool::Impl::stalled(const Worker& w, std::int64_t now) const noexcept {
  // Acquire pairs with run_task's release store of the stamp.
  const std::uint64_t s = w.task_stamp.load(std::memory_order_acquire);
  if (!detail::TaskStamp::running(s)) return false;
  if (w.lane == Lane::kBlocking && detail::TaskStamp::lane(s) == Lane::kBlocking) return false;
  return now - detail::TaskStamp::start_ns(s) > cfg.blocking_promotion_timeout.count();
}

// Is work of `lane` queued where a worker that drains the lane could take
// it (inject ring, the lane's local queues, submitter queues for the default
// lane)? Sizes are approximate: a hint for the tick's wake, not a handshake.
// LIFO slots are left out: only their owner drains them, and an owner never
// parks with its slot full (inv 6).
bool Pool::Impl::lane_has_queued(Lane lane) const noexcept {
  const auto l = static_cast<std::size_t>(lane);
  if (inject[l]->size_approx() > 0) return true;
  if (!uses_local_queues()) return false;
  for (std::size_t i = 0; i < total_slots; ++i) {
    if (workers[i]->lane == lane && workers[i]->local->size_approx() > 0) return true;
  }
  if (lane == Lane::kDefault) {
    for (const auto& s : submitters) {
      // Acquire pairs with submitter.cc's CAS/store of in_use.
      if (s->in_use.load(std::memory_order_acquire) && s->queue->size_approx() > 0) return true;
    }
  }
  return false;
}

// One watchdog tick (the seed's watchdogMain body): join retired overflow
// workers, count stalled workers (stalled()), spawn at most one overflow
// worker, wake one sleeping worker per lane with queued work, and tell idle
// overflow workers to retire.
void Pool::Impl::tick() {
  MutexLock lk(spawn_mu);  // serialises with spawn, shutdown's joins
  // stop: join_all is joining the threads without spawn_mu (see there).
  if (joined || stop.load(std::memory_order_relaxed)) return;
  // Reap: join overflow workers that exited since the last tick.
  for (std::size_t i = core_slots; i < total_slots; ++i) {
    Worker& w = *workers[i];
    // Acquire pairs with worker_main's release store of `exited`: the
    // worker has handed back its cache before we reap it.
    if (w.thread.joinable() && w.exited.load(std::memory_order_acquire)) {
      w.thread.join();
      w.spawned.store(false, std::memory_order_release);  // pairs with stats()' acquire
      overflow_active.fetch_sub(1, std::memory_order_relaxed);
      overflow_retired.fetch_add(1, std::memory_order_relaxed);
    }
  }
  const std::int64_t now = now_ns();
  std::size_t stalled_count = 0;
  for (std::size_t i = 0; i < total_slots; ++i) {
    Worker& w = *workers[i];
    if (!w.thread.joinable() || !stalled(w, now)) continue;
    ++stalled_count;
    const std::uint64_t task = w.tasks_started.load(std::memory_order_relaxed);
    if (w.wd_stalled_task != task) {  // count each stalled task once
      w.wd_stalled_task = task;
      stalls_detected.fetch_add(1, std::memory_order_relaxed);
    }
  }
  stalled_now.store(stalled_count, std::memory_order_relaxed);
  if (stalled_count > 0 && accepting.load(std::memory_order_relaxed)) {
    for (std::size_t i = core_slots; i < total_slots; ++i) {
      if (!workers[i]->thread.joinable()) {
        if (start_worker(i, true)) overflow_spawned.fetch_add(1, std::memory_order_relaxed);
        break;
      }
    }
  }
  // A backstop for wakes that were skipped on an awake count which includes
  // a worker stuck in a task (coalescing skips while awake[lane] > 0, and a
  // stuck worker stays counted): a lane with queued work never waits longer
  // than one tick while a worker that drains it sleeps. wake_one wakes at
  // most one, and only a worker that is asleep (nobody: nothing to do).
  for (std::size_t l = 0; l < (lanes_on ? kLaneCount : 1); ++l) {
    if (lane_has_queued(static_cast<Lane>(l))) (void)wake_one(static_cast<Lane>(l));
  }
  // Retire: an overflow worker parked through two whole ticks (2 x interval).
  for (std::size_t i = core_slots; i < total_slots; ++i) {
    Worker& w = *workers[i];
    // Acquire pairs with worker_main's release store of `exited`.
    if (!w.thread.joinable() || w.exited.load(std::memory_order_acquire)) continue;
    if (!w.parked.load(std::memory_order_relaxed)) {
      w.wd_idle_ticks = 0;
      continue;
    }
    if (++w.wd_idle_ticks > 2) {
      {
        MutexLock plk(w.park_mu);
        // Release pairs with the worker's acquire in exiting() (worker.cc
        // idle()); park_mu orders it before the parked worker's check too.
        w.retire.store(true, std::memory_order_release);
      }
      w.park_cv.notify_one();
    }
  }
}

}  // namespace tpool
