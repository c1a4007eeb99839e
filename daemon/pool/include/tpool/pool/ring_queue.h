// RingQueue: the owner-local run queue of a worker (SPMC, bounded).
//
// Follows Tokio's runtime/scheduler/multi_thread/queue.rs and Go's runq* in
// runtime/proc.go, with the seed's post-SONNY-2448 semantics: the owner pushes
// at tail and pops FIFO from head; any thread steals half from head. Every take
// (owner pop or batch steal) claims its items with one CAS on head, which is
// the linearisation point. LIFO locality for "task spawns task" comes from the
// worker's LIFO slot (Worker::OwnerState::lifo in daemon/pool/src/pool_internal.h;
// daemon/pool/src/submit.cc enqueue), not from this queue.
//
// Deviations from Tokio: head is one 64-bit counter, not a packed
// {steal, real} pair. Tokio needs the pair so the owner cannot overwrite slots
// a stealer is still copying; here the slots are relaxed atomics, so such a
// copy is not a data race, and a stealer whose slots were overwritten always
// loses its CAS (inv 4). 64-bit indices never wrap in practice, so there is no
// ABA on head.
//
// When the owner's queue is full, push() returns false and the pool falls back
// to the next submit path (the submitter queue, then the inject ring), as the
// seed does. Tokio instead moves half the queue to the inject queue. Measured
// (bench/queues, local_overflow_*; docs/benchmarks.md): falling back is 1.22x
// faster for the owner at bursts of 512 and 4096 into 256 slots, so it stays.
//
// Invariants:
//   (1) Only the owner writes tail and the slots.
//   (2) head only grows, and only by a successful CAS (owner pop: +1,
//       steal_half: +n). tail - head is in [0, capacity] at all times.
//   (3) A claim of [h, h+n) succeeds only if head == h at the CAS, so no item
//       is taken twice and head never passes tail (n <= tail - h, read after h).
//   (4) The owner writes slot (i mod capacity) only when i - head < capacity,
//       as read by an acquire load of head. So it never overwrites an item in
//       [head, tail); if it overwrites a slot a stealer copied, head has moved
//       past the stealer's h first, and the stealer's CAS fails.
//
// Thread safety: push, push_many, pop, free_space: owner thread only.
// steal_half, size_approx: any thread.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>

#include "tpool/pool/atomics.h"

namespace tpool::detail {

template <class T, std::size_t Capacity = 0, class Atomics = StdAtomics>
class RingQueue {
  static_assert(std::is_trivially_copyable_v<T>, "RingQueue holds trivially copyable values");
  static_assert(Capacity == 0 || is_power_of_two(Capacity), "capacity must be a power of two");

 public:
  // Bounded retries of steal_half on a lost CAS or an inconsistent snapshot
  // (the seed's value, picked by hand: a stealer that keeps losing should try
  // another victim rather than spin here).
  static constexpr int kStealRetries = 256;

  explicit RingQueue(std::size_t capacity = Capacity)
      : slots_(capacity), mask_(slots_.size() - 1) {}
  RingQueue(const RingQueue&) = delete;
  RingQueue& operator=(const RingQueue&) = delete;

  std::size_t capacity() const noexcept { return mask_ + 1; }

  // Owner: append v at tail. False when full (the caller takes the next path).
  bool push(T v) noexcept {
    const std::uint64_t t = Atomics::load(tail_, std::memory_order_relaxed);  // (inv 1) ours
    // Acquire pairs with the release of the CAS in pop/steal_half: a stealer's
    // slot reads happen before we reuse those slots (inv 4).
    const std::uint64_t h = Atomics::load(head_, std::memory_order_acquire);
    if (t - h >= capacity()) return false;
    Atomics::store(slots_[t & mask_], v, std::memory_order_relaxed);
    // Release: publishes the slot. Pairs with the acquire loads of tail in
    // steal_half (and size_approx readers that go on to steal).
    Atomics::store(tail_, t + 1, std::memory_order_release);
    return true;
  }

