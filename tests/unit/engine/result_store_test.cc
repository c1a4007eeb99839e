// The result store (result_store.h: S1-S4, M1-M3): InMemoryResultStore
// through its own API with explicit times, and the engine's use of it
// (retention by time, bytes and count; A6's put-before-submit and
// remove-on-refusal) with an injected clock and an injected store.
#include <cstdio>
#include <functional>

#include "engine_test_support.h"

namespace tpool::engine::testing {
namespace {

using TimePoint = ResultStore::TimePoint;

class EngineResultStore : public EngineBench {
 protected:
  void SetUp() override { start(); }

  // A Job that never runs, for the store alone (its engine is only named).
  JobPtr job(std::uint64_t seq, std::string key = {}) {
    JobSpec s = spec("echo", "payload");
    s.idempotency_key = std::move(key);
    return JobPtr::make(engine(), JobId::make(engine().incarnation(), seq), std::move(s),
                        host_->find("echo"), Lane::kDefault, nullptr);
  }
  static TimePoint at(int ms) { return TimePoint(std::chrono::milliseconds(1000000 + ms)); }
};

TEST_F(EngineResultStore, PutGetFindKeyAndRemove) {
  InMemoryResultStore st(RetentionBounds{1000ms, 1 << 20, 100});
  auto a = job(1, "ka");
  auto b = job(2);
  st.put(a);
  st.put(b);
  EXPECT_EQ(st.get(a->id()), a);
  EXPECT_EQ(st.get(b->id()), b);
  EXPECT_EQ(st.find_key("ka"), a);
  EXPECT_EQ(st.find_key("kb"), nullptr);
  EXPECT_EQ(st.find_key(""), nullptr);  // an unkeyed job holds no key
  EXPECT_EQ(st.stats().entries, 2u);
  EXPECT_EQ(st.stats().bytes, 0u);  // only ended jobs count bytes
  st.remove(*a);
  EXPECT_EQ(st.get(a->id()), nullptr);
  EXPECT_EQ(st.find_key("ka"), nullptr);  // forgotten with its job
  EXPECT_EQ(st.stats().entries, 1u);
  EXPECT_EQ(st.stats().expired, 0u);  // a removal is not an expiry
  st.remove(*a);                      // no-op for an unknown id
  auto c = job(3, "ka");              // the key is free again
  st.put(c);
  EXPECT_EQ(st.find_key("ka"), c);
}

TEST_F(EngineResultStore, AJobIsKeptUntilItEndsWhateverTheBounds) {
  // S4: bounds of zero, and a time far in the future: a job that has not
  // ended is never evicted.
  InMemoryResultStore st(RetentionBounds{0ms, 0, 0});
  auto a = job(1, "k");
  st.put(a);
  st.expire(at(1000000));
  EXPECT_EQ(st.get(a->id()), a);
  EXPECT_EQ(st.find_key("k"), a);
  // Its end starts its retention; with bounds of zero it goes at once.
  st.ended(*a, at(0));
  EXPECT_EQ(st.get(a->id()), nullptr);
  EXPECT_EQ(st.find_key("k"), nullptr);
  EXPECT_EQ(st.stats().expired, 1u);
  EXPECT_EQ(st.stats().entries, 0u);
  EXPECT_EQ(st.stats().bytes, 0u);
}

TEST_F(EngineResultStore, RetentionByTimeStartsAtTheEnd) {
  InMemoryResultStore st(RetentionBounds{1000ms, 1 << 20, 100});
  auto a = job(1, "ka");
  auto b = job(2, "kb");
  st.put(a);
  st.put(b);
  st.ended(*a, at(0));
  st.ended(*b, at(500));
  EXPECT_EQ(st.stats().bytes, a->retained_bytes() + b->retained_bytes());
  st.expire(at(1000));  // exactly the retention: kept
  EXPECT_EQ(st.get(a->id()), a);
  st.expire(at(1001));  // past it: a goes, with its key; b stays
  EXPECT_EQ(st.get(a->id()), nullptr);
  EXPECT_EQ(st.find_key("ka"), nullptr);
  EXPECT_EQ(st.get(b->id()), b);
  EXPECT_EQ(st.find_key("kb"), b);
  EXPECT_EQ(st.stats().expired, 1u);
  EXPECT_EQ(st.stats().entries, 1u);
  EXPECT_EQ(st.stats().bytes, b->retained_bytes());
  st.expire(at(1501));
  EXPECT_EQ(st.get(b->id()), nullptr);
  EXPECT_EQ(st.stats().expired, 2u);
  EXPECT_EQ(st.stats().bytes, 0u);
}

TEST_F(EngineResultStore, RetentionByCountEvictsTheOldestEndedFirst) {
  InMemoryResultStore st(RetentionBounds{1000000ms, 1 << 20, 2});
  auto a = job(1), b = job(2), c = job(3), live = job(4);
  st.put(a);
  st.put(b);
  st.put(c);
  st.put(live);  // never ends: does not count against the bound
  // They end in the order c, a, b: c is the oldest ended, though put last.
  st.ended(*c, at(0));
  st.ended(*a, at(1));
  EXPECT_EQ(st.stats().entries, 4u);
  st.ended(*b, at(2));
  EXPECT_EQ(st.get(c->id()), nullptr);
  EXPECT_EQ(st.get(a->id()), a);
  EXPECT_EQ(st.get(b->id()), b);
  EXPECT_EQ(st.get(live->id()), live);
  EXPECT_EQ(st.stats().expired, 1u);
  EXPECT_EQ(st.stats().entries, 3u);
}

TEST_F(EngineResultStore, RetentionByBytesEvictsTheOldestEndedFirst) {
  auto a = job(1, std::string(100, 'a'));
  auto b = job(2, std::string(100, 'b'));
  auto c = job(3, std::string(100, 'c'));
  const std::size_t each = a->retained_bytes();
  ASSERT_EQ(each, b->retained_bytes());
  InMemoryResultStore st(RetentionBounds{1000000ms, 2 * each, 100});
  st.put(a);
  st.put(b);
  st.put(c);
  st.ended(*a, at(0));
  st.ended(*b, at(1));
  EXPECT_EQ(st.stats().bytes, 2 * each);  // at the bound: kept
  EXPECT_EQ(st.stats().expired, 0u);
  st.ended(*c, at(2));
  EXPECT_EQ(st.get(a->id()), nullptr);
  EXPECT_EQ(st.find_key(std::string(100, 'a')), nullptr);
  EXPECT_EQ(st.get(b->id()), b);
  EXPECT_EQ(st.get(c->id()), c);
  EXPECT_EQ(st.stats().bytes, 2 * each);
  EXPECT_EQ(st.stats().expired, 1u);
}

TEST_F(EngineResultStore, EndedOfAJobNotStoredIsANoOp) {
  InMemoryResultStore st(RetentionBounds{1000ms, 1 << 20, 100});
  auto a = job(1);
  st.ended(*a, at(0));
  EXPECT_EQ(st.stats().bytes, 0u);
  EXPECT_EQ(st.stats().entries, 0u);
  // Removed before it ended (a job the pool refused): its end is ignored too.
  auto b = job(2, "kb");
  st.put(b);
  st.remove(*b);
  st.ended(*b, at(0));
  EXPECT_EQ(st.stats().bytes, 0u);
  EXPECT_EQ(st.stats().expired, 0u);
}

TEST_F(EngineResultStore, ConcurrentUseKeepsTheFiguresConsistent) {
  // S1: every method from any thread. Four threads each put, end and look
  // up their own jobs; the count bound keeps at most 50 ended.
  InMemoryResultStore st(RetentionBounds{1000000ms, 1u << 30, 50});
  constexpr int kThreads = 4, kEach = 200;
  std::vector<std::vector<JobPtr>> jobs(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    for (int i = 0; i < kEach; ++i) {
      char key[16];
      std::snprintf(key, sizeof key, "k%06d", t * kEach + i);  // one length: equal bytes
      jobs[t].push_back(job(1 + t * kEach + i, key));
    }
  }
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; ++t) {
    ts.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) {
        auto& j = jobs[t][i];
        st.put(j);
        EXPECT_EQ(st.get(j->id()), j);
        st.ended(*j, at(i));
        (void)st.find_key(j->idempotency_key());
        (void)st.stats();
      }
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_EQ(st.stats().entries, 50u);
  EXPECT_EQ(st.stats().expired, static_cast<std::uint64_t>(kThreads * kEach - 50));
  EXPECT_EQ(st.stats().bytes, 50 * jobs[0][0]->retained_bytes());
}

// ---- the engine's use of the store ----

class EngineRetention : public EngineBench {};

TEST_F(EngineRetention, OnlyRetainedJobsAreFindable) {
  start();
  JobSpec r = spec("echo", "kept");
  r.retain = true;
  auto kept = finish(r);
  auto dropped = finish(spec("echo", "not kept"));
  Expected<JobPtr> f = engine().find(kept.id);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f.value->output(), "kept");
  EXPECT_EQ(f.value->state(), JobState::kSucceeded);
  EXPECT_TRUE(is(engine().find(dropped.id).error, ErrorCode::kNotFound,
                 "is unknown or its result has expired (results.retention_ms)"));
  EXPECT_EQ(engine().snapshot().retained_entries, 1u);
  EXPECT_EQ(engine().snapshot().rejected_not_found, 0u);  // a lookup is not a rejection
}

