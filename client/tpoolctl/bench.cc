// tpoolctl bench: N jobs at a concurrency C, in one of three modes, with a
// progress display and a summary (jobs/s, errors by status, latency
// percentiles). A load generator, not a test: it asserts nothing.
//
// Modes (docs/client.md):
//   unary   C Execute calls in flight (asynchronous); each completion starts
//           the next job. Latency: call start to result.
//   batch   C/B threads, each: SubmitBatch of B jobs, then one WaitBatch for
//           them (or, with --wait each, an asynchronous Wait on each), then
//           the next batch. Latency: batch sent to that job's result.
//   stream  one Stream session; a sender keeps at most C jobs in flight in
//           messages of B; results arrive by tag. Latency: message sent to
//           that job's result.
//
// Thread safety: latency_[i] and start_[i] are written for job i by exactly
// one thread and read by the main thread after done_ == n (Tally::mu_
// publishes them: every completion locks it). Stream start times are written
// before the sender takes flight_mu_ to count the jobs in flight, and read by
// the result callback after it takes flight_mu_, so the write happens before
// the read.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <iostream>
#include <latch>
#include <map>
#include <mutex>
#include <thread>

#include "cli.h"
#include "tpool/client/stream.h"

namespace tpoolctl {
namespace {

using Clock = std::chrono::steady_clock;
using tpool::client::Client;
using tpool::client::Error;
using tpool::client::Job;
using tpool::client::JobResult;
using tpool::client::Result;

class Tally {
 public:
  explicit Tally(std::uint64_t n) : n_(n), latency_us_(n, 0) {}

  void ok(std::uint64_t i, Clock::duration d) {
    latency_us_[i] = static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::microseconds>(d).count());
    finish(nullptr);
  }
  void error(const std::string& what) { finish(&what); }
  // An RPC error: counted by its code's name; the first message of each code
  // is kept for the summary (e.g. why every job was refused).
  void error(const Error& e) { finish(nullptr, &e); }

  // Result of an Execute/Wait: success, a non-success final state, or an RPC error.
  void record(std::uint64_t i, Clock::time_point start, const Result<JobResult>& r) {
    if (!r.ok()) {
      error(r.error());
    } else if (!r->succeeded()) {
      error(to_string(r->state));
    } else {
      ok(i, Clock::now() - start);
    }
  }

  // Waits until every job reported or `tick` passed; true when all did.
  bool wait_for(std::chrono::milliseconds tick) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, tick, [this] { return done_ == n_; });
  }
  std::uint64_t done() {
    std::lock_guard lock(mu_);
    return done_;
  }
  std::map<std::string, std::uint64_t> errors() {
    std::lock_guard lock(mu_);
    return errors_;
  }
  // The first message seen with the RPC error `name` ("" when none).
  std::string first_message(const std::string& name) {
    std::lock_guard lock(mu_);
    auto it = messages_.find(name);
    return it == messages_.end() ? "" : it->second;
  }
  std::uint64_t succeeded() {
    std::lock_guard lock(mu_);
    return succeeded_;
  }
  // Successful jobs' latencies, sorted (call after wait_for returned true).
  std::vector<std::uint64_t> sorted_latencies() {
    std::lock_guard lock(mu_);
    std::vector<std::uint64_t> v;
    v.reserve(succeeded_);
    for (std::uint64_t i = 0; i < n_; ++i) {
      if (ok_[i]) v.push_back(latency_us_[i]);
    }
    std::sort(v.begin(), v.end());
    return v;
  }
  void mark_ok(std::uint64_t i) { ok_[i] = 1; }
  void init_ok() { ok_.assign(n_, 0); }

 private:
  void finish(const std::string* error, const Error* rpc = nullptr) {
    std::string name = rpc != nullptr ? rpc->code_name() : "";
    std::lock_guard lock(mu_);
    if (rpc != nullptr) {
      ++errors_[name];
      messages_.emplace(name, rpc->message());  // keeps the first
    } else if (error != nullptr) {
      ++errors_[*error];
    } else {
      ++succeeded_;
    }
    if (++done_ == n_) cv_.notify_all();
  }

  const std::uint64_t n_;
  std::vector<std::uint64_t> latency_us_;
  std::vector<char> ok_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::uint64_t done_ = 0;
  std::uint64_t succeeded_ = 0;
  std::map<std::string, std::uint64_t> errors_;
  std::map<std::string, std::string> messages_;
};

struct Plan {
  Job job;
  std::uint64_t n = 10'000;
  std::uint64_t c = 64;
  std::uint64_t batch = 64;
  std::string mode = "unary";
  bool wait_each = false;  // batch mode: a Wait per job instead of one WaitBatch
  tpool::client::CallOptions call;
};

