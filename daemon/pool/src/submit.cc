// The submit side of the pool: descriptors in, entries onto queues, wakes.
//
// Invariants (pool_internal.h inv 1..6 apply; these are this file's):
//   (1) A task counts as accepted before its entry is published, and either
//       it is then queued and counted submitted, or it is un-accepted (the
//       caller hears why) with the shutdown handshake's fence between
//       (inv 5).
//   (2) Every descriptor is filled by Descriptor::publish() before its entry
//       reaches any queue, and the wait group is add()ed before that.
//   (3) Every successful push is followed by notify() (w1..w3), except a
//       push to the owner's LIFO stack, which only the owner drains (inv 3,
//       6): nobody else could take it, so waking them would only cost a
//       futex wake and a wasted search. Entries that leave the stack for the
//       local queue or the inject ring are pushes like any other: notified.
//   (4) A worker never blocks on a free descriptor while it could run work
//       that would free one: it runs queued work or, with nothing queued,
//       the new task itself (caller-runs).
//   (5) submit_one's take-back (it published, then saw the pool shutting
//       down) claims the descriptor by CAS queued -> claimed, like a worker.
//       Between its publish and that CAS a worker may have run the task,
//       and a non-waitable task is then freed and its descriptor may be
//       published again by another submitter: the CAS then claims that
//       newer, accepted task (inv 2's ABA, here on the submit side). So
//       after the CAS it compares the generation with its own: equal, the
//       task is its own and it ends it cancelled (the caller hears
//       Shutdown); different, its own task ran (accepted after all) and it
//       gives the newer one back: kQueued again and a new entry on the
//       inject ring, since the newer task's own entry may have been popped
//       and dropped (found claimed) while the claim was held. Whichever of
//       the two entries claims it first runs it (inv 2). A waitable task is
//       never freed before its handle is out, so only a non-waitable one
//       meets this. Found by the pool fuzzer (seed 13463: one task reported
//       refused had run, another accepted never ran).
#include <algorithm>
#include <string>

#include "pool_internal.h"

