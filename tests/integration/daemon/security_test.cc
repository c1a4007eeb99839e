// The listeners' security against the real tpoold (issue 16, Verify): TLS
// handshakes (right CA, plaintext client, untrusted CA, expired certificate,
// client_auth = require without a client certificate), authentication
// (missing or wrong token: UNAUTHENTICATED) and authorisation (role or handler
// missing: PERMISSION_DENIED, per item for SubmitBatch and Stream), the job
// port without AdminService, the admin socket (0600, tpoolctl drains through
// it, the default path), certificate rotation without a restart under an open
// Stream, the token file's reload on SIGHUP, and the refusal of non-loopback
// plaintext. Certificates come from scripts/gen-test-certs.sh at test time.
#include "daemon_process.h"
//
#include <spawn.h>
#include <sys/stat.h>

#include <cstdio>
#include <functional>

#include "test_certs.h"
#include "tpool/security/token_store.h"

extern char** environ;

namespace tpool::testing {
namespace {

using namespace std::chrono_literals;
using grpc::StatusCode;
namespace sec = tpool::security;

struct Token {
  std::string token, line;
};
Token make_token(const char* principal, const char* roles, std::vector<std::string> handlers) {
  auto r = sec::make_token_line(principal, sec::parse_roles(roles).value(), handlers);
  EXPECT_TRUE(r.ok());
  return {r.value().token, r.value().line};
}

std::string run_capture(const std::string& cmd) {
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return out;
  char buf[4096];
  std::size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  ::pclose(p);
  return out;
}

// The serial number of a PEM certificate file ("serial=7A...").
std::string serial_of_file(const std::string& pem) {
  return run_capture("openssl x509 -noout -serial -in '" + pem + "' 2>/dev/null");
}
// The serial number of the certificate a TLS server at 127.0.0.1:port
// serves to a new connection (openssl s_client), or "" if no handshake.
std::string served_serial(int port) {
  return run_capture("openssl s_client -connect 127.0.0.1:" + std::to_string(port) +
                     " -alpn h2 -servername localhost </dev/null 2>/dev/null | "
                     "openssl x509 -noout -serial 2>/dev/null");
}

// The cipher an openssl client offering only `version` (tls1_1, tls1_2,
// tls1_3; every cipher allowed on the client's side) negotiates with the
// server at 127.0.0.1:port: "(NONE)" when the server refuses the version.
std::string negotiated_cipher(int port, const std::string& version, const std::string& ca) {
  const std::string out =
      run_capture("openssl s_client -connect 127.0.0.1:" + std::to_string(port) + " -" + version +
                  " -cipher 'DEFAULT:@SECLEVEL=0' -alpn h2 -CAfile '" + ca + "' </dev/null 2>&1");
  const std::string key = "Cipher is ";
  const auto at = out.find(key);
  if (at == std::string::npos) return "(no handshake output)";
  return out.substr(at + key.size(), out.find('\n', at) - at - key.size());
}

// Adds a bearer token to a call.
void bearer(grpc::ClientContext& ctx, const std::string& token) {
  ctx.AddMetadata("authorization", "Bearer " + token);
}

::testing::AssertionResult is(const grpc::Status& s, StatusCode code, const std::string& part) {
  if (s.error_code() == code && s.error_message().find(part) != std::string::npos) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << "status " << s.error_code() << " '" << s.error_message()
                                       << "', want " << code << " with '" << part << "'";
}

class ListenerSecurity : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(certs_.ok()) << certs_.read("gen.log");
    ci_ = make_token("ci", "submit,read", {"echo"});
    viewer_ = make_token("viewer", "read", {});
    ops_ = make_token("ops", "read,admin", {});
    write_tokens(ci_.line + "\n" + viewer_.line + "\n" + ops_.line +
                 "\ntest-client:submit,read:echo::\n");
  }

  void write_tokens(const std::string& text) {
    const std::string tmp = certs_.path("tokens.tmp");
    {
      std::ofstream f(tmp);
      f << text;
    }
    ::chmod(tmp.c_str(), 0600);
    std::rename(tmp.c_str(), certs_.path("tokens").c_str());  // whole, at once
  }

