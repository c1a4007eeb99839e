// Process isolation (issue 18): a real tpoold whose plugins run in
// tpool-runner processes, against the isolation_bad test plugin (segfault,
// abort, a spin that ignores cancellation, an unchecked allocation at the
// address-space limit, a system call the seccomp filter denies) with the
// example plugins' jobs in flight on the same daemon. Each fault must end
// only its own job, with its sentence; the others end normally; the daemon
// keeps serving; the runner is replaced (a new pid). Every wait is on a
// condition (a job's end, a pid's exit through pidfd), bounded, so a hang is
// a failure, not a stuck test.
#include <dirent.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/syscall.h>

#include <fstream>
#include <regex>
#include <set>

#include "../metrics/metrics_test_util.h"
#include "daemon_process.h"

namespace tpool::testing {
namespace {

using tpool::v1::JOB_STATE_CANCELLED;
using tpool::v1::JOB_STATE_FAILED;
using tpool::v1::JOB_STATE_RUNNING;
using tpool::v1::JOB_STATE_SUCCEEDED;
using tpool::v1::JOB_STATE_TIMED_OUT;

// An AddressSanitizer build (make asan): its runners cannot run under an
// address-space limit (ASan's shadow memory), so they go without it, say so,
// and the tests of that limit are skipped.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kAsan = true;
#else
constexpr bool kAsan = false;
#endif

std::vector<std::string> bad_args() {
  return {"--plugin-dir", TPOOL_ISOLATION_PLUGIN_DIR};
}

// Every plugin in process mode; the sleep plugin with enough runners for the
// jobs kept in flight; isolation_bad with one runner (so "replaced" is one
// pid) and no crash limit unless a test sets one.
std::string process_config(const std::string& bad_extra = "") {
  return std::string("[metrics]\nenabled = false\n") +
         "[server]\ncancel_grace_ms = 300\n"
         "[pool]\nmax_threads = 4\nblocking_workers = 8\n"
         "[plugins.isolation]\nmode = \"process\"\nrunners = 2\n"
         "[plugins.isolation.sleep]\nrunners = 4\n"
         "[plugins.isolation.isolation_bad]\nrunners = 1\naddress_space_mb = 256\n" +
         (bad_extra.find("crash_limit") == std::string::npos ? "crash_limit = 0\n" : "") +
         bad_extra;
}

std::uint64_t submit(DaemonProcess& d, const std::string& handler, const std::string& payload,
                     std::uint64_t timeout_ms = 0) {
  grpc::ClientContext c;
  tpool::v1::JobRequest req = job(handler, payload);
  req.set_timeout_ms(timeout_ms);
  tpool::v1::JobRef ref;
  grpc::Status s = d.jobs().Submit(&c, req, &ref);
  EXPECT_TRUE(s.ok()) << handler << ": " << s.error_message();
  return ref.job_id();
}

// Cancels job `id` (the call must succeed).
void cancel(DaemonProcess& d, std::uint64_t id) {
  grpc::ClientContext c;
  tpool::v1::JobRef ref;
  ref.set_job_id(id);
  tpool::v1::CancelReply reply;
  grpc::Status s = d.jobs().Cancel(&c, ref, &reply);
  EXPECT_TRUE(s.ok()) << "Cancel of job " << id << ": " << s.error_message();
}

// Blocks until the job ends (Wait), bounded by a minute.
tpool::v1::JobResult wait_job(DaemonProcess& d, std::uint64_t id) {
  grpc::ClientContext c;
  c.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  tpool::v1::WaitRequest req;
  req.set_job_id(id);
  tpool::v1::JobResult r;
  grpc::Status s = d.jobs().Wait(&c, req, &r);
  EXPECT_TRUE(s.ok()) << s.error_message();
  return r;
}

tpool::v1::JobResult execute(DaemonProcess& d, const std::string& handler,
                             const std::string& payload, grpc::Status* status = nullptr) {
  grpc::ClientContext c;
  c.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  tpool::v1::JobResult r;
  grpc::Status s = d.jobs().Execute(&c, job(handler, payload), &r);
  if (status != nullptr) {
    *status = s;
  } else {
    EXPECT_TRUE(s.ok()) << handler << ": " << s.error_message();
  }
  return r;
}

pid_t runner_pid(DaemonProcess& d) {
  tpool::v1::JobResult r = execute(d, "iso_pid", "");
  EXPECT_EQ(r.state(), JOB_STATE_SUCCEEDED) << r.message();
  return static_cast<pid_t>(std::atoll(r.output().c_str()));
}

// The children of pid, from /proc (a runner's parent is tpoold).
std::vector<pid_t> children_of(pid_t parent) {
  std::vector<pid_t> out;
  DIR* dir = ::opendir("/proc");
  if (dir == nullptr) return out;
  while (dirent* e = ::readdir(dir)) {
    pid_t pid = static_cast<pid_t>(std::atol(e->d_name));
    if (pid <= 0) continue;
    std::ifstream stat("/proc/" + std::string(e->d_name) + "/stat");
    std::string line;
    std::getline(stat, line);
    auto close = line.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(line.substr(close + 2));
    char state = 0;
    long ppid = 0;
    rest >> state >> ppid;
    if (ppid == parent) out.push_back(pid);
  }
  ::closedir(dir);
  return out;
}

// A handle on a process that is not our child: its pidfd becomes readable
// when it exits (no polling of /proc, no sleep).
class PidWatch {
 public:
  explicit PidWatch(pid_t pid)
      : pid_(pid), fd_(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0))) {}
  ~PidWatch() {
    if (fd_ >= 0) ::close(fd_);
  }
  PidWatch(const PidWatch&) = delete;
  PidWatch& operator=(const PidWatch&) = delete;
  bool valid() const { return fd_ >= 0; }
  pid_t pid() const { return pid_; }
  bool exited_within(std::chrono::milliseconds t) const {
    pollfd p{fd_, POLLIN, 0};
    return ::poll(&p, 1, static_cast<int>(t.count())) == 1;
  }

