// HistogramSnapshot -> Prometheus buckets: bounds on the pool's bucket edges,
// cumulative, exact, in seconds.
#include <gtest/gtest.h>

#include <cmath>

#include "tpool/metrics/exporter.h"

namespace tpool::metrics {
namespace {

TEST(HistogramExport, BoundsArePowersOfTwoNanosecondsAndBucketEdges) {
  const auto bounds = histogram_bounds_seconds();
  ASSERT_EQ(bounds.size(), 27u);
  for (std::size_t i = 0; i < bounds.size(); ++i) {
    const auto ns = std::uint64_t{1} << (10 + i);
    EXPECT_EQ(bounds[i], static_cast<double>(ns) / 1e9);
    // An edge of the pool's histogram: the value just below it and the value
    // at it land in different buckets.
    EXPECT_NE(LatencyHistogram::bucket_of(ns - 1), LatencyHistogram::bucket_of(ns)) << ns;
    EXPECT_EQ(LatencyHistogram::upper_bound_ns(LatencyHistogram::bucket_of(ns - 1)), ns);
  }
}

TEST(HistogramExport, CumulativeCountsAreExactAtEveryBound) {
  LatencyHistogram h;
  // Values on both sides of several bounds, and beyond the last one.
  const std::uint64_t values[] = {0,
                                  1,
                                  1023,
                                  1024,
                                  1025,
                                  3000,
                                  1u << 20,
                                  (1u << 20) - 1,
                                  500'000'000,
                                  std::uint64_t{1} << 36,
                                  (std::uint64_t{1} << 36) + 5,
                                  std::uint64_t{1} << 40};
  std::uint64_t sum = 0;
  for (auto v : values) {
    h.record(v);
    sum += v;
  }
  HistogramSnapshot s;
  h.add_to(s);
  const auto p = to_prometheus(s);
  EXPECT_EQ(p.sample_count, std::size(values));
  EXPECT_DOUBLE_EQ(p.sample_sum, static_cast<double>(sum) * 1e-9);
  ASSERT_EQ(p.bucket.size(), 28u);
  for (std::size_t i = 0; i + 1 < p.bucket.size(); ++i) {
    const auto bound_ns = std::uint64_t{1} << (10 + i);
    std::uint64_t below = 0;
    for (auto v : values) below += v < bound_ns ? 1 : 0;
    EXPECT_EQ(p.bucket[i].cumulative_count, below) << "le=" << p.bucket[i].upper_bound;
    EXPECT_EQ(p.bucket[i].upper_bound, static_cast<double>(bound_ns) / 1e9);
  }
  EXPECT_TRUE(std::isinf(p.bucket.back().upper_bound));
  EXPECT_EQ(p.bucket.back().cumulative_count, std::size(values));
}

TEST(HistogramExport, EmptyHistogramHasZeroBuckets) {
  const auto p = to_prometheus(HistogramSnapshot{});
  EXPECT_EQ(p.sample_count, 0u);
  for (const auto& b : p.bucket) EXPECT_EQ(b.cumulative_count, 0u);
}

}  // namespace
}  // namespace tpool::metrics
