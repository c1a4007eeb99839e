// Shared helpers of the pool's tests: the variant grid, events with bounded
// waits (a hang fails the test with a message instead of hitting the ctest
// timeout), tasks made from lambdas, and a clock the test advances.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tpool/pool.h"

namespace tpool::test {

using namespace std::chrono_literals;

// How long any bounded wait of a test may take before it counts as a hang:
// TPOOL_TEST_HANG_SECONDS (a positive whole number), else 20 s. Every wait in
// the pool's tests is bounded by it (or by a shorter bound of its own), so a
// hang fails the test with a message naming what was waited for instead of
// reaching the ctest timeout.
inline std::chrono::nanoseconds hang_bound() {
  const char* s = std::getenv("TPOOL_TEST_HANG_SECONDS");
  if (s == nullptr || *s == '\0') return std::chrono::seconds(20);
  char* end = nullptr;
  const long v = std::strtol(s, &end, 10);
  if (end == s || *end != '\0' || v <= 0) {
    std::fprintf(stderr,
                 "TPOOL_TEST_HANG_SECONDS='%s' is not a positive whole number of seconds; "
                 "using 20 (e.g. TPOOL_TEST_HANG_SECONDS=60)\n",
                 s);
    return std::chrono::seconds(20);
  }
  return std::chrono::seconds(v);
}
inline const std::chrono::nanoseconds kBound = hang_bound();

// Task counts are divided by this under ThreadSanitizer (every test also runs
// there, where each task costs tens of times more).
#if defined(__SANITIZE_THREAD__)
inline constexpr std::size_t kTsanDiv = 8;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
inline constexpr std::size_t kTsanDiv = 8;
#else
inline constexpr std::size_t kTsanDiv = 1;
#endif
#else
inline constexpr std::size_t kTsanDiv = 1;
#endif

// A count-down event: wait_for() returns false after the bound instead of
// hanging. open() releases every waiter at once (a gate).
class Event {
 public:
  explicit Event(std::int64_t n = 1) : n_(n) {}
  void count_down(std::int64_t k = 1) {
    std::lock_guard lk(mu_);
    n_ -= k;
    if (n_ <= 0) cv_.notify_all();
  }
  void open() { count_down(INT32_MAX); }
  // Close again with a new count (between phases of one test).
  void reset(std::int64_t n = 1) {
    std::lock_guard lk(mu_);
    n_ = n;
  }
  bool wait_for(std::chrono::nanoseconds t = kBound) {
    std::unique_lock lk(mu_);
    return cv_.wait_for(lk, t, [&] { return n_ <= 0; });
  }
  // For tasks held by a gate: the fixture opens every gate before it
  // destroys the pool. Bounded like every wait: a gate left closed fails the
  // test (from the worker's thread) and lets the task end, instead of
  // hanging the pool's shutdown.
  void wait() {
    if (!wait_for(kBound)) {
      ADD_FAILURE() << "a task held on a gate waited "
                    << std::chrono::duration_cast<std::chrono::seconds>(kBound).count()
                    << " s (TPOOL_TEST_HANG_SECONDS) and the test never opened it";
    }
  }
  bool is_open() const {
    std::lock_guard lk(mu_);
    return n_ <= 0;
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::int64_t n_;
};

// A monotone counter with a bounded wait for a value.
class Counter {
 public:
  void add(std::int64_t k = 1) {
    std::lock_guard lk(mu_);
    n_ += k;
    cv_.notify_all();
  }
  bool wait_at_least(std::int64_t n, std::chrono::nanoseconds t = kBound) {
    std::unique_lock lk(mu_);
    return cv_.wait_for(lk, t, [&] { return n_ >= n; });
  }
  std::int64_t value() const {
    std::lock_guard lk(mu_);
    return n_;
  }
  void reset() {
    std::lock_guard lk(mu_);
    n_ = 0;
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::int64_t n_ = 0;
};

// A task from any callable; the callable must outlive the task.
template <class F>
Task task_of(F& f) {
  return Task{[](void* c) { (*static_cast<F*>(c))(); }, &f};
}

// Per-task exactly-once accounting: ran[i] and cancelled[i] of task i.
struct Ledger {
  explicit Ledger(std::size_t n) : ran(n), cancelled(n) {}
  std::vector<std::atomic<int>> ran;
  std::vector<std::atomic<int>> cancelled;
  // Each item is this ledger plus its index: the task's ctx.
  struct Item {
    Ledger* ledger;
    std::size_t i;
  };
  std::vector<Item> items() {
    std::vector<Item> v;
    for (std::size_t i = 0; i < ran.size(); ++i) v.push_back({this, i});
    return v;
  }
  static void run(void* c) {
    auto* it = static_cast<Item*>(c);
    it->ledger->ran[it->i].fetch_add(1, std::memory_order_relaxed);
  }
  static void cancel(void* c) {
    auto* it = static_cast<Item*>(c);
    it->ledger->cancelled[it->i].fetch_add(1, std::memory_order_relaxed);
  }
  // Every task ended exactly once (ran xor cancelled); "" or the first fault.
  std::string exactly_once() const {
    for (std::size_t i = 0; i < ran.size(); ++i) {
      const int r = ran[i].load();
      const int c = cancelled[i].load();
      if (r + c != 1) {
        return "task " + std::to_string(i) + " ran " + std::to_string(r) +
               " times and was cancelled " + std::to_string(c) + " times";
      }
    }
    return "";
  }
  std::size_t total_ran() const {
    std::size_t n = 0;
    for (const auto& r : ran) n += static_cast<std::size_t>(r.load());
    return n;
  }
  std::size_t total_cancelled() const {
    std::size_t n = 0;
    for (const auto& c : cancelled) n += static_cast<std::size_t>(c.load());
    return n;
  }
};

// The watchdog's time source in tests: now() moves only when advance() is called.
class TestClock final : public Clock {
 public:
  std::chrono::nanoseconds now() const noexcept override {
    return std::chrono::nanoseconds(ns_.load(std::memory_order_acquire));
  }
  void advance(std::chrono::nanoseconds d) { ns_.fetch_add(d.count(), std::memory_order_acq_rel); }

