// Relacy model of WorkDeque (Chase-Lev): two suites.
//   LastItemModel: the owner pushes one item and pops it while a stealer
//     steals: the store-buffering race on the last item (inv 3, 4).
//   WrapModel: the owner pushes six items into capacity 4 (interleaving
//     pop_bottom) while two stealers steal_top: index wrap-around.
#include <array>

#include "model_main.h"
#include "relacy_atomics.h"
#include "tpool/pool/work_deque.h"

namespace {

using tpool::model::Mutation;
using tpool::model::RelacyAtomics;
using Deque = tpool::detail::WorkDeque<int, 4, RelacyAtomics>;

template <unsigned Threads, int Items>
struct Tally {
  std::array<std::array<int, Items>, Threads> got{};
  std::array<int, Threads> count{};

  void record(unsigned who, int v) {
    RL_ASSERT(v >= 1 && v <= Items);
    RL_ASSERT(count[who] < Items);
    got[who][static_cast<std::size_t>(count[who]++)] = v;
  }
  void check_each_once() {
    std::array<int, Items + 1> seen{};
    for (unsigned t = 0; t < Threads; ++t) {
      for (int i = 0; i < count[t]; ++i)
        ++seen[static_cast<std::size_t>(got[t][static_cast<std::size_t>(i)])];
    }
    for (std::size_t x = 1; x <= Items; ++x) RL_ASSERT(seen[x] == 1);
  }
};

struct LastItemModel : rl::test_suite<LastItemModel, 2> {
  Deque dq;
  Tally<2, 2> tally;

  void thread(unsigned id) {
    int v = 0;
    if (id == 0) {
      RL_ASSERT(dq.push_bottom(1));
      RL_ASSERT(dq.push_bottom(2));
      if (dq.pop_bottom(v)) tally.record(0, v);
      if (dq.pop_bottom(v)) tally.record(0, v);
    } else {
      if (dq.steal_top(v)) tally.record(1, v);
      if (dq.steal_top(v)) tally.record(1, v);
    }
  }
  void after() {
    int v = 0;
    while (dq.pop_bottom(v)) tally.record(0, v);
    tally.check_each_once();
  }
};

constexpr int kWrapItems = 6;

struct WrapModel : rl::test_suite<WrapModel, 3> {
  Deque dq;
  Tally<3, kWrapItems> tally;

  void thread(unsigned id) {
    int v = 0;
    if (id == 0) {
      for (int i = 1; i <= kWrapItems; ++i) {
        while (!dq.push_bottom(i)) {
          if (dq.pop_bottom(v)) {
            tally.record(0, v);
          } else {
            rl::yield(1, $);  // a spin: see model_main.h
          }
        }
        if (i % 3 == 0 && dq.pop_bottom(v)) tally.record(0, v);
      }
      while (dq.size_approx() != 0) {
        if (dq.pop_bottom(v)) {
          tally.record(0, v);
        } else {
          rl::yield(1, $);  // a spin: see model_main.h
        }
      }
    } else {
      for (int round = 0; round < 2; ++round) {
        if (dq.steal_top(v)) tally.record(id, v);
      }
    }
  }
  void after() { tally.check_each_once(); }
};

constexpr tpool::model::NamedBug kBugs[] = {
    {"pop-seq-cst-weakened",
     "WorkDeque::pop_bottom's seq_cst bottom store / top load weakened to release/acquire: "
     "owner and stealer both take the last item",
     {Mutation::kSeqCstWeak, "WorkDeque<", "::pop_bottom("}},
    {"steal-seq-cst-weakened",
     "WorkDeque::steal_top's seq_cst top / bottom loads weakened to acquire",
     {Mutation::kSeqCstWeak, "WorkDeque<", "::steal_top("}},
    {"push-release-relaxed",
     "WorkDeque::push_bottom publishes bottom with a relaxed store: a stealer copies an "
     "unwritten slot",
     {Mutation::kStoreRelaxed, "WorkDeque<", "::push_bottom("}},
    {"steal-cas-as-store",
     "WorkDeque::steal_top claims top with load+store: two stealers take one item",
     {Mutation::kCasAsStore, "WorkDeque<", "::steal_top("}},
    {"steal-bottom-relaxed",
     "WorkDeque::steal_top reads bottom with a relaxed load: it may copy an unwritten slot",
     {Mutation::kLoadRelaxed, "WorkDeque<", "::steal_top("}},
};

}  // namespace

int main(int argc, char** argv) {
  return tpool::model::model_main(argc, argv, kBugs, 500000, 2, [](rl::test_params& p) {
    // Both suites run even if the first fails, so each report is complete.
    const bool last = rl::simulate<LastItemModel>(p);
    rl::test_params wrap = p;
    wrap.test_result = rl::test_result_success;
    const bool wrapped = rl::simulate<WrapModel>(wrap);
    return last && wrapped;
  });
}
