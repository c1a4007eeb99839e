// tpoold vs raw gRPC on the same machine, same build, same run
// (docs/benchmarks.md, "Daemon"). Not a test: nothing here asserts a speed.
//
// Servers, each its own process on 127.0.0.1: the raw echo (this binary
// re-executed with --serve-raw, raw_echo.cc), tpoold with the example plugins
// (plaintext, no auth: `tpoold`) and a second tpoold, same binary and flags,
// with TLS and auth on (`tpoold_tls`, issue 16): certificates from
// scripts/gen-test-certs.sh and a token file with one token made at run time
// in the run's temporary directory; its client channel trusts the test CA and
// sends the token as `authorization: Bearer` metadata on every call, as
// tpool::client does (ClientOptions::bearer_token). Every case sends the same
// JobService messages with an 8-byte payload to the `echo` handler (or to the
// raw echo's equivalent):
//   Unary/<server>/<in flight>      Execute, 1, 64 or 1000 calls outstanding
//                                   (tpoold_tls: 1 and 64)
//   Stream/<server>/<jobs per msg>  one bidi call, 1, 100 or 1000 jobs per message
//                                   (tpoold_tls: 1000)
//   SubmitBatch/tpoold/1000         1000 Submits per call (results retained)
// and, for issue 18, a third tpoold (`tpoold_iso`, same binary and flags)
// whose plugins all run in process mode ([plugins.isolation] mode =
// "process", runners = TPOOL_BENCH_ISO_RUNNERS, default 4: two per core here,
// so one runner computes while another's result travels; lines in
// TPOOL_BENCH_ISO_CONFIG are appended to its config), each case next to the
// plaintext tpoold's:
//   Unary/tpoold_iso/1, Stream/tpoold_iso/100, Stream/tpoold_iso/1000  (echo)
//   UnaryHash/<tpoold|tpoold_iso>/1, StreamHash/<tpoold|tpoold_iso>/<100|1000>
// where a hash job is the `hash` example's "<n>:12345678" with n =
// TPOOL_BENCH_HASH_ITERATIONS (default 1200 SHA-256 rounds: about 100 us of
// CPU on this machine, 0.085 us a round since the example fetches its digest
// once). TPOOL_BENCH_ISOLATION=0 leaves the
// isolated tpoold and the hash cases out. TPOOL_BENCH_TPOOLD_CONFIG, if set,
// is the plaintext tpoold's config file (e.g. "[pool]\nsearching_gate =
// true" for an A/B of the searching gate, run against run, each run's
// tpoold/raw ratio compared).
// Cases are registered case by case, each server's one after the other
// (Unary/raw/1, Unary/tpoold/1, Unary/tpoold_tls/1, Unary/raw/64, ...), so
// the ones compared run close together in time.
// `bench_daemon --memory` instead measures the daemon's memory per in-flight
// job and per retained result, and its RSS after a million Stream and a
// million Submit jobs (run_memory below; docs/benchmarks.md, "Memory per job").
// --benchmark_filter selects cases; TPOOL_BENCH_TLS=0 (environment) leaves
// the TLS tpoold out (not started, its cases not registered). A server that
// does not start or refuses a first call is reported on stderr and its cases
// are not registered. TPOOL_BENCH_TPOOLD_PREFIX (environment) runs the
// plaintext tpoold under a wrapper, split at spaces, e.g.
// "/usr/bin/valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.out";
// TPOOL_BENCH_TPOOLD_TLS_PREFIX does the same for the TLS tpoold;
// TPOOL_BENCH_TPOOLD names another tpoold binary (an older build, to compare
// two builds in one run of the same client).
// Counters: items_per_second (jobs/s), p50_us/p99_us (per job: call latency
// for unary, write-to-result for streams).
// Before any gRPC header (tpool/common/thread_annotations.h).
#include "tpool/security/token_store.h"
//

#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "raw_echo.h"
#include "tpool/v1/jobs.grpc.pb.h"

