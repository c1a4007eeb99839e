// The peers through their best public APIs for the scenarios (scenarios.h).
//
// oneTBB task_group: run() from any thread, wait() joins (the waiting thread
// runs tasks). With global_control(max_allowed_parallelism, 2) TBB has one
// worker thread and the thread in wait() is the second: two running threads,
// as for the other pools. No batch API: submit_batch is a loop of run().
// Contended submitters each get their own task_group (run() on a group from
// many threads at once is not promised by the spec).
//
// Boost.Asio thread_pool and rvaser thread_pool have no task groups: a task
// ends by decrementing a countdown the caller waits on (C++20 atomic wait),
// one extra atomic RMW per task that their APIs leave to the user.
#pragma once

#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>

#include <atomic>
#include <cstdint>
#include <deque>
#include <span>
#include <thread_pool/thread_pool.hpp>

#include <tbb/task_group.h>

#include "scenarios.h"

namespace bench {

struct NoToken {};

class TbbRunner {
 public:
  explicit TbbRunner(int) {}
  void begin(std::int64_t) {}
  void submit(Task t) {
    tbb::task_group& g = tls_group != nullptr ? *tls_group : main_;
    g.run([t] { t.fn(t.ctx); });
  }
  void submit_batch(std::span<const Task> ts) {
    for (const Task& t : ts) main_.run([t] { t.fn(t.ctx); });
  }
  void submit_nested(Task t) {
    main_.run([t] { t.fn(t.ctx); });
  }
  void submit_slow(Task t) { submit(t); }
  // Each contended thread runs into its own group, waited for in wait(); TBB
  // has no other way for an external thread, so `plain` changes nothing.
  struct Token {
    explicit Token(tbb::task_group* g) { tls_group = g; }
    Token(const Token&) = delete;
    Token& operator=(const Token&) = delete;
    ~Token() { tls_group = nullptr; }
  };
  Token enter_submitter(int i, bool /*plain*/) {
    return Token(&groups_[static_cast<std::size_t>(i)]);
  }
  void wait() {
    main_.wait();
    for (auto& g : groups_) g.wait();
  }

 private:
  static inline thread_local tbb::task_group* tls_group = nullptr;
  tbb::task_group main_;
  std::deque<tbb::task_group> groups_ = std::deque<tbb::task_group>(kContendedThreads);
};

// A countdown the pools without task groups use to say "all done".
class Countdown {
 public:
  void reset(std::int64_t n) { left_.store(n, std::memory_order_relaxed); }
  void done() {
    // acq_rel: the last decrement sees every task's writes (release from each)
    // and publishes them to the waiter's acquire load below.
    if (left_.fetch_sub(1, std::memory_order_acq_rel) == 1) left_.notify_all();
  }
  void wait() {
    for (std::int64_t v = left_.load(std::memory_order_acquire); v != 0;
         v = left_.load(std::memory_order_acquire)) {
      left_.wait(v, std::memory_order_acquire);
    }
  }

 private:
  std::atomic<std::int64_t> left_{0};
};

class AsioRunner {
 public:
  explicit AsioRunner(int workers) : pool_(static_cast<std::size_t>(workers)) {}
  ~AsioRunner() { pool_.join(); }
  void begin(std::int64_t n) { left_.reset(n); }
  void submit(Task t) {
    boost::asio::post(pool_, [this, t] {
      t.fn(t.ctx);
      left_.done();
    });
  }
  void submit_batch(std::span<const Task> ts) {
    for (const Task& t : ts) submit(t);
  }
  void submit_nested(Task t) { submit(t); }
  void submit_slow(Task t) { submit(t); }
  NoToken enter_submitter(int, bool) { return {}; }
  void wait() { left_.wait(); }

 private:
  boost::asio::thread_pool pool_;
  Countdown left_;
};

class RvaserRunner {
 public:
  explicit RvaserRunner(int workers) : pool_(static_cast<std::size_t>(workers)) {}
  void begin(std::int64_t n) { left_.reset(n); }
  void submit(Task t) {
    // The future is dropped: a packaged_task's future does not block on destruction.
    pool_.Submit([this, t] {
      t.fn(t.ctx);
      left_.done();
    });
  }
  void submit_batch(std::span<const Task> ts) {
    for (const Task& t : ts) submit(t);
  }
  void submit_nested(Task t) { submit(t); }
  void submit_slow(Task t) { submit(t); }
  NoToken enter_submitter(int, bool) { return {}; }
  void wait() { left_.wait(); }

 private:
  thread_pool::ThreadPool pool_;
  Countdown left_;
};

}  // namespace bench
