// Shutdown: stop accepting, cancel or drain what is queued, wait for the
// accepted work to end, stop and join the workers and the watchdog.
//
// Invariants (pool_internal.h inv 5 is the accept/shutdown handshake):
//   (1) `accepting` goes true -> false once, in shutdown() (or when create()
//       fails), never back. `stop` goes false -> true once, in join_all()
//       under spawn_mu, after which no worker is started (notify() and
//       tick() check it under spawn_mu).
//   (2) join_all() joins the threads without holding spawn_mu (a worker may
//       wait for spawn_mu in notify()); its callers never race each other
//       (shutdown_mu, or the destructor after shutdown returned).
//   (3) shutdown() returns Ok only once every accepted task has ended
//       (finished >= accepted, pool inv 5) and every thread is joined; then
//       `joined` is set (under spawn_mu) and later calls return Ok at once.
//   (4) shutdown() waits for finished >= accepted on idle_ec, never on a
//       timer. Its counts only change by finish() (and run_inline) and by a
//       submit's un-accept; the thread that makes the last such change
//       notifies idle_ec after a seq_cst fence that follows it: a worker at
//       its next park or exit (worker.cc inv 5), a submitter right after
//       (submit.cc unaccept, submit_one's take-back).
#include <algorithm>
#include <chrono>
#include <string>

#include "pool_internal.h"

namespace tpool {

using detail::Descriptor;
using detail::DescState;
using detail::Worker;

void Pool::Impl::join_all() {
  {
    MutexLock lk(wd_mu);
    wd_stop = true;
  }
  wd_cv.notify_all();
  if (watchdog.joinable()) watchdog.join();
  {
    // Set stop under spawn_mu, then join WITHOUT it: a worker may be inside
    // notify() waiting for spawn_mu to grow the pool (a spill from an inject
    // ring while cancelled or timed-out work is still queued). Holding
    // spawn_mu across the joins deadlocked that worker against this thread
    // (found by the fuzz harness on a loaded machine). After stop is set
    // nothing starts a worker: notify() checks stop under spawn_mu, tick()
    // cannot run (the watchdog is joined above), and start() ran before. So
    // the joins below are the only writers of the threads' state; callers of
    // join_all do not race each other (shutdown_mu, or the destructor).
    MutexLock lk(spawn_mu);
    if (joined) return;
    // Pairs with the workers' acquire loads of `stop` (worker.cc: exiting()
    // in idle(), worker_main's exit checks). Release would do: the park_mu
    // lock/unlock below orders it before a parked worker's next check;
    // seq_cst costs nothing once per pool.
    stop.store(true, std::memory_order_seq_cst);
  }
  for (auto& w : workers) {
    { MutexLock plk(w->park_mu); }
    w->park_cv.notify_all();
  }
  for (std::size_t i = 0; i < total_slots; ++i) {
    Worker& w = *workers[i];
    if (!w.thread.joinable()) continue;
    w.thread.join();
    w.spawned.store(false, std::memory_order_release);  // pairs with stats()' acquire
    if (w.overflow) {
      overflow_active.fetch_sub(1, std::memory_order_relaxed);
      overflow_retired.fetch_add(1, std::memory_order_relaxed);
    }
  }
  MutexLock lk(spawn_mu);
  joined = true;
}

void Pool::Impl::abandon() {
  // (inv 1) seq_cst as in shutdown(): no submit can have been made yet (the
  // Pool was never returned), so there is nothing to drain.
  accepting.store(false, std::memory_order_seq_cst);
  join_all();
}

Status Pool::Impl::shutdown(ShutdownMode mode, std::chrono::nanoseconds timeout) {
  if (this_task::pool() == self_) {
    return Status::InvalidArgument(
        "shutdown() was called from one of the pool's own tasks; call it "
        "from a thread that is not a worker");
  }
  MutexLock lk(shutdown_mu);
  {
    MutexLock slk(spawn_mu);
    if (joined) return Status::Ok();
  }
  // (inv 5) Stop accepting, then fence, then count what was accepted. The
  // fence pairs with the submitters' fence between their accepted count and
  // their load of `accepting` (submit_one, submit_many): one of us sees the
  // other.
  accepting.store(false, std::memory_order_seq_cst);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  // Release submitters blocked on backpressure: our store of `accepting`,
  // the fence above, then the waiter word (event_count.h inv 3).
  free_ec.notify_all_fenced();
  if (mode == ShutdownMode::kCancelPending) {
    // Claim every queued descriptor (the seed's cancelQueuedTasks) and end it
    // cancelled; their queue entries go stale (inv 2). Claimed, not straight
    // to cancelled: a terminal state would let wait() free the descriptor
    // while on_cancel and finish() still use it (inv 1).
    for (std::uint32_t i = 0; i < cfg.queue_capacity; ++i) {
      Descriptor& d = descs[i];
      DescState expect = DescState::kQueued;
      // Acquire pairs with publish()'s release store of kQueued: the task's
      // fields (on_cancel, ctx) are visible once the claim wins; the CAS
      // races run_task's claim and submit_one's take-back (inv 1).
      if (d.state.compare_exchange_strong(expect, DescState::kClaimed, std::memory_order_acq_rel)) {
        if (d.on_cancel != nullptr) d.on_cancel(d.ctx);
        finish(nullptr, i, DescState::kCancelled);
      }
    }
  }
  // Wait for everything accepted to end (inv 4): sleep on idle_ec, which a
  // worker notifies before it parks or exits (worker.cc inv 5) and a submit
  // that gives a task back notifies after its counts.
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto all_done = [&] {
    const std::uint64_t fin = sum_finished();  // finished first: fin <= accepted
    return fin >= sum_accepted();
  };
  bool drained = true;
  while (!all_done()) {
    // event_count.h: register, re-check, then sleep.
    const detail::EventCount::Key key = idle_ec.prepare_wait();
    if (all_done()) {
      idle_ec.cancel_wait();
      break;
    }
    if (timeout.count() < 0) {
      idle_ec.commit_wait(key);
    } else if (!idle_ec.commit_wait_until(key, deadline)) {
      drained = all_done();  // timed out: one last look
      break;
    }
  }
  if (!drained) {
    return Status::Timeout("shutdown did not finish within " + std::to_string(timeout.count()) +
                           " ns: " + std::to_string(sum_accepted() - sum_finished()) +
                           " tasks are still queued or running; call shutdown again, or with "
                           "kCancelPending, to finish");
  }
  join_all();
  // Drain-on-release of every slot's DescCache (the seed's shutdown order).
  for (auto& w : workers) {
    w->own.cache.unbind();  // its owner is joined: hand the cache to us
    return_cached(w->own.cache);
  }
  return Status::Ok();
}

}  // namespace tpool
