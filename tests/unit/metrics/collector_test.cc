// The collector over a real Pool: a stall driven by an injected clock and a
// manual watchdog tick shows in the families, with the names, types and
// labels of docs/metrics.md; parts of the snapshot left empty are left out;
// every field of a synthetic snapshot lands in its own series.
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

  Collector collector({[&p] { return Snapshot{.pool = p.stats()}; }, "9.9.9"});
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

TEST(Collector, EverySnapshotFieldFeedsItsOwnSeries) {
  // Each field of the engine, plugin-host and gRPC parts holds a different
  // value, so a field printed in the wrong series, or not at all, fails.
  Snapshot s;
  JobsSnapshot& j = s.jobs.emplace();
  j.handlers = {{"echo", 1, 2, 3, 4, 5}, {"hash", 0, 0, 0, 0, 0}};
  j.rejected_invalid = 11;
  j.rejected_not_found = 12;
  j.rejected_full = 13;
  j.rejected_draining = 14;
  j.rejected_conflict = 15;
  j.rejected_unhealthy = 150;
  j.deduplicated = 16;
  j.in_progress = 17;
  j.result_store_entries = 18;
  j.result_store_bytes = 19;
  j.result_store_expired = 20;
  j.handlers_running_after_end = 21;
  j.retried = 22;
  j.scheduled = 23;
  j.draining = true;
  PluginsSnapshot& p = s.plugins.emplace();
  p.plugins_loaded = 31;
  p.handlers_registered = 32;
  p.load_failures = 33;
  p.reloads = 34;
  p.reload_failures = 35;
  p.libraries_open = 36;
  p.invocations = 37;
  p.handler_exceptions = 38;
  p.output_too_large = 39;
  p.ignored_cancellation = 40;
  s.grpc = GrpcSnapshot{41, 42, 43, 44, 45};
  Collector collector({[&s] { return s; }, "1.2.3"});
  const auto fs = collector.Collect();

  EXPECT_EQ(sample(fs, "tpoold_jobs_submitted_total", {{"handler", "echo"}}), 1);
  EXPECT_EQ(sample(fs, "tpoold_jobs_submitted_total", {{"handler", "hash"}}), 0);
  const std::pair<const char*, double> outcomes[] = {
      {"succeeded", 2}, {"failed", 3}, {"cancelled", 4}, {"timed_out", 5}};
  for (const auto& [outcome, want] : outcomes) {
    EXPECT_EQ(
        sample(fs, "tpoold_jobs_completed_total", {{"handler", "echo"}, {"outcome", outcome}}),
        want)
        << outcome;
  }
  const std::pair<const char*, double> reasons[] = {
      {"invalid_argument", 11},     {"not_found", 12}, {"exhausted", 13}, {"draining", 14},
      {"idempotency_conflict", 15}, {"unhealthy", 150}};
  for (const auto& [reason, want] : reasons) {
    EXPECT_EQ(sample(fs, "tpoold_jobs_rejected_total", {{"reason", reason}}), want) << reason;
  }
  const std::pair<const char*, double> single[] = {
      {"tpoold_jobs_deduplicated_total", 16},
      {"tpoold_jobs_in_progress", 17},
      {"tpoold_result_store_entries", 18},
      {"tpoold_result_store_bytes", 19},
      {"tpoold_result_store_expired_total", 20},
      {"tpoold_handlers_running_after_end", 21},
      {"tpoold_jobs_retried_total", 22},
      {"tpoold_jobs_scheduled", 23},
      {"tpoold_draining", 1},
      {"tpoold_plugins_loaded", 31},
      {"tpoold_handlers_registered", 32},
      {"tpoold_plugin_load_failures_total", 33},
      {"tpoold_plugin_reloads_total", 34},
      {"tpoold_plugin_reload_failures_total", 35},
      {"tpoold_plugin_libraries_open", 36},
      {"tpoold_handler_invocations_total", 37},
      {"tpoold_handler_exceptions_total", 38},
      {"tpoold_handler_output_too_large_total", 39},
      {"tpoold_handler_ignored_cancellation_total", 40},
      {"tpoold_grpc_streams_active", 41},
      {"tpoold_grpc_streams_total", 42},
      {"tpoold_grpc_streams_rejected_total", 43},
      {"tpoold_stream_buffered_bytes", 44},
      {"tpoold_stream_unparsable_messages_total", 45},
  };
  for (const auto& [name, want] : single) EXPECT_EQ(sample(fs, name), want) << name;
  // No pool part: the pool's families are left out.
  EXPECT_EQ(family(fs, "tpoold_pool_workers"), nullptr);
  EXPECT_EQ(sample(fs, "tpoold_build_info", {{"version", "1.2.3"}}), 1);
}

TEST(Collector, AnEmptySourceServesBuildInfoAndProcessOnly) {
  Collector collector({{}, "1.2.3"});
  for (const auto& f : collector.Collect()) {
    EXPECT_TRUE(f.name == "tpoold_build_info" || f.name.starts_with("process_")) << f.name;
  }
}

}  // namespace
}  // namespace tpool::metrics
