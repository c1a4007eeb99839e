// LifoStack: a worker's owner-only LIFO of task entries (Config::lifo_capacity).
//
// The seed's LIFO slot holds one entry, the newest task a worker submitted
// from inside a task; the rest go to the worker's stealable local queue, which
// its owner pops FIFO. Nested fan-out then unfolds breadth first: the oldest,
// shallowest task runs next and the tree's frontier (~262k tasks for the 4^9
// tree of bench_pool) lives in queues and descriptors. A stack of a few dozen
// entries keeps the newest tasks for the owner, newest first, so the tree
// unfolds depth first as in oneTBB and only a handful of tasks are live per
// worker. The pool (daemon/pool/src/submit.cc, worker.cc; docs/algorithms.md,
// "The owner's LIFO stack") decides what goes here and when the oldest half is
// handed to the local queue, where other workers can steal it.
//
// Invariants:
//   (1) Single owner: only the worker thread that owns it calls any member
//       (pool inv 3), so there is no atomic operation; other threads never
//       see its entries, which is why the pool hands entries out of it
//       whenever another worker of the lane is asleep (docs/algorithms.md).
//   (2) 0 <= size() <= capacity(); the entries are kept in a circular buffer
//       of a power-of-two size >= capacity: [bottom_, bottom_ + size_) mod
//       that size, oldest at bottom_, newest at bottom_ + size_ - 1. pop()
//       takes the newest, take_oldest() the oldest.
#pragma once

#include <bit>
#include <cassert>
#include <cstddef>
#include <memory>
#include <span>

namespace tpool::detail {

template <class T>
class LifoStack {
 public:
  LifoStack() = default;

  // Sizes an empty stack; called once, before the owner runs.
  void init(std::size_t capacity) {
    assert(capacity >= 1);
    capacity_ = capacity;
    const std::size_t slots = std::bit_ceil(capacity);
    mask_ = slots - 1;
    buf_ = std::make_unique<T[]>(slots);
    bottom_ = 0;
    size_ = 0;
  }

  std::size_t capacity() const noexcept { return capacity_; }
  std::size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }
  bool full() const noexcept { return size_ == capacity_; }

  // Requires !full().
  void push(T v) noexcept {
    assert(size_ < capacity_);
    buf_[(bottom_ + size_) & mask_] = v;
    ++size_;
  }

  // The newest entry. Requires !empty().
  T pop() noexcept {
    assert(size_ > 0);
    --size_;
    return buf_[(bottom_ + size_) & mask_];
  }

  // Moves up to out.size() of the oldest entries into out, oldest first;
  // returns how many.
  std::size_t take_oldest(std::span<T> out) noexcept {
    const std::size_t n = out.size() < size_ ? out.size() : size_;
    for (std::size_t i = 0; i < n; ++i) out[i] = buf_[(bottom_ + i) & mask_];
    bottom_ = (bottom_ + n) & mask_;
    size_ -= n;
    return n;
  }

  // Forgets every entry (shutdown, after the owner has exited: the entries'
  // descriptors are ended by the shutdown scan, pool inv 2).
  void clear() noexcept { size_ = 0; }

 private:
  std::unique_ptr<T[]> buf_;
  std::size_t capacity_ = 0;
  std::size_t mask_ = 0;
  std::size_t bottom_ = 0;
  std::size_t size_ = 0;
};

}  // namespace tpool::detail
