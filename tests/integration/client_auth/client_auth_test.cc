// tpool::client and tpoolctl with a Unix socket address, a bearer token, TLS
// and mutual TLS, against an in-process JobService that does what the daemon's
// listeners will do with tpool::security (issue 16): the token from the
// `authorization` metadata through TokenStore::authenticate (UNAUTHENTICATED),
// the certificate's principal through principal_from_peer, then
// Authorizer::check (PERMISSION_DENIED). It records every authorization value
// it receives, so a test can see exactly what went over the wire.
//
// Order: tpool/common (through tpool/security) before any gRPC header; see
// client/src/stream.cc.
#include "tpool/security/authorizer.h"
#include "tpool/security/peer.h"
//
#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "test_certs.h"
#include "tpool/client/client.h"
#include "tpool/v1/jobs.grpc.pb.h"

extern char** environ;

namespace tpool::testing {
namespace {

namespace sec = tpool::security;

// The JobService of the test: Execute echoes the handler name, ListHandlers
// lists "echo". Each call is authenticated and authorised first.
class GuardedJobs final : public tpool::v1::JobService::Service {
 public:
  explicit GuardedJobs(std::shared_ptr<const sec::TokenStore> store)
      : store_(store), authz_(std::move(store)) {}

  grpc::Status Execute(grpc::ServerContext* ctx, const tpool::v1::JobRequest* req,
                       tpool::v1::JobResult* reply) override {
    if (auto s = admit(ctx, sec::Method::kExecute, req->handler()); !s.ok()) return s;
    reply->set_output(req->handler());
    reply->set_state(tpool::v1::JOB_STATE_SUCCEEDED);
    return grpc::Status::OK;
  }
  grpc::Status ListHandlers(grpc::ServerContext* ctx, const tpool::v1::ListHandlersRequest*,
                            tpool::v1::ListHandlersReply* reply) override {
    if (auto s = admit(ctx, sec::Method::kListHandlers, ""); !s.ok()) return s;
    reply->add_handlers()->set_name("echo");
    return grpc::Status::OK;
  }

  std::vector<std::string> authorizations() const {
    std::lock_guard lk(mu_);
    return seen_;
  }
  std::vector<std::string> principals() const {
    std::lock_guard lk(mu_);
    return principals_;
  }
  int calls() const {
    std::lock_guard lk(mu_);
    return calls_;
  }

 private:
  grpc::Status admit(grpc::ServerContext* ctx, sec::Method m, const std::string& handler) {
    std::string principal;
    {
      std::lock_guard lk(mu_);
      ++calls_;
      auto range = ctx->client_metadata().equal_range("authorization");
      for (auto it = range.first; it != range.second; ++it)
        seen_.emplace_back(it->second.data(), it->second.size());
    }
    auto auth = ctx->client_metadata().find("authorization");
    if (auth != ctx->client_metadata().end()) {
      std::string v(auth->second.data(), auth->second.size());
      if (v.rfind("Bearer ", 0) != 0)
        return {grpc::StatusCode::UNAUTHENTICATED, "authorization is not a Bearer token"};
      auto who = store_->authenticate(v.substr(7));
      if (!who.ok()) return {grpc::StatusCode::UNAUTHENTICATED, who.status().message()};
      principal = who.value();
    } else if (auto ac = ctx->auth_context(); ac && ac->IsPeerAuthenticated()) {
      sec::PeerIdentity id;
      for (const auto& s : ac->FindPropertyValues("x509_subject_alternative_name"))
        id.sans.emplace_back(s.data(), s.size());
      for (const auto& s : ac->FindPropertyValues("x509_common_name"))
        id.common_name.assign(s.data(), s.size());
      auto who = sec::principal_from_peer(id);
      if (!who.ok()) return {grpc::StatusCode::UNAUTHENTICATED, who.status().message()};
      principal = who.value();
    } else {
      return {grpc::StatusCode::UNAUTHENTICATED, "no credentials"};
    }
    {
      std::lock_guard lk(mu_);
      principals_.push_back(principal);
    }
    Status s = authz_.check(principal, m, handler);
    if (!s.ok()) return {grpc::StatusCode::PERMISSION_DENIED, s.message()};
    return grpc::Status::OK;
  }

