// BoundedRing: Dmitry Vyukov's bounded MPMC queue, with a batch pop.
//
// After Vyukov's "Bounded MPMC queue" (1024cores.net): each slot carries a
// sequence number that says whose turn it is. For the slot of position p
// (p mod capacity):
//   seq == p            empty, a producer of position p may claim it
//   seq == p + 1        full, a consumer of position p may claim it
//   seq == p + capacity empty again, for the producer of the next lap
// The pool uses it as the inject ring (any thread submits, workers drain).
//
// Addition: pop_many reserves up to n consecutive published entries with one
// CAS on head (the seed's popMany, cutting head-CAS traffic by the batch
// factor). Deviation from the seed: it counts only entries whose producers
// have already published (seq == p + 1) before the CAS, so it never spins on
// a producer that claimed a slot but has not yet written it; such an entry is
// left for a later pop.
//
// Invariants:
//   (1) A position p is claimed by exactly one producer (CAS of tail from p)
//       and exactly one consumer (CAS of head past p).
//   (2) A consumer reads slot p only after observing seq == p + 1 with
//       acquire, which pairs with the producer's release store of seq.
//   (3) A producer writes slot p only after observing seq == p with acquire,
//       which pairs with the previous lap's consumer's release store of
//       seq = p, so the consumer's read happened before the overwrite.
//   (4) pop_many's CAS moves head from h to h + k only for k entries all
//       observed published (inv 2 for each), so no reserved entry is unwritten.
//
// Thread safety: every member function, any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>

#include "tpool/pool/atomics.h"

namespace tpool::detail {

template <class T, std::size_t Capacity = 0, class Atomics = StdAtomics>
class BoundedRing {
  static_assert(std::is_trivially_copyable_v<T>, "BoundedRing holds trivially copyable values");
  static_assert(Capacity == 0 || is_power_of_two(Capacity), "capacity must be a power of two");

 public:
  explicit BoundedRing(std::size_t capacity = Capacity)
      : slots_(capacity), mask_(slots_.size() - 1) {
    for (std::size_t i = 0; i < capacity; ++i) {
      Atomics::store(slots_[i].seq, static_cast<std::uint64_t>(i), std::memory_order_relaxed);
    }
  }
  BoundedRing(const BoundedRing&) = delete;
  BoundedRing& operator=(const BoundedRing&) = delete;

  std::size_t capacity() const noexcept { return mask_ + 1; }

  // Append v. False when full. As in Vyukov's original, "full" is also
  // reported while the consumer of the slot one lap back has claimed it but
  // not yet released it, so a ring with fewer items than slots can refuse a
  // push for a moment: a caller that must not drop (the pool) sizes the ring
  // above its item count and retries.
  bool try_push(T v) noexcept {
    std::uint64_t pos = Atomics::load(tail_, std::memory_order_relaxed);
    for (;;) {
      Slot& s = slots_[pos & mask_];
      // (inv 3) acquire pairs with the release store of seq in pop/pop_many.
      const std::uint64_t seq = Atomics::load(s.seq, std::memory_order_acquire);
      const auto diff = static_cast<std::int64_t>(seq - pos);
      if (diff == 0) {
        // (inv 1) Relaxed: the claim needs only atomicity; visibility of the
        // value is carried by the seq store below.
        if (Atomics::cas_weak(tail_, pos, pos + 1, std::memory_order_relaxed,
                              std::memory_order_relaxed)) {
          Atomics::set(s.value, v);
          // (inv 2) release pairs with the acquire load of seq by consumers.
          Atomics::store(s.seq, pos + 1, std::memory_order_release);
          return true;
        }
      } else if (diff < 0) {
        return false;  // the slot still holds last lap's item: full
      } else {
        pos = Atomics::load(tail_, std::memory_order_relaxed);  // another producer won
      }
    }
  }

  // Take the oldest item. False when empty (or when the oldest item's
  // producer has claimed but not yet published it).
  bool pop(T& out) noexcept {
    std::uint64_t pos = Atomics::load(head_, std::memory_order_relaxed);
    for (;;) {
      Slot& s = slots_[pos & mask_];
      // (inv 2) acquire pairs with the producer's release store of seq.
      const std::uint64_t seq = Atomics::load(s.seq, std::memory_order_acquire);
      const auto diff = static_cast<std::int64_t>(seq - (pos + 1));
      if (diff == 0) {
        if (Atomics::cas_weak(head_, pos, pos + 1, std::memory_order_relaxed,
                              std::memory_order_relaxed)) {
          out = Atomics::get(s.value);
          // (inv 3) release pairs with the next lap's producer's acquire.
          Atomics::store(s.seq, pos + capacity(), std::memory_order_release);
          return true;
        }
      } else if (diff < 0) {
        return false;
      } else {
        pos = Atomics::load(head_, std::memory_order_relaxed);
      }
    }
  }

  // Take up to out.size() of the oldest published items with one CAS on head.
  // Returns how many were written to out[0..n).
  std::size_t pop_many(std::span<T> out) noexcept {
    if (out.empty()) return 0;
    std::uint64_t pos = Atomics::load(head_, std::memory_order_relaxed);
    for (;;) {
      // (inv 4) Count the published run starting at pos.
      std::size_t k = 0;
      while (k < out.size()) {
        // (inv 2) acquire pairs with each producer's release store of seq.
        const std::uint64_t seq =
            Atomics::load(slots_[(pos + k) & mask_].seq, std::memory_order_acquire);
        if (seq != pos + k + 1) break;
        ++k;
      }
      if (k == 0) {
        const std::uint64_t seq = Atomics::load(slots_[pos & mask_].seq, std::memory_order_acquire);
        if (static_cast<std::int64_t>(seq - (pos + 1)) < 0) return 0;  // empty or unpublished
        pos = Atomics::load(head_, std::memory_order_relaxed);         // another consumer moved on
        continue;
      }
      if (Atomics::cas_weak(head_, pos, pos + k, std::memory_order_relaxed,
                            std::memory_order_relaxed)) {
        for (std::size_t i = 0; i < k; ++i) {
          Slot& s = slots_[(pos + i) & mask_];
          out[i] = Atomics::get(s.value);
          Atomics::store(s.seq, pos + i + capacity(), std::memory_order_release);  // (inv 3)
        }
        return k;
      }
      // Lost: pos holds the new head; count again from there.
    }
  }

  // Any thread: a snapshot of the item count; exact only when quiescent.
  std::size_t size_approx() const noexcept {
    const std::uint64_t h = Atomics::load(head_, std::memory_order_acquire);
    const std::uint64_t t = Atomics::load(tail_, std::memory_order_acquire);
    return t > h ? static_cast<std::size_t>(t - h) : 0;
  }

 private:
  struct Slot {
    typename Atomics::template Atomic<std::uint64_t> seq;
    typename Atomics::template Cell<T> value;
  };
  alignas(kCacheLine) typename Atomics::template Atomic<std::uint64_t> head_{0};
  alignas(kCacheLine) typename Atomics::template Atomic<std::uint64_t> tail_{0};
  alignas(kCacheLine) Slots<Slot, Capacity> slots_;
  std::size_t mask_;
};

}  // namespace tpool::detail
