// metrics.tls's start-up checks (issue 16, item 6): each failure is a
// sentence naming the file, never its content. The HTTPS endpoint itself is
// tested against the real daemon (tests/integration/metrics, MetricsTls.*).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "tpool/metrics/exporter.h"

namespace tpool::metrics {
namespace {

namespace fs = std::filesystem;

struct Files {
  Files() {
    dir = fs::temp_directory_path() / ("tpool-metrics-tls-" + std::to_string(::getpid()));
    fs::create_directories(dir);
    std::ofstream(dir / "cert.pem") << "-----BEGIN CERTIFICATE-----\nnot-a-cert\n";
    std::ofstream(dir / "key.pem") << "-----BEGIN PRIVATE KEY-----\nsecret-key-bytes\n";
  }
  ~Files() { fs::remove_all(dir); }
  fs::path dir;
};

ExporterOptions tls_options(const Files& f) {
  ExporterOptions o;
  o.listen = "127.0.0.1:0";
  o.tls = true;
  o.tls_cert_file = (f.dir / "cert.pem").string();
  o.tls_key_file = (f.dir / "key.pem").string();
  o.civetweb_openssl_dir = TPOOL_CIVETWEB_OPENSSL_DIR;
  return o;
}

TEST(ExporterTls, WithoutTheOpenSslShimsTheErrorNamesTheMissingFile) {
  Files f;
  ExporterOptions o = tls_options(f);
  o.civetweb_openssl_dir = (f.dir / "no-such-dir").string();
  Status s = check_tls(o);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find(o.civetweb_openssl_dir + "/libtpool-civetweb-libcrypto.so"),
            std::string::npos)
      << s.message();
  auto started = Exporter::start({}, o);
  ASSERT_FALSE(started.ok());
  EXPECT_EQ(started.status().message(), s.message());
}

TEST(ExporterTls, UnreadableKeyOrCertificateIsNamedWithoutItsContent) {
  Files f;
  ExporterOptions o = tls_options(f);
  ASSERT_TRUE(check_tls(o).ok()) << check_tls(o).message();  // the shims load, both files read
  o.tls_key_file = (f.dir / "missing.key").string();
  Status s = check_tls(o);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("tls.key_file '" + o.tls_key_file + "'"), std::string::npos)
      << s.message();
  o = tls_options(f);
  o.tls_cert_file = f.dir.string();  // a directory
  s = check_tls(o);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("tls.cert_file"), std::string::npos) << s.message();
  // Garbage PEM: CivetWeb refuses it at start; the sentence names the keys
  // to check, and no byte of the key.
  auto started = Exporter::start({}, tls_options(f));
  ASSERT_FALSE(started.ok());
  EXPECT_NE(started.status().message().find("tls.key_file"), std::string::npos)
      << started.status().message();
  EXPECT_EQ(started.status().message().find("secret-key-bytes"), std::string::npos);
}

TEST(ExporterTls, WithoutTlsNothingIsChecked) {
  ExporterOptions o;
  o.tls_key_file = "/no/such/key";
  EXPECT_TRUE(check_tls(o).ok());
}

}  // namespace
}  // namespace tpool::metrics