  // [tls] + [auth] with the test certificates.
  std::string secure_config(const std::string& client_auth = "request",
                            const std::string& cert = "server") {
    std::string c = "[metrics]\nenabled = false\n[tls]\ncert_file = \"" +
                    certs_.path(cert + ".pem") + "\"\nkey_file = \"" + certs_.path(cert + ".key") +
                    "\"\nrefresh_interval_ms = 1000\n";
    if (client_auth != "none") {
      c += "client_ca_file = \"" + certs_.path("ca.pem") + "\"\nclient_auth = \"" + client_auth +
           "\"\n";
    }
    c += "[auth]\ntoken_file = \"" + certs_.path("tokens") + "\"\n";
    return c;
  }

  std::shared_ptr<grpc::Channel> tls_channel(const DaemonProcess& d,
                                             const std::string& roots = "ca.pem",
                                             bool client_cert = false) {
    grpc::SslCredentialsOptions o;
    o.pem_root_certs = certs_.read(roots);
    if (client_cert) {
      o.pem_private_key = certs_.read("client.key");
      o.pem_cert_chain = certs_.read("client.pem");
    }
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // a new connection per channel
    return grpc::CreateCustomChannel(d.address(), grpc::SslCredentials(o), args);
  }

  static grpc::Status execute(const std::shared_ptr<grpc::Channel>& ch, const std::string& token,
                              const std::string& handler = "echo",
                              tpool::v1::JobResult* out = nullptr) {
    auto stub = tpool::v1::JobService::NewStub(ch);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 10s);
    if (!token.empty()) bearer(ctx, token);
    tpool::v1::JobResult res;
    return stub->Execute(&ctx, job(handler, "x"), out != nullptr ? out : &res);
  }

  TestCerts certs_;
  Token ci_, viewer_, ops_;
};

TEST_F(ListenerSecurity, TlsHandshakeSucceedsWithTheRightCa) {
  DaemonProcess d(secure_config());
  ASSERT_TRUE(d.started()) << d.log();
  tpool::v1::JobResult res;
  auto s = execute(tls_channel(d), ci_.token, "echo", &res);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(res.output(), "x");
  EXPECT_NE(d.log().find("TLS, client certificates request"), std::string::npos) << d.log();
  // TLS 1.2 or newer only: a TLS 1.1 client gets no cipher.
  EXPECT_EQ(negotiated_cipher(d.port(), "tls1_1", certs_.path("ca.pem")), "(NONE)");
  EXPECT_EQ(negotiated_cipher(d.port(), "tls1_2", certs_.path("ca.pem")).rfind("ECDHE-", 0), 0u);
  EXPECT_EQ(negotiated_cipher(d.port(), "tls1_3", certs_.path("ca.pem")).rfind("TLS_AES_", 0), 0u);
}

TEST_F(ListenerSecurity, PlaintextUntrustedCaAndExpiredCertificateAreRefused) {
  DaemonProcess d(secure_config());
  ASSERT_TRUE(d.started()) << d.log();
  // A plaintext client on the TLS port: no handshake.
  auto plain = grpc::CreateChannel(d.address(), grpc::InsecureChannelCredentials());
  EXPECT_EQ(execute(plain, "").error_code(), StatusCode::UNAVAILABLE);
  // A client that trusts another CA refuses tpoold's certificate.
  EXPECT_EQ(execute(tls_channel(d, "untrusted-ca.pem"), ci_.token).error_code(),
            StatusCode::UNAVAILABLE);
  // Sanity: the right CA works on the same daemon.
  EXPECT_TRUE(execute(tls_channel(d), ci_.token).ok());

  // A daemon serving an expired certificate: the client refuses it.
  DaemonProcess expired(secure_config("request", "expired"));
  ASSERT_TRUE(expired.started()) << expired.log();
  EXPECT_EQ(execute(tls_channel(expired), ci_.token).error_code(), StatusCode::UNAVAILABLE);
}