 private:
  pid_t pid_;
  int fd_;
};

// Jobs of the example plugins kept in flight across a fault: sleep jobs
// (their runners are busy when the fault happens) and echo jobs.
struct Bystanders {
  std::vector<std::uint64_t> sleeps, echoes;
  void start(DaemonProcess& d) {
    for (int i = 0; i < 4; ++i) sleeps.push_back(submit(d, "sleep", "1500"));
    for (int i = 0; i < 8; ++i) echoes.push_back(submit(d, "echo", "e" + std::to_string(i)));
    // In flight for real: every sleep has reached its runner.
    for (auto id : sleeps) {
      ASSERT_TRUE(eventually([&] { return get(d, id).state() == JOB_STATE_RUNNING; },
                             std::chrono::seconds(30)))
          << d.log();
    }
  }
  void expect_all_succeeded(DaemonProcess& d) {
    for (auto id : sleeps) {
      tpool::v1::JobResult r = wait_job(d, id);
      EXPECT_EQ(r.state(), JOB_STATE_SUCCEEDED) << r.message();
      EXPECT_EQ(r.output(), "slept 1500 ms");
    }
    for (std::size_t i = 0; i < echoes.size(); ++i) {
      tpool::v1::JobResult r = wait_job(d, echoes[i]);
      EXPECT_EQ(r.state(), JOB_STATE_SUCCEEDED) << r.message();
      EXPECT_EQ(r.output(), "e" + std::to_string(i));
    }
  }
};

class IsolationTest : public ::testing::Test {
 protected:
  NoCoreFiles no_cores_;  // from the runners and daemons these tests crash
};

struct Fault {
  const char* handler;
  tpool::v1::JobState state;
  const char* message;  // a regex the job's message must match
};

class IsolationFaultTest : public IsolationTest, public ::testing::WithParamInterface<Fault> {};

TEST_P(IsolationFaultTest, OnlyTheBadJobFailsWithItsSentenceAndTheRunnerIsReplaced) {
  const Fault& f = GetParam();
  if (kAsan && std::string(f.handler) == "iso_hog") {
    GTEST_SKIP() << "an AddressSanitizer runner has no address-space limit";
  }
  DaemonProcess d(process_config(), bad_args());
  ASSERT_TRUE(d.started()) << d.log();
  const pid_t before = runner_pid(d);
  ASSERT_GT(before, 0);
  PidWatch old_runner(before);
  ASSERT_TRUE(old_runner.valid());

  Bystanders others;
  others.start(d);
  const std::string handler = f.handler;
  // The spin has a timeout: the hard time limit ends it.
  std::uint64_t bad = submit(d, handler, "", handler == "iso_spin" ? 300 : 0);
  tpool::v1::JobResult r = wait_job(d, bad);
  EXPECT_EQ(r.state(), f.state) << r.message();
  EXPECT_TRUE(std::regex_search(r.message(), std::regex(f.message))) << r.message() << "\n"
                                                                     << d.log();

  others.expect_all_succeeded(d);
  // The runner that held the job is gone and another serves the plugin.
  EXPECT_TRUE(old_runner.exited_within(std::chrono::seconds(30)));
  const pid_t after = runner_pid(d);
  EXPECT_GT(after, 0);
  EXPECT_NE(after, before);
  // The daemon keeps serving, in both lanes.
  EXPECT_EQ(execute(d, "echo", "still here").output(), "still here");
  EXPECT_EQ(execute(d, "sleep", "1").state(), JOB_STATE_SUCCEEDED);
  EXPECT_EQ(d.stop(), std::optional<int>(0)) << d.log();
}

INSTANTIATE_TEST_SUITE_P(
    Faults, IsolationFaultTest,
    ::testing::Values(
        Fault{"iso_segv", JOB_STATE_FAILED,
              "^handler 'iso_segv' crashed: SIGSEGV in runner [0-9]+ \\(plugin 'isolation_bad' "
              "1\\.0\\.0\\) on attempt 1; the runner was replaced$"},
        Fault{"iso_abort", JOB_STATE_FAILED,
              "^handler 'iso_abort' crashed: SIGABRT in runner [0-9]+ \\(plugin 'isolation_bad' "
              "1\\.0\\.0\\) on attempt 1; the runner was replaced$"},
        Fault{"iso_hog", JOB_STATE_FAILED,
              "^handler 'iso_hog' crashed: SIGSEGV in runner [0-9]+ with its address space at "
              "its limit of 256 MiB \\(address_space_mb\\): it ran out of memory"},
        Fault{"iso_socket", JOB_STATE_FAILED,
              "^handler 'iso_socket' called the system call 'socket', which the runner's "
              "seccomp filter denies: runner [0-9]+ was stopped on attempt 1 and replaced; if "
              "plugin 'isolation_bad' needs it, add \"socket\" to allow_syscalls in "
              "\\[plugins\\.isolation\\.isolation_bad\\]$"},
        Fault{"iso_spin", JOB_STATE_TIMED_OUT, "deadline|timed out|timeout"}),
    [](const ::testing::TestParamInfo<Fault>& i) { return std::string(i.param.handler); });

