// WorkDeque (Chase-Lev), one operation at a time, at the edges: empty, full,
// the last item, wrap-around, every capacity variant.
#include "tpool/pool/work_deque.h"

#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

#include "capacity_variants.h"

namespace tpool::detail {
namespace {

template <class C>
class WorkDequeTest : public ::testing::Test {
 protected:
  static constexpr std::size_t kCap = C::kValue;
  WorkDeque<std::uint32_t, C::kTemplate> dq_{kCap};

  void fill(std::uint32_t first, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) {
      ASSERT_TRUE(dq_.push_bottom(first + static_cast<std::uint32_t>(i)));
    }
  }
};
TYPED_TEST_SUITE(WorkDequeTest, test::CapacityVariants, test::CapName);

TYPED_TEST(WorkDequeTest, EmptyDequeGivesNothingAndStaysUsable) {
  auto& dq = this->dq_;
  EXPECT_EQ(dq.capacity(), this->kCap);
  std::uint32_t v = 7;
  EXPECT_FALSE(dq.pop_bottom(v));
  EXPECT_FALSE(dq.steal_top(v));
  EXPECT_EQ(v, 7u);
  // A pop on empty dips bottom and must restore it.
  EXPECT_EQ(dq.size_approx(), 0u);
  EXPECT_EQ(dq.free_space(), this->kCap);
  this->fill(1, this->kCap);
  EXPECT_EQ(dq.size_approx(), this->kCap);
}

TYPED_TEST(WorkDequeTest, FullDequeRefusesPush) {
  auto& dq = this->dq_;
  this->fill(0, this->kCap);
  EXPECT_EQ(dq.free_space(), 0u);
  EXPECT_FALSE(dq.push_bottom(99));
  std::uint32_t v = 0;
  ASSERT_TRUE(dq.steal_top(v));
  EXPECT_EQ(v, 0u);
  EXPECT_EQ(dq.free_space(), 1u);
  EXPECT_TRUE(dq.push_bottom(99));
  EXPECT_FALSE(dq.push_bottom(100));
}

TYPED_TEST(WorkDequeTest, OwnerPopsLifoStealersTakeFifo) {
  auto& dq = this->dq_;
  this->fill(0, this->kCap);
  std::uint32_t v = 0;
  ASSERT_TRUE(dq.steal_top(v));
  EXPECT_EQ(v, 0u);
  for (std::size_t i = this->kCap; i-- > 1;) {
    ASSERT_TRUE(dq.pop_bottom(v));
    EXPECT_EQ(v, i);
  }
  EXPECT_FALSE(dq.pop_bottom(v));
  EXPECT_FALSE(dq.steal_top(v));
}

TYPED_TEST(WorkDequeTest, LastItemGoesToExactlyOneTaker) {
  auto& dq = this->dq_;
  std::uint32_t v = 0;
  this->fill(5, 1);
  ASSERT_TRUE(dq.pop_bottom(v));
  EXPECT_EQ(v, 5u);
  EXPECT_FALSE(dq.steal_top(v));
  this->fill(6, 1);
  ASSERT_TRUE(dq.steal_top(v));
  EXPECT_EQ(v, 6u);
  EXPECT_FALSE(dq.pop_bottom(v));
  EXPECT_EQ(dq.size_approx(), 0u);
}

TYPED_TEST(WorkDequeTest, WrapsAroundManyLaps) {
  auto& dq = this->dq_;
  std::uint32_t next = 0;
  std::vector<std::uint32_t> got;
  for (int lap = 0; lap < 10 * static_cast<int>(this->kCap); ++lap) {
    const std::size_t n = 1 + static_cast<std::size_t>(lap) % this->kCap;
    const std::uint32_t first = next;
    for (std::size_t i = 0; i < n; ++i) ASSERT_TRUE(dq.push_bottom(next++));
    // Half by steals (oldest first), the rest by the owner (newest first).
    std::uint32_t v = 0;
    for (std::size_t i = 0; i < n / 2; ++i) {
      ASSERT_TRUE(dq.steal_top(v));
      ASSERT_EQ(v, first + i);
    }
    for (std::size_t i = n; i-- > n / 2;) {
      ASSERT_TRUE(dq.pop_bottom(v));
      ASSERT_EQ(v, first + i);
    }
    ASSERT_EQ(dq.size_approx(), 0u);
  }
  EXPECT_GT(next, 4 * this->kCap);
}

TEST(WorkDequeLayout, TopAndBottomLiveOnDifferentCacheLines) {
  EXPECT_GE(sizeof(WorkDeque<std::uint32_t, 2>), 3 * kCacheLine);
  EXPECT_EQ(alignof(WorkDeque<std::uint32_t, 2>), kCacheLine);
}

}  // namespace
}  // namespace tpool::detail
