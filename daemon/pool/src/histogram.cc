#include "tpool/pool/histogram.h"

#include <algorithm>
#include <cmath>

namespace tpool {

void LatencyHistogram::add_to(HistogramSnapshot& out) const noexcept {
  for (std::size_t i = 0; i < kBuckets; ++i) {
    out.counts[i] += counts_[i].load(std::memory_order_relaxed);  // monitoring: stale is fine
  }
  out.sum_ns += sum_ns_.load(std::memory_order_relaxed);
}

std::uint64_t HistogramSnapshot::count() const noexcept {
  std::uint64_t n = 0;
  for (auto c : counts) n += c;
  return n;
}

std::uint64_t HistogramSnapshot::percentile_ns(double q) const noexcept {
  const std::uint64_t total = count();
  if (total == 0) return 0;
  q = std::clamp(q, 0.0, 1.0);
  const auto rank = std::max<std::uint64_t>(1, static_cast<std::uint64_t>(std::ceil(q * total)));
  std::uint64_t seen = 0;
  for (std::size_t i = 0; i < counts.size(); ++i) {
    seen += counts[i];
    if (seen >= rank) return LatencyHistogram::upper_bound_ns(i);
  }
  return LatencyHistogram::upper_bound_ns(counts.size() - 1);
}

std::uint64_t HistogramSnapshot::count_below(std::uint64_t bound_ns) const noexcept {
  std::uint64_t n = 0;
  for (std::size_t i = 0; i < counts.size(); ++i) {
    if (LatencyHistogram::upper_bound_ns(i) > bound_ns) break;
    n += counts[i];
  }
  return n;
}

HistogramSnapshot& HistogramSnapshot::operator+=(const HistogramSnapshot& o) noexcept {
  for (std::size_t i = 0; i < counts.size(); ++i) counts[i] += o.counts[i];
  sum_ns += o.sum_ns;
  return *this;
}

}  // namespace tpool
