// The seed's pool scenarios (shared/seeds/pool-algorithms.txt), written once
// and run against every pool through a runner (tpool_runner.h, peer_runners.h).
//
// A runner R offers, each through its pool's best public API:
//   void begin(std::int64_t tasks)  before a scenario: how many tasks will end
//   void submit(Task)               one task from a thread outside the pool
//   void submit_batch(span<Task>)   many tasks from outside (a loop if the API has no batch)
//   void submit_nested(Task)        one task from inside a running task
//   void submit_slow(Task)          a slow task of mixed_fast_slow (tpool: maybe the blocking lane)
//   auto enter_submitter(int i)     RAII token held by external submitter thread i
//   void wait()                     until every task since begin() has ended
// Times are wall-clock nanoseconds from the first submit to the end of wait().
#pragma once

#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cstdint>
#include <latch>
#include <span>
#include <thread>
#include <vector>

#include "tpool/pool.h"

namespace bench {

using tpool::Task;
using Clock = std::chrono::steady_clock;

inline std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

// ---- busy work ---------------------------------------------------------------
// A fixed amount of arithmetic, calibrated once to take 1 us on an idle core, so
// a preempted task does not count its preemption as work (a clock-based spin
// would) and "100 us of work" is the same work for every pool.
inline std::uint64_t spin(std::uint64_t units) {
  std::uint64_t x = units | 1;
  for (std::uint64_t i = 0; i < units; ++i) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    asm volatile("" : "+r"(x));
  }
  return x;
}

inline std::uint64_t g_units_per_us = 0;

// The fastest of many short trials: on a loaded machine preemption only ever
// makes a trial slower, so the minimum is the idle-core speed.
inline void calibrate_spin() {
  constexpr std::uint64_t kTrialUnits = 200'000;
  std::int64_t best = INT64_MAX;
  for (int i = 0; i < 40; ++i) {
    const std::int64_t t0 = now_ns();
    spin(kTrialUnits);
    best = std::min(best, now_ns() - t0);
  }
  g_units_per_us =
      std::max<std::uint64_t>(1, kTrialUnits * 1000 / static_cast<std::uint64_t>(best));
}

inline void busy_us(std::uint64_t us) {
  spin(us * g_units_per_us);
}

// ---- results -----------------------------------------------------------------
struct Sample {
  double ns_per_task = 0;  // wall time / tasks
  double overhead = 0;     // cpu_work_100us: wall / ideal - 1
  double p50_ns = 0;       // mixed_fast_slow: fast tasks, submit to start
  double p99_ns = 0;
  // tpool rows only (Pool::stats() at the end of the run, per task): parks
  // and wake-ups that found no work (the searching gate's measure).
  double parks_per_ktask = 0;
  double no_work_wakeups_per_ktask = 0;
};

inline double percentile(std::vector<std::int64_t>& v, double q) {
  if (v.empty()) return 0;
  const auto k = static_cast<std::size_t>(q * static_cast<double>(v.size() - 1));
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
  return static_cast<double>(v[k]);
}

// ---- scenarios -----------------------------------------------------------------
inline void noop(void*) {}

inline constexpr std::int64_t kFloodTasks = 1'000'000;
inline constexpr std::size_t kFloodBatch = 256;
inline constexpr int kFanout = 4;
inline constexpr int kFanoutDepth = 9;                 // depths 0..9
inline constexpr std::int64_t kFanoutTasks = 349'525;  // (4^10 - 1) / 3
inline constexpr int kContendedThreads = 8;
inline constexpr std::int64_t kContendedPerThread = 125'000;
inline constexpr std::int64_t kCpuTasks = 4'000;
inline constexpr std::uint64_t kCpuTaskUs = 100;
inline constexpr int kMixedRounds = 100;  // each: 100 fast (1 us) + 1 slow (1 ms)
inline constexpr int kMixedFastPerRound = 100;

// One external thread submits 1M no-op tasks in batches of 256.
template <class R>
Sample flood_1m_batched(R& r) {
  std::vector<Task> batch(kFloodBatch, Task{&noop, nullptr});
  r.begin(kFloodTasks);
  const std::int64_t t0 = now_ns();
  for (std::int64_t left = kFloodTasks; left > 0;) {
    const auto n = static_cast<std::size_t>(std::min<std::int64_t>(left, kFloodBatch));
    r.submit_batch(std::span<const Task>(batch.data(), n));
    left -= static_cast<std::int64_t>(n);
  }
  r.wait();
  return {static_cast<double>(now_ns() - t0) / kFloodTasks};
}

// Every task spawns 4 children down to depth 9; the depth rides in ctx.
template <class R>
struct Fanout {
  static inline R* runner = nullptr;
  static void task(void* ctx) {
    const auto depth = reinterpret_cast<std::uintptr_t>(ctx);
    if (depth == kFanoutDepth) return;
    for (int i = 0; i < kFanout; ++i) {
      runner->submit_nested(Task{&task, reinterpret_cast<void*>(depth + 1)});
    }
  }
};

