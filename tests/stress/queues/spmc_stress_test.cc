// Permutation stress of the owner-local queues: one owner that interleaves
// push, push of a run (RingQueue::push_many) and pop at random, plus 1..8 stealers
// (RingQueue::steal_half with random batch limits 1..32, WorkDeque::steal_top), at capacity 4 (the
// ring is full and wraps constantly) and 256 (the pool's order of magnitude).
#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <latch>
#include <random>
#include <span>
#include <thread>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "stress_support.h"
#include "tpool/pool/ring_queue.h"
#include "tpool/pool/work_deque.h"

namespace tpool::test {
namespace {

// The queue-specific part: how the owner pushes and pops, how a stealer takes.
struct RingOps {
  using Queue = detail::RingQueue<std::uint32_t>;
  static bool push(Queue& q, std::uint32_t v) { return q.push(v); }
  static std::size_t push_run(Queue& q, std::span<const std::uint32_t> vs) {
    return q.push_many(vs);
  }
  static bool pop(Queue& q, std::uint32_t& v) { return q.pop(v); }
  static std::size_t steal(Queue& q, std::vector<std::uint32_t>& rec, std::mt19937_64& rng) {
    std::array<std::uint32_t, 32> buf{};
    const std::size_t batch = 1 + rng() % 32;
    const std::size_t n = q.steal_half(buf, batch);
    rec.insert(rec.end(), buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(n));
    return n;
  }
};

struct DequeOps {
  using Queue = detail::WorkDeque<std::uint32_t>;
  static bool push(Queue& q, std::uint32_t v) { return q.push_bottom(v); }
  static std::size_t push_run(Queue& q, std::span<const std::uint32_t> vs) {
    std::size_t n = 0;
    while (n < vs.size() && q.push_bottom(vs[n])) ++n;
    return n;
  }
  static bool pop(Queue& q, std::uint32_t& v) { return q.pop_bottom(v); }
  static std::size_t steal(Queue& q, std::vector<std::uint32_t>& rec, std::mt19937_64&) {
    std::uint32_t v = 0;
    if (!q.steal_top(v)) return 0;
    rec.push_back(v);
    return 1;
  }
};

template <class Ops>
void run_owner_and_stealers(int stealers, std::size_t capacity, std::uint32_t n,
                            std::uint64_t seed) {
  typename Ops::Queue q(capacity);
  std::vector<std::vector<std::uint32_t>> records(static_cast<std::size_t>(stealers) + 1);
  for (auto& r : records) r.reserve(n);
  std::atomic<bool> owner_done{false};
  std::latch start(stealers + 1);

  std::vector<std::thread> threads;
  for (int s = 1; s <= stealers; ++s) {
    threads.emplace_back([&, s] {
      std::mt19937_64 rng(seed + static_cast<std::uint64_t>(s));
      auto& rec = records[static_cast<std::size_t>(s)];
      start.arrive_and_wait();
      for (;;) {
        // Acquire pairs with the owner's release store below: once we see it,
        // the owner has emptied the queue and will not push again.
        const bool done = owner_done.load(std::memory_order_acquire);
        if (Ops::steal(q, rec, rng) == 0) {
          if (done) break;
          std::this_thread::yield();
        }
      }
    });
  }

  std::mt19937_64 rng(seed);
  auto& mine = records[0];
  start.arrive_and_wait();
  std::uint32_t next = 0;
  std::uint32_t v = 0;
  std::array<std::uint32_t, 8> run{};
  while (next < n) {
    // Mostly pushes (one at a time, or a run of up to 8 with one publication),
    // with pops mixed in so owner and stealers race on head.
    const auto dice = rng() % 8;
    if (dice == 0) {
      const std::size_t len = std::min<std::size_t>(1 + rng() % run.size(), n - next);
      for (std::size_t i = 0; i < len; ++i) run[i] = next + static_cast<std::uint32_t>(i);
      next += static_cast<std::uint32_t>(Ops::push_run(q, std::span(run.data(), len)));
    } else if (dice > 2) {
      if (Ops::push(q, next)) {
        ++next;
      } else if (Ops::pop(q, v)) {  // full: take one ourselves
        mine.push_back(v);
      }
    } else if (Ops::pop(q, v)) {
      mine.push_back(v);
    }
  }
  while (q.size_approx() != 0) {
    if (Ops::pop(q, v)) mine.push_back(v);
  }
  owner_done.store(true, std::memory_order_release);
  for (auto& t : threads) t.join();
  ASSERT_TRUE(is_permutation_of_iota(records, n)) << stealers << " stealers, capacity " << capacity;
}

class SpmcStress : public ::testing::TestWithParam<std::tuple<int, std::size_t>> {};

TEST_P(SpmcStress, RingQueueOwnerPushPopWithStealHalf) {
  const auto [stealers, capacity] = GetParam();
  const std::uint64_t seed = announce_seed();
  for (std::uint32_t n : item_counts()) {
    run_owner_and_stealers<RingOps>(stealers, capacity, n, seed + n);
    if (HasFatalFailure()) return;
  }
}

TEST_P(SpmcStress, WorkDequeOwnerPushPopWithStealTop) {
  const auto [stealers, capacity] = GetParam();
  const std::uint64_t seed = announce_seed();
  for (std::uint32_t n : item_counts()) {
    run_owner_and_stealers<DequeOps>(stealers, capacity, n, seed + n);
    if (HasFatalFailure()) return;
  }
}

INSTANTIATE_TEST_SUITE_P(Stealers, SpmcStress,
                         ::testing::Combine(::testing::Range(1, 9),
                                            ::testing::Values(std::size_t{4}, std::size_t{256})),
                         [](const auto& p) {
                           return std::to_string(std::get<0>(p.param)) + "stealers_cap" +
                                  std::to_string(std::get<1>(p.param));
                         });

}  // namespace
}  // namespace tpool::test