 private:
  // Start far from zero: the pool uses 0 as "no task running".
  std::atomic<std::int64_t> ns_{std::chrono::nanoseconds(std::chrono::hours(1)).count()};
};

// Poll a condition until it holds or the bound passes (for state the pool
// exposes only through stats(), e.g. "every worker parked").
inline bool eventually(const std::function<bool()>& cond, std::chrono::nanoseconds bound = kBound) {
  const auto deadline = std::chrono::steady_clock::now() + bound;
  while (!cond()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::yield();
  }
  return true;
}

// A fixture's tear-down: drain the pool with a bounded shutdown (the
// destructor would wait for ever), then destroy it. A pool that does not drain
// within kBound fails the test here, naming the tear-down, before the
// destructor is left to finish the drain.
inline void destroy_pool_bounded(std::unique_ptr<Pool>& pool) {
  if (pool == nullptr) return;
  const Status s = pool->shutdown(ShutdownMode::kDrain, kBound);
  EXPECT_TRUE(s.ok()) << "tear-down: the pool did not drain within the hang bound: "
                      << s.to_string();
  pool.reset();
}

// One point of the variant grid.
struct Variant {
  SchedulerVariant scheduler;
  QueueKind queue;
  std::size_t workers;
};

inline std::string variant_name(const Variant& v) {
  return std::string(to_string(v.scheduler)) + "_" + std::string(to_string(v.queue)) + "_" +
         std::to_string(v.workers) + "w";
}

inline std::vector<Variant> all_variants() {
  std::vector<Variant> out;
  for (SchedulerVariant s : {SchedulerVariant::kGlobalQueue, SchedulerVariant::kWorkStealing,
                             SchedulerVariant::kLaneExtension}) {
    for (QueueKind q : {QueueKind::kRing, QueueKind::kChaseLev}) {
      for (std::size_t w : {1, 2, 4, 8}) out.push_back({s, q, w});
    }
  }
  return out;
}

// The config of a grid point: every worker started up front; lane_extension
// gives one worker to the blocking lane when there is more than one.
inline Config config_for(const Variant& v) {
  Config c;
  c.scheduler_variant = v.scheduler;
  c.queue_kind = v.queue;
  c.max_threads = v.workers;
  c.min_threads = v.workers;
  c.blocking_workers = (v.scheduler == SchedulerVariant::kLaneExtension && v.workers > 1) ? 1 : 0;
  c.name = "t";
  return c;
}

// True when validate() refused the config only because this build pins
// another scheduler variant (TPOOL_SCHEDULER_VARIANT): such tests skip.
inline bool pinned_elsewhere(const Status& s) {
  return !s.ok() && s.message().find("TPOOL_SCHEDULER_VARIANT") != std::string::npos;
}

}  // namespace tpool::test

// Create `pool` (a std::unique_ptr<Pool>) from `cfg`, or skip the test when
// this build pins another scheduler variant.
#define TPOOL_CREATE_OR_SKIP(pool, cfg)                                                \
  do {                                                                                 \
    const ::tpool::Status tpool_v_ = (cfg).validate();                                 \
    if (::tpool::test::pinned_elsewhere(tpool_v_)) GTEST_SKIP() << tpool_v_.message(); \
    auto tpool_r_ = ::tpool::Pool::create(cfg);                                        \
    ASSERT_TRUE(tpool_r_.ok()) << tpool_r_.status().to_string();                       \
    (pool) = std::move(tpool_r_.value());                                              \
  } while (0)
