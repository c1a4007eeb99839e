// DescCache's single-owner rule (inv 1), checked in debug builds. This file is
// its own executable compiled with NDEBUG undefined (CMakeLists.txt), so the
// owner check is present whatever the build type; it must not share an
// executable with a DescCache compiled without it (the layouts differ).
#ifdef NDEBUG
#error "desc_cache_owner_test.cc must be compiled without NDEBUG"
#endif

#include <cstdint>
#include <thread>

#include <gtest/gtest.h>

#include "tpool/pool/desc_cache.h"

namespace tpool::detail {
namespace {

TEST(DescCacheOwnerDeathTest, SecondThreadIsRejected) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        DescCache<> c;
        ASSERT_TRUE(c.push(1));  // this thread becomes the owner
        std::thread other([&c] { (void)c.push(2); });
        other.join();
      },
      "does not own it");
}

TEST(DescCacheOwner, UnbindHandsTheCacheToANewOwner) {
  DescCache<> c;
  ASSERT_TRUE(c.push(1));
  c.unbind();
  std::uint32_t v = 0;
  bool popped = false;
  std::thread other([&] {
    popped = c.try_pop(v);
    (void)c.push(2);
    c.unbind();
  });
  other.join();
  EXPECT_TRUE(popped);
  EXPECT_EQ(v, 1u);
  ASSERT_TRUE(c.try_pop(v));  // ours again after the other thread unbound it
  EXPECT_EQ(v, 2u);
}

}  // namespace
}  // namespace tpool::detail
