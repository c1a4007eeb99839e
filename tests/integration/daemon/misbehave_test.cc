// tpoold against handlers that misbehave (the misbehave test plugin): spin or
// block ignoring cancellation, segfault, abort. Issue 13 items 3 (a stop
// with stuck handlers exits, bounded, with a documented status), 7 (a job
// ends at its timeout whatever its handler does) and 9 (a crash names the
// signal and the handler). Every wait is bounded, so a hang is a failure.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <cstdlib>
#include <future>
#include <regex>
#include <thread>

#include "../metrics/metrics_test_util.h"
#include "daemon_process.h"

namespace tpool::testing {
namespace {

std::vector<std::string> misbehave_args() {
  return {"--plugin-dir", TPOOL_MISBEHAVE_PLUGIN_DIR};
}

bool wait_log(DaemonProcess& d, const std::string& text) {
  return eventually([&] { return d.log().find(text) != std::string::npos; },
                    std::chrono::seconds(30));
}

std::uint64_t submit(DaemonProcess& d, const std::string& handler, const std::string& payload,
                     std::uint64_t timeout_ms = 0) {
  grpc::ClientContext c;
  tpool::v1::JobRequest req = job(handler, payload);
  req.set_timeout_ms(timeout_ms);
  tpool::v1::JobRef ref;
  grpc::Status s = d.jobs().Submit(&c, req, &ref);
  EXPECT_TRUE(s.ok()) << s.error_message();
  return ref.job_id();
}

bool wait_running(DaemonProcess& d, const std::vector<std::uint64_t>& ids) {
  for (std::uint64_t id : ids) {
    if (!eventually([&] { return get(d, id).state() == tpool::v1::JOB_STATE_RUNNING; },
                    std::chrono::seconds(30))) {
      return false;
    }
  }
  return true;
}

// Wait with a long client deadline: returns when the job ends, or at the
// deadline (a hang turned into a failure by the caller's state check).
void wait_job(DaemonProcess& d, std::uint64_t id) {
  grpc::ClientContext c;
  c.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  tpool::v1::WaitRequest req;
  req.set_job_id(id);
  tpool::v1::JobResult r;
  (void)d.jobs().Wait(&c, req, &r);
}

// --- item 3: a stop with handlers that ignore cancellation --------------------

TEST(Misbehave, SigtermWithHandlersIgnoringCancellationExitsThreeAndNamesThem) {
  // A worker for each job whatever the machine: 3 CPU workers for the
  // spinners, 1 blocking worker for the sleep.
  DaemonProcess d(
      "[server]\ndrain_timeout_ms = 500\ncancel_grace_ms = 500\n[metrics]\nenabled = false\n"
      "[pool]\nmax_threads = 3\nblocking_workers = 1\n",
      misbehave_args());
  ASSERT_TRUE(d.started()) << d.log();
  std::uint64_t sleeper = submit(d, "sleep", "10000");
  std::vector<std::uint64_t> spinners;
  for (int i = 0; i < 3; ++i) spinners.push_back(submit(d, "spin", "600000"));
  ASSERT_TRUE(wait_running(d, spinners)) << d.log();
  d.signal(SIGTERM);
  // Drain (0.5 s) plus grace (0.5 s); the bound turns a hang into a failure.
  EXPECT_EQ(d.wait_exit(std::chrono::seconds(60)), std::optional<int>(3)) << d.log();
  const std::string log = d.log();
  for (std::uint64_t id : spinners) {
    EXPECT_NE(log.find("job " + std::to_string(id) + " (handler spin) did not stop"),
              std::string::npos)
        << log;
  }
  EXPECT_EQ(log.find("job " + std::to_string(sleeper) + " (handler sleep) did not stop"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("3 handlers are still running"), std::string::npos) << log;
  EXPECT_NE(log.find("exiting with status 3"), std::string::npos) << log;
}

TEST(Misbehave, ASecondSigtermCancelsAndAThirdStopsWaitingForStuckHandlers) {
  // Neither timeout would end this test: only the signals can.
  DaemonProcess d(
      "[server]\ndrain_timeout_ms = 600000\ncancel_grace_ms = 600000\n"
      "[metrics]\nenabled = false\n",
      misbehave_args());
  ASSERT_TRUE(d.started()) << d.log();
  std::uint64_t id = submit(d, "spin", "600000");
  ASSERT_TRUE(wait_running(d, {id})) << d.log();
  d.signal(SIGTERM);
  ASSERT_TRUE(wait_log(d, "draining: 1 jobs in flight")) << d.log();
  d.signal(SIGTERM);
  ASSERT_TRUE(wait_log(d, "second SIGTERM")) << d.log();
  d.signal(SIGTERM);
  EXPECT_EQ(d.wait_exit(std::chrono::seconds(60)), std::optional<int>(3)) << d.log();
  EXPECT_NE(d.log().find("job " + std::to_string(id) + " (handler spin) did not stop"),
            std::string::npos)
      << d.log();
}

TEST(Misbehave, ASecondSigtermEndsAStuckDrainAfterTheCancelGrace) {
  DaemonProcess d(
      "[server]\ndrain_timeout_ms = 600000\ncancel_grace_ms = 500\n"
      "[metrics]\nenabled = false\n",
      misbehave_args());
  ASSERT_TRUE(d.started()) << d.log();
  std::uint64_t id = submit(d, "block", "600000");
  ASSERT_TRUE(wait_running(d, {id})) << d.log();
  d.signal(SIGTERM);
  ASSERT_TRUE(wait_log(d, "draining: 1 jobs in flight")) << d.log();
  d.signal(SIGTERM);
  EXPECT_EQ(d.wait_exit(std::chrono::seconds(60)), std::optional<int>(3)) << d.log();
  EXPECT_NE(d.log().find("job " + std::to_string(id) + " (handler block) did not stop"),
            std::string::npos)
      << d.log();
}

// --- item 7: timeout_ms holds whatever the handler does -----------------------

class TimeoutSuite : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ =
        std::filesystem::temp_directory_path() / ("tpoold-misbehave-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    port_file_ = (dir_ / "metrics.port").string();
    d_ = std::make_unique<DaemonProcess>(
        "[server]\ndrain_timeout_ms = 500\ncancel_grace_ms = 200\n"
        "[pool]\nblocking_workers = 2\n"  // two blocked handlers at once in one test
        "[metrics]\nlisten = \"127.0.0.1:0\"\nport_file = \"" +
            port_file_ + "\"\n",
        misbehave_args());
    ASSERT_TRUE(d_->started()) << d_->log();
    metrics_port_ = wait_port_file(port_file_);
    ASSERT_GT(metrics_port_, 0);
  }
  void TearDown() override {
    // The blocked handlers are still running: the stop exits 3 (item 3).
    EXPECT_EQ(d_->stop(std::chrono::seconds(60)), std::optional<int>(3)) << d_->log();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  double metric(const std::string& series) {
    HttpReply r = http_get(metrics_port_, "/metrics");
    auto all = parse_exposition(r.body);
    auto it = all.find(series);
    return it == all.end() ? -1 : it->second;
  }
  bool wait_metric_at_least(const std::string& series, double v) {
    return eventually([&] { return metric(series) >= v; }, std::chrono::seconds(30));
  }

  std::filesystem::path dir_;
  std::string port_file_;
  int metrics_port_ = 0;
  std::unique_ptr<DaemonProcess> d_;
};

TEST_F(TimeoutSuite, ExecuteEndsTimedOutAtTimeoutMsWhenTheHandlerIgnoresCancellation) {
  DaemonProcess& d = *d_;
  EXPECT_EQ(metric("tpoold_handler_ignored_cancellation_total"), 0);
  grpc::ClientContext c;
  // The client's deadline is far beyond timeout_ms: an answer before it is
  // the daemon's, not the client's.
  c.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  tpool::v1::JobRequest req = job("block", "600000");
  req.set_timeout_ms(1000);
  tpool::v1::JobResult r;
  grpc::Status s = d.jobs().Execute(&c, req, &r);
  // Execute reports TIMED_OUT as DEADLINE_EXCEEDED with the job's message
  // (or OK with the state, should it ever carry the result instead).
  if (s.ok()) {
    EXPECT_EQ(r.state(), tpool::v1::JOB_STATE_TIMED_OUT);
  } else {
    EXPECT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
    EXPECT_NE(s.error_message().find("(block) timed out"), std::string::npos) << s.error_message();
  }
  // The handler is still inside: counted once cancel_grace_ms has passed.
  EXPECT_TRUE(wait_metric_at_least("tpoold_handler_ignored_cancellation_total", 1)) << d.log();
  EXPECT_EQ(metric("tpoold_handlers_running_after_end"), 1);
}

TEST_F(TimeoutSuite, WaitGetAndCancelReportTheEndOfAJobWhoseHandlerIgnoresCancellation) {
  DaemonProcess& d = *d_;
  // Past its timeout: TIMED_OUT, and Cancel reports that final state.
  std::uint64_t timed = submit(d, "block", "600000", 1000);
  wait_job(d, timed);
  EXPECT_EQ(get(d, timed).state(), tpool::v1::JOB_STATE_TIMED_OUT) << d.log();
  {
    grpc::ClientContext c;
    tpool::v1::JobRef ref;
    ref.set_job_id(timed);
    tpool::v1::CancelReply reply;
    ASSERT_TRUE(d.jobs().Cancel(&c, ref, &reply).ok());
    EXPECT_EQ(reply.state(), tpool::v1::JOB_STATE_TIMED_OUT);
  }
  // No timeout: Cancel, and the job ends CANCELLED after cancel_grace_ms
  // although its handler never returns.
  std::uint64_t cancelled = submit(d, "block", "600000");
  ASSERT_TRUE(wait_running(d, {cancelled})) << d.log();
  {
    grpc::ClientContext c;
    tpool::v1::JobRef ref;
    ref.set_job_id(cancelled);
    tpool::v1::CancelReply reply;
    ASSERT_TRUE(d.jobs().Cancel(&c, ref, &reply).ok());
  }
  wait_job(d, cancelled);
  tpool::v1::JobStatus st = get(d, cancelled);
  EXPECT_EQ(st.state(), tpool::v1::JOB_STATE_CANCELLED) << d.log();
  EXPECT_NE(st.message().find("did not return within"), std::string::npos) << st.message();
}

// --- item 9: a crash names the signal and the handler -------------------------

class CrashTest : public ::testing::Test {
 protected:
  NoCoreFiles no_cores_;  // from the daemons these tests crash on purpose

  // Runs `handler` with Execute, which never answers (the daemon dies).
  void crash(DaemonProcess& d, const std::string& handler) {
    grpc::ClientContext c;
    c.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    tpool::v1::JobResult r;
    grpc::Status s = d.jobs().Execute(&c, job(handler, ""), &r);
    EXPECT_FALSE(s.ok());  // the connection dies with the daemon
  }
};

TEST_F(CrashTest, ASegfaultingHandlerIsNamedOnStderrAndTheDaemonDiesBySigsegv) {
  // Under AddressSanitizer (make asan) ASan's own SIGSEGV handler would win
  // and exit 1; handle_segv=0 leaves the signal to tpoold's. No effect
  // without ASan.
  const char* asan = std::getenv("ASAN_OPTIONS");
  DaemonProcess d(
      "[metrics]\nenabled = false\n", misbehave_args(),
      {std::string("ASAN_OPTIONS=") + (asan != nullptr ? asan : "") + ":handle_segv=0"});
  ASSERT_TRUE(d.started()) << d.log();
  crash(d, "segfault");
  EXPECT_EQ(d.wait_exit(std::chrono::seconds(60)), std::optional<int>(128 + SIGSEGV)) << d.log();
  EXPECT_TRUE(std::regex_search(
      d.log(), std::regex("fatal signal SIGSEGV \\(11\\) in handler segfault running job [0-9]+ at "
                          "address 0x0; tpoold dies with every job it held")))
      << d.log();
}

TEST_F(CrashTest, AnAbortingHandlerIsNamedOnStderrAndTheDaemonDiesBySigabrt) {
  DaemonProcess d("[metrics]\nenabled = false\n[log]\nformat = \"json\"\n", misbehave_args());
  ASSERT_TRUE(d.started()) << d.log();
  crash(d, "abort");
  EXPECT_EQ(d.wait_exit(std::chrono::seconds(60)), std::optional<int>(128 + SIGABRT)) << d.log();
  EXPECT_TRUE(std::regex_search(
      d.log(), std::regex("\\{\"level\":\"critical\",\"msg\":\"fatal signal SIGABRT \\(6\\) in "
                          "handler abort running job [0-9]+;[^\n]*\"\\}\n")))
      << d.log();
}

}  // namespace
}  // namespace tpool::testing
