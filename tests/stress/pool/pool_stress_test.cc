// Stress of tpool::Pool (label stress): many external threads submit at once
// (single submits, batches, through registered submitter slots, waitable or
// not), tasks fan out nested children, random cancellation tokens fire
// mid-flight, and every task is accounted for exactly once. A second test
// races submitters against shutdown(cancel_pending). Under TSan the counts
// are scaled down; the seed is printed so a failure can be replayed.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "../../unit/pool/pool_test_support.h"
#include "tpool/pool.h"

#if defined(__SANITIZE_THREAD__)
#define TPOOL_STRESS_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define TPOOL_STRESS_TSAN 1
#endif
#endif
#ifndef TPOOL_STRESS_TSAN
#define TPOOL_STRESS_TSAN 0
#endif

namespace tpool::test {
namespace {

constexpr std::size_t kThreads = 6;
constexpr std::size_t kPerThread = TPOOL_STRESS_TSAN ? 1500 : 20000;
constexpr std::size_t kChildren = 2;  // each nested task spawns this many

struct Rec {
  std::atomic<int> ran{0};
  std::atomic<int> cancelled{0};
  std::atomic<bool> accepted{false};
  bool nested = false;
  Rec* children[kChildren] = {};
  WaitGroup* wg = nullptr;

  static void on_cancel(void* c) { static_cast<Rec*>(c)->cancelled.fetch_add(1); }
  static void run(void* c) {
    auto* r = static_cast<Rec*>(c);
    r->ran.fetch_add(1);
    if (!r->nested) return;
    SubmitOptions o;
    o.on_cancel = &Rec::on_cancel;
    o.wait_group = r->wg;
    o.backpressure = Backpressure::kReject;  // a worker never blocks on a full pool
    for (Rec* ch : r->children) {
      ch->accepted.store(true);  // before submit: the child may end first
      if (!this_task::pool()->submit({&Rec::run, ch}, o).ok()) ch->accepted.store(false);
    }
  }
};

// Per-thread records: kPerThread tasks, each with room for its children.
struct ThreadRecs {
  explicit ThreadRecs(std::size_t n) : n_(n), recs(new Rec[n * (1 + kChildren)]) {
    for (std::size_t i = 0; i < n; ++i) {
      for (std::size_t k = 0; k < kChildren; ++k)
        recs[i].children[k] = &recs[n + i * kChildren + k];
    }
  }
  std::size_t size() const { return n_ * (1 + kChildren); }
  std::size_t n_;
  std::unique_ptr<Rec[]> recs;
};

std::string check_exactly_once(const std::vector<std::unique_ptr<ThreadRecs>>& all) {
  for (std::size_t t = 0; t < all.size(); ++t) {
    for (std::size_t i = 0; i < all[t]->size(); ++i) {
      const Rec& r = all[t]->recs[i];
      const int n = r.ran.load() + r.cancelled.load();
      if (n != (r.accepted.load() ? 1 : 0)) {
        return "thread " + std::to_string(t) + " record " + std::to_string(i) + ": accepted " +
               std::to_string(r.accepted.load()) + ", ran " + std::to_string(r.ran.load()) +
               ", cancelled " + std::to_string(r.cancelled.load());
      }
    }
  }
  return "";
}

class PoolStress : public ::testing::TestWithParam<Variant> {};

TEST_P(PoolStress, ConcurrentSubmittersNestedAndCancelsExactlyOnce) {
  Config c = config_for(GetParam());
  c.min_threads = 1;  // the rest start on demand, concurrently with everything else
  if (c.blocking_workers > 0) c.min_threads = c.blocking_workers + 1;
  c.queue_capacity = 1 << 12;
  c.max_submitters = 2;
  std::unique_ptr<Pool> pool;
  TPOOL_CREATE_OR_SKIP(pool, c);
  const std::uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));

