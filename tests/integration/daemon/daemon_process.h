// A real tpoold process for integration tests: started on an ephemeral
// loopback port with the example plugins, stopped (and reaped) by the test.
// Its admin listener is a Unix socket in the daemon's own temporary directory
// (admin() calls go there; the job port does not serve AdminService).
//
// The secure variant (issue 16): with TPOOL_IT_SECURE=1 in the environment
// (the *_secure ctest entries), every daemon serves TLS with certificates from
// scripts/gen-test-certs.sh (made once per test process) and auth on with a
// token file whose one principal has every role; jobs() and channel() then
// speak TLS with that token as `authorization: Bearer` metadata, so a suite
// written for the plaintext daemon runs unchanged over the secure path.
#pragma once

// The secure variant needs tpool::security (make_token_line): test targets
// that do not link it get the plaintext fixture only. Before any gRPC header
// (tpool/common/thread_annotations.h).
#if __has_include("tpool/security/token_store.h")
#include "tpool/security/token_store.h"
#define TPOOL_IT_HAVE_SECURE 1
#else
#define TPOOL_IT_HAVE_SECURE 0
#endif
//

#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
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

// scripts/gen-test-certs.sh (the secure variant's test targets define it).
inline std::string gen_test_certs_script() {
#ifdef TPOOL_GEN_TEST_CERTS
  return TPOOL_GEN_TEST_CERTS;
#else
  return "scripts/gen-test-certs.sh";  // the test's CMakeLists does not enable the variant
#endif
}

// Whether this run is the store variant (TPOOL_IT_STORE=1, issue 17): every
// daemon keeps a job store in its own directory with [store] durable = true,
// so every job of the suite is durable (committed before it is acknowledged,
// journaled as it runs and ends).
inline bool store_variant() {
  const char* v = std::getenv("TPOOL_IT_STORE");
  return v != nullptr && std::string(v) == "1";
}

// Whether this run is the isolated variant (TPOOL_IT_ISOLATED=1, issue 18):
// every daemon runs every plugin in process mode ([plugins.isolation] mode =
// "process"), so the suite's jobs go through tpool-runner processes and the
// channel, with the example plugins unchanged.
inline bool isolated_variant() {
  const char* v = std::getenv("TPOOL_IT_ISOLATED");
  return v != nullptr && std::string(v) == "1";
}

// Whether this run is the secure variant (TPOOL_IT_SECURE=1).
inline bool secure_variant() {
  const char* v = std::getenv("TPOOL_IT_SECURE");
  return TPOOL_IT_HAVE_SECURE && v != nullptr && std::string(v) == "1";
}

// The secure variant's material, made once per test process: the test CA and
// server certificate (gen-test-certs.sh) and a token for principal "it" with
// every role. Removed when the process exits.
class SecureMaterial {
 public:
  static const SecureMaterial& get() {
    static const SecureMaterial m;
    return m;
  }
  bool ok() const { return ok_; }
  std::string path(const std::string& name) const { return dir_ + "/" + name; }
  std::string read(const std::string& name) const {
    std::ifstream in(path(name), std::ios::binary);
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
  }
  const std::string& token() const { return token_; }
  const std::string& dir() const { return dir_; }
  // [tls] and [auth] for tpoold.
  std::string config() const {
    return "\n[tls]\ncert_file = \"" + path("server.pem") + "\"\nkey_file = \"" +
           path("server.key") + "\"\nclient_ca_file = \"" + path("ca.pem") +
           "\"\nclient_auth = \"request\"\n[auth]\ntoken_file = \"" + path("tokens") + "\"\n";
  }

 private:
  SecureMaterial() {
    char tmpl[] = "/tmp/tpool-it-secure.XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) return;
    dir_ = tmpl;
    const std::string cmd =
        "'" + gen_test_certs_script() + "' '" + dir_ + "' > '" + dir_ + "/gen.log' 2>&1";
    if (std::system(cmd.c_str()) != 0) return;
#if TPOOL_IT_HAVE_SECURE
    auto t = security::make_token_line("it", security::RoleSet(7), {});
    if (!t.ok()) return;
    token_ = t.value().token;
    {
      std::ofstream f(path("tokens"));
      f << t.value().line << "\n";
    }
    ::chmod(path("tokens").c_str(), 0600);
    ok_ = true;
#endif
  }
  ~SecureMaterial() {
    if (!dir_.empty()) {
      std::error_code ec;
      std::filesystem::remove_all(dir_, ec);
    }
  }
  std::string dir_, token_;
  bool ok_ = false;
};

// Adds `authorization: Bearer <token>` to every call of a channel.
class BearerPlugin final : public grpc::MetadataCredentialsPlugin {
 public:
  explicit BearerPlugin(std::string token) : token_(std::move(token)) {}
  grpc::Status GetMetadata(grpc::string_ref, grpc::string_ref, const grpc::AuthContext&,
                           std::multimap<grpc::string, grpc::string>* md) override {
    md->emplace("authorization", "Bearer " + token_);
    return grpc::Status::OK;
  }

 private:
  std::string token_;
};

