// tpoold's config: the parser in-process, and the real binary's
// --check-config, --version and flag errors.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "config.h"
#include "daemon_process.h"

namespace tpool::server {
namespace {

std::pair<int, std::string> run(const std::string& args) {
  std::string cmd = std::string(TPOOLD_BIN) + " " + args + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  std::string out;
  char buf[512];
  while (std::fgets(buf, sizeof buf, p) != nullptr) out += buf;
  int st = ::pclose(p);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, out};
}

std::string sample_path() {
  return std::string(TPOOL_SOURCE_DIR) + "/daemon/server/tpoold.toml.example";
}

TEST(Config, DefaultsAreValid) {
  DaemonConfig c;
  EXPECT_TRUE(c.validate().ok()) << c.validate().message();
  EXPECT_EQ(c.server.listen, "127.0.0.1:50051");
  EXPECT_EQ(c.metrics.listen, "127.0.0.1:9464");
}

TEST(Config, SampleConfigParsesToTheDefaults) {
  auto c = load_config_file(sample_path());
  ASSERT_TRUE(c.ok()) << c.status().message();
  DaemonConfig d;
  EXPECT_EQ(c->server.max_message_bytes, d.server.max_message_bytes);
  EXPECT_EQ(c->server.max_inflight_jobs, d.server.max_inflight_jobs);
  EXPECT_EQ(c->server.max_output_bytes, d.server.max_output_bytes);
  EXPECT_EQ(c->server.stream_buffer_bytes, d.server.stream_buffer_bytes);
  EXPECT_EQ(c->server.drain_timeout_ms, d.server.drain_timeout_ms);
  EXPECT_EQ(c->pool.queue_capacity, d.pool.queue_capacity);
  EXPECT_EQ(c->pool.blocking_workers, d.pool.blocking_workers);
  EXPECT_EQ(c->results.retention_ms, d.results.retention_ms);
  EXPECT_EQ(c->results.max_bytes, d.results.max_bytes);
  EXPECT_EQ(c->log.level, d.log.level);
  EXPECT_EQ(c->server.admin_listen, d.server.admin_listen);
  EXPECT_EQ(c->server.allow_insecure, d.server.allow_insecure);
  EXPECT_EQ(c->tls.cert_file, d.tls.cert_file);
  EXPECT_EQ(c->tls.key_file, d.tls.key_file);
  EXPECT_EQ(c->tls.client_ca_file, d.tls.client_ca_file);
  EXPECT_EQ(c->tls.client_auth, d.tls.client_auth);
  EXPECT_EQ(c->tls.principal_from, d.tls.principal_from);
  EXPECT_EQ(c->tls.refresh_interval_ms, d.tls.refresh_interval_ms);
  EXPECT_EQ(c->auth.token_file, d.auth.token_file);
  EXPECT_EQ(c->plugins.abort_on_load_error, d.plugins.abort_on_load_error);
  ASSERT_EQ(c->plugins.config.size(), 1u);
  EXPECT_EQ(c->plugins.config[0].first, "hash");
}

// A job's output must fit in one reply: max_output_bytes up to
// max_message_bytes - 16 KiB, and the defaults leave that room.
TEST(Config, MaxOutputBytesMustFitInAMessage) {
  DaemonConfig d;
  EXPECT_LE(d.server.max_output_bytes + kOutputHeadroomBytes, d.server.max_message_bytes);

  auto at =
      parse_config("[server]\nmax_message_bytes = 1048576\nmax_output_bytes = 1032192\n", "t.toml");
  ASSERT_TRUE(at.ok());
  EXPECT_TRUE(at->validate().ok()) << at->validate().message();

  auto equal =
      parse_config("[server]\nmax_message_bytes = 4194304\nmax_output_bytes = 4194304\n", "t.toml");
  ASSERT_TRUE(equal.ok());
  Status s = equal->validate();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("server.max_output_bytes = 4194304"), std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("at most 4177920"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("at least 4210688"), std::string::npos) << s.message();
}

TEST(ConfigBinary, CheckConfigRejectsAnOutputLimitOverTheMessageLimit) {
  std::string bad = ::testing::TempDir() + "/tpoold-output.toml";
  std::ofstream(bad) << "[server]\nmax_output_bytes = 1073741824\n";
  auto [rc, out] = run("--check-config " + bad);
  EXPECT_NE(rc, 0) << out;
  EXPECT_NE(out.find("server.max_output_bytes = 1073741824"), std::string::npos) << out;
  EXPECT_NE(out.find("max_message_bytes"), std::string::npos) << out;
  std::filesystem::remove(bad);
}

TEST(Config, ErrorsNameTheKeyTheValueAndTheRange) {
  auto unknown = parse_config("[server]\nlisten_addr = \"x\"\n", "t.toml");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("server.listen_addr"), std::string::npos);
  EXPECT_NE(unknown.status().message().find("listen"), std::string::npos);

