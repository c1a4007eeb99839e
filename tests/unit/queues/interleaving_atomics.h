// InterleavingAtomics: StdAtomics with an interleaving point before every
// shared-memory operation, for deterministic replays of races.
//
// A replay runs on ONE thread. It arms a script, then calls the operation
// under test (say a stealer's steal_half); when that operation reaches the
// scripted point (e.g. its first CAS: the stealer has copied its batch and is
// about to claim it), the script runs the other party's operations (the
// owner's pops and pushes) right there, then lets the paused operation go on.
// So an interleaving is written down step by step and replays the same way on
// every run, with no threads and no timing.
//
// Only for single-threaded tests: the script state is a plain global.
#pragma once

#include <atomic>
#include <functional>

namespace tpool::test {

enum class Op { kLoad, kStore, kCas, kFetchAdd, kExchange, kFence, kGet, kSet };

class Interleaving {
 public:
  // When the armed operation performs its `nth` (1-based) operation of kind
  // `op`, run `other` (with the script disarmed, so `other`'s own operations
  // pass straight through), then continue. Fires at most once.
  static void at(Op op, int nth, std::function<void()> other) {
    state() = {op, nth, 0, std::move(other)};
  }
  static bool fired() { return state().done; }
  static void disarm() { state() = {}; }

  static void point(Op op) {
    State& s = state();
    if (!s.other || s.running || op != s.op || ++s.seen != s.nth) return;
    s.running = true;
    s.other();
    s.running = false;
    s.other = nullptr;
    s.done = true;
  }

 private:
  struct State {
    Op op = Op::kLoad;
    int nth = 0;
    int seen = 0;
    std::function<void()> other;
    bool running = false;
    bool done = false;
  };
  static State& state() {
    static State s;
    return s;
  }
};

struct InterleavingAtomics {
  template <class T>
  using Atomic = std::atomic<T>;
  template <class T>
  using Cell = T;

  template <class T>
  static T load(const Atomic<T>& a, std::memory_order mo) noexcept {
    Interleaving::point(Op::kLoad);
    return a.load(mo);
  }
  template <class T>
  static void store(Atomic<T>& a, T v, std::memory_order mo) noexcept {
    Interleaving::point(Op::kStore);
    a.store(v, mo);
  }
  template <class T>
  static bool cas_strong(Atomic<T>& a, T& expected, T desired, std::memory_order success,
                         std::memory_order failure) noexcept {
    Interleaving::point(Op::kCas);
    return a.compare_exchange_strong(expected, desired, success, failure);
  }
  template <class T>
  static bool cas_weak(Atomic<T>& a, T& expected, T desired, std::memory_order success,
                       std::memory_order failure) noexcept {
    Interleaving::point(Op::kCas);
    // Strong even here: a spurious failure would make the replay depend on
    // the hardware.
    return a.compare_exchange_strong(expected, desired, success, failure);
  }
  template <class T>
  static T fetch_add(Atomic<T>& a, T v, std::memory_order mo) noexcept {
    Interleaving::point(Op::kFetchAdd);
    return a.fetch_add(v, mo);
  }
  template <class T>
  static T exchange(Atomic<T>& a, T v, std::memory_order mo) noexcept {
    Interleaving::point(Op::kExchange);
    return a.exchange(v, mo);
  }
  template <class T>
  static T get(const Cell<T>& c) noexcept {
    Interleaving::point(Op::kGet);
    return c;
  }
  template <class T>
  static void set(Cell<T>& c, T v) noexcept {
    Interleaving::point(Op::kSet);
    c = v;
  }
  static void fence(std::memory_order mo) noexcept {
    Interleaving::point(Op::kFence);
    std::atomic_thread_fence(mo);
  }
};

}  // namespace tpool::test
