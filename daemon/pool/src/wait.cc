// Waiting for tasks: wait() and detach() on a waitable task's handle, and
// help_wait() on a WaitGroup from a worker (help-first join).
//
// Invariants (pool_internal.h inv 1 and 2 apply; these are this file's):
//   (1) A waitable descriptor is freed by exactly one of wait(), detach() or
//       finish() (a detached task that ends): each frees only by a CAS from
//       the terminal state it read to kFree, and recycle()s only if it won.
//   (2) A handle is stale once its descriptor's generation moved on; wait()
//       and detach() check it first and never touch a newer task's state
//       except through the CAS of (1), which a newer task's state fails.
//   (3) help_wait() returns through WaitGroup::wait, which takes the group's
//       mutex: the last done() has let go of the group before our caller can
//       destroy it.
//   (4) help_wait() sleeps on help_ec only while its group holds help_ec as
//       its waker (WaitGroup::add_waker, under the group's mutex): the done()
//       that takes the count to zero notifies it under that mutex, after its
//       decrement (event_count.h inv 3: the decrement, notify_all's fence,
//       the waiter word). Every publication of work notifies help_ec too
//       (notify()). So a sleeping help_wait wakes for its group's zero and
//       for every task it might run; it never sleeps on a timer.
#include <algorithm>
#include <chrono>

#include "pool_internal.h"

namespace tpool {

using detail::Descriptor;
using detail::DescState;
using detail::Worker;

Result<TaskOutcome> Pool::Impl::wait(TaskHandle h, std::chrono::nanoseconds timeout) {
  if (!h.valid() || h.index >= cfg.queue_capacity) {
    return Status::InvalidArgument(
        "wait() needs the handle of a task submitted with waitable = true");
  }
  Descriptor& d = descs[h.index];
  // (inv 2) Acquire pairs with recycle()'s release bump of the generation.
  auto stale = [&] { return d.generation.load(std::memory_order_acquire) != h.generation; };
  auto terminal = [&](DescState s) {
    return s == DescState::kCompleted || s == DescState::kFailed || s == DescState::kCancelled;
  };
  if (stale()) return Status::StaleHandle("this task was already waited for or detached");
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  DescState s = d.state.load(std::memory_order_acquire);  // pairs with finish()'s release
  if (!terminal(s)) {
    // Sleep on done_ec until the task ends (finish() notifies it after its
    // release store of the terminal state and its seq_cst fence), the handle
    // goes stale, or the deadline passes. event_count.h: register, re-check,
    // then sleep; every wake re-checks.
    auto ready = [&] {
      s = d.state.load(std::memory_order_acquire);  // pairs with finish()'s release
      return terminal(s) || stale();
    };
    bool ok = true;
    while (!ready()) {
      const detail::EventCount::Key key = done_ec.prepare_wait();
      if (ready()) {
        done_ec.cancel_wait();
        break;
      }
      if (timeout.count() < 0) {
        done_ec.commit_wait(key);
      } else if (!done_ec.commit_wait_until(key, deadline)) {
        ok = ready();  // timed out: one last look
        break;
      }
    }
    if (!ok)
      return Status::Timeout("the task did not end within the wait timeout; wait again or detach");
    if (stale()) return Status::StaleHandle("this task was already waited for or detached");
  }
  // (inv 1) CAS on release: a concurrent wait() or detach() frees it only
  // once. Acquire pairs with finish()'s release store of the terminal state:
  // the task's effects happen before our caller hears the outcome.
  DescState expect = s;
  if (!d.state.compare_exchange_strong(expect, DescState::kFree, std::memory_order_acq_rel)) {
    return Status::StaleHandle("this task was already waited for or detached");
  }
  recycle(h.index, caller_counters());  // (inv 2) we won the CAS to kFree: the only writer
  switch (s) {
    case DescState::kFailed:
      return TaskOutcome::kFailed;
    case DescState::kCancelled:
      return TaskOutcome::kCancelled;
    default:
      return TaskOutcome::kCompleted;
  }
}

void Pool::Impl::detach(TaskHandle h) {
  if (!h.valid() || h.index >= cfg.queue_capacity) return;
  Descriptor& d = descs[h.index];
  // (inv 2) Acquire pairs with recycle()'s release bump of the generation.
  if (d.generation.load(std::memory_order_acquire) != h.generation) return;
  d.detached.store(true, std::memory_order_relaxed);
  // seq_cst pairs with finish()'s fence between its state store and its
  // load of `detached`.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  DescState s = d.state.load(std::memory_order_relaxed);
  if (s == DescState::kCompleted || s == DescState::kFailed || s == DescState::kCancelled) {
    // (inv 1) acq_rel: races finish()'s CAS and wait()'s for the one free.
    if (d.state.compare_exchange_strong(s, DescState::kFree, std::memory_order_acq_rel)) {
      recycle(h.index, caller_counters());  // (inv 2) we won the CAS to kFree: the only writer
    }
  }
}

bool Pool::Impl::help_wait(WaitGroup& wg, std::chrono::nanoseconds timeout) {
  Worker* w = worker_of(this);
  if (w == nullptr) return wg.wait(timeout);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  // (inv 4) The group's last done() notifies help_ec while we are inside.
  const bool registered = wg.add_waker(&help_ec);
  // Ready to stop sleeping: the group is done, or there is work we could
  // run. Blocking on the group alone deadlocked: with every worker inside a
  // help_wait, each waiting for children the others could no longer look
  // for, and no wake of inv 6 coming (they count as awake), the pool stood
  // still until the timeout (found by the fuzz harness, seed 5382, 2
  // workers). So a sleeping help_wait is woken by every publication of work
  // too (notify() notifies help_ec), and looks again.
  auto ready = [&] { return wg.pending() <= 0 || work_visible(w); };
  while (wg.pending() > 0) {
    const detail::Entry e = next_task(w);
    if (e != detail::kNoEntry) {
      run_task(w, e);
      continue;
    }
    // Nothing we can run now: the rest is running elsewhere, or queued where
    // we cannot see it yet (an inject slot claimed but not yet published
    // hides every entry behind it; its producer notifies once it publishes).
    if (timeout.count() >= 0 && std::chrono::steady_clock::now() >= deadline) break;
    // event_count.h: register, re-check, then sleep.
    const detail::EventCount::Key key = help_ec.prepare_wait();
    if (ready()) {
      help_ec.cancel_wait();
      continue;
    }
    if (!registered) {
      // The group already has another pool's help_wait registered (inv 4):
      // nobody would wake us for its zero, so wait on the group itself and
      // give up helping. Never seen in the daemon (one pool).
      help_ec.cancel_wait();
      if (timeout.count() < 0) return wg.wait(timeout);
      return wg.wait(std::max(std::chrono::nanoseconds(0),
                              std::chrono::duration_cast<std::chrono::nanoseconds>(
                                  deadline - std::chrono::steady_clock::now())));
    }
    if (timeout.count() < 0) {
      help_ec.commit_wait(key);
    } else {
      (void)help_ec.commit_wait_until(key, deadline);  // the loop's checks decide
    }
  }
  if (registered) wg.remove_waker(&help_ec);
  // Through wait(): it takes the group's mutex, so the last done() has let
  // go of the group before our caller destroys it (WaitGroup::done()).
  return wg.wait(std::chrono::nanoseconds(0));
}

}  // namespace tpool