  std::shared_ptr<const sec::TokenStore> store_;
  sec::Authorizer authz_;
  mutable std::mutex mu_;
  std::vector<std::string> seen_;
  std::vector<std::string> principals_;
  int calls_ = 0;
};

struct Token {
  std::string token, line;
};
Token make_token(const char* principal, const char* roles, std::vector<std::string> handlers) {
  auto r = sec::make_token_line(principal, sec::parse_roles(roles).value(), handlers);
  EXPECT_TRUE(r.ok());
  return {r.value().token, r.value().line};
}

class ClientAuth : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(certs_.ok()) << certs_.read("gen.log");
    submitter_ = make_token("ci", "submit,read", {"echo"});
    reader_ = make_token("viewer", "read", {});
    auto store = sec::TokenStore::parse(
        submitter_.line + "\n" + reader_.line + "\ntest-client:submit,read:::\n", "test tokens");
    ASSERT_TRUE(store.ok()) << store.status().message();
    service_ = std::make_unique<GuardedJobs>(store.value());
    socket_ = certs_.path("tpoold.sock");
  }
  void TearDown() override {
    if (server_) server_->Shutdown();
  }

  // One server with a Unix socket, a plaintext TCP port and a TLS port
  // (client certificates requested and verified when sent, as client_auth =
  // request will do).
  void start() {
    grpc::ServerBuilder b;
    b.RegisterService(service_.get());
    b.AddListeningPort("unix:" + socket_, grpc::InsecureServerCredentials());
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &tcp_port_);
    grpc::SslServerCredentialsOptions tls(GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY);
    tls.pem_root_certs = certs_.read("ca.pem");
    tls.pem_key_cert_pairs.push_back({certs_.read("server.key"), certs_.read("server.pem")});
    b.AddListeningPort("127.0.0.1:0", grpc::SslServerCredentials(tls), &tls_port_);
    server_ = b.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_GT(tcp_port_, 0);
    ASSERT_GT(tls_port_, 0);
  }

  client::ClientOptions opts(const std::string& address, const std::string& token = "") {
    client::ClientOptions o;
    o.address = address;
    o.bearer_token = token;
    o.max_attempts = 1;
    o.default_deadline = std::chrono::seconds(10);
    return o;
  }
  client::TlsOptions tls() {
    client::TlsOptions t;
    t.enabled = true;
    t.root_certs_pem = certs_.read("ca.pem");
    return t;
  }
  std::string tcp() const { return "127.0.0.1:" + std::to_string(tcp_port_); }
  std::string tls_address() const { return "127.0.0.1:" + std::to_string(tls_port_); }

  TestCerts certs_;
  Token submitter_, reader_;
  std::unique_ptr<GuardedJobs> service_;
  std::unique_ptr<grpc::Server> server_;
  std::string socket_;
  int tcp_port_ = 0, tls_port_ = 0;
};

TEST_F(ClientAuth, UnixSocketCarriesTheTokenAsBearerMetadata) {
  start();
  for (const std::string& address : {"unix:" + socket_, socket_}) {
    client::Client c(opts(address, submitter_.token));
    auto r = c.execute({.handler = "echo"});
    ASSERT_TRUE(r.ok()) << address << ": " << r.error().to_string();
    EXPECT_EQ(r.value().output, "echo");
  }
  EXPECT_EQ(service_->authorizations(),
            (std::vector<std::string>(2, "Bearer " + submitter_.token)));
  EXPECT_EQ(service_->principals(), (std::vector<std::string>(2, "ci")));
}

TEST_F(ClientAuth, MissingOrWrongTokenIsUnauthenticatedAndHandlerOutsideAllowListDenied) {
  start();
  auto none = client::Client(opts("unix:" + socket_)).execute({.handler = "echo"});
  EXPECT_EQ(none.error().code(), 16) << none.error().to_string();
  std::string wrong = submitter_.token;
  wrong.back() = wrong.back() == '0' ? '1' : '0';
  auto bad = client::Client(opts("unix:" + socket_, wrong)).execute({.handler = "echo"});
  EXPECT_EQ(bad.error().code(), 16) << bad.error().to_string();
  EXPECT_EQ(bad.error().message().find(wrong), std::string::npos);
  auto denied =
      client::Client(opts("unix:" + socket_, submitter_.token)).execute({.handler = "sleep"});
  EXPECT_EQ(denied.error().code(), 7) << denied.error().to_string();
  EXPECT_NE(denied.error().message().find("may not run handler 'sleep'"), std::string::npos);
  auto role = client::Client(opts("unix:" + socket_, reader_.token)).execute({.handler = "echo"});
  EXPECT_EQ(role.error().code(), 7) << role.error().to_string();
  EXPECT_NE(role.error().message().find("needs the role 'submit'"), std::string::npos);
}

