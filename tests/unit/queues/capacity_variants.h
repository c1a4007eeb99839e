// The capacities every queue unit test runs with: 2 and 4 fixed at compile
// time (the smallest rings, which wrap after two or four pushes) and a few
// run-time capacities (Capacity == 0), as the pool builds its queues.
#pragma once

#include <cstddef>
#include <string>

#include <gtest/gtest.h>

namespace tpool::test {

template <std::size_t Fixed, std::size_t Runtime>
struct Cap {
  static constexpr std::size_t kTemplate = Fixed;                 // the template argument
  static constexpr std::size_t kValue = Fixed ? Fixed : Runtime;  // the capacity in effect
};

using CapacityVariants = ::testing::Types<Cap<2, 0>, Cap<4, 0>, Cap<0, 2>, Cap<0, 8>, Cap<0, 64>>;

struct CapName {
  template <class C>
  static std::string GetName(int) {
    return (C::kTemplate ? "fixed" : "runtime") + std::to_string(C::kValue);
  }
};

}  // namespace tpool::test
