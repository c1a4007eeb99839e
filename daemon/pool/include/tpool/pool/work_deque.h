// WorkDeque: a bounded Chase-Lev work-stealing deque.
//
// Follows Lê, Pop, Cohen and Zappa Nardelli, "Correct and Efficient
// Work-Stealing for Weak Memory Models" (PPoPP 2013), figure 1, with these
// deviations:
//   - fixed capacity: push_bottom returns false when full instead of growing
//     the array (the pool falls back to its next submit path, as with
//     RingQueue);
//   - the slots are relaxed atomics rather than plain memory: a stealer may
//     read a slot the owner is rewriting after the stealer's top went stale;
//     the paper's proof discards that value (the stealer's CAS fails), but in
//     C++ a plain read would still be a data race;
//   - a losing stealer returns empty without retrying, so the caller can pick
//     another victim (the seed's rule). There is no batch steal: Chase-Lev's
//     linearisation argument does not extend to batched takes; RingQueue has
//     steal_half;
//   - no fences. The paper orders the owner's bottom store before its top load
//     (and the stealer's top load before its bottom load) with seq_cst fences
//     between relaxed accesses, and publishes with a release fence before a
//     relaxed bottom store. Here those accesses are themselves seq_cst, and
//     every bottom store is a release store. Same guarantee (inv 4), same cost
//     on x86-64 (the seq_cst store is the one locked instruction, like the
//     paper's mfence; the stealer's loads become plain loads instead of
//     load + mfence), and ThreadSanitizer understands it: TSan does not model
//     std::atomic_thread_fence (GCC rejects it under -fsanitize=thread with
//     -Werror=tsan) and would report false races on whatever the items point
//     to. Verified by tests/model/relacy/work_deque_model.cc.
// It is the pool's `queue_kind = chase_lev` option.
//
// Invariants:
//   (1) Only the owner writes bottom and the slots.
//   (2) top only grows, by a CAS; top <= bottom + 1 at all times (bottom may
//       dip one below top inside pop_bottom).
//   (3) The last item (top == bottom - 1 at pop) is arbitrated by a CAS on top
//       between the owner and the stealers: exactly one wins.
//   (4) The owner's bottom store and top load in pop_bottom and the stealer's
//       top load and bottom load in steal_top are seq_cst, so they are in one
//       total order (the store-buffering pattern): at least one side sees the
//       other, so both cannot take the same item without the CAS of inv 3.
//   (5) Every store of bottom is a release (or seq_cst) store and every load
//       of bottom by a stealer is seq_cst (so acquire): a stealer that sees
//       bottom > t sees the owner's write of slot t.
//
// Thread safety: push_bottom, pop_bottom: owner only. steal_top, size_approx:
// any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "tpool/pool/atomics.h"

namespace tpool::detail {

template <class T, std::size_t Capacity = 0, class Atomics = StdAtomics>
class WorkDeque {
  static_assert(std::is_trivially_copyable_v<T>, "WorkDeque holds trivially copyable values");
  static_assert(Capacity == 0 || is_power_of_two(Capacity), "capacity must be a power of two");

 public:
  explicit WorkDeque(std::size_t capacity = Capacity)
      : slots_(capacity), mask_(slots_.size() - 1) {}
  WorkDeque(const WorkDeque&) = delete;
  WorkDeque& operator=(const WorkDeque&) = delete;

  std::size_t capacity() const noexcept { return mask_ + 1; }

  // Owner: push at bottom. False when full.
  bool push_bottom(T v) noexcept {
    const std::int64_t b = Atomics::load(bottom_, std::memory_order_relaxed);  // (inv 1)
    // Acquire pairs with the stealers' CAS on top: their slot reads happen
    // before we reuse the slot.
    const std::int64_t t = Atomics::load(top_, std::memory_order_acquire);
    if (b - t >= static_cast<std::int64_t>(capacity())) return false;
    Atomics::store(slots_[static_cast<std::size_t>(b) & mask_], v, std::memory_order_relaxed);
    // (inv 5) Release publishes the slot (the paper: release fence + relaxed
    // store). Pairs with the seq_cst load of bottom in steal_top.
    Atomics::store(bottom_, b + 1, std::memory_order_release);
    return true;
  }