// unary: C asynchronous Execute calls; each completion starts the next job.
void run_unary(const Client& client, const Plan& p, Tally& t) {
  auto next = std::make_shared<std::atomic<std::uint64_t>>(0);
  // A self-restarting chain per concurrency slot.
  struct Chain {
    static void start(const Client& cl, const Plan& pl, Tally& ta,
                      std::shared_ptr<std::atomic<std::uint64_t>> nx) {
      // relaxed: the counter only hands out distinct indices.
      std::uint64_t i = nx->fetch_add(1, std::memory_order_relaxed);
      if (i >= pl.n) return;
      auto t0 = Clock::now();
      cl.execute_async(
          pl.job,
          [&cl, &pl, &ta, nx, i, t0](Result<JobResult> r) {
            // The next job first: once the last record() lands, the main
            // thread may return and destroy cl, pl and ta.
            start(cl, pl, ta, nx);
            if (r.ok() && r->succeeded()) ta.mark_ok(i);
            ta.record(i, t0, r);
          },
          pl.call);
    }
  };
  for (std::uint64_t k = 0; k < std::min(p.c, p.n); ++k) Chain::start(client, p, t, next);
}

// batch: C/B threads of SubmitBatch + one WaitBatch (or asynchronous Waits).
std::vector<std::thread> run_batch(const Client& client, const Plan& p, Tally& t) {
  auto next = std::make_shared<std::atomic<std::uint64_t>>(0);
  std::uint64_t threads = std::max<std::uint64_t>(1, p.c / p.batch);
  std::vector<std::thread> out;
  for (std::uint64_t k = 0; k < threads; ++k) {
    out.emplace_back([&client, &p, &t, next] {
      for (;;) {
        // relaxed: distinct index ranges only.
        std::uint64_t first = next->fetch_add(p.batch, std::memory_order_relaxed);
        if (first >= p.n) return;
        std::uint64_t count = std::min(p.batch, p.n - first);
        std::vector<Job> jobs(count, p.job);
        auto t0 = Clock::now();
        auto refs = client.submit_batch(jobs, p.call);
        if (!refs.ok()) {
          for (std::uint64_t i = 0; i < count; ++i) t.error(refs.error());
          continue;
        }
        if (!p.wait_each) {
          // One WaitBatch for the accepted ones, sent to the replica that
          // accepted them all.
          std::vector<std::uint64_t> ids;
          std::vector<std::uint64_t> idx;
          std::string replica;
          for (std::uint64_t i = 0; i < count; ++i) {
            const auto& item = refs->at(i);
            if (!item.error.ok()) {
              t.error(item.error);
              continue;
            }
            ids.push_back(item.job_id);
            idx.push_back(first + i);
            replica = item.replica;
          }
          if (ids.empty()) continue;
          auto results = client.wait_batch(replica, ids, p.call);
          for (std::size_t j = 0; j < ids.size(); ++j) {
            if (!results.ok()) {
              t.error(results.error());
              continue;
            }
            const JobResult& r = results->at(j);
            if (r.code != 0) {
              t.error(Error(r.code, r.message));
              continue;
            }
            if (r.succeeded()) t.mark_ok(idx[j]);
            t.record(idx[j], t0, Result<JobResult>(r));
          }
          continue;
        }
        // Shared: a callback may still be inside count_down() when wait() returns.
        auto waits = std::make_shared<std::latch>(static_cast<std::ptrdiff_t>(count));
        for (std::uint64_t i = 0; i < count; ++i) {
          const auto& item = refs->at(i);
          if (!item.error.ok()) {
            t.error(item.error);
            waits->count_down();
            continue;
          }
          client.wait_async(
              tpool::client::JobRef{item.job_id, item.replica},
              [&t, waits, idx = first + i, t0](Result<JobResult> r) {
                if (r.ok() && r->succeeded()) t.mark_ok(idx);
                t.record(idx, t0, r);
                waits->count_down();
              },
              p.call);
        }
        waits->wait();
      }
    });
  }
  return out;
}

