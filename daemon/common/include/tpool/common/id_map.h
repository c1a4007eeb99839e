// tpool::IdMap<Ptr>: a map from 64-bit ids to nullable owning pointers
// (std::shared_ptr, std::unique_ptr), in one flat array: open addressing,
// linear probing, deletion by backward shift (no tombstones).
//
// Why not std::unordered_map: the result store keeps one entry per retained
// job, by the hundred thousand. unordered_map pays a 32-byte node (a 48-byte
// malloc chunk: next, key, value) plus its bucket array (8-16 bytes) for
// each, ~56-64 bytes. Here an entry is its 24-byte slot (id, pointer), the
// array between 7/16 and 7/8 full: ~27-55 bytes, no malloc per entry.
//
// Not thread safe: the owner's lock guards it (the result store's mu_).
//
// Invariants:
//  (I1) slots_ has capacity() slots, a power of two >= kMinCapacity; a slot
//       is empty iff its pointer is null; size() pointers are non-null, and
//       size() <= capacity() * 7 / 8 after every call (grow before insert).
//  (I2) Probe order: a key's home slot is hash(id) & mask; an entry sits at
//       its home slot or after it, and every slot between its home and it
//       (cyclically) is full. So a lookup stops at the first empty slot, and
//       erase() keeps (I2) by shifting later entries of the run back into
//       the hole when their home does not lie cyclically after the hole.
//  (I3) Ids are unique among the entries; a null pointer is never stored
//       (it would read as an empty slot).
//
// Hashing: Fibonacci (multiply by 2^64 / phi, take the top bits). The
// engine's ids are consecutive sequence numbers under a fixed incarnation
// (JobId), which this spreads near-evenly over the array (the three-gap
// theorem), so runs stay short even at 7/8 full.
#pragma once

#include <bit>
#include <cassert>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>

namespace tpool {

template <class Ptr>
class IdMap {
 public:
  static constexpr std::size_t kMinCapacity = 16;

  IdMap() = default;
  IdMap(const IdMap&) = delete;
  IdMap& operator=(const IdMap&) = delete;

  std::size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }
  std::size_t capacity() const noexcept { return slots_ ? mask_ + 1 : 0; }

  // Stores p under id; false (p untouched) if id is already present (I3).
  // p must not be null.
  bool insert(std::uint64_t id, Ptr&& p) {
    assert(p != nullptr);
    if (find_slot(id) != nullptr) return false;
    if ((size_ + 1) * 8 > capacity() * 7) rehash(capacity() == 0 ? kMinCapacity : capacity() * 2);
    place(id, std::move(p));
    ++size_;
    return true;
  }

  // The pointer stored under id, or null.
  const Ptr* find(std::uint64_t id) const noexcept {
    const Slot* s = find_slot(id);
    return s == nullptr ? nullptr : &s->ptr;
  }
  bool contains(std::uint64_t id) const noexcept { return find_slot(id) != nullptr; }

  // Removes id's entry and returns its pointer (null if absent). Shrinks the
  // array by half when it falls under 1/8 full (never under kMinCapacity),
  // so a burst's memory is given back.
  Ptr erase(std::uint64_t id) {
    Slot* s = const_cast<Slot*>(find_slot(id));
    if (s == nullptr) return Ptr{};
    Ptr out = std::move(s->ptr);
    s->ptr = Ptr{};
    --size_;
    backward_shift(static_cast<std::size_t>(s - slots_.get()));
    if (capacity() > kMinCapacity && size_ * 8 < capacity()) rehash(capacity() / 2);
    return out;
  }

  // f(id, const Ptr&) for every entry, in no particular order.
  template <class F>
  void for_each(F&& f) const {
    for (std::size_t i = 0; i < capacity(); ++i) {
      if (slots_[i].ptr != nullptr) f(slots_[i].id, slots_[i].ptr);
    }
  }

 private:
  struct Slot {
    std::uint64_t id = 0;
    Ptr ptr{};
  };

  std::size_t home(std::uint64_t id) const noexcept {
    // Fibonacci hashing: the top log2(capacity) bits of id * 2^64/phi.
    const unsigned bits = static_cast<unsigned>(std::countr_zero(mask_ + 1));
    return static_cast<std::size_t>((id * 0x9E3779B97F4A7C15ull) >> (64 - bits)) & mask_;
  }

  const Slot* find_slot(std::uint64_t id) const noexcept {
    if (!slots_) return nullptr;
    for (std::size_t i = home(id);; i = (i + 1) & mask_) {  // (I2) stops: (I1) leaves an empty slot
      const Slot& s = slots_[i];
      if (s.ptr == nullptr) return nullptr;
      if (s.id == id) return &s;
    }
  }

  // Puts an entry known to be absent into the first empty slot of its run.
  void place(std::uint64_t id, Ptr&& p) noexcept {
    std::size_t i = home(id);
    while (slots_[i].ptr != nullptr) i = (i + 1) & mask_;
    slots_[i].id = id;
    slots_[i].ptr = std::move(p);
  }

  // (I2) after slot `hole` was emptied: walk the run after it; an entry
  // whose home is not cyclically in (hole, j] can move back into the hole.
  void backward_shift(std::size_t hole) noexcept {
    for (std::size_t j = (hole + 1) & mask_; slots_[j].ptr != nullptr; j = (j + 1) & mask_) {
      const std::size_t h = home(slots_[j].id);
      const bool home_in_gap = ((j - h) & mask_) < ((j - hole) & mask_);
      if (home_in_gap) continue;  // it sits at or after its home past the hole: stays
      slots_[hole].id = slots_[j].id;
      slots_[hole].ptr = std::move(slots_[j].ptr);
      slots_[j].ptr = Ptr{};
      hole = j;
    }
  }

  void rehash(std::size_t cap) {
    assert(std::has_single_bit(cap) && cap >= kMinCapacity);
    const std::size_t old_cap = capacity();
    std::unique_ptr<Slot[]> old = std::exchange(slots_, std::make_unique<Slot[]>(cap));
    mask_ = cap - 1;
    for (std::size_t i = 0; i < old_cap; ++i) {
      if (old[i].ptr != nullptr) place(old[i].id, std::move(old[i].ptr));
    }
  }

  std::unique_ptr<Slot[]> slots_;
  std::size_t mask_ = 0;  // capacity() - 1 when slots_ is set
  std::size_t size_ = 0;
};

}  // namespace tpool
