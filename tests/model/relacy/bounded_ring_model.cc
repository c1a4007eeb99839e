// Relacy model of BoundedRing: two producers (try_push) and two consumers
// (pop, pop_many), capacity 4, six items so every slot is reused (the
// sequence numbers go round a second lap).
#include <array>

#include "model_main.h"
#include "relacy_atomics.h"
#include "tpool/pool/bounded_ring.h"

namespace {

using tpool::model::Mutation;
using tpool::model::RelacyAtomics;
using Ring = tpool::detail::BoundedRing<int, 4, RelacyAtomics>;

constexpr int kPerProducer = 3;
constexpr int kItems = 2 * kPerProducer;
constexpr unsigned kThreads = 4;            // 0, 1 produce; 2 pops, 3 pops many
constexpr std::size_t kDrainer = kThreads;  // after(): what nobody took

struct BoundedRingModel : rl::test_suite<BoundedRingModel, kThreads> {
  Ring ring;
  std::array<std::array<int, kItems>, kThreads + 1> got{};
  std::array<int, kThreads + 1> count{};

  void record(std::size_t who, int v) {
    RL_ASSERT(v >= 1 && v <= kItems);
    RL_ASSERT(count[who] < kItems);
    got[who][static_cast<std::size_t>(count[who]++)] = v;
  }

  void thread(unsigned id) {
    if (id < 2) {
      for (int i = 0; i < kPerProducer; ++i) {
        const int v = 1 + static_cast<int>(id) * kPerProducer + i;
        // Full: make room ourselves, so the model never waits on a consumer.
        int taken = 0;
        while (!ring.try_push(v)) {
          if (ring.pop(taken)) {
            record(id, taken);
          } else {
            rl::yield(1, $);  // a spin: see model_main.h
          }
        }
      }
    } else if (id == 2) {
      for (int round = 0; round < 3; ++round) {
        int v = 0;
        if (ring.pop(v)) record(id, v);
      }
    } else {
      for (int round = 0; round < 2; ++round) {
        std::array<int, 3> buf{};
        const std::size_t n = ring.pop_many(buf);
        for (std::size_t i = 0; i < n; ++i) record(id, buf[i]);
      }
    }
  }

  void after() {
    // Every producer has finished: whatever is left is published.
    int v = 0;
    while (ring.pop(v)) record(kDrainer, v);
    std::array<int, kItems + 1> seen{};
    for (std::size_t t = 0; t <= kThreads; ++t) {
      for (int i = 0; i < count[t]; ++i)
        ++seen[static_cast<std::size_t>(got[t][static_cast<std::size_t>(i)])];
    }
    for (std::size_t x = 1; x <= kItems; ++x) RL_ASSERT(seen[x] == 1);
  }
};

constexpr tpool::model::NamedBug kBugs[] = {
    {"push-seq-relaxed",
     "BoundedRing::try_push publishes seq with a relaxed store: a consumer reads an unwritten "
     "value",
     {Mutation::kStoreRelaxed, "BoundedRing<", "::try_push("}},
    {"pop-many-seq-relaxed",
     "BoundedRing::pop_many frees slots with a relaxed store: the next lap's producer overwrites "
     "a value the consumer is still reading",
     {Mutation::kStoreRelaxed, "BoundedRing<", "::pop_many("}},
    {"pop-seq-load-relaxed",
     "BoundedRing::pop reads seq with a relaxed load: it may read the value before it is written",
     {Mutation::kLoadRelaxed, "BoundedRing<", "::pop("}},
    {"push-cas-as-store",
     "BoundedRing::try_push claims tail with load+store: two producers claim one position",
     {Mutation::kCasAsStore, "BoundedRing<", "::try_push("}},
    {"pop-many-cas-as-store",
     "BoundedRing::pop_many claims head with load+store: two consumers take one batch",
     {Mutation::kCasAsStore, "BoundedRing<", "::pop_many("}},
};

}  // namespace

int main(int argc, char** argv) {
  return tpool::model::model_main(argc, argv, kBugs, 1000000, 0, [](rl::test_params& p) {
    return rl::simulate<BoundedRingModel>(p);
  });
}