TEST_F(ListenerSecurity, RequireRefusesAClientWithoutCertificateAndAdmitsOneWithIt) {
  DaemonProcess d(secure_config("require"));
  ASSERT_TRUE(d.started()) << d.log();
  // No client certificate: no handshake, even with a valid token.
  EXPECT_EQ(execute(tls_channel(d), ci_.token).error_code(), StatusCode::UNAVAILABLE);
  // The client certificate (principal test-client, a line with no token)
  // authenticates on its own.
  tpool::v1::JobResult res;
  auto s = execute(tls_channel(d, "ca.pem", true), "", "echo", &res);
  EXPECT_TRUE(s.ok()) << s.error_message();
  // ... and its line's allow-list applies to it.
  EXPECT_TRUE(is(execute(tls_channel(d, "ca.pem", true), "", "sleep"),
                 StatusCode::PERMISSION_DENIED,
                 "principal 'test-client' may not run handler 'sleep'"));
}

TEST_F(ListenerSecurity, MissingOrWrongTokenIsUnauthenticated) {
  DaemonProcess d(secure_config());
  ASSERT_TRUE(d.started()) << d.log();
  auto ch = tls_channel(d);
  EXPECT_TRUE(is(execute(ch, ""), StatusCode::UNAUTHENTICATED, "carries no credentials"));
  const std::string wrong = "ci." + std::string(64, '0');
  EXPECT_EQ(execute(ch, wrong).error_code(), StatusCode::UNAUTHENTICATED);
  const std::string unknown = "nobody." + std::string(64, 'a');
  EXPECT_EQ(execute(ch, unknown).error_code(), StatusCode::UNAUTHENTICATED);
  {
    auto stub = tpool::v1::JobService::NewStub(ch);
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Basic " + ci_.token);
    tpool::v1::ListHandlersReply rep;
    EXPECT_TRUE(is(stub->ListHandlers(&ctx, {}, &rep), StatusCode::UNAUTHENTICATED,
                   "is not 'Bearer <token>'"));
  }
  // A Stream is refused at its start.
  {
    auto stub = tpool::v1::JobService::NewStub(ch);
    grpc::ClientContext ctx;
    auto call = stub->Stream(&ctx);
    tpool::v1::ResultBatch rb;
    EXPECT_FALSE(call->Read(&rb));
    EXPECT_EQ(call->Finish().error_code(), StatusCode::UNAUTHENTICATED);
  }
  // The tokens never reach the log.
  const std::string log = d.log();
  for (const auto& t : {ci_.token, wrong, viewer_.token}) {
    EXPECT_EQ(log.find(t.substr(t.find('.') + 1)), std::string::npos) << log;
  }
}

TEST_F(ListenerSecurity, RolesAndHandlerAllowListsArePermissionDenied) {
  DaemonProcess d(secure_config());
  ASSERT_TRUE(d.started()) << d.log();
  auto ch = tls_channel(d);
  auto stub = tpool::v1::JobService::NewStub(ch);
  // ci may run echo only.
  EXPECT_TRUE(is(execute(ch, ci_.token, "sleep"), StatusCode::PERMISSION_DENIED,
                 "principal 'ci' may not run handler 'sleep'"));
  // viewer has read, not submit.
  EXPECT_TRUE(is(execute(ch, viewer_.token), StatusCode::PERMISSION_DENIED,
                 "it needs the role 'submit' and has 'read'"));
  {
    grpc::ClientContext ctx;
    bearer(ctx, viewer_.token);
    tpool::v1::ListHandlersReply rep;
    EXPECT_TRUE(stub->ListHandlers(&ctx, {}, &rep).ok());
  }
  // SubmitBatch: the item outside the allow-list is refused, the other runs.
  {
    grpc::ClientContext ctx;
    bearer(ctx, ci_.token);
    tpool::v1::JobBatch batch;
    *batch.add_jobs() = job("echo", "a", 1);
    *batch.add_jobs() = job("sleep", "1", 2);
    tpool::v1::JobRefs refs;
    ASSERT_TRUE(stub->SubmitBatch(&ctx, batch, &refs).ok());
    ASSERT_EQ(refs.items_size(), 2);
    EXPECT_EQ(refs.items(0).code(), 0);
    EXPECT_GT(refs.items(0).job_id(), 0u);
    EXPECT_EQ(refs.items(1).code(), static_cast<int>(StatusCode::PERMISSION_DENIED));
    EXPECT_NE(refs.items(1).message().find("may not run handler 'sleep'"), std::string::npos);
  }
  // Stream: per item as well, and the call goes on.
  {
    grpc::ClientContext ctx;
    bearer(ctx, ci_.token);
    auto call = stub->Stream(&ctx);
    tpool::v1::JobBatch batch;
    *batch.add_jobs() = job("sleep", "1", 1);
    *batch.add_jobs() = job("echo", "b", 2);
    ASSERT_TRUE(call->Write(batch));
    ASSERT_TRUE(call->WritesDone());
    std::map<std::uint64_t, tpool::v1::JobResult> got;
    tpool::v1::ResultBatch rb;
    while (call->Read(&rb)) {
      for (const auto& r : rb.results()) got[r.tag()] = r;
    }
    ASSERT_TRUE(call->Finish().ok());
    ASSERT_EQ(got.size(), 2u);
    EXPECT_EQ(got[1].code(), static_cast<int>(StatusCode::PERMISSION_DENIED));
    EXPECT_EQ(got[2].code(), 0);
    EXPECT_EQ(got[2].output(), "b");
  }
}

