// Fuzz harness of tpool::Pool: from a seed, a random pool configuration and a
// random sequence of 32..256 operations (submit, batch, nested submit with
// help_wait joins, try_submit under a full pool, held tasks, cancel, wait,
// detach, register/release a submitter, lanes, overflow spawn and retire via
// manual watchdog ticks on a test clock), ended by shutdown(drain) or
// shutdown(cancel_pending) with a 5 s timeout that must be met.
//
// Invariants checked after every sequence:
//   - every accepted task ran or was cancelled exactly once, and a task that
//     was refused never ran (per-task counters);
//   - wait() reports what the task's counters say (cancelled vs ran);
//   - shutdown returns Ok within its 5 s timeout;
//   - live descriptors == the handles still unwaited, then 0 after waiting;
//   - submitted == completed + failed + cancelled.
//
// ctest runs a fixed list of seed families (one entry each, 3 s each unless
// TPOOL_FUZZ_SECONDS says otherwise; `make fuzz` runs longer); TPOOL_FUZZ_SEED=<n>
// replays one seed, and the failure message always names the seed.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "../../unit/pool/pool_test_support.h"
#include "tpool/pool.h"

namespace tpool::test {
namespace {

constexpr std::chrono::seconds kShutdownBound{5};

enum class Kind : std::uint8_t { kPlain, kThrow, kHeld, kNested, kJoin };

struct Fuzz;

struct Rec {
  Fuzz* fz = nullptr;
  Kind kind = Kind::kPlain;
  Event* gate = nullptr;       // kHeld
  std::vector<Rec*> children;  // kNested, kJoin: records made up front
  std::atomic<int> ran{0};
  std::atomic<int> cancelled{0};
  std::atomic<bool> accepted{false};
  bool waitable = false;
  bool waited = false;
  bool detached = false;
  TaskHandle handle;
};

struct Fuzz {
  std::deque<Rec> recs;
  std::deque<Event> gates;
  std::deque<CancelToken> tokens;
  std::atomic<int> join_failures{0};

  std::size_t make(Kind k) {
    recs.emplace_back();
    recs.back().fz = this;
    recs.back().kind = k;
    return recs.size() - 1;
  }

