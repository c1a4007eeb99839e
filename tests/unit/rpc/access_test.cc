// tpool::rpc::Access in the rpc layer, without tpoold: every RPC of
// JobService and AdminService asks it first (a call without credentials is
// UNAUTHENTICATED on each of the twelve), the bearer header's forms, and the
// admin socket's rule (no token: the service user, every role; a token:
// checked). The daemon-level tests are tests/integration/daemon/security_test.cc.
#include "tpool/security/token_store.h"
//
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

#include "in_process_server.h"

namespace tpool::rpc::testing {
namespace {

using grpc::StatusCode;
namespace sec = tpool::security;

// A token file in a temporary directory, open as the daemon opens it.
class Tokens {
 public:
  Tokens() {
    char tmpl[] = "/tmp/tpool-access.XXXXXX";
    dir_ = ::mkdtemp(tmpl);
    ci_ = sec::make_token_line("ci", sec::parse_roles("submit,read").value(), {"echo"}).value();
    viewer_ = sec::make_token_line("viewer", sec::parse_roles("read").value(), {}).value();
    const std::string path = dir_ + "/tokens";
    std::ofstream(path) << ci_.line << "\n" << viewer_.line << "\n";
    ::chmod(path.c_str(), 0600);
    file_ = sec::TokenFile::open(path).value();
  }
  ~Tokens() { std::system(("rm -rf '" + dir_ + "'").c_str()); }
  const sec::TokenFile* file() const { return file_.get(); }
  const std::string& ci() const { return ci_.token; }
  const std::string& viewer() const { return viewer_.token; }