// The job port's channel credentials: plaintext, or (secure variant) TLS
// with the test CA and the token.
inline std::shared_ptr<grpc::ChannelCredentials> job_channel_credentials() {
  if (!secure_variant()) return grpc::InsecureChannelCredentials();
  const SecureMaterial& m = SecureMaterial::get();
  grpc::SslCredentialsOptions tls;
  tls.pem_root_certs = m.read("ca.pem");
  return grpc::CompositeChannelCredentials(
      grpc::SslCredentials(tls),
      grpc::MetadataCredentialsFromPlugin(std::make_unique<BearerPlugin>(m.token())));
}

class DaemonProcess {
 public:
  // extra_config: TOML appended to a config that sets the port file and the
  // plugin directory. extra_args: more flags.
  // extra_env: NAME=VALUE entries added to the daemon's environment.
  // exec_prefix: a program (and its arguments) that runs tpoold, e.g. the
  // unit sandbox of the isolation tests.
  explicit DaemonProcess(const std::string& extra_config = "",
                         std::vector<std::string> extra_args = {},
                         std::vector<std::string> extra_env = {},
                         std::vector<std::string> exec_prefix = {}) {
    dir_ = std::filesystem::temp_directory_path() /
           ("tpoold-it-" + std::to_string(::getpid()) + "-" + std::to_string(counter()++));
    std::filesystem::create_directories(dir_);
    port_file_ = (dir_ / "port").string();
    config_file_ = (dir_ / "tpoold.toml").string();
    log_file_ = (dir_ / "tpoold.log").string();
    admin_socket_ = (dir_ / "admin.sock").string();
    {
      std::ofstream c(config_file_);
      c << extra_config << "\n";
      if (secure_variant() && extra_config.find("[tls]") == std::string::npos) {
        EXPECT_TRUE(SecureMaterial::get().ok())
            << "gen-test-certs.sh failed: " << SecureMaterial::get().read("gen.log");
        c << SecureMaterial::get().config();
      }
      if (isolated_variant() && extra_config.find("[plugins.isolation") == std::string::npos) {
        c << "\n[plugins.isolation]\nmode = \"process\"\nrunners = 4\n";
      }
      if (store_variant() && extra_config.find("[store]") == std::string::npos) {
        c << "\n[store]\npath = \"" << (dir_ / "jobs.db").string() << "\"\ndurable = true\n";
      }
    }
    std::vector<std::string> args = {TPOOLD_BIN,       "--config",    config_file_, "--listen",
                                     "127.0.0.1:0",    "--port-file", port_file_,   "--plugin-dir",
                                     TPOOL_PLUGIN_DIR, "--log-level", "info"};
    // The admin socket in this daemon's directory, unless the test picks one.
    bool admin_given = extra_config.find("admin_listen") != std::string::npos;
    for (const auto& a : extra_args) admin_given = admin_given || a.rfind("--admin-listen", 0) == 0;
    if (!admin_given) {
      args.push_back("--admin-listen");
      args.push_back("unix:" + admin_socket_);
    }
    args.insert(args.end(), extra_args.begin(), extra_args.end());
    args.insert(args.begin(), exec_prefix.begin(), exec_prefix.end());
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
      channel_ = grpc::CreateCustomChannel(address(), job_channel_credentials(), ch);
      jobs_ = tpool::v1::JobService::NewStub(channel_);
      // The admin socket is plaintext: its mode (0600) is its access control.
      admin_channel_ =
          grpc::CreateCustomChannel(admin_address(), grpc::InsecureChannelCredentials(), ch);
      admin_ = tpool::v1::AdminService::NewStub(admin_channel_);
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
  int port() const { return port_; }
  // The admin listener (unless the test configured another).
  std::string admin_address() const { return "unix:" + admin_socket_; }
  const std::string& admin_socket() const { return admin_socket_; }
  const std::filesystem::path& dir() const { return dir_; }
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
  std::string port_file_, config_file_, log_file_, admin_socket_;
  pid_t pid_ = -1;
  int port_ = 0;
  std::optional<int> exit_code_;
  std::shared_ptr<grpc::Channel> channel_;
  std::shared_ptr<grpc::Channel> admin_channel_;
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

// While it lives, this process and what it starts (a daemon, its runners)
// write no core files: for tests that crash them on purpose.
class NoCoreFiles {
 public:
  NoCoreFiles() {
    const rlimit none{0, 0};
    ::getrlimit(RLIMIT_CORE, &saved_);
    ::setrlimit(RLIMIT_CORE, &none);
  }
  ~NoCoreFiles() { ::setrlimit(RLIMIT_CORE, &saved_); }
  NoCoreFiles(const NoCoreFiles&) = delete;
  NoCoreFiles& operator=(const NoCoreFiles&) = delete;

 private:
  rlimit saved_{};
};

// Get of job `id` on d (a failed call fails the test and returns an empty
// status).
inline tpool::v1::JobStatus get(DaemonProcess& d, std::uint64_t id) {
  grpc::ClientContext c;
  tpool::v1::JobRef ref;
  ref.set_job_id(id);
  tpool::v1::JobStatus st;
  grpc::Status s = d.jobs().Get(&c, ref, &st);
  EXPECT_TRUE(s.ok()) << s.error_message();
  return st;
}

}  // namespace tpool::testing
