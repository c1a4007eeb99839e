// Relacy model of the pool's event count: the real tpool/pool/event_count.h
// (BasicEventCount::prepare_wait, cancel_wait, commit_wait, notify_all),
// compiled with RelacyAtomics and RelacySync, so every interleaving and every
// weak-memory outcome the C++ model allows is open to it (Spin's
// event_count.pml checks the protocol as the pool uses it, but only under
// sequential consistency: this checks the orderings as written).
//
// Each waiter waits for its condition with the protocol of the header:
//   while (!C) { key = prepare_wait(); if (C) { cancel_wait(); break; }
//                commit_wait(key); }
// and each notifier makes a condition true with a relaxed store (the pool's
// stores range from relaxed to release; the fences must carry the argument
// alone, event_count.h inv 3), then calls notify_all. A lost wake-up leaves a
// waiter blocked on the condition variable after every notifier has ended:
// Relacy reports a deadlock.
//
// Suites:
//   OneShot   one waiter, one notifier: the store-buffering pair of inv 3
//   TwoRounds one waiter waits twice (for 1, then for 2) and one notifier
//             stores 1, notifies, stores 2, notifies: the `notified` bit of
//             inv 4 (a waiter that registers again needs a new notify)
//   Shared    two waiters, each for its own flag, and two notifiers on one
//             event count (as every wait() shares done_ec)
//
// Variants (CMakeLists.txt): this file compiled with one
// TPOOL_EVENT_COUNT_MUTANT_* macro (event_count.h) is a must-fail test: the
// binary then exits 0 only if Relacy reported a failure.
#include <cstdio>

#include "model_main.h"
#include "relacy_atomics.h"
#include "tpool/pool/event_count.h"

namespace {

using tpool::model::RelacyAtomics;
using tpool::model::RelacySync;
using EC = tpool::detail::BasicEventCount<RelacyAtomics, RelacySync>;

// The waiter's side of the protocol, for "flag >= want".
void await(EC& ec, rl::atomic<int>& flag, int want) {
  // Relaxed loads: ordered after the registration by prepare_wait's fence.
  while (flag.load(rl::mo_relaxed, $) < want) {
    const EC::Key key = ec.prepare_wait();
    if (flag.load(rl::mo_relaxed, $) >= want) {
      ec.cancel_wait();
      break;
    }
    ec.commit_wait(key);
  }
}

struct OneShot : rl::test_suite<OneShot, 2> {
  EC ec;
  rl::atomic<int> flag;
  void before() { flag.store(0, rl::mo_relaxed, $); }
  void thread(unsigned id) {
    if (id == 0) {
      await(ec, flag, 1);
    } else {
      flag.store(1, rl::mo_relaxed, $);
      ec.notify_all();
    }
  }
};

struct TwoRounds : rl::test_suite<TwoRounds, 2> {
  EC ec;
  rl::atomic<int> flag;
  void before() { flag.store(0, rl::mo_relaxed, $); }
  void thread(unsigned id) {
    if (id == 0) {
      await(ec, flag, 1);
      await(ec, flag, 2);
    } else {
      flag.store(1, rl::mo_relaxed, $);
      ec.notify_all();
      flag.store(2, rl::mo_relaxed, $);
      ec.notify_all();
    }
  }
};

struct Shared : rl::test_suite<Shared, 4> {
  EC ec;
  rl::atomic<int> flag[2];
  void before() {
    flag[0].store(0, rl::mo_relaxed, $);
    flag[1].store(0, rl::mo_relaxed, $);
  }
  void thread(unsigned id) {
    if (id < 2) {
      await(ec, flag[id], 1);
    } else {
      flag[id - 2].store(1, rl::mo_relaxed, $);
      ec.notify_all();
    }
  }
};

}  // namespace

int main(int argc, char** argv) {
#if defined(TPOOL_EVENT_COUNT_MUTANT_NO_NOTIFY_FENCE)
  const char* mutant = "no-notify-fence: notify_all's seq_cst fence before its load deleted";
#elif defined(TPOOL_EVENT_COUNT_MUTANT_NO_PREPARE_FENCE)
  const char* mutant = "no-prepare-fence: prepare_wait's seq_cst fence after its CAS deleted";
#elif defined(TPOOL_EVENT_COUNT_MUTANT_KEEPS_NOTIFIED)
  const char* mutant = "keeps-notified: prepare_wait leaves the notified bit set";
#else
  const char* mutant = nullptr;
#endif
  if (mutant != nullptr) std::printf("mutant %s\n", mutant);
  const int rc = tpool::model::model_main(argc, argv, std::span<const tpool::model::NamedBug>{},
                                          50000, 2, [](rl::test_params& p) {
                                            // Every suite runs even if one fails, so each report is
                                            // complete.
                                            rl::test_params p2 = p, p3 = p;
                                            const bool a = rl::simulate<OneShot>(p);
                                            const bool b = rl::simulate<TwoRounds>(p2);
                                            const bool c = rl::simulate<Shared>(p3);
                                            return a && b && c;
                                          });
  if (mutant == nullptr) return rc;
  // A mutant passes only if Relacy reported a failure (rc 1 from model_main).
  std::printf(rc == 0 ? "model: Relacy did NOT catch the mutant: the model is too weak\n"
                      : "model: Relacy caught the mutant, as it must\n");
  return rc == 0 ? 1 : 0;
}