namespace tpool::bench {
namespace {

using Clock = std::chrono::steady_clock;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// How the client reaches a server: plaintext, or TLS with `creds` and a
// bearer token sent with every call.
struct ClientSecurity {
  std::shared_ptr<grpc::ChannelCredentials> creds = grpc::InsecureChannelCredentials();
  std::string bearer_token;  // empty: none
};

class Server {
 public:
  // The server's stderr goes to `log_file` (shown if it does not start).
  Server(std::string name, std::vector<std::string> args, const std::string& port_file,
         const std::string& log_file, ClientSecurity security = {})
      : name_(std::move(name)), port_file_(port_file) {
    if (!security.bearer_token.empty()) authorization_ = "Bearer " + security.bearer_token;
    std::filesystem::remove(port_file_);
    pid_ = fork();
    if (pid_ == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      int log = open(log_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(log, 2);
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    auto deadline = Clock::now() + std::chrono::seconds(120);  // valgrind starts slowly
    int port = 0;
    int st = 0;
    while (Clock::now() < deadline && port == 0) {
      std::ifstream(port_file_) >> port;
      if (port != 0) break;
      if (waitpid(pid_, &st, WNOHANG) == pid_) {
        pid_ = -1;  // exited (refused its config, or an older binary)
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (port == 0) {
      problem_ = "did not start; its stderr:\n" + read_file(log_file);
      return;
    }
    grpc::ChannelArguments ch;
    ch.SetMaxReceiveMessageSize(64 << 20);
    ch.SetMaxSendMessageSize(64 << 20);
    channel_ = grpc::CreateCustomChannel("127.0.0.1:" + std::to_string(port),
                                         std::move(security.creds), ch);
    stub_ = tpool::v1::JobService::NewStub(channel_);
    // Connect (TLS: handshake) and make one call before any case is timed.
    grpc::ClientContext ctx;
    prepare(ctx);
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
    tpool::v1::JobRequest req;
    req.set_handler("echo");
    tpool::v1::JobResult resp;
    grpc::Status probe = stub_->Execute(&ctx, req, &resp);
    if (!probe.ok()) {
      problem_ = "refused the first call: " + std::to_string(probe.error_code()) + " " +
                 probe.error_message();
    }
  }
  ~Server() {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      int st = 0;
      waitpid(pid_, &st, 0);
    }
    std::filesystem::remove(port_file_);
  }
  const std::string& name() const { return name_; }
  pid_t pid() const { return pid_; }
  // SIGKILL, for a daemon whose jobs would make a drain wait.
  void kill_now() {
    if (pid_ <= 0) return;
    kill(pid_, SIGKILL);
    int st = 0;
    waitpid(pid_, &st, 0);
    pid_ = -1;
  }
  // Empty if the server answered its first call; else why not.
  const std::string& problem() const { return problem_; }
  tpool::v1::JobService::Stub& stub() { return *stub_; }
  // Every call's context goes through here (the token, if any).
  void prepare(grpc::ClientContext& ctx) const {
    if (!authorization_.empty()) ctx.AddMetadata("authorization", authorization_);
  }

 private:
  std::string name_;
  std::string port_file_;
  std::string authorization_;
  std::string problem_;
  pid_t pid_ = -1;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<tpool::v1::JobService::Stub> stub_;
};

std::string self_exe;
std::unique_ptr<Server> raw, tpoold, tpoold_tls, tpoold_iso;
enum Which { kRaw = 0, kTpoold = 1, kTpooldTls = 2, kTpooldIso = 3 };

Server& server(int which) {
  switch (which) {
    case kRaw:
      return *raw;
    case kTpoold:
      return *tpoold;
    case kTpooldTls:
      return *tpoold_tls;
    default:
      return *tpoold_iso;
  }
}
const std::string kPayload = "12345678";
// What a case's jobs do (its benchmark's last argument).
enum Work { kEcho = 0, kHash = 1 };
std::string hash_payload = "1200:" + kPayload;  // TPOOL_BENCH_HASH_ITERATIONS

// The TLS tpoold's material in `dir`: gen-test-certs.sh's CA and server
// certificate, and a token file with one token for principal "bench" with the
// submit and read roles (what a job client holds), made like `tpoolctl token
// create` does. Returns the token, or "" (and says why on stderr).
std::string make_tls_material(const std::string& dir) {
  const std::string cmd =
      "'" TPOOL_GEN_TEST_CERTS "' '" + dir + "/tls' > '" + dir + "/gen-certs.log' 2>&1";
  if (std::system(cmd.c_str()) != 0) {
    std::cerr << "bench_daemon: " << TPOOL_GEN_TEST_CERTS << " failed:\n"
              << read_file(dir + "/gen-certs.log");
    return "";
  }
  tpool::security::RoleSet roles;
  roles.add(tpool::security::Role::kSubmit);
  roles.add(tpool::security::Role::kRead);
  auto t = tpool::security::make_token_line("bench", roles, {});
  if (!t.ok()) {
    std::cerr << "bench_daemon: no token: " << t.status().message() << "\n";
    return "";
  }
  {
    std::ofstream f(dir + "/tls/tokens");
    f << t.value().line << "\n";
  }
  chmod((dir + "/tls/tokens").c_str(), 0600);
  std::ofstream c(dir + "/tls/tpoold.toml");
  c << "[server]\nadmin_listen = \"none\"\n[tls]\ncert_file = \"" << dir
    << "/tls/server.pem\"\nkey_file = \"" << dir << "/tls/server.key\"\n[auth]\ntoken_file = \""
    << dir << "/tls/tokens\"\n";
  return t.value().token;
}

tpool::v1::JobRequest request(std::uint64_t tag, int work = kEcho) {
  tpool::v1::JobRequest r;
  r.set_handler(work == kHash ? "hash" : "echo");
  r.set_payload(work == kHash ? hash_payload : kPayload);
  r.set_tag(tag);
  return r;
}

void report(benchmark::State& state, std::vector<double>& lat_us, std::uint64_t jobs) {
  state.SetItemsProcessed(static_cast<std::int64_t>(jobs));
  if (lat_us.empty()) return;
  std::sort(lat_us.begin(), lat_us.end());
  state.counters["p50_us"] = lat_us[lat_us.size() / 2];
  state.counters["p99_us"] = lat_us[lat_us.size() * 99 / 100];
}

// Execute with `inflight` calls outstanding, through the callback API.
void Unary(benchmark::State& state) {
  Server& s = server(static_cast<int>(state.range(0)));
  const int inflight = static_cast<int>(state.range(1));
  const int work = static_cast<int>(state.range(2));
  constexpr int kCalls = 4000;
  std::vector<double> lat;
  std::uint64_t jobs = 0;
  for (auto _ : state) {
    std::mutex mu;
    std::condition_variable cv;
    int issued = 0, done = 0, errors = 0;
    struct Call {
      grpc::ClientContext ctx;
      tpool::v1::JobRequest req;
      tpool::v1::JobResult resp;
      Clock::time_point start;
    };
    std::function<void()> issue = [&] {
      auto* c = new Call;
      c->req = request(0, work);
      s.prepare(c->ctx);
      c->start = Clock::now();
      s.stub().async()->Execute(&c->ctx, &c->req, &c->resp, [&, c](grpc::Status st) {
        double us = std::chrono::duration<double, std::micro>(Clock::now() - c->start).count();
        const bool failed = st.ok() && c->resp.state() != tpool::v1::JOB_STATE_SUCCEEDED;
        delete c;
        bool more = false;
        {
          std::lock_guard lock(mu);
          ++done;
          if (!st.ok() || failed) ++errors;
          lat.push_back(us);
          if (issued < kCalls) {
            ++issued;
            more = true;
          }
          if (done == kCalls) cv.notify_one();
        }
        if (more) issue();
      });
    };
    {
      std::lock_guard lock(mu);
      issued = inflight;
    }
    for (int i = 0; i < inflight; ++i) issue();
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return done == kCalls; });
    if (errors != 0) state.SkipWithError("calls failed");
    jobs += kCalls;
  }
  report(state, lat, jobs);
}

// One Stream call per iteration: a writer thread sends the jobs in messages
// of `per_msg`, this thread reads results until all have come back.
void Stream(benchmark::State& state) {
  Server& s = server(static_cast<int>(state.range(0)));
  const std::uint64_t per_msg = static_cast<std::uint64_t>(state.range(1));
  const int work = static_cast<int>(state.range(2));
  const std::uint64_t msgs = std::max<std::uint64_t>(20, 20000 / per_msg);
  const std::uint64_t total = msgs * per_msg;
  std::vector<double> lat;
  std::uint64_t jobs = 0;
  for (auto _ : state) {
    std::vector<std::atomic<std::int64_t>> sent(msgs);
    grpc::ClientContext ctx;
    s.prepare(ctx);
    auto stream = s.stub().Stream(&ctx);
    std::thread writer([&] {
      tpool::v1::JobBatch b;
      for (std::uint64_t m = 0; m < msgs; ++m) {
        b.Clear();
        for (std::uint64_t i = 0; i < per_msg; ++i) *b.add_jobs() = request(m, work);
        sent[m].store(Clock::now().time_since_epoch().count(), std::memory_order_release);
        if (!stream->Write(b)) break;
      }
      stream->WritesDone();
    });
    std::uint64_t got = 0, failed = 0;
    tpool::v1::ResultBatch rb;
    while (got < total && stream->Read(&rb)) {
      auto now = Clock::now().time_since_epoch().count();
      for (const auto& r : rb.results()) {
        if (r.state() != tpool::v1::JOB_STATE_SUCCEEDED) ++failed;
        lat.push_back(static_cast<double>(now - sent[r.tag()].load(std::memory_order_acquire)) /
                      1000.0);
      }
      got += static_cast<std::uint64_t>(rb.results_size());
    }
    while (stream->Read(&rb)) {
    }
    grpc::Status st = stream->Finish();
    writer.join();
    if (!st.ok() || got != total) state.SkipWithError("stream failed");
    if (failed != 0) state.SkipWithError("jobs did not succeed");
    jobs += total;
  }
  report(state, lat, jobs);
}

void SubmitBatch(benchmark::State& state) {
  Server& s = *tpoold;
  const int per_msg = static_cast<int>(state.range(0));
  tpool::v1::JobBatch b;
  for (int i = 0; i < per_msg; ++i) *b.add_jobs() = request(static_cast<std::uint64_t>(i));
  std::vector<double> lat;
  std::uint64_t jobs = 0, refused = 0;
  for (auto _ : state) {
    grpc::ClientContext ctx;
    tpool::v1::JobRefs refs;
    auto start = Clock::now();
    if (!s.stub().SubmitBatch(&ctx, b, &refs).ok()) state.SkipWithError("SubmitBatch failed");
    lat.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
    // Only accepted items count (an item refused for room has a code).
    for (const auto& item : refs.items()) {
      if (item.code() == 0) {
        ++jobs;
      } else {
        ++refused;
      }
    }
  }
  report(state, lat, jobs);
  state.counters["refused"] = static_cast<double>(refused);
}

// ---- --memory: the daemon's memory per job (issue 19; docs/benchmarks.md,
// "Memory per job"). Not Google Benchmark cases: each phase starts its own
// tpoold, drives it, and reads its VmRSS from /proc. Jobs are echo jobs with
// a 16-byte payload.

const std::string kPayload16 = "0123456789abcdef";

std::uint64_t rss_bytes(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(f, line);) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  }
  return 0;
}

double mib(std::uint64_t b) {
  return static_cast<double>(b) / (1 << 20);
}

// SubmitBatch of n echo jobs, 1000 per call; their ids.
std::vector<std::uint64_t> submit_echo(Server& s, std::uint64_t n) {
  std::vector<std::uint64_t> ids;
  tpool::v1::JobBatch b;
  for (std::uint64_t done = 0; done < n;) {
    b.Clear();
    const std::uint64_t k = std::min<std::uint64_t>(1000, n - done);
    for (std::uint64_t i = 0; i < k; ++i) {
      auto* j = b.add_jobs();
      j->set_handler("echo");
      j->set_payload(kPayload16);
    }
    grpc::ClientContext ctx;
    tpool::v1::JobRefs refs;
    grpc::Status st = s.stub().SubmitBatch(&ctx, b, &refs);
    if (!st.ok()) throw std::runtime_error("SubmitBatch failed: " + st.error_message());
    for (const auto& item : refs.items()) {
      if (item.code() != 0) throw std::runtime_error("an item was refused: " + item.message());
      ids.push_back(item.job_id());
    }
    done += k;
  }
  return ids;
}

// Waits for each of `ids` to end. A result the store's bounds already
// evicted (NOT_FOUND: its job ended, and newer results took its place) is
// counted, not an error, when `evicted` is given; any other failure is.
void wait_all(Server& s, const std::vector<std::uint64_t>& ids, std::uint64_t* evicted = nullptr) {
  for (auto id : ids) {
    grpc::ClientContext ctx;
    tpool::v1::WaitRequest req;
    req.set_job_id(id);
    tpool::v1::JobResult r;
    const grpc::Status st = s.stub().Wait(&ctx, req, &r);
    if (st.ok()) continue;
    if (evicted != nullptr && st.error_code() == grpc::StatusCode::NOT_FOUND) {
      ++*evicted;
      continue;
    }
    throw std::runtime_error("Wait for job " + std::to_string(id) + " failed: " +
                             std::to_string(st.error_code()) + " " + st.error_message());
  }
}

// n echo jobs through one Stream, per_msg per message, all results read.
void stream_echo(Server& s, std::uint64_t n, std::uint64_t per_msg) {
  grpc::ClientContext ctx;
  auto stream = s.stub().Stream(&ctx);
  std::thread writer([&] {
    tpool::v1::JobBatch b;
    for (std::uint64_t done = 0; done < n; done += per_msg) {
      b.Clear();
      for (std::uint64_t i = 0; i < per_msg; ++i) {
        auto* j = b.add_jobs();
        j->set_handler("echo");
        j->set_payload(kPayload16);
      }
      if (!stream->Write(b)) break;
    }
    stream->WritesDone();
  });
  std::uint64_t got = 0;
  tpool::v1::ResultBatch rb;
  while (got < n && stream->Read(&rb)) got += static_cast<std::uint64_t>(rb.results_size());
  while (stream->Read(&rb)) {
  }
  grpc::Status st = stream->Finish();
  writer.join();
  if (!st.ok() || got != n) throw std::runtime_error("the stream failed");
}

using TpooldArgs =
    std::function<std::vector<std::string>(const std::string& name, const std::string& config)>;

std::unique_ptr<Server> start(const std::string& dir, const std::string& name,
                              const std::string& config, const TpooldArgs& args) {
  {
    std::ofstream c(dir + "/" + name + ".toml");
    // `config` continues [server] (its first lines) or opens other tables.
    c << "[server]\nadmin_listen = \"none\"\n" << config << "\n[metrics]\nenabled = false\n";
  }
  auto s = std::make_unique<Server>(name, args(name, dir + "/" + name + ".toml"),
                                    dir + "/" + name + ".port", dir + "/" + name + ".log");
  if (!s->problem().empty()) throw std::runtime_error(name + " " + s->problem());
  stream_echo(*s, 20000, 1000);  // warm-up: gRPC's and the allocator's first growth
  return s;
}

constexpr std::uint64_t kStep = 50000;

// RSS idle, after one `step` (kStep jobs) and after a second; the bytes per
// job of each step (the second is the figure: no first-growth in it).
void two_steps(Server& s, const char* what, const char* each, const std::function<void()>& step) {
  const std::uint64_t r0 = rss_bytes(s.pid());
  step();
  const std::uint64_t r1 = rss_bytes(s.pid());
  step();
  const std::uint64_t r2 = rss_bytes(s.pid());
  std::printf(
      "memory: %s: idle %.1f MiB, %llu %.1f MiB, %llu %.1f MiB: %.0f bytes per %s (second "
      "step), %.0f (first)\n",
      what, mib(r0), static_cast<unsigned long long>(kStep), mib(r1),
      static_cast<unsigned long long>(2 * kStep), mib(r2), static_cast<double>(r2 - r1) / kStep,
      each, static_cast<double>(r1 - r0) / kStep);
}

int run_memory(const std::string& dir, const TpooldArgs& args) {
  std::printf("memory: echo jobs, %zu-byte payload; VmRSS of tpoold\n", kPayload16.size());
  {
    // In flight: the one CPU worker held by a sleep, no overflow workers, so
    // every echo job submitted after it stays queued (accepted, not ended).
    auto s = start(dir, "inflight",
                   "max_inflight_jobs = 262144\n"
                   "[pool]\nmax_threads = 1\nblocking_workers = 0\nmax_overflow_workers = 0\n"
                   "watchdog_interval_ms = 0\nqueue_capacity = 262144\n"
                   "[results]\nmax_entries = 1000000\nmax_bytes = 1099511627776\n",
                   args);
    {
      grpc::ClientContext ctx;
      tpool::v1::JobRequest req;
      req.set_handler("sleep");
      req.set_payload("3600000");
      req.set_lane(tpool::v1::LANE_DEFAULT);
      tpool::v1::JobRef ref;
      if (!s->stub().Submit(&ctx, req, &ref).ok()) throw std::runtime_error("sleep refused");
      for (;;) {  // until the worker holds it (bounded by the Wait below otherwise)
        grpc::ClientContext g;
        tpool::v1::JobStatus js;
        if (!s->stub().Get(&g, ref, &js).ok()) throw std::runtime_error("Get failed");
        if (js.state() == tpool::v1::JOB_STATE_RUNNING) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    }
    two_steps(*s, "in flight (Submit, queued)", "job", [&] { (void)submit_echo(*s, kStep); });
    s->kill_now();
  }
  {
    auto s = start(dir, "retained", "[results]\nmax_entries = 1000000\nmax_bytes = 1099511627776\n",
                   args);
    two_steps(*s, "retained results (ended)", "result",
              [&] { wait_all(*s, submit_echo(*s, kStep)); });
  }
  {
    auto s = start(dir, "stream1m", "", args);
    const std::uint64_t r0 = rss_bytes(s->pid());
    stream_echo(*s, 1000000, 1000);
    std::printf(
        "memory: 1,000,000 Stream jobs (1,000 per message): idle %.1f MiB, after %.1f MiB\n",
        mib(r0), mib(rss_bytes(s->pid())));
  }
  {
    auto s = start(dir, "submit1m", "", args);  // the default [results] bounds
    const std::uint64_t r0 = rss_bytes(s->pid());
    std::vector<std::uint64_t> last;
    for (int call = 0; call < 10; ++call) last = submit_echo(*s, 100000);
    // The last call's 100,000 results just fit max_entries, but results of
    // the call before it that ended later can evict some of them first.
    std::uint64_t evicted = 0;
    wait_all(*s, last, &evicted);
    std::printf(
        "memory: 1,000,000 Submit jobs retained (default results.max_entries 100,000, "
        "max_bytes 64 MiB): idle %.1f MiB, after %.1f MiB (%llu of the last 100,000 results "
        "already evicted)\n",
        mib(r0), mib(rss_bytes(s->pid())), static_cast<unsigned long long>(evicted));
  }
  return 0;
}

}  // namespace
}  // namespace tpool::bench