TEST_F(ClientAuth, PlaintextTcpWithholdsTheTokenUnlessAllowed) {
  start();
  client::Client plain(opts(tcp(), submitter_.token));
  auto r = plain.execute({.handler = "echo"});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), 16);
  EXPECT_NE(r.error().message().find("not sent to " + tcp() + " over plaintext TCP"),
            std::string::npos)
      << r.error().message();
  EXPECT_EQ(r.error().message().find(submitter_.token), std::string::npos);
  EXPECT_EQ(service_->calls(), 0) << "the call went out";

  auto o = opts(tcp(), submitter_.token);
  o.allow_insecure_token = true;
  auto allowed = client::Client(o).execute({.handler = "echo"});
  ASSERT_TRUE(allowed.ok()) << allowed.error().to_string();
  EXPECT_EQ(service_->authorizations(), std::vector<std::string>{"Bearer " + submitter_.token});
}

TEST_F(ClientAuth, TlsWithTheTestCaServerNameAndToken) {
  start();
  auto o = opts(tls_address(), submitter_.token);
  o.tls = tls();
  o.tls.server_name_override = "localhost";
  auto r = client::Client(o).execute({.handler = "echo"});
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  EXPECT_EQ(service_->authorizations(), std::vector<std::string>{"Bearer " + submitter_.token});

  // A plaintext client on the TLS port, and a client that trusts another CA.
  auto plain = client::Client(opts(tls_address())).execute({.handler = "echo"});
  EXPECT_EQ(plain.error().code(), 14) << plain.error().to_string();
  auto other = opts(tls_address(), submitter_.token);
  other.tls = tls();
  other.tls.root_certs_pem = certs_.read("untrusted-ca.pem");
  auto untrusted = client::Client(other).execute({.handler = "echo"});
  EXPECT_EQ(untrusted.error().code(), 14) << untrusted.error().to_string();
  EXPECT_EQ(service_->calls(), 1);
}

TEST_F(ClientAuth, MutualTlsPrincipalFromTheClientCertificate) {
  start();
  auto o = opts(tls_address());
  o.tls = tls();
  o.tls.cert_chain_pem = certs_.read("client.pem");
  o.tls.private_key_pem = certs_.read("client.key");
  auto r = client::Client(o).handlers();
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  EXPECT_EQ(service_->principals(), std::vector<std::string>{"test-client"});
  EXPECT_TRUE(service_->authorizations().empty());
}

// ---- tpoolctl ---------------------------------------------------------------

struct CtlRun {
  int exit = -1;
  std::string out, err;
};