TEST_F(ListenerSecurity, TheJobPortDoesNotServeAdminService) {
  for (bool secure : {false, true}) {
    DaemonProcess d(secure ? secure_config() : "[metrics]\nenabled = false\n");
    ASSERT_TRUE(d.started()) << d.log();
    auto ch = secure ? tls_channel(d)
                     : grpc::CreateChannel(d.address(), grpc::InsecureChannelCredentials());
    auto admin = tpool::v1::AdminService::NewStub(ch);
    grpc::ClientContext ctx;
    if (secure) bearer(ctx, ops_.token);
    tpool::v1::ShutdownReply rep;
    EXPECT_EQ(admin->Shutdown(&ctx, {}, &rep).error_code(), StatusCode::UNIMPLEMENTED);
    // It still runs: the call did not reach the daemon's lifecycle.
    grpc::ClientContext sctx;
    tpool::v1::StatsReply stats;
    ASSERT_TRUE(d.admin().Stats(&sctx, {}, &stats).ok());
    EXPECT_EQ(stats.daemon().state(), "serving");
  }
}

TEST_F(ListenerSecurity, OnTheAdminSocketATokenIsCheckedAndNoTokenIsTheServiceUser) {
  DaemonProcess d(secure_config());
  ASSERT_TRUE(d.started()) << d.log();
  auto ch = grpc::CreateChannel(d.admin_address(), grpc::InsecureChannelCredentials());
  auto admin = tpool::v1::AdminService::NewStub(ch);
  {
    // A submit-only principal may not shut the daemon down.
    grpc::ClientContext ctx;
    bearer(ctx, ci_.token);
    tpool::v1::ShutdownRequest req;
    req.set_mode(tpool::v1::SHUTDOWN_MODE_DRAIN);
    tpool::v1::ShutdownReply rep;
    EXPECT_TRUE(is(admin->Shutdown(&ctx, req, &rep), StatusCode::PERMISSION_DENIED,
                   "principal 'ci' may not call Shutdown: it needs the role 'admin'"));
  }
  {
    grpc::ClientContext ctx;
    bearer(ctx, "ci." + std::string(64, '1'));
    tpool::v1::StatsReply rep;
    EXPECT_EQ(admin->Stats(&ctx, {}, &rep).error_code(), StatusCode::UNAUTHENTICATED);
  }
  {
    grpc::ClientContext ctx;  // no token: the service user
    tpool::v1::StatsReply rep;
    ASSERT_TRUE(admin->Stats(&ctx, {}, &rep).ok());
    EXPECT_EQ(rep.daemon().state(), "serving");
  }
  {
    grpc::ClientContext ctx;  // an admin token
    bearer(ctx, ops_.token);
    tpool::v1::ShutdownRequest req;
    req.set_mode(tpool::v1::SHUTDOWN_MODE_DRAIN);
    tpool::v1::ShutdownReply rep;
    ASSERT_TRUE(admin->Shutdown(&ctx, req, &rep).ok());
    EXPECT_TRUE(rep.accepted());
  }
  EXPECT_EQ(d.wait_exit(30s), std::optional<int>(0)) << d.log();
}