  auto section = parse_config("[sever]\n", "t.toml");
  ASSERT_FALSE(section.ok());
  EXPECT_NE(section.status().message().find("'sever'"), std::string::npos);

  auto type = parse_config("[server]\nmax_streams = \"many\"\n", "t.toml");
  ASSERT_FALSE(type.ok());
  EXPECT_NE(type.status().message().find("server.max_streams must be an integer"),
            std::string::npos);

  auto syntax = parse_config("[server\n", "t.toml");
  ASSERT_FALSE(syntax.ok());
  EXPECT_NE(syntax.status().message().find("t.toml:1"), std::string::npos);

  auto c = parse_config("[server]\nmax_streams = 0\n", "t.toml");
  ASSERT_TRUE(c.ok());
  Status s = c->validate();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("server.max_streams = 0"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("1.."), std::string::npos) << s.message();

  c = parse_config("[log]\nformat = \"xml\"\n", "t.toml");
  ASSERT_TRUE(c.ok());
  EXPECT_NE(c->validate().message().find("log.format = 'xml'"), std::string::npos);

  c = parse_config("[server]\nlisten = \"localhost\"\n", "t.toml");
  ASSERT_TRUE(c.ok());
  EXPECT_NE(c->validate().message().find("HOST:PORT"), std::string::npos);

  c = parse_config("[pool]\nqueue_capacity = 1000\n[server]\nmax_inflight_jobs = 512\n", "t.toml");
  ASSERT_TRUE(c.ok());
  EXPECT_NE(c->validate().message().find("power of two"), std::string::npos);
}

// Issue 16, item 5: no plain HTTP /metrics off loopback unless
// server.allow_insecure; metrics.tls needs [tls]'s certificate.
TEST(Config, MetricsOffLoopbackNeedsTlsOrAllowInsecure) {
  auto with = [](const std::string& listen, bool tls, bool insecure) {
    DaemonConfig c;
    c.metrics.listen = listen;
    c.metrics.tls = tls;
    if (tls) {
      c.tls.cert_file = "/etc/tpoold/tls/tls.crt";
      c.tls.key_file = "/etc/tpoold/tls/tls.key";
    }
    c.server.allow_insecure = insecure;
    return c.validate();
  };
  for (const char* loopback : {"127.0.0.1:9464", "127.1.2.3:0", "localhost:9464", "[::1]:9464"}) {
    EXPECT_TRUE(with(loopback, false, false).ok()) << loopback;
  }
  for (const char* open : {"0.0.0.0:9464", "10.0.0.5:9464", "[::]:9464", "metrics.example:9464"}) {
    Status s = with(open, false, false);
    ASSERT_FALSE(s.ok()) << open;
    EXPECT_NE(s.message().find("metrics.listen = '" + std::string(open) + "'"), std::string::npos)
        << s.message();
    EXPECT_NE(s.message().find("metrics.tls = true"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("server.allow_insecure"), std::string::npos) << s.message();
    EXPECT_TRUE(with(open, true, false).ok()) << open;
    EXPECT_TRUE(with(open, false, true).ok()) << open;
  }
  DaemonConfig no_cert;
  no_cert.metrics.tls = true;
  Status s = no_cert.validate();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("tls.cert_file and tls.key_file"), std::string::npos) << s.message();
  // Metrics off: nothing to check.
  DaemonConfig off;
  off.metrics.enabled = false;
  off.metrics.listen = "0.0.0.0:9464";
  EXPECT_TRUE(off.validate().ok());

  auto parsed = parse_config(
      "[metrics]\nlisten = \"0.0.0.0:9464\"\ntls = true\n"
      "[tls]\ncert_file = \"/c.pem\"\nkey_file = \"/k.pem\"\n",
      "t.toml");
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  EXPECT_TRUE(parsed->metrics.tls);
  EXPECT_EQ(parsed->tls.cert_file, "/c.pem");
  EXPECT_TRUE(parsed->validate().ok()) << parsed->validate().message();
}

TEST(ConfigBinary, CheckConfigReadsTheMetricsTlsKeyAndNamesTheFile) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("tpoold-cfg-tls-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string cfg = (dir / "t.toml").string();
  std::ofstream(cfg) << "[metrics]\ntls = true\n[tls]\ncert_file = \""
                     << (dir / "none.pem").string() << "\"\nkey_file = \""
                     << (dir / "none.key").string() << "\"\n";
  auto [code, out] = run("--check-config " + cfg + " --plugin-dir " + dir.string());
  EXPECT_NE(code, 0) << out;
  // The first file it reads is named (the certificate, then the key: both
  // are read at check time, by the listeners' check and metrics.tls's).
  EXPECT_NE(out.find("tls.cert_file = '" + (dir / "none.pem").string() + "'"), std::string::npos)
      << out;
  std::filesystem::remove_all(dir);
}

