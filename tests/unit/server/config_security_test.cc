// The listeners' config (issue 16): [tls], [auth], server.admin_listen and
// server.allow_insecure. validate() looks at the values (each error names the
// key and what to do); check_security_files() at the files they name
// (readable, PEM, the key belongs to the certificate, the token file parses).
// Certificates come from scripts/gen-test-certs.sh at test time.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <fstream>

#include "config.h"
#include "test_certs.h"

namespace tpool::server {
namespace {

Result<DaemonConfig> parse_and_validate(const std::string& toml) {
  auto c = parse_config(toml, "test.toml");
  if (!c.ok()) return c.status();
  if (Status s = c->validate(); !s.ok()) return s;
  return c;
}

// The error of a config, "" when it is valid.
std::string error_of(const std::string& toml) {
  auto c = parse_and_validate(toml);
  return c.ok() ? std::string() : c.status().message();
}

::testing::AssertionResult refused(const std::string& toml, const std::string& part) {
  const std::string e = error_of(toml);
  if (!e.empty() && e.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "error '" << e << "' lacks '" << part << "'";
}

TEST(ConfigSecurity, TheDefaultsAreLoopbackPlaintextAuthOffAndTheDefaultAdminSocket) {
  DaemonConfig d;
  ASSERT_TRUE(d.validate().ok()) << d.validate().message();
  EXPECT_EQ(d.server.admin_listen, "");
  EXPECT_FALSE(d.server.allow_insecure);
  EXPECT_FALSE(d.tls.enabled());
  EXPECT_FALSE(d.auth.enabled());
  EXPECT_EQ(d.tls.client_auth, "none");
  EXPECT_EQ(d.tls.principal_from, "san_then_cn");
  EXPECT_EQ(d.admin_listen().kind, AdminListen::Kind::kUnix);
  EXPECT_TRUE(d.insecure_listeners().empty());
}

TEST(ConfigSecurity, TheKeysParse) {
  auto c = parse_and_validate(
      "[server]\nadmin_listen = \"unix:/run/tpoold/admin.sock\"\nallow_insecure = true\n"
      "[tls]\ncert_file = \"/c.pem\"\nkey_file = \"/k.pem\"\nclient_ca_file = \"/ca.pem\"\n"
      "client_auth = \"require\"\nprincipal_from = \"cn\"\nrefresh_interval_ms = 1000\n"
      "[auth]\ntoken_file = \"/etc/tpoold/tokens\"\n");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->server.admin_listen, "unix:/run/tpoold/admin.sock");
  EXPECT_TRUE(c->server.allow_insecure);
  EXPECT_EQ(c->tls.client_auth, "require");
  EXPECT_EQ(c->tls.principal_from, "cn");
  EXPECT_EQ(c->tls.refresh_interval_ms, 1000u);
  EXPECT_EQ(c->auth.token_file, "/etc/tpoold/tokens");
  const AdminListen a = c->admin_listen();
  EXPECT_EQ(a.kind, AdminListen::Kind::kUnix);
  EXPECT_EQ(a.path, "/run/tpoold/admin.sock");
  EXPECT_TRUE(refused("[tls]\nsecret = 1\n", "unknown key tls.secret"));
  EXPECT_TRUE(refused("[auth]\ntoken_file = 3\n", "auth.token_file must be a string"));
}

TEST(ConfigSecurity, TlsValuesAreCheckedWithTheKeyAndWhatToDo) {
  EXPECT_TRUE(
      refused("[tls]\ncert_file = \"/c.pem\"\n", "tls.cert_file is set but tls.key_file is not"));
  EXPECT_TRUE(
      refused("[tls]\nkey_file = \"/k.pem\"\n", "tls.key_file is set but tls.cert_file is not"));
  EXPECT_TRUE(refused("[tls]\nclient_ca_file = \"/ca.pem\"\n",
                      "tls.client_ca_file is set but tls.cert_file is not"));
  const std::string tls = "[tls]\ncert_file = \"/c.pem\"\nkey_file = \"/k.pem\"\n";
  EXPECT_TRUE(refused(tls + "client_auth = \"always\"\n",
                      "tls.client_auth = 'always' is not valid; use one of none, request, "
                      "require"));
  EXPECT_TRUE(refused(tls + "client_auth = \"require\"\n",
                      "tls.client_auth = 'require' needs tls.client_ca_file"));
  EXPECT_TRUE(refused(tls + "client_ca_file = \"/ca.pem\"\n",
                      "tls.client_auth = 'none' never asks for a client certificate"));
  EXPECT_TRUE(refused(tls + "principal_from = \"email\"\n", "tls.principal_from = 'email'"));
  EXPECT_TRUE(refused(tls + "refresh_interval_ms = 10\n",
                      "tls.refresh_interval_ms = 10 is out of range; it must be in 1000.."));
  EXPECT_EQ(error_of(tls), "");
}

TEST(ConfigSecurity, AdminListenForms) {
  EXPECT_EQ(DaemonConfig{}.admin_listen().kind, AdminListen::Kind::kUnix);
  auto none = parse_and_validate("[server]\nadmin_listen = \"none\"\n");
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->admin_listen().kind, AdminListen::Kind::kNone);
  EXPECT_TRUE(refused("[server]\nadmin_listen = \"unix:relative.sock\"\n",
                      "is not a socket path; use unix:/ABSOLUTE/PATH"));
  EXPECT_TRUE(refused("[server]\nadmin_listen = \"unix:/" + std::string(120, 'a') + "\"\n",
                      "a Unix socket path may have at most 107"));
  EXPECT_TRUE(refused("[server]\nadmin_listen = \"admin\"\n", "is not an address"));
  // TCP: only with TLS and a token file, even on loopback, and not the job port.
  EXPECT_TRUE(refused("[server]\nadmin_listen = \"127.0.0.1:50052\"\n",
                      "is a TCP address: an admin listener on TCP needs TLS"));
  const std::string secure =
      "[tls]\ncert_file = \"/c.pem\"\nkey_file = \"/k.pem\"\n[auth]\ntoken_file = \"/t\"\n";
  auto tcp = parse_and_validate("[server]\nadmin_listen = \"127.0.0.1:50052\"\n" + secure);
  ASSERT_TRUE(tcp.ok()) << tcp.status().message();
  EXPECT_EQ(tcp->admin_listen().kind, AdminListen::Kind::kTcp);
  EXPECT_EQ(tcp->admin_listen().address, "127.0.0.1:50052");
  EXPECT_TRUE(refused("[server]\nadmin_listen = \"127.0.0.1:50051\"\n" + secure,
                      "is the job port (server.listen)"));
}

TEST(ConfigSecurity, TheDefaultAdminSocketFollowsTheEnvironment) {
  const char* keep_rd = std::getenv("RUNTIME_DIRECTORY");
  const char* keep_xdg = std::getenv("XDG_RUNTIME_DIR");
  const std::string saved_rd = keep_rd ? keep_rd : "", saved_xdg = keep_xdg ? keep_xdg : "";
  ::setenv("RUNTIME_DIRECTORY", "/run/tpoold", 1);
  ::setenv("XDG_RUNTIME_DIR", "/run/user/1000", 1);
  EXPECT_EQ(DaemonConfig{}.admin_listen().address, "unix:/run/tpoold/admin.sock");
  ::unsetenv("RUNTIME_DIRECTORY");
  EXPECT_EQ(DaemonConfig{}.admin_listen().address, "unix:/run/user/1000/tpoold/admin.sock");
  ::setenv("XDG_RUNTIME_DIR", "relative", 1);  // not absolute: skipped
  EXPECT_EQ(DaemonConfig{}.admin_listen().address,
            "unix:/tmp/tpoold-" + std::to_string(::getuid()) + "/admin.sock");
  if (keep_rd) ::setenv("RUNTIME_DIRECTORY", saved_rd.c_str(), 1);
  if (keep_xdg) {
    ::setenv("XDG_RUNTIME_DIR", saved_xdg.c_str(), 1);
  } else {
    ::unsetenv("XDG_RUNTIME_DIR");
  }
}

TEST(ConfigSecurity, LoopbackAddresses) {
  for (const char* a : {"127.0.0.1:1", "127.1.2.3:0", "localhost:50051", "[::1]:50051"}) {
    EXPECT_TRUE(is_loopback_address(a)) << a;
  }
  for (const char* a : {"0.0.0.0:50051", "[::]:50051", "10.0.0.5:1", "128.0.0.1:1",
                        "127.0.0.1.evil.example:1", "127.0.0:1", "127.0.0.256:1", "host:1"}) {
    EXPECT_FALSE(is_loopback_address(a)) << a;
  }
}

TEST(ConfigSecurity, NonLoopbackNeedsTlsAndAuthOrAllowInsecure) {
  EXPECT_TRUE(refused("[server]\nlisten = \"0.0.0.0:50051\"\n",
                      "server.listen = '0.0.0.0:50051' is reachable from other hosts without "
                      "TLS (tls.cert_file, tls.key_file) and a token file (auth.token_file)"));
  EXPECT_TRUE(refused("[server]\nlisten = \"0.0.0.0:50051\"\n", "server.allow_insecure = true"));
  // TLS without auth is not enough: anyone could call.
  EXPECT_TRUE(refused(
      "[server]\nlisten = \"10.0.0.5:50051\"\n[tls]\ncert_file = \"/c\"\nkey_file = \"/k\"\n",
      "without a token file (auth.token_file)"));
  auto allowed =
      parse_and_validate("[server]\nlisten = \"0.0.0.0:50051\"\nallow_insecure = true\n");
  ASSERT_TRUE(allowed.ok()) << allowed.status().message();
  ASSERT_EQ(allowed->insecure_listeners().size(), 1u);  // logged at every start
  EXPECT_NE(allowed->insecure_listeners()[0].find("server.listen = '0.0.0.0:50051'"),
            std::string::npos);
  auto secure = parse_and_validate(
      "[server]\nlisten = \"0.0.0.0:50051\"\n[tls]\ncert_file = \"/c\"\nkey_file = \"/k\"\n"
      "[auth]\ntoken_file = \"/t\"\n");
  ASSERT_TRUE(secure.ok()) << secure.status().message();
  EXPECT_TRUE(secure->insecure_listeners().empty());
}

TEST(ConfigSecurity, TheFlagOverridesAdminListen) {
  const char* argv[] = {"tpoold", "--admin-listen", "none"};
  auto o = parse_args(3, argv);
  ASSERT_TRUE(o.ok()) << o.status().message();
  auto c = resolve_config(o.value());
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->admin_listen().kind, AdminListen::Kind::kNone);
}

