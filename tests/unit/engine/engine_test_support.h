// The engine's in-process test bench: a real Pool, a real plugin_host::Host
// that dlopen()s the engine_testkit plugin (plugin/engine_testkit.cc), and an
// Engine over them, with the deadline thread off (tests call enforce()) and a
// clock the test advances for retention. DoneFn calls are recorded per job,
// so every test can check that each job reported exactly once.
//
// Synchronisation: latches (testkit::Control's gate), the recorder's
// condition variable, and eventually() polling an observable of the engine
// with a bound that only guards against a hang. No sleeps.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "testkit_control.h"
#include "tpool/engine/engine.h"
#include "tpool/plugin_host/host.h"
#include "tpool/pool.h"

namespace tpool::engine::testing {

using namespace std::chrono_literals;
using testkit::Control;
using testkit::kHang;

// Polls pred (yielding) until it holds; false after the bound (a hang).
template <class Pred>
bool eventually(Pred pred, std::chrono::nanoseconds bound = kHang) {
  const auto end = std::chrono::steady_clock::now() + bound;
  while (!pred()) {
    if (std::chrono::steady_clock::now() >= end) return false;
    std::this_thread::yield();
  }
  return true;
}

// A clock the test sets (retention's time source, Engine's clock argument).
class ManualClock final : public tpool::Clock {
 public:
  std::chrono::nanoseconds now() const noexcept override {
    return std::chrono::nanoseconds(ns_.load(std::memory_order_acquire));
  }
  void advance(std::chrono::nanoseconds d) { ns_.fetch_add(d.count(), std::memory_order_acq_rel); }

 private:
  std::atomic<std::int64_t> ns_{std::chrono::nanoseconds(std::chrono::hours(1)).count()};
};

// Every DoneFn call: how often per job, the state each saw, and the thread.
class Recorder {
 public:
  struct Call {
    std::uint64_t id;
    JobState state;
    std::string output;
    std::string message;
    std::thread::id thread;
  };
  static void on_done(void* user, Job& job) {
    auto* r = static_cast<Recorder*>(user);
    std::lock_guard lock(r->mu_);
    // The job is final when its waiters run (inv 3 in job.h).
    r->calls_.push_back({job.id(), job.state(), std::string(job.output()),
                         std::string(job.message()), std::this_thread::get_id()});
    ++r->per_job_[job.id()];
    r->cv_.notify_all();
  }
  // Waits until n calls in all have been recorded.
  bool wait_total(std::size_t n, std::chrono::nanoseconds bound = kHang) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, bound, [&] { return calls_.size() >= n; });
  }
  // Waits until job id has reported; its call (or a default one on timeout).
  Call wait_job(std::uint64_t id, std::chrono::nanoseconds bound = kHang) {
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, bound, [&] { return per_job_.contains(id); });
    for (const Call& c : calls_) {
      if (c.id == id) return c;
    }
    ADD_FAILURE() << "job " << id << " never called its DoneFn";
    return {0, JobState::kQueued, {}, {}, {}};
  }
  int calls_for(std::uint64_t id) {
    std::lock_guard lock(mu_);
    auto it = per_job_.find(id);
    return it == per_job_.end() ? 0 : it->second;
  }
  std::size_t total() {
    std::lock_guard lock(mu_);
    return calls_.size();
  }
  // Every job reported at most once (and at least once if it is in ids).
  ::testing::AssertionResult each_once(const std::vector<std::uint64_t>& ids) {
    std::lock_guard lock(mu_);
    for (const auto& [id, n] : per_job_) {
      if (n != 1)
        return ::testing::AssertionFailure() << "job " << id << " reported " << n << " times";
    }
    for (std::uint64_t id : ids) {
      if (!per_job_.contains(id))
        return ::testing::AssertionFailure() << "job " << id << " never reported";
    }
    return ::testing::AssertionSuccess();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Call> calls_;
  std::map<std::uint64_t, int> per_job_;
};

struct BenchOptions {
  EngineLimits limits = test_limits();
  std::size_t threads = 2;
  std::size_t queue_capacity = 64;
  // The pool's own default: kBlock, so that only the engine's own choice of
  // kReject (admission.cc, A4) keeps submits from blocking.
  Backpressure pool_backpressure = Backpressure::kBlock;
  std::size_t max_output_bytes = std::size_t{1} << 20;
  const tpool::Clock* clock = nullptr;
  std::unique_ptr<ResultStore> store;
  store::Journal* journal = nullptr;  // durable jobs (durable_test.cc); outlives the engine

  static BenchOptions with_threads(std::size_t n) {
    BenchOptions o;
    o.threads = n;
    return o;
  }
  static EngineLimits test_limits() {
    EngineLimits l;
    l.enforce_interval = 0ms;  // no deadline thread: tests call enforce()
    l.incarnation = 0x00abcd;
    return l;
  }
};

