// Relacy model of the pool's sleep/wake handshake: the real
// tpool/pool/sleep_wake.h (SleepWake::idle, leave, wake_needed, wake_one),
// compiled with RelacyAtomics and RelacySync, over the real queues
// (BoundedRing as the inject ring, RingQueue as each worker's local queue).
//
// Three workers, all started and counted awake, loop as worker_main does:
// look for a task (own local queue, the inject ring, steal one from another
// worker), run it, else spin once (a yield) and run idle(); leave() and
// wake_one() on the way out. An external producer (a gRPC thread: no slot of
// its own, fenced = false) pushes two tasks into the inject ring, each
// followed by wake_needed + wake_one. Task 1 is a nested producer: the worker
// that runs it pushes two children onto its own local queue, each followed by
// wake_needed(fenced = false) + wake_one with the worker's own tick, as
// submit_many does. The worker that finishes the last of the four tasks sets
// `stop` and wakes every parked worker, as shutdown does.
//
// A lost wake-up leaves a task queued with every worker parked: nobody
// finishes the last task, nobody sets `stop`, and Relacy reports a deadlock
// (every thread blocked on a condition variable). after() also checks that
// every task ran exactly once.
//
// Suites: wake_coalesce_batch B = 1 (the default: the "everyone is awake"
// early-out) and B = 2 (coalescing).
//
// Variants (CMakeLists.txt): this file compiled with one
// TPOOL_SLEEP_WAKE_MUTANT_* macro (sleep_wake.h) is a must-fail test: the
// binary then exits 0 only if Relacy reported a failure.
#include <array>
#include <cstdio>
#include <ostream>

#include "model_main.h"
#include "relacy_atomics.h"
#include "tpool/pool/bounded_ring.h"
#include "tpool/pool/ring_queue.h"
#include "tpool/pool/sleep_wake.h"

// Relacy prints every value in its execution history.
namespace tpool::detail {
inline std::ostream& operator<<(std::ostream& os, SleepState s) {
  return os << (s == SleepState::kRunning ? "running" : "sleeping");
}
}  // namespace tpool::detail

namespace {

using tpool::detail::SleepState;
using tpool::model::RelacyAtomics;
using tpool::model::RelacySync;
using SW = tpool::detail::SleepWake<RelacyAtomics, RelacySync>;

constexpr unsigned kWorkers = 3;
constexpr int kTasks = 4;  // 2 external; task 1 spawns 2 children

// The parts of tpool::detail::Worker the protocol touches (sleep_wake.h),
// plus the worker's queues and coalescing tick.
struct ModelWorker {
  rl::atomic<SleepState> sleep{SleepState::kRunning};
  rl::atomic<bool> parked{false};
  rl::mutex park_mu;
  rl::condition_variable park_cv;
  bool drains[1] = {true};
  tpool::detail::RingQueue<int, 4, RelacyAtomics> local;
  std::uint32_t tick = 0;
};

template <std::uint32_t B>
struct WakeModel : rl::test_suite<WakeModel<B>, kWorkers + 1> {
  std::array<ModelWorker, kWorkers> workers;
  tpool::detail::BoundedRing<int, 4, RelacyAtomics> inject;
  rl::atomic<std::int64_t> awake[1] = {kWorkers};  // every worker starts counted in
  rl::atomic<std::uint32_t> wake_hint{0};
  rl::atomic<bool> stop{false};
  rl::atomic<int> done{0};
  std::array<rl::atomic<int>, kTasks + 1> ran{};
  std::uint32_t external_tick = 0;

  void before() {
    for (auto& r : ran) r.store(0, rl::mo_relaxed, $);
  }

  // notify(): w1, w2, then w3. Nobody to start: max_threads workers run.
  void notify(std::uint32_t& tick) {
    if (!SW::wake_needed(awake[0], false, tick, B,
                         [](std::int64_t up) { return up >= std::int64_t{kWorkers}; })) {
      return;
    }
    (void)wake_one();
  }
  bool wake_one() {
    return SW::wake_one(0, kWorkers, wake_hint, awake,
                        [&](std::size_t i) -> ModelWorker& { return workers[i]; });
  }

