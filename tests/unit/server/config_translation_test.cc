// DaemonConfig into each component's config (daemon/server/src/config.cc):
// one function per component, the pool's defaults left to the pool
// (tpool::Config::resolved), the daemon's one policy (blocking workers on top
// of the CPU workers) applied once.
#include <gtest/gtest.h>

#include <algorithm>
#include <thread>

#include "config.h"

namespace tpool::server {
namespace {

DaemonConfig parsed(const std::string& toml) {
  auto c = parse_config(toml, "test.toml");
  EXPECT_TRUE(c.ok()) << c.status().message();
  return c.ok() ? c.value() : DaemonConfig{};
}

TEST(ConfigTranslation, BlockingWorkersComeOnTopOfTheCpuWorkers) {
  DaemonConfig c = parsed("[pool]\nmax_threads = 3\nblocking_workers = 2\n");
  tpool::Config p = c.pool_config();
  EXPECT_EQ(p.max_threads, 5u);
  EXPECT_EQ(p.blocking_workers, 2u);
  EXPECT_EQ(p.backpressure, Backpressure::kReject);
  EXPECT_TRUE(c.validate().ok());
}

TEST(ConfigTranslation, ThePoolsDefaultsAreThePools) {
  DaemonConfig c = parsed("[pool]\nblocking_workers = 2\n");
  tpool::Config p = c.pool_config();
  // max_threads 0 is one CPU worker per core, as the pool computes it.
  tpool::Config cores;
  EXPECT_EQ(p.max_threads, cores.resolved().max_threads + 2);
  EXPECT_EQ(cores.resolved().max_threads,
            static_cast<std::size_t>(std::max(1u, std::thread::hardware_concurrency())));
  // min_threads 0 is left to the pool (every worker starts), not computed here.
  EXPECT_EQ(p.min_threads, 0u);
  EXPECT_EQ(p.resolved().min_threads, p.max_threads);
}

TEST(ConfigTranslation, NoBlockingWorkersOutsideLaneExtension) {
  DaemonConfig c =
      parsed("[pool]\nmax_threads = 4\nblocking_workers = 0\nscheduler = \"global_queue\"\n");
  EXPECT_EQ(c.pool_config().max_threads, 4u);
  EXPECT_EQ(c.pool_config().scheduler_variant, SchedulerVariant::kGlobalQueue);
}

TEST(ConfigTranslation, MinThreadsIsCappedAtTheWorkers) {
  DaemonConfig c = parsed("[pool]\nmax_threads = 2\nmin_threads = 9\nblocking_workers = 1\n");
  EXPECT_EQ(c.pool_config().min_threads, 3u);
  DaemonConfig d = parsed("[pool]\nmax_threads = 4\nmin_threads = 2\nblocking_workers = 1\n");
  EXPECT_EQ(d.pool_config().min_threads, 2u);
}

TEST(ConfigTranslation, EngineHostAndRpcGetTheirKeys) {
  DaemonConfig c = parsed(
      "[server]\nmax_payload_bytes = 1000\nmax_inflight_jobs = 10\ncancel_grace_ms = 7\n"
      "max_streams = 3\nstream_window = 5\nmax_message_bytes = 1048576\n"
      "max_output_bytes = 1000000\nstream_buffer_bytes = 4096\n"
      "[results]\nretention_ms = 1500\nmax_bytes = 2048\nmax_entries = 9\n"
      "[plugins]\ndirs = [\"/a\", \"/b\"]\nabort_on_load_error = false\n"
      "[plugins.config]\necho = \"loud\"\n");
  engine::EngineLimits e = c.engine_limits();
  EXPECT_EQ(e.max_payload_bytes, 1000u);
  EXPECT_EQ(e.max_inflight_jobs, 10u);
  EXPECT_EQ(e.cancel_grace, std::chrono::milliseconds(7));
  EXPECT_EQ(e.retention, std::chrono::milliseconds(1500));
  EXPECT_EQ(e.max_retained_bytes, 2048u);
  EXPECT_EQ(e.max_retained_entries, 9u);
  rpc::RpcLimits r = c.rpc_limits();
  EXPECT_EQ(r.max_streams, 3u);
  EXPECT_EQ(r.stream_window, 5u);
  EXPECT_EQ(r.max_message_bytes, 1048576u);
  EXPECT_EQ(r.stream_buffer_bytes, 4096u);
  plugin_host::HostConfig h = c.host_config();
  EXPECT_EQ(h.dirs, (std::vector<std::string>{"/a", "/b"}));
  EXPECT_FALSE(h.abort_on_load_error);
  EXPECT_EQ(h.plugin_config.at("echo"), "loud");
  EXPECT_EQ(h.max_output_bytes, 1000000u);
}

TEST(ConfigTranslation, TheStoreSectionGivesTheEngineItsDurableDefaults) {
  DaemonConfig c = parsed(
      "[store]\npath = \"/var/lib/tpoold/jobs.db\"\nmax_batch = 64\n"
      "[store.handlers.hash]\ndurable = true\n[store.handlers.echo]\ndurable = false\n");
  EXPECT_TRUE(c.store.enabled());
  EXPECT_EQ(c.store.path, "/var/lib/tpoold/jobs.db");
  EXPECT_EQ(c.store.max_batch, 64u);
  ASSERT_TRUE(c.validate().ok()) << c.validate().message();
  engine::EngineLimits e = c.engine_limits();
  EXPECT_FALSE(e.durable);
  EXPECT_EQ(e.handler_durable,
            (std::vector<std::pair<std::string, bool>>{{"echo", false}, {"hash", true}}));
  EXPECT_FALSE(parsed("").store.enabled());  // no store unless a path is given
}

TEST(ConfigTranslation, TheStoreSectionsMistakesSayWhatToDo) {
  // durable without a store: refused, naming the key to set.
  DaemonConfig c = parsed("[store]\ndurable = true\n");
  Status s = c.validate();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("store.path"), std::string::npos) << s.message();
  c = parsed("[store.handlers.echo]\ndurable = true\n");
  s = c.validate();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("store.handlers.echo.durable"), std::string::npos) << s.message();
  c = parsed("[store]\npath = \"x.db\"\nmax_batch = 0\n");
  EXPECT_FALSE(c.validate().ok());
  auto bad = parse_config("[store.handlers.echo]\nfast = true\n", "test.toml");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("one key: durable"), std::string::npos)
      << bad.status().message();
  bad = parse_config("[store]\npaht = \"x.db\"\n", "test.toml");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("paht"), std::string::npos) << bad.status().message();
}

}  // namespace
}  // namespace tpool::server