  // Owner: pop the newest item (LIFO). False when empty or when a stealer won
  // the last item.
  bool pop_bottom(T& out) noexcept {
    const std::int64_t b = Atomics::load(bottom_, std::memory_order_relaxed) - 1;  // (inv 1)
    // (inv 4) seq_cst store, then seq_cst load: the store of bottom must be
    // ordered before the load of top, which acquire/release cannot do (a
    // store may pass a later load). Pairs with the seq_cst loads in steal_top.
    Atomics::store(bottom_, b, std::memory_order_seq_cst);
    std::int64_t t = Atomics::load(top_, std::memory_order_seq_cst);
    if (t > b) {  // empty: restore bottom. (inv 5) release, as every bottom store.
      Atomics::store(bottom_, b + 1, std::memory_order_release);
      return false;
    }
    const T v = Atomics::load(slots_[static_cast<std::size_t>(b) & mask_],
                              std::memory_order_relaxed);  // we wrote it
    if (t == b) {
      // (inv 3) The last item: race the stealers for it. seq_cst as in the
      // paper: the CAS is part of the total order of inv 4.
      const bool won =
          Atomics::cas_strong(top_, t, t + 1, std::memory_order_seq_cst, std::memory_order_relaxed);
      Atomics::store(bottom_, b + 1, std::memory_order_release);  // (inv 5)
      if (!won) return false;
    }
    out = v;
    return true;
  }

  // Any thread: take the oldest item. False when empty or on a lost race (no
  // retry: the caller tries another victim).
  bool steal_top(T& out) noexcept {
    // (inv 4) seq_cst: our load of top must precede our load of bottom in
    // the total order shared with the owner's store-then-load in pop_bottom.
    // (Its acquire half pairs with other stealers' and the owner's CAS on top.)
    std::int64_t t = Atomics::load(top_, std::memory_order_seq_cst);
    // (inv 4, 5) seq_cst, so also acquire: pairs with the release stores of
    // bottom (push_bottom: the slot is written).
    const std::int64_t b = Atomics::load(bottom_, std::memory_order_seq_cst);
    if (t >= b) return false;
    const T v =
        Atomics::load(slots_[static_cast<std::size_t>(t) & mask_], std::memory_order_relaxed);
    // seq_cst as in the paper (see pop_bottom). A failed CAS means another
    // thief or the owner took item t; our copy may be stale and is discarded.
    if (!Atomics::cas_strong(top_, t, t + 1, std::memory_order_seq_cst,
                             std::memory_order_relaxed)) {
      return false;
    }
    out = v;
    return true;
  }

  // Any thread: a snapshot of the item count; exact only when quiescent.
  std::size_t size_approx() const noexcept {
    const std::int64_t t = Atomics::load(top_, std::memory_order_acquire);
    const std::int64_t b = Atomics::load(bottom_, std::memory_order_acquire);
    return b > t ? static_cast<std::size_t>(b - t) : 0;
  }

  // Owner: how many more items push_bottom would accept right now.
  std::size_t free_space() const noexcept {
    const std::int64_t b = Atomics::load(bottom_, std::memory_order_relaxed);
    const std::int64_t t = Atomics::load(top_, std::memory_order_acquire);
    const std::int64_t used = b > t ? b - t : 0;
    return capacity() - static_cast<std::size_t>(used);
  }

 private:
  using Index = typename Atomics::template Atomic<std::int64_t>;
  alignas(kCacheLine) Index top_{0};     // advanced by CAS: stealers and the owner's last pop
  alignas(kCacheLine) Index bottom_{0};  // written by the owner only
  alignas(kCacheLine) Slots<typename Atomics::template Atomic<T>, Capacity> slots_;
  std::size_t mask_;
};

}  // namespace tpool::detail
