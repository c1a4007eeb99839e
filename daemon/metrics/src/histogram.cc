// LatencyHistogram snapshot -> Prometheus cumulative buckets.
//
// The pool's buckets are log-linear in nanoseconds (pool/histogram.h): every
// power of two 2^e ns, for kMinExp <= e <= kMaxExp, is a bucket boundary.
// Exporting at those powers keeps each cumulative count exact (no bucket is
// split) at a ratio of 2 between bounds: 27 finite buckets from ~1 us to
// ~69 s, enough for histogram_quantile and cheap in series.
#include <cmath>
#include <cstdint>

#include "tpool/metrics/exporter.h"

namespace tpool::metrics {
namespace {

constexpr int kFirstExp = 10;  // 1.024 us: below, the pool's own clock reads are the noise
constexpr int kLastExp = 36;   // 68.7 s: the last power below the pool's overflow bucket
static_assert(kFirstExp >= LatencyHistogram::kMinExp && kLastExp < LatencyHistogram::kMaxExp);

// Divided, not multiplied by 1e-9: the quotient is the double nearest the
// decimal value, so `le` prints as "8.192e-06" and not "8.192000000000001e-06".
double seconds(std::uint64_t ns) {
  return static_cast<double>(ns) / 1e9;
}

}  // namespace

std::vector<double> histogram_bounds_seconds() {
  std::vector<double> out;
  for (int e = kFirstExp; e <= kLastExp; ++e) out.push_back(seconds(std::uint64_t{1} << e));
  return out;
}

prometheus::ClientMetric::Histogram to_prometheus(const HistogramSnapshot& h) {
  prometheus::ClientMetric::Histogram out;
  out.sample_count = h.count();
  out.sample_sum = static_cast<double>(h.sum_ns) * 1e-9;
  for (int e = kFirstExp; e <= kLastExp; ++e) {
    const std::uint64_t bound_ns = std::uint64_t{1} << e;
    out.bucket.push_back({h.count_below(bound_ns), seconds(bound_ns)});
  }
  out.bucket.push_back({out.sample_count, INFINITY});
  return out;
}

}  // namespace tpool::metrics
