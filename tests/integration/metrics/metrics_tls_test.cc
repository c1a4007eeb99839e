// /metrics over TLS (issue 16, item 6): the real daemon with metrics.tls,
// certificates made at test time by scripts/gen-test-certs.sh, an OpenSSL
// client, and a real Prometheus scraping with tls_config and basic_auth.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>

#include "daemon_process.h"
#include "https_get.h"
#include "metrics_test_util.h"

namespace tpool::testing {
namespace {

// The test CA and server certificate (SAN IP:127.0.0.1) in dir/certs.
bool make_certs(const TempDir& dir) {
  const std::string cmd = std::string(TPOOL_SOURCE_DIR) + "/scripts/gen-test-certs.sh '" +
                          dir.file("certs") + "' >/dev/null 2>&1";
  return std::system(cmd.c_str()) == 0;
}

// A tpoold serving /metrics over TLS on an ephemeral loopback port, with
// basic auth (user prom, password file) and the test certificate.
struct TlsMetricsDaemon {
  explicit TlsMetricsDaemon(const TempDir& dir, const std::string& metrics_extra = "")
      : port_file(dir.file("metrics.port")), daemon(config(dir, port_file, metrics_extra)) {
    if (daemon.started()) port = wait_port_file(port_file);
  }
  static std::string config(const TempDir& dir, const std::string& port_file,
                            const std::string& metrics_extra) {
    std::ofstream(dir.file("password")) << "scrape-pass\n";
    return "[metrics]\nlisten = \"127.0.0.1:0\"\nport_file = \"" + port_file +
           "\"\ntls = true\nbasic_auth_user = \"prom\"\nbasic_auth_password_file = \"" +
           dir.file("password") + "\"\n" + metrics_extra + "[tls]\ncert_file = \"" +
           dir.file("certs/server.pem") + "\"\nkey_file = \"" + dir.file("certs/server.key") +
           "\"\n";
  }
  std::string port_file;
  DaemonProcess daemon;
  int port = 0;
};

TEST(MetricsTls, HttpsWithBasicAuthOnlyAndNothingOlderThanTls12) {
  TempDir dir;
  ASSERT_TRUE(make_certs(dir)) << "scripts/gen-test-certs.sh failed";
  TlsMetricsDaemon m(dir);
  ASSERT_TRUE(m.daemon.started()) << m.daemon.log();
  ASSERT_GT(m.port, 0) << m.daemon.log();
  const std::string ca = dir.file("certs/ca.pem");

  HttpsReply ok = https_get(m.port, "/metrics", ca, "prom:scrape-pass");
  EXPECT_TRUE(ok.handshake);
  EXPECT_EQ(ok.http.status, 200);
  EXPECT_NE(ok.http.body.find("tpoold_build_info"), std::string::npos);
  // Several scrapes: the daemon served the first TLS connection and lives on
  // (Debian's CivetWeb used to call a NULL SSL_get_peer_certificate here).
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(https_get(m.port, "/metrics", ca, "prom:scrape-pass").http.status, 200) << i;
  }
  EXPECT_EQ(https_get(m.port, "/metrics", ca).http.status, 401);
  EXPECT_EQ(https_get(m.port, "/metrics", ca, "prom:scrape-pas").http.status, 401);
  EXPECT_EQ(https_get(m.port, "/metrics", ca, "other:scrape-pass").http.status, 401);