// Whether the supervisor said it killed runner `pid` at the hard time limit
// of a job past its deadline (cancel_grace_ms 300 in process_config).
bool log_says_killed_past_deadline(DaemonProcess& d, pid_t pid) {
  return d.log().find(
             "did not return within cancel_grace_ms (300 ms) after its job was past "
             "its deadline: runner " +
             std::to_string(pid) + " was killed and replaced") != std::string::npos;
}

// Batches (E7 in daemon/engine/src/engine.cc, W1 in tpool/isolation/wire.h):
// the jobs of one SubmitBatch for one isolated handler go to a runner
// together and wait in its queue, one running at a time. A fault in one of
// them must end that job only: the jobs before it keep their results (the
// runner sends what it holds before it dies), the jobs behind it never
// started and run on the next runner. isolation_bad has one runner, so the
// whole batch meets the fault in one runner.
struct BatchItem {
  std::string payload;
  std::uint64_t timeout_ms = 0;
};

std::vector<std::uint64_t> submit_batch(DaemonProcess& d, const std::string& handler,
                                        const std::vector<BatchItem>& items) {
  tpool::v1::JobBatch batch;
  for (const auto& i : items) {
    tpool::v1::JobRequest& r = *batch.add_jobs();
    r = job(handler, i.payload);
    r.set_timeout_ms(i.timeout_ms);
  }
  grpc::ClientContext ctx;
  tpool::v1::JobRefs refs;
  grpc::Status s = d.jobs().SubmitBatch(&ctx, batch, &refs);
  EXPECT_TRUE(s.ok()) << s.error_message();
  std::vector<std::uint64_t> ids;
  for (const auto& item : refs.items()) {
    EXPECT_EQ(item.code(), 0) << item.message();
    ids.push_back(item.job_id());
  }
  return ids;
}

// One iso_mixed job: after it the supervisor knows the handler's time (a
// few microseconds), so the next batches are as large as kMaxBatch allows
// (until then its jobs go one at a time).
void measure_iso_mixed(DaemonProcess& d) {
  EXPECT_EQ(execute(d, "iso_mixed", "ok:first").output(), "first");
}

// kBefore good jobs, the bad one, kAfter good jobs: one batch of iso_mixed.
constexpr int kBefore = 12;
constexpr int kAfter = 12;

std::vector<BatchItem> batch_around(const std::string& bad, std::uint64_t bad_timeout_ms = 0) {
  std::vector<BatchItem> items;
  for (int i = 0; i < kBefore + 1 + kAfter; ++i) {
    if (i == kBefore) {
      items.push_back({bad, bad_timeout_ms});
    } else {
      items.push_back({"ok:" + std::to_string(i)});
    }
  }
  return items;
}

// Every job but the bad one succeeded with its own output.
void expect_the_others_succeeded(DaemonProcess& d, const std::vector<std::uint64_t>& ids) {
  ASSERT_EQ(ids.size(), static_cast<std::size_t>(kBefore + 1 + kAfter));
  for (int i = 0; i < kBefore + 1 + kAfter; ++i) {
    if (i == kBefore) continue;
    tpool::v1::JobResult r = wait_job(d, ids[i]);
    EXPECT_EQ(r.state(), JOB_STATE_SUCCEEDED) << "job " << i << ": " << r.message();
    EXPECT_EQ(r.output(), std::to_string(i)) << "job " << i;
  }
}

class IsolationBatchCrashTest : public IsolationTest,
                                public ::testing::WithParamInterface<const char*> {};

TEST_P(IsolationBatchCrashTest, ACrashInABatchEndsOnlyItsJob) {
  const std::string bad = GetParam();
  DaemonProcess d(process_config(), bad_args());
  ASSERT_TRUE(d.started()) << d.log();
  const pid_t before = runner_pid(d);
  PidWatch old_runner(before);
  ASSERT_TRUE(old_runner.valid());
  measure_iso_mixed(d);
  std::vector<std::uint64_t> ids = submit_batch(d, "iso_mixed", batch_around(bad));
  ASSERT_EQ(ids.size(), static_cast<std::size_t>(kBefore + 1 + kAfter));
  tpool::v1::JobResult r = wait_job(d, ids[kBefore]);
  EXPECT_EQ(r.state(), JOB_STATE_FAILED) << r.message();
  const std::string sig = bad == "segv" ? "SIGSEGV" : "SIGABRT";
  EXPECT_TRUE(std::regex_search(
      r.message(),
      std::regex("^handler 'iso_mixed' crashed: " + sig + " in runner " + std::to_string(before) +
                 " \\(plugin 'isolation_bad' 1\\.0\\.0\\) on "
                 "attempt 1; the runner was replaced$")))
      << r.message() << "\n"
      << d.log();
  expect_the_others_succeeded(d, ids);
  EXPECT_TRUE(old_runner.exited_within(std::chrono::seconds(30)));
  EXPECT_NE(runner_pid(d), before);
  EXPECT_EQ(d.stop(), std::optional<int>(0)) << d.log();
}

INSTANTIATE_TEST_SUITE_P(Batch, IsolationBatchCrashTest, ::testing::Values("segv", "abort"),
                         [](const ::testing::TestParamInfo<const char*>& i) {
                           return std::string(i.param);
                         });