CtlRun ctl(const std::string& dir, std::vector<std::string> args,
           const std::vector<std::string>& env_extra = {}) {
  std::string out = dir + "/ctl.out", err = dir + "/ctl.err";
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_addopen(&fa, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  args.insert(args.begin(), TPOOLCTL_BIN);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_store;
  for (char** e = environ; *e != nullptr; ++e)
    if (std::string(*e).rfind("TPOOL_", 0) != 0) env_store.emplace_back(*e);
  env_store.insert(env_store.end(), env_extra.begin(), env_extra.end());
  std::vector<char*> envp;
  for (auto& e : env_store) envp.push_back(e.data());
  envp.push_back(nullptr);
  pid_t pid = 0;
  CtlRun r;
  if (posix_spawn(&pid, TPOOLCTL_BIN, &fa, nullptr, argv.data(), envp.data()) == 0) {
    int st = 0;
    ::waitpid(pid, &st, 0);
    r.exit = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  }
  posix_spawn_file_actions_destroy(&fa);
  auto slurp = [](const std::string& p) {
    std::ifstream in(p);
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
  };
  r.out = slurp(out);
  r.err = slurp(err);
  return r;
}

TEST_F(ClientAuth, TpoolctlTokenFileOverUnixSocketAndItsRefusals) {
  start();
  const std::string file = certs_.path("token");
  std::ofstream(file) << submitter_.token << "\n";
  ::chmod(file.c_str(), 0600);
  const std::string secret = submitter_.token.substr(submitter_.token.find('.') + 1);

  auto ok = ctl(certs_.dir(), {"--address", "unix:" + socket_, "--token-file", file, "handlers"});
  EXPECT_EQ(ok.exit, 0) << ok.err;
  EXPECT_NE(ok.out.find("echo"), std::string::npos) << ok.out;
  // The environment variable instead of the flag.
  auto env =
      ctl(certs_.dir(), {"--address", "unix:" + socket_, "handlers"}, {"TPOOL_TOKEN_FILE=" + file});
  EXPECT_EQ(env.exit, 0) << env.err;
  EXPECT_EQ(service_->authorizations(),
            (std::vector<std::string>(2, "Bearer " + submitter_.token)));

  auto tcp_run = ctl(certs_.dir(), {"--address", tcp(), "--token-file", file, "handlers"});
  EXPECT_EQ(tcp_run.exit, 2) << tcp_run.err;
  EXPECT_NE(tcp_run.err.find("--insecure-token"), std::string::npos) << tcp_run.err;

  ::chmod(file.c_str(), 0644);
  auto loose =
      ctl(certs_.dir(), {"--address", "unix:" + socket_, "--token-file", file, "handlers"});
  EXPECT_EQ(loose.exit, 2);
  EXPECT_NE(loose.err.find("chmod 600"), std::string::npos) << loose.err;

  auto half = ctl(certs_.dir(), {"--tls-cert", certs_.path("client.pem"), "handlers"});
  EXPECT_EQ(half.exit, 2);
  EXPECT_NE(half.err.find("--tls-cert and --tls-key go together"), std::string::npos);

  for (const auto* r : {&ok, &env, &tcp_run, &loose, &half}) {
    EXPECT_EQ(r->out.find(secret), std::string::npos);
    EXPECT_EQ(r->err.find(secret), std::string::npos);
  }
  EXPECT_EQ(service_->calls(), 2);
}

TEST_F(ClientAuth, TpoolctlTlsFlagsAndMutualTls) {
  start();
  auto r =
      ctl(certs_.dir(), {"--address", tls_address(), "--tls-ca", certs_.path("ca.pem"),
                         "--tls-server-name", "localhost", "--tls-cert", certs_.path("client.pem"),
                         "--tls-key", certs_.path("client.key"), "handlers"});
  EXPECT_EQ(r.exit, 0) << r.err;
  EXPECT_EQ(service_->principals(), std::vector<std::string>{"test-client"});
}

TEST(TpoolctlToken, CreatePrintsTheTokenOnceAndALineThatAuthenticatesIt) {
  char tmpl[] = "/tmp/tpoolctl-token.XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  auto r = ctl(tmpl, {"token", "create", "--principal", "ci", "--roles", "submit,read",
                      "--handlers", "echo,sha256"});
  ASSERT_EQ(r.exit, 0) << r.err;
  std::istringstream lines(r.out);
  std::string token, line, extra;
  std::getline(lines, token);
  std::getline(lines, line);
  EXPECT_FALSE(std::getline(lines, extra)) << "more than two lines on stdout";
  EXPECT_EQ(r.err.find(token.substr(3)), std::string::npos) << "the token went to stderr";
  EXPECT_EQ(line.find(token.substr(3)), std::string::npos) << "the line holds the secret";
  auto store = sec::TokenStore::parse(line, "printed");
  ASSERT_TRUE(store.ok()) << store.status().message();
  EXPECT_EQ(store.value()->authenticate(token).value(), "ci");
  EXPECT_EQ(store.value()->find("ci")->handlers, (std::vector<std::string>{"echo", "sha256"}));
  auto bad = ctl(tmpl, {"token", "create", "--principal", "ci", "--roles", "root"});
  EXPECT_EQ(bad.exit, 2);
  EXPECT_NE(bad.err.find("unknown role 'root'"), std::string::npos) << bad.err;
  std::filesystem::remove_all(tmpl);
}

}  // namespace
}  // namespace tpool::testing