  // Plain HTTP on the TLS port: no HTTP answer, so no password sent in clear
  // gets a reply.
  EXPECT_EQ(http_get(m.port, "/metrics", "prom:scrape-pass").status, 0);
  // A client that trusts another CA refuses the daemon's certificate.
  EXPECT_FALSE(https_get(m.port, "/metrics", dir.file("certs/untrusted-ca.pem")).handshake);
  // TLS 1.1 and older: refused by the daemon.
  EXPECT_FALSE(https_get(m.port, "/metrics", ca, "prom:scrape-pass", TLS1_1_VERSION).handshake);
  // And it still serves after all that.
  EXPECT_EQ(https_get(m.port, "/metrics", ca, "prom:scrape-pass").http.status, 200);
  EXPECT_EQ(m.daemon.stop(), std::optional<int>(0)) << m.daemon.log();
  EXPECT_NE(m.daemon.log().find("over HTTPS"), std::string::npos) << m.daemon.log();
  EXPECT_EQ(m.daemon.log().find("scrape-pass"), std::string::npos) << "password in the log";
}

TEST(MetricsTls, AKeyThatDoesNotMatchTheCertificateStopsTheStartWithASentence) {
  TempDir dir;
  ASSERT_TRUE(make_certs(dir));
  // The server certificate with the client's key.
  std::filesystem::copy_file(dir.file("certs/client.key"), dir.file("certs/server.key"),
                             std::filesystem::copy_options::overwrite_existing);
  // The start fails after the gRPC port is up (the exporter starts last), so
  // wait for the exit rather than for the metrics port.
  DaemonProcess d(TlsMetricsDaemon::config(dir, dir.file("metrics.port"), ""));
  EXPECT_NE(d.wait_exit(std::chrono::seconds(30)).value_or(0), 0) << d.log();
  EXPECT_NE(d.log().find("tls.key_file"), std::string::npos) << d.log();
  EXPECT_EQ(d.log().find("PRIVATE KEY"), std::string::npos) << "key material in the log";
}

TEST(MetricsTls, RealPrometheusScrapesOverTlsWithBasicAuth) {
  TempDir dir;
  ASSERT_TRUE(make_certs(dir));
  TlsMetricsDaemon m(dir);
  ASSERT_TRUE(m.daemon.started()) << m.daemon.log();
  ASSERT_GT(m.port, 0) << m.daemon.log();

  const int prom_port = free_port();
  const std::string config = dir.file("prometheus.yml");
  // As deploy/prometheus/prometheus.yml: scheme https, tls_config with the
  // CA (and the name the certificate carries), basic_auth from a file.
  std::ofstream(dir.file("prom.password")) << "scrape-pass\n";
  std::ofstream(config) << "global:\n  scrape_interval: 1s\n"
                           "scrape_configs:\n  - job_name: tpoold\n    scrape_interval: 1s\n"
                           "    scrape_timeout: 900ms\n    scheme: https\n"
                           "    tls_config:\n      ca_file: "
                        << dir.file("certs/ca.pem")
                        << "\n      min_version: TLS12\n"
                           "    basic_auth:\n      username: prom\n      password_file: "
                        << dir.file("prom.password")
                        << "\n    static_configs:\n      - targets: ['127.0.0.1:" << m.port
                        << "']\n";
  std::filesystem::create_directories(dir.path / "tsdb");
  Child prom({"prometheus", "--config.file=" + config,
              "--storage.tsdb.path=" + (dir.path / "tsdb").string(),
              "--web.listen-address=127.0.0.1:" + std::to_string(prom_port)},
             dir.file("prometheus.log"));
  ASSERT_TRUE(eventually([&] { return http_get(prom_port, "/-/ready").status == 200; }))
      << prom.log();

  // [tls] serves the job port too: the jobs go over TLS with the test CA.
  grpc::SslCredentialsOptions tls;
  std::ostringstream ca;
  ca << std::ifstream(dir.file("certs/ca.pem")).rdbuf();
  tls.pem_root_certs = ca.str();
  auto jobs = tpool::v1::JobService::NewStub(
      grpc::CreateChannel(m.daemon.address(), grpc::SslCredentials(tls)));
  constexpr int kJobs = 41;
  for (int i = 0; i < kJobs; ++i) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    tpool::v1::JobResult r;
    grpc::Status s = jobs->Execute(&ctx, job("echo", "x"), &r);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }
  // The scrape target's health and a count only the daemon knows, through
  // PromQL: up = 1 and the job count are there only if the TLS + basic auth
  // scrape worked.
  auto query = [&](const std::string& q) -> std::optional<double> {
    std::string enc;
    for (char c : q) {
      if (std::isalnum(static_cast<unsigned char>(c)) || c == '_') {
        enc += c;
      } else {
        char b[4];
        std::snprintf(b, sizeof b, "%%%02X", static_cast<unsigned char>(c));
        enc += b;
      }
    }
    HttpReply r = http_get(prom_port, "/api/v1/query?query=" + enc);
    static const std::regex value(R"re("value":\[[0-9.e+]+,"([^"]+)"\])re");
    std::smatch mt;
    if (r.status != 200 || !std::regex_search(r.body, mt, value)) return std::nullopt;
    return std::stod(mt[1]);
  };
  std::optional<double> seen;
  EXPECT_TRUE(eventually([&] {
    seen = query("sum(tpoold_jobs_completed_total)");
    return seen == static_cast<double>(kJobs);
  })) << "last value "
      << (seen ? std::to_string(*seen) : "none") << "\n"
      << http_get(prom_port, "/api/v1/targets").body << "\n"
      << prom.log();
  EXPECT_EQ(query("up{job=\"tpoold\"}"), std::optional<double>(1));
  EXPECT_EQ(prom.stop(), std::optional<int>(0)) << prom.log();
  EXPECT_EQ(m.daemon.stop(), std::optional<int>(0)) << m.daemon.log();
}

}  // namespace
}  // namespace tpool::testing
