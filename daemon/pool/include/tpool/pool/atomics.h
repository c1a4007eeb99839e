// The atomics policy the lock-free queues are written against.
//
// Every queue in this folder takes an `Atomics` template parameter and touches
// shared memory only through it, so the very same queue code runs in the pool
// (StdAtomics, plain std::atomic) and under the Relacy model checker
// (tests/model/relacy/relacy_atomics.h maps these calls onto rl::atomic and
// rl::var, which check every interleaving and every weak-memory outcome the
// C++ model allows).
//
// A policy provides:
//   template <class T> using Atomic = ...;   shared word, accessed with orders
//   template <class T> using Cell = ...;     plain (non-atomic) storage a data
//                                             race on which is a bug
//   load/store/cas_weak/cas_strong/fetch_add/exchange on Atomic<T>
//   get/set on Cell<T>
//   fence(order)
#pragma once

#include <atomic>
#include <cassert>
#include <cstddef>

namespace tpool::detail {

// One cache line: the destructive interference size of every x86-64 and of
// most AArch64 parts. std::hardware_destructive_interference_size is not used
// because g++ warns that its value may differ between translation units.
inline constexpr std::size_t kCacheLine = 64;

struct StdAtomics {
  template <class T>
  using Atomic = std::atomic<T>;
  template <class T>
  using Cell = T;

  template <class T>
  static T load(const Atomic<T>& a, std::memory_order mo) noexcept {
    return a.load(mo);
  }
  template <class T>
  static void store(Atomic<T>& a, T v, std::memory_order mo) noexcept {
    a.store(v, mo);
  }
  template <class T>
  static bool cas_strong(Atomic<T>& a, T& expected, T desired, std::memory_order success,
                         std::memory_order failure) noexcept {
    return a.compare_exchange_strong(expected, desired, success, failure);
  }
  template <class T>
  static bool cas_weak(Atomic<T>& a, T& expected, T desired, std::memory_order success,
                       std::memory_order failure) noexcept {
    return a.compare_exchange_weak(expected, desired, success, failure);
  }
  template <class T>
  static T fetch_add(Atomic<T>& a, T v, std::memory_order mo) noexcept {
    return a.fetch_add(v, mo);
  }
  template <class T>
  static T exchange(Atomic<T>& a, T v, std::memory_order mo) noexcept {
    return a.exchange(v, mo);
  }
  template <class T>
  static T get(const Cell<T>& c) noexcept {
    return c;
  }
  template <class T>
  static void set(Cell<T>& c, T v) noexcept {
    c = v;
  }
  static void fence(std::memory_order mo) noexcept { std::atomic_thread_fence(mo); }
};

constexpr bool is_power_of_two(std::size_t n) noexcept {
  return n != 0 && (n & (n - 1)) == 0;
}

// Storage of N cells (N fixed at compile time) or of a run-time count
// (Capacity == 0): tests and models use tiny fixed capacities to reach
// wrap-around; the pool sizes its queues from Config at run time (Config
// rejects a capacity that is not a power of two). The queues take their mask
// from size(), so a fixed-capacity queue never indexes past its array even if
// constructed with a different run-time count.
template <class Elem, std::size_t Capacity>
class Slots {
 public:
  explicit Slots([[maybe_unused]] std::size_t runtime_capacity) noexcept {
    assert(runtime_capacity == Capacity && "a fixed-capacity queue was given another capacity");
  }
  Elem& operator[](std::size_t i) noexcept { return slots_[i]; }
  const Elem& operator[](std::size_t i) const noexcept { return slots_[i]; }
  static constexpr std::size_t size() noexcept { return Capacity; }

 private:
  Elem slots_[Capacity];
};

template <class Elem>
class Slots<Elem, 0> {
 public:
  explicit Slots(std::size_t runtime_capacity)
      : slots_(new Elem[runtime_capacity]), size_(runtime_capacity) {
    assert(is_power_of_two(runtime_capacity) && "queue capacity must be a power of two");
  }
  ~Slots() { delete[] slots_; }
  Slots(const Slots&) = delete;
  Slots& operator=(const Slots&) = delete;
  Elem& operator[](std::size_t i) noexcept { return slots_[i]; }
  const Elem& operator[](std::size_t i) const noexcept { return slots_[i]; }
  std::size_t size() const noexcept { return size_; }

 private:
  Elem* slots_;
  std::size_t size_;
};

}  // namespace tpool::detail
