// EventCount: a condition variable for conditions that live in atomics.
//
// The pool's one parking primitive for threads that wait on a condition other
// threads change without a lock: a blocked submitter (a free descriptor, or
// shutdown), wait() (a task's terminal state), help_wait() (its group's zero,
// or work it could run) and shutdown (accepted == finished). docs/
// wake-protocol.md, "Event counts", maps each to its notifiers; the Spin model
// tests/model/spin/event_count.pml checks the protocol, with known-bad
// variants it must reject.
//
// Follows the event count of Dmitry Vyukov (1024cores.net, "Eventcounts") as
// folly (folly/experimental/EventCount.h) and Eigen
// (unsupported/Eigen/CXX11/src/ThreadPool/EventCount.h) write it: one word of
// {epoch, waiters}; a waiter registers and reads the epoch (prepare_wait),
// re-checks its condition, then sleeps only while the epoch is unchanged
// (commit_wait); a notifier changes the condition, then bumps the epoch if
// anybody is registered. Deviations:
//   - The slow path is a tpool::Mutex and a tpool::CondVar, not a futex:
//     standard C++20 has no timed std::atomic::wait, and wait(), submits and
//     shutdown take deadlines. It is taken only when somebody waits.
//   - A `notified` bit (inv 4): only the first notify_all after a waiter
//     registered pays for the epoch bump, the lock and the broadcast; later
//     ones, until the next prepare_wait, are one load. (folly and Eigen bump
//     and wake on every notify while anybody waits: one futex call per
//     released descriptor while a submitter is blocked, which the pool cannot
//     afford on its release path.)
//   - Both sides issue an explicit seq_cst fence (inv 3) instead of relying
//     on acq_rel read-modify-writes: the C++ memory model orders a store
//     before a later load of another location only through seq_cst, and an
//     x86 locked instruction giving that for free is not an argument.
//
// The protocol, for a waiter W and a notifier N (W's condition C is made true
// by N's store S):
//
//   W:  for (;;) {                        N:  S (make C true)
//         if (C) break;                       notify_all()   [fence; load word]
//         key = prepare_wait();   [RMW word; fence]
//         if (C) { cancel_wait(); break; }
//         commit_wait(key);       [sleep while epoch == key]
//       }
//
// Thread safety and invariants:
//   (1) word = epoch << kEpochShift | notified << kNotifiedShift | waiters.
//       `waiters` counts the threads between their prepare_wait and the end
//       of their cancel_wait / commit_wait; each decrements itself, so the
//       count never goes negative and a notifier never touches it.
//   (2) The epoch only grows (mod 2^31), and only a notify moves it, by one
//       CAS that also sets `notified`. A key is the epoch a waiter read in
//       prepare_wait; commit_wait returns once the epoch differs from it.
//       The wrap could fool a waiter only if exactly 2^31 bumps fell between
//       its prepare_wait and its check under mu_; each bump needs a waiter
//       that registered after the previous one (inv 4), a lock of mu_ and a
//       broadcast, so that many cannot fit in a preempted waiter's window.
//   (3) Store buffering (the Dekker pair): W's RMW of the word and N's store
//       S are each followed by a seq_cst fence and then a load of the other
//       side's location (W: the condition; N: the word). The fences are in
//       the single total order of seq_cst operations; whichever comes first,
//       the other side's load after its own fence sees the store before the
//       first fence ([atomics.fences]). So either W's re-check sees C, or N's
//       load sees W registered and bumps the epoch. No wake-up is lost.
//   (4) `notified` is set by the notify that bumps the epoch and cleared by
//       every prepare_wait. While it is set, every registered waiter
//       registered before that bump, so its key is stale: its commit_wait
//       returns without a further notify, and a notify_all may skip the bump.
//       (notify_one neither skips nor sets it: it wakes one waiter, and the
//       others, though stale, sleep until a later notify.)
//   (5) The waiter reads the epoch and goes to sleep under mu_; the notifier
//       bumps the epoch and then takes and releases mu_ before it signals cv_.
//       So the signal cannot fall between the waiter's check and its wait
//       (the same argument as sleep_wake.h inv 4). mu_ guards no member: it
//       only closes that window.
//
// Written against the atomics policy (atomics.h) and the mutex policy
// (sync.h), like sleep_wake.h: the pool compiles EventCount =
// BasicEventCount<StdAtomics, StdSync>; the Relacy model
// (tests/model/relacy/event_count_model.cc) compiles the same source with
// RelacyAtomics and RelacySync and checks it under the C++ memory model. The
// TPOOL_EVENT_COUNT_MUTANT_* macros build known-broken variants for that
// model only; a build of the pool never defines them.
//
// Costs: notify_all / notify_one with nobody registered (or, for notify_all,
// everybody already notified) is one relaxed load after the caller's fence;
// prepare_wait is a CAS and a fence; commit_wait locks mu_.
#pragma once