// The hard time limit in a batch: the spinner past its deadline has its
// runner killed cancel_grace_ms later; the jobs queued behind it in that
// runner had not started, and run on the next one.
TEST_F(IsolationTest, ASpinnerInABatchIsKilledAtItsTimeLimitAndTheJobsBehindItRunElsewhere) {
  DaemonProcess d(process_config(), bad_args());
  ASSERT_TRUE(d.started()) << d.log();
  const pid_t before = runner_pid(d);
  PidWatch old_runner(before);
  measure_iso_mixed(d);
  std::vector<std::uint64_t> ids = submit_batch(d, "iso_mixed", batch_around("spin", 200));
  ASSERT_EQ(ids.size(), static_cast<std::size_t>(kBefore + 1 + kAfter));
  EXPECT_EQ(wait_job(d, ids[kBefore]).state(), JOB_STATE_TIMED_OUT);
  expect_the_others_succeeded(d, ids);
  EXPECT_TRUE(old_runner.exited_within(std::chrono::seconds(30)));
  EXPECT_TRUE(eventually([&] { return log_says_killed_past_deadline(d, before); })) << d.log();
  EXPECT_NE(runner_pid(d), before);
  EXPECT_EQ(d.stop(), std::optional<int>(0)) << d.log();
}

// (W6 in wire.h) A batch-mate cancelled while it waits in the runner's queue
// is never given to its handler when its turn comes. The one here would crash
// the runner (segv) if it were called: the runner lives on, the job ends
// CANCELLED, and the job behind it runs in the same runner.
TEST_F(IsolationTest, ABatchMateCancelledWhileItWaitsInItsRunnerIsNeverCalled) {
  DaemonProcess d(process_config(), bad_args());
  ASSERT_TRUE(d.started()) << d.log();
  measure_iso_mixed(d);
  const pid_t before = runner_pid(d);
  // "late" holds the one runner until its deadline; the batch took the
  // others with it (E7): RUNNING in the engine, queued in the runner.
  std::vector<std::uint64_t> ids =
      submit_batch(d, "iso_mixed", {{"late", 1000}, {"segv"}, {"ok:after"}});
  ASSERT_EQ(ids.size(), 3u);
  ASSERT_TRUE(eventually([&] { return get(d, ids[1]).state() == JOB_STATE_RUNNING; }));
  cancel(d, ids[1]);
  EXPECT_EQ(wait_job(d, ids[0]).state(), JOB_STATE_TIMED_OUT);
  const tpool::v1::JobResult cancelled = wait_job(d, ids[1]);
  EXPECT_EQ(cancelled.state(), JOB_STATE_CANCELLED) << cancelled.message();
  EXPECT_EQ(cancelled.message().find("crashed"), std::string::npos) << cancelled.message();
  const tpool::v1::JobResult after = wait_job(d, ids[2]);
  EXPECT_EQ(after.state(), JOB_STATE_SUCCEEDED) << after.message();
  EXPECT_EQ(after.output(), "after");
  EXPECT_EQ(runner_pid(d), before) << d.log();  // never crashed, never replaced
  EXPECT_EQ(d.log().find("SIGSEGV"), std::string::npos) << d.log();
  EXPECT_EQ(d.stop(), std::optional<int>(0)) << d.log();
}

TEST_F(IsolationTest, TheSpinnerPastItsDeadlinePlusCancelGraceHasItsRunnerKilled) {
  DaemonProcess d(process_config(), bad_args());
  ASSERT_TRUE(d.started()) << d.log();
  const pid_t before = runner_pid(d);
  PidWatch old_runner(before);
  std::uint64_t id = submit(d, "iso_spin", "", 200);
  EXPECT_EQ(wait_job(d, id).state(), JOB_STATE_TIMED_OUT);
  // The engine answered at the deadline; the runner dies cancel_grace_ms
  // (300) later, and the supervisor says so.
  EXPECT_TRUE(old_runner.exited_within(std::chrono::seconds(30)));
  EXPECT_TRUE(eventually([&] { return log_says_killed_past_deadline(d, before); })) << d.log();
  EXPECT_NE(runner_pid(d), before);
  EXPECT_EQ(d.stop(), std::optional<int>(0)) << d.log();
}

TEST_F(IsolationTest, ACancelledSpinnerHasItsRunnerKilledAfterTheGrace) {
  DaemonProcess d(process_config(), bad_args());
  ASSERT_TRUE(d.started()) << d.log();
  const pid_t before = runner_pid(d);
  PidWatch old_runner(before);
  std::uint64_t id = submit(d, "iso_spin", "");
  ASSERT_TRUE(eventually([&] { return get(d, id).state() == JOB_STATE_RUNNING; }));
  cancel(d, id);
  EXPECT_EQ(wait_job(d, id).state(), JOB_STATE_CANCELLED);
  EXPECT_TRUE(old_runner.exited_within(std::chrono::seconds(30)));
  EXPECT_NE(runner_pid(d), before);
  EXPECT_EQ(d.stop(), std::optional<int>(0)) << d.log();
}

