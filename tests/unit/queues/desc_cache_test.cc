// DescCache: the single-owner LIFO cache of free descriptor indices.
#include "tpool/pool/desc_cache.h"

#include <array>
#include <cstdint>
#include <numeric>
#include <vector>

#include <gtest/gtest.h>

namespace tpool::detail {
namespace {

TEST(DescCache, EmptyCacheGivesNothing) {
  DescCache<> c;
  EXPECT_EQ(DescCache<>::kCapacity, 32u);
  EXPECT_TRUE(c.empty());
  EXPECT_EQ(c.size(), 0u);
  std::uint32_t v = 7;
  EXPECT_FALSE(c.try_pop(v));
  EXPECT_EQ(v, 7u);
  std::array<std::uint32_t, 32> out{};
  EXPECT_EQ(c.drain_all(out), 0u);
}

TEST(DescCache, PushUntilFullThenRefuses) {
  DescCache<> c;
  for (std::uint32_t i = 0; i < 32; ++i) ASSERT_TRUE(c.push(i));
  EXPECT_EQ(c.size(), 32u);
  EXPECT_FALSE(c.push(99)) << "a full cache sends the index back to the free list";
  EXPECT_EQ(c.size(), 32u);
}

TEST(DescCache, TryPopIsLifo) {
  DescCache<> c;
  for (std::uint32_t i = 0; i < 32; ++i) ASSERT_TRUE(c.push(i));
  std::uint32_t v = 0;
  for (std::uint32_t i = 32; i-- > 0;) {
    ASSERT_TRUE(c.try_pop(v));
    EXPECT_EQ(v, i);
  }
  EXPECT_FALSE(c.try_pop(v));
  EXPECT_TRUE(c.empty());
}

TEST(DescCache, DrainAllMovesEverythingAndEmpties) {
  DescCache<> c;
  for (std::uint32_t i = 0; i < 20; ++i) ASSERT_TRUE(c.push(100 + i));
  std::array<std::uint32_t, DescCache<>::kCapacity> out{};
  ASSERT_EQ(c.drain_all(out), 20u);
  for (std::uint32_t i = 0; i < 20; ++i) EXPECT_EQ(out[i], 100 + i);
  EXPECT_TRUE(c.empty());
  EXPECT_TRUE(c.push(1));  // usable again after a drain
  EXPECT_EQ(c.drain_all(out), 1u);
  EXPECT_EQ(out[0], 1u);
}

TEST(DescCache, DrainAllOfAFullCache) {
  DescCache<> c;
  std::vector<std::uint32_t> in(32);
  std::iota(in.begin(), in.end(), 0u);
  ASSERT_EQ(c.push_many(in), 32u);
  std::array<std::uint32_t, DescCache<>::kCapacity> out{};
  ASSERT_EQ(c.drain_all(out), 32u);
  EXPECT_TRUE(std::equal(in.begin(), in.end(), out.begin()));
}

TEST(DescCache, PushManyTakesWhatFits) {
  DescCache<4> c;
  ASSERT_TRUE(c.push(9));
  const std::array<std::uint32_t, 6> in{1, 2, 3, 4, 5, 6};
  EXPECT_EQ(c.push_many(in), 3u);
  EXPECT_EQ(c.push_many(in), 0u);
  EXPECT_EQ(c.push_many(std::span<const std::uint32_t>{}), 0u);
  std::uint32_t v = 0;
  for (std::uint32_t want : {3u, 2u, 1u, 9u}) {
    ASSERT_TRUE(c.try_pop(v));
    EXPECT_EQ(v, want);
  }
}

TEST(DescCache, SmallCapacityEdges) {
  DescCache<2> c;
  EXPECT_TRUE(c.push(1));
  EXPECT_TRUE(c.push(2));
  EXPECT_FALSE(c.push(3));
  std::uint32_t v = 0;
  ASSERT_TRUE(c.try_pop(v));
  EXPECT_EQ(v, 2u);
  EXPECT_TRUE(c.push(4));
  std::array<std::uint32_t, 2> out{};
  ASSERT_EQ(c.drain_all(out), 2u);
  EXPECT_EQ(out[0], 1u);
  EXPECT_EQ(out[1], 4u);
}

TEST(DescCache, NoAtomicsAndNoHeap) {
  // The fast path is plain loads and stores of one owner's memory.
  static_assert(std::is_trivially_destructible_v<DescCache<>>);
  EXPECT_LE(sizeof(DescCache<>), 32 * sizeof(std::uint32_t) + 2 * sizeof(std::size_t));
}

}  // namespace
}  // namespace tpool::detail
