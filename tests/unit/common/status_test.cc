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

// The store's codes (issue 17): each named constructor sets its own code,
// the codes keep their appended values (they are never renumbered), and
// to_string names each kind.
TEST(Status, StoreCodesAreAppendedWithTheirOwnNames) {
  const tpool::Status io = tpool::Status::IoError("the disk is full");
  const tpool::Status bad = tpool::Status::Corruption("not a database");
  const tpool::Status pre = tpool::Status::FailedPrecondition("schema 3 > 2");
  EXPECT_EQ(io.code(), tpool::StatusCode::kIoError);
  EXPECT_EQ(bad.code(), tpool::StatusCode::kCorruption);
  EXPECT_EQ(pre.code(), tpool::StatusCode::kFailedPrecondition);
  EXPECT_FALSE(io.ok() || bad.ok() || pre.ok());
  EXPECT_EQ(static_cast<int>(tpool::StatusCode::kStaleHandle), 5);
  EXPECT_EQ(static_cast<int>(tpool::StatusCode::kIoError), 6);
  EXPECT_EQ(static_cast<int>(tpool::StatusCode::kCorruption), 7);
  EXPECT_EQ(static_cast<int>(tpool::StatusCode::kFailedPrecondition), 8);
  EXPECT_EQ(io.to_string(), "I/O error: the disk is full");
  EXPECT_EQ(bad.to_string(), "corruption: not a database");
  EXPECT_EQ(pre.to_string(), "failed precondition: schema 3 > 2");
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
