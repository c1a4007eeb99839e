// tpoold's /metrics against the real thing: a real tpoold under load scraped
// over HTTP and linted by promtool, basic auth, and a real Prometheus server
// that scrapes the daemon and answers PromQL (issue 8, docs/metrics.md).
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <latch>
#include <regex>
#include <thread>

#include "daemon_process.h"
#include "metrics_test_util.h"

namespace tpool::testing {
namespace {

namespace fs = std::filesystem;

// A tpoold with metrics on an ephemeral loopback port.
struct MetricsDaemon {
  explicit MetricsDaemon(const TempDir& dir, const std::string& extra = "")
      : port_file(dir.file("metrics.port")),
        daemon("[metrics]\nlisten = \"127.0.0.1:0\"\nport_file = \"" + port_file + "\"\n" + extra) {
    if (daemon.started()) port = wait_port_file(port_file);
  }
  std::string port_file;
  DaemonProcess daemon;
  int port = 0;
};

grpc::Status execute(DaemonProcess& d, const tpool::v1::JobRequest& req,
                     tpool::v1::JobResult& out) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  return d.jobs().Execute(&ctx, req, &out);
}

// Runs n echo jobs from `threads` client threads; all must succeed.
void run_echo_jobs(DaemonProcess& d, int n, int threads) {
  std::atomic<int> next{0};
  std::atomic<int> ok{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t) {
    ts.emplace_back([&] {
      for (int i; (i = next.fetch_add(1)) < n;) {
        tpool::v1::JobResult r;
        if (execute(d, job("echo", "x" + std::to_string(i)), r).ok() &&
            r.state() == tpool::v1::JOB_STATE_SUCCEEDED) {
          ok.fetch_add(1);
        }
      }
    });
  }
  for (auto& t : ts) t.join();
  ASSERT_EQ(ok.load(), n);
}

const char* const kFamilies[] = {
    "tpoold_pool_workers",
    "tpoold_pool_workers_busy",
    "tpoold_pool_workers_parked",
    "tpoold_watchdog_stalls_total",
    "tpoold_watchdog_stalled_workers",
    "tpoold_overflow_workers_spawned_total",
    "tpoold_overflow_workers_retired_total",
    "tpoold_overflow_workers",
    "tpoold_overflow_workers_max",
    "tpoold_pool_queue_depth",
    "tpoold_pool_local_queue_depth_max",
    "tpoold_pool_descriptors_live",
    "tpoold_pool_descriptors_capacity",
    "tpoold_pool_steals_total",
    "tpoold_pool_stolen_tasks_total",
    "tpoold_pool_parks_total",
    "tpoold_pool_wakeups_no_work_total",
    "tpoold_pool_local_overflows_total",
    "tpoold_pool_tasks_submitted_total",
    "tpoold_pool_tasks_ended_total",
    "tpoold_pool_tasks_rejected_total",
    "tpoold_job_wait_seconds",
    "tpoold_job_run_seconds",
    "tpoold_jobs_submitted_total",
    "tpoold_jobs_completed_total",
    "tpoold_jobs_rejected_total",
    "tpoold_jobs_deduplicated_total",
    "tpoold_jobs_in_progress",
    "tpoold_jobs_retried_total",
    "tpoold_jobs_scheduled",
    "tpoold_result_store_entries",
    "tpoold_result_store_bytes",
    "tpoold_result_store_expired_total",
    "tpoold_draining",
    "tpoold_plugins_loaded",
    "tpoold_handlers_registered",
    "tpoold_plugin_load_failures_total",
    "tpoold_plugin_reloads_total",
    "tpoold_plugin_reload_failures_total",
    "tpoold_plugin_libraries_open",
    "tpoold_handler_invocations_total",
    "tpoold_handler_exceptions_total",
    "tpoold_handler_output_too_large_total",
    "tpoold_handler_ignored_cancellation_total",
    "tpoold_handlers_running_after_end",
    "tpoold_grpc_streams_active",
    "tpoold_grpc_streams_total",
    "tpoold_grpc_streams_rejected_total",
    "tpoold_stream_buffered_bytes",
    "tpoold_stream_unparsable_messages_total",
    "tpoold_build_info",
    "process_cpu_seconds_total",
    "process_resident_memory_bytes",
    "process_virtual_memory_bytes",
    "process_start_time_seconds",
    "process_open_fds",
    "process_max_fds",
    "process_threads",
};

// The family name of a counter as `# TYPE` prints it (prometheus-cpp prints
// the name with _total; promtool accepts both).
std::string type_of(const std::map<std::string, std::string>& types, const std::string& name) {
  if (auto it = types.find(name); it != types.end()) return it->second;
  return "";
}

TEST(Metrics, ScrapeUnderLoadIsCompleteAndPassesPromtool) {
  TempDir dir;
  MetricsDaemon m(dir, "[pool]\nmax_threads = 2\n");
  ASSERT_TRUE(m.daemon.started()) << m.daemon.log();
  ASSERT_GT(m.port, 0) << m.daemon.log();

  // Scrape while jobs run: the exporter must answer under load, and every
  // scrape must pass the linter.
  constexpr int kJobs = 2000;
  std::atomic<bool> done{false};
  std::vector<std::string> scrapes;
  std::thread scraper([&] {
    while (!done.load()) {
      HttpReply r = http_get(m.port, "/metrics");
      EXPECT_EQ(r.status, 200);
      scrapes.push_back(std::move(r.body));
    }
  });
  run_echo_jobs(m.daemon, kJobs, 4);
  done.store(true);
  scraper.join();
  ASSERT_FALSE(scrapes.empty());

  // After the jobs: the counts are exact.
  HttpReply after = http_get(m.port, "/metrics");
  ASSERT_EQ(after.status, 200);
  scrapes.push_back(after.body);
  auto v = parse_exposition(after.body);
  EXPECT_EQ(v["tpoold_jobs_submitted_total{handler=\"echo\"}"], kJobs);
  EXPECT_EQ(v["tpoold_jobs_completed_total{handler=\"echo\",outcome=\"succeeded\"}"], kJobs);
  EXPECT_EQ(v["tpoold_jobs_completed_total{handler=\"echo\",outcome=\"failed\"}"], 0);
  EXPECT_EQ(v["tpoold_jobs_in_progress"], 0);
  EXPECT_EQ(v["tpoold_pool_workers{kind=\"core\",lane=\"default\"}"], 2);
  EXPECT_GE(v["tpoold_plugins_loaded"], 1);
  EXPECT_EQ(v["tpoold_pool_descriptors_capacity"], 65536);
  EXPECT_GT(v["process_resident_memory_bytes"], 0);
  EXPECT_GT(v["process_open_fds"], 0);
  EXPECT_GT(v["process_start_time_seconds"], 1.7e9);
  int build_info = 0;
  for (const auto& [series, value] : v) {
    if (series.rfind("tpoold_build_info{", 0) == 0) {
      ++build_info;
      EXPECT_EQ(value, 1) << series;
      EXPECT_NE(series.find("version=\""), std::string::npos) << series;
    }
  }
  EXPECT_EQ(build_info, 1);
  // Every job went through the default lane's histograms: +Inf equals the
  // count, and the buckets never decrease.
  for (const char* h : {"tpoold_job_wait_seconds", "tpoold_job_run_seconds"}) {
    const std::string count = std::string(h) + "_count{lane=\"default\"}";
    EXPECT_GE(v[count], kJobs) << h;
    EXPECT_EQ(v[std::string(h) + "_bucket{lane=\"default\",le=\"+Inf\"}"], v[count]) << h;
    int buckets = 0;
    for (const auto& entry : v) {
      if (entry.first.rfind(std::string(h) + "_bucket{lane=\"default\"", 0) == 0) ++buckets;
    }
    EXPECT_EQ(buckets, 28) << h << ": 27 powers of two and +Inf";
    std::regex le(std::string(h) + R"re(_bucket\{lane="default",le="([^"]+)"\} (\S+))re");
    double prev = -1;
    double prev_le = -1;
    std::istringstream in(after.body);
    for (std::string line; std::getline(in, line);) {
      std::smatch mt;
      if (!std::regex_match(line, mt, le)) continue;
      const double bound = mt[1] == "+Inf" ? INFINITY : std::stod(mt[1]);
      const double c = std::stod(mt[2]);
      EXPECT_GT(bound, prev_le) << line;
      EXPECT_GE(c, prev) << line;
      prev_le = bound;
      prev = c;
    }
  }
  const auto types = exposition_types(after.body);
  for (const char* f : kFamilies) {
    const std::string name = f;
    const bool present = types.contains(name) || (name.ends_with("_total") &&
                                                  types.contains(name.substr(0, name.size() - 6)));
    EXPECT_TRUE(present) << "family " << name << " is missing from the scrape";
  }
  EXPECT_EQ(type_of(types, "tpoold_job_wait_seconds"), "histogram");
  EXPECT_EQ(type_of(types, "tpoold_pool_workers"), "gauge");
  EXPECT_EQ(type_of(types, "tpoold_jobs_completed_total"), "counter");

  // promtool lints the first, a middle and the last scrape: nothing to say.
  for (std::size_t i : {std::size_t{0}, scrapes.size() / 2, scrapes.size() - 1}) {
    const std::string in = dir.file("scrape.txt");
    std::ofstream(in) << scrapes[i];
    Child promtool({"promtool", "check", "metrics"}, dir.file("promtool.log"), in);
    auto rc = promtool.wait(std::chrono::seconds(60));
    EXPECT_EQ(rc, std::optional<int>(0)) << promtool.log();
    EXPECT_EQ(promtool.log(), "") << "promtool check metrics complained on scrape " << i;
  }
  EXPECT_EQ(m.daemon.stop(), std::optional<int>(0)) << m.daemon.log();
}

TEST(Metrics, PromtoolRejectsABadExposition) {
  // The lint above must be able to fail: a counter without _total and a
  // non-base unit are complaints.
  TempDir dir;
  const std::string in = dir.file("bad.txt");
  std::ofstream(in) << "# HELP tpoold_bad_milliseconds x\n# TYPE tpoold_bad_milliseconds counter\n"
                       "tpoold_bad_milliseconds 1\n";
  Child promtool({"promtool", "check", "metrics"}, dir.file("promtool.log"), in);
  auto rc = promtool.wait(std::chrono::seconds(60));
  ASSERT_TRUE(rc.has_value());
  EXPECT_NE(promtool.log(), "");
}

// The shape of a scrape: every `# HELP` and `# TYPE` line as served, and
// every sample's name and labels without its value, in the order served.
// tpoold_build_info's label values depend on the build and are masked;
// prometheus-cpp's own exposer_* families are its business, not tpoold's,
// and are left out.
std::string scrape_shape(const std::string& body) {
  std::ostringstream out;
  std::istringstream in(body);
  const std::regex label_value(R"re(="[^"]*")re");
  const std::regex exposer(R"re(^(# (HELP|TYPE) )?exposer_)re");
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || std::regex_search(line, exposer)) continue;
    if (!line.starts_with("#")) {
      line = line.substr(0, line.rfind(' '));  // drop the value
      if (line.starts_with("tpoold_build_info{"))
        line = std::regex_replace(line, label_value, "=*");
    }
    out << line << "\n";
  }
  return out.str();
}

TEST(Metrics, ScrapeShapeIsTheDocumentedOne) {
  // Names, types, help texts and labels of every series stay exactly what
  // scrape_shape.txt holds (docs/metrics.md lists the same families): a
  // change to any of them is a change for every dashboard and alert, and
  // must be made here on purpose. TPOOL_UPDATE_SCRAPE_SHAPE=1 rewrites the
  // file from the running daemon instead of comparing.
  TempDir dir;
  MetricsDaemon m(dir);
  ASSERT_TRUE(m.daemon.started()) << m.daemon.log();
  ASSERT_GT(m.port, 0) << m.daemon.log();
  run_echo_jobs(m.daemon, 3, 1);
  HttpReply r = http_get(m.port, "/metrics");
  ASSERT_EQ(r.status, 200);
  const std::string shape = scrape_shape(r.body);
  if (std::getenv("TPOOL_UPDATE_SCRAPE_SHAPE") != nullptr) {
    std::ofstream(TPOOL_SCRAPE_SHAPE_FILE) << shape;
  } else {
    const std::string want = read_file(TPOOL_SCRAPE_SHAPE_FILE);
    ASSERT_FALSE(want.empty()) << "cannot read " << TPOOL_SCRAPE_SHAPE_FILE;
    std::istringstream got_lines(shape);
    std::istringstream want_lines(want);
    int n = 1;
    for (std::string g, w;; ++n) {
      const bool more_g = static_cast<bool>(std::getline(got_lines, g));
      const bool more_w = static_cast<bool>(std::getline(want_lines, w));
      if (!more_g && !more_w) break;
      ASSERT_EQ(g, w) << "line " << n << " of " << TPOOL_SCRAPE_SHAPE_FILE
                      << " differs from the scrape (empty: one of them ended)";
    }
  }
  EXPECT_EQ(m.daemon.stop(), std::optional<int>(0)) << m.daemon.log();
}

TEST(Metrics, TheStoreFamiliesWithAStoreAndNotWithout) {
  // Issue 17: tpoold_store_* with [store] path set (every job durable here),
  // exact where they can be, and promtool-clean; absent without a store
  // (ScrapeShapeIsTheDocumentedOne's daemon has none, and its shape has no
  // tpoold_store_ line).
  TempDir dir;
  MetricsDaemon m(dir, "[store]\npath = \"" + dir.file("jobs.db") + "\"\ndurable = true\n");
  ASSERT_TRUE(m.daemon.started()) << m.daemon.log();
  ASSERT_GT(m.port, 0) << m.daemon.log();
  constexpr int kJobs = 200;
  run_echo_jobs(m.daemon, kJobs, 4);
  // The jobs' end records are committed after their results went out: poll
  // (bounded) until none is pending.
  std::map<std::string, double> v;
  std::string body;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  do {
    HttpReply r = http_get(m.port, "/metrics");
    ASSERT_EQ(r.status, 200);
    body = r.body;
    v = parse_exposition(body);
  } while (v["tpoold_store_pending_jobs"] != 0 && std::chrono::steady_clock::now() < deadline);
  EXPECT_EQ(v["tpoold_store_pending_jobs"], 0);
  EXPECT_EQ(v["tpoold_store_healthy"], 1);
  EXPECT_EQ(v["tpoold_store_replayed_jobs_total"], 0);
  EXPECT_EQ(v["tpoold_store_commit_errors_total"], 0);
  EXPECT_EQ(v["tpoold_store_refused_jobs_total"], 0);
  EXPECT_GT(v["tpoold_store_size_bytes"], 0);
  // Each job is three records (accepted, started, ended) in some commits.
  const double commits = v["tpoold_store_commit_duration_seconds_count"];
  EXPECT_GT(commits, 0);
  EXPECT_LE(commits, 3.0 * kJobs);
  EXPECT_EQ(v["tpoold_store_jobs_per_commit_count"], commits);
  EXPECT_EQ(v["tpoold_store_jobs_per_commit_sum"], 3.0 * kJobs);
  EXPECT_EQ(v["tpoold_store_commit_duration_seconds_bucket{le=\"+Inf\"}"], commits);
  EXPECT_EQ(type_of(exposition_types(body), "tpoold_store_commit_duration_seconds"), "histogram");
  const std::string in = dir.file("scrape.txt");
  std::ofstream(in) << body;
  Child promtool({"promtool", "check", "metrics"}, dir.file("promtool.log"), in);
  EXPECT_EQ(promtool.wait(std::chrono::seconds(60)), std::optional<int>(0)) << promtool.log();
  EXPECT_EQ(promtool.log(), "");
  EXPECT_EQ(m.daemon.stop(), std::optional<int>(0)) << m.daemon.log();
}

TEST(Metrics, PluginLibrariesOpenCountsTheLibrariesMappedAfterAReload) {
  // The host's libraries_open already falls when a library is closed; the
  // scrape used to subtract libraries_closed again, so after a reload with
  // no job in flight it read 0 while every new library was mapped.
  TempDir dir;
  MetricsDaemon m(dir);
  ASSERT_TRUE(m.daemon.started()) << m.daemon.log();
  ASSERT_GT(m.port, 0) << m.daemon.log();
  auto v = parse_exposition(http_get(m.port, "/metrics").body);
  const double loaded = v["tpoold_plugins_loaded"];
  ASSERT_GT(loaded, 0);
  EXPECT_EQ(v["tpoold_plugin_libraries_open"], loaded);

  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  tpool::v1::ReloadPluginsReply reply;
  ASSERT_TRUE(m.daemon.admin().ReloadPlugins(&ctx, {}, &reply).ok());
  v = parse_exposition(http_get(m.port, "/metrics").body);
  EXPECT_EQ(v["tpoold_plugin_reloads_total"], 1);
  EXPECT_EQ(v["tpoold_plugins_loaded"], loaded);
  EXPECT_EQ(v["tpoold_plugin_libraries_open"], loaded)
      << "no job holds the old generation, so only the new libraries are mapped";
  EXPECT_EQ(m.daemon.stop(), std::optional<int>(0)) << m.daemon.log();
}

TEST(Metrics, BasicAuthGuardsTheEndpoint) {
  TempDir dir;
  const std::string pw = dir.file("password");
  std::ofstream(pw) << "s3cret pass\n";
  MetricsDaemon m(dir, "basic_auth_user = \"prom\"\nbasic_auth_password_file = \"" + pw + "\"\n");
  ASSERT_TRUE(m.daemon.started()) << m.daemon.log();
  ASSERT_GT(m.port, 0) << m.daemon.log();
  EXPECT_EQ(http_get(m.port, "/metrics").status, 401);
  EXPECT_EQ(http_get(m.port, "/metrics", "prom:wrong").status, 401);
  EXPECT_EQ(http_get(m.port, "/metrics", "other:s3cret pass").status, 401);
  EXPECT_EQ(http_get(m.port, "/metrics", "prom:s3cret pas").status, 401);
  HttpReply ok = http_get(m.port, "/metrics", "prom:s3cret pass");
  EXPECT_EQ(ok.status, 200);
  EXPECT_NE(ok.body.find("tpoold_build_info"), std::string::npos);
  EXPECT_EQ(m.daemon.stop(), std::optional<int>(0)) << m.daemon.log();
}

TEST(Metrics, ScrapesSucceedWhileIdleConnectionsAreHeldOpen) {
  // Issue 13, item 8: two half-open connections used to take both of
  // CivetWeb's threads for its 30 s request timeout, and every scrape failed.
  // Here twelve clients connect and stall (half send nothing, half a partial
  // request line), renewed before every scrape, as a port scanner or a
  // stuck client would; each scrape must still be answered within
  // http_get's 10 s bound (Prometheus' default scrape timeout is 10 s).
  TempDir dir;
  MetricsDaemon m(dir);
  ASSERT_TRUE(m.daemon.started()) << m.daemon.log();
  ASSERT_GT(m.port, 0) << m.daemon.log();
  constexpr int kIdle = 12;
  constexpr int kScrapes = 4;
  std::vector<int> idle;
  for (int round = 0; round < kScrapes; ++round) {
    for (int fd : idle) ::close(fd);
    idle.clear();
    for (int i = 0; i < kIdle; ++i) {
      const int fd = idle_connection(m.port, i % 2 == 0 ? "" : "GET /metr");
      ASSERT_GE(fd, 0) << "idle connection " << i;
      idle.push_back(fd);
    }
    HttpReply r = http_get(m.port, "/metrics");
    EXPECT_EQ(r.status, 200) << "scrape " << round << " with " << kIdle << " idle connections open";
    EXPECT_NE(r.body.find("tpoold_build_info"), std::string::npos) << "scrape " << round;
  }
  for (int fd : idle) ::close(fd);
  EXPECT_EQ(m.daemon.stop(), std::optional<int>(0)) << m.daemon.log();
}

TEST(Metrics, APasswordFileWithCrlfLineEndsHasNoCrInThePassword) {
  // Issue 13: a password file written with CRLF made the CR part of the
  // password, so the password Prometheus sends never matched.
  TempDir dir;
  const std::string pw = dir.file("password");
  std::ofstream(pw, std::ios::binary) << "s3cret\r\nsecond line\r\n";
  MetricsDaemon m(dir, "basic_auth_user = \"prom\"\nbasic_auth_password_file = \"" + pw + "\"\n");
  ASSERT_TRUE(m.daemon.started()) << m.daemon.log();
  ASSERT_GT(m.port, 0) << m.daemon.log();
  EXPECT_EQ(http_get(m.port, "/metrics", "prom:s3cret").status, 200);
  EXPECT_EQ(http_get(m.port, "/metrics", "prom:s3cret\r").status, 401);
  EXPECT_EQ(m.daemon.stop(), std::optional<int>(0)) << m.daemon.log();
}

// A PromQL instant query through Prometheus' HTTP API; the value of a
// one-sample vector result, or nullopt (no data yet, or an error).
std::optional<double> promql(int port, const std::string& query) {
  std::string q;
  for (char c : query) {
    if (std::isalnum(static_cast<unsigned char>(c)) || c == '_') {
      q += c;
    } else {
      char b[4];
      std::snprintf(b, sizeof b, "%%%02X", static_cast<unsigned char>(c));
      q += b;
    }
  }
  HttpReply r = http_get(port, "/api/v1/query?query=" + q);
  if (r.status != 200) return std::nullopt;
  static const std::regex value(R"re("value":\[[0-9.e+]+,"([^"]+)"\])re");
  std::smatch mt;
  if (!std::regex_search(r.body, mt, value)) return std::nullopt;
  return std::stod(mt[1]);
}

TEST(Metrics, RealPrometheusSeesExactJobCountAndAStall) {
  TempDir dir;
  // A small default lane (one worker, no blocking lane whose workers could
  // help it and take the job) and a watchdog that promotes fast, so one
  // default-lane `sleep` job is a stall and spawns an overflow worker.
  MetricsDaemon m(dir,
                  "[pool]\nscheduler = \"work_stealing\"\nmax_threads = 1\nblocking_workers = 0\n"
                  "watchdog_interval_ms = 10\nblocking_promotion_timeout_ms = 50\n"
                  "max_overflow_workers = 1\n");
  ASSERT_TRUE(m.daemon.started()) << m.daemon.log();
  ASSERT_GT(m.port, 0) << m.daemon.log();

  const int prom_port = free_port();
  const std::string config = dir.file("prometheus.yml");
  std::ofstream(config) << "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                           "scrape_configs:\n  - job_name: tpoold\n    scrape_interval: 1s\n"
                           "    scrape_timeout: 900ms\n    static_configs:\n"
                           "      - targets: ['127.0.0.1:"
                        << m.port << "']\n";
  fs::create_directories(dir.path / "tsdb");
  Child prom({"prometheus", "--config.file=" + config,
              "--storage.tsdb.path=" + (dir.path / "tsdb").string(),
              "--web.listen-address=127.0.0.1:" + std::to_string(prom_port)},
             dir.file("prometheus.log"));
  ASSERT_TRUE(eventually([&] { return http_get(prom_port, "/-/ready").status == 200; }))
      << prom.log();

  constexpr int kJobs = 137;
  run_echo_jobs(m.daemon, kJobs, 3);
  // Poll until a scrape after the jobs lands: then the sum is exactly kJobs.
  std::optional<double> seen;
  EXPECT_TRUE(eventually([&] {
    seen = promql(prom_port, "sum(tpoold_jobs_completed_total)");
    return seen == static_cast<double>(kJobs);
  })) << "last value "
      << (seen ? std::to_string(*seen) : "none") << "\n"
      << prom.log();
  // Stable: a later scrape does not count more.
  EXPECT_EQ(promql(prom_port, "sum(tpoold_jobs_completed_total)"), std::optional<double>(kJobs));

  // The stall: a 600 ms sleep on the default lane's only worker.
  tpool::v1::JobRequest req = job("sleep", "600");
  req.set_lane(tpool::v1::LANE_DEFAULT);
  tpool::v1::JobResult r;
  ASSERT_TRUE(execute(m.daemon, req, r).ok());
  EXPECT_EQ(r.state(), tpool::v1::JOB_STATE_SUCCEEDED) << r.message();
  std::optional<double> stalls, spawned;
  EXPECT_TRUE(eventually([&] {
    stalls = promql(prom_port, "sum(tpoold_watchdog_stalls_total)");
    spawned = promql(prom_port, "sum(tpoold_overflow_workers_spawned_total)");
    return stalls >= 1.0 && spawned >= 1.0;
  })) << "stalls "
      << stalls.value_or(-1) << ", spawned " << spawned.value_or(-1) << "\n"
      << m.daemon.log();
  EXPECT_TRUE(eventually(
      [&] { return promql(prom_port, "sum(tpoold_jobs_completed_total)") == kJobs + 1.0; }));
  EXPECT_EQ(promql(prom_port, "tpoold_overflow_workers_max"), std::optional<double>(1));
  EXPECT_EQ(promql(prom_port, "up{job=\"tpoold\"}"), std::optional<double>(1));

  EXPECT_EQ(prom.stop(), std::optional<int>(0)) << prom.log();
  EXPECT_EQ(m.daemon.stop(), std::optional<int>(0)) << m.daemon.log();
}

}  // namespace
}  // namespace tpool::testing