  static void on_cancel(void* c) { static_cast<Rec*>(c)->cancelled.fetch_add(1); }
  static void run(void* c) {
    auto* r = static_cast<Rec*>(c);
    r->ran.fetch_add(1);
    switch (r->kind) {
      case Kind::kPlain:
        return;
      case Kind::kThrow:
        throw std::runtime_error("fuzz task throws");
      case Kind::kHeld:
        r->gate->wait();
        return;
      case Kind::kNested:
      case Kind::kJoin: {
        WaitGroup wg;
        SubmitOptions o;
        o.backpressure = Backpressure::kReject;  // never block a worker on a full pool
        o.on_cancel = &Fuzz::on_cancel;
        if (r->kind == Kind::kJoin) o.wait_group = &wg;
        for (Rec* child : r->children) {
          Rec& ch = *child;
          // Marked first: the child may end before submit() returns.
          ch.accepted.store(true);
          if (!this_task::pool()->submit({&Fuzz::run, &ch}, o).ok()) ch.accepted.store(false);
        }
        if (r->kind == Kind::kJoin && !this_task::pool()->help_wait(wg, kBound)) {
          r->fz->join_failures.fetch_add(1);
        }
        return;
      }
    }
  }
};

Config random_config(std::mt19937_64& rng, TestClock& clock, std::ostringstream& log) {
  auto pick = [&](std::uint64_t n) { return static_cast<std::size_t>(rng() % n); };
  Config c;
#if defined(TPOOL_PINNED_VARIANT_GLOBAL_QUEUE)
  c.scheduler_variant = SchedulerVariant::kGlobalQueue;
  (void)pick(3);
#elif defined(TPOOL_PINNED_VARIANT_WORK_STEALING)
  c.scheduler_variant = SchedulerVariant::kWorkStealing;
  (void)pick(3);
#elif defined(TPOOL_PINNED_VARIANT_LANE_EXTENSION)
  c.scheduler_variant = SchedulerVariant::kLaneExtension;
  (void)pick(3);
#else
  c.scheduler_variant = static_cast<SchedulerVariant>(pick(3));
#endif
  c.queue_kind = pick(2) ? QueueKind::kChaseLev : QueueKind::kRing;
  c.max_threads = 1 + pick(4);
  c.min_threads = 1 + pick(c.max_threads);
  const std::size_t caps[] = {8, 16, 64, 1024};
  c.queue_capacity = caps[pick(4)];
  const std::size_t locals[] = {2, 4, 16, 256};
  c.local_queue_capacity = locals[pick(4)];
  c.steal_batch_size = 1 + pick(c.local_queue_capacity / 2);
  c.inject_batch_size = 1 + pick(32);
  const std::size_t coalesce[] = {1, 2, 8};
  c.wake_coalesce_batch = coalesce[pick(3)];
  c.max_submitters = 2;
  if (c.scheduler_variant == SchedulerVariant::kLaneExtension && c.max_threads > 1) {
    c.blocking_workers = 1;
    c.cpu_helps_blocking = pick(2) == 1;
  }
  c.max_overflow_workers = pick(3);
  if (c.max_overflow_workers > 0) {
    c.watchdog_interval = std::chrono::milliseconds(1);
    c.blocking_promotion_timeout = std::chrono::milliseconds(100);
    c.watchdog_driver = WatchdogDriver::kManual;
    c.clock = &clock;
  }
  // The owner's LIFO stack: the seed's slot, the smallest stack, a deep one.
  const std::size_t lifos[] = {1, 2, 32};
  c.lifo_capacity = lifos[pick(3)];
  c.searching_gate = pick(2) == 1;
  c.name = "fz";
  log << "config: " << to_string(c.scheduler_variant) << " " << to_string(c.queue_kind)
      << " threads " << c.min_threads << ".." << c.max_threads << " cap " << c.queue_capacity
      << " local " << c.local_queue_capacity << " steal " << c.steal_batch_size << " inject "
      << c.inject_batch_size << " coalesce " << c.wake_coalesce_batch << " blocking "
      << c.blocking_workers << (c.cpu_helps_blocking ? "+help" : "") << " overflow "
      << c.max_overflow_workers << " lifo " << c.lifo_capacity << (c.searching_gate ? " gate" : "")
      << "\n";
  return c;
}

// One sequence; returns "" or what went wrong (with the op log).
std::string run_sequence(std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto pick = [&](std::uint64_t n) { return static_cast<std::size_t>(rng() % n); };
  std::ostringstream log;
  log << "seed " << seed << "\n";
  TestClock clock;
  const Config cfg = random_config(rng, clock, log);
  auto created = Pool::create(cfg);
  if (!created.ok()) return log.str() + "create: " + created.status().to_string();
  // The records outlive the pool: on every return, early ones included, the
  // gates open and the pool (its workers joined) goes before the records.
  Fuzz fz;
  std::unique_ptr<Pool> pool = std::move(created.value());
  struct Teardown {
    Fuzz& fz;
    std::unique_ptr<Pool>& pool;
    ~Teardown() {
      for (Event& g : fz.gates) g.open();
      pool.reset();
    }
  } teardown{fz, pool};
  fz.gates.emplace_back();
  for (int i = 0; i < 4; ++i) fz.tokens.emplace_back();

  auto options = [&](Rec& r) {
    SubmitOptions o;
    o.on_cancel = &Fuzz::on_cancel;
    o.lane = pick(4) == 0 ? Lane::kBlocking : Lane::kDefault;
    if (pick(4) == 0) o.cancel = &fz.tokens[pick(fz.tokens.size())];
    // Held tasks are never waited on with an unbounded wait, so any may be waitable.
    r.waitable = pick(3) == 0;
    o.waitable = r.waitable;
    if (pick(2) == 0) {
      o.backpressure = Backpressure::kReject;
    } else {
      o.backpressure = Backpressure::kBlock;
      o.block_timeout = std::chrono::microseconds(pick(200));
    }
    return o;
  };
  auto new_task = [&]() -> std::size_t {
    const std::size_t k = pick(10);
    if (k < 5) return fz.make(Kind::kPlain);
    if (k == 5) return fz.make(Kind::kThrow);
    if (k == 6) {
      const std::size_t i = fz.make(Kind::kHeld);
      fz.recs[i].gate = &fz.gates.back();
      return i;
    }
    const std::size_t i = fz.make(k < 9 ? Kind::kNested : Kind::kJoin);
    const std::size_t n = 1 + pick(4);
    for (std::size_t c = 0; c < n; ++c) {
      const std::size_t ch = fz.make(pick(5) == 0 ? Kind::kThrow : Kind::kPlain);
      fz.recs[i].children.push_back(&fz.recs[ch]);
    }
    return i;
  };
  auto submit_one = [&](bool try_only) {
    Rec& r = fz.recs[new_task()];
    const SubmitOptions o = options(r);
    r.accepted.store(true);
    auto h = try_only ? pool->try_submit({&Fuzz::run, &r}, o) : pool->submit({&Fuzz::run, &r}, o);
    if (!h.ok()) {
      r.accepted.store(false);
      r.waitable = false;
      const StatusCode c = h.status().code();
      if (c != StatusCode::kFull && c != StatusCode::kTimeout) {
        log << "unexpected submit error " << h.status().to_string() << "\n";
        return false;
      }
    } else if (r.waitable) {
      r.handle = h.value();
    }
    return true;
  };

  const std::size_t ops = 32 + pick(225);
  log << ops << " ops:";
  for (std::size_t op = 0; op < ops; ++op) {
    const std::size_t what = pick(15);
    log << " " << what;
    switch (what) {
      case 0:
      case 1:
      case 2:
        if (!submit_one(false)) return log.str();
        break;
      case 3:
        if (!submit_one(true)) return log.str();
        break;
      case 4: {  // a batch: a prefix is accepted
        const std::size_t n = 1 + pick(16);
        std::vector<std::size_t> ids;
        std::vector<Task> tasks;
        for (std::size_t i = 0; i < n; ++i) ids.push_back(new_task());
        Rec& first = fz.recs[ids[0]];
        const SubmitOptions o = options(first);
        std::vector<TaskHandle> hs(n);
        for (std::size_t id : ids) {
          fz.recs[id].accepted.store(true);
          fz.recs[id].waitable = o.waitable;
          tasks.push_back({&Fuzz::run, &fz.recs[id]});
        }
        auto r = pool->submit_batch(tasks, o, hs);
        const std::size_t got = r.ok() ? r.value() : 0;
        for (std::size_t i = 0; i < n; ++i) {
          Rec& x = fz.recs[ids[i]];
          if (i >= got) {
            x.accepted.store(false);
            x.waitable = false;
          } else if (x.waitable) {
            x.handle = hs[i];
          }
        }
        break;
      }
      case 5:  // fill the pool with try_submit until Full
        for (int i = 0; i < 64; ++i) {
          Rec& r = fz.recs[fz.make(Kind::kPlain)];
          SubmitOptions o;
          o.on_cancel = &Fuzz::on_cancel;
          r.accepted.store(true);
          auto h = pool->try_submit({&Fuzz::run, &r}, o);
          if (!h.ok()) {
            r.accepted.store(false);
            if (h.status().code() != StatusCode::kFull) return log.str() + " try_submit error";
            break;
          }
        }
        break;
      case 6:
        fz.tokens[pick(fz.tokens.size())].cancel();
        break;
      case 7:
      case 8: {  // wait or detach a random waitable task
        std::vector<std::size_t> open;
        for (std::size_t i = 0; i < fz.recs.size(); ++i) {
          const Rec& r = fz.recs[i];
          if (r.waitable && r.accepted.load() && !r.waited && !r.detached) open.push_back(i);
        }
        if (open.empty()) break;
        Rec& r = fz.recs[open[pick(open.size())]];
        if (what == 8) {
          pool->detach(r.handle);
          r.detached = true;
          break;
        }
        auto w = pool->wait(r.handle, std::chrono::microseconds(pick(500)));
        if (w.ok()) {
          r.waited = true;
        } else if (w.status().code() != StatusCode::kTimeout) {
          return log.str() + " wait: " + w.status().to_string();
        }
        break;
      }
      case 9: {  // a registered submitter on its own thread, released with leftovers
        const std::size_t n = 1 + pick(8);
        std::vector<std::size_t> ids;
        for (std::size_t i = 0; i < n; ++i) ids.push_back(fz.make(Kind::kPlain));
        std::string err;
        std::thread t([&] {
          auto slot = pool->register_submitter();
          if (!slot.ok() && slot.status().code() != StatusCode::kFull) {
            err = slot.status().to_string();
            return;
          }
          SubmitOptions o;
          o.on_cancel = &Fuzz::on_cancel;
          o.backpressure = Backpressure::kReject;
          for (std::size_t id : ids) {
            fz.recs[id].accepted.store(true);
            if (!pool->submit({&Fuzz::run, &fz.recs[id]}, o).ok())
              fz.recs[id].accepted.store(false);
          }
        });
        t.join();
        if (!err.empty()) return log.str() + " register_submitter: " + err;
        break;
      }
      case 10:  // release the held tasks
        fz.gates.back().open();
        fz.gates.emplace_back();
        break;
      case 11:  // the watchdog: time passes, one tick
        clock.advance(std::chrono::milliseconds(pick(2) ? 150 : 1));
        pool->watchdog_tick();
        break;
      case 12:
        pool->watchdog_tick();
        break;
      case 13: {
        const PoolStats st = pool->stats();
        if (st.overflow_active > cfg.max_overflow_workers) return log.str() + " overflow over max";
        break;
      }
      default:
        if (!submit_one(false)) return log.str();
        break;
    }
  }

  const ShutdownMode mode = pick(2) ? ShutdownMode::kDrain : ShutdownMode::kCancelPending;
  const bool open_first = pick(2) == 0;
  log << "\nshutdown " << (mode == ShutdownMode::kDrain ? "drain" : "cancel_pending")
      << (open_first ? " after opening the gates" : " then open the gates") << "\n";
  if (open_first) fz.gates.back().open();
  Status shut;
  std::thread closer([&] { shut = pool->shutdown(mode, kShutdownBound); });
  fz.gates.back().open();
  closer.join();
  if (!shut.ok()) return log.str() + "shutdown: " + shut.to_string();

  std::ostringstream bad;
  std::uint64_t unwaited = 0;
  for (const Rec& r : fz.recs) {
    if (r.waitable && r.accepted.load() && !r.waited && !r.detached) ++unwaited;
  }
  const PoolStats st = pool->stats();
  if (st.live_descriptors != unwaited) {
    bad << "live_descriptors " << st.live_descriptors << " after shutdown, " << unwaited
        << " handles unwaited\n";
  }
  for (std::size_t i = 0; i < fz.recs.size(); ++i) {
    Rec& r = fz.recs[i];
    const int ran = r.ran.load();
    const int can = r.cancelled.load();
    if (r.accepted.load() ? ran + can != 1 : ran + can != 0) {
      bad << "task " << i << " (kind " << static_cast<int>(r.kind) << ", accepted "
          << r.accepted.load() << ") ran " << ran << " and was cancelled " << can << " times\n";
    }
    if (r.waitable && r.accepted.load() && !r.waited && !r.detached) {
      auto w = pool->wait(r.handle, kBound);
      if (!w.ok()) {
        bad << "task " << i << ": wait after shutdown: " << w.status().to_string() << "\n";
      } else if ((w.value() == TaskOutcome::kCancelled) != (can == 1)) {
        bad << "task " << i << ": wait says " << to_string(w.value()) << ", counters say ran "
            << ran << " cancelled " << can << "\n";
      }
    }
  }
  const PoolStats end = pool->stats();
  if (end.live_descriptors != 0)
    bad << "live_descriptors " << end.live_descriptors << " at the end\n";
  if (end.submitted != end.completed + end.failed + end.cancelled) {
    bad << "submitted " << end.submitted << " != completed " << end.completed << " + failed "
        << end.failed << " + cancelled " << end.cancelled << "\n";
  }
  if (end.overflow_active != 0) bad << "overflow workers alive after shutdown\n";
  if (fz.join_failures.load() != 0)
    bad << fz.join_failures.load() << " help_wait joins timed out\n";
  pool.reset();
  if (!bad.str().empty()) return log.str() + bad.str();
  return "";
}

class PoolFuzz : public ::testing::TestWithParam<std::uint64_t> {};

// Seconds each seed family runs: TPOOL_FUZZ_SECONDS, else 3 (make test;
// `make fuzz` passes a longer budget). A family runs the sequences
// family * 1000 + 0, 1, 2, ... until its budget is spent (at least 3, at most
// 1000, so families never share a seed); the seeds are deterministic, only
// how many run depends on the machine.
double fuzz_budget_seconds() {
  const char* s = std::getenv("TPOOL_FUZZ_SECONDS");
  if (s == nullptr || *s == '\0') return 3.0;
  char* end = nullptr;
  const double v = std::strtod(s, &end);
  if (end == s || *end != '\0' || !(v > 0)) {
    ADD_FAILURE() << "TPOOL_FUZZ_SECONDS='" << s
                  << "' is not a positive number of seconds; e.g. TPOOL_FUZZ_SECONDS=60";
    return 3.0;
  }
  return v;
}

TEST_P(PoolFuzz, EveryAcceptedTaskEndsExactlyOnce) {
  constexpr int kMinIterations = 3;
  constexpr int kMaxIterations = 1000;
  const auto budget = std::chrono::duration<double>(fuzz_budget_seconds());
  const auto t0 = std::chrono::steady_clock::now();
  int it = 0;
  for (; it < kMaxIterations; ++it) {
    if (it >= kMinIterations && std::chrono::steady_clock::now() - t0 >= budget) break;
    const std::uint64_t seed = GetParam() * 1000 + static_cast<std::uint64_t>(it);
    const std::string err = run_sequence(seed);
    ASSERT_EQ(err, "") << "replay with TPOOL_FUZZ_SEED=" << seed;
  }
  std::printf("seed family %llu: %d sequences in %.1f s\n",
              static_cast<unsigned long long>(GetParam()), it,
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

TEST(PoolFuzzReplay, FromEnvironment) {
  const char* s = std::getenv("TPOOL_FUZZ_SEED");
  if (s == nullptr) GTEST_SKIP() << "set TPOOL_FUZZ_SEED=<n> to replay one sequence";
  const std::uint64_t seed = std::strtoull(s, nullptr, 10);
  EXPECT_EQ(run_sequence(seed), "");
}

// The fixed seed list ctest runs (one ctest entry each).
INSTANTIATE_TEST_SUITE_P(Seeds, PoolFuzz, ::testing::Range<std::uint64_t>(1, 21),
                         [](const ::testing::TestParamInfo<std::uint64_t>& i) {
                           return "seed" + std::to_string(i.param);
                         });

}  // namespace
}  // namespace tpool::test