TEST_F(EngineRetention, AnIdOfAnotherIncarnationSaysTpooldRestarted) {
  BenchOptions o;
  o.limits.incarnation = 42;
  start(std::move(o));
  EXPECT_EQ(engine().incarnation(), 42u);
  JobSpec r = spec("echo");
  r.retain = true;
  auto c = finish(r);
  EXPECT_EQ(JobId::incarnation(c.id), 42u);
  EXPECT_TRUE(engine().find(c.id).ok());
  const std::uint64_t other = JobId::make(43, c.id & JobId::kSequenceMask);
  EXPECT_TRUE(is(engine().find(other).error, ErrorCode::kNotFound,
                 "is from another run of tpoold (incarnation 43, now 42)"));
}

TEST_F(EngineRetention, ARunningRetainedJobIsFindableWhateverTheBounds) {
  BenchOptions o;
  o.limits.retention = 0ms;
  o.limits.max_retained_entries = 0;
  o.limits.max_retained_bytes = 0;
  start(std::move(o));
  JobSpec r = spec("block", "b");
  r.retain = true;
  auto j = run(r);
  ASSERT_TRUE(ctl_.wait_entered(1));
  engine().expire();
  Expected<JobPtr> f = engine().find(j->id());
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f.value, j);
  EXPECT_EQ(f.value->state(), JobState::kRunning);
  EXPECT_EQ(f.value->progress_snapshot().second, "waiting for the gate");
  ctl_.open_gate();
  done_.wait_job(j->id());
  // It ended: with bounds of zero it is gone at once.
  EXPECT_FALSE(engine().find(j->id()).ok());
  EXPECT_EQ(engine().snapshot().expired, 1u);
}

