// Permutation stress of BoundedRing (the inject ring): 1..4 producers x 1..4
// consumers, consumers taking with pop or with pop_many (random batch 1..32),
// at capacity 64 (full and wrapping all the time: 1M items are 16K laps).
#include <array>
#include <atomic>
#include <cstdint>
#include <latch>
#include <random>
#include <thread>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "stress_support.h"
#include "tpool/pool/bounded_ring.h"

namespace tpool::test {
namespace {

enum class Take { kPop, kPopMany };

void run_producers_consumers(int producers, int consumers, Take take, std::uint32_t n,
                             std::uint64_t seed) {
  detail::BoundedRing<std::uint32_t> ring(64);
  std::vector<std::vector<std::uint32_t>> records(static_cast<std::size_t>(consumers));
  std::atomic<std::uint32_t> taken{0};
  std::latch start(producers + consumers);
  std::vector<std::thread> threads;

  for (int p = 0; p < producers; ++p) {
    threads.emplace_back([&, p] {
      start.arrive_and_wait();
      // Producer p puts in p, p + P, p + 2P, ...: together exactly 0..n-1.
      for (std::uint32_t v = static_cast<std::uint32_t>(p); v < n;
           v += static_cast<std::uint32_t>(producers)) {
        while (!ring.try_push(v)) std::this_thread::yield();
      }
    });
  }
  for (int c = 0; c < consumers; ++c) {
    threads.emplace_back([&, c] {
      std::mt19937_64 rng(seed + static_cast<std::uint64_t>(c));
      auto& rec = records[static_cast<std::size_t>(c)];
      rec.reserve(n);
      std::array<std::uint32_t, 32> buf{};
      start.arrive_and_wait();
      // Relaxed: the counter only says when to stop; the items themselves are
      // handed over by the ring's own acquire/release.
      while (taken.load(std::memory_order_relaxed) < n) {
        std::size_t k = 0;
        if (take == Take::kPop) {
          k = ring.pop(buf[0]) ? 1 : 0;
        } else {
          k = ring.pop_many(std::span<std::uint32_t>(buf.data(), 1 + rng() % 32));
        }
        if (k == 0) {
          std::this_thread::yield();
          continue;
        }
        rec.insert(rec.end(), buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(k));
        taken.fetch_add(static_cast<std::uint32_t>(k), std::memory_order_relaxed);
      }
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_EQ(ring.size_approx(), 0u);
  ASSERT_TRUE(is_permutation_of_iota(records, n))
      << producers << " producers, " << consumers << " consumers";
}

class MpmcStress : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(MpmcStress, BoundedRingPop) {
  const auto [producers, consumers] = GetParam();
  const std::uint64_t seed = announce_seed();
  for (std::uint32_t n : item_counts()) {
    run_producers_consumers(producers, consumers, Take::kPop, n, seed + n);
    if (HasFatalFailure()) return;
  }
}

TEST_P(MpmcStress, BoundedRingPopMany) {
  const auto [producers, consumers] = GetParam();
  const std::uint64_t seed = announce_seed();
  for (std::uint32_t n : item_counts()) {
    run_producers_consumers(producers, consumers, Take::kPopMany, n, seed + n);
    if (HasFatalFailure()) return;
  }
}

INSTANTIATE_TEST_SUITE_P(ProducersConsumers, MpmcStress,
                         ::testing::Combine(::testing::Range(1, 5), ::testing::Range(1, 5)),
                         [](const auto& p) {
                           return std::to_string(std::get<0>(p.param)) + "p" +
                                  std::to_string(std::get<1>(p.param)) + "c";
                         });

}  // namespace
}  // namespace tpool::test