int run_tpoolctl(std::vector<std::string> args, const std::vector<std::string>& env,
                 std::string* out) {
  const std::string out_file =
      std::filesystem::temp_directory_path() / ("tpoolctl-sec-" + std::to_string(::getpid()));
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, out_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  args.insert(args.begin(), TPOOLCTL_BIN);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> envs;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string v(*e);
    bool replaced = false;
    for (const auto& over : env) {
      replaced = replaced || v.substr(0, v.find('=')) == over.substr(0, over.find('='));
    }
    if (!replaced && v.rfind("TPOOL_", 0) != 0) envs.push_back(v);
  }
  envs.insert(envs.end(), env.begin(), env.end());
  std::vector<char*> envp;
  for (auto& e : envs) envp.push_back(e.data());
  envp.push_back(nullptr);
  pid_t pid = 0;
  int code = -1;
  if (posix_spawn(&pid, TPOOLCTL_BIN, &fa, nullptr, argv.data(), envp.data()) == 0) {
    int st = 0;
    ::waitpid(pid, &st, 0);
    code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  }
  posix_spawn_file_actions_destroy(&fa);
  std::ifstream in(out_file);
  std::ostringstream s;
  s << in.rdbuf();
  *out = s.str();
  std::filesystem::remove(out_file);
  return code;
}