TEST_F(EngineRetention, ByCount) {
  BenchOptions o;
  o.limits.max_retained_entries = 2;
  start(std::move(o));
  std::vector<std::uint64_t> ids;
  for (int i = 0; i < 3; ++i) {
    JobSpec r = spec("echo", std::to_string(i));
    r.retain = true;
    ids.push_back(finish(r).id);
  }
  EXPECT_FALSE(engine().find(ids[0]).ok());
  EXPECT_TRUE(engine().find(ids[1]).ok());
  EXPECT_TRUE(engine().find(ids[2]).ok());
  EngineSnapshot s = engine().snapshot();
  EXPECT_EQ(s.retained_entries, 2u);
  EXPECT_EQ(s.expired, 1u);
}

TEST_F(EngineRetention, ByBytes) {
  BenchOptions o;
  o.limits.max_retained_bytes = 3000;
  start(std::move(o));
  JobSpec r = spec("big", "1000");
  r.retain = true;
  auto a = finish(r);
  ASSERT_EQ(a.output.size(), 1000u);
  const std::size_t each = engine().find(a.id).value->retained_bytes();
  EXPECT_GE(each, 1000u);
  EXPECT_EQ(engine().snapshot().retained_bytes, each);
  auto b = finish(r);
  ASSERT_GT(2 * each, 3000u) << "the test needs two outputs to exceed the bound";
  EXPECT_FALSE(engine().find(a.id).ok());
  EXPECT_TRUE(engine().find(b.id).ok());
  EXPECT_EQ(engine().snapshot().retained_bytes, each);
  EXPECT_EQ(engine().snapshot().expired, 1u);
}

