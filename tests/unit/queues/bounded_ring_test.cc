// BoundedRing (Vyukov MPMC), one operation at a time, at the edges: empty,
// full, wrap-around (sequence numbers over many laps), every capacity variant,
// pop_many batches of 1..32.
#include "tpool/pool/bounded_ring.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <numeric>
#include <vector>

#include <gtest/gtest.h>

#include "capacity_variants.h"

namespace tpool::detail {
namespace {

template <class C>
class BoundedRingTest : public ::testing::Test {
 protected:
  static constexpr std::size_t kCap = C::kValue;
  BoundedRing<std::uint32_t, C::kTemplate> ring_{kCap};

  void fill(std::uint32_t first, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) {
      ASSERT_TRUE(ring_.try_push(first + static_cast<std::uint32_t>(i)));
    }
  }
  std::vector<std::uint32_t> drain() {
    std::vector<std::uint32_t> out;
    std::uint32_t v = 0;
    while (ring_.pop(v)) out.push_back(v);
    return out;
  }
};
TYPED_TEST_SUITE(BoundedRingTest, test::CapacityVariants, test::CapName);

std::vector<std::uint32_t> seq(std::uint32_t first, std::size_t n) {
  std::vector<std::uint32_t> v(n);
  std::iota(v.begin(), v.end(), first);
  return v;
}

TYPED_TEST(BoundedRingTest, EmptyRingGivesNothing) {
  auto& ring = this->ring_;
  EXPECT_EQ(ring.capacity(), this->kCap);
  EXPECT_EQ(ring.size_approx(), 0u);
  std::uint32_t v = 7;
  EXPECT_FALSE(ring.pop(v));
  EXPECT_EQ(v, 7u);
  std::array<std::uint32_t, 32> buf{};
  EXPECT_EQ(ring.pop_many(buf), 0u);
  EXPECT_EQ(ring.pop_many(std::span<std::uint32_t>{}), 0u);
}

TYPED_TEST(BoundedRingTest, FullRingRefusesPushUntilAPop) {
  auto& ring = this->ring_;
  this->fill(0, this->kCap);
  EXPECT_EQ(ring.size_approx(), this->kCap);
  EXPECT_FALSE(ring.try_push(99));
  std::uint32_t v = 0;
  ASSERT_TRUE(ring.pop(v));
  EXPECT_EQ(v, 0u);
  EXPECT_TRUE(ring.try_push(99));
  EXPECT_FALSE(ring.try_push(100));
  std::vector<std::uint32_t> want = seq(1, this->kCap - 1);
  want.push_back(99);
  EXPECT_EQ(this->drain(), want);
}

TYPED_TEST(BoundedRingTest, WrapsAroundManyLapsKeepingOrder) {
  auto& ring = this->ring_;
  std::uint32_t next_in = 0;
  std::uint32_t next_out = 0;
  for (int lap = 0; lap < 10 * static_cast<int>(this->kCap) + 3; ++lap) {
    const std::size_t pushes = 1 + static_cast<std::size_t>(lap) % this->kCap;
    for (std::size_t i = 0; i < pushes; ++i) {
      if (!ring.try_push(next_in)) break;
      ++next_in;
    }
    ASSERT_EQ(ring.size_approx(), next_in - next_out);
    const std::size_t pops = 1 + static_cast<std::size_t>(lap * 5) % this->kCap;
    std::uint32_t v = 0;
    for (std::size_t i = 0; i < pops && ring.pop(v); ++i) ASSERT_EQ(v, next_out++);
  }
  for (std::uint32_t v : this->drain()) ASSERT_EQ(v, next_out++);
  EXPECT_EQ(next_in, next_out);
  EXPECT_GT(next_in, 4 * this->kCap);
}

TYPED_TEST(BoundedRingTest, PopManyTakesUpToItsBufferInOrder) {
  auto& ring = this->ring_;
  for (std::size_t avail = 0; avail <= this->kCap; ++avail) {
    for (std::size_t batch = 1; batch <= 32; ++batch) {
      // Offset head so batches cross the end of the ring.
      this->fill(0, this->kCap - 1);
      ASSERT_EQ(this->drain().size(), this->kCap - 1);
      this->fill(10, avail);
      std::array<std::uint32_t, 32> buf{};
      const std::size_t n = ring.pop_many(std::span<std::uint32_t>(buf.data(), batch));
      ASSERT_EQ(n, std::min(avail, batch)) << "avail " << avail << " batch " << batch;
      for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(buf[i], 10 + i);
      ASSERT_EQ(this->drain(), seq(static_cast<std::uint32_t>(10 + n), avail - n));
      // Slots freed by pop_many are the next lap's: the ring takes a full load.
      this->fill(0, this->kCap);
      ASSERT_FALSE(ring.try_push(1));
      ASSERT_EQ(this->drain(), seq(0, this->kCap));
    }
  }
}

TYPED_TEST(BoundedRingTest, PopAndPopManyInterleave) {
  auto& ring = this->ring_;
  std::uint32_t next_in = 0;
  std::uint32_t next_out = 0;
  std::array<std::uint32_t, 3> buf{};
  for (int round = 0; round < 20 * static_cast<int>(this->kCap); ++round) {
    while (ring.try_push(next_in)) ++next_in;
    std::uint32_t v = 0;
    ASSERT_TRUE(ring.pop(v));
    ASSERT_EQ(v, next_out++);
    const std::size_t n = ring.pop_many(buf);
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(buf[i], next_out++);
  }
  for (std::uint32_t v : this->drain()) ASSERT_EQ(v, next_out++);
  EXPECT_EQ(next_in, next_out);
}

TEST(BoundedRingLayout, HeadTailAndSlotsLiveOnDifferentCacheLines) {
  EXPECT_GE(sizeof(BoundedRing<std::uint32_t, 2>), 3 * kCacheLine);
  EXPECT_EQ(alignof(BoundedRing<std::uint32_t, 2>), kCacheLine);
}

}  // namespace
}  // namespace tpool::detail
