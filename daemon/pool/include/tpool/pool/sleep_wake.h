// The pool's sleep/wake handshake (docs/wake-protocol.md, steps c1..c3 and
// w1..w3), written once against an atomics policy (atomics.h) and a
// mutex/condition-variable policy, so that the pool (StdAtomics, StdSync) and
// the Relacy model (tests/model/relacy/sleep_wake_model.cc: RelacyAtomics,
// RelacySync) run the same source.
//
// Follows Julia's wake handshake (SchedulerWake.tla, JuliaLang/julia#61826):
// a worker publishes "sleeping" before its last look at the queues, a waker
// publishes work before it scans the sleep states. Differs: a per-lane awake
// count lets a producer skip the wake (coalescing), and each worker parks on
// its own mutex and condition variable.
//
// The state belongs to the pool; these functions take it by reference. A
// worker type W must have:
//   Atomics::Atomic<SleepState> sleep;   kRunning or kSleeping
//   Atomics::Atomic<bool> parked;        inside the wait (statistics only)
//   Sync::Mutex park_mu; Sync::CondVar park_cv;   (inv 4; guards no member)
//   bool drains[L];                      lanes it takes work from, fixed at start
// and the pool keeps Atomics::Atomic<std::int64_t> awake[L].
//
// Thread safety and invariants:
//   (1) Only the worker itself stores kSleeping into its `sleep`. The moves
//       back to kRunning are CASes (by the worker at c2 or after its wait, or
//       by one waker in wake_one), so exactly one thread counts the worker
//       back into awake[] per sleep.
//   (2) A worker that drains lane L counts +1 in awake[L] from the moment it
//       is counted in (started, took itself back, flipped by a waker) until
//       its next c1 (or its exit). It leaves the count *before* its re-check,
//       so a producer that reads awake > 0 after its push and fence knows
//       some worker will still look at the queues (coalescing is safe).
//   (3) Store buffering: the worker's c1 stores and the producer's push are
//       each followed by a seq_cst fence and then loads of the other side's
//       locations. In the single total order of seq_cst operations one fence
//       comes first, so at least one side sees the other: the worker's
//       re-check sees the task, or the producer sees the worker asleep.
//   (4) The waker flips `sleep` and then takes and releases park_mu before it
//       notifies; the worker holds park_mu from its check of `sleep` until
//       the wait releases it, so the notify cannot fall between the two.
//
// The TPOOL_SLEEP_WAKE_MUTANT_* macros exist for the Relacy model only: each
// builds a known-broken variant of this file that the model must reject (a
// check that cannot fail proves nothing). A build of the pool never defines
// them.
#pragma once

#include <cstddef>
#include <cstdint>

#include "tpool/pool/atomics.h"
#include "tpool/pool/sync.h"

#if defined(TPOOL_SLEEP_WAKE_MUTANT_NO_C2_FENCE) || \
    defined(TPOOL_SLEEP_WAKE_MUTANT_NO_W1_FENCE) || defined(TPOOL_SLEEP_WAKE_MUTANT_RECHECK_FIRST)
#if !defined(TPOOL_SLEEP_WAKE_MODEL)
#error "TPOOL_SLEEP_WAKE_MUTANT_* builds a broken wake protocol: for the Relacy model only"
#endif
#endif

namespace tpool::detail {

enum class SleepState : std::uint32_t {
  kRunning,   // counted in awake[] (inv 2); looking for or running work
  kSleeping,  // published at c1: between c1 and the end of its wait
};

template <class Atomics = StdAtomics, class Sync = StdSync>
struct SleepWake {
  template <class T>
  using Atomic = typename Atomics::template Atomic<T>;
  using Count = Atomic<std::int64_t>;

  // (inv 2) Count w in (out of) awake[L] of every lane it drains. seq_cst:
  // the decrement is one of the c1 writes the handshake orders (inv 3); the
  // increment is in the same total order so a producer's fence sees it.
  template <class W, std::size_t L>
  static void count_in(W& w, Count (&awake)[L]) {
    for (std::size_t l = 0; l < L; ++l) {
      if (w.drains[l]) Atomics::fetch_add(awake[l], std::int64_t{1}, std::memory_order_seq_cst);
    }
  }
  template <class W, std::size_t L>
  static void count_out(W& w, Count (&awake)[L]) {
    for (std::size_t l = 0; l < L; ++l) {
      if (w.drains[l]) Atomics::fetch_add(awake[l], std::int64_t{-1}, std::memory_order_seq_cst);
    }
  }

