// A real tpoold process for integration tests: started on an ephemeral
// loopback port with the example plugins, stopped (and reaped) by the test.
#pragma once

#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tpool/v1/admin.grpc.pb.h"
#include "tpool/v1/jobs.grpc.pb.h"

namespace tpool::testing {

class DaemonProcess {
 public:
  // extra_config: TOML appended to a config that sets the port file and the
  // plugin directory. extra_args: more flags.
  // extra_env: NAME=VALUE entries added to the daemon's environment.
  explicit DaemonProcess(const std::string& extra_config = "",
                         std::vector<std::string> extra_args = {},
                         std::vector<std::string> extra_env = {}) {
    dir_ = std::filesystem::temp_directory_path() /
           ("tpoold-it-" + std::to_string(::getpid()) + "-" + std::to_string(counter()++));
    std::filesystem::create_directories(dir_);
    port_file_ = (dir_ / "port").string();
    config_file_ = (dir_ / "tpoold.toml").string();
    log_file_ = (dir_ / "tpoold.log").string();
    {
      std::ofstream c(config_file_);
      c << extra_config << "\n";
    }
    std::vector<std::string> args = {TPOOLD_BIN,       "--config",    config_file_, "--listen",
                                     "127.0.0.1:0",    "--port-file", port_file_,   "--plugin-dir",
                                     TPOOL_PLUGIN_DIR, "--log-level", "info"};
    args.insert(args.end(), extra_args.begin(), extra_args.end());
    pid_ = ::fork();
    if (pid_ == 0) {
      // If the test process dies, so does the daemon: nothing is left running.
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      int fd = ::open(log_file_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd >= 0) {
        ::dup2(fd, 1);
        ::dup2(fd, 2);
      }
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      for (auto& e : extra_env) ::putenv(e.data());
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    // Poll for the port file with a bounded deadline (an external process).
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (std::chrono::steady_clock::now() < deadline) {
      std::ifstream p(port_file_);
      if (p >> port_ && port_ > 0) break;
      port_ = 0;
      if (exited()) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (port_ != 0) {
      grpc::ChannelArguments ch;
      ch.SetMaxReceiveMessageSize(64 << 20);
      ch.SetMaxSendMessageSize(64 << 20);
      channel_ = grpc::CreateCustomChannel(address(), grpc::InsecureChannelCredentials(), ch);
      jobs_ = tpool::v1::JobService::NewStub(channel_);
      admin_ = tpool::v1::AdminService::NewStub(channel_);
    }
  }

  ~DaemonProcess() {
    if (pid_ > 0 && !exit_code_) {
      ::kill(pid_, SIGKILL);
      int st = 0;
      ::waitpid(pid_, &st, 0);
    }
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  bool started() const { return port_ != 0; }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  tpool::v1::JobService::Stub& jobs() { return *jobs_; }
  tpool::v1::AdminService::Stub& admin() { return *admin_; }
  std::shared_ptr<grpc::Channel> channel() { return channel_; }
  pid_t pid() const { return pid_; }
  std::string log() const {
    std::ifstream in(log_file_);
    std::ostringstream out;
    out << in.rdbuf();
    return out.str();
  }
  void signal(int sig) { ::kill(pid_, sig); }

  // Waits (bounded) for the process to exit; its exit code, or nullopt.
  std::optional<int> wait_exit(std::chrono::milliseconds timeout) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!exited()) {
      if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return exit_code_;
  }

  // SIGTERM and wait: the exit code (or nullopt if it did not stop in time).
  std::optional<int> stop(std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
    if (!exit_code_) signal(SIGTERM);
    return wait_exit(timeout);
  }

 private:
  bool exited() {
    if (exit_code_) return true;
    int st = 0;
    if (::waitpid(pid_, &st, WNOHANG) == pid_) {
      exit_code_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      return true;
    }
    return false;
  }
  static int& counter() {
    static int n = 0;
    return n;
  }

  std::filesystem::path dir_;
  std::string port_file_, config_file_, log_file_;
  pid_t pid_ = -1;
  int port_ = 0;
  std::optional<int> exit_code_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<tpool::v1::JobService::Stub> jobs_;
  std::unique_ptr<tpool::v1::AdminService::Stub> admin_;
};

// A test suite sharing one daemon: started before the suite's first test
// with Suite::daemon_config() (TOML), stopped after its last, and expected
// to exit 0.
template <class Suite>
class DaemonSuite : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    daemon_ = new DaemonProcess(Suite::daemon_config());
    ASSERT_TRUE(daemon_->started()) << daemon_->log();
  }
  static void TearDownTestSuite() {
    EXPECT_EQ(daemon_->stop(), std::optional<int>(0)) << daemon_->log();
    delete daemon_;
    daemon_ = nullptr;
  }
  static inline DaemonProcess* daemon_ = nullptr;
};

inline tpool::v1::JobRequest job(const std::string& handler, const std::string& payload,
                                 std::uint64_t tag = 0) {
  tpool::v1::JobRequest r;
  r.set_handler(handler);
  r.set_payload(payload);
  r.set_tag(tag);
  return r;
}

}  // namespace tpool::testing