#include <chrono>
#include <cstdint>

#include "tpool/pool/atomics.h"
#include "tpool/pool/sync.h"

#if defined(TPOOL_EVENT_COUNT_MUTANT_NO_NOTIFY_FENCE) ||  \
    defined(TPOOL_EVENT_COUNT_MUTANT_NO_PREPARE_FENCE) || \
    defined(TPOOL_EVENT_COUNT_MUTANT_KEEPS_NOTIFIED)
#if !defined(TPOOL_EVENT_COUNT_MODEL)
#error "TPOOL_EVENT_COUNT_MUTANT_* builds a broken event count: for the Relacy model only"
#endif
#endif

namespace tpool::detail {

template <class Atomics = StdAtomics, class Sync = StdSync>
class BasicEventCount {
 public:
  // The epoch a waiter saw in prepare_wait (inv 2).
  class Key {
   public:
    std::uint32_t epoch() const noexcept { return epoch_; }

   private:
    friend class BasicEventCount;
    explicit Key(std::uint32_t e) noexcept : epoch_(e) {}
    std::uint32_t epoch_;
  };

  BasicEventCount() = default;
  BasicEventCount(const BasicEventCount&) = delete;
  BasicEventCount& operator=(const BasicEventCount&) = delete;

  // Waiter: register, then re-check the condition (the caller's loads come
  // after the fence below, inv 3), then cancel_wait() or commit_wait().
  Key prepare_wait() noexcept {
    std::uint64_t w = Atomics::load(word_, std::memory_order_relaxed);
    std::uint64_t next = 0;
    do {
      // Clears `notified` (inv 4): this waiter needs a notify that comes
      // after it.
#if defined(TPOOL_EVENT_COUNT_MUTANT_KEEPS_NOTIFIED)
      next = w + 1;
#else
      next = (w + 1) & ~kNotified;
#endif
      // Relaxed CAS: the fence below orders it before the re-check (inv 3);
      // a failed CAS retries with the word it read.
    } while (
        !Atomics::cas_weak(word_, w, next, std::memory_order_relaxed, std::memory_order_relaxed));
#if !defined(TPOOL_EVENT_COUNT_MUTANT_NO_PREPARE_FENCE)
    // (inv 3) Pairs with the notifier's fence: our registration, then our
    // loads of the condition.
    Atomics::fence(std::memory_order_seq_cst);
#endif
    return Key(epoch_of(w));
  }

  // Waiter: the re-check found the condition true. Relaxed: a notifier that
  // still counts us only wakes nobody (inv 1).
  void cancel_wait() noexcept {
    unregister();
  }

  // Waiter: sleep until a notify that came after prepare_wait (the epoch no
  // longer equals key), then unregister. A notify for another waiter's
  // condition may end it too: the caller re-checks its own.
  void commit_wait(Key key) {
    Sync::lock(mu_);
    while (epoch_acquire() == key.epoch_) Sync::wait(cv_, mu_);  // (inv 5) checked under mu_
    Sync::unlock(mu_);
    unregister();
  }

  // As commit_wait, but gives up at `deadline`: false if it timed out with
  // the epoch unchanged (the caller re-checks its condition either way).
  template <class Clock, class Duration>
  bool commit_wait_until(Key key, std::chrono::time_point<Clock, Duration> deadline) {
    bool notified = true;
    Sync::lock(mu_);
    while (epoch_acquire() == key.epoch_) {  // (inv 5) checked under mu_
      if (!Sync::wait_until(cv_, mu_, deadline)) {
        notified = epoch_acquire() != key.epoch_;
        break;
      }
    }
    Sync::unlock(mu_);
    unregister();
    return notified;
  }

