// What a scrape costs the work: job throughput with /metrics scraped every
// 100 ms (scrape:1) against never (scrape:0), side by side.
//
//   BM_PoolThroughput   tiny tasks through a Pool in this process; the scraper
//                       thread runs the exporter's whole scrape (Collect and
//                       text serialisation) on the same pool, minus the socket.
//   BM_DaemonExecute    echo jobs through a real tpoold over gRPC from client
//                       threads; the scraper GETs http://.../metrics.
//
// A scrape reads Pool::stats() (relaxed loads of per-worker counters and
// histograms): it adds nothing to the submit or run path, so any difference
// is the scrape's CPU time and cache traffic on a shared machine.
#include <benchmark/benchmark.h>
#include <prometheus/text_serializer.h>

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>

#include "daemon_process.h"
#include "metrics_test_util.h"
#include "tpool/metrics/exporter.h"

namespace {

using namespace std::chrono_literals;

// Calls scrape() every 100 ms until destroyed; counts the scrapes.
class Scraper {
 public:
  template <class F>
  explicit Scraper(F scrape) {
    thread_ = std::thread([this, scrape] {
      std::unique_lock lock(mu_);
      while (!stop_) {
        lock.unlock();
        scrape();
        scrapes_.fetch_add(1, std::memory_order_relaxed);
        lock.lock();
        cv_.wait_for(lock, 100ms, [this] { return stop_; });  // the scrape interval
      }
    });
  }
  ~Scraper() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_one();
    thread_.join();
  }
  std::uint64_t scrapes() const { return scrapes_.load(std::memory_order_relaxed); }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::atomic<std::uint64_t> scrapes_{0};
  std::thread thread_;
};

void tiny(void* p) {
  // ~100 ns of work: the task cost the pool's own benchmarks use.
  auto* x = static_cast<std::atomic<std::uint64_t>*>(p);
  std::uint64_t v = 0;
  for (int i = 0; i < 64; ++i) benchmark::DoNotOptimize(v += static_cast<std::uint64_t>(i));
  x->fetch_add(v & 1, std::memory_order_relaxed);
}

void BM_PoolThroughput(benchmark::State& state) {
  const bool scrape = state.range(0) != 0;
  tpool::Config c;
  c.queue_capacity = 1 << 16;
  auto pool = tpool::Pool::create(c);
  if (!pool.ok()) {
    state.SkipWithError(pool.status().message().c_str());
    return;
  }
  tpool::Pool& p = *pool.value();
  auto collector = std::make_shared<tpool::metrics::Collector>(tpool::metrics::Sources{
      [&p] { return tpool::metrics::Snapshot{.pool = p.stats()}; }, "bench"});
  std::unique_ptr<Scraper> scraper;
  std::atomic<std::size_t> bytes{0};
  if (scrape) {
    scraper = std::make_unique<Scraper>(
        [&] { bytes.store(prometheus::TextSerializer().Serialize(collector->Collect()).size()); });
  }
  constexpr std::size_t kBatch = 8192;
  std::atomic<std::uint64_t> sink{0};
  std::vector<tpool::Task> tasks(kBatch, tpool::Task{&tiny, &sink});
  for (auto _ : state) {
    tpool::WaitGroup wg;
    tpool::SubmitOptions o;
    o.wait_group = &wg;
    std::size_t done = 0;
    while (done < kBatch) {
      auto n = p.submit_batch(std::span(tasks).subspan(done), o);
      if (!n.ok()) {
        state.SkipWithError(n.status().message().c_str());
        return;
      }
      done += n.value();
    }
    wg.wait();
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * kBatch));
  if (scraper) {
    state.counters["scrapes"] = static_cast<double>(scraper->scrapes());
    state.counters["scrape_bytes"] = static_cast<double>(bytes.load());
  }
  scraper.reset();
  (void)p.shutdown(tpool::ShutdownMode::kDrain);
}
BENCHMARK(BM_PoolThroughput)->ArgName("scrape")->Arg(0)->Arg(1)->UseRealTime()->MinTime(2.0);

