// RelacyAtomics: atomics.h's policy interface mapped onto Relacy.
//
// The queue headers are written against `Atomics::load(a, std::memory_order)`
// and friends (daemon/pool/include/tpool/pool/atomics.h). This policy routes
// every such call to rl::atomic / rl::var, so Relacy explores thread
// interleavings and every weak-memory outcome the C++ model allows for exactly
// the code the pool runs. Each call takes the caller's std::source_location, so
// a Relacy report names the queue's line, not this file's.
//
// Seeded bugs: a model binary run with --bug=<name> installs one Mutation,
// which weakens or breaks one kind of operation inside one named member
// function of the queue (matched on the function's signature), e.g. "the
// release store in RingQueue::push becomes relaxed". The model must then make
// Relacy report a failure; a check that cannot fail proves nothing.
//
// Relacy's relacy.hpp defines macros for memory_order_*, new, delete, malloc,
// free and assert (for code written in its std-replacement style). This header
// undefines them right after including it, so the queue headers and the
// standard library are compiled unchanged; models use RL_ASSERT explicitly.
#pragma once

// Before relacy.hpp: its macros (errno, the pthread and sem_* names) break
// these standard headers, which sleep_wake.h includes.
#include <condition_variable>
#include <mutex>

#include <relacy/relacy.hpp>

#undef memory_order_relaxed
#undef memory_order_consume
#undef memory_order_acquire
#undef memory_order_release
#undef memory_order_acq_rel
#undef memory_order_seq_cst
#undef new
#undef delete
#undef malloc
#undef calloc
#undef realloc
#undef free
#undef assert
#undef errno

#include <atomic>
#include <cstring>
#include <source_location>
#include <string_view>

namespace tpool::model {

// What a seeded bug does to the operations it matches.
enum class Mutation {
  kNone,
  kStoreRelaxed,  // a release (or seq_cst) store becomes relaxed
  kLoadRelaxed,   // an acquire (or seq_cst) load becomes relaxed
  kSeqCstWeak,    // seq_cst becomes acquire/release (load: acquire, store: release,
                  // fence: acq_rel): the store-buffering bug
  kCasAsStore,    // a CAS becomes "load, compare, store": no longer one atomic step
};

struct SeededBug {
  Mutation mutation = Mutation::kNone;
  // Substring of std::source_location::function_name() of the queue member
  // whose operations are mutated, e.g. "RingQueue<" ... "::pop(".
  const char* in_class = "";
  const char* in_function = "";
};

// Set once by main() before rl::simulate runs and constant afterwards, so every
// simulated execution is deterministic (Relacy replays failing iterations).
inline SeededBug g_bug;

inline bool bug_applies(Mutation m, const std::source_location& loc) noexcept {
  if (g_bug.mutation != m) return false;
  const std::string_view fn = loc.function_name();
  return fn.find(g_bug.in_class) != std::string_view::npos &&
         fn.find(g_bug.in_function) != std::string_view::npos;
}

inline rl::memory_order to_rl(std::memory_order mo) noexcept {
  switch (mo) {
    case std::memory_order_relaxed:
      return rl::mo_relaxed;
    case std::memory_order_consume:
      return rl::mo_consume;
    case std::memory_order_acquire:
      return rl::mo_acquire;
    case std::memory_order_release:
      return rl::mo_release;
    case std::memory_order_acq_rel:
      return rl::mo_acq_rel;
    case std::memory_order_seq_cst:
      return rl::mo_seq_cst;
  }
  return rl::mo_seq_cst;
}

inline rl::debug_info info(const std::source_location& loc) noexcept {
  return rl::debug_info(loc.function_name(), loc.file_name(), loc.line());
}

struct RelacyAtomics {
  template <class T>
  using Atomic = rl::atomic<T>;
  template <class T>
  using Cell = rl::var<T>;

