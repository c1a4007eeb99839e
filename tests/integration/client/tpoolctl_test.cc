// Every tpoolctl subcommand as a real process against a real tpoold on
// loopback: output, --json, --help, and the documented exit codes
// (docs/client.md), including daemon down, unknown handler and deadline
// exceeded.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>

#include <fstream>
#include <sstream>

#include "daemon_process.h"

extern char** environ;

namespace tpool::testing {
namespace {

struct CtlRun {
  int exit = -1;
  std::string out, err;
};

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Runs tpoolctl with `args` (and `input` on stdin) and waits for it.
CtlRun ctl(std::vector<std::string> args, const std::string& input = "") {
  static int n = 0;
  auto dir = std::filesystem::temp_directory_path() /
             ("tpoolctl-it-" + std::to_string(::getpid()) + "-" + std::to_string(n++));
  std::filesystem::create_directories(dir);
  std::string in = dir / "in", out = dir / "out", err = dir / "err";
  std::ofstream(in, std::ios::binary) << input;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, in.c_str(), O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  args.insert(args.begin(), TPOOLCTL_BIN);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  CtlRun r;
  if (posix_spawn(&pid, TPOOLCTL_BIN, &fa, nullptr, argv.data(), environ) == 0) {
    int st = 0;
    ::waitpid(pid, &st, 0);
    r.exit = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  }
  posix_spawn_file_actions_destroy(&fa);
  r.out = slurp(out);
  r.err = slurp(err);
  std::filesystem::remove_all(dir);
  return r;
}

// The secure variant's flags for the job port: --tls-ca and --token-file
// (TPOOL_IT_SECURE=1, daemon_process.h); none otherwise.
std::vector<std::string> secure_args() {
  if (!secure_variant()) return {};
  const SecureMaterial& m = SecureMaterial::get();
  const std::string token_file = m.path("it.token");
  if (!std::filesystem::exists(token_file)) {
    std::ofstream(token_file) << m.token() << "\n";
    ::chmod(token_file.c_str(), 0600);
  }
  return {"--tls-ca", m.path("ca.pem"), "--token-file", token_file};
}

bool one_sentence(const std::string& err) {
  return !err.empty() && err.back() == '\n' && err.find('\n') == err.size() - 1 &&
         err.rfind("tpoolctl", 0) == 0;
}

class Tpoolctl : public DaemonSuite<Tpoolctl> {
 public:
  static std::string daemon_config() { return "[metrics]\nenabled = false\n"; }

