// The example plugins (plugins/examples), loaded from the directory the build
// puts them in, with their documented outputs and failures: every test in
// both isolation modes (issue 18), in_process (the handler runs on the test's
// thread) and process (the same .so, unchanged, in tpool-runner processes
// that tpool::isolation supervises, its host calls proxied over the channel).
#include <gtest/gtest.h>

#include <latch>
#include <string>
#include <thread>

#include "plugin_test_support.h"
#include "tpool/isolation/supervisor.h"
#include "tpool/plugin.h"
#include "tpool/plugin_host/host.h"

namespace tpool::plugin_host {
namespace {

using testing::LogRecorder;
using testing::TestServices;

constexpr char kSha256Abc[] = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
// sha256(sha256("abc")) and once more, raw digests fed back in
// (`printf abc | openssl dgst -sha256 -binary | openssl dgst -sha256 -binary | xxd -p -c 64`).
constexpr char kSha256AbcX2[] = "4f8b42c22dd3729b519ba6f68d2da7cc5b2d606d05daed5ad5128cc03e6c6358";
constexpr char kSha256AbcX3[] = "f2a778f1a6ed3d5bc59a5d79104c598f3f07093f240ca4e91333fb09ed4f36da";

// Process mode for every plugin: four runners each, enough for the nested
// fan-out below (a fanout parent and its two fanout children at once).
void isolate(HostConfig& cfg) {
  cfg.isolation.mode = IsolationMode::kProcess;
  cfg.isolation.runners = 4;
  cfg.isolation_factory =
      isolation::make_factory({TPOOL_RUNNER_BIN, std::chrono::milliseconds(500)});
}

std::string mode_name(const ::testing::TestParamInfo<IsolationMode>& i) {
  return std::string(to_string(i.param));
}

class ExamplesTest : public ::testing::TestWithParam<IsolationMode> {
 protected:
  bool isolated() const { return GetParam() == IsolationMode::kProcess; }
  void SetUp() override {
    HostConfig cfg = testing::config_for({TPOOL_EXAMPLE_PLUGIN_DIR}, log_, /*abort=*/true);
    cfg.plugin_config["hash"] = "max_iterations=1000000";
    if (isolated()) isolate(cfg);
    auto loaded = Host::load(std::move(cfg));
    ASSERT_TRUE(loaded.ok()) << loaded.status().message();
    host_ = std::move(loaded).value();
  }
  InvokeResult run(std::string_view handler, std::string_view input, TestServices& services) {
    HandlerRef ref = host_->find(handler);
    EXPECT_TRUE(ref) << handler;
    return host_->invoke(ref, input, services);
  }
  InvokeResult run(std::string_view handler, std::string_view input) {
    TestServices services(host_.get());
    return run(handler, input, services);
  }

