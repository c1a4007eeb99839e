// The collector over a real Pool: a stall driven by an injected clock and a
// manual watchdog tick shows in the families, with the names, types and
// labels of docs/metrics.md; sources left null are left out.
#include <gtest/gtest.h>
#include <prometheus/text_serializer.h>

#include <atomic>
#include <latch>

#include "tpool/metrics/exporter.h"

namespace tpool::metrics {
namespace {

using namespace std::chrono_literals;

class TestClock final : public tpool::Clock {
 public:
  std::chrono::nanoseconds now() const noexcept override {
    return std::chrono::nanoseconds(ns_.load());
  }
  void advance(std::chrono::nanoseconds d) { ns_.fetch_add(d.count()); }

 private:
  std::atomic<std::int64_t> ns_{1'000'000'000};
};

const prometheus::MetricFamily* family(const std::vector<prometheus::MetricFamily>& fs,
                                       const std::string& name) {
  for (const auto& f : fs) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

// The value of the one sample of `name` whose labels include all of `want`.
double sample(const std::vector<prometheus::MetricFamily>& fs, const std::string& name,
              std::vector<prometheus::ClientMetric::Label> want = {}) {
  const auto* f = family(fs, name);
  if (f == nullptr) return -1;
  for (const auto& m : f->metric) {
    bool all = true;
    for (const auto& w : want) {
      all = all && std::find(m.label.begin(), m.label.end(), w) != m.label.end();
    }
    if (all) return f->type == prometheus::MetricType::Counter ? m.counter.value : m.gauge.value;
  }
  return -1;
}

struct Held {
  std::latch started{1};
  std::latch gate{1};
  static void run(void* p) {
    auto* h = static_cast<Held*>(p);
    h->started.count_down();
    h->gate.wait();
  }
};

TEST(Collector, PoolStallAndOverflowShowInTheFamilies) {
  TestClock clock;
  Config c;
  c.min_threads = c.max_threads = 1;
  c.max_overflow_workers = 1;
  c.watchdog_interval = 1ms;  // the test ticks
  c.blocking_promotion_timeout = 100ms;
  c.watchdog_driver = WatchdogDriver::kManual;
  c.clock = &clock;
  c.queue_capacity = 1024;
  auto pool = Pool::create(c);
  ASSERT_TRUE(pool.ok()) << pool.status().message();
  Pool& p = *pool.value();

  Collector collector({&p, nullptr, nullptr, nullptr, "9.9.9"});
  auto before = collector.Collect();
  EXPECT_EQ(sample(before, "tpoold_watchdog_stalls_total"), 0);
  EXPECT_EQ(sample(before, "tpoold_overflow_workers_spawned_total"), 0);
  EXPECT_EQ(sample(before, "tpoold_overflow_workers_max"), 1);
  EXPECT_EQ(sample(before, "tpoold_pool_descriptors_capacity"), 1024);

  Held held;
  ASSERT_TRUE(p.submit({&Held::run, &held}).ok());
  held.started.wait();
  clock.advance(150ms);
  p.watchdog_tick();

  auto during = collector.Collect();
  EXPECT_EQ(sample(during, "tpoold_watchdog_stalls_total"), 1);
  EXPECT_EQ(sample(during, "tpoold_watchdog_stalled_workers"), 1);
  EXPECT_EQ(sample(during, "tpoold_overflow_workers_spawned_total"), 1);
  EXPECT_EQ(sample(during, "tpoold_pool_workers", {{"kind", "overflow"}, {"lane", "default"}}),
            sample(during, "tpoold_overflow_workers"));
  EXPECT_EQ(sample(during, "tpoold_pool_workers", {{"kind", "core"}, {"lane", "default"}}), 1);
  EXPECT_EQ(sample(during, "tpoold_pool_workers", {{"kind", "overflow"}, {"lane", "blocking"}}), 0);
  EXPECT_EQ(sample(during, "tpoold_pool_descriptors_live"), 1);
  EXPECT_EQ(sample(during, "tpoold_pool_workers_busy"), 1);
  EXPECT_EQ(sample(during, "tpoold_build_info", {{"version", "9.9.9"}}), 1);
  held.gate.count_down();
  ASSERT_TRUE(p.shutdown(ShutdownMode::kDrain, 30s).ok());

  auto after = collector.Collect();
  EXPECT_EQ(sample(after, "tpoold_pool_tasks_submitted_total"), 1);
  EXPECT_EQ(sample(after, "tpoold_pool_tasks_ended_total", {{"outcome", "completed"}}), 1);
  const auto* run = family(after, "tpoold_job_run_seconds");
  ASSERT_NE(run, nullptr);
  EXPECT_EQ(run->type, prometheus::MetricType::Histogram);
  ASSERT_EQ(run->metric.size(), 2u);  // one per lane
  EXPECT_EQ(run->metric[0].label,
            (std::vector<prometheus::ClientMetric::Label>{{"lane", "default"}}));
  EXPECT_EQ(run->metric[0].histogram.sample_count, 1u);
  EXPECT_EQ(run->metric[1].histogram.sample_count, 0u);

  // No engine, host or rpc: their families are left out, not zero.
  EXPECT_EQ(family(after, "tpoold_jobs_completed_total"), nullptr);
  EXPECT_EQ(family(after, "tpoold_plugins_loaded"), nullptr);
  EXPECT_EQ(family(after, "tpoold_grpc_streams_active"), nullptr);
  EXPECT_NE(family(after, "process_resident_memory_bytes"), nullptr);

  // The text the endpoint serves: counters end in _total, gauges do not.
  const std::string text = prometheus::TextSerializer().Serialize(after);
  EXPECT_NE(text.find("# TYPE tpoold_watchdog_stalls_total counter"), std::string::npos) << text;
  EXPECT_NE(text.find("tpoold_watchdog_stalls_total 1"), std::string::npos) << text;
  for (const auto& f : after) {
    EXPECT_EQ(f.name.ends_with("_total"), f.type == prometheus::MetricType::Counter) << f.name;
    EXPECT_FALSE(f.help.empty()) << f.name;
  }
}

}  // namespace
}  // namespace tpool::metrics