class ConfigSecurityFiles : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(certs_.ok()) << certs_.read("gen.log"); }
  DaemonConfig with(const std::string& cert, const std::string& key, const std::string& ca = "") {
    DaemonConfig c;
    c.tls.cert_file = cert.empty() ? "" : certs_.path(cert);
    c.tls.key_file = key.empty() ? "" : certs_.path(key);
    if (!ca.empty()) {
      c.tls.client_ca_file = certs_.path(ca);
      c.tls.client_auth = "request";
    }
    return c;
  }
  std::string check(const DaemonConfig& c) {
    Status s = check_security_files(c);
    return s.ok() ? std::string() : s.message();
  }
  void write(const std::string& name, const std::string& text, mode_t mode = 0600) {
    std::ofstream(certs_.path(name)) << text;
    ::chmod(certs_.path(name).c_str(), mode);
  }
  tpool::testing::TestCerts certs_;
};

TEST_F(ConfigSecurityFiles, TheTestCertificatesPass) {
  EXPECT_EQ(check(with("server.pem", "server.key", "ca.pem")), "");
  EXPECT_EQ(check(DaemonConfig{}), "");  // nothing named, nothing to check
}

TEST_F(ConfigSecurityFiles, MissingUnreadableOrWrongFilesNameTheKey) {
  EXPECT_NE(check(with("nope.pem", "server.key"))
                .find("tls.cert_file = '" + certs_.path("nope.pem") + "': the file does not exist"),
            std::string::npos);
  EXPECT_NE(check(with("server.pem", "nope.key")).find("tls.key_file"), std::string::npos);
  EXPECT_NE(check(with("server.pem", "server.key", "nope.pem")).find("tls.client_ca_file"),
            std::string::npos);
  write("junk.pem", "not a certificate\n");
  EXPECT_NE(check(with("junk.pem", "server.key")).find("holds no PEM certificate"),
            std::string::npos);
  EXPECT_NE(check(with("server.pem", "junk.pem")).find("holds no unencrypted PEM private key"),
            std::string::npos);
  EXPECT_NE(
      check(with("server.pem", "server.key", "junk.pem"))
          .find("tls.client_ca_file = '" + certs_.path("junk.pem") + "' holds no PEM certificate"),
      std::string::npos);
}