namespace tpool {

using detail::Descriptor;
using detail::DescState;
using detail::Entry;
using detail::Submitter;
using detail::Worker;

namespace {

std::string full_message(const Config& c) {
  return "the pool has no free task descriptor (queue_capacity=" +
         std::to_string(c.queue_capacity) +
         ", all queued or running); retry later, use Backpressure::kBlock, or raise "
         "queue_capacity";
}

}  // namespace

Lane Pool::Impl::route(Lane requested) const noexcept {
  // Blocking work with no blocking workers runs on the default lane.
  return (requested == Lane::kBlocking && lanes_on) ? Lane::kBlocking : Lane::kDefault;
}

// The single-task fast path. One seq_cst fence serves both handshakes: the
// shutdown one (inv 5: count as accepted ... fence ... read `accepting`) and
// the wake one (inv 6: publish work ... fence ... read sleep states). If it
// then finds the pool shutting down, it takes its task back by CAS (queued ->
// claimed, then ended cancelled) and reports Shutdown; if a worker already
// claimed the task, the task was accepted after all. Cache misses and
// backpressure go to submit_many.
Result<TaskHandle> Pool::Impl::submit_one(Task t, const SubmitOptions& o) {
  if (t.fn == nullptr)
    return Status::InvalidArgument("the task's fn is null; pass a function to run");
  Worker* w = worker_of(this);
  Submitter* s = (w == nullptr && tls.sub_pool == this) ? tls.submitter : nullptr;
  std::uint32_t idx = 0;
  std::size_t got = 0;
  // The caller's DescCache inline (inv 3: ours alone), then acquire()'s refill.
  detail::DescCache<32>* const cache = w ? &w->own.cache : (s ? &s->own.cache : nullptr);
  if (!accepting.load(std::memory_order_relaxed) ||
      ((cache == nullptr || !cache->try_pop(idx)) && !acquire(&idx, 1, w, s, got))) {
    TaskHandle h;
    Result<std::size_t> r =
        submit_many(std::span<const Task>(&t, 1), o, std::span<TaskHandle>(&h, 1));
    if (!r.ok()) return r.status();
    return h;
  }
  detail::Counters& ctr = w ? w->counters : (s ? s->counters : ext);
  ctr.bump(ctr.accepted);
  ctr.bump(ctr.acquired);
  const Lane lane = route(o.lane);
  Descriptor& d = descs[idx];
  // Before the entry is published: the task may end (and call done()) as
  // soon as it is on a queue.
  if (o.wait_group != nullptr) o.wait_group->add(1);
  const std::uint32_t gen = d.publish(t, o, o.cancel, lane, kTimestamps ? now_ns() : 0);
  const bool shared = enqueue(detail::make_entry(gen, idx), lane, w, s);
  // w1 and inv 5: see notify().
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (!accepting.load(std::memory_order_relaxed)) {
    DescState expect = DescState::kQueued;
    // acq_rel: races run_task's claim and the shutdown scan's for the one
    // move out of kQueued (inv 1); acquire pairs with our own publish().
    if (d.state.compare_exchange_strong(expect, DescState::kClaimed, std::memory_order_acq_rel)) {
      // (inv 5) The claim is ours to keep only if it is our task's. Holding
      // it, nobody else frees the descriptor, so its generation is stable;
      // relaxed: a newer task's is ordered before its publish, which our
      // CAS's acquire read.
      const std::uint32_t now_gen = d.generation.load(std::memory_order_relaxed);
      if (now_gen != gen) {
        // Ours ran and was freed, and the claim took a newer task (inv 5):
        // back to kQueued with an entry of its own, and ours was accepted.
        const Lane newer_lane = d.lane;
        d.state.store(DescState::kQueued, std::memory_order_release);  // for the next claim
        detail::push_always(*inject[static_cast<std::size_t>(newer_lane)],
                            detail::make_entry(now_gen, idx));
        notify(newer_lane, nullptr);
      } else {
        // Ours again: end it without on_cancel (the caller hears Shutdown).
        // It was on a queue, so it counts as submitted and cancelled
        // (keeping submitted == completed + failed + cancelled) as well as
        // rejected; and it is freed now, waitable or not: the caller gets no
        // handle to wait.
        d.on_cancel = nullptr;
        d.waitable = false;
        ctr.bump(ctr.rejected_shutdown);
        ctr.bump(ctr.submitted);
        finish(w, idx, DescState::kCancelled);
        // Accepted and finished: shutdown() may be waiting for exactly this
        // one (idle_ec; the notify's fence orders our counts before its load).
        idle_ec.notify_all();
        return Status::Shutdown("the pool is shutting down and accepts no new tasks");
      }
    }
  }
  ctr.bump(ctr.submitted);
  if (shared) {  // (inv 3) not for the owner's own stack
    notify(lane, w ? &w->own.submit_tick : (s ? &s->own.submit_tick : nullptr), /*fenced=*/true);
  }
  return o.waitable ? TaskHandle{idx, gen} : TaskHandle{};
}

Result<std::size_t> Pool::Impl::submit_many(std::span<const Task> ts, const SubmitOptions& o,
                                            std::span<TaskHandle> handles) {
  if (ts.empty()) return std::size_t{0};
  for (const Task& t : ts) {
    if (t.fn == nullptr) {
      return Status::InvalidArgument("a task's fn is null; pass a function to run");
    }
  }
  if (!o.cancels.empty() && o.cancels.size() < ts.size()) {
    return Status::InvalidArgument("SubmitOptions::cancels has " +
                                   std::to_string(o.cancels.size()) + " tokens for " +
                                   std::to_string(ts.size()) + " tasks; give one per task or none");
  }
  Worker* w = worker_of(this);
  Submitter* s = (w == nullptr && tls.sub_pool == this) ? tls.submitter : nullptr;
  detail::Counters& ctr = w ? w->counters : (s ? s->counters : ext);

  // (inv 5) Count the tasks as accepted, fence, then look at `accepting`.
  ctr.bump(ctr.accepted, ts.size());
  std::atomic_thread_fence(std::memory_order_seq_cst);
  auto unaccept = [&](std::size_t n) {
    ctr.bump(ctr.unaccepted, n);
    // shutdown() may wait for accepted == finished (idle_ec): our count,
    // then notify_all's fence and its load of the waiter word.
    idle_ec.notify_all();
  };
  if (!accepting.load(std::memory_order_relaxed)) {
    unaccept(ts.size());
    ctr.bump(ctr.rejected_shutdown, ts.size());
    return Status::Shutdown("the pool is shutting down and accepts no new tasks");
  }

  // Descriptors: as many as possible, then block or reject for the rest.
  constexpr std::size_t kChunk = 256;
  std::size_t done = 0;
  const Backpressure bp = o.backpressure.value_or(cfg.backpressure);
  const auto timeout = o.block_timeout.value_or(cfg.block_timeout);
  const bool timed = timeout.count() >= 0;
  std::chrono::steady_clock::time_point deadline{};  // set when we first block
  const Lane lane = route(o.lane);
  std::int64_t stamp = 0;
  if constexpr (kTimestamps) stamp = now_ns();
  Status failure;

  while (done < ts.size()) {
    std::uint32_t idx[kChunk];
    const std::size_t want = std::min(kChunk, ts.size() - done);
    std::size_t got = 0;
    acquire(idx, want, w, s, got);
    if (got == 0) {
      if (bp == Backpressure::kReject || (timed && timeout.count() == 0)) {
        failure = Status::Full(full_message(cfg));
        ctr.bump(ctr.rejected_full, ts.size() - done);
        break;
      }
      if (timed && deadline == std::chrono::steady_clock::time_point{}) {
        deadline = std::chrono::steady_clock::now() + timeout;
      }
      // Acquire pairs with shutdown()'s store of false; nothing is read
      // through it (a stale true only means one more round of helping).
      if (w != nullptr && accepting.load(std::memory_order_acquire)) {
        // A worker must not sleep on a descriptor that only work queued
        // behind it (its LIFO slot, its local queue) would free: if every
        // worker did, the pool would deadlock. Run something, then retry.
        const detail::Entry e = next_task(w);
        if (e != detail::kNoEntry) {
          run_task(w, e);
          if (!timed || std::chrono::steady_clock::now() < deadline) continue;
        } else if (!o.waitable) {
          // Nothing to run and no descriptor: every descriptor is held by a
          // task that is running (perhaps nested in this very stack) and may
          // itself be waiting to submit. Run the new task here, inline
          // (caller-runs), so the pool always makes progress.
          SubmitOptions one = o;  // this task's own token, if the batch has them
          if (!o.cancels.empty()) one.cancel = o.cancels[done];
          run_inline(w, ts[done], one, lane);
          ++done;
          continue;
        }
      }
      // Block for a free descriptor (free_ec; descriptors.cc inv 4): once,
      // then back to the top to take it (or to help, for a worker). While we
      // are registered, releases bypass the DescCaches and notify free_ec.
      // A worker also wakes for work it could run (notify() notifies
      // free_ec): the descriptors it waits for may be held by exactly that
      // work, and no wake of inv 6 comes for it (it counts as awake).
      const auto ready = [&] {
        // Acquire pairs with shutdown()'s store of false (it notifies
        // free_ec after); nothing else is read through it.
        if (!accepting.load(std::memory_order_acquire)) return true;
        if (free_ring.size_approx() > 0) return true;
        return w != nullptr && work_visible(w);
      };
      if (!ready()) {
        // event_count.h: register, re-check, then sleep.
        const detail::EventCount::Key key = free_ec.prepare_wait();
        if (ready()) {
          free_ec.cancel_wait();
        } else if (timed) {
          (void)free_ec.commit_wait_until(key, deadline);  // the checks below decide
        } else {
          free_ec.commit_wait(key);
        }
      }
      if (!accepting.load(std::memory_order_acquire)) {  // as above
        failure = Status::Shutdown("the pool shut down while this submit waited for a free slot");
        ctr.bump(ctr.rejected_shutdown, ts.size() - done);
        break;
      }
      if (timed && std::chrono::steady_clock::now() >= deadline && free_ring.size_approx() == 0) {
        failure = Status::Timeout("no task descriptor became free within the submit timeout (" +
                                  std::to_string(timeout.count()) +
                                  " ns); the pool is saturated: retry later or raise "
                                  "queue_capacity");
        ctr.bump(ctr.rejected_timeout, ts.size() - done);
        break;
      }
      continue;
    }
    ctr.bump(ctr.acquired, got);
    // Before any entry is published: a task may end (and call done()) as soon
    // as it is on a queue.
    if (o.wait_group != nullptr) o.wait_group->add(static_cast<std::int64_t>(got));
    bool shared = false;
    for (std::size_t i = 0; i < got; ++i) {
      // The batch's own token for this task, if it has them (SubmitOptions::cancels).
      CancelToken* token = o.cancels.empty() ? o.cancel : o.cancels[done + i];
      const std::uint32_t gen = descs[idx[i]].publish(ts[done + i], o, token, lane, stamp);
      if (o.waitable && done + i < handles.size()) handles[done + i] = TaskHandle{idx[i], gen};
      shared = enqueue(detail::make_entry(gen, idx[i]), lane, w, s) || shared;
    }
    done += got;
    ctr.bump(ctr.submitted, got);
    if (shared) notify(lane, w ? &w->own.submit_tick : (s ? &s->own.submit_tick : nullptr));
  }
  if (done < ts.size()) unaccept(ts.size() - done);
  if (done == 0) return failure;
  return done;
}

// Caller-runs: a task a worker could not queue runs on that worker now, with
// the same accounting as a queued task (it was counted accepted; it ends
// completed, failed or cancelled) and a stand-in descriptor so this_task
// answers for it.
void Pool::Impl::run_inline(Worker* w, const Task& t, const SubmitOptions& o, Lane lane) {
  detail::Counters& ctr = w->counters;
  ctr.bump(ctr.submitted);
  ctr.bump(ctr.inline_runs);
  if (o.wait_group != nullptr) o.wait_group->add(1);
  if (o.cancel != nullptr && o.cancel->is_cancelled()) {
    if (o.on_cancel != nullptr) o.on_cancel(t.ctx);
    ctr.bump(ctr.cancelled);
  } else {
    Descriptor stand_in;
    stand_in.fn = t.fn;
    stand_in.ctx = t.ctx;
    stand_in.cancel = o.cancel;
    stand_in.lane = lane;
    Descriptor* const outer = tls.current;
    tls.current = &stand_in;
    try {
      t.fn(t.ctx);
      ctr.bump(ctr.completed);
    } catch (...) {
      ctr.bump(ctr.failed);
    }
    tls.current = outer;
    ctr.bump(ctr.lane_completed[static_cast<std::size_t>(lane)]);
  }
  if (o.wait_group != nullptr) o.wait_group->done();
}

std::int64_t Pool::Impl::workers_running() const noexcept {
  return static_cast<std::int64_t>(started.load(std::memory_order_relaxed) +
                                   overflow_active.load(std::memory_order_relaxed));
}

bool Pool::Impl::default_lane_has_sleeper() const noexcept {
  // Every worker drains the default lane (construct.cc), and each counts in
  // awake[0] while its sleep state is running (pool inv 6): fewer awake than
  // started means one is asleep or about to be. Relaxed: a hint for where to
  // put work, read on every nested submit; the wake handshake does not
  // depend on it (a worker that parks after a wrong guess is woken by the
  // next hand-out, as any sleeper by any push: docs/algorithms.md).
  return awake[0].load(std::memory_order_relaxed) < workers_running();
}

// The oldest n entries of the owner's LIFO stack to its local queue (the rest
// of them to the inject ring if it is full), where others can steal them. The
// caller notifies (inv 3): enqueue's caller after its push, next_task itself.
void Pool::Impl::spill_lifo(Worker* w, std::size_t n) {
  Entry buf[256];
  n = w->own.lifo.take_oldest(std::span<Entry>(buf, std::min<std::size_t>(n, 256)));
  const std::size_t pushed = w->local->push_many(std::span<const Entry>(buf, n));
  if (pushed > 0) mark_nonempty(w->index);
  if (pushed < n) w->counters.bump(w->counters.local_overflows);
  for (std::size_t i = pushed; i < n; ++i) {
    detail::push_always(*inject[static_cast<std::size_t>(w->lane)], buf[i]);
  }
}

// Put one entry on the best queue for the calling thread (the seed's
// enqueuePush): LIFO stack -> local queue -> submitter queue -> inject ring.
// False when it went to the owner's stack and nothing else moved (inv 3: no
// notify needed); true when any entry became visible to other threads.
bool Pool::Impl::enqueue(Entry e, Lane lane, Worker* w, Submitter* s) {
  if (uses_local_queues()) {
    if (w != nullptr && w->lane == lane && !w->overflow) [[likely]] {
      detail::LifoStack<Entry>& stack = w->own.lifo;  // (inv 3) owner-only: plain stores
      if (stack.empty()) {                            // the seed's LIFO slot
        stack.push(e);
        return false;
      }
      // A deeper stack keeps this task from the other workers until it is
      // handed out: only while none of them is asleep, i.e. none would take
      // it now. When full, its older half makes room.
      if (stack.capacity() > 1 && !default_lane_has_sleeper()) {
        const bool spilled = stack.full();
        if (spilled) spill_lifo(w, stack.size() / 2);
        stack.push(e);
        return spilled;
      }
      if (w->local->push(e)) {
        mark_nonempty(w->index);
        return true;
      }
      w->counters.bump(w->counters.local_overflows);
    } else if (w != nullptr && w->lane == lane) {
      // Overflow workers keep a local queue too, but no LIFO slot: they may
      // retire at any idle moment and must not strand a task there.
      if (w->local->push(e)) {
        mark_nonempty(w->index);
        return true;
      }
      w->counters.bump(w->counters.local_overflows);
    }
    if (s != nullptr && lane == Lane::kDefault && s->queue->push(e)) return true;
  }
  detail::push_always(*inject[static_cast<std::size_t>(lane)], e);
  return true;
}

// The waker's side of the handshake (inv 6; docs/wake-protocol.md, w1..w3;
// the steps are detail::SleepWake::wake_needed and wake_one in sleep_wake.h).
// A caller that has just fenced after its push passes fenced = true.
void Pool::Impl::notify(Lane lane, std::uint32_t* tick, bool fenced, bool chain) {
  // Callers without a slot of their own (gRPC threads, a worker's spill)
  // count per thread, so every B-th of their submits still wakes someone.
  static thread_local std::uint32_t thread_tick = 0;
  // The last searcher's wake (inv 7) is not coalesced.
  const bool wake = detail::Wake::wake_needed(
      awake[static_cast<std::size_t>(lane)], fenced, tick ? *tick : thread_tick,
      chain ? 1 : cfg.wake_coalesce_batch, [&](std::int64_t up) {
        // Everyone who could take it is awake and the pool cannot grow.
        return up >= workers_running() &&
               started.load(std::memory_order_relaxed) >= cfg.max_threads;
      });
  // w1's fence (in wake_needed, or the caller's) also orders our push before
  // the loads of these waiter words (event_count.h inv 3): a blocked worker
  // (free_ec) or a help_wait (help_ec) may be waiting for work to run.
  free_ec.notify_all_fenced();
  help_ec.notify_all_fenced();
  if (!wake) return;
  // (inv 7) The gate: a worker is searching and will see our push (in its
  // scan or its re-check). Relaxed: ordered after the push by w1's fence.
  if (cfg.searching_gate && !chain && lane == Lane::kDefault &&
      searching.load(std::memory_order_relaxed) > 0) {
    return;
  }
  if (!wake_one(lane)) {
    // w3 found nobody asleep: grow towards max_threads if we can.
    // Acquire pairs with start_worker's release increment (construct.cc).
    std::size_t n = started.load(std::memory_order_acquire);
    if (n < cfg.max_threads) {
      MutexLock lk(spawn_mu);
      n = started.load(std::memory_order_relaxed);
      // Not once join_all has set stop (it sets it under spawn_mu).
      if (n < cfg.max_threads && accepting.load(std::memory_order_relaxed) &&
          !stop.load(std::memory_order_relaxed)) {
        start_worker(n, false);
      }
    }
  }
}

// (inv 7) Count w as searching the default lane. seq_cst: in the total
// order the producers' w1 fences join, like awake's increments.
void Pool::Impl::start_searching(Worker* w) {
  if (!cfg.searching_gate || w->own.searching || !w->drains[0]) return;
  w->own.searching = true;
  searching.fetch_add(1, std::memory_order_seq_cst);
}

// (inv 7) Leave the searching count. Giving up (found = false): the caller
// goes on to idle() or leave(), whose fence orders this decrement before the
// re-check. Found a task: if we were the last searcher, a producer may have
// skipped its wake on our count for a second task: wake one more worker,
// w1 and w3 without coalescing or the gate (Go's resetspinning -> wakep).
void Pool::Impl::stop_searching(Worker* w, bool found) {
  if (!w->own.searching) return;
  w->own.searching = false;
  const bool last = searching.fetch_sub(1, std::memory_order_seq_cst) == 1;
  if (found && last) notify(Lane::kDefault, nullptr, /*fenced=*/false, /*chain=*/true);
}

// w3: wake at most one parked worker that drains `lane`. True if one was woken.
bool Pool::Impl::wake_one(Lane lane) {
  return detail::Wake::wake_one(static_cast<std::size_t>(lane), total_slots, wake_hint, awake,
                                [&](std::size_t i) -> Worker& { return *workers[i]; });
}

}  // namespace tpool
