// Reload while 10k jobs are in flight. Every job takes its HandlerRef when it
// is accepted (as the daemon does), before the reload; four of them are held
// inside the plugin (in its progress call) while the file is replaced and the
// host reloads, the other 9996 wait in the queue. None fails, all of them run
// version 1, new jobs get version 2, and version 1's library is closed (its
// fini runs) exactly when the last reference to it is dropped.
#include <gtest/gtest.h>

#include <atomic>
#include <fstream>
#include <latch>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "plugin_test_support.h"
#include "tpool/plugin_host/host.h"

namespace tpool::plugin_host {
namespace {

using testing::LogRecorder;
using testing::TempDir;
using testing::TestServices;

// Distinct staging copies of versioned.so mapped into this process right now
// (/proc/self/maps): what dlclose really unmapped, beyond the host's counter.
std::size_t mapped_copies_of_versioned() {
  std::ifstream maps("/proc/self/maps");
  std::set<std::string> paths;
  for (std::string line; std::getline(maps, line);) {
    auto at = line.find("/tpool-plugin.");
    if (at != std::string::npos && line.find(".versioned.so", at) != std::string::npos)
      paths.insert(line.substr(at));
  }
  return paths.size();
}

const std::string kV1 = std::string(TPOOL_IT_PLUGIN_DIR) + "/versioned_v1.so";
const std::string kV2 = std::string(TPOOL_IT_PLUGIN_DIR) + "/versioned_v2.so";

TEST(Reload, TenThousandJobsInFlightNoneFailsOldVersionClosesAfterItsLastJob) {
  constexpr std::size_t kJobs = 10000;
  constexpr std::size_t kWorkers = 4;
  TempDir dir;
  dir.add(kV1, "versioned.so");
  LogRecorder log;
  auto loaded = Host::load(testing::config_for({dir.str()}, log, /*abort=*/true));
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  std::unique_ptr<Host> host = std::move(loaded).value();

  // Accept all jobs: each holds a reference to version 1.
  std::vector<HandlerRef> accepted(kJobs);
  for (auto& ref : accepted) ref = host->find("versioned");
  ASSERT_EQ(accepted[0].info().plugin_version, "1.0.0");
  EXPECT_EQ(mapped_copies_of_versioned(), 1u);

  std::latch held(kWorkers);  // the first kWorkers jobs are inside the plugin
  std::latch gate(1);         // opened after the reload
  std::atomic<std::size_t> next{0};
  std::vector<InvokeResult> results(kJobs);
  std::vector<std::thread> workers;
  for (std::size_t w = 0; w < kWorkers; ++w) {
    workers.emplace_back([&] {
      for (std::size_t i; (i = next.fetch_add(1, std::memory_order_relaxed)) < kJobs;) {
        TestServices services(host.get());
        if (i < kWorkers) {
          services.on_progress = [&](double, std::string_view) {
            held.count_down();
            gate.wait();
          };
        }
        results[i] = host->invoke(accepted[i], std::to_string(i), services);
      }
    });
  }

  // Meanwhile new jobs keep arriving: each looks its handler up when it is
  // accepted. Before the reload returns they may get either version; after,
  // only version 2.
  std::atomic<bool> stop{false};
  std::atomic<bool> reloaded{false};
  std::atomic<std::size_t> arrivals{0}, arrival_failures{0}, stale_after_reload{0};
  std::thread arriving([&] {
    while (!stop.load(std::memory_order_acquire)) {
      bool after = reloaded.load(std::memory_order_acquire);
      HandlerRef ref = host->find("versioned");
      TestServices services(host.get());
      InvokeResult r = host->invoke(ref, "new", services);
      arrivals.fetch_add(1, std::memory_order_relaxed);
      if (!r.ok()) arrival_failures.fetch_add(1, std::memory_order_relaxed);
      if (after && r.output != "v2:new") stale_after_reload.fetch_add(1, std::memory_order_relaxed);
    }
  });

  held.wait();
  dir.replace(kV2, "versioned.so");
  Status s = host->reload();
  reloaded.store(true, std::memory_order_release);
  ASSERT_TRUE(s.ok()) << s.message();
  {
    auto c = host->counters();
    EXPECT_EQ(c.reloads, 1u);
    EXPECT_EQ(c.libraries_open, 2u);  // v1 still serves the in-flight jobs
    EXPECT_EQ(c.libraries_closed, 0u);
    EXPECT_FALSE(log.contains("versioned v1 fini"));
    EXPECT_EQ(mapped_copies_of_versioned(), 2u);
    HandlerRef fresh = host->find("versioned");
    EXPECT_EQ(fresh.info().plugin_version, "2.0.0");
    EXPECT_EQ(fresh.info().generation, 2u);
    TestServices services(host.get());
    EXPECT_EQ(host->invoke(fresh, "after", services).output, "v2:after");
  }
  gate.count_down();
  for (auto& t : workers) t.join();
  // Let new arrivals run at least once against version 2 before stopping.
  std::size_t seen = arrivals.load();
  while (arrivals.load() < seen + 2) std::this_thread::yield();
  stop.store(true, std::memory_order_release);
  arriving.join();

  for (std::size_t i = 0; i < kJobs; ++i) {
    ASSERT_TRUE(results[i].ok()) << "job " << i << ": " << results[i].message;
    ASSERT_EQ(results[i].output, "v1:" + std::to_string(i)) << "job " << i;
  }
  EXPECT_EQ(arrival_failures.load(), 0u);
  EXPECT_EQ(stale_after_reload.load(), 0u);

  // Every job has ended but still holds its reference: v1 stays loaded until
  // the last one is dropped, then closes exactly then.
  EXPECT_EQ(host->counters().libraries_closed, 0u);
  HandlerRef last = accepted.back();
  accepted.clear();
  EXPECT_EQ(host->counters().libraries_closed, 0u);
  EXPECT_FALSE(log.contains("versioned v1 fini"));
  last = HandlerRef();
  auto c = host->counters();
  EXPECT_EQ(c.libraries_closed, 1u);
  EXPECT_EQ(c.libraries_open, 1u);
  EXPECT_TRUE(log.contains("versioned v1 fini"));
  EXPECT_FALSE(log.contains("versioned v2 fini"));
  EXPECT_EQ(c.handler_failures, 0u);
  EXPECT_EQ(mapped_copies_of_versioned(), 1u);  // v1 is really unmapped

  host.reset();  // v2 closes with the host's registry
  EXPECT_TRUE(log.contains("versioned v2 fini"));
}

TEST(Reload, UnchangedFilesAreLoadedFreshAndInitRunsAgain) {
  TempDir dir;
  dir.add(kV1, "versioned.so");
  LogRecorder log;
  auto loaded = Host::load(testing::config_for({dir.str()}, log, /*abort=*/true));
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  auto host = std::move(loaded).value();
  HandlerRef before = host->find("versioned");
  ASSERT_TRUE(host->reload().ok());
  HandlerRef after = host->find("versioned");
  EXPECT_EQ(before.info().generation, 1u);
  EXPECT_EQ(after.info().generation, 2u);
  EXPECT_EQ(host->counters().libraries_open, 2u);
  before = HandlerRef();
  EXPECT_EQ(host->counters().libraries_closed, 1u);
  TestServices services(host.get());
  EXPECT_EQ(host->invoke(after, "x", services).output, "v1:x");
}

TEST(Reload, NewConfigurationAddsAndRemovesDirectories) {
  TempDir a, b;
  a.add(kV1, "versioned.so");
  b.add(std::string(TPOOL_EXAMPLE_PLUGIN_DIR) + "/echo.so");
  LogRecorder log;
  auto loaded = Host::load(testing::config_for({a.str()}, log, /*abort=*/true));
  ASSERT_TRUE(loaded.ok());
  auto host = std::move(loaded).value();
  EXPECT_FALSE(host->find("echo"));
  ASSERT_TRUE(host->reload(testing::config_for({b.str()}, log, /*abort=*/true)).ok());
  EXPECT_TRUE(host->find("echo"));
  EXPECT_FALSE(host->find("versioned"));
  EXPECT_EQ(host->counters().libraries_closed, 1u);  // v1 had no job in flight
}

}  // namespace
}  // namespace tpool::plugin_host
