// tpoold vs raw gRPC on the same machine, same build, same run
// (docs/benchmarks.md, "Daemon"). Not a test: nothing here asserts a speed.
//
// Two servers, each its own process on 127.0.0.1: the raw echo (this binary
// re-executed with --serve-raw, raw_echo.cc) and tpoold with the example
// plugins. Every case sends the same JobService messages with an 8-byte
// payload to the `echo` handler (or to the raw echo's equivalent):
//   Unary/<server>/<in flight>      Execute, 1, 64 or 1000 calls outstanding
//   Stream/<server>/<jobs per msg>  one bidi call, 1, 100 or 1000 jobs per message
//   SubmitBatch/tpoold/1000         1000 Submits per call (results retained)
// --benchmark_filter selects cases. TPOOL_BENCH_TPOOLD_PREFIX (environment)
// runs tpoold under a wrapper, split at spaces, e.g.
// "/usr/bin/valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.out";
// TPOOL_BENCH_TPOOLD names another tpoold binary (an older build, to compare
// two builds in one run of the same client).
// Counters: items_per_second (jobs/s), p50_us/p99_us (per job: call latency
// for unary, write-to-result for streams).
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "raw_echo.h"
#include "tpool/v1/jobs.grpc.pb.h"

namespace tpool::bench {
namespace {

using Clock = std::chrono::steady_clock;

class Server {
 public:
  Server(std::vector<std::string> args, const std::string& port_file) : port_file_(port_file) {
    std::filesystem::remove(port_file_);
    pid_ = fork();
    if (pid_ == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      int null = open("/dev/null", O_WRONLY);
      dup2(null, 2);
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    auto deadline = Clock::now() + std::chrono::seconds(120);  // valgrind starts slowly
    int port = 0;
    while (Clock::now() < deadline && port == 0) {
      std::ifstream(port_file_) >> port;
      if (port == 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    grpc::ChannelArguments ch;
    ch.SetMaxReceiveMessageSize(64 << 20);
    ch.SetMaxSendMessageSize(64 << 20);
    channel_ = grpc::CreateCustomChannel("127.0.0.1:" + std::to_string(port),
                                         grpc::InsecureChannelCredentials(), ch);
    stub_ = tpool::v1::JobService::NewStub(channel_);
  }
  ~Server() {
    kill(pid_, SIGTERM);
    int st = 0;
    waitpid(pid_, &st, 0);
    std::filesystem::remove(port_file_);
  }
  tpool::v1::JobService::Stub& stub() { return *stub_; }

 private:
  std::string port_file_;
  pid_t pid_ = -1;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<tpool::v1::JobService::Stub> stub_;
};

std::string self_exe;
std::unique_ptr<Server> raw, tpoold;

Server& server(int which) {
  return which == 0 ? *raw : *tpoold;
}
const char* kNames[] = {"raw", "tpoold"};
const std::string kPayload = "12345678";

tpool::v1::JobRequest request(std::uint64_t tag) {
  tpool::v1::JobRequest r;
  r.set_handler("echo");
  r.set_payload(kPayload);
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
  constexpr int kCalls = 4000;
  std::vector<double> lat;
  std::uint64_t jobs = 0;
  for (auto _ : state) {
    std::mutex mu;
    std::condition_variable cv;
    int issued = 0, done = 0, errors = 0;
    struct Call {
      grpc::ClientContext ctx;
      tpool::v1::JobRequest req = request(0);
      tpool::v1::JobResult resp;
      Clock::time_point start;
    };
    std::function<void()> issue = [&] {
      auto* c = new Call;
      c->start = Clock::now();
      s.stub().async()->Execute(&c->ctx, &c->req, &c->resp, [&, c](grpc::Status st) {
        double us = std::chrono::duration<double, std::micro>(Clock::now() - c->start).count();
        delete c;
        bool more = false;
        {
          std::lock_guard lock(mu);
          ++done;
          if (!st.ok()) ++errors;
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
  const std::uint64_t msgs = std::max<std::uint64_t>(20, 20000 / per_msg);
  const std::uint64_t total = msgs * per_msg;
  std::vector<double> lat;
  std::uint64_t jobs = 0;
  for (auto _ : state) {
    std::vector<std::atomic<std::int64_t>> sent(msgs);
    grpc::ClientContext ctx;
    auto stream = s.stub().Stream(&ctx);
    std::thread writer([&] {
      tpool::v1::JobBatch b;
      for (std::uint64_t m = 0; m < msgs; ++m) {
        b.Clear();
        for (std::uint64_t i = 0; i < per_msg; ++i) *b.add_jobs() = request(m);
        sent[m].store(Clock::now().time_since_epoch().count(), std::memory_order_release);
        if (!stream->Write(b)) break;
      }
      stream->WritesDone();
    });
    std::uint64_t got = 0;
    tpool::v1::ResultBatch rb;
    while (got < total && stream->Read(&rb)) {
      auto now = Clock::now().time_since_epoch().count();
      for (const auto& r : rb.results()) {
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
      std::vector<std::string>{self_exe, "--serve-raw", dir + "/raw.port"}, dir + "/raw.port");
  std::vector<std::string> tpoold_args;
  if (const char* prefix = std::getenv("TPOOL_BENCH_TPOOLD_PREFIX")) {
    std::istringstream words(prefix);
    for (std::string w; words >> w;) tpoold_args.push_back(w);
  }
  const char* bin = std::getenv("TPOOL_BENCH_TPOOLD");
  tpoold_args.emplace_back(bin != nullptr ? bin : TPOOLD_BIN);
  for (const char* a : {"--listen", "127.0.0.1:0", "--port-file"}) {
    tpoold_args.emplace_back(a);
  }
  tpoold_args.push_back(dir + "/tpoold.port");
  for (const char* a : {"--plugin-dir", TPOOL_PLUGIN_DIR, "--log-level", "warn", "--metrics-listen",
                        "127.0.0.1:0"}) {
    tpoold_args.emplace_back(a);
  }
  tpoold = std::make_unique<Server>(std::move(tpoold_args), dir + "/tpoold.port");
  for (int s : {0, 1}) {
    for (int k : {1, 64, 1000}) {
      benchmark::RegisterBenchmark(
          ("Unary/" + std::string(kNames[s]) + "/" + std::to_string(k)).c_str(), Unary)
          ->Args({s, k})
          ->UseRealTime()
          ->Unit(benchmark::kMillisecond);
    }
    for (int b : {1, 100, 1000}) {
      benchmark::RegisterBenchmark(
          ("Stream/" + std::string(kNames[s]) + "/" + std::to_string(b)).c_str(), Stream)
          ->Args({s, b})
          ->UseRealTime()
          ->Unit(benchmark::kMillisecond);
    }
  }
  benchmark::RegisterBenchmark("SubmitBatch/tpoold/1000", SubmitBatch)
      ->Arg(1000)
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  raw.reset();
  tpoold.reset();
  std::filesystem::remove_all(dir);
  return 0;
}