  LogRecorder log_;
  std::unique_ptr<Host> host_;
};

TEST_P(ExamplesTest, TheSixPluginsLoadTheirSevenHandlersWithTheirLanes) {
  std::vector<std::string> names;
  for (const auto& h : host_->list()) {
    names.push_back(h.name);
    EXPECT_EQ(h.lane, h.name == "sleep" ? Lane::kBlocking : Lane::kDefault) << h.name;
    EXPECT_FALSE(h.description.empty()) << h.name;
    EXPECT_EQ(h.plugin_version, "1.0.0") << h.name;
    EXPECT_EQ(h.isolation, GetParam()) << h.name;
  }
  EXPECT_EQ(names, (std::vector<std::string>{"echo", "fail", "fail_throw", "fanout", "flaky",
                                             "hash", "sleep"}));
  EXPECT_TRUE(host_->load_errors().empty());
  EXPECT_EQ(host_->counters().plugins_loaded, 6u);
}

TEST_P(ExamplesTest, EchoReturnsItsInputBytes) {
  std::string input("bytes\0with\xffnul", 14);
  auto r = run("echo", input);
  ASSERT_TRUE(r.ok()) << r.message;
  EXPECT_EQ(r.output, input);
  EXPECT_EQ(run("echo", "").output, "");
}

TEST_P(ExamplesTest, HashMatchesTheSha256Vectors) {
  EXPECT_EQ(run("hash", "1:abc").output, kSha256Abc);
  EXPECT_EQ(run("hash", "2:abc").output, kSha256AbcX2);
  EXPECT_EQ(run("hash", "3:abc").output, kSha256AbcX3);
  EXPECT_EQ(run("hash", "1:").output,
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

TEST_P(ExamplesTest, HashRefusesMalformedInputAndHonoursItsConfig) {
  for (std::string_view bad : {"abc", "0:abc", ":abc", "12"}) {
    auto r = run("hash", bad);
    EXPECT_EQ(r.code, JobCode::kInvalidInput) << bad;
    EXPECT_EQ(r.message,
              "hash: the input must be \"<n>:<payload>\" with n from 1 to 1000000, e.g. \"1:abc\"")
        << bad;
  }
  EXPECT_EQ(run("hash", "1000001:abc").code, JobCode::kInvalidInput);  // config's max
}

TEST_P(ExamplesTest, HashStopsWhenCancelled) {
  TestServices services(host_.get());
  services.cancel();
  auto r = run("hash", "1000000:abc", services);
  EXPECT_EQ(r.code, JobCode::kCancelled);
  EXPECT_EQ(r.message, "hash: cancelled after 4096 of 1000000 iterations");
}

TEST_P(ExamplesTest, FailReturnsItsMessage) {
  auto r = run("fail", "disk on fire");
  EXPECT_EQ(r.code, JobCode::kError);
  EXPECT_EQ(r.plugin_status, TPOOL_STATUS_ERROR);
  EXPECT_EQ(r.message, "fail: disk on fire");
  EXPECT_EQ(run("fail", "").message, "fail: requested failure");
}

TEST_P(ExamplesTest, FlakyAsksForARetryUntilItsAttemptIsPastItsInput) {
  // The host's own test services report attempt 1 (plugin_host::JobServices).
  auto r = run("flaky", "1");
  EXPECT_EQ(r.code, JobCode::kRetry);
  EXPECT_EQ(r.plugin_status, TPOOL_STATUS_RETRY);
  EXPECT_EQ(r.message, "flaky: attempt 1 of the first 1 fails");
  EXPECT_EQ(run("flaky", "0").output, "ok on attempt 1");
  EXPECT_EQ(run("flaky", "two").code, JobCode::kInvalidInput);
}

TEST_P(ExamplesTest, FailThrowsExceptionBecomesAFailedResultAndTheHostKeepsWorking) {
  auto r = run("fail_throw", "boom");
  EXPECT_EQ(r.code, JobCode::kInternal);
  EXPECT_EQ(r.message,
            "handler 'fail_throw' (plugin 'fail_throw' 1.0.0) threw a C++ exception: "
            "fail_throw: boom (handlers must catch their exceptions and return a status)");
  // In process mode the runner caught it: the same sentence, and the runner
  // lives on (the host's own counter counts exceptions on its threads).
  if (!isolated()) {
    EXPECT_EQ(host_->counters().handler_exceptions, 1u);
  }
  EXPECT_EQ(run("echo", "still here").output, "still here");
}

TEST_P(ExamplesTest, SleepZeroReturnsAtOnce) {
  auto r = run("sleep", "0");
  ASSERT_TRUE(r.ok()) << r.message;
  EXPECT_EQ(r.output, "slept 0 ms");
  EXPECT_EQ(run("sleep", "soon").code, JobCode::kInvalidInput);
  EXPECT_EQ(run("sleep", "3600001").code, JobCode::kInvalidInput);
}

TEST_P(ExamplesTest, SleepHonoursCancellation) {
  TestServices services(host_.get());
  std::latch started(1);
  services.on_progress = [&](double, std::string_view note) {
    if (note == "sleeping 600000 ms") started.count_down();
  };
  InvokeResult r;
  // Ten minutes unless cancelled: without cancellation support the test's
  // own timeout fails it.
  std::thread t([&] { r = run("sleep", "600000", services); });
  started.wait();
  services.cancel();
  t.join();
  EXPECT_EQ(r.code, JobCode::kCancelled);
  EXPECT_EQ(r.message.rfind("sleep: cancelled with ", 0), 0u) << r.message;
  EXPECT_EQ(host_->counters().ignored_cancellation, 0u);
}

TEST_P(ExamplesTest, SleepStopsAtTheDeadline) {
  TestServices services(host_.get());
  services.set_deadline_in(std::chrono::milliseconds(20));
  auto r = run("sleep", "600000", services);
  EXPECT_EQ(r.code, JobCode::kDeadlineExceeded);
  EXPECT_EQ(r.message.rfind("sleep: deadline passed with ", 0), 0u) << r.message;
}

TEST_P(ExamplesTest, FanoutAggregatesItsChildrenInOrder) {
  auto r = run("fanout", "3 echo hi there");
  ASSERT_TRUE(r.ok()) << r.message;
  EXPECT_EQ(r.output, "hi there\nhi there\nhi there\n");
  auto h = run("fanout", "2 hash 2:abc");
  ASSERT_TRUE(h.ok()) << h.message;
  EXPECT_EQ(h.output, std::string(kSha256AbcX2) + "\n" + kSha256AbcX2 + "\n");
  // fan-out of fan-out
  auto nested = run("fanout", "2 fanout 2 echo x");
  ASSERT_TRUE(nested.ok()) << nested.message;
  EXPECT_EQ(nested.output, "x\nx\n\nx\nx\n\n");
}

TEST_P(ExamplesTest, FanoutReportsTheFirstFailedChild) {
  auto r = run("fanout", "2 fail boom");
  EXPECT_EQ(r.code, JobCode::kError);
  EXPECT_EQ(r.message, "fanout: child 1 of 2 (handler 'fail') failed: fail: boom");
  auto unknown = run("fanout", "2 nope x");
  EXPECT_EQ(unknown.code, JobCode::kUnknownHandler);
  EXPECT_EQ(unknown.message,
            "fanout: no child of handler 'nope' could run: no handler named 'nope' is loaded");
  EXPECT_EQ(run("fanout", "0 echo x").code, JobCode::kInvalidInput);
  EXPECT_EQ(run("fanout", "2 echo").code, JobCode::kInvalidInput);
}

INSTANTIATE_TEST_SUITE_P(BothModes, ExamplesTest,
                         ::testing::Values(IsolationMode::kInProcess, IsolationMode::kProcess),
                         mode_name);

class ExamplesConfig : public ::testing::TestWithParam<IsolationMode> {};

TEST_P(ExamplesConfig, HashInitRefusesABadConfigString) {
  LogRecorder log;
  HostConfig cfg = testing::config_for({TPOOL_EXAMPLE_PLUGIN_DIR}, log, /*abort=*/false);
  cfg.plugin_config["hash"] = "iterations=5";
  if (GetParam() == IsolationMode::kProcess) isolate(cfg);
  std::vector<LoadError> errors;
  auto loaded = Host::load(std::move(cfg), &errors);
  ASSERT_TRUE(loaded.ok());
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].kind, LoadErrorKind::kInitFailed);
  EXPECT_EQ(errors[0].plugin, "hash");
  EXPECT_NE(errors[0].message.find("hash: config string \"iterations=5\" is not understood"),
            std::string::npos)
      << errors[0].message;
  EXPECT_FALSE(loaded.value()->find("hash"));
  EXPECT_TRUE(loaded.value()->find("echo"));
}

}  // namespace
}  // namespace tpool::plugin_host

namespace tpool::plugin_host {
namespace {
INSTANTIATE_TEST_SUITE_P(BothModes, ExamplesConfig,
                         ::testing::Values(IsolationMode::kInProcess, IsolationMode::kProcess),
                         mode_name);
}  // namespace
}  // namespace tpool::plugin_host