TEST_F(IsolationTest, AJobOverItsCpuLimitFailsSayingSo) {
  DaemonProcess d(process_config("cpu_seconds_per_job = 1\n"), bad_args());
  ASSERT_TRUE(d.started()) << d.log();
  tpool::v1::JobResult r = wait_job(d, submit(d, "iso_spin", ""));
  EXPECT_EQ(r.state(), JOB_STATE_FAILED);
  EXPECT_TRUE(std::regex_search(
      r.message(), std::regex("^handler 'iso_spin' used [0-9]+ ms of CPU time, over its limit "
                              "of 1 s \\(cpu_seconds_per_job\\): runner [0-9]+ was stopped on "
                              "attempt 1 and replaced$")))
      << r.message();
  EXPECT_EQ(execute(d, "iso_pid", "").state(), JOB_STATE_SUCCEEDED);
  EXPECT_EQ(d.stop(), std::optional<int>(0)) << d.log();
}

TEST_F(IsolationTest, AnAllowedSyscallPassesTheFilter) {
  DaemonProcess d(process_config("allow_syscalls = [\"socket\"]\n"), bad_args());
  ASSERT_TRUE(d.started()) << d.log();
  tpool::v1::JobResult r = execute(d, "iso_socket", "");
  // The handler's own failure: socket() ran (its network is its own, or the
  // host's when tpoold lacks CAP_SYS_ADMIN) and the runner lives on.
  EXPECT_EQ(r.state(), JOB_STATE_FAILED);
  EXPECT_EQ(r.message(), "socket() returned without the filter stopping it");
  EXPECT_EQ(d.stop(), std::optional<int>(0)) << d.log();
}

// A daemon of process_config(bad_extra) with its metrics listener on, for
// the tests that scrape it.
class MetricsDaemon {
 public:
  explicit MetricsDaemon(const std::string& bad_extra = "")
      : d(with_metrics(process_config(bad_extra), port_file_), bad_args()) {}
  // True once the daemon serves and its metrics port is known.
  bool start() {
    if (!d.started()) return false;
    port_ = wait_port_file(port_file_);
    return port_ > 0;
  }
  std::map<std::string, double> scrape() {
    return parse_exposition(http_get(port_, "/metrics").body);
  }
  // One series of a per-plugin isolated metric, scraped now.
  double of_plugin(const std::string& name, const std::string& plugin) {
    return scrape()[name + "{plugin=\"" + plugin + "\"}"];
  }

 private:
  static std::string with_metrics(std::string config, const std::string& port_file) {
    const std::string off = "[metrics]\nenabled = false\n";
    config.replace(config.find(off), off.size(),
                   "[metrics]\nlisten = \"127.0.0.1:0\"\nport_file = \"" + port_file + "\"\n");
    return config;
  }
  TempDir dir_;
  std::string port_file_ = dir_.file("metrics.port");
  int port_ = 0;

 public:
  DaemonProcess d;  // after port_file_, which its config names
};

TEST_F(IsolationTest, CrashesOverTheLimitMarkThePluginUnhealthyUntilItIsReloaded) {
  MetricsDaemon md("crash_limit = 2\n");
  DaemonProcess& d = md.d;
  ASSERT_TRUE(md.start()) << d.log();
  auto metric = [&](const std::string& series) { return md.scrape()[series]; };
  EXPECT_EQ(execute(d, "iso_segv", "").state(), JOB_STATE_FAILED);
  EXPECT_EQ(execute(d, "iso_abort", "").state(), JOB_STATE_FAILED);
  grpc::Status s;
  (void)execute(d, "iso_pid", "", &s);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_TRUE(std::regex_search(
      s.error_message(),
      std::regex("^plugin 'isolation_bad' is unhealthy: its runners failed 2 times within 60000 "
                 "ms \\(crash_limit 2; the last: handler 'iso_abort' crashed: SIGABRT in runner "
                 "[0-9]+ \\(plugin 'isolation_bad' 1\\.0\\.0\\) on attempt 1; the runner was "
                 "replaced\\); it takes no new jobs until it is reloaded \\(SIGHUP or tpoolctl "
                 "reload\\) after a fix$")))
      << s.error_message();
  EXPECT_EQ(metric("tpoold_jobs_rejected_total{reason=\"unhealthy\"}"), 1.0);
  EXPECT_EQ(metric("tpoold_isolated_plugin_healthy{plugin=\"isolation_bad\"}"), 0.0);
  // Other plugins serve on.
  EXPECT_EQ(execute(d, "echo", "x").output(), "x");
  {
    grpc::ClientContext c;
    tpool::v1::ReloadPluginsRequest req;
    tpool::v1::ReloadPluginsReply reply;
    ASSERT_TRUE(d.admin().ReloadPlugins(&c, req, &reply).ok());
  }
  EXPECT_EQ(execute(d, "iso_pid", "").state(), JOB_STATE_SUCCEEDED);
  EXPECT_EQ(d.stop(), std::optional<int>(0)) << d.log();
}

TEST_F(IsolationTest, AReloadWhileIsolatedJobsRunFailsNoJob) {
  DaemonProcess d(process_config(), bad_args());
  ASSERT_TRUE(d.started()) << d.log();
  const std::vector<pid_t> first = children_of(d.pid());
  Bystanders others;
  others.start(d);
  {
    grpc::ClientContext c;
    tpool::v1::ReloadPluginsRequest req;
    tpool::v1::ReloadPluginsReply reply;
    ASSERT_TRUE(d.admin().ReloadPlugins(&c, req, &reply).ok());
  }
  // New jobs go to the new generation's runners while the old ones finish.
  std::vector<std::uint64_t> after;
  for (int i = 0; i < 8; ++i) after.push_back(submit(d, "echo", "n" + std::to_string(i)));
  others.expect_all_succeeded(d);
  for (std::size_t i = 0; i < after.size(); ++i) {
    tpool::v1::JobResult r = wait_job(d, after[i]);
    EXPECT_EQ(r.state(), JOB_STATE_SUCCEEDED) << r.message();
    EXPECT_EQ(r.output(), "n" + std::to_string(i));
  }
  // The first generation's runners exit once their last job has ended.
  for (pid_t pid : first) {
    PidWatch w(pid);
    if (w.valid()) {
      EXPECT_TRUE(w.exited_within(std::chrono::seconds(30))) << pid;
    }
  }
  EXPECT_EQ(d.stop(), std::optional<int>(0)) << d.log();
}