 private:
  std::string dir_;
  sec::NewToken ci_, viewer_;
  std::unique_ptr<sec::TokenFile> file_;
};

ServerOptions with_access(const Tokens& t, bool local_socket_is_admin) {
  ServerOptions o;
  AccessConfig a;
  a.tokens = t.file();
  a.local_socket_is_admin = local_socket_is_admin;
  o.access = Access(a);
  return o;
}

// One call of each RPC with the given authorization header ("" = none); the
// status of each, by name.
std::map<std::string, grpc::Status> call_every_rpc(InProcessServer& srv,
                                                   const std::string& authorization) {
  std::map<std::string, grpc::Status> out;
  auto ctx = [&](grpc::ClientContext& c) {
    c.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    if (!authorization.empty()) c.AddMetadata("authorization", authorization);
  };
  tpool::v1::JobRef ref;
  ref.set_job_id(1);
  {
    grpc::ClientContext c;
    ctx(c);
    tpool::v1::JobResult r;
    out["Execute"] = srv.stub().Execute(&c, job("echo", "x"), &r);
  }
  {
    grpc::ClientContext c;
    ctx(c);
    tpool::v1::JobRef r;
    out["Submit"] = srv.stub().Submit(&c, job("echo", "x"), &r);
  }
  {
    grpc::ClientContext c;
    ctx(c);
    tpool::v1::JobBatch b;
    *b.add_jobs() = job("echo", "x");
    tpool::v1::JobRefs r;
    out["SubmitBatch"] = srv.stub().SubmitBatch(&c, b, &r);
  }
  {
    grpc::ClientContext c;
    ctx(c);
    auto call = srv.stub().Stream(&c);
    tpool::v1::JobBatch b;
    *b.add_jobs() = job("echo", "x");
    (void)call->Write(b);
    (void)call->WritesDone();
    tpool::v1::ResultBatch rb;
    while (call->Read(&rb)) {
    }
    out["Stream"] = call->Finish();
  }
  {
    grpc::ClientContext c;
    ctx(c);
    tpool::v1::WaitRequest w;
    w.set_job_id(1);
    tpool::v1::JobResult r;
    out["Wait"] = srv.stub().Wait(&c, w, &r);
  }
  {
    grpc::ClientContext c;
    ctx(c);
    tpool::v1::JobStatus r;
    out["Get"] = srv.stub().Get(&c, ref, &r);
  }
  {
    grpc::ClientContext c;
    ctx(c);
    tpool::v1::CancelReply r;
    out["Cancel"] = srv.stub().Cancel(&c, ref, &r);
  }
  {
    grpc::ClientContext c;
    ctx(c);
    tpool::v1::ListHandlersReply r;
    out["ListHandlers"] = srv.stub().ListHandlers(&c, {}, &r);
  }
  {
    grpc::ClientContext c;
    ctx(c);
    tpool::v1::StatsReply r;
    out["Stats"] = srv.admin().Stats(&c, {}, &r);
  }
  {
    grpc::ClientContext c;
    ctx(c);
    tpool::v1::ReloadPluginsReply r;
    out["ReloadPlugins"] = srv.admin().ReloadPlugins(&c, {}, &r);
  }
  {
    grpc::ClientContext c;
    ctx(c);
    tpool::v1::DrainReply r;
    out["Drain"] = srv.admin().Drain(&c, {}, &r);
  }
  {
    grpc::ClientContext c;
    ctx(c);
    tpool::v1::ShutdownRequest s;
    s.set_mode(tpool::v1::SHUTDOWN_MODE_DRAIN);
    tpool::v1::ShutdownReply r;
    out["Shutdown"] = srv.admin().Shutdown(&c, s, &r);
  }
  return out;
}

TEST(RpcAccess, EveryRpcWithoutCredentialsIsUnauthenticatedAndChangesNothing) {
  Tokens t;
  InProcessServer srv(with_access(t, false));
  ASSERT_TRUE(srv.ok());
  const auto got = call_every_rpc(srv, "");
  ASSERT_EQ(got.size(), 12u);
  for (const auto& [name, s] : got) {
    EXPECT_EQ(s.error_code(), StatusCode::UNAUTHENTICATED) << name << ": " << s.error_message();
    EXPECT_NE(s.error_message().find("carries no credentials"), std::string::npos) << name;
  }
  for (const auto& h : srv.engine().snapshot().handlers) {
    EXPECT_EQ(h.submitted, 0u) << h.handler;  // no job was submitted
  }
  std::lock_guard lock(srv.life().mu);
  EXPECT_EQ(srv.life().shutdowns, 0);  // Drain and Shutdown never reached the lifecycle
}

TEST(RpcAccess, AReadPrincipalIsDeniedWhatNeedsSubmitOrAdmin) {
  Tokens t;
  InProcessServer srv(with_access(t, false));
  ASSERT_TRUE(srv.ok());
  const auto got = call_every_rpc(srv, "Bearer " + t.viewer());
  for (const char* name : {"Execute", "Submit", "SubmitBatch", "Stream", "Cancel"}) {
    EXPECT_EQ(got.at(name).error_code(), StatusCode::PERMISSION_DENIED) << name;
    EXPECT_NE(got.at(name).error_message().find("it needs the role 'submit' and has 'read'"),
              std::string::npos)
        << got.at(name).error_message();
  }
  for (const char* name : {"ReloadPlugins", "Drain", "Shutdown"}) {
    EXPECT_EQ(got.at(name).error_code(), StatusCode::PERMISSION_DENIED) << name;
  }
  EXPECT_TRUE(got.at("ListHandlers").ok());
  EXPECT_TRUE(got.at("Stats").ok());
  EXPECT_EQ(got.at("Get").error_code(), StatusCode::NOT_FOUND);  // admitted, then no such job
  std::lock_guard lock(srv.life().mu);
  EXPECT_EQ(srv.life().shutdowns, 0);
}

TEST(RpcAccess, TheBearerHeadersForms) {
  Tokens t;
  InProcessServer srv(with_access(t, false));
  ASSERT_TRUE(srv.ok());
  auto list = [&](std::vector<std::string> headers) {
    grpc::ClientContext c;
    for (const auto& h : headers) c.AddMetadata("authorization", h);
    tpool::v1::ListHandlersReply r;
    return srv.stub().ListHandlers(&c, {}, &r);
  };
  EXPECT_TRUE(list({"Bearer " + t.ci()}).ok());
  EXPECT_TRUE(list({"bearer " + t.ci()}).ok());  // the scheme is case-insensitive
  EXPECT_TRUE(list({"BEARER  " + t.ci()}).ok());
  for (const auto& bad :
       std::vector<std::vector<std::string>>{{"Bearer"},
                                             {"Bearer "},
                                             {"Basic " + t.ci()},
                                             {t.ci()},
                                             {"Bearer ci.x"},
                                             {"Bearer " + t.ci(), "Bearer " + t.viewer()}}) {
    grpc::Status s = list(bad);
    EXPECT_EQ(s.error_code(), StatusCode::UNAUTHENTICATED) << bad[0];
    // The header is never echoed.
    EXPECT_EQ(s.error_message().find(t.ci().substr(3)), std::string::npos) << s.error_message();
  }
}

TEST(RpcAccess, OnTheAdminSocketNoTokenIsTheServiceUserAndATokenIsChecked) {
  Tokens t;
  InProcessServer srv(with_access(t, true));
  ASSERT_TRUE(srv.ok());
  const auto service_user = call_every_rpc(srv, "");
  EXPECT_TRUE(service_user.at("Shutdown").ok()) << service_user.at("Shutdown").error_message();
  EXPECT_TRUE(service_user.at("Execute").ok());
  const auto viewer = call_every_rpc(srv, "Bearer " + t.viewer());
  EXPECT_EQ(viewer.at("Shutdown").error_code(), StatusCode::PERMISSION_DENIED);
  EXPECT_TRUE(viewer.at("Stats").ok());
  std::lock_guard lock(srv.life().mu);
  EXPECT_EQ(srv.life().shutdowns, 2);  // the service user's Drain and Shutdown only
}

TEST(RpcAccess, AuthOffAdmitsEveryone) {
  InProcessServer srv;
  ASSERT_TRUE(srv.ok());
  const auto got = call_every_rpc(srv, "Bearer not-even-a-token");
  for (const char* name : {"Execute", "Submit", "SubmitBatch", "Stream", "ListHandlers", "Stats",
                           "ReloadPlugins", "Drain", "Shutdown"}) {
    EXPECT_TRUE(got.at(name).ok()) << name << ": " << got.at(name).error_message();
  }
}

}  // namespace
}  // namespace tpool::rpc::testing
