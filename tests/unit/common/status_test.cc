// tpool::Status and Result: the one error type (tpool/common/status.h).
#include <gtest/gtest.h>

#include "tpool/common/lane.h"
#include "tpool/common/status.h"

namespace {

TEST(Status, OkByDefaultAndKindPrefixedOtherwise) {
  EXPECT_TRUE(tpool::Status().ok());
  EXPECT_EQ(tpool::Status::Ok().to_string(), "ok");
  auto s = tpool::Status::Full("no free descriptor");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), tpool::StatusCode::kFull);
  EXPECT_EQ(s.to_string(), "full: no free descriptor");
}

TEST(Result, CarriesAValueOrAStatus) {
  tpool::Result<int> v(7);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v.value(), 7);
  tpool::Result<int> e(tpool::Status::Timeout("waited 5 ms"));
  EXPECT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), tpool::StatusCode::kTimeout);
}

TEST(Lane, NamesBothLanes) {
  EXPECT_EQ(tpool::to_string(tpool::Lane::kDefault), "default");
  EXPECT_EQ(tpool::to_string(tpool::Lane::kBlocking), "blocking");
}

}  // namespace
