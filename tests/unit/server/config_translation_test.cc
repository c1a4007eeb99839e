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

TEST(ConfigTranslation, TheSearchingGateIsOffUnlessTurnedOn) {
  EXPECT_FALSE(parsed("").pool_config().searching_gate);
  EXPECT_TRUE(parsed("[pool]\nsearching_gate = true\n").pool_config().searching_gate);
  auto bad = parse_config("[pool]\nsearching_gate = 1\n", "test.toml");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("pool.searching_gate must be true or false"),
            std::string::npos)
      << bad.status().message();
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

TEST(ConfigTranslation, IsolationDefaultsAndPerPluginOverridesReachTheHost) {
  // The defaults: every plugin in_process, no per-plugin table.
  plugin_host::HostConfig h = parsed("").host_config();
  EXPECT_EQ(h.isolation.mode, plugin_host::IsolationMode::kInProcess);
  EXPECT_TRUE(h.plugin_isolation.empty());
  EXPECT_TRUE(static_cast<bool>(h.isolation_factory));
  // A plugin's table takes the section's values for the keys it does not
  // set, whichever comes first in the file.
  DaemonConfig c = parsed(
      "[plugins.isolation.hash]\nrunners = 3\nallow_syscalls = [\"socket\"]\n"
      "[plugins.isolation]\nmode = \"process\"\naddress_space_mb = 512\n"
      "cpu_seconds_per_job = 7\nopen_files = 128\ncrash_limit = 4\ncrash_window_ms = 5000\n");
  ASSERT_TRUE(c.validate().ok()) << c.validate().message();
  h = c.host_config();
  EXPECT_EQ(h.isolation.mode, plugin_host::IsolationMode::kProcess);
  EXPECT_EQ(h.isolation.runners, 2u);
  EXPECT_EQ(h.isolation.address_space_mb, 512u);
  EXPECT_EQ(h.isolation.cpu_seconds_per_job, 7u);
  EXPECT_EQ(h.isolation.open_files, 128u);
  EXPECT_EQ(h.isolation.crash_limit, 4u);
  EXPECT_EQ(h.isolation.crash_window, std::chrono::milliseconds(5000));
  ASSERT_EQ(h.plugin_isolation.count("hash"), 1u);
  const auto& hash = h.plugin_isolation.at("hash");
  EXPECT_EQ(hash.mode, plugin_host::IsolationMode::kProcess);
  EXPECT_EQ(hash.runners, 3u);
  EXPECT_EQ(hash.address_space_mb, 512u);
  EXPECT_EQ(hash.allow_syscalls, std::vector<std::string>{"socket"});
  // And back to in_process for one plugin.
  h = parsed(
          "[plugins.isolation]\nmode = \"process\"\n[plugins.isolation.echo]\n"
          "mode = \"in_process\"\n")
          .host_config();
  EXPECT_EQ(h.plugin_isolation.at("echo").mode, plugin_host::IsolationMode::kInProcess);
}

TEST(ConfigTranslation, IsolationMistakesNameTheKeyAndWhatToDo) {
  struct Case {
    const char* toml;
    const char* want;
  };
  for (const Case& k : {
           Case{"[plugins.isolation]\nmode = \"sandbox\"\n",
                "plugins.isolation.mode = 'sandbox' is not a mode; use \"in_process\""},
           Case{"[plugins.isolation.hash]\nmode = \"proc\"\n",
                "plugins.isolation.hash.mode = 'proc' is not a mode"},
           Case{"[plugins.isolation]\nrunners = 0\n", "plugins.isolation.runners = 0"},
           Case{"[plugins.isolation.hash]\nrunners = 1000\n",
                "plugins.isolation.hash.runners = 1000"},
           Case{"[plugins.isolation]\naddress_space_mb = 10\n",
                "plugins.isolation.address_space_mb = 10 is too small"},
           Case{"[plugins.isolation]\nopen_files = 3\n", "plugins.isolation.open_files = 3"},
           Case{"[plugins.isolation]\ncrash_window_ms = 1\n",
                "plugins.isolation.crash_window_ms = 1"},
           Case{"[plugins.isolation.hash]\nallow_syscalls = [\"sockit\"]\n",
                "plugins.isolation.hash.allow_syscalls names 'sockit', which is not a system "
                "call"},
       }) {
    DaemonConfig c = parsed(k.toml);
    Status s = c.validate();
    ASSERT_FALSE(s.ok()) << k.toml;
    EXPECT_NE(s.message().find(k.want), std::string::npos) << s.message();
  }
  for (const Case& k : {
           Case{"[plugins.isolation]\nmdoe = \"process\"\n",
                "unknown key plugins.isolation.mdoe; the keys of [plugins.isolation]"},
           Case{"[plugins.isolation.hash]\nrunner = \"/x\"\n",
                "unknown key plugins.isolation.hash.runner"},
           Case{"[plugins.isolation]\nrunners = \"two\"\n",
                "plugins.isolation.runners must be an integer"},
           Case{"[plugins.isolation]\nallow_syscalls = \"socket\"\n",
                "plugins.isolation.allow_syscalls must be an array of strings"},
       }) {
    auto bad = parse_config(k.toml, "test.toml");
    ASSERT_FALSE(bad.ok()) << k.toml;
    EXPECT_NE(bad.status().message().find(k.want), std::string::npos) << bad.status().message();
  }
}

}  // namespace
}  // namespace tpool::server