TEST_F(EngineRetention, ByTimeWithTheInjectedClock) {
  ManualClock clock;
  BenchOptions o;
  o.clock = &clock;
  o.limits.retention = 60000ms;
  start(std::move(o));
  JobSpec r = spec("echo", "t");
  r.retain = true;
  auto a = finish(r);
  clock.advance(30000ms);
  auto b = finish(r);
  clock.advance(30000ms);
  engine().expire();
  EXPECT_TRUE(engine().find(a.id).ok());  // exactly its retention
  clock.advance(1ms);
  engine().expire();
  EXPECT_FALSE(engine().find(a.id).ok());
  EXPECT_TRUE(engine().find(b.id).ok());
  EXPECT_EQ(engine().snapshot().expired, 1u);
  clock.advance(30000ms);
  engine().expire();
  EXPECT_FALSE(engine().find(b.id).ok());
  EXPECT_EQ(engine().snapshot().expired, 2u);
  EXPECT_EQ(engine().snapshot().retained_entries, 0u);
  EXPECT_EQ(engine().snapshot().retained_bytes, 0u);
}

// A store that records the engine's calls and forwards them (the interface
// is all the engine may use: result_store.h).
class RecordingStore final : public ResultStore {
 public:
  explicit RecordingStore(RetentionBounds b) : inner_(b) {}
  void put(JobPtr job) override {
    log("put", job->id());
    // A6: the pool does not have the job yet, so it has not started.
    if (job->state() != JobState::kQueued) bad_.fetch_add(1);
    inner_.put(std::move(job));
  }
  void remove(const Job& job) override {
    log("remove", job.id());
    inner_.remove(job);
  }
  JobPtr get(std::uint64_t id) const override { return inner_.get(id); }
  JobPtr find_key(std::string_view key) const override { return inner_.find_key(key); }
  void ended(const Job& job, TimePoint at) override {
    log("ended", job.id());
    if (!job.final()) bad_.fetch_add(1);
    inner_.ended(job, at);
  }
  void expire(TimePoint now) override { inner_.expire(now); }
  ResultStoreStats stats() const override { return inner_.stats(); }
  std::vector<JobPtr> list(std::uint64_t after_id) const override { return inner_.list(after_id); }

  std::vector<std::string> calls(std::uint64_t id) {
    std::lock_guard lock(mu_);
    std::vector<std::string> out;
    for (const auto& [what, i] : log_) {
      if (i == id) out.push_back(what);
    }
    return out;
  }
  std::vector<std::pair<std::string, std::uint64_t>> all() {
    std::lock_guard lock(mu_);
    return log_;
  }
  int bad() const { return bad_.load(); }

 private:
  void log(const char* what, std::uint64_t id) {
    std::lock_guard lock(mu_);
    log_.emplace_back(what, id);
  }
  InMemoryResultStore inner_;
  std::mutex mu_;
  std::vector<std::pair<std::string, std::uint64_t>> log_;
  std::atomic<int> bad_{0};
};

TEST_F(EngineRetention, AnInjectedStoreSeesPutBeforeTheRunAndRemoveOnRefusal) {
  auto store = std::make_unique<RecordingStore>(RetentionBounds{60000ms, 1 << 20, 100});
  RecordingStore* rec = store.get();
  BenchOptions o;
  o.threads = 1;
  o.queue_capacity = 2;
  o.store = std::move(store);
  start(std::move(o));
  JobSpec r = spec("echo", "x");
  r.retain = true;
  auto a = finish(r);
  auto unretained = finish(spec("echo"));
  EXPECT_EQ(rec->calls(a.id), (std::vector<std::string>{"put", "ended"}));
  EXPECT_TRUE(rec->calls(unretained.id).empty());
  EXPECT_TRUE(engine().find(a.id).ok());  // the engine reads it back through the store
  // A full pool refuses a retained job after its put: it is removed (A6).
  Error refusal;
  auto held = fill_pool(&refusal);
  ASSERT_TRUE(ctl_.wait_entered(1));
  const std::size_t before = rec->all().size();
  Engine::SubmitResult refused = submit(r);
  ASSERT_TRUE(is(refused.error, ErrorCode::kExhausted, "no free task slot"));
  auto log = rec->all();
  ASSERT_EQ(log.size(), before + 2);
  EXPECT_EQ(log[before].first, "put");
  EXPECT_EQ(log[before + 1].first, "remove");
  EXPECT_EQ(log[before].second, log[before + 1].second);
  EXPECT_FALSE(engine().find(log[before].second).ok());
  EXPECT_EQ(engine().snapshot().retained_entries, 1u);
  EXPECT_EQ(rec->bad(), 0);
  ctl_.open_gate();
  ASSERT_TRUE(idle());
}

}  // namespace
}  // namespace tpool::engine::testing