  template <class T>
  static T load(const Atomic<T>& a, std::memory_order mo,
                std::source_location loc = std::source_location::current()) {
    if (bug_applies(Mutation::kLoadRelaxed, loc)) mo = std::memory_order_relaxed;
    if (mo == std::memory_order_seq_cst && bug_applies(Mutation::kSeqCstWeak, loc)) {
      mo = std::memory_order_acquire;
    }
    return a.load(to_rl(mo), info(loc));
  }
  template <class T>
  static void store(Atomic<T>& a, T v, std::memory_order mo,
                    std::source_location loc = std::source_location::current()) {
    if (bug_applies(Mutation::kStoreRelaxed, loc)) mo = std::memory_order_relaxed;
    if (mo == std::memory_order_seq_cst && bug_applies(Mutation::kSeqCstWeak, loc)) {
      mo = std::memory_order_release;
    }
    a.store(v, to_rl(mo), info(loc));
  }
  template <class T>
  static bool cas_strong(Atomic<T>& a, T& expected, T desired, std::memory_order success,
                         std::memory_order failure,
                         std::source_location loc = std::source_location::current()) {
    if (bug_applies(Mutation::kCasAsStore, loc)) return split_cas(a, expected, desired, loc);
    return a.compare_exchange_strong(expected, desired, to_rl(success), info(loc), to_rl(failure),
                                     info(loc));
  }
  template <class T>
  static bool cas_weak(Atomic<T>& a, T& expected, T desired, std::memory_order success,
                       std::memory_order failure,
                       std::source_location loc = std::source_location::current()) {
    if (bug_applies(Mutation::kCasAsStore, loc)) return split_cas(a, expected, desired, loc);
    return a.compare_exchange_weak(expected, desired, to_rl(success), info(loc), to_rl(failure),
                                   info(loc));
  }
  template <class T>
  static T fetch_add(Atomic<T>& a, T v, std::memory_order mo,
                     std::source_location loc = std::source_location::current()) {
    return a.fetch_add(v, to_rl(mo), info(loc));
  }
  template <class T>
  static T exchange(Atomic<T>& a, T v, std::memory_order mo,
                    std::source_location loc = std::source_location::current()) {
    return a.exchange(v, to_rl(mo), info(loc));
  }
  template <class T>
  static T get(const Cell<T>& c, std::source_location loc = std::source_location::current()) {
    return c(info(loc)).load();
  }
  template <class T>
  static void set(Cell<T>& c, T v, std::source_location loc = std::source_location::current()) {
    c(info(loc)).store(v);
  }
  static void fence(std::memory_order mo,
                    std::source_location loc = std::source_location::current()) {
    if (mo == std::memory_order_seq_cst && bug_applies(Mutation::kSeqCstWeak, loc)) {
      mo = std::memory_order_acq_rel;
    }
    rl::atomic_thread_fence(to_rl(mo), info(loc));
  }

 private:
  // The seeded "CAS replaced by a store": the compare and the store are two
  // separate atomic steps, so another thread can slip in between them.
  template <class T>
  static bool split_cas(Atomic<T>& a, T& expected, T desired, const std::source_location& loc) {
    const T seen = a.load(rl::mo_acquire, info(loc));
    if (seen != expected) {
      expected = seen;
      return false;
    }
    a.store(desired, rl::mo_release, info(loc));
    return true;
  }
};

}  // namespace tpool::model

namespace tpool::model {

// The mutex/condition-variable policy (tpool/pool/sync.h) mapped onto Relacy's, so the
// model sees every blocking step (and reports a deadlock when every thread
// waits on a condition variable nobody will notify).
struct RelacySync {
  using Mutex = rl::mutex;
  using CondVar = rl::condition_variable;
  static void lock(Mutex& m, std::source_location loc = std::source_location::current()) {
    m.lock(info(loc));
  }
  static void unlock(Mutex& m, std::source_location loc = std::source_location::current()) {
    m.unlock(info(loc));
  }
  static void wait(CondVar& cv, Mutex& m,
                   std::source_location loc = std::source_location::current()) {
    cv.wait(m, info(loc));
  }
  static void notify_one(CondVar& cv, std::source_location loc = std::source_location::current()) {
    cv.notify_one(info(loc));
  }
  static void notify_all(CondVar& cv, std::source_location loc = std::source_location::current()) {
    cv.notify_all(info(loc));
  }
};

}  // namespace tpool::model
