// LifoStack (tpool/pool/lifo_stack.h): newest first out, oldest taken from the
// bottom, across the wrap of its circular buffer, at capacities that are and
// are not powers of two.
#include "tpool/pool/lifo_stack.h"

#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <deque>
#include <random>
#include <span>

namespace tpool::detail {
namespace {

TEST(LifoStack, PopsNewestFirst) {
  LifoStack<std::uint64_t> s;
  s.init(3);
  EXPECT_TRUE(s.empty());
  EXPECT_EQ(s.capacity(), 3u);
  for (std::uint64_t v : {1, 2, 3}) s.push(v);
  EXPECT_TRUE(s.full());
  EXPECT_EQ(s.pop(), 3u);
  EXPECT_EQ(s.pop(), 2u);
  s.push(4);
  EXPECT_EQ(s.pop(), 4u);
  EXPECT_EQ(s.pop(), 1u);
  EXPECT_TRUE(s.empty());
}

TEST(LifoStack, CapacityOneIsTheSeedsSlot) {
  LifoStack<std::uint64_t> s;
  s.init(1);
  s.push(7);
  EXPECT_TRUE(s.full());
  EXPECT_EQ(s.pop(), 7u);
  EXPECT_TRUE(s.empty());
}

TEST(LifoStack, TakeOldestTakesFromTheBottomInOrder) {
  LifoStack<std::uint64_t> s;
  s.init(8);
  for (std::uint64_t v = 1; v <= 8; ++v) s.push(v);
  std::array<std::uint64_t, 3> out{};
  ASSERT_EQ(s.take_oldest(std::span<std::uint64_t>(out)), 3u);
  EXPECT_EQ(out, (std::array<std::uint64_t, 3>{1, 2, 3}));
  EXPECT_EQ(s.size(), 5u);
  EXPECT_EQ(s.pop(), 8u);
  // More asked than held: what there is.
  std::array<std::uint64_t, 10> all{};
  ASSERT_EQ(s.take_oldest(std::span<std::uint64_t>(all)), 4u);
  EXPECT_EQ(all[0], 4u);
  EXPECT_EQ(all[3], 7u);
  EXPECT_TRUE(s.empty());
}

// Against a std::deque model through thousands of random operations, so the
// bottom index wraps many times, at a capacity that is not a power of two.
TEST(LifoStack, MatchesADequeThroughWraps) {
  for (std::size_t cap : {5u, 32u, 200u}) {
    LifoStack<std::uint64_t> s;
    s.init(cap);
    std::deque<std::uint64_t> model;  // front = oldest
    std::mt19937_64 rng(cap);
    std::uint64_t next = 1;
    for (int step = 0; step < 20000; ++step) {
      switch (rng() % 3) {
        case 0:
          if (model.size() < cap) {
            s.push(next);
            model.push_back(next++);
          }
          break;
        case 1:
          if (!model.empty()) {
            ASSERT_EQ(s.pop(), model.back());
            model.pop_back();
          }
          break;
        default: {
          std::array<std::uint64_t, 7> out{};
          const std::size_t want = rng() % out.size();
          const std::size_t n = s.take_oldest(std::span<std::uint64_t>(out.data(), want));
          ASSERT_EQ(n, std::min(want, model.size()));
          for (std::size_t i = 0; i < n; ++i) {
            ASSERT_EQ(out[i], model.front());
            model.pop_front();
          }
        }
      }
      ASSERT_EQ(s.size(), model.size());
      ASSERT_EQ(s.full(), model.size() == cap);
    }
  }
}

}  // namespace
}  // namespace tpool::detail