  // Owner: append as many of vs as fit, with one publication of tail.
  std::size_t push_many(std::span<const T> vs) noexcept {
    const std::uint64_t t = Atomics::load(tail_, std::memory_order_relaxed);
    const std::uint64_t h = Atomics::load(head_, std::memory_order_acquire);  // as in push
    const std::size_t n = std::min<std::size_t>(vs.size(), capacity() - (t - h));
    for (std::size_t i = 0; i < n; ++i) {
      Atomics::store(slots_[(t + i) & mask_], vs[i], std::memory_order_relaxed);
    }
    if (n != 0) Atomics::store(tail_, t + n, std::memory_order_release);  // as in push
    return n;
  }

  // Owner: take the oldest item (FIFO). False when empty.
  bool pop(T& out) noexcept {
    const std::uint64_t t = Atomics::load(tail_, std::memory_order_relaxed);  // (inv 1) ours
    // Relaxed: a stale head only makes the CAS below fail and retry.
    std::uint64_t h = Atomics::load(head_, std::memory_order_relaxed);
    while (h != t) {
      const T v = Atomics::load(slots_[h & mask_], std::memory_order_relaxed);  // we wrote it
      // acq_rel: release pairs with the acquire load of head in push (inv 4);
      // acquire pairs with a stealer's release CAS when we lose and retry.
      if (Atomics::cas_strong(head_, h, h + 1, std::memory_order_acq_rel,
                              std::memory_order_acquire)) {
        out = v;
        return true;
      }
      // Lost to a stealer: h now holds the new head (inv 2: head <= tail).
    }
    return false;
  }

  // Any thread: move up to ceil(available / 2) items, capped by dst.size() and
  // max_batch, into dst[0..n). Returns n (0 when empty or after kStealRetries
  // lost races).
  std::size_t steal_half(std::span<T> dst, std::size_t max_batch) noexcept {
    const std::size_t limit = std::min(dst.size(), max_batch);
    if (limit == 0) return 0;
    for (int attempt = 0; attempt < kStealRetries; ++attempt) {
      // Acquire on head pairs with the release of other claimants' CAS, so the
      // tail we read next is at least as new as what they saw.
      std::uint64_t h = Atomics::load(head_, std::memory_order_acquire);
      // Acquire pairs with the owner's release store of tail: the slots in
      // [h, t) hold the owner's values.
      const std::uint64_t t = Atomics::load(tail_, std::memory_order_acquire);
      if (t == h) return 0;
      if (t - h > capacity()) continue;  // h was stale against a newer tail: reload
      const std::size_t avail = static_cast<std::size_t>(t - h);
      const std::size_t n = std::min((avail + 1) / 2, limit);
      for (std::size_t i = 0; i < n; ++i) {
        dst[i] = Atomics::load(slots_[(h + i) & mask_], std::memory_order_relaxed);
      }
      // (inv 3) The claim. acq_rel: release pairs with the owner's acquire
      // load of head in push (our slot reads happen before its overwrite).
      if (Atomics::cas_strong(head_, h, h + n, std::memory_order_acq_rel,
                              std::memory_order_acquire)) {
        return n;
      }
    }
    return 0;
  }

  // Any thread: a snapshot of the item count; exact only when quiescent.
  std::size_t size_approx() const noexcept {
    const std::uint64_t h = Atomics::load(head_, std::memory_order_acquire);
    const std::uint64_t t = Atomics::load(tail_, std::memory_order_acquire);
    return t > h ? static_cast<std::size_t>(std::min<std::uint64_t>(t - h, capacity())) : 0;
  }

  // Owner: how many more items push would accept right now (a lower bound).
  std::size_t free_space() const noexcept {
    const std::uint64_t t = Atomics::load(tail_, std::memory_order_relaxed);
    const std::uint64_t h = Atomics::load(head_, std::memory_order_acquire);
    return capacity() - static_cast<std::size_t>(t - h);
  }

 private:
  using Index = typename Atomics::template Atomic<std::uint64_t>;
  alignas(kCacheLine) Index head_{0};  // claimed by CAS: owner pop and stealers
  alignas(kCacheLine) Index tail_{0};  // written by the owner only
  alignas(kCacheLine) Slots<typename Atomics::template Atomic<T>, Capacity> slots_;
  std::size_t mask_;
};

}  // namespace tpool::detail