TEST_F(ConfigSecurityFiles, TheKeyMustBelongToTheCertificate) {
  const std::string e = check(with("server.pem", "client.key"));
  EXPECT_NE(e.find("tls.key_file = '" + certs_.path("client.key") +
                   "' is not the private key of the certificate in tls.cert_file"),
            std::string::npos)
      << e;
  // The message never carries the key's text.
  EXPECT_EQ(e.find("PRIVATE KEY-----\n"), std::string::npos);
}

TEST_F(ConfigSecurityFiles, AKeyEveryoneCanReadIsRefused) {
  ::chmod(certs_.path("server.key").c_str(), 0644);
  EXPECT_NE(check(with("server.pem", "server.key")).find("is readable by every user"),
            std::string::npos);
}

TEST_F(ConfigSecurityFiles, TheTokenFileMustParse) {
  DaemonConfig c;
  c.auth.token_file = certs_.path("tokens");
  EXPECT_NE(check(c).find("auth.token_file"), std::string::npos);  // missing
  write("tokens", "ci:submit:::\n");
  EXPECT_EQ(check(c), "");
  write("tokens", "ci:superuser:::\n");
  EXPECT_NE(check(c).find("auth.token_file: " + certs_.path("tokens") + ":1:"), std::string::npos)
      << check(c);
  write("tokens", "ci:submit:::\n", 0666);
  EXPECT_NE(check(c).find("auth.token_file"), std::string::npos);  // others may write it
}

}  // namespace
}  // namespace tpool::server
