// Shared pieces of the queue permutation stress tests: the seed, the item
// counts, and the permutation check.
//
// Every thread records what it took; the sorted union of the records must be
// exactly 0..n-1 (no duplicate, no loss). The seed drives every random choice
// (owner push/pop mix, batch sizes); it is printed by each test and can be set
// with TPOOL_STRESS_SEED to replay the same choices (the thread interleaving
// itself is up to the OS).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace tpool::test {

#if defined(__SANITIZE_THREAD__)
inline constexpr bool kUnderTsan = true;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
inline constexpr bool kUnderTsan = true;
#else
inline constexpr bool kUnderTsan = false;
#endif
#else
inline constexpr bool kUnderTsan = false;
#endif

inline std::uint64_t stress_seed() {
  static const std::uint64_t seed = [] {
    if (const char* env = std::getenv("TPOOL_STRESS_SEED"); env != nullptr && *env != '\0') {
      return static_cast<std::uint64_t>(std::strtoull(env, nullptr, 0));
    }
    std::random_device rd;
    return (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
  }();
  return seed;
}

// Logs the seed once per test, where ctest's output shows it on failure.
inline std::uint64_t announce_seed() {
  const std::uint64_t seed = stress_seed();
  std::printf("stress seed=%llu (replay the choices with TPOOL_STRESS_SEED=%llu)\n",
              static_cast<unsigned long long>(seed), static_cast<unsigned long long>(seed));
  ::testing::Test::RecordProperty("seed", std::to_string(seed));
  return seed;
}

// Geometric item counts, x16: 1, 16, 256, 4096, 65536, 1M (2^20). Under
// ThreadSanitizer (5-15x slower, and 2 cores shared by up to 9 threads) the
// largest counts are dropped; the wrap-around and contention are the same.
inline std::vector<std::uint32_t> item_counts() {
  const std::uint32_t largest = kUnderTsan ? (1u << 14) : (1u << 20);
  std::vector<std::uint32_t> counts;
  for (std::uint32_t n = 1; n <= largest; n *= 16) counts.push_back(n);
  if (counts.back() != largest) counts.push_back(largest);
  return counts;
}

// The sorted union of every thread's record must be 0..n-1 exactly.
inline ::testing::AssertionResult is_permutation_of_iota(
    const std::vector<std::vector<std::uint32_t>>& records, std::uint32_t n) {
  std::vector<std::uint32_t> all;
  for (const auto& r : records) all.insert(all.end(), r.begin(), r.end());
  std::sort(all.begin(), all.end());
  for (std::uint32_t i = 0; i < all.size(); ++i) {
    if (i > 0 && all[i] == all[i - 1]) {
      return ::testing::AssertionFailure() << "item " << all[i] << " was taken twice (n=" << n
                                           << ", seed=" << stress_seed() << ")";
    }
    if (all[i] != i) {
      return ::testing::AssertionFailure()
             << "item " << i << " was lost (n=" << n << ", seed=" << stress_seed() << ")";
    }
  }
  if (all.size() != n) {
    return ::testing::AssertionFailure()
           << all.size() << " items taken, " << n << " put in (seed=" << stress_seed() << ")";
  }
  return ::testing::AssertionSuccess();
}

}  // namespace tpool::test