// stream: one session, at most C jobs in flight, messages of B jobs.
Error run_stream(const Client& client, const Plan& p, Tally& t,
                 std::chrono::milliseconds deadline) {
  std::vector<Clock::time_point> start(p.n);
  std::mutex flight_mu;
  std::condition_variable flight_cv;
  std::uint64_t in_flight = 0;  // guarded by flight_mu
  bool ended = false;           // guarded by flight_mu: no more results will come
  tpool::client::StreamOptions so;
  so.deadline = deadline;
  so.on_end = [&] {
    {
      std::lock_guard lock(flight_mu);
      ended = true;
    }
    flight_cv.notify_one();
  };
  so.on_result = [&](const JobResult& r) {
    Clock::time_point t0;
    {
      std::lock_guard lock(flight_mu);
      t0 = start.at(r.tag);
      --in_flight;
    }
    flight_cv.notify_one();
    if (r.code != 0) {
      t.error(Error(r.code, r.message));
    } else if (!r.succeeded()) {
      t.error(to_string(r.state));
    } else {
      t.mark_ok(r.tag);
      t.ok(r.tag, Clock::now() - t0);
    }
  };
  auto session = client.stream(so);
  std::uint64_t sent = 0;
  while (sent < p.n) {
    std::uint64_t count = std::min(p.batch, p.n - sent);
    {
      std::unique_lock lock(flight_mu);
      flight_cv.wait(lock, [&] { return ended || in_flight + count <= std::max(p.c, count); });
      if (ended) break;
      in_flight += count;
      auto now = Clock::now();
      for (std::uint64_t i = 0; i < count; ++i) start[sent + i] = now;
    }
    std::vector<Job> jobs(count, p.job);
    for (std::uint64_t i = 0; i < count; ++i) jobs[i].tag = sent + i;
    if (!session->send(jobs)) break;
    sent += count;
  }
  Error e = session->finish();
  // Jobs never sent, or whose results never came, count under the call's end.
  std::uint64_t missing = p.n - t.done();
  for (std::uint64_t i = 0; i < missing; ++i) {
    if (e.ok()) {
      t.error(std::string("LOST"));
    } else {
      t.error(e);
    }
  }
  return e;
}

std::uint64_t quantile(const std::vector<std::uint64_t>& v, double q) {
  if (v.empty()) return 0;
  auto idx = static_cast<std::size_t>(std::ceil(q * static_cast<double>(v.size()))) - 1;
  return v[std::min(idx, v.size() - 1)];
}

std::string fmt_ms(std::uint64_t us) {
  char b[32];
  std::snprintf(b, sizeof b, "%.3f ms", static_cast<double>(us) / 1000.0);
  return b;
}

}  // namespace