template <class R>
Sample nested_fanout_4x(R& r) {
  Fanout<R>::runner = &r;
  r.begin(kFanoutTasks);
  const std::int64_t t0 = now_ns();
  r.submit(Task{&Fanout<R>::task, nullptr});
  r.wait();
  return {static_cast<double>(now_ns() - t0) / kFanoutTasks};
}

// 8 external threads x 125k no-op tasks, one submit each. The threads are
// started before the clock and released together; they stay alive until the
// pool has run everything (a TBB external thread's deque lives in its slot).
// plain: tpool's threads do not register a submitter slot (each submit goes
// to the inject ring, as a gRPC thread's does in tpoold).
template <class R>
Sample contended_spawn_8x(R& r, bool plain = false) {
  constexpr std::int64_t kTotal = kContendedThreads * kContendedPerThread;
  r.begin(kTotal);
  std::barrier start(kContendedThreads + 1);
  std::latch submitted(kContendedThreads);  // wait() only once every task is in:
  std::latch finished(1);                   // a group may be empty for a moment before
  std::vector<std::thread> threads;
  for (int i = 0; i < kContendedThreads; ++i) {
    threads.emplace_back([&, i] {
      [[maybe_unused]] auto token = r.enter_submitter(i, plain);
      start.arrive_and_wait();
      for (std::int64_t k = 0; k < kContendedPerThread; ++k) r.submit(Task{&noop, nullptr});
      submitted.count_down();
      finished.wait();
    });
  }
  start.arrive_and_wait();
  const std::int64_t t0 = now_ns();
  submitted.wait();
  r.wait();
  const std::int64_t t1 = now_ns();
  finished.count_down();
  for (auto& t : threads) t.join();
  return {static_cast<double>(t1 - t0) / kTotal};
}

inline void work_100us(void*) {
  busy_us(kCpuTaskUs);
}

// 4,000 tasks of 100 us; overhead over the ideal 4000 * 100 us / workers.
template <class R>
Sample cpu_work_100us(R& r, int workers) {
  std::vector<Task> tasks(kCpuTasks, Task{&work_100us, nullptr});
  r.begin(kCpuTasks);
  const std::int64_t t0 = now_ns();
  for (std::size_t i = 0; i < tasks.size(); i += kFloodBatch) {
    r.submit_batch(
        std::span<const Task>(tasks).subspan(i, std::min(kFloodBatch, tasks.size() - i)));
  }
  r.wait();
  const auto wall = static_cast<double>(now_ns() - t0);
  const double ideal = static_cast<double>(kCpuTasks * kCpuTaskUs * 1000) / workers;
  return {wall / kCpuTasks, wall / ideal - 1.0};
}

struct Stamp {
  std::int64_t submitted = 0;
  std::int64_t started = 0;
};
inline void fast_task(void* ctx) {
  static_cast<Stamp*>(ctx)->started = now_ns();
  busy_us(1);
}
inline void slow_task(void*) {
  busy_us(1000);
}

// 1 us and 1 ms tasks mixed 100:1, submitted one at a time from one external
// thread. paced = false: all at once (throughput). paced = true: one round of
// 101 tasks every 1.1 ms, half the 2 workers' capacity, so latency is the
// pool's and not a queue of the whole burst (fast-task p50/p99).
template <class R>
Sample mixed_fast_slow(R& r, bool paced) {
  constexpr std::int64_t kFast = kMixedRounds * kMixedFastPerRound;
  constexpr std::int64_t kTotal = kFast + kMixedRounds;
  std::vector<Stamp> stamps(static_cast<std::size_t>(kFast));
  r.begin(kTotal);
  const std::int64_t t0 = now_ns();
  std::size_t f = 0;
  for (int round = 0; round < kMixedRounds; ++round) {
    if (paced)
      std::this_thread::sleep_until(
          Clock::time_point(std::chrono::nanoseconds(t0 + round * 1'100'000)));
    r.submit_slow(Task{&slow_task, nullptr});
    for (int k = 0; k < kMixedFastPerRound; ++k, ++f) {
      stamps[f].submitted = now_ns();
      r.submit(Task{&fast_task, &stamps[f]});
    }
  }
  r.wait();
  const std::int64_t wall = now_ns() - t0;
  std::vector<std::int64_t> lat;
  lat.reserve(stamps.size());
  for (const Stamp& s : stamps) lat.push_back(s.started - s.submitted);
  Sample out{static_cast<double>(wall) / kTotal};
  out.p50_ns = percentile(lat, 0.50);
  out.p99_ns = percentile(lat, 0.99);
  return out;
}

}  // namespace bench