TEST(Config, FlagsOverrideTheFile) {
  const char* argv[] = {"tpoold",       "--config",     nullptr, "--listen",
                        "127.0.0.1:7",  "--plugin-dir", "/a",    "--plugin-dir=/b",
                        "--log-format", "json"};
  std::string path = sample_path();
  argv[2] = path.c_str();
  auto o = parse_args(10, argv);
  ASSERT_TRUE(o.ok()) << o.status().message();
  auto c = resolve_config(o.value());
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->server.listen, "127.0.0.1:7");
  EXPECT_EQ(c->plugins.dirs, (std::vector<std::string>{"/a", "/b"}));
  EXPECT_EQ(c->log.format, "json");

  const char* bad[] = {"tpoold", "--frobnicate"};
  auto e = parse_args(2, bad);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("--frobnicate"), std::string::npos);
}

TEST(ConfigBinary, CheckConfigAcceptsTheSampleAndRejectsABadFile) {
  // The sample names /usr/lib/tpool/plugins, which a build machine lacks:
  // --check-config checks the directories (below), so point it at ours.
  auto [rc, out] = run("--check-config " + sample_path() + " --plugin-dir " + TPOOL_PLUGIN_DIR);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("is valid"), std::string::npos);

  std::string bad = ::testing::TempDir() + "/tpoold-bad.toml";
  std::ofstream(bad) << "[pool]\nmax_threads = 5000\n";
  auto [rc2, out2] = run("--check-config " + bad);
  EXPECT_NE(rc2, 0);
  EXPECT_NE(out2.find("pool.max_threads = 5000"), std::string::npos) << out2;
  EXPECT_NE(out2.find("0..1024"), std::string::npos) << out2;

  auto [rc3, out3] = run("--check-config /nonexistent/tpoold.toml");
  EXPECT_NE(rc3, 0);
  EXPECT_NE(out3.find("/nonexistent/tpoold.toml"), std::string::npos);
  std::filesystem::remove(bad);
}