TEST_F(IsolationTest, NoRunnerSurvivesASigkilledDaemon) {
  DaemonProcess d(process_config(), bad_args());
  ASSERT_TRUE(d.started()) << d.log();
  Bystanders others;
  others.start(d);  // some runners busy, some idle
  std::vector<pid_t> runners = children_of(d.pid());
  // sleep 4 + every other plugin's 2 + isolation_bad's 1.
  ASSERT_GE(runners.size(), 11u) << d.log();
  std::vector<std::unique_ptr<PidWatch>> watches;
  for (pid_t pid : runners) {
    watches.push_back(std::make_unique<PidWatch>(pid));
    ASSERT_TRUE(watches.back()->valid()) << pid;
  }
  d.signal(SIGKILL);
  EXPECT_EQ(d.wait_exit(std::chrono::seconds(30)), std::optional<int>(128 + SIGKILL));
  for (const auto& w : watches) {
    EXPECT_TRUE(w->exited_within(std::chrono::seconds(30))) << "runner " << w->pid();
  }
}

TEST_F(IsolationTest, MetricsCountRunnersRestartsByCauseAndLostJobs) {
  MetricsDaemon md;
  DaemonProcess& d = md.d;
  ASSERT_TRUE(md.start()) << d.log();
  const std::string bad = "{plugin=\"isolation_bad\"";
  auto m = md.scrape();
  EXPECT_EQ(m["tpoold_isolated_runners_alive" + bad + "}"], 1.0);
  EXPECT_EQ(m["tpoold_isolated_runners_alive{plugin=\"sleep\"}"], 4.0);
  EXPECT_EQ(m["tpoold_isolated_plugin_healthy" + bad + "}"], 1.0);
  EXPECT_EQ(m["tpoold_isolated_jobs_lost_total" + bad + "}"], 0.0);

  EXPECT_EQ(execute(d, "iso_segv", "").state(), JOB_STATE_FAILED);
  EXPECT_EQ(execute(d, "iso_socket", "").state(), JOB_STATE_FAILED);
  if (!kAsan) {
    EXPECT_EQ(execute(d, "iso_hog", "").state(), JOB_STATE_FAILED);
  }
  m = md.scrape();
  EXPECT_EQ(m["tpoold_isolated_runner_restarts_total" + bad + ",cause=\"crash\"}"], 1.0);
  EXPECT_EQ(m["tpoold_isolated_runner_restarts_total" + bad + ",cause=\"denied_syscall\"}"], 1.0);
  EXPECT_EQ(m["tpoold_isolated_runner_restarts_total" + bad + ",cause=\"memory\"}"],
            kAsan ? 0.0 : 1.0);
  EXPECT_EQ(m["tpoold_isolated_runner_restarts_total" + bad + ",cause=\"time_limit\"}"], 0.0);
  EXPECT_EQ(m["tpoold_isolated_jobs_lost_total" + bad + "}"], kAsan ? 2.0 : 3.0);
  // The slot restarts its runner on its next job, after the backoff.
  EXPECT_EQ(m["tpoold_isolated_runners_alive" + bad + "}"], 0.0);
  EXPECT_EQ(execute(d, "iso_pid", "").state(), JOB_STATE_SUCCEEDED);
  EXPECT_EQ(md.scrape()["tpoold_isolated_runners_alive" + bad + "}"], 1.0);
  EXPECT_EQ(d.stop(), std::optional<int>(0)) << d.log();
}

// The host's handler counters count calls that ran in a runner too: a C++
// exception thrown there, and an OK returned after a cancel.
TEST_F(IsolationTest, HandlerCountersCountExceptionsAndIgnoredCancellationsInRunners) {
  MetricsDaemon md;
  DaemonProcess& d = md.d;
  ASSERT_TRUE(md.start()) << d.log();
  auto metric = [&](const std::string& name) { return md.scrape()[name]; };
  EXPECT_EQ(metric("tpoold_handler_exceptions_total"), 0.0);
  EXPECT_EQ(metric("tpoold_handler_ignored_cancellation_total"), 0.0);
  tpool::v1::JobResult thrown = execute(d, "fail_throw", "");
  EXPECT_EQ(thrown.state(), JOB_STATE_FAILED);
  EXPECT_NE(thrown.message().find("threw a C++ exception"), std::string::npos) << thrown.message();
  EXPECT_EQ(metric("tpoold_handler_exceptions_total"), 1.0);

  const std::uint64_t id = submit(d, "iso_late", "");
  ASSERT_TRUE(eventually([&] { return get(d, id).state() == JOB_STATE_RUNNING; })) << d.log();
  cancel(d, id);
  tpool::v1::JobResult late = wait_job(d, id);
  EXPECT_EQ(late.state(), JOB_STATE_CANCELLED);
  EXPECT_NE(late.message().find("its output is discarded"), std::string::npos) << late.message();
  EXPECT_EQ(metric("tpoold_handler_ignored_cancellation_total"), 1.0);
  EXPECT_EQ(d.stop(), std::optional<int>(0)) << d.log();
}