// One scrape's own cost, without the HTTP: Collect() and the text format on
// an idle pool (the work the exporter's thread does per scrape).
void BM_ScrapeCollect(benchmark::State& state) {
  auto pool = tpool::Pool::create(tpool::Config{});
  if (!pool.ok()) {
    state.SkipWithError(pool.status().message().c_str());
    return;
  }
  tpool::metrics::Collector collector(
      {[p = pool.value().get()] { return tpool::metrics::Snapshot{.pool = p->stats()}; }, "bench"});
  for (auto _ : state) {
    benchmark::DoNotOptimize(prometheus::TextSerializer().Serialize(collector.Collect()));
  }
}
BENCHMARK(BM_ScrapeCollect)->MinTime(1.0);

// One tpoold per benchmark run, shared by its client threads.
struct Daemon {
  std::unique_ptr<tpool::testing::DaemonProcess> process;
  int metrics_port = 0;
  std::string dir;
};
Daemon& daemon_for_run() {
  static Daemon d;
  return d;
}

void BM_DaemonExecute(benchmark::State& state) {
  const bool scrape = state.range(0) != 0;
  Daemon& d = daemon_for_run();
  std::unique_ptr<Scraper> scraper;
  if (state.thread_index() == 0 && !d.process) {  // once: every run reuses it
    d.dir =
        (std::filesystem::temp_directory_path() / ("tpoold-bench-" + std::to_string(::getpid())))
            .string();
    std::filesystem::create_directories(d.dir);
    const std::string port_file = d.dir + "/metrics.port";
    d.process = std::make_unique<tpool::testing::DaemonProcess>(
        "[metrics]\nlisten = \"127.0.0.1:0\"\nport_file = \"" + port_file + "\"\n",
        std::vector<std::string>{"--log-level", "warn"});
    d.metrics_port = d.process->started() ? tpool::testing::wait_port_file(port_file) : 0;
  }
  // Google Benchmark starts every thread's loop together: the daemon is up
  // when the first iteration of any thread runs.
  for (auto _ : state) {
    if (d.metrics_port == 0) {
      state.SkipWithError("tpoold did not start");
      break;
    }
    if (scrape && state.thread_index() == 0 && !scraper) {
      scraper = std::make_unique<Scraper>(
          [&d] { benchmark::DoNotOptimize(tpool::testing::http_get(d.metrics_port, "/metrics")); });
    }
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 30s);
    tpool::v1::JobResult r;
    auto s = d.process->jobs().Execute(&ctx, tpool::testing::job("echo", "payload"), &r);
    if (!s.ok()) {
      state.SkipWithError(s.error_message().c_str());
      break;
    }
  }
  state.SetItemsProcessed(state.iterations());
  if (state.thread_index() == 0) {
    if (scraper) state.counters["scrapes"] = static_cast<double>(scraper->scrapes());
    scraper.reset();
  }
}
// The daemon is started by the first run's thread 0 and stopped in main.
BENCHMARK(BM_DaemonExecute)
    ->ArgName("scrape")
    ->Arg(0)
    ->Arg(1)
    ->Threads(4)
    ->UseRealTime()
    ->MinTime(3.0);

}  // namespace

// A whole scrape of a real tpoold over HTTP (after BM_DaemonExecute's jobs:
// every handler's series are populated).
void BM_ScrapeHttp(benchmark::State& state) {
  Daemon& d = daemon_for_run();
  if (!d.process || d.metrics_port == 0) {
    state.SkipWithError("run with BM_DaemonExecute first (it starts the daemon)");
    return;
  }
  std::size_t bytes = 0;
  for (auto _ : state) {
    auto r = tpool::testing::http_get(d.metrics_port, "/metrics");
    if (r.status != 200) {
      state.SkipWithError("scrape failed");
      break;
    }
    bytes = r.body.size();
  }
  state.counters["bytes"] = static_cast<double>(bytes);
}
BENCHMARK(BM_ScrapeHttp)->UseRealTime()->MinTime(1.0);

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  if (auto& d = daemon_for_run(); d.process) {
    (void)d.process->stop();
    d.process.reset();
    std::error_code ec;
    std::filesystem::remove_all(d.dir, ec);
  }
  return 0;
}