  std::vector<std::unique_ptr<ThreadRecs>> all;
  for (std::size_t t = 0; t < kThreads; ++t)
    all.push_back(std::make_unique<ThreadRecs>(kPerThread));
  std::vector<CancelToken> tokens(kThreads * 4);
  WaitGroup wg;
  std::atomic<bool> stats_stop{false};
  std::thread stats_reader([&] {
    while (!stats_stop.load()) (void)pool->stats();
  });
  std::vector<std::thread> threads;
  for (std::size_t t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(seed + t);
      std::optional<SubmitterSlot> slot;
      if (t < 2) {
        auto s = pool->register_submitter();
        ASSERT_TRUE(s.ok()) << s.status().to_string();
        slot.emplace(std::move(s.value()));
      }
      ThreadRecs& mine = *all[t];
      std::vector<TaskHandle> handles;
      std::size_t i = 0;
      while (i < kPerThread) {
        SubmitOptions o;
        o.on_cancel = &Rec::on_cancel;
        o.wait_group = &wg;
        if (rng() % 8 == 0) o.cancel = &tokens[t * 4 + rng() % 4];
        if (rng() % 16 == 0) o.lane = Lane::kBlocking;
        o.waitable = rng() % 8 == 0;
        if (rng() % 512 == 0) tokens[t * 4 + rng() % 4].cancel();
        if (rng() % 10 == 0 && i + 16 <= kPerThread) {  // a batch
          Task ts[16];
          TaskHandle hs[16];
          for (std::size_t k = 0; k < 16; ++k) {
            Rec& r = mine.recs[i + k];
            r.accepted.store(true);
            ts[k] = {&Rec::run, &r};
          }
          auto got = pool->submit_batch(ts, o, hs);
          ASSERT_TRUE(got.ok()) << got.status().to_string();
          ASSERT_EQ(got.value(), 16u);  // kBlock: all accepted
          if (o.waitable) handles.insert(handles.end(), hs, hs + 16);
          i += 16;
          continue;
        }
        Rec& r = mine.recs[i++];
        r.nested = rng() % 4 == 0;
        r.wg = &wg;
        r.accepted.store(true);
        auto h = pool->submit({&Rec::run, &r}, o);
        ASSERT_TRUE(h.ok()) << h.status().to_string();
        if (o.waitable) handles.push_back(h.value());
        // Wait for some as we go, to recycle their descriptors.
        if (handles.size() > 64) {
          for (TaskHandle x : handles) ASSERT_TRUE(pool->wait(x, kBound).ok());
          handles.clear();
        }
      }
      for (TaskHandle x : handles) ASSERT_TRUE(pool->wait(x, kBound).ok());
    });
  }
  for (auto& th : threads) th.join();
  ASSERT_TRUE(wg.wait(kBound)) << wg.pending() << " tasks never ended";
  ASSERT_TRUE(pool->shutdown(ShutdownMode::kDrain, kBound).ok());
  stats_stop.store(true);
  stats_reader.join();
  EXPECT_EQ(check_exactly_once(all), "");
  const PoolStats st = pool->stats();
  EXPECT_EQ(st.live_descriptors, 0u);
  EXPECT_EQ(st.submitted, st.completed + st.failed + st.cancelled);
  EXPECT_GT(st.cancelled, 0u);
}

// Submitters race shutdown(cancel_pending): whatever was accepted ends
// exactly once, and no descriptor stays live once the handles are waited.
TEST_P(PoolStress, SubmittersRacingShutdown) {
  Config c = config_for(GetParam());
  c.queue_capacity = 1 << 10;
  std::unique_ptr<Pool> pool;
  TPOOL_CREATE_OR_SKIP(pool, c);
  constexpr std::size_t kRounds = TPOOL_STRESS_TSAN ? 2 : 10;
  for (std::size_t round = 0; round < kRounds; ++round) {
    if (round > 0) {
      pool.reset();
      TPOOL_CREATE_OR_SKIP(pool, c);
    }
    std::vector<std::unique_ptr<ThreadRecs>> all;
    for (std::size_t t = 0; t < 4; ++t) all.push_back(std::make_unique<ThreadRecs>(kPerThread / 4));
    Counter started;
    std::vector<std::vector<TaskHandle>> handles(4);
    std::vector<std::thread> threads;
    for (std::size_t t = 0; t < 4; ++t) {
      threads.emplace_back([&, t] {
        ThreadRecs& mine = *all[t];
        started.add();
        for (std::size_t i = 0; i < mine.n_; ++i) {
          Rec& r = mine.recs[i];
          r.nested = i % 5 == 0;
          SubmitOptions o;
          o.on_cancel = &Rec::on_cancel;
          o.waitable = i % 3 == 0;
          o.backpressure = Backpressure::kReject;
          r.accepted.store(true);
          auto h = pool->submit({&Rec::run, &r}, o);
          if (!h.ok()) {
            r.accepted.store(false);
            if (h.status().code() == StatusCode::kShutdown) break;
            ASSERT_EQ(h.status().code(), StatusCode::kFull) << h.status().to_string();
            continue;
          }
          if (o.waitable) handles[t].push_back(h.value());
        }
      });
    }
    ASSERT_TRUE(started.wait_at_least(4));
    const Status s = pool->shutdown(ShutdownMode::kCancelPending, kBound);
    for (auto& th : threads) th.join();
    ASSERT_TRUE(s.ok()) << s.to_string();
    for (auto& hs : handles) {
      for (TaskHandle h : hs) {
        auto w = pool->wait(h, kBound);
        ASSERT_TRUE(w.ok()) << w.status().to_string();
      }
    }
    EXPECT_EQ(check_exactly_once(all), "") << "round " << round;
    const PoolStats st = pool->stats();
    EXPECT_EQ(st.live_descriptors, 0u) << "round " << round;
    EXPECT_EQ(st.submitted, st.completed + st.failed + st.cancelled) << "round " << round;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Variants, PoolStress,
    ::testing::Values(Variant{SchedulerVariant::kGlobalQueue, QueueKind::kRing, 4},
                      Variant{SchedulerVariant::kWorkStealing, QueueKind::kRing, 4},
                      Variant{SchedulerVariant::kWorkStealing, QueueKind::kChaseLev, 4},
                      Variant{SchedulerVariant::kLaneExtension, QueueKind::kRing, 4}),
    [](const ::testing::TestParamInfo<Variant>& i) { return variant_name(i.param); });

}  // namespace
}  // namespace tpool::test
