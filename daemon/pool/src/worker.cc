// The worker side of the pool: find work, run it, sleep when there is none.
//
// Invariants (pool_internal.h inv 1..6 apply; these are this file's):
//   (1) Only the worker's own thread runs worker_main, next_task, run_task
//       and idle for it, so Worker::own is touched by one thread (inv 3).
//   (2) run_task runs a task only after winning the CAS queued -> claimed;
//       finish() is then called exactly once for it, and publishes a
//       terminal state (waitable) or frees it (not) only after the last use
//       of its fields.
//   (3) The wait group's done() is the last thing finish() does with the
//       task: a waiter that wakes finds the descriptor already released.
//   (4) A worker sleeps only through idle() (sleep_wake.h c1..c3) and exits
//       only through Wake::leave(), so it is counted in awake[] exactly
//       while it runs (inv 6).
//   (5) shutdown() sleeps on idle_ec until accepted == finished. finish()
//       does not notify it (a fence per task); instead every worker notifies
//       idle_ec after the seq_cst fence of its sleep transition (c2) before
//       it parks, and after leave()'s fence before it exits. A worker that
//       ended the last task finds no work, so it reaches one of the two with
//       its counts before the fence; a thread that is no worker and ends a
//       task (submit_one's take-back, shutdown's own cancel scan) notifies
//       itself, or is the waiter.
//   (6) A worker's LIFO stack and local queue hold entries of its own lane
//       only: enqueue() and take_from_inject() put an entry there only when
//       the lanes match, and a steal from the other lane (the rebalance)
//       takes one entry to run, never a batch. Other workers look for a
//       lane's work only in queues of that lane's workers (steal_from,
//       work_visible), so an entry of the other lane parked behind this
//       worker's running task would be hidden from every worker that drains
//       its lane but this one (LaneStall.AStealFromTheOtherLaneTakesOneTask).
#include <algorithm>
#include <bit>
#include <exception>
#include <thread>

#include "pool_internal.h"