int cmd_bench(const Args& a) {
  Plan p;
  int exit = kOk;
  if (!tpoolctl::job_from_args(a, 0, &p.job, &exit)) return exit;
  for (auto [flag, field] :
       {std::pair{"-n", &p.n}, std::pair{"-c", &p.c}, std::pair{"--batch", &p.batch}}) {
    if (auto v = a.value(flag)) {
      auto u = parse_uint(*v);
      if (!u || *u == 0) {
        return fail(a, kUsage, std::string(flag) + " '" + *v + "' is not a positive number");
      }
      *field = *u;
    }
  }
  if (auto m = a.value("--mode")) p.mode = *m;
  if (auto w = a.value("--wait")) {
    if (*w != "batch" && *w != "each") {
      return fail(a, kUsage,
                  "--wait '" + *w +
                      "' is not a way to wait; use batch (one WaitBatch per "
                      "SubmitBatch) or each (a Wait per job)");
    }
    p.wait_each = *w == "each";
  }
  if (p.mode != "unary" && p.mode != "batch" && p.mode != "stream") {
    return fail(a, kUsage, "--mode '" + p.mode + "' is not a mode; use unary, batch or stream");
  }
  const bool tty = ::isatty(STDERR_FILENO) != 0;
  const bool bar = !a.has("--quiet") && (tty || a.has("--progress"));
  const bool lines = !a.has("--quiet") && !bar;

  Client client(a.client);
  Tally t(p.n);
  t.init_ok();
  auto t0 = Clock::now();
  std::vector<std::thread> threads;
  std::thread streamer;
  Error stream_error;
  if (p.mode == "unary") {
    run_unary(client, p, t);
  } else if (p.mode == "batch") {
    threads = run_batch(client, p, t);
  } else {
    auto deadline = a.deadline_given ? a.client.default_deadline : std::chrono::hours(1);
    // deadline by value: it goes out of scope here, the thread runs on.
    streamer = std::thread([&, deadline] { stream_error = run_stream(client, p, t, deadline); });
  }
  auto tick = bar ? std::chrono::milliseconds(100) : std::chrono::milliseconds(1000);
  while (!t.wait_for(tick)) {
    std::uint64_t done = t.done();
    double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    double rate = secs > 0 ? static_cast<double>(done) / secs : 0;
    if (bar) {
      constexpr int kWidth = 30;
      int filled = static_cast<int>(kWidth * done / p.n);
      std::fprintf(stderr, "\r[%s%s] %3d%% %llu/%llu jobs, %.0f jobs/s ",
                   std::string(static_cast<std::size_t>(filled), '#').c_str(),
                   std::string(static_cast<std::size_t>(kWidth - filled), '.').c_str(),
                   static_cast<int>(100 * done / p.n), static_cast<unsigned long long>(done),
                   static_cast<unsigned long long>(p.n), rate);
    } else if (lines) {
      std::fprintf(stderr, "bench: %llu/%llu jobs, %.0f jobs/s\n",
                   static_cast<unsigned long long>(done), static_cast<unsigned long long>(p.n),
                   rate);
    }
  }
  double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  if (bar) std::fprintf(stderr, "\r%s\r", std::string(72, ' ').c_str());
  for (auto& th : threads) th.join();
  if (streamer.joinable()) streamer.join();

  auto lat = t.sorted_latencies();
  auto errors = t.errors();
  std::uint64_t ok = t.succeeded();
  double rate = secs > 0 ? static_cast<double>(p.n) / secs : 0;
  struct Q {
    const char* name;
    double q;
  };
  const Q qs[] = {{"p50", 0.5}, {"p90", 0.9}, {"p99", 0.99}, {"p99_9", 0.999}};
  if (a.json) {
    std::cout << "{\"handler\":" << json_string(p.job.handler)
              << ",\"mode\":" << json_string(p.mode) << ",\"jobs\":" << p.n
              << ",\"concurrency\":" << p.c << ",\"batch\":" << p.batch
              << ",\"payload_bytes\":" << p.job.payload.size() << ",\"seconds\":" << secs
              << ",\"jobs_per_s\":" << rate << ",\"succeeded\":" << ok << ",\"errors\":{";
    bool first = true;
    for (const auto& [k, v] : errors) {
      std::cout << (first ? "" : ",") << json_string(k) << ":" << v;
      first = false;
    }
    std::cout << "},\"latency_us\":{";
    for (const auto& q : qs) std::cout << "\"" << q.name << "\":" << quantile(lat, q.q) << ",";
    std::cout << "\"max\":" << (lat.empty() ? 0 : lat.back()) << "}}\n";
  } else {
    std::printf("bench: %llu jobs to %s (%s, concurrency %llu%s) in %.3f s\n",
                static_cast<unsigned long long>(p.n), p.job.handler.c_str(), p.mode.c_str(),
                static_cast<unsigned long long>(p.c),
                p.mode == "unary" ? "" : (", batch " + std::to_string(p.batch)).c_str(), secs);
    std::printf("throughput  %.1f jobs/s\n", rate);
    std::printf("succeeded   %llu\n", static_cast<unsigned long long>(ok));
    std::string errs;
    for (const auto& [k, v] : errors)
      errs += (errs.empty() ? "" : ", ") + k + " " + std::to_string(v);
    std::printf("errors      %s\n", errs.empty() ? "none" : errs.c_str());
    if (lat.empty()) {
      std::printf("latency     n/a (no job succeeded)\n");
    } else {
      std::printf("latency     p50 %s  p90 %s  p99 %s  p99.9 %s  max %s\n",
                  fmt_ms(quantile(lat, 0.5)).c_str(), fmt_ms(quantile(lat, 0.9)).c_str(),
                  fmt_ms(quantile(lat, 0.99)).c_str(), fmt_ms(quantile(lat, 0.999)).c_str(),
                  fmt_ms(lat.back()).c_str());
    }
  }
  std::fflush(stdout);
  if (errors.empty()) return kOk;
  // Nothing succeeded and every job met the same RPC error (e.g. the daemon
  // is down): exit with that error's code, as a single call would.
  if (ok == 0 && errors.size() == 1) {
    static const std::map<std::string, int> kByName = {
        {"UNAVAILABLE", kUnavailable},     {"NOT_FOUND", kNotFound},
        {"DEADLINE_EXCEEDED", kDeadline},  {"CANCELLED", kCancelled},
        {"INVALID_ARGUMENT", kRejected},   {"FAILED_PRECONDITION", kRejected},
        {"RESOURCE_EXHAUSTED", kRejected},
    };
    const std::string& name = errors.begin()->first;
    auto it = kByName.find(name);
    if (it != kByName.end()) {
      // The daemon's sentence: the stream's end, else the first job's refusal.
      std::string why = stream_error.ok() ? t.first_message(name) : stream_error.message();
      return fail(a, it->second, "every job failed with " + name + (why.empty() ? "" : ": " + why));
    }
  }
  return fail(a, kNegative,
              std::to_string(p.n - ok) + " of " + std::to_string(p.n) +
                  " jobs did not succeed (errors above)");
}

}  // namespace tpoolctl
