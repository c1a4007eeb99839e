// tpool through its public API for the scenarios (scenarios.h): submit_batch
// with a WaitGroup from outside, nested submits from tasks (they go to the
// worker's LIFO slot and local queue), a registered submitter slot per
// contended external thread, and optionally the blocking lane for slow tasks.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "scenarios.h"
#include "tpool/pool.h"

namespace bench {

struct TpoolSetup {
  tpool::SchedulerVariant variant = tpool::SchedulerVariant::kWorkStealing;
  tpool::QueueKind kind = tpool::QueueKind::kRing;
  bool slow_on_blocking_lane = false;  // lane_extension with blocking_workers = 1
  std::size_t queue_capacity = tpool::Config{}.queue_capacity;
  std::size_t lifo_capacity = tpool::Config{}.lifo_capacity;
  bool searching_gate = tpool::Config{}.searching_gate;
};

class TpoolRunner {
 public:
  TpoolRunner(const TpoolSetup& s, int workers) : slow_lane_(s.slow_on_blocking_lane) {
    tpool::Config c;
    c.min_threads = static_cast<std::size_t>(workers);
    c.max_threads = static_cast<std::size_t>(workers);
    c.scheduler_variant = s.variant;
    c.queue_kind = s.kind;
    c.queue_capacity = s.queue_capacity;
    c.lifo_capacity = s.lifo_capacity;
    c.searching_gate = s.searching_gate;
    if (s.slow_on_blocking_lane) c.blocking_workers = 1;
    c.name = "bench";
    auto p = tpool::Pool::create(c);
    if (!p.ok()) {
      std::fprintf(stderr, "bench: tpool::Pool::create failed: %s\n",
                   std::string(p.status().message()).c_str());
      std::exit(2);
    }
    pool_ = std::move(p).value();
    opts_.wait_group = &wg_;
    slow_opts_ = opts_;
    if (slow_lane_) slow_opts_.lane = tpool::Lane::kBlocking;
  }

  void begin(std::int64_t) {}
  void submit(Task t) { check(pool_->submit(t, opts_).ok()); }
  void submit_batch(std::span<const Task> ts) {
    while (!ts.empty()) {  // a blocking submit_batch may accept a prefix
      auto r = pool_->submit_batch(ts, opts_);
      check(r.ok());
      ts = ts.subspan(r.value());
    }
  }
  void submit_nested(Task t) { check(pool_->submit(t, opts_).ok()); }
  void submit_slow(Task t) { check(pool_->submit(t, slow_opts_).ok()); }
  // plain: the thread submits without a slot, through the inject ring (what a
  // gRPC thread does in tpoold).
  std::optional<tpool::SubmitterSlot> enter_submitter(int, bool plain) {
    if (plain) return std::nullopt;
    auto s = pool_->register_submitter();
    if (!s.ok()) return std::nullopt;  // more threads than max_submitters: plain submit
    return std::optional<tpool::SubmitterSlot>(std::move(s).value());
  }
  void wait() { wg_.wait(); }
  tpool::Pool& pool() { return *pool_; }

 private:
  static void check(bool ok) {
    if (!ok) {
      std::fprintf(stderr, "bench: a tpool submit failed\n");
      std::exit(2);
    }
  }
  bool slow_lane_;
  std::unique_ptr<tpool::Pool> pool_;
  tpool::WaitGroup wg_;
  tpool::SubmitOptions opts_;
  tpool::SubmitOptions slow_opts_;
};

}  // namespace bench