class EngineBench : public ::testing::Test {
 protected:
  void start(BenchOptions o = {}) {
    plugin_host::HostConfig hc;
    hc.dirs = {TPOOL_ENGINE_TESTKIT_DIR};
    hc.plugin_config["engine_testkit"] = testkit::config_of(&ctl_);
    hc.max_output_bytes = o.max_output_bytes;
    hc.log_sink = [](plugin_host::LogLevel, std::string_view, std::string_view) {};
    auto h = plugin_host::Host::load(hc);
    ASSERT_TRUE(h.ok()) << h.status().message();
    host_ = std::move(h).value();
    tpool::Config pc;
    pc.min_threads = o.threads;
    pc.max_threads = o.threads;
    pc.queue_capacity = o.queue_capacity;
    pc.backpressure = o.pool_backpressure;
    pc.name = "etest";
    auto p = Pool::create(pc);
    ASSERT_TRUE(p.ok()) << p.status().message();
    pool_ = std::move(p).value();
    engine_ =
        std::make_unique<Engine>(*pool_, *host_, o.limits, o.clock, std::move(o.store), o.journal);
  }

  void TearDown() override {
    ctl_.open_gate();  // blocked handlers return
    if (pool_) (void)pool_->shutdown(ShutdownMode::kDrain, kHang);
    // No job is left in flight once the pool has drained: every task ended.
    if (engine_) {
      EXPECT_EQ(engine_->in_flight(), 0u);
    }
    engine_.reset();
    pool_.reset();
    host_.reset();
    EXPECT_TRUE(done_.each_once({})) << "a DoneFn ran more than once";
  }

  Engine& engine() { return *engine_; }
  Pool& pool() { return *pool_; }

  static JobSpec spec(std::string handler, std::string payload = {}) {
    JobSpec s;
    s.handler = std::move(handler);
    s.payload = std::move(payload);
    return s;
  }
  static JobSpec keyed(std::string handler, std::string payload, std::string key) {
    JobSpec s = spec(std::move(handler), std::move(payload));
    s.idempotency_key = std::move(key);
    return s;
  }

  // Submits with the recorder as DoneFn; fails the test on a refusal.
  JobPtr run(JobSpec s) {
    Engine::SubmitResult r = engine_->submit(std::move(s), &Recorder::on_done, &done_);
    EXPECT_TRUE(r.ok()) << (r.error ? r.error->message : "");
    return r.ok() ? r.value.job : nullptr;
  }
  Engine::SubmitResult submit(JobSpec s) {
    return engine_->submit(std::move(s), &Recorder::on_done, &done_);
  }
  // A batch with the recorder as DoneFn.
  std::size_t batch(std::vector<JobSpec>& specs, std::vector<Engine::SubmitResult>& out,
                    bool stop_when_full = false, const std::atomic<bool>* group = nullptr) {
    out.assign(specs.size(), {});
    return engine_->submit_batch(specs, &Recorder::on_done, &done_, group, out, stop_when_full);
  }
  // Runs to the end: submit, wait for its DoneFn.
  Recorder::Call finish(JobSpec s) {
    auto j = run(std::move(s));
    if (j == nullptr) return {};
    return done_.wait_job(j->id());
  }

  // No job in flight (the task has ended: released after its DoneFn ran).
  bool idle() {
    return eventually([&] { return engine_->in_flight() == 0; });
  }

  // idle(), and the pool has taken back every descriptor (a task's
  // descriptor is freed after its fn returned, so after in_flight dropped).
  bool quiet() {
    return idle() && eventually([&] { return pool_->stats().live_descriptors == 0; });
  }

  HandlerSnapshot counts(const std::string& handler) {
    for (const auto& h : engine_->snapshot().handlers) {
      if (h.handler == handler) return h;
    }
    return {handler};
  }

  // Submits "block" jobs until the engine refuses one for room; the jobs
  // accepted hold every pool descriptor (running or queued behind the
  // blocked workers) until the gate opens. The refusal is left in *refusal.
  std::vector<JobPtr> fill_pool(Error* refusal, std::size_t limit = 4096) {
    std::vector<JobPtr> held;
    EXPECT_TRUE(quiet()) << "earlier jobs still hold pool descriptors";
    for (std::size_t i = 0; i < limit; ++i) {
      Engine::SubmitResult r = submit(spec("block", "fill"));
      if (!r.ok()) {
        if (refusal != nullptr) *refusal = *r.error;
        return held;
      }
      held.push_back(r.value.job);
    }
    ADD_FAILURE() << "the pool never refused a job after " << limit;
    return held;
  }

  Control ctl_;
  Recorder done_;
  std::unique_ptr<plugin_host::Host> host_;
  std::unique_ptr<Pool> pool_;
  std::unique_ptr<Engine> engine_;
};

// The error has the code and its sentence contains words.
inline ::testing::AssertionResult is(const std::optional<Error>& e, ErrorCode code,
                                     const std::string& words) {
  if (!e) return ::testing::AssertionFailure() << "no error, want code " << int(code);
  if (e->code == code && e->message.find(words) != std::string::npos) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << "error " << int(e->code) << " '" << e->message
                                       << "', want " << int(code) << " with '" << words << "'";
}

}  // namespace tpool::engine::testing
