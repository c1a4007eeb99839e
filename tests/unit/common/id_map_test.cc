// tpool::IdMap (tpool/common/id_map.h: I1-I3) against std::unordered_map as
// the reference, on the id patterns the result store sees (consecutive ids
// under one incarnation, evicted oldest first) and on random ids, whose
// collisions exercise the backward shift.
#include "tpool/common/id_map.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <random>
#include <unordered_map>
#include <vector>

namespace tpool {
namespace {

using Map = IdMap<std::shared_ptr<int>>;

// Every reference entry is found with its value, nothing else is there, and
// the load stays within (I1).
void expect_same(const Map& m, const std::unordered_map<std::uint64_t, int>& ref) {
  ASSERT_EQ(m.size(), ref.size());
  for (const auto& [id, v] : ref) {
    const std::shared_ptr<int>* p = m.find(id);
    ASSERT_NE(p, nullptr) << "id " << id << " was inserted and not erased, but is not found "
                          << "(a lookup stopped at a hole: I2 broken)";
    ASSERT_EQ(**p, v) << "id " << id;
  }
  std::size_t seen = 0;
  m.for_each([&](std::uint64_t id, const std::shared_ptr<int>& p) {
    ++seen;
    auto it = ref.find(id);
    ASSERT_NE(it, ref.end()) << "id " << id
                             << " is in the map but was never inserted or was erased";
    EXPECT_EQ(*p, it->second);
  });
  EXPECT_EQ(seen, ref.size());
  if (m.capacity() > 0) {
    EXPECT_LE(m.size() * 8, m.capacity() * 7);
  }
}

TEST(IdMap, InsertFindErase) {
  Map m;
  EXPECT_EQ(m.find(1), nullptr);  // empty: no array yet
  EXPECT_EQ(m.erase(1), nullptr);
  EXPECT_TRUE(m.insert(7, std::make_shared<int>(70)));
  EXPECT_FALSE(m.insert(7, std::make_shared<int>(71))) << "a second insert of one id must fail";
  EXPECT_EQ(**m.find(7), 70);
  EXPECT_TRUE(m.contains(7));
  EXPECT_FALSE(m.contains(8));
  EXPECT_EQ(m.size(), 1u);
  EXPECT_EQ(m.capacity(), Map::kMinCapacity);
  std::shared_ptr<int> out = m.erase(7);
  ASSERT_NE(out, nullptr);
  EXPECT_EQ(*out, 70);
  EXPECT_EQ(m.find(7), nullptr);
  EXPECT_EQ(m.erase(7), nullptr);
  EXPECT_TRUE(m.empty());
  EXPECT_TRUE(m.insert(0, std::make_shared<int>(0))) << "id 0 is an ordinary id";
  EXPECT_EQ(**m.find(0), 0);
}

TEST(IdMap, ReleasesWhatItOwns) {
  std::weak_ptr<int> erased, kept;
  {
    Map m;
    auto a = std::make_shared<int>(1);
    auto b = std::make_shared<int>(2);
    erased = a;
    kept = b;
    m.insert(1, std::move(a));
    m.insert(2, std::move(b));
    (void)m.erase(1);
    EXPECT_TRUE(erased.expired()) << "erase() hands back the map's reference; dropped, it is gone";
    EXPECT_FALSE(kept.expired());
    for (std::uint64_t i = 3; i < 100; ++i) m.insert(i, std::make_shared<int>(0));  // rehashes
    EXPECT_FALSE(kept.expired()) << "a rehash moves the references, it does not drop them";
  }
  EXPECT_TRUE(kept.expired()) << "the map's destructor drops its references";
}

// The result store's pattern: consecutive ids put, the oldest erased, the
// window sliding; the array grows with the window and shrinks after it.
TEST(IdMap, ASlidingWindowOfConsecutiveIds) {
  Map m;
  std::unordered_map<std::uint64_t, int> ref;
  const std::uint64_t base = std::uint64_t{5} << 40;  // an incarnation above the sequence
  std::uint64_t next = 1, oldest = 1;
  for (int round = 0; round < 40000; ++round) {
    for (int k = 0; k < 3; ++k, ++next) {
      m.insert(base + next, std::make_shared<int>(static_cast<int>(next)));
      ref.emplace(base + next, static_cast<int>(next));
    }
    if (ref.size() > 5000) {
      for (int k = 0; k < 3; ++k, ++oldest) {
        ASSERT_NE(m.erase(base + oldest), nullptr);
        ref.erase(base + oldest);
      }
    }
    if (round % 997 == 0) expect_same(m, ref);
  }
  expect_same(m, ref);
  EXPECT_LE(m.capacity(), 16384u) << "5,000-6,000 entries need no more than 8,192 slots at 7/8";
  while (oldest < next) {
    ASSERT_NE(m.erase(base + oldest), nullptr);
    ref.erase(base + oldest++);
  }
  expect_same(m, ref);
  EXPECT_EQ(m.capacity(), Map::kMinCapacity) << "emptied, the array shrinks back";
}

// Random ids and random operations: collisions and wrapped runs, so every
// branch of the backward shift is taken, checked against the reference.
TEST(IdMap, RandomOperationsMatchTheReference) {
  for (std::uint32_t seed : {1u, 2u, 3u, 4u}) {
    SCOPED_TRACE(::testing::Message() << "seed " << seed);
    std::mt19937_64 rng(seed);
    Map m;
    std::unordered_map<std::uint64_t, int> ref;
    std::vector<std::uint64_t> ids;
    // A small id space half the time: inserts of present ids, erases of absent ones.
    const std::uint64_t space = seed % 2 == 0 ? 300 : ~std::uint64_t{0};
    for (int op = 0; op < 60000; ++op) {
      const bool grow_phase = (op / 5000) % 2 == 0;
      if (ids.empty() || rng() % 100 < (grow_phase ? 70u : 30u)) {
        const std::uint64_t id = rng() % space;
        const bool fresh = !ref.contains(id);
        EXPECT_EQ(m.insert(id, std::make_shared<int>(op)), fresh);
        if (fresh) {
          ref.emplace(id, op);
          ids.push_back(id);
        }
      } else {
        const std::size_t i = rng() % ids.size();
        const std::uint64_t id = ids[i];
        ids[i] = ids.back();
        ids.pop_back();
        std::shared_ptr<int> out = m.erase(id);
        ASSERT_NE(out, nullptr);
        EXPECT_EQ(*out, ref.at(id));
        ref.erase(id);
        EXPECT_EQ(m.erase(id), nullptr);
      }
      if (op % 1009 == 0) expect_same(m, ref);
    }
    expect_same(m, ref);
  }
}

}  // namespace
}  // namespace tpool