int main(int argc, char** argv) {
  using namespace tpool::bench;
  if (argc == 3 && std::string(argv[1]) == "--serve-raw") return run_raw_echo_server(argv[2]);
  benchmark::Initialize(&argc, argv);
  self_exe = std::filesystem::read_symlink("/proc/self/exe");
  std::string dir =
      std::filesystem::temp_directory_path() / ("tpool-bench-daemon-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  raw = std::make_unique<Server>(
      "raw", std::vector<std::string>{self_exe, "--serve-raw", dir + "/raw.port"},
      dir + "/raw.port", "/dev/null");
  // Both tpoolds: the same binary (TPOOL_BENCH_TPOOLD) and flags; the TLS one
  // adds a config file with [tls], [auth] and no admin listener (the
  // plaintext one keeps the default admin socket, which two daemons cannot
  // share). Each has its own wrapper variable, so that two profilers never
  // write the same output file.
  auto tpoold_args = [&](const std::string& name, const char* prefix_env,
                         const std::string& config) -> std::vector<std::string> {
    std::vector<std::string> args;
    if (const char* prefix = std::getenv(prefix_env)) {
      std::istringstream words(prefix);
      for (std::string w; words >> w;) args.push_back(w);
    }
    const char* bin = std::getenv("TPOOL_BENCH_TPOOLD");
    args.emplace_back(bin != nullptr ? bin : TPOOLD_BIN);
    if (!config.empty()) {
      args.emplace_back("--config");
      args.push_back(config);
    }
    for (const char* a : {"--listen", "127.0.0.1:0", "--port-file"}) args.emplace_back(a);
    args.push_back(dir + "/" + name + ".port");
    for (const char* a : {"--plugin-dir", TPOOL_PLUGIN_DIR, "--log-level", "warn",
                          "--metrics-listen", "127.0.0.1:0"}) {
      args.emplace_back(a);
    }
    return args;
  };
  if (argc == 2 && std::string(argv[1]) == "--memory") {
    int rc = 0;
    try {
      rc = run_memory(dir, [&](const std::string& name, const std::string& config) {
        return tpoold_args(name, "TPOOL_BENCH_TPOOLD_PREFIX", config);
      });
    } catch (const std::exception& e) {
      std::cerr << "bench_daemon --memory: " << e.what() << "\n";
      rc = 1;
    }
    std::filesystem::remove_all(dir);
    return rc;
  }
  // TPOOL_BENCH_TPOOLD_CONFIG: TOML for the plaintext tpoold (an A/B of one
  // setting, e.g. "[pool]\nsearching_gate = true", compared run against run
  // through each run's ratio to the raw echo).
  std::string plain_config;
  if (const char* extra = std::getenv("TPOOL_BENCH_TPOOLD_CONFIG")) {
    plain_config = dir + "/tpoold.toml";
    std::ofstream c(plain_config);
    c << extra << "\n";
  }
  tpoold = std::make_unique<Server>(
      "tpoold", tpoold_args("tpoold", "TPOOL_BENCH_TPOOLD_PREFIX", plain_config),
      dir + "/tpoold.port", dir + "/tpoold.log");
  const char* tls_env = std::getenv("TPOOL_BENCH_TLS");
  const bool tls = tls_env == nullptr || std::string(tls_env) != "0";
  std::string token = tls ? make_tls_material(dir) : "";
  if (!token.empty()) {
    ClientSecurity security;
    security.bearer_token = std::move(token);
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = read_file(dir + "/tls/ca.pem");
    security.creds = grpc::SslCredentials(ssl);
    tpoold_tls = std::make_unique<Server>(
        "tpoold_tls",
        tpoold_args("tpoold_tls", "TPOOL_BENCH_TPOOLD_TLS_PREFIX", dir + "/tls/tpoold.toml"),
        dir + "/tpoold_tls.port", dir + "/tpoold_tls.log", std::move(security));
  }
  const char* iso_env = std::getenv("TPOOL_BENCH_ISOLATION");
  const bool iso = iso_env == nullptr || std::string(iso_env) != "0";
  if (iso) {
    if (const char* n = std::getenv("TPOOL_BENCH_HASH_ITERATIONS")) {
      hash_payload = std::string(n) + ":" + kPayload;
    }
    const char* runners = std::getenv("TPOOL_BENCH_ISO_RUNNERS");
    {
      // No admin listener: the plaintext tpoold has the default socket.
      std::ofstream c(dir + "/iso.toml");
      c << "[server]\nadmin_listen = \"none\"\n[plugins.isolation]\nmode = \"process\"\nrunners = "
        << (runners != nullptr ? runners : "4") << "\n";
      if (const char* extra = std::getenv("TPOOL_BENCH_ISO_CONFIG")) c << extra << "\n";
    }
    tpoold_iso = std::make_unique<Server>(
        "tpoold_iso", tpoold_args("tpoold_iso", "TPOOL_BENCH_TPOOLD_ISO_PREFIX", dir + "/iso.toml"),
        dir + "/tpoold_iso.port", dir + "/tpoold_iso.log");
  }
  for (Server* s : {raw.get(), tpoold.get(), tpoold_tls.get(), tpoold_iso.get()}) {
    if (s != nullptr && !s->problem().empty()) {
      std::cerr << "bench_daemon: " << s->name() << " " << s->problem() << "\n";
    }
  }
  std::vector<int> servers = {kRaw, kTpoold};
  if (tpoold_tls) servers.push_back(kTpooldTls);
  if (tpoold_iso) servers.push_back(kTpooldIso);
  auto add = [&](const char* kind, void (*fn)(benchmark::State&), int s, int k, int work = kEcho) {
    if (!server(s).problem().empty()) return;  // says so above; its cases are left out
    benchmark::RegisterBenchmark(
        (std::string(kind) + "/" + server(s).name() + "/" + std::to_string(k)).c_str(), fn)
        ->Args({s, k, work})
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
  };
  for (int k : {1, 64, 1000}) {
    for (int s : servers) {
      if ((s != kTpooldTls || k != 1000) && (s != kTpooldIso || k == 1)) add("Unary", Unary, s, k);
    }
  }
  for (int b : {1, 100, 1000}) {
    for (int s : servers) {
      if ((s != kTpooldTls || b == 1000) && (s != kTpooldIso || b != 1)) {
        add("Stream", Stream, s, b);
      }
    }
  }
  if (tpoold_iso) {  // in-process and isolated hash, side by side
    for (int s : {kTpoold, kTpooldIso}) add("UnaryHash", Unary, s, 1, kHash);
    for (int b : {100, 1000}) {
      for (int s : {kTpoold, kTpooldIso}) add("StreamHash", Stream, s, b, kHash);
    }
  }
  if (tpoold->problem().empty()) {
    benchmark::RegisterBenchmark("SubmitBatch/tpoold/1000", SubmitBatch)
        ->Arg(1000)
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  raw.reset();
  tpoold.reset();
  tpoold_tls.reset();
  tpoold_iso.reset();
  std::filesystem::remove_all(dir);
  return 0;
}