  // Notifier, after the store that makes a waiter's condition true: wake
  // every waiter registered before this call (inv 3). One fence and one load
  // when nobody waits or everybody was notified already (inv 4).
  void notify_all() noexcept {
#if !defined(TPOOL_EVENT_COUNT_MUTANT_NO_NOTIFY_FENCE)
    // (inv 3) Pairs with prepare_wait's fence: our store S, then our load of
    // the word.
    Atomics::fence(std::memory_order_seq_cst);
#endif
    notify_all_fenced();
  }

  // notify_all for a caller that has issued a seq_cst fence since its store S
  // (the pool's submit path shares its wake handshake's fence, finish() its
  // detach fence): one relaxed load when there is nothing to do.
  void notify_all_fenced() noexcept {
    // Relaxed: ordered after S by the caller's fence (inv 3).
    std::uint64_t w = Atomics::load(word_, std::memory_order_relaxed);
    for (;;) {
      if (waiters_of(w) == 0 || (w & kNotified) != 0) return;  // (inv 4)
      // Release: our store S (and all before it) happens before a waiter
      // that reads the new epoch with epoch_acquire(). Relaxed on failure:
      // retry with the word read.
      if (Atomics::cas_weak(word_, w, (w + kEpochOne) | kNotified, std::memory_order_release,
                            std::memory_order_relaxed)) {
        break;
      }
    }
    signal(/*all=*/true);
  }

  // Notifier: wake one registered waiter, if any (for waiters any one of
  // which can take what was published; the pool uses notify_all).
  void notify_one() noexcept {
    Atomics::fence(std::memory_order_seq_cst);  // as notify_all
    if (waiters_of(Atomics::load(word_, std::memory_order_relaxed)) == 0) return;
    // Release as in notify_all_fenced. Does not set `notified` (inv 4).
    Atomics::fetch_add(word_, kEpochOne, std::memory_order_release);
    signal(/*all=*/false);
  }

  // How many are registered (statistics, tests): relaxed, a snapshot.
  std::uint32_t waiters() const noexcept {
    return waiters_of(Atomics::load(word_, std::memory_order_relaxed));
  }

  // Anybody registered? A hint (relaxed, no fence): the pool's release path
  // reads it to decide whether to bypass its descriptor caches.
  bool has_waiters() const noexcept {
    return waiters() != 0;
  }

 private:
  static constexpr unsigned kNotifiedShift = 32;
  static constexpr unsigned kEpochShift = 33;
  static constexpr std::uint64_t kWaiterMask = (std::uint64_t{1} << 32) - 1;
  static constexpr std::uint64_t kNotified = std::uint64_t{1} << kNotifiedShift;
  static constexpr std::uint64_t kEpochOne = std::uint64_t{1} << kEpochShift;

  static std::uint32_t waiters_of(std::uint64_t w) noexcept {
    return static_cast<std::uint32_t>(w & kWaiterMask);
  }
  static std::uint32_t epoch_of(std::uint64_t w) noexcept {
    return static_cast<std::uint32_t>(w >> kEpochShift);
  }
  // Acquire pairs with the notifier's release CAS of the epoch (inv 2): a
  // waiter that sees the new epoch sees the notifier's store S.
  std::uint32_t epoch_acquire() const noexcept {
    return epoch_of(Atomics::load(word_, std::memory_order_acquire));
  }
  // (inv 1) The end of a wait. Relaxed: a notifier that still counts us only
  // wakes nobody; a decrement of the low half never borrows from the rest,
  // since we counted ourselves in.
  void unregister() noexcept {
    Atomics::fetch_add(word_, ~std::uint64_t{0}, std::memory_order_relaxed);
  }

  // (inv 5) Take and release mu_ after the epoch moved, then signal.
  void signal(bool all) noexcept {
    Sync::lock(mu_);
    Sync::unlock(mu_);
    if (all) {
      Sync::notify_all(cv_);
    } else {
      Sync::notify_one(cv_);
    }
  }

  alignas(kCacheLine) typename Atomics::template Atomic<std::uint64_t> word_{0};  // (inv 1)
  typename Sync::Mutex mu_;  // (inv 5) guards no member
  typename Sync::CondVar cv_;
};

// The pool's event count.
using EventCount = BasicEventCount<>;

}  // namespace tpool::detail
