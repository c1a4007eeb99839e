// The plugin host's boundary rules, one host function or rule per test,
// through the testkit plugin (a real .so, real dlopen).
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "plugin_test_support.h"
#include "tpool/plugin.h"
#include "tpool/plugin_host/host.h"

namespace tpool::plugin_host {
namespace {

using testing::LogRecorder;
using testing::TempDir;
using testing::TestServices;

class HostTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_.add(TPOOL_TEST_TESTKIT_SO);
    HostConfig cfg = testing::config_for({dir_.str()}, log_, /*abort_on_error=*/true);
    cfg.plugin_config["testkit"] = "colour=blue";
    cfg.max_output_bytes = 1000;
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

  TempDir dir_;
  LogRecorder log_;
  std::unique_ptr<Host> host_;
};

TEST_F(HostTest, ListsHandlersSortedWithTheirDeclarations) {
  auto handlers = host_->list();
  ASSERT_EQ(handlers.size(), 7u);
  std::vector<std::string> names;
  for (const auto& h : handlers) names.push_back(h.name);
  EXPECT_EQ(names, (std::vector<std::string>{"abi", "big_output", "chatty", "children",
                                             "ignore_cancel", "small_input", "status"}));
  const HandlerInfo& ic = handlers[4];
  EXPECT_EQ(ic.lane, Lane::kBlocking);
  EXPECT_EQ(ic.description, "returns OK even when cancelled");
  EXPECT_EQ(ic.plugin_name, "testkit");
  EXPECT_EQ(ic.plugin_version, "0.1");
  EXPECT_EQ(ic.plugin_file, (dir_.path() / "testkit.so").string());
  EXPECT_EQ(ic.generation, 1u);
  EXPECT_EQ(handlers[5].max_input_bytes, 4u);
  EXPECT_FALSE(host_->find("no_such_handler"));
  auto c = host_->counters();
  EXPECT_EQ(c.plugins_loaded, 1u);
  EXPECT_EQ(c.handlers_registered, 7u);
  EXPECT_EQ(c.libraries_open, 1u);
  EXPECT_EQ(c.load_failures, 0u);
}

TEST_F(HostTest, PluginSeesTheHostTableOfThisAbi) {
  auto r = run("abi", "");
  ASSERT_TRUE(r.ok()) << r.message;
  EXPECT_EQ(r.output, std::to_string(TPOOL_PLUGIN_ABI_MAJOR) + "." +
                          std::to_string(TPOOL_PLUGIN_ABI_MINOR) +
                          " size=" + std::to_string(sizeof(tpool_host_api)) + " run_children=1");
}

TEST_F(HostTest, InitGetsTheConfigStringAndLogsWithoutAJob) {
  EXPECT_TRUE(log_.contains("testkit init config=colour=blue"));
  for (const auto& l : log_.lines()) {
    if (l.message == "testkit init config=colour=blue") {
      EXPECT_EQ(l.plugin, "testkit");
    }
  }
  auto r = run("chatty", "");
  ASSERT_TRUE(r.ok()) << r.message;
  EXPECT_EQ(r.output, "config=colour=blue remaining=none");
}

TEST_F(HostTest, OutputUpToTheLimitPassesOneByteMoreFails) {
  auto ok = run("big_output", "1000");
  ASSERT_TRUE(ok.ok()) << ok.message;
  EXPECT_EQ(ok.output, std::string(1000, 'x'));

  auto over = run("big_output", "1001");
  EXPECT_EQ(over.code, JobCode::kOutputTooLarge);
  EXPECT_TRUE(over.output.empty());
  EXPECT_NE(over.message.find("1001 bytes"), std::string::npos) << over.message;
  EXPECT_NE(over.message.find("limit of 1000 bytes (max_output_bytes)"), std::string::npos)
      << over.message;
  EXPECT_EQ(host_->counters().output_too_large, 1u);
}

TEST_F(HostTest, InputOverTheHandlersLimitIsRefusedBeforeTheCall) {
  auto ok = run("small_input", "abcd");
  ASSERT_TRUE(ok.ok()) << ok.message;
  EXPECT_EQ(ok.output, "abcd");
  auto over = run("small_input", "abcde");
  EXPECT_EQ(over.code, JobCode::kInputTooLarge);
  EXPECT_EQ(over.message,
            "the input of 5 bytes is larger than handler 'small_input' (plugin 'testkit' 0.1) "
            "accepts (max_input_bytes 4): send a smaller input");
}

TEST_F(HostTest, HandlerIgnoringCancellationIsStillReportedCancelledAndCounted) {
  TestServices services(host_.get());
  services.on_progress = [&](double, std::string_view) { services.cancel(); };
  auto r = run("ignore_cancel", "", services);
  EXPECT_EQ(r.code, JobCode::kCancelled);
  EXPECT_TRUE(r.output.empty());
  EXPECT_NE(r.message.find("cancelled when handler 'ignore_cancel'"), std::string::npos)
      << r.message;
  EXPECT_EQ(host_->counters().ignored_cancellation, 1u);
}

TEST_F(HostTest, HandlerIgnoringTheDeadlineIsReportedDeadlineExceeded) {
  TestServices services(host_.get());
  services.on_progress = [&](double, std::string_view) {
    services.set_deadline_in(std::chrono::nanoseconds(-1));  // already passed
  };
  auto r = run("ignore_cancel", "", services);
  EXPECT_EQ(r.code, JobCode::kDeadlineExceeded);
  EXPECT_EQ(host_->counters().ignored_cancellation, 1u);
}

TEST_F(HostTest, LogProgressAndMessageReachTheJobServices) {
  TestServices services(host_.get());
  services.set_deadline_in(std::chrono::hours(1));
  auto r = run("chatty", "", services);
  ASSERT_TRUE(r.ok()) << r.message;
  EXPECT_EQ(r.message, "all good");
  EXPECT_EQ(r.output, "config=colour=blue remaining=some");
  auto logs = services.logs();
  ASSERT_EQ(logs.size(), 3u);
  EXPECT_EQ(logs[0].level, LogLevel::kDebug);
  EXPECT_EQ(logs[1].level, LogLevel::kWarn);
  EXPECT_EQ(logs[2].level, LogLevel::kError);  // level 99 is clamped
  EXPECT_EQ(logs[2].message, "level 99 line");
  auto progress = services.progress_reports();
  ASSERT_EQ(progress.size(), 2u);
  EXPECT_EQ(progress[0], (std::pair<double, std::string>{1.0, "over"}));
  EXPECT_EQ(progress[1], (std::pair<double, std::string>{0.0, ""}));
}

TEST_F(HostTest, NonZeroStatusWithoutMessageGetsOneNamingTheHandler) {
  auto r = run("status", "42");
  EXPECT_EQ(r.code, JobCode::kError);
  EXPECT_EQ(r.plugin_status, 42);
  EXPECT_EQ(r.message,
            "handler 'status' (plugin 'testkit' 0.1) failed with status 42 and gave no message");
  auto known = run("status", "2");
  EXPECT_EQ(known.code, JobCode::kInvalidInput);
  EXPECT_EQ(host_->counters().handler_failures, 2u);
}

TEST_F(HostTest, ChildrenResultsComeBackInInputOrder) {
  auto r = run("children", "small_input");
  ASSERT_TRUE(r.ok()) << r.message;
  EXPECT_EQ(r.output, "0|0:a:|0:bb:|0:ccc:");
  auto unknown = run("children", "nope");
  ASSERT_TRUE(unknown.ok()) << unknown.message;
  EXPECT_EQ(unknown.output,
            "7|7::no handler named 'nope' is loaded|7::no handler named 'nope' is loaded"
            "|7::no handler named 'nope' is loaded");
  auto failing = run("children", "status");  // inputs a, bb, ccc parse as status 0
  ASSERT_TRUE(failing.ok()) << failing.message;
  EXPECT_EQ(failing.output, "0|0::|0::|0::");
}

TEST_F(HostTest, EmptyRefFailsAsUnknownHandler) {
  TestServices services(host_.get());
  auto r = host_->invoke(HandlerRef(), "x", services);
  EXPECT_EQ(r.code, JobCode::kUnknownHandler);
}

TEST_F(HostTest, HandlerRefKeepsThePluginLoadedAfterTheHostIsGone) {
  HandlerRef ref = host_->find("small_input");
  host_.reset();
  EXPECT_FALSE(log_.contains("testkit fini"));
  EXPECT_EQ(ref.info().plugin_name, "testkit");
  ref = HandlerRef();
  EXPECT_TRUE(log_.contains("testkit fini"));
}

TEST(HostLoad, ToStringNamesEveryCode) {
  EXPECT_EQ(to_string(JobCode::kDeadlineExceeded), "deadline_exceeded");
  EXPECT_EQ(to_string(LoadErrorKind::kAbiMinorNewer), "abi_minor_newer");
  EXPECT_EQ(to_string(LogLevel::kWarn), "warn");
}

}  // namespace
}  // namespace tpool::plugin_host