TEST_F(IsolationTest, MetricsShowBusyRunnersAndTheCallsWaitingForOne) {
  MetricsDaemon md;
  DaemonProcess& d = md.d;
  ASSERT_TRUE(md.start()) << d.log();
  auto metric = [&](const std::string& name) { return md.of_plugin(name, "sleep"); };
  EXPECT_EQ(metric("tpoold_isolated_runners_busy"), 0.0);
  EXPECT_EQ(metric("tpoold_isolated_channel_queue_depth"), 0.0);
  // Six long sleeps on sleep's four runners (blocking lane: 8 workers): four
  // run, two wait in the channel's queue.
  std::vector<std::uint64_t> ids;
  for (int i = 0; i < 6; ++i) ids.push_back(submit(d, "sleep", "600000"));
  EXPECT_TRUE(eventually([&] { return metric("tpoold_isolated_channel_queue_depth") == 2.0; },
                         std::chrono::seconds(30)))
      << d.log();
  EXPECT_EQ(metric("tpoold_isolated_runners_busy"), 4.0);
  EXPECT_EQ(metric("tpoold_isolated_runners_alive"), 4.0);  // busy runners are alive
  for (auto id : ids) cancel(d, id);
  for (auto id : ids) EXPECT_EQ(wait_job(d, id).state(), JOB_STATE_CANCELLED);
  EXPECT_EQ(metric("tpoold_isolated_channel_queue_depth"), 0.0);
  EXPECT_EQ(metric("tpoold_isolated_runners_busy"), 0.0);
  EXPECT_EQ(metric("tpoold_isolated_runners_alive"), 4.0);
  EXPECT_EQ(d.stop(), std::optional<int>(0)) << d.log();
}

// A batch of slow jobs is not one runner's queue: the supervisor batches a
// handler's jobs only up to about a millisecond of their measured time, so
// SubmitBatch's sleep jobs (measured at 200 ms) still run on all four
// runners at once. (With a fixed batch size the four would wait in one
// runner, one busy.)
TEST_F(IsolationTest, SlowJobsOfOneBatchRunOnSeveralRunnersAtOnce) {
  MetricsDaemon md;
  DaemonProcess& d = md.d;
  ASSERT_TRUE(md.start()) << d.log();
  auto metric = [&](const std::string& name) { return md.of_plugin(name, "sleep"); };
  // The handler's time, measured by its runner.
  EXPECT_EQ(execute(d, "sleep", "200").state(), JOB_STATE_SUCCEEDED);
  std::vector<std::uint64_t> ids =
      submit_batch(d, "sleep", {{"600000"}, {"600000"}, {"600000"}, {"600000"}});
  ASSERT_EQ(ids.size(), 4u);
  EXPECT_TRUE(eventually([&] { return metric("tpoold_isolated_runners_busy") == 4.0; },
                         std::chrono::seconds(30)))
      << d.log();
  for (auto id : ids) cancel(d, id);
  for (auto id : ids) EXPECT_EQ(wait_job(d, id).state(), JOB_STATE_CANCELLED);
  EXPECT_EQ(d.stop(), std::optional<int>(0)) << d.log();
}

// The runner-call counters show batching: 64 echo jobs of one SubmitBatch,
// after one job measured the handler, reach the runners in fewer calls than
// jobs. (Without batches every job is a call of its own.)
TEST_F(IsolationTest, RunnerCallMetricsCountTheJobsEachCallCarried) {
  MetricsDaemon md;
  DaemonProcess& d = md.d;
  ASSERT_TRUE(md.start()) << d.log();
  auto metric = [&](const std::string& name) { return md.of_plugin(name, "echo"); };
  EXPECT_EQ(execute(d, "echo", "first").output(), "first");
  EXPECT_EQ(metric("tpoold_isolated_runner_calls_total"), 1.0);
  EXPECT_EQ(metric("tpoold_isolated_runner_call_jobs_total"), 1.0);
  std::vector<BatchItem> items;
  for (int i = 0; i < 64; ++i) items.push_back({"e" + std::to_string(i)});
  std::vector<std::uint64_t> ids = submit_batch(d, "echo", items);
  ASSERT_EQ(ids.size(), 64u);
  for (std::size_t i = 0; i < ids.size(); ++i) {
    EXPECT_EQ(wait_job(d, ids[i]).output(), "e" + std::to_string(i));
  }
  const double calls = metric("tpoold_isolated_runner_calls_total");
  EXPECT_EQ(metric("tpoold_isolated_runner_call_jobs_total"), 65.0);
  EXPECT_GE(calls, 2.0);
  EXPECT_LT(calls, 65.0) << "every job went to a runner on its own";
  EXPECT_EQ(d.stop(), std::optional<int>(0)) << d.log();
}

// tpoold under the system-call confinement of a systemd unit (the shipped
// deploy/systemd/tpoold.service unless `unit` names another), as systemd
// runs it where it is PID 1: tpool-unit-sandbox applies the unit's
// SystemCallFilter (from systemd's own tables), RestrictNamespaces,
// MemoryDenyWriteExecute and empty capability set.
std::vector<std::string> under_unit(const std::string& unit = TPOOL_SYSTEMD_UNIT) {
  return {TPOOL_UNIT_SANDBOX, unit, "--"};
}