TEST_F(ListenerSecurity, AdminSocketIsMode0600AndTpoolctlDrainsThroughIt) {
  DaemonProcess d("[metrics]\nenabled = false\n");
  ASSERT_TRUE(d.started()) << d.log();
  struct stat st {};
  ASSERT_EQ(::lstat(d.admin_socket().c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  std::string out;
  EXPECT_EQ(run_tpoolctl({"--admin-address", d.admin_address(), "drain"}, {}, &out), 0) << out;
  EXPECT_EQ(out.rfind("drained: ", 0), 0u) << out;
  EXPECT_EQ(d.wait_exit(30s), std::optional<int>(0)) << d.log();
  EXPECT_FALSE(std::filesystem::exists(d.admin_socket()));  // removed at stop
}

TEST_F(ListenerSecurity, TpoolctlWithTlsAndATokenUsesBothListeners) {
  DaemonProcess d(secure_config());
  ASSERT_TRUE(d.started()) << d.log();
  for (const auto& [name, tok] : {std::pair{"ci.token", ci_.token}, {"ops.token", ops_.token}}) {
    std::ofstream(certs_.path(name)) << tok << "\n";
    ::chmod(certs_.path(name).c_str(), 0600);
  }
  const std::vector<std::string> tls = {"--address", d.address(), "--tls-ca",
                                        certs_.path("ca.pem")};
  auto with = [](std::vector<std::string> a, std::vector<std::string> more) {
    a.insert(a.end(), more.begin(), more.end());
    return a;
  };
  std::string out;
  EXPECT_EQ(
      run_tpoolctl(with(tls, {"--token-file", certs_.path("ci.token"), "execute", "echo", "hi"}),
                   {}, &out),
      0)
      << out;
  EXPECT_EQ(out, "hi");
  // No token over TLS: UNAUTHENTICATED, exit 7 with one sentence.
  EXPECT_EQ(run_tpoolctl(with(tls, {"execute", "echo", "hi"}), {}, &out), 7) << out;
  // Admin commands go to the admin socket, where the token is sent although
  // the job port (the default 127.0.0.1:50051) would be plaintext TCP.
  EXPECT_EQ(run_tpoolctl({"--admin-address", d.admin_address(), "--token-file",
                          certs_.path("ci.token"), "stats"},
                         {}, &out),
            0)
      << out;
  EXPECT_EQ(run_tpoolctl({"--admin-address", d.admin_address(), "--token-file",
                          certs_.path("ci.token"), "drain"},
                         {}, &out),
            7)
      << out;
  EXPECT_NE(out.find("may not call Drain: it needs the role 'admin'"), std::string::npos) << out;
  EXPECT_EQ(run_tpoolctl({"--admin-address", d.admin_address(), "--token-file",
                          certs_.path("ops.token"), "drain"},
                         {}, &out),
            0)
      << out;
  EXPECT_EQ(d.wait_exit(30s), std::optional<int>(0)) << d.log();
}

TEST_F(ListenerSecurity, TheDefaultAdminSocketIsFoundByTpoolctlWithoutFlags) {
  // XDG_RUNTIME_DIR set (no RUNTIME_DIRECTORY): $XDG_RUNTIME_DIR/tpoold/admin.sock,
  // its directory created 0700.
  const std::string runtime = certs_.path("run");
  std::filesystem::create_directories(runtime);
  ::chmod(runtime.c_str(), 0700);
  DaemonProcess d("[metrics]\nenabled = false\n", {"--admin-listen="},
                  {"XDG_RUNTIME_DIR=" + runtime, "RUNTIME_DIRECTORY="});
  ASSERT_TRUE(d.started()) << d.log();
  const std::string sock = runtime + "/tpoold/admin.sock";
  struct stat st {};
  ASSERT_EQ(::lstat((runtime + "/tpoold").c_str(), &st), 0) << d.log();
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  ASSERT_EQ(::lstat(sock.c_str(), &st), 0) << d.log();
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  std::string out;
  EXPECT_EQ(run_tpoolctl({"--address", d.address(), "stats"},
                         {"XDG_RUNTIME_DIR=" + runtime, "RUNTIME_DIRECTORY="}, &out),
            0)
      << out;
  EXPECT_NE(out.find("at unix:" + sock), std::string::npos) << out;
  EXPECT_EQ(run_tpoolctl({"drain"}, {"XDG_RUNTIME_DIR=" + runtime, "RUNTIME_DIRECTORY="}, &out), 0)
      << out;
  EXPECT_EQ(d.wait_exit(30s), std::optional<int>(0)) << d.log();
}

TEST_F(ListenerSecurity, ASecondDaemonDoesNotTakeOverALiveAdminSocket) {
  DaemonProcess first("[metrics]\nenabled = false\n");
  ASSERT_TRUE(first.started()) << first.log();
  DaemonProcess second("[metrics]\nenabled = false\n", {"--admin-listen", first.admin_address()});
  EXPECT_FALSE(second.started());
  EXPECT_EQ(second.wait_exit(30s), std::optional<int>(1)) << second.log();
  EXPECT_NE(second.log().find("is in use: another tpoold serves it"), std::string::npos)
      << second.log();
  grpc::ClientContext ctx;
  tpool::v1::StatsReply rep;
  EXPECT_TRUE(first.admin().Stats(&ctx, {}, &rep).ok());  // still the first's
}

TEST_F(ListenerSecurity, RotatedCertificateServesNewConnectionsAndAnOpenStreamGoesOn) {
  // A second CA and server certificate to rotate to; clients trust both CAs.
  TestCerts next;
  ASSERT_TRUE(next.ok()) << next.read("gen.log");
  {
    std::ofstream both(certs_.path("both-ca.pem"));
    both << certs_.read("ca.pem") << next.read("ca.pem");
  }
  // The daemon's own copies, replaced below.
  std::filesystem::copy_file(certs_.path("server.pem"), certs_.path("live.pem"));
  std::filesystem::copy_file(certs_.path("server.key"), certs_.path("live.key"));
  DaemonProcess d(secure_config("request", "live"));
  ASSERT_TRUE(d.started()) << d.log();
  const std::string old_serial = serial_of_file(certs_.path("server.pem"));
  const std::string new_serial = serial_of_file(next.path("server.pem"));
  ASSERT_FALSE(old_serial.empty());
  ASSERT_NE(old_serial, new_serial);
  EXPECT_EQ(served_serial(d.port()), old_serial);

  // An open Stream on the first certificate.
  auto ch = tls_channel(d, "both-ca.pem");
  auto stub = tpool::v1::JobService::NewStub(ch);
  grpc::ClientContext ctx;
  bearer(ctx, ci_.token);
  auto call = stub->Stream(&ctx);
  tpool::v1::JobBatch first;
  *first.add_jobs() = job("echo", "before", 1);
  ASSERT_TRUE(call->Write(first));
  tpool::v1::ResultBatch rb;
  ASSERT_TRUE(call->Read(&rb));
  ASSERT_EQ(rb.results_size(), 1);
  EXPECT_EQ(rb.results(0).output(), "before");

  // Rotate: key and certificate replaced, each by a rename.
  std::filesystem::copy_file(next.path("server.key"), certs_.path("live.key.new"));
  std::filesystem::copy_file(next.path("server.pem"), certs_.path("live.pem.new"));
  std::filesystem::rename(certs_.path("live.key.new"), certs_.path("live.key"));
  std::filesystem::rename(certs_.path("live.pem.new"), certs_.path("live.pem"));
  // New connections see the new certificate within the refresh interval
  // (1 s): poll the observable with a deadline.
  auto deadline = std::chrono::steady_clock::now() + 30s;
  std::string seen;
  while ((seen = served_serial(d.port())) != new_serial &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(100ms);  // polling an external process, bounded
  }
  EXPECT_EQ(seen, new_serial) << d.log();
  // A new gRPC connection that trusts only the new CA gets through.
  auto fresh = tls_channel(d, "both-ca.pem");
  {
    grpc::SslCredentialsOptions o;
    o.pem_root_certs = next.read("ca.pem");
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    auto only_new = grpc::CreateCustomChannel(d.address(), grpc::SslCredentials(o), args);
    EXPECT_TRUE(execute(only_new, ci_.token).ok());
  }
  // The open Stream keeps running on its connection.
  tpool::v1::JobBatch second;
  *second.add_jobs() = job("echo", "after", 2);
  ASSERT_TRUE(call->Write(second));
  ASSERT_TRUE(call->Read(&rb));
  ASSERT_EQ(rb.results_size(), 1);
  EXPECT_EQ(rb.results(0).output(), "after");
  ASSERT_TRUE(call->WritesDone());
  EXPECT_FALSE(call->Read(&rb));
  EXPECT_TRUE(call->Finish().ok());
}

TEST_F(ListenerSecurity, SighupReloadsTheTokenFileAndABadFileKeepsTheOldOne) {
  DaemonProcess d(secure_config());
  ASSERT_TRUE(d.started()) << d.log();
  auto ch = tls_channel(d);
  const Token late = make_token("late", "submit", {});
  EXPECT_EQ(execute(ch, late.token).error_code(), StatusCode::UNAUTHENTICATED);

  // A bad file: the old tokens stay, the log says why.
  write_tokens("ci:submit:::\nthis line is not a token line\n");
  d.signal(SIGHUP);
  auto deadline = std::chrono::steady_clock::now() + 30s;
  while (d.log().find("token file reload failed") == std::string::npos &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(20ms);  // polling an external process, bounded
  }
  EXPECT_NE(d.log().find("token file reload failed; the previous tokens stay in force"),
            std::string::npos)
      << d.log();
  EXPECT_TRUE(execute(ch, ci_.token).ok());

  // A good file: the new principal works, the removed one does not.
  write_tokens(late.line + "\n");
  d.signal(SIGHUP);
  deadline = std::chrono::steady_clock::now() + 30s;
  while (!execute(ch, late.token).ok() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(20ms);  // polling an external process, bounded
  }
  EXPECT_TRUE(execute(ch, late.token).ok()) << d.log();
  EXPECT_EQ(execute(ch, ci_.token).error_code(), StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(d.log().find(late.token.substr(5)), std::string::npos);
}

// (stream.cc, S11) An open Stream is admitted again after a reload of the
// token file: a wider allow-list applies to its next message, and once its
// token is removed the message after that is not run and the call ends
// UNAUTHENTICATED, saying so, after the results of the messages before it.
TEST_F(ListenerSecurity, AnOpenStreamIsCheckedAgainAfterATokenReloadAndEndsWhenRevoked) {
  const Token worker = make_token("worker", "submit", {"echo"});
  write_tokens(ci_.line + "\n" + worker.line + "\n");
  DaemonProcess d(secure_config());
  ASSERT_TRUE(d.started()) << d.log();
  auto ch = tls_channel(d);
  auto stub = tpool::v1::JobService::NewStub(ch);
  grpc::ClientContext ctx;
  // Bounded: if the stream were not ended at the revoked message, Finish
  // would wait for it; the deadline makes that a failure, not a hang.
  ctx.set_deadline(std::chrono::system_clock::now() + 60s);
  bearer(ctx, worker.token);
  auto call = stub->Stream(&ctx);
  tpool::v1::ResultBatch rb;
  const auto one = [&](const char* handler, std::uint64_t tag) {
    tpool::v1::JobBatch b;
    *b.add_jobs() = job(handler, "x", tag);
    EXPECT_TRUE(call->Write(b));
    tpool::v1::JobResult r;
    if (call->Read(&rb) && rb.results_size() == 1) r = rb.results(0);
    EXPECT_EQ(r.tag(), tag);
    return r;
  };
  // Polls new calls until the reload shows (another process's work).
  const auto until = [&](const std::function<bool()>& reloaded) {
    const auto deadline = std::chrono::steady_clock::now() + 30s;
    while (!reloaded() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(20ms);  // polling an external process, bounded
    }
    return reloaded();
  };
  // The allow-list of the start: echo only.
  EXPECT_EQ(one("fail", 1).code(), static_cast<int>(StatusCode::PERMISSION_DENIED));
  EXPECT_EQ(one("echo", 2).code(), 0);

  // The same token, every handler allowed: the open stream's next message
  // follows the new file.
  std::string widened = worker.line;
  widened.replace(widened.find(":submit:echo:"), 13, ":submit::");
  write_tokens(ci_.line + "\n" + widened + "\n");
  d.signal(SIGHUP);
  ASSERT_TRUE(until([&] { return execute(ch, worker.token, "fail").ok(); })) << d.log();
  EXPECT_EQ(one("fail", 3).code(), 0);

  // Revoked: worker's line is gone. The next message is not run.
  write_tokens(ci_.line + "\n");
  d.signal(SIGHUP);
  ASSERT_TRUE(until([&] {
    return execute(ch, worker.token).error_code() == StatusCode::UNAUTHENTICATED;
  })) << d.log();
  tpool::v1::JobBatch last;
  *last.add_jobs() = job("echo", "after", 4);
  ASSERT_TRUE(call->Write(last));
  EXPECT_FALSE(call->Read(&rb)) << "a result came for a message sent after the revocation";
  EXPECT_TRUE(is(call->Finish(), StatusCode::UNAUTHENTICATED,
                 "message 4 of this stream (counting from 1) was not run: the token file was "
                 "reloaded and this stream's credentials no longer admit it"));
  EXPECT_EQ(d.log().find(worker.token.substr(worker.token.find('.') + 1)), std::string::npos);
}

TEST_F(ListenerSecurity, NonLoopbackPlaintextIsRefusedUnlessAllowedAndThenWarned) {
  {
    DaemonProcess d("[metrics]\nenabled = false\n", {"--listen", "0.0.0.0:0"});
    EXPECT_FALSE(d.started());
    EXPECT_EQ(d.wait_exit(30s), std::optional<int>(2)) << d.log();
    EXPECT_NE(d.log().find("server.listen = '0.0.0.0:0' is reachable from other hosts without "
                           "TLS (tls.cert_file, tls.key_file) and a token file"),
              std::string::npos)
        << d.log();
  }
  {
    DaemonProcess d("[metrics]\nenabled = false\n[server]\nallow_insecure = true\n",
                    {"--listen", "0.0.0.0:0"});
    ASSERT_TRUE(d.started()) << d.log();
    EXPECT_NE(d.log().find("INSECURE: server.listen = '0.0.0.0:0' is reachable from other hosts"),
              std::string::npos)
        << d.log();
  }
  {
    // TLS and auth on a non-loopback address: no warning needed.
    DaemonProcess d(secure_config(), {"--listen", "0.0.0.0:0"});
    ASSERT_TRUE(d.started()) << d.log();
    EXPECT_EQ(d.log().find("INSECURE"), std::string::npos) << d.log();
  }
}

}  // namespace
}  // namespace tpool::testing