TEST(ConfigBinary, CheckConfigRunsTheStartTimeChecksThatNeedNoNetwork) {
  // Issue 13: --check-config said "valid" for a missing plugin directory, an
  // unreadable metrics password file and a directory given as the config
  // file, while the start failed on the first two (and ran on defaults with
  // the third). The unit's ExecStartPre relies on it.
  namespace fs = std::filesystem;
  const fs::path dir =
      fs::path(::testing::TempDir()) / ("tpoold-check-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string pw = (dir / "password").string();
  std::ofstream(pw, std::ios::binary) << "s3cret\r\n";
  auto config = [&](const std::string& name, const std::string& text) {
    const std::string path = (dir / name).string();
    std::ofstream(path) << text;
    return path;
  };
  const std::string plugins = std::string("[plugins]\ndirs = [\"") + TPOOL_PLUGIN_DIR + "\"]\n";
  const std::string auth = "[metrics]\nbasic_auth_user = \"prom\"\nbasic_auth_password_file = ";

  {  // Everything there: valid.
    auto [rc, out] =
        run("--check-config " + config("good.toml", plugins + auth + "\"" + pw + "\"\n"));
    EXPECT_EQ(rc, 0) << out;
    EXPECT_NE(out.find("is valid"), std::string::npos) << out;
  }
  {  // A plugin directory that does not exist.
    auto [rc, out] =
        run("--check-config " +
            config("nodir.toml", "[plugins]\ndirs = [\"/nonexistent/tpool-plugins\"]\n"));
    EXPECT_EQ(rc, 1) << out;
    EXPECT_NE(out.find("plugin directory /nonexistent/tpool-plugins cannot be read"),
              std::string::npos)
        << out;
  }
  {  // The same with abort_on_load_error = false: the start would go on, so
     // valid, with the warning the start would log.
    auto [rc, out] =
        run("--check-config " + config("nodir-ok.toml",
                                       "[plugins]\ndirs = [\"/nonexistent/tpool-plugins\"]\n"
                                       "abort_on_load_error = false\n"));
    EXPECT_EQ(rc, 0) << out;
    EXPECT_NE(out.find("warning: plugin directory /nonexistent/tpool-plugins"), std::string::npos)
        << out;
  }
  {  // A password file that is missing, or a directory.
    for (const std::string& bad : {(dir / "missing").string(), dir.string()}) {
      auto [rc, out] =
          run("--check-config " + config("nopw.toml", plugins + auth + "\"" + bad + "\"\n"));
      EXPECT_EQ(rc, 1) << out;
      EXPECT_NE(out.find("cannot read a password from metrics.basic_auth_password_file '" + bad),
                std::string::npos)
          << out;
    }
  }
  {  // A port file whose directory does not exist.
    auto [rc, out] = run(
        "--check-config " +
        config("noportdir.toml", "[server]\nport_file = \"/nonexistent/dir/port\"\n" + plugins));
    EXPECT_EQ(rc, 1) << out;
    EXPECT_NE(
        out.find("server.port_file = '/nonexistent/dir/port': its directory '/nonexistent/dir' "
                 "does not exist"),
        std::string::npos)
        << out;
  }
  {  // A directory as the config file: an error for the check and the start.
    auto [rc, out] = run("--check-config " + dir.string());
    EXPECT_EQ(rc, 1) << out;
    EXPECT_NE(out.find("the config file '" + dir.string() + "' is a directory"), std::string::npos)
        << out;
    // The bad --listen makes a start on the defaults (the old behaviour) fail
    // at once instead of serving, so this fails rather than hangs.
    auto [rc2, out2] = run("--config " + dir.string() + " --listen not-an-address");
    EXPECT_EQ(rc2, 2) << out2;
    EXPECT_NE(out2.find("is a directory"), std::string::npos) << out2;
  }
  std::error_code ec;
  fs::remove_all(dir, ec);
}

// A plugin directory holding a file that is not a shared library, next to the
// good example plugins.
class BadPluginDir {
 public:
  BadPluginDir() {
    dir_ =
        std::filesystem::temp_directory_path() / ("tpoold-badplugin-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    std::ofstream(file()) << "this is not an ELF file\n";
  }
  ~BadPluginDir() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  std::string dir() const { return dir_.string(); }
  std::string file() const { return (dir_ / "broken.so").string(); }

 private:
  std::filesystem::path dir_;
};

TEST(ConfigBinary, APluginThatFailsToLoadStopsStartUpByDefault) {
  BadPluginDir bad;
  tpool::testing::DaemonProcess d("[metrics]\nenabled = false\n", {"--plugin-dir", bad.dir()});
  EXPECT_FALSE(d.started());
  auto rc = d.wait_exit(std::chrono::seconds(30));
  ASSERT_TRUE(rc.has_value()) << d.log();
  EXPECT_EQ(*rc, 1) << d.log();
  EXPECT_NE(d.log().find(bad.file()), std::string::npos) << d.log();
  EXPECT_NE(d.log().find("abort_on_load_error"), std::string::npos) << d.log();
}

TEST(ConfigBinary, WithAbortOnLoadErrorFalseTheGoodPluginsServe) {
  BadPluginDir bad;
  tpool::testing::DaemonProcess d(
      "[plugins]\nabort_on_load_error = false\n[metrics]\nenabled = false\n",
      {"--plugin-dir", bad.dir()});
  ASSERT_TRUE(d.started()) << d.log();
  grpc::ClientContext ctx;
  tpool::v1::JobResult res;
  grpc::Status s = d.jobs().Execute(&ctx, tpool::testing::job("echo", "ping"), &res);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(res.state(), tpool::v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(res.output(), "ping");
  // The failure is still reported, naming the file.
  EXPECT_NE(d.log().find(bad.file()), std::string::npos) << d.log();
  EXPECT_EQ(d.stop(), std::optional<int>(0)) << d.log();
}

TEST(Config, AbortOnLoadErrorIsABoolean) {
  EXPECT_TRUE(DaemonConfig{}.plugins.abort_on_load_error);
  auto c = parse_config("[plugins]\nabort_on_load_error = false\n", "t.toml");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_FALSE(c->plugins.abort_on_load_error);
  auto bad = parse_config("[plugins]\nabort_on_load_error = \"no\"\n", "t.toml");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("plugins.abort_on_load_error must be true or false"),
            std::string::npos)
      << bad.status().message();
}

TEST(ConfigBinary, VersionHelpAndUnknownFlags) {
  auto [rc, out] = run("--version");
  EXPECT_EQ(rc, 0);
  EXPECT_EQ(out, "tpoold 0.1.0\n");
  auto [rc2, out2] = run("--help");
  EXPECT_EQ(rc2, 0);
  EXPECT_NE(out2.find("--check-config"), std::string::npos);
  auto [rc3, out3] = run("--bogus");
  EXPECT_EQ(rc3, 2);
  EXPECT_NE(out3.find("--bogus"), std::string::npos);
}

}  // namespace
}  // namespace tpool::server