// Under ASan, no leak check at exit for a daemon in the unit sandbox: LSan
// stops the process's threads with ptrace, which the unit's filter denies.
std::vector<std::string> unit_env() {
  if (!kAsan) return {};
  const char* asan = std::getenv("ASAN_OPTIONS");
  return {std::string("ASAN_OPTIONS=") + (asan != nullptr ? asan : "") + ":detect_leaks=0"};
}

// The runners start and serve under the unit; a crash still ends only its
// job; what the unit refuses them is said once per plugin at load.
TEST_F(IsolationTest, UnderTheHardenedUnitRunnersServeFilteredAndSayWhatTheUnitRefuses) {
  DaemonProcess d(process_config(), bad_args(), unit_env(), under_unit());
  ASSERT_TRUE(d.started()) << d.log();
  // No CAP_SYS_ADMIN and RestrictNamespaces: no network namespace, said.
  EXPECT_NE(d.log().find("confined without what this environment refuses: "), std::string::npos)
      << d.log();
  EXPECT_NE(d.log().find("no network namespace (unshare(CLONE_NEWNET)"), std::string::npos)
      << d.log();
  // The unit allows seccomp(2): the runners' own filter is on.
  EXPECT_EQ(d.log().find("no seccomp filter"), std::string::npos) << d.log();
  const pid_t before = runner_pid(d);
  EXPECT_NE(before, d.pid());  // in a runner, not in tpoold
  Bystanders others;
  others.start(d);
  tpool::v1::JobResult h = execute(d, "hash", "1:abc");
  EXPECT_EQ(h.state(), JOB_STATE_SUCCEEDED) << h.message();
  EXPECT_EQ(h.output(), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  tpool::v1::JobResult crash = execute(d, "iso_segv", "");
  EXPECT_EQ(crash.state(), JOB_STATE_FAILED);
  EXPECT_NE(crash.message().find("crashed: SIGSEGV"), std::string::npos) << crash.message();
  tpool::v1::JobResult denied = execute(d, "iso_socket", "");
  EXPECT_EQ(denied.state(), JOB_STATE_FAILED);
  EXPECT_NE(denied.message().find("system call 'socket'"), std::string::npos) << denied.message();
  others.expect_all_succeeded(d);
  EXPECT_NE(runner_pid(d), before);  // replaced
  EXPECT_EQ(d.stop(), std::optional<int>(0)) << d.log();
}

// A unit that does not allow seccomp(2) (the shipped one before issue 18's
// fix): the plugins still load and serve, and tpoold says once per plugin
// that its runners have no filter and why.
TEST_F(IsolationTest, AUnitThatRefusesSeccompLeavesRunnersUnfilteredAndSaysSo) {
  TempDir dir;
  const std::string unit = dir.file("tpoold.service");
  {
    std::ifstream in(TPOOL_SYSTEMD_UNIT);
    std::ofstream out(unit);
    for (std::string line; std::getline(in, line);) {
      if (line == "SystemCallFilter=@system-service seccomp")
        line = "SystemCallFilter=@system-service";
      out << line << "\n";
    }
  }
  DaemonProcess d(process_config(), bad_args(), unit_env(), under_unit(unit));
  ASSERT_TRUE(d.started()) << d.log();
  EXPECT_NE(d.log().find("no seccomp filter (cannot apply a filter to every thread (TSYNC): the "
                         "environment refuses seccomp(2)"),
            std::string::npos)
      << d.log();
  EXPECT_EQ(execute(d, "echo", "still-serving").output(), "still-serving");
  // Unfiltered: the call the filter would deny returns (the handler says so).
  tpool::v1::JobResult r = execute(d, "iso_socket", "");
  EXPECT_EQ(r.state(), JOB_STATE_FAILED);
  EXPECT_EQ(r.message(), "socket() returned without the filter stopping it");
  EXPECT_EQ(d.stop(), std::optional<int>(0)) << d.log();
}

TEST_F(IsolationTest, InProcessTheSameSegfaultKillsTheDaemon) {
  // The documented cost of in_process mode (docs/plugins.md): a crashing
  // handler takes tpoold and every job it held with it; under systemd the
  // unit restarts it. Nothing refuses such a plugin in this mode.
  const char* asan = std::getenv("ASAN_OPTIONS");
  DaemonProcess d(
      "[metrics]\nenabled = false\n", bad_args(),
      {std::string("ASAN_OPTIONS=") + (asan != nullptr ? asan : "") + ":handle_segv=0"});
  ASSERT_TRUE(d.started()) << d.log();
  EXPECT_EQ(runner_pid(d), d.pid());  // it runs inside tpoold
  grpc::Status s;
  (void)execute(d, "iso_segv", "", &s);
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(d.wait_exit(std::chrono::seconds(60)), std::optional<int>(128 + SIGSEGV)) << d.log();
}

TEST_F(IsolationTest, AMissingRunnerIsAStartUpErrorNamingIt) {
  DaemonProcess bad(
      "[metrics]\nenabled = false\n[plugins.isolation]\nmode = \"process\"\n"
      "runner = \"/nonexistent/tpool-runner\"\n");
  EXPECT_FALSE(bad.started());
  EXPECT_EQ(bad.wait_exit(std::chrono::seconds(30)), std::optional<int>(1));
  EXPECT_NE(bad.log().find("cannot start the runner /nonexistent/tpool-runner"), std::string::npos)
      << bad.log();
}

}  // namespace
}  // namespace tpool::testing
