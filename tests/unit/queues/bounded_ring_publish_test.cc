// BoundedRing's consumers never wait for a producer that has claimed a slot
// but not yet published it (bounded_ring.h, pop_many's deviation from the
// seed). Replayed step by step with InterleavingAtomics: the consumer runs at
// the producer's publication point, between its claim and its seq store.
#include <array>
#include <cstdint>

#include <gtest/gtest.h>

#include "interleaving_atomics.h"
#include "tpool/pool/bounded_ring.h"

namespace tpool::test {
namespace {

using Ring = detail::BoundedRing<std::uint32_t, 8, InterleavingAtomics>;

class UnpublishedProducer : public ::testing::Test {
 protected:
  void TearDown() override { Interleaving::disarm(); }
};

TEST_F(UnpublishedProducer, PopManyTakesOnlyThePublishedPrefix) {
  Ring ring;
  ASSERT_TRUE(ring.try_push(1));
  ASSERT_TRUE(ring.try_push(2));
  std::array<std::uint32_t, 8> buf{};
  std::size_t n = 99;
  // try_push(3): load tail, load seq, CAS tail (claimed), write value, then
  // its first store: the release of seq. The consumer runs just before it.
  Interleaving::at(Op::kStore, 1, [&] { n = ring.pop_many(buf); });
  ASSERT_TRUE(ring.try_push(3));
  ASSERT_TRUE(Interleaving::fired());
  Interleaving::disarm();
  ASSERT_EQ(n, 2u) << "pop_many must stop at the unpublished entry, not wait for it";
  EXPECT_EQ(buf[0], 1u);
  EXPECT_EQ(buf[1], 2u);
  std::uint32_t v = 0;
  ASSERT_TRUE(ring.pop(v));
  EXPECT_EQ(v, 3u);
}

TEST_F(UnpublishedProducer, PopAndPopManyReportEmptyWhenTheOldestIsUnpublished) {
  Ring ring;
  bool popped = true;
  std::size_t many = 99;
  Interleaving::at(Op::kStore, 1, [&] {
    std::uint32_t v = 0;
    popped = ring.pop(v);
    std::array<std::uint32_t, 4> buf{};
    many = ring.pop_many(buf);
  });
  ASSERT_TRUE(ring.try_push(7));
  ASSERT_TRUE(Interleaving::fired());
  Interleaving::disarm();
  EXPECT_FALSE(popped);
  EXPECT_EQ(many, 0u);
  std::uint32_t v = 0;
  ASSERT_TRUE(ring.pop(v));
  EXPECT_EQ(v, 7u);
}

TEST_F(UnpublishedProducer, LaterProducersPublishBehindAnUnpublishedOne) {
  Ring ring;
  // Producer A (10) claims position 0 and stalls before publishing; producer
  // B (20) pushes position 1 meanwhile. Nothing can be taken while A is
  // stalled: the oldest entry is A's.
  std::array<std::uint32_t, 4> buf{};
  std::size_t during = 99;
  Interleaving::at(Op::kStore, 1, [&] {
    ASSERT_TRUE(ring.try_push(20));
    during = ring.pop_many(buf);
  });
  ASSERT_TRUE(ring.try_push(10));
  Interleaving::disarm();
  EXPECT_EQ(during, 0u);
  ASSERT_EQ(ring.pop_many(buf), 2u);
  EXPECT_EQ(buf[0], 10u);
  EXPECT_EQ(buf[1], 20u);
}

}  // namespace
}  // namespace tpool::test