 protected:
  // tpoolctl --address <daemon> --admin-address <its admin socket> args...
  // (secure variant: also --tls-ca and --token-file).
  static CtlRun run(std::vector<std::string> args, const std::string& input = "") {
    args.insert(args.begin(),
                {"--address", daemon_->address(), "--admin-address", daemon_->admin_address()});
    const auto sec = secure_args();
    args.insert(args.begin(), sec.begin(), sec.end());
    return ctl(std::move(args), input);
  }
};

TEST(TpoolctlOffline, VersionAndHelpNeedNoDaemon) {
  auto v = ctl({"--version"});
  EXPECT_EQ(v.exit, 0);
  EXPECT_EQ(v.out, std::string("tpoolctl ") + TPOOL_VERSION + "\n");
  auto h = ctl({"--help"});
  EXPECT_EQ(h.exit, 0);
  for (const char* cmd : {"execute", "submit", "wait", "get", "cancel", "handlers", "stats",
                          "health", "drain", "reload", "version", "bench"}) {
    EXPECT_NE(h.out.find(std::string("  ") + cmd + " "), std::string::npos) << cmd;
    auto one = ctl({cmd, "--help"});
    EXPECT_EQ(one.exit, 0) << cmd;
    EXPECT_NE(one.out.find(std::string("usage: tpoolctl ") + cmd), std::string::npos) << one.out;
    EXPECT_EQ(ctl({"help", cmd}).out, one.out) << cmd;
  }
  EXPECT_NE(ctl({"bench", "--help"}).out.find("--mode"), std::string::npos);
}

TEST(TpoolctlOffline, UsageErrorsExit2WithOneSentence) {
  for (const auto& args : std::vector<std::vector<std::string>>{
           {},
           {"frobnicate"},
           {"execute"},
           {"execute", "echo", "--no-such-option"},
           {"execute", "echo", "--file", "/nonexistent/payload"},
           {"execute", "echo", "--lane", "sideways"},
           {"execute", "echo", "--timeout", "soon"},
           {"--deadline", "0", "health"},
           {"get", "not-a-number"},
           {"wait", "1", "2"},
           {"bench", "echo", "--mode", "carrier-pigeon"},
           {"bench", "echo", "-n", "0"},
       }) {
    auto r = ctl(args);
    std::string line;
    for (const auto& a : args) line += a + " ";
    EXPECT_EQ(r.exit, 2) << line << r.err;
    if (!args.empty()) {
      EXPECT_TRUE(one_sentence(r.err)) << line << "\n" << r.err;
    }
  }
}

TEST_F(Tpoolctl, ExecutePrintsTheOutput) {
  auto r = run({"execute", "echo", "hello"});
  EXPECT_EQ(r.exit, 0) << r.err;
  EXPECT_EQ(r.out, "hello");
  EXPECT_EQ(r.err, "");
}

TEST_F(Tpoolctl, ExecutePayloadFromStdinAndFile) {
  auto s = run({"execute", "echo", "-"}, "from stdin\n");
  EXPECT_EQ(s.exit, 0) << s.err;
  EXPECT_EQ(s.out, "from stdin\n");
  auto s2 = run({"execute", "echo", "--stdin"}, "again");
  EXPECT_EQ(s2.out, "again");
  auto file =
      std::filesystem::temp_directory_path() / ("tpoolctl-payload-" + std::to_string(::getpid()));
  std::ofstream(file, std::ios::binary) << std::string("bin\0ary", 7);
  auto f = run({"execute", "echo", "--file", file.string()});
  std::filesystem::remove(file);
  EXPECT_EQ(f.exit, 0) << f.err;
  EXPECT_EQ(f.out, std::string("bin\0ary", 7));
  EXPECT_EQ(run({"execute", "echo", "x", "--stdin"}).exit, 2);
}

TEST_F(Tpoolctl, ExecuteJson) {
  auto r = run({"--json", "execute", "echo", "hi \"there\""});
  EXPECT_EQ(r.exit, 0) << r.err;
  EXPECT_NE(r.out.find("\"state\":\"SUCCEEDED\""), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"output\":\"hi \\\"there\\\"\""), std::string::npos) << r.out;
  auto b = run({"execute", "echo", "--stdin", "--json"}, std::string("\xff\x00", 2));
  EXPECT_NE(b.out.find("\"output_base64\":\"/wA=\""), std::string::npos) << b.out;
}

TEST_F(Tpoolctl, ErrorPathsAndTheirExitCodes) {
  auto nf = run({"execute", "no_such_handler", "x"});
  EXPECT_EQ(nf.exit, 4) << nf.err;
  EXPECT_TRUE(one_sentence(nf.err)) << nf.err;
  EXPECT_NE(nf.err.find("NOT_FOUND"), std::string::npos) << nf.err;

  auto failed = run({"execute", "fail", "x"});
  EXPECT_EQ(failed.exit, 1) << failed.err;
  EXPECT_TRUE(one_sentence(failed.err)) << failed.err;
  EXPECT_NE(failed.err.find("FAILED"), std::string::npos) << failed.err;

  auto dl = run({"--deadline", "300ms", "execute", "sleep", "60000"});
  EXPECT_EQ(dl.exit, 5) << dl.err;
  EXPECT_TRUE(one_sentence(dl.err)) << dl.err;
  auto to = run({"execute", "sleep", "60000", "--timeout", "100ms"});
  EXPECT_EQ(to.exit, 5) << to.err;

  EXPECT_EQ(run({"wait", "999999999"}).exit, 4);
  EXPECT_EQ(run({"get", "999999999"}).exit, 4);
  EXPECT_EQ(run({"cancel", "999999999"}).exit, 4);
}

TEST_F(Tpoolctl, SubmitGetWait) {
  auto s = run({"submit", "sleep", "30", "--label", "who=test"});
  ASSERT_EQ(s.exit, 0) << s.err;
  std::string id = s.out.substr(0, s.out.find('\n'));
  ASSERT_FALSE(id.empty());
  auto w = run({"wait", id});
  EXPECT_EQ(w.exit, 0) << w.err;
  EXPECT_EQ(w.out, "slept 30 ms");
  auto g = run({"get", id});
  EXPECT_EQ(g.exit, 0) << g.err;
  EXPECT_NE(g.out.find("state     SUCCEEDED"), std::string::npos) << g.out;
  EXPECT_NE(g.out.find("label     who=test"), std::string::npos) << g.out;
  auto gj = run({"get", id, "--json"});
  EXPECT_NE(gj.out.find("\"handler\":\"sleep\""), std::string::npos) << gj.out;
  auto sj = run({"--json", "submit", "echo", "x"});
  EXPECT_EQ(sj.out.rfind("{\"job_id\":", 0), 0u) << sj.out;
}

TEST_F(Tpoolctl, JobsListsTheDeadLettersAndRetryRunsOneAgain) {
  auto s = run({"submit", "fail", "boom", "--label", "who=jobs-test"});
  ASSERT_EQ(s.exit, 0) << s.err;
  const std::string id = s.out.substr(0, s.out.find('\n'));
  (void)run({"wait", id});
  auto l = run({"jobs", "--state", "failed,timed_out", "--label", "who=jobs-test"});
  ASSERT_EQ(l.exit, 0) << l.err;
  EXPECT_NE(l.out.find("JOB_ID"), std::string::npos) << l.out;
  EXPECT_NE(l.out.find(id + " "), std::string::npos) << l.out;
  EXPECT_NE(l.out.find("FAILED"), std::string::npos) << l.out;
  EXPECT_NE(l.out.find("fail: boom"), std::string::npos) << l.out;
  auto r = run({"retry", id});
  ASSERT_EQ(r.exit, 0) << r.err;
  const std::string again = r.out.substr(0, r.out.find('\n'));
  EXPECT_NE(again, id);
  (void)run({"wait", again});
  auto lj = run({"--json", "jobs", "--label", "who=jobs-test", "--limit", "1"});
  ASSERT_EQ(lj.exit, 0) << lj.err;
  EXPECT_NE(lj.out.find("\"job_id\":" + id), std::string::npos) << lj.out;
  EXPECT_NE(lj.out.find("\"next_page_token\":\"" + id + "\""), std::string::npos) << lj.out;
  // Usage errors: one sentence, exit 2.
  auto bad = run({"jobs", "--state", "sleepy"});
  EXPECT_EQ(bad.exit, 2);
  EXPECT_TRUE(one_sentence(bad.err)) << bad.err;
  // durable without the daemon's store: FAILED_PRECONDITION, naming [store] path.
  auto d = run({"execute", "echo", "x", "--durable"});
  EXPECT_NE(d.exit, 0);
  EXPECT_NE(d.err.find("[store] path"), std::string::npos) << d.err;
}

TEST_F(Tpoolctl, CancelThenWaitExits6) {
  auto s = run({"submit", "sleep", "60000"});
  ASSERT_EQ(s.exit, 0) << s.err;
  std::string id = s.out.substr(0, s.out.find('\n'));
  auto c = run({"cancel", id});
  EXPECT_EQ(c.exit, 0) << c.err;
  EXPECT_EQ(c.out.rfind("job " + id + " ", 0), 0u) << c.out;
  auto w = run({"wait", id});
  EXPECT_EQ(w.exit, 6) << w.err;
  EXPECT_TRUE(one_sentence(w.err)) << w.err;
}

TEST_F(Tpoolctl, HandlersStatsHealthReloadVersion) {
  auto h = run({"handlers"});
  EXPECT_EQ(h.exit, 0) << h.err;
  EXPECT_EQ(h.out.rfind("HANDLER", 0), 0u) << h.out;
  for (const char* name : {"echo", "fail", "hash", "sleep"}) {
    EXPECT_NE(h.out.find(std::string("\n") + name + " "), std::string::npos) << name;
  }
  EXPECT_NE(run({"handlers", "--json"}).out.find("\"name\":\"echo\""), std::string::npos);
  // The mode column (issue 18): this daemon runs every plugin in_process.
  {
    const auto at = h.out.find("\necho ");
    ASSERT_NE(at, std::string::npos) << h.out;
    const std::string line = h.out.substr(at + 1, h.out.find('\n', at + 1) - at - 1);
    EXPECT_NE(line.find(" in_process "), std::string::npos) << line;
  }
  EXPECT_NE(run({"handlers", "--json"}).out.find("\"isolation\":\"in_process\""),
            std::string::npos);
  auto st = run({"stats"});
  EXPECT_EQ(st.exit, 0) << st.err;
  EXPECT_NE(st.out.find(": serving,"), std::string::npos) << st.out;
  EXPECT_NE(run({"stats", "--json"}).out.find("\"jobs_in_flight\""), std::string::npos);
  auto he = run({"health"});
  EXPECT_EQ(he.exit, 0) << he.err;
  EXPECT_EQ(he.out, "SERVING\n");
  EXPECT_EQ(run({"health", "--json"}).out, "{\"status\":\"SERVING\"}\n");
  auto rl = run({"reload"});
  EXPECT_EQ(rl.exit, 0) << rl.err;
  EXPECT_NE(rl.out.find("echo"), std::string::npos) << rl.out;
  auto v = run({"version"});
  EXPECT_EQ(v.exit, 0) << v.err;
  EXPECT_NE(v.out.find(std::string("tpoold ") + TPOOL_VERSION), std::string::npos) << v.out;
}

TEST_F(Tpoolctl, BenchEveryMode) {
  for (const char* mode : {"unary", "batch", "stream"}) {
    auto r = run({"bench", "echo", "0123456789abcdef", "-n", "3000", "-c", "100", "--mode", mode,
                  "--batch", "25"});
    EXPECT_EQ(r.exit, 0) << mode << r.err;
    EXPECT_NE(r.out.find("throughput"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("succeeded   3000\n"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("errors      none"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("p99.9"), std::string::npos) << r.out;
    // Not a terminal: plain progress lines (or none for a short run), no bar.
    EXPECT_EQ(r.err.find('\r'), std::string::npos) << r.err;
    auto j = run({"bench", "echo", "x", "-n", "500", "-c", "20", "--mode", mode, "--json"});
    EXPECT_EQ(j.exit, 0) << j.err;
    EXPECT_NE(j.out.find("\"succeeded\":500,"), std::string::npos) << j.out;
    EXPECT_NE(j.out.find("\"errors\":{}"), std::string::npos) << j.out;
    EXPECT_NE(j.out.find("\"p99_9\":"), std::string::npos) << j.out;
  }
}

// Batch mode waits with one WaitBatch per SubmitBatch by default; --wait each
// keeps a Wait per job (the comparison docs/benchmarks.md draws).
TEST_F(Tpoolctl, BenchBatchWaitsEitherWay) {
  for (const char* how : {"batch", "each"}) {
    auto r = run({"bench", "echo", "x", "-n", "1000", "-c", "100", "--mode", "batch", "--batch",
                  "50", "--wait", how, "--json"});
    EXPECT_EQ(r.exit, 0) << how << ": " << r.err;
    EXPECT_NE(r.out.find("\"succeeded\":1000,"), std::string::npos) << how << ": " << r.out;
    EXPECT_NE(r.out.find("\"errors\":{}"), std::string::npos) << how << ": " << r.out;
  }
  auto bad = run({"bench", "echo", "x", "--mode", "batch", "--wait", "sometimes"});
  EXPECT_EQ(bad.exit, 2) << bad.err;
  EXPECT_NE(bad.err.find("--wait 'sometimes' is not a way to wait; use batch"), std::string::npos)
      << bad.err;
}

TEST_F(Tpoolctl, BenchCountsErrorsByStatus) {
  auto nf = run({"bench", "no_such_handler", "-n", "50", "-c", "5", "--json"});
  EXPECT_EQ(nf.exit, 4) << nf.err;
  EXPECT_NE(nf.out.find("\"errors\":{\"NOT_FOUND\":50}"), std::string::npos) << nf.out;
  auto failed = run({"bench", "fail", "x", "-n", "40", "-c", "4", "--mode", "stream"});
  EXPECT_EQ(failed.exit, 1) << failed.err;
  EXPECT_NE(failed.out.find("errors      FAILED 40"), std::string::npos) << failed.out;
}

// --durable reaches the daemon on every job of every mode: this tpoold has no
// [store], so each is FAILED_PRECONDITION, and the summary carries its sentence.
TEST_F(Tpoolctl, BenchDurableWithoutStoreIsRefusedInEveryMode) {
  for (const char* mode : {"unary", "batch", "stream"}) {
    auto r = run({"bench", "echo", "x", "-n", "30", "-c", "10", "--batch", "5", "--mode", mode,
                  "--durable", "--json"});
    EXPECT_EQ(r.exit, 7) << mode << ": " << r.err;
    EXPECT_NE(r.out.find("\"errors\":{\"FAILED_PRECONDITION\":30}"), std::string::npos)
        << mode << ": " << r.out;
    EXPECT_NE(r.err.find("every job failed with FAILED_PRECONDITION: the job asks to be durable"),
              std::string::npos)
        << mode << ": " << r.err;
    EXPECT_TRUE(one_sentence(r.err)) << mode << ": " << r.err;
  }
}

TEST(TpoolctlDown, DaemonDownExits3) {
  std::string address, admin_address;
  {
    DaemonProcess d("[metrics]\nenabled = false\n");
    ASSERT_TRUE(d.started()) << d.log();
    address = d.address();
    admin_address = d.admin_address();  // removed with the daemon
    ASSERT_EQ(d.stop(), std::optional<int>(0));
  }
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"health"},
           {"execute", "echo", "x"},
           {"submit", "echo", "x"},
           {"stats"},
           {"handlers"},
           {"drain"},
           {"version"},
           {"bench", "echo", "-n", "20", "-c", "2"},
       }) {
    auto full = args;
    full.insert(full.begin(),
                {"--address", address, "--admin-address", admin_address, "--deadline", "5s"});
    auto r = ctl(full);
    EXPECT_EQ(r.exit, 3) << args[0] << ": " << r.err;
    EXPECT_TRUE(one_sentence(r.err)) << args[0] << ": " << r.err;
  }
}

TEST(TpoolctlDrain, DrainWaitsThenTheDaemonExits) {
  DaemonProcess d("[metrics]\nenabled = false\n");
  ASSERT_TRUE(d.started()) << d.log();
  auto submit = secure_args();
  submit.insert(submit.end(), {"--address", d.address(), "submit", "sleep", "200"});
  auto s = ctl(submit);
  ASSERT_EQ(s.exit, 0) << s.err;
  // drain goes to the admin listener; no --address needed.
  auto r = ctl({"--admin-address", d.admin_address(), "drain", "--timeout", "20s"});
  EXPECT_EQ(r.exit, 0) << r.err;
  EXPECT_EQ(r.out.rfind("drained: ", 0), 0u) << r.out;
  EXPECT_EQ(d.wait_exit(std::chrono::seconds(30)), std::optional<int>(0)) << d.log();
}

}  // namespace
}  // namespace tpool::testing