  // work_visible(): every queue the worker may drain, not a hint.
  bool work_visible() {
    if (inject.size_approx() > 0) return true;
    for (auto& w : workers) {
      if (w.local.size_approx() > 0) return true;
    }
    return false;
  }

  bool next_task(unsigned me, int& t) {
    if (workers[me].local.pop(t)) return true;
    if (inject.pop(t)) return true;
    for (unsigned k = 1; k < kWorkers; ++k) {
      int buf[1];
      if (workers[(me + k) % kWorkers].local.steal_half(std::span<int>(buf, 1), 1) == 1) {
        t = buf[0];
        return true;
      }
    }
    return false;
  }

  void run(unsigned me, int t) {
    RL_ASSERT(t >= 1 && t <= kTasks);
    ran[static_cast<std::size_t>(t)].fetch_add(1, rl::mo_relaxed, $);
    if (t == 1) {  // the nested producer: a task that submits two children
      for (int child = 3; child <= 4; ++child) {
        RL_ASSERT(workers[me].local.push(child));
        notify(workers[me].tick);
      }
    }
    if (done.fetch_add(1, rl::mo_acq_rel, $) + 1 == kTasks) {
      // Shutdown's wake of every worker (shutdown.cc join_all): set stop, then each
      // park mutex, then notify.
      stop.store(true, rl::mo_seq_cst, $);
      for (auto& w : workers) {
        w.park_mu.lock($);
        w.park_mu.unlock($);
        w.park_cv.notify_all($);
      }
    }
  }

  void thread(unsigned id) {
    if (id == kWorkers) {  // the external producer
      for (int t = 1; t <= 2; ++t) {
        RL_ASSERT(inject.try_push(t));
        notify(external_tick);
      }
      return;
    }
    ModelWorker& w = workers[id];
    for (;;) {
      int t = 0;
      if (next_task(id, t)) {
        run(id, t);
        continue;
      }
      rl::yield(1, $);  // worker_main's spin before idle(); see model_main.h
      if (!SW::idle(
              w, awake, [&] { return stop.load(rl::mo_acquire, $); },
              [&] { return work_visible(); }, [] {})) {
        break;
      }
    }
    if (SW::leave(w, awake, [&] { return !stop.load(rl::mo_acquire, $) && work_visible(); })) {
      (void)wake_one();
    }
  }

  void after() {
    for (int t = 1; t <= kTasks; ++t)
      RL_ASSERT(ran[static_cast<std::size_t>(t)].load(rl::mo_relaxed, $) == 1);
  }
};

}  // namespace

int main(int argc, char** argv) {
#if defined(TPOOL_SLEEP_WAKE_MUTANT_NO_C2_FENCE)
  const char* mutant = "no-c2-fence: the worker's seq_cst fence after publishing sleeping deleted";
#elif defined(TPOOL_SLEEP_WAKE_MUTANT_NO_W1_FENCE)
  const char* mutant = "no-w1-fence: the producer's seq_cst fence after its push deleted";
#elif defined(TPOOL_SLEEP_WAKE_MUTANT_RECHECK_FIRST)
  const char* mutant = "recheck-first: the worker re-checks the queues before publishing sleeping";
#else
  const char* mutant = nullptr;
#endif
  if (mutant != nullptr) std::printf("mutant %s\n", mutant);
  const int rc = tpool::model::model_main(argc, argv, std::span<const tpool::model::NamedBug>{},
                                          100000, 0, [](rl::test_params& p) {
                                            // Both suites run even if the first fails, so each
                                            // report is complete.
                                            const bool b1 = rl::simulate<WakeModel<1>>(p);
                                            rl::test_params b2p = p;
                                            b2p.test_result = rl::test_result_success;
                                            const bool b2 = rl::simulate<WakeModel<2>>(b2p);
                                            return b1 && b2;
                                          });
  if (mutant == nullptr) return rc;
  // A mutant passes only if Relacy reported a failure (rc 1 from model_main).
  std::printf(rc == 0 ? "model: Relacy did NOT catch the mutant: the model is too weak\n"
                      : "model: Relacy caught the mutant, as it must\n");
  return rc == 0 ? 1 : 0;
}
