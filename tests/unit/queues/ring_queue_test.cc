// RingQueue, one operation at a time, at the edges: empty, full, wrap-around,
// every capacity variant, steal batches of 1..32.
#include "tpool/pool/ring_queue.h"

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
class RingQueueTest : public ::testing::Test {
 protected:
  static constexpr std::size_t kCap = C::kValue;
  RingQueue<std::uint32_t, C::kTemplate> q_{kCap};

  void fill(std::uint32_t first, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) ASSERT_TRUE(q_.push(first + static_cast<std::uint32_t>(i)));
  }
  std::vector<std::uint32_t> drain() {
    std::vector<std::uint32_t> out;
    std::uint32_t v = 0;
    while (q_.pop(v)) out.push_back(v);
    return out;
  }
};
TYPED_TEST_SUITE(RingQueueTest, test::CapacityVariants, test::CapName);

std::vector<std::uint32_t> seq(std::uint32_t first, std::size_t n) {
  std::vector<std::uint32_t> v(n);
  std::iota(v.begin(), v.end(), first);
  return v;
}

TYPED_TEST(RingQueueTest, EmptyQueueGivesNothing) {
  auto& q = this->q_;
  EXPECT_EQ(q.capacity(), this->kCap);
  EXPECT_EQ(q.size_approx(), 0u);
  EXPECT_EQ(q.free_space(), this->kCap);
  std::uint32_t v = 7;
  EXPECT_FALSE(q.pop(v));
  EXPECT_EQ(v, 7u) << "a failed pop must not write its output";
  std::array<std::uint32_t, 32> buf{};
  EXPECT_EQ(q.steal_half(buf, 32), 0u);
}

TYPED_TEST(RingQueueTest, FullQueueRefusesPushAndKeepsItsItems) {
  auto& q = this->q_;
  this->fill(100, this->kCap);
  EXPECT_EQ(q.size_approx(), this->kCap);
  EXPECT_EQ(q.free_space(), 0u);
  EXPECT_FALSE(q.push(999));
  const std::array<std::uint32_t, 3> more{1, 2, 3};
  EXPECT_EQ(q.push_many(more), 0u);
  EXPECT_EQ(this->drain(), seq(100, this->kCap));
}

TYPED_TEST(RingQueueTest, PopIsFifo) {
  this->fill(1, this->kCap);
  EXPECT_EQ(this->drain(), seq(1, this->kCap));
  EXPECT_EQ(this->q_.size_approx(), 0u);
}

TYPED_TEST(RingQueueTest, WrapsAroundManyLapsKeepingOrder) {
  auto& q = this->q_;
  std::uint32_t next_in = 0;
  std::uint32_t next_out = 0;
  // Uneven push/pop runs so every slot is written at every phase of the ring.
  for (int lap = 0; lap < 10 * static_cast<int>(this->kCap) + 3; ++lap) {
    const std::size_t pushes = 1 + static_cast<std::size_t>(lap) % this->kCap;
    for (std::size_t i = 0; i < pushes && q.free_space() > 0; ++i) ASSERT_TRUE(q.push(next_in++));
    ASSERT_EQ(q.size_approx(), next_in - next_out);
    const std::size_t pops = 1 + static_cast<std::size_t>(lap * 7) % this->kCap;
    std::uint32_t v = 0;
    for (std::size_t i = 0; i < pops && q.pop(v); ++i) ASSERT_EQ(v, next_out++);
  }
  for (std::uint32_t v : this->drain()) ASSERT_EQ(v, next_out++);
  EXPECT_EQ(next_in, next_out);
  EXPECT_GT(next_in, 4 * this->kCap) << "the test must wrap the ring several times";
}

TYPED_TEST(RingQueueTest, PushManyTakesWhatFits) {
  auto& q = this->q_;
  EXPECT_EQ(q.push_many(std::span<const std::uint32_t>{}), 0u);
  const std::vector<std::uint32_t> in = seq(0, this->kCap + 5);
  ASSERT_TRUE(q.push(1000));
  const std::size_t n = q.push_many(in);
  EXPECT_EQ(n, this->kCap - 1);
  std::vector<std::uint32_t> want{1000};
  want.insert(want.end(), in.begin(), in.begin() + static_cast<std::ptrdiff_t>(n));
  EXPECT_EQ(this->drain(), want);
}

