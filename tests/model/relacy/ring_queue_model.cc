// Relacy model of RingQueue: one owner (push_many, push, pop) and two
// stealers (steal_half), capacity 4, six items so the ring wraps around.
#include <array>

#include "model_main.h"
#include "relacy_atomics.h"
#include "tpool/pool/ring_queue.h"

namespace {

using tpool::model::Mutation;
using tpool::model::RelacyAtomics;
using Queue = tpool::detail::RingQueue<int, 4, RelacyAtomics>;

constexpr int kItems = 6;
constexpr unsigned kThreads = 3;

struct RingQueueModel : rl::test_suite<RingQueueModel, kThreads> {
  Queue q;
  std::array<std::array<int, kItems>, kThreads> got{};
  std::array<int, kThreads> count{};

  void record(unsigned who, int v) {
    RL_ASSERT(v >= 1 && v <= kItems);
    RL_ASSERT(count[who] < kItems);
    got[who][static_cast<std::size_t>(count[who]++)] = v;
  }

  void thread(unsigned id) {
    if (id == 0) {
      // The owner publishes items 1..3 with one push_many, then interleaves:
      // push one, pop every second; pop when full.
      const std::array<int, 3> first{1, 2, 3};
      int v = 0;
      for (std::size_t done = 0; done < first.size();) {
        done += q.push_many(std::span<const int>(first).subspan(done));
        if (done < first.size()) {
          if (q.pop(v)) {
            record(0, v);
          } else {
            rl::yield(1, $);  // a spin: see model_main.h
          }
        }
      }
      for (int i = 4; i <= kItems; ++i) {
        while (!q.push(i)) {
          if (q.pop(v)) {
            record(0, v);
          } else {
            rl::yield(1, $);  // a spin: see model_main.h
          }
        }
        if (i % 2 == 0 && q.pop(v)) record(0, v);
      }
      while (q.pop(v)) record(0, v);
    } else {
      for (int round = 0; round < 2; ++round) {
        std::array<int, 4> buf{};
        const std::size_t n = q.steal_half(buf, id == 1 ? 4 : 1);
        for (std::size_t i = 0; i < n; ++i) record(id, buf[i]);
      }
    }
  }

  void after() {
    std::array<int, kItems + 1> seen{};
    for (unsigned t = 0; t < kThreads; ++t) {
      for (int i = 0; i < count[t]; ++i)
        ++seen[static_cast<std::size_t>(got[t][static_cast<std::size_t>(i)])];
    }
    for (int v = 1; v <= kItems; ++v) RL_ASSERT(seen[static_cast<std::size_t>(v)] == 1);
    RL_ASSERT(q.size_approx() == 0);
  }
};

constexpr tpool::model::NamedBug kBugs[] = {
    {"push-release-relaxed",
     "RingQueue::push publishes tail with a relaxed store: stealers may copy slots not yet written",
     {Mutation::kStoreRelaxed, "RingQueue<", "::push("}},
    {"push-many-release-relaxed",
     "RingQueue::push_many publishes tail with a relaxed store",
     {Mutation::kStoreRelaxed, "RingQueue<", "::push_many("}},
    {"pop-cas-as-store",
     "RingQueue::pop claims head with load+store instead of one CAS: a stealer's claim is lost",
     {Mutation::kCasAsStore, "RingQueue<", "::pop("}},
    {"steal-cas-as-store",
     "RingQueue::steal_half claims head with load+store instead of one CAS",
     {Mutation::kCasAsStore, "RingQueue<", "::steal_half("}},
};

}  // namespace

int main(int argc, char** argv) {
  return tpool::model::model_main(argc, argv, kBugs, 1000000, 2, [](rl::test_params& p) {
    return rl::simulate<RingQueueModel>(p);
  });
}