  // The worker's sleep transition, c1..c3. `exiting()` says whether the
  // worker must leave (stop, retire); `work_visible()` re-checks every queue
  // the worker may drain (not a hint such as a non-empty bitmap);
  // `on_park()` runs once before a real park (statistics). Returns false
  // when the worker should exit; true when it should look for work again.
  template <class W, std::size_t L, class Exiting, class Visible, class OnPark>
  static bool idle(W& w, Count (&awake)[L], Exiting&& exiting, Visible&& work_visible,
                   OnPark&& on_park) {
#if defined(TPOOL_SLEEP_WAKE_MUTANT_RECHECK_FIRST)
    const bool leave = exiting();
    const bool found = leave || work_visible();
#endif
    // c1: publish `sleeping`, then leave the awake count (inv 2). seq_cst:
    // both must precede the re-check's loads in the total order that the
    // producer's w1 fence joins (inv 3); acquire/release cannot order a
    // store before a later load of another location.
    Atomics::store(w.sleep, SleepState::kSleeping, std::memory_order_seq_cst);
    count_out(w, awake);
#if !defined(TPOOL_SLEEP_WAKE_MUTANT_NO_C2_FENCE)
    // c2: pairs with the producer's w1 fence (inv 3).
    Atomics::fence(std::memory_order_seq_cst);
#endif
#if !defined(TPOOL_SLEEP_WAKE_MUTANT_RECHECK_FIRST)
    const bool leave = exiting();
    const bool found = leave || work_visible();
#endif
    if (found) {
      take_back(w, awake);
      return !leave;
    }
    on_park();
    // c3: park until a waker flips us to running (inv 4), or we must leave.
    Sync::lock(w.park_mu);
    // Relaxed: statistics and the watchdog's retire hint, never a decision
    // of the handshake.
    Atomics::store(w.parked, true, std::memory_order_relaxed);
    // Acquire pairs with the waker's seq_cst CAS; the mutex orders it too.
    while (Atomics::load(w.sleep, std::memory_order_acquire) != SleepState::kRunning &&
           !exiting()) {
      Sync::wait(w.park_cv, w.park_mu);
    }
    Atomics::store(w.parked, false, std::memory_order_relaxed);
    Sync::unlock(w.park_mu);
    take_back(w, awake);  // woken by stop or retire rather than by a waker
    return !exiting();
  }

  // A worker leaving for good (stop, retire) that was counted in: leave the
  // count, fence, then re-check, as c1 and c2, so a producer that skipped its
  // wake because it counted this worker cannot strand its task. True if the
  // caller must wake one worker of each lane it drained (work_visible()).
  template <class W, std::size_t L, class Visible>
  static bool leave(W& w, Count (&awake)[L], Visible&& work_visible) {
    count_out(w, awake);
    Atomics::fence(std::memory_order_seq_cst);  // as c2 (inv 3)
    return work_visible();
  }

  // w1 and w2, after a producer published work on lane `lane`: true if it
  // must go on to wake someone (w3). `fenced`: the caller has just issued a
  // seq_cst fence after its push (submit_one shares the shutdown
  // handshake's). `tick` counts this producer's submits for coalescing with
  // batch B = `batch`; `everyone_awake(up)` says whether every worker that
  // could take the work is counted awake and the pool cannot grow.
  template <class EveryoneAwake>
  static bool wake_needed(Count& awake_lane, bool fenced, std::uint32_t& tick, std::uint32_t batch,
                          EveryoneAwake&& everyone_awake) {
#if !defined(TPOOL_SLEEP_WAKE_MUTANT_NO_W1_FENCE)
    // w1: order the push before the reads of awake[] and of the sleep
    // states (w3); pairs with the worker's c2 fence (inv 3).
    if (!fenced) Atomics::fence(std::memory_order_seq_cst);
#else
    (void)fenced;
#endif
    // Relaxed: ordered by the fence above (inv 3).
    const std::int64_t up = Atomics::load(awake_lane, std::memory_order_relaxed);
    // w2: coalescing. Skipping is safe while some worker that drains this
    // lane is counted awake: it has yet to re-check the queues (inv 2).
    if (batch > 1 && up > 0 && ++tick % batch != 0) return false;
    return !everyone_awake(up);
  }

  // w3: scan the sleep states of workers 0..n-1 (`worker_at(i)`) from a
  // rotating hint and wake at most one that drains `lane`. True if one was
  // woken.
  template <std::size_t L, class WorkerAt>
  static bool wake_one(std::size_t lane, std::size_t n, Atomic<std::uint32_t>& hint,
                       Count (&awake)[L], WorkerAt&& worker_at) {
    // Relaxed: only spreads the wakes; any start finds every sleeper.
    const std::size_t start_at =
        Atomics::fetch_add(hint, std::uint32_t{1}, std::memory_order_relaxed) % n;
    for (std::size_t k = 0; k < n; ++k) {
      auto& w = worker_at((start_at + k) % n);
      if (!w.drains[lane]) continue;
      SleepState expect = SleepState::kSleeping;
      // Relaxed: a filter before the CAS; ordered after the push by w1.
      if (Atomics::load(w.sleep, std::memory_order_relaxed) != expect) continue;
      // seq_cst: in the handshake's total order with the worker's own CAS
      // (inv 1: exactly one of us moves it back to running).
      if (Atomics::cas_strong(w.sleep, expect, SleepState::kRunning, std::memory_order_seq_cst,
                              std::memory_order_seq_cst)) {
        count_in(w, awake);
        Sync::lock(w.park_mu);  // inv 4: the worker checks `sleep` under it
        Sync::unlock(w.park_mu);
        Sync::notify_one(w.park_cv);
        return true;
      }
    }
    return false;
  }

 private:
  // Move ourselves back to running; if a waker beat us to it, it already
  // counted us in (inv 1).
  template <class W, std::size_t L>
  static void take_back(W& w, Count (&awake)[L]) {
    SleepState expect = SleepState::kSleeping;
    if (Atomics::cas_strong(w.sleep, expect, SleepState::kRunning, std::memory_order_seq_cst,
                            std::memory_order_seq_cst)) {
      count_in(w, awake);
    }
  }
};

}  // namespace tpool::detail