TYPED_TEST(RingQueueTest, PushManyWrapsAround) {
  auto& q = this->q_;
  // Move head and tail to the middle of the ring first.
  this->fill(0, this->kCap / 2 + 1);
  EXPECT_EQ(this->drain().size(), this->kCap / 2 + 1);
  const std::vector<std::uint32_t> in = seq(50, this->kCap);
  EXPECT_EQ(q.push_many(in), this->kCap);
  EXPECT_EQ(this->drain(), in);
}

TYPED_TEST(RingQueueTest, StealHalfTakesCeilHalfOfTheOldestCappedByBatch) {
  auto& q = this->q_;
  for (std::size_t avail = 1; avail <= this->kCap; ++avail) {
    for (std::size_t batch = 1; batch <= 32; ++batch) {
      // Offset head so the stolen run crosses the end of the ring.
      this->fill(0, this->kCap - 1);
      ASSERT_EQ(this->drain().size(), this->kCap - 1);
      this->fill(10, avail);
      std::array<std::uint32_t, 32> buf{};
      const std::size_t n = q.steal_half(buf, batch);
      const std::size_t want = std::min((avail + 1) / 2, batch);
      ASSERT_EQ(n, want) << "avail " << avail << " batch " << batch;
      for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(buf[i], 10 + i);
      ASSERT_EQ(q.size_approx(), avail - n);
      // The owner then gets exactly the rest, in order.
      ASSERT_EQ(this->drain(), seq(static_cast<std::uint32_t>(10 + n), avail - n));
    }
  }
}

TYPED_TEST(RingQueueTest, StealHalfIsCappedByTheDestination) {
  auto& q = this->q_;
  this->fill(0, this->kCap);
  std::array<std::uint32_t, 1> one{};
  EXPECT_EQ(q.steal_half(one, 32), 1u);
  EXPECT_EQ(one[0], 0u);
  EXPECT_EQ(q.steal_half(std::span<std::uint32_t>{}, 32), 0u);
  std::array<std::uint32_t, 32> buf{};
  EXPECT_EQ(q.steal_half(buf, 0), 0u);
  EXPECT_EQ(q.size_approx(), this->kCap - 1);
}

TYPED_TEST(RingQueueTest, RepeatedStealsEmptyTheQueue) {
  auto& q = this->q_;
  this->fill(0, this->kCap);
  std::vector<std::uint32_t> got;
  std::array<std::uint32_t, 32> buf{};
  for (std::size_t n; (n = q.steal_half(buf, 32)) != 0;)
    got.insert(got.end(), buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(n));
  EXPECT_EQ(got, seq(0, this->kCap));
  EXPECT_EQ(q.free_space(), this->kCap);
}

TYPED_TEST(RingQueueTest, OwnerPopAndStealsShareOneHead) {
  auto& q = this->q_;
  this->fill(0, this->kCap);
  std::uint32_t v = 0;
  ASSERT_TRUE(q.pop(v));
  EXPECT_EQ(v, 0u);
  std::array<std::uint32_t, 32> buf{};
  const std::size_t n = q.steal_half(buf, 32);
  for (std::size_t i = 0; i < n; ++i) EXPECT_EQ(buf[i], 1 + i);
  // Space freed by steals is reusable at once.
  EXPECT_EQ(q.free_space(), n + 1);
  this->fill(500, n + 1);
  EXPECT_FALSE(q.push(9));
  std::vector<std::uint32_t> want = seq(static_cast<std::uint32_t>(1 + n), this->kCap - 1 - n);
  for (std::uint32_t x : seq(500, n + 1)) want.push_back(x);
  EXPECT_EQ(this->drain(), want);
}

TEST(RingQueueLayout, HeadAndTailLiveOnDifferentCacheLines) {
  // Stealers hammer head; the owner writes tail: false sharing would make
  // every push pay for every steal.
  EXPECT_GE(sizeof(RingQueue<std::uint32_t, 2>), 3 * kCacheLine);
  EXPECT_EQ(alignof(RingQueue<std::uint32_t, 2>), kCacheLine);
}

}  // namespace
}  // namespace tpool::detail
