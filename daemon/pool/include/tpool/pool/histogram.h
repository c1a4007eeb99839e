// LatencyHistogram: a lock-free log-linear histogram of durations in ns.
//
// Buckets: values below 2^kMinExp ns share bucket 0; above it each power of
// two [2^e, 2^(e+1)) is split into kSubBuckets linear sub-buckets, up to
// 2^kMaxExp ns (~137 s); larger values go to the last bucket. With 8
// sub-buckets the relative error of a percentile is at most 12.5%, from 64 ns
// to 137 s, which covers the 100 ns .. 100 s range the pool reports.
//
// Each histogram has a single writer (one worker) that adds with relaxed
// load+store pairs (no read-modify-write on the hot path); readers (stats())
// load each bucket relaxed and may see a snapshot torn across buckets, which
// is fine for monitoring: every count is eventually visible.
#pragma once

#include <array>
#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>

namespace tpool {

struct HistogramSnapshot;

class LatencyHistogram {
 public:
  static constexpr int kMinExp = 6;   // 64 ns
  static constexpr int kMaxExp = 37;  // 2^37 ns ~ 137 s
  static constexpr int kSubBucketBits = 3;
  static constexpr int kSubBuckets = 1 << kSubBucketBits;
  static constexpr std::size_t kBuckets = 1 + (kMaxExp - kMinExp) * kSubBuckets + 1;

  static constexpr std::size_t bucket_of(std::uint64_t ns) noexcept {
    if (ns < (std::uint64_t{1} << kMinExp)) return 0;
    const int e = 63 - std::countl_zero(ns);
    if (e >= kMaxExp) return kBuckets - 1;
    const auto sub = static_cast<std::size_t>((ns >> (e - kSubBucketBits)) & (kSubBuckets - 1));
    return 1 + static_cast<std::size_t>(e - kMinExp) * kSubBuckets + sub;
  }
  // Exclusive upper bound of bucket i, in ns (UINT64_MAX for the last).
  static constexpr std::uint64_t upper_bound_ns(std::size_t i) noexcept {
    if (i == 0) return std::uint64_t{1} << kMinExp;
    if (i >= kBuckets - 1) return UINT64_MAX;
    const std::size_t k = i - 1;
    const int e = kMinExp + static_cast<int>(k / kSubBuckets);
    const std::uint64_t sub = k % kSubBuckets;
    return (std::uint64_t{1} << e) + ((sub + 1) << (e - kSubBucketBits));
  }

  // Single writer.
  void record(std::uint64_t ns) noexcept {
    bump(counts_[bucket_of(ns)], 1);
    bump(sum_ns_, ns);
  }
  void add_to(HistogramSnapshot& out) const noexcept;

 private:
  static void bump(std::atomic<std::uint64_t>& a, std::uint64_t v) noexcept {
    // Relaxed load+store, not fetch_add: this histogram has one writer.
    a.store(a.load(std::memory_order_relaxed) + v, std::memory_order_relaxed);
  }
  std::array<std::atomic<std::uint64_t>, kBuckets> counts_{};
  std::atomic<std::uint64_t> sum_ns_{0};
};

// A merged, plain copy for readers.
struct HistogramSnapshot {
  std::array<std::uint64_t, LatencyHistogram::kBuckets> counts{};
  std::uint64_t sum_ns = 0;

  std::uint64_t count() const noexcept;
  // The upper bound (ns) of the bucket holding quantile q in [0, 1]; 0 if empty.
  std::uint64_t percentile_ns(double q) const noexcept;
  // Count of recorded values < bound_ns, rounded to bucket bounds (for
  // exporting cumulative buckets at chosen boundaries).
  std::uint64_t count_below(std::uint64_t bound_ns) const noexcept;
  HistogramSnapshot& operator+=(const HistogramSnapshot& o) noexcept;
};

}  // namespace tpool