namespace tpool {

using detail::Descriptor;
using detail::DescState;
using detail::Entry;
using detail::kNoEntry;
using detail::Worker;

namespace {
// Rounds of next_task a worker retries before it starts the sleep transition.
// Picked by hand: enough to catch a submitter's next push on a busy pool
// without burning a core on an idle one.
constexpr int kSpinRounds = 4;
}  // namespace

void Pool::Impl::mark_nonempty(std::size_t i) noexcept {
  std::atomic<std::uint64_t>& word = nonempty[i / 64];
  const std::uint64_t bit = std::uint64_t{1} << (i % 64);
  // Relaxed: the bitmap is a hint for stealers; correctness comes from the
  // sleep re-check, which looks at every queue (inv 6).
  if ((word.load(std::memory_order_relaxed) & bit) == 0) {
    word.fetch_or(bit, std::memory_order_relaxed);
  }
}

void Pool::Impl::clear_nonempty(std::size_t i) noexcept {
  std::atomic<std::uint64_t>& word = nonempty[i / 64];
  const std::uint64_t bit = std::uint64_t{1} << (i % 64);
  if ((word.load(std::memory_order_relaxed) & bit) != 0) {
    word.fetch_and(~bit, std::memory_order_relaxed);  // a hint, as in mark_nonempty
  }
}

// Drain an inject ring: one head CAS for up to inject_batch_size entries; run
// the first, spill the rest to the local queue (the seed's popMany spill).
Entry Pool::Impl::take_from_inject(Worker* w, Lane lane) {
  auto& ring = *inject[static_cast<std::size_t>(lane)];
  Entry buf[32];
  std::size_t want = 1;
  if (uses_local_queues() && w->lane == lane) {
    want = std::min<std::size_t>(cfg.inject_batch_size, w->local->free_space() + 1);
  }
  const std::size_t n = ring.pop_many(std::span<Entry>(buf, want));
  if (n == 0) return kNoEntry;
  if (n > 1) {
    const std::size_t pushed = w->local->push_many(std::span<const Entry>(buf + 1, n - 1));
    for (std::size_t i = 1 + pushed; i < n; ++i) {
      detail::push_always(ring, buf[i]);  // no room after all: give them back
    }
    if (pushed > 0) mark_nonempty(w->index);
    notify(lane, nullptr);  // more work than one worker: let a sleeper steal it
  }
  return buf[0];
}

// Steal half of a victim's queue: registered submitters first (they have no
// worker to run their queue), then workers found through the bitmap. From
// the other lane (the rebalance), one entry: the one we run (inv 6).
Entry Pool::Impl::steal_from(Worker* w, Lane lane) {
  const std::size_t room = w->local->free_space();
  const std::size_t max_batch =
      lane != w->lane ? 1 : std::max<std::size_t>(1, std::min(cfg.steal_batch_size, room + 1));
  Entry buf[512];
  const std::size_t cap = std::min<std::size_t>(max_batch, 512);
  auto take = [&](std::size_t n) -> Entry {
    w->counters.bump(w->counters.steal_ops);
    w->counters.bump(w->counters.steal_tasks, n);
    if (n > 1) {
      const std::size_t pushed = w->local->push_many(std::span<const Entry>(buf + 1, n - 1));
      for (std::size_t i = 1 + pushed; i < n; ++i) {
        detail::push_always(*inject[static_cast<std::size_t>(lane)], buf[i]);
      }
      if (pushed > 0) mark_nonempty(w->index);
    }
    return buf[0];
  };
  if (lane == Lane::kDefault) {
    // Acquire pairs with register/release_submitter's release RMWs of the
    // mask (submitter.cc inv 2): a set bit's queue is set up.
    std::uint64_t mask = submitter_mask.load(std::memory_order_acquire);
    while (mask != 0) {
      const int i = std::countr_zero(mask);
      mask &= mask - 1;
      const std::size_t n = submitters[static_cast<std::size_t>(i)]->queue->steal_half(
          std::span<Entry>(buf, cap), cap);
      if (n > 0) return take(n);
    }
  }
  const std::size_t words = nonempty.size();
  const std::size_t start = w->own.steal_hint++;
  for (std::size_t k = 0; k < words; ++k) {
    const std::size_t wi = (start + k) % words;
    std::uint64_t bits = nonempty[wi].load(std::memory_order_relaxed);
    while (bits != 0) {
      const std::size_t v = wi * 64 + static_cast<std::size_t>(std::countr_zero(bits));
      bits &= bits - 1;
      if (v == w->index || v >= total_slots) continue;
      Worker& victim = *workers[v];
      if (victim.lane != lane) continue;  // stealing respects lanes
      const std::size_t n = victim.local->steal(std::span<Entry>(buf, cap), cap);
      if (n > 0) return take(n);
      // Reconcile a stale bit (the seed's non-empty reconciliation).
      if (victim.local->size_approx() == 0) clear_nonempty(v);
    }
  }
  return kNoEntry;
}

// The seed's nextTask: LIFO slot -> local queue -> own lane's inject ->
// submitter queues -> steal -> the other lane (rebalance) -> nothing.
Entry Pool::Impl::next_task(Worker* w) {
  Entry e = kNoEntry;
  if (!uses_local_queues()) {
    for (std::size_t l = 0; l < kLaneCount; ++l) {
      if (w->drains[l] && inject[l]->pop(e)) return e;
    }
    return kNoEntry;
  }
  if (!w->own.lifo.empty()) {  // (inv 3) ours alone
    e = w->own.lifo.pop();
    // A worker is asleep while we hold more than the task we are about to
    // run: hand it the older half (the shallowest tasks of a fan-out, the
    // largest subtrees), as any producer would (w1..w3).
    if (!w->own.lifo.empty() && default_lane_has_sleeper()) {
      spill_lifo(w, (w->own.lifo.size() + 1) / 2);
      notify(w->lane, &w->own.submit_tick);
    }
    return e;
  }
  if (w->local->pop(e)) return e;
  const Lane own = w->lane;
  if ((e = take_from_inject(w, own)) != kNoEntry) return e;
  if ((e = steal_from(w, own)) != kNoEntry) return e;
  // Rebalance (L3): blocking workers help the default lane when their own is
  // empty; default workers help the blocking lane only with cpu_helps_blocking.
  const Lane other = own == Lane::kDefault ? Lane::kBlocking : Lane::kDefault;
  if (lanes_on && w->drains[static_cast<std::size_t>(other)]) {
    if (inject[static_cast<std::size_t>(other)]->pop(e)) return e;
    if ((e = steal_from(w, other)) != kNoEntry) return e;
  }
  return kNoEntry;
}

void Pool::Impl::run_task(Worker* w, Entry e) {
  const std::uint32_t idx = detail::entry_index(e);
  Descriptor& d = descs[idx];
  // (inv 2) Drop a stale entry. Acquire pairs with the release of the
  // generation bump in finish()/wait(); a stale gen means the entry's task
  // already ended.
  const std::uint32_t gen = detail::entry_gen(e);
  if (d.generation.load(std::memory_order_acquire) != gen) return;
  // (inv 1) Claim it: queued -> claimed. Losing means the shutdown scan or
  // the submitter's shutdown take-back claimed it. Acquire pairs with the
  // submitter's release store of `queued`: the fields are visible from here.
  DescState expect = DescState::kQueued;
  if (!d.state.compare_exchange_strong(expect, DescState::kClaimed, std::memory_order_acq_rel)) {
    return;
  }
  // (inv 2) Between the check above and the claim, the descriptor may have
  // been freed and recycled, so the claim may have taken a newer task than
  // the entry's. That is fine: the claim owns whichever task is queued in
  // the descriptor (its fields are visible through the claim's acquire), so
  // this worker runs it, and that task's own entry finds it claimed or
  // stale and is dropped. Giving it back instead could lose it: its own
  // entry may already have been dropped while we held the claim.
  Descriptor* const outer = tls.current;  // help_wait runs tasks inside a task
  std::int64_t start = 0;
  if constexpr (kTimestamps) {
    // Straight on from the last task: its end stamp is our start (the few
    // hundred ns at most that next_task took to find this task count as
    // this task's run time rather than its wait). Inside another task
    // (help_wait, a blocked submit helping) always read the clock: the
    // stamp is older than the outer task's start.
    start = outer == nullptr && w->own.last_end_fresh ? w->own.last_end_ns : now_ns();
    w->own.last_end_fresh = false;
  }
  if (d.cancel != nullptr && cancelled_at(*d.cancel, start)) {
    w->own.last_end_fresh = false;  // on_cancel's time is no task's
    if (d.on_cancel != nullptr) d.on_cancel(d.ctx);
    finish(w, idx, DescState::kCancelled);
    return;
  }
  const auto l = static_cast<std::size_t>(d.lane);
  if constexpr (kTimestamps) {
    w->wait_hist[l].record(
        static_cast<std::uint64_t>(std::max<std::int64_t>(0, start - d.submit_ns)));
  }
  const bool watched = cfg.max_overflow_workers > 0 && cfg.watchdog_interval.count() > 0;
  tls.current = &d;
  w->busy.store(true, std::memory_order_relaxed);
  w->tasks_started.store(w->tasks_started.load(std::memory_order_relaxed) + 1,
                         std::memory_order_relaxed);  // progress(): one writer
  if (watched) {
    // Release pairs with the watchdog's acquire: a stall is judged on this
    // task's start and lane, never on an older task's.
    w->task_stamp.store(detail::TaskStamp::make(kTimestamps ? start : now_ns(), d.lane),
                        std::memory_order_release);
  }
  DescState outcome = DescState::kCompleted;
  try {
    d.fn(d.ctx);
  } catch (...) {  // a task's exception never kills a worker: it fails the task
    outcome = DescState::kFailed;
  }
  if (watched) {
    // Back in the outer task (help_wait): it counts from now, in its lane.
    // Release pairs with the watchdog's acquire, as above.
    w->task_stamp.store(outer ? detail::TaskStamp::make(now_ns(), outer->lane) : 0,
                        std::memory_order_release);
  }
  w->busy.store(outer != nullptr, std::memory_order_relaxed);
  tls.current = outer;
  if constexpr (kTimestamps) {
    const std::int64_t end = now_ns();
    w->run_hist[l].record(static_cast<std::uint64_t>(std::max<std::int64_t>(0, end - start)));
    if (outer == nullptr) {
      w->own.last_end_ns = end;
      w->own.last_end_fresh = true;  // worker_main clears it if the next task is not at hand
    }
  }
  finish(w, idx, outcome);
}

// A task ended (ran, threw, or was cancelled before it started). Counters,
// then the descriptor: kept for wait() if waitable, else freed; then the
// wait group, last, so a waiter that wakes finds the descriptor released.
void Pool::Impl::finish(Worker* w, std::uint32_t idx, DescState outcome) {
  Descriptor& d = descs[idx];
  detail::Counters& ctr = w ? w->counters : ext;
  WaitGroup* const wg = d.wait_group;
  const auto l = static_cast<std::size_t>(d.lane);
  if (outcome == DescState::kCompleted) ctr.bump(ctr.completed);
  if (outcome == DescState::kFailed) ctr.bump(ctr.failed);
  if (outcome == DescState::kCancelled) ctr.bump(ctr.cancelled);
  if (outcome != DescState::kCancelled) ctr.bump(ctr.lane_completed[l]);
  bool release = !d.waitable;
  if (d.waitable) {
    // Release pairs with wait()'s acquire load of the state.
    d.state.store(outcome, std::memory_order_release);
    // seq_cst: pairs with detach()'s store of `detached` then load of state;
    // one of us sees the other, so exactly one frees it (by CAS below).
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (d.detached.load(std::memory_order_relaxed)) {  // ordered by the fence
      DescState expect = outcome;
      // (inv 1) acq_rel: races detach()'s and wait()'s CAS for the one free.
      release =
          d.state.compare_exchange_strong(expect, DescState::kFree, std::memory_order_acq_rel);
    } else {
      // A wait() may sleep on done_ec for this state: the fence above also
      // orders our store of it before the load of the waiter word
      // (event_count.h inv 3). Nobody waiting: one load.
      done_ec.notify_all_fenced();
    }
  } else {
    d.state.store(DescState::kFree, std::memory_order_relaxed);
  }
  if (release) recycle(idx, ctr);  // (inv 1) ours to free: not waitable, or detached and won
  if (wg != nullptr) wg->done();
  // No notify of idle_ec here (shutdown waits for the counts above): that
  // would take a fence per task. The worker notifies it in its sleep
  // transition or its exit, after their fences (idle(), worker_main); a
  // thread that is no worker notifies after finish() itself (inv 5).
}

// Any queue this worker may drain non-empty? Looks at every queue, not the
// bitmap, and repairs the bitmap for what it finds (inv 6).
bool Pool::Impl::work_visible(Worker* w) {
  for (std::size_t l = 0; l < kLaneCount; ++l) {
    if (!w->drains[l]) continue;
    if (inject[l]->size_approx() > 0) return true;
  }
  if (!uses_local_queues()) return false;
  if (!w->own.lifo.empty() || w->local->size_approx() > 0) return true;
  // Acquire: the mask and in_use pair with submitter.cc's release RMW and
  // store (its inv 1, 2); the queue sizes are ordered by the c2 fence.
  if (w->drains[0] && submitter_mask.load(std::memory_order_acquire) != 0) {
    for (const auto& s : submitters) {
      if (s->in_use.load(std::memory_order_acquire) && s->queue->size_approx() > 0) return true;
    }
  }
  for (std::size_t v = 0; v < total_slots; ++v) {
    Worker& victim = *workers[v];
    if (&victim == w || !w->drains[static_cast<std::size_t>(victim.lane)]) continue;
    if (victim.local->size_approx() > 0) {
      mark_nonempty(v);
      return true;
    }
  }
  return false;
}

// The sleep transition (docs/wake-protocol.md, c1..c3; the steps are
// detail::SleepWake::idle in sleep_wake.h). Returns false when the worker
// should exit.
bool Pool::Impl::idle(Worker* w) {
  return detail::Wake::idle(
      *w, awake,
      [&] {
        // Acquire pairs with join_all()'s store of `stop` and tick()'s
        // release store of `retire`.
        return stop.load(std::memory_order_acquire) ||
               (w->overflow && w->retire.load(std::memory_order_acquire));
      },
      [&] { return work_visible(w); },
      [&] {
        w->counters.bump(w->counters.parks);
        // (inv 5) About to park, after c2's seq_cst fence: our counts of
        // every task we ended come before it, so this is the notifier's
        // fence of idle_ec too (event_count.h inv 3). One load unless
        // shutdown() waits.
        idle_ec.notify_all_fenced();
      });
}

void Pool::Impl::worker_main(Worker* w) {
  tls.pool = this;
  tls.worker = w;
  bool woken = false;
  for (;;) {
    Entry e = next_task(w);
    if (e == kNoEntry) {
      w->own.last_end_fresh = false;  // idle time is no task's run time
      start_searching(w);             // (inv 7) from here until we take a task or give up
    }
    for (int spin = 0; e == kNoEntry && spin < kSpinRounds; ++spin) {
      std::this_thread::yield();
      e = next_task(w);
    }
    if (e != kNoEntry) {
      // The last searcher wakes one more. Checked here: no call per task.
      if (w->own.searching) stop_searching(w, /*found=*/true);
      woken = false;
      run_task(w, e);
      continue;
    }
    if (woken) w->counters.bump(w->counters.wakeups_no_work);
    // (inv 7) Giving up: leave the searching count before idle()'s c1 (or
    // leave()), so its fence orders the decrement before the re-check.
    stop_searching(w, /*found=*/false);
    // Exit only when stopping with nothing left that we could run. Acquire
    // (here and below) pairs with join_all()'s store of `stop`.
    if (stop.load(std::memory_order_acquire) && !work_visible(w)) break;
    if (!idle(w)) {
      if (stop.load(std::memory_order_acquire) && work_visible(w)) continue;  // drain first
      break;
    }
    woken = true;
    // (inv 7) Back from idle(), woken or having found work on the re-check:
    // search again before we look, so that taking a task as the last
    // searcher wakes one more (a producer may have skipped its wake on our
    // count, or we may have taken a wake meant for another task).
    start_searching(w);
  }
  // Leave the awake count (we were counted: every path out of idle() ends
  // running), then, as in the sleep transition, fence and re-check: a waker
  // that skipped its wake because it counted us must not strand its task.
  if (detail::Wake::leave(
          *w, awake, [&] { return !stop.load(std::memory_order_acquire) && work_visible(w); })) {
    for (std::size_t l = 0; l < kLaneCount; ++l) {
      if (w->drains[l]) (void)wake_one(static_cast<Lane>(l));
    }
  }
  // (inv 5) Leaving for good, after leave()'s seq_cst fence: as before a park.
  idle_ec.notify_all_fenced();
  // Retiring overflow workers and stopping workers hand back their cached
  // descriptors (drain-on-release, seed: DescCache).
  return_cached(w->own.cache);
  tls = ThreadCtx{};
  // Release pairs with the acquire loads of `exited` in tick() (the reap)
  // and stats(): our cache is handed back before anyone sees us gone.
  w->exited.store(true, std::memory_order_release);
}

}  // namespace tpool
