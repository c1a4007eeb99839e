// Throughput of the pool's lock-free queues next to moodycamel::ConcurrentQueue
// and boost::lockfree::queue, all in one run (docs/benchmarks.md, "Queues"):
//
//   owner_push_pop/<queue>            one thread: push 64, pop 64
//   spmc/<queue>/stealers:N           one owner pushing (popping itself when
//                                     full), N thieves taking batches
//   mpmc/<queue>/P:p/C:c              p producers try_push, c consumers pop
//   local_overflow_{fallback,move_half}/burst:B
//                                     the owner's choice when its local queue
//                                     is full (ring_queue.h, header comment)
//
// The multi-threaded cases move a fixed 64K items per iteration through the
// queue with a crew of threads started once (Crew); items_per_second is items
// moved per second of wall time. A thread that finds the queue full or empty
// yields, as the pool's workers back off.
#include <array>
#include <atomic>
#include <barrier>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <benchmark/benchmark.h>
#include <concurrentqueue/concurrentqueue.h>
#include <boost/lockfree/queue.hpp>

#include "tpool/pool/bounded_ring.h"
#include "tpool/pool/ring_queue.h"
#include "tpool/pool/work_deque.h"

namespace {

using Item = std::uint64_t;
// The pool's defaults (tpool/pool.h, Config): local queues of 256, steal
// batches of up to 128; the inject ring is far larger.
constexpr std::size_t kLocalCapacity = 256;
constexpr std::size_t kStealBatch = 128;
constexpr std::size_t kRingCapacity = 1024;

// ---- adapters: one interface per role ------------------------------------
// push(v) -> bool; pop(v) -> bool (owner / single consumer); take(buf) -> n
// (a thief's or a consumer's batch take).

struct RingQueueAdapter {
  static constexpr const char* kName = "tpool_RingQueue";
  tpool::detail::RingQueue<Item> q{kLocalCapacity};
  bool push(Item v) { return q.push(v); }
  bool pop(Item& v) { return q.pop(v); }
  std::size_t take(std::span<Item> buf) { return q.steal_half(buf, kStealBatch); }
};

struct WorkDequeAdapter {
  static constexpr const char* kName = "tpool_WorkDeque";
  tpool::detail::WorkDeque<Item> q{kLocalCapacity};
  bool push(Item v) { return q.push_bottom(v); }
  bool pop(Item& v) { return q.pop_bottom(v); }
  std::size_t take(std::span<Item> buf) { return q.steal_top(buf[0]) ? 1 : 0; }
};

template <bool kMany>
struct BoundedRingAdapter {
  static constexpr const char* kName = kMany ? "tpool_BoundedRing_pop_many" : "tpool_BoundedRing";
  explicit BoundedRingAdapter(std::size_t cap = kRingCapacity) : q(cap) {}
  tpool::detail::BoundedRing<Item> q;
  bool push(Item v) { return q.try_push(v); }
  bool pop(Item& v) { return q.pop(v); }
  std::size_t take(std::span<Item> buf) {
    if constexpr (kMany) return q.pop_many(buf.subspan(0, 32));
    return q.pop(buf[0]) ? 1 : 0;
  }
};

// moodycamel: implicit (token-free) producers and consumers, bounded with
// try_enqueue so it never allocates in the timed loop; batch takes use
// try_dequeue_bulk, its fastest consumer path.
template <bool kBulk>
struct MoodycamelAdapter {
  static constexpr const char* kName = kBulk ? "moodycamel_bulk" : "moodycamel";
  explicit MoodycamelAdapter(std::size_t cap = kRingCapacity) : q(cap) {}
  moodycamel::ConcurrentQueue<Item> q;
  bool push(Item v) { return q.try_enqueue(v); }
  bool pop(Item& v) { return q.try_dequeue(v); }
  std::size_t take(std::span<Item> buf) {
    if constexpr (kBulk)
      return q.try_dequeue_bulk(buf.data(), std::min<std::size_t>(32, buf.size()));
    return q.try_dequeue(buf[0]) ? 1 : 0;
  }
};

// boost::lockfree::queue, fixed-size (no allocation after construction).
struct BoostAdapter {
  static constexpr const char* kName = "boost_lockfree";
  explicit BoostAdapter(std::size_t = kRingCapacity) {}
  boost::lockfree::queue<Item, boost::lockfree::capacity<kRingCapacity>> q;
  bool push(Item v) { return q.bounded_push(v); }
  bool pop(Item& v) { return q.pop(v); }
  std::size_t take(std::span<Item> buf) { return q.pop(buf[0]) ? 1 : 0; }
};

// ---- owner push + pop -----------------------------------------------------
template <class Q>
void owner_push_pop(benchmark::State& state) {
  auto q = std::make_unique<Q>();
  Item v = 0;
  std::int64_t items = 0;
  for (auto _ : state) {
    for (Item i = 0; i < 64; ++i) benchmark::DoNotOptimize(q->push(i));
    for (int i = 0; i < 64; ++i) {
      benchmark::DoNotOptimize(q->pop(v));
    }
    items += 64;
  }
  state.SetItemsProcessed(items);
}

// ---- a crew of threads that run one round per benchmark iteration ---------
// Threads are started once per benchmark, not per iteration; each iteration
// releases them through a barrier and waits for all of them at a second one.
class Crew {
 public:
  template <class Fn>
  Crew(int n, Fn fn) : start_(n + 1), end_(n + 1) {
    for (int i = 0; i < n; ++i) {
      threads_.emplace_back([this, i, fn] {
        for (;;) {
          start_.arrive_and_wait();
          // Relaxed: the barrier orders the coordinator's store before this.
          if (stop_.load(std::memory_order_relaxed)) return;
          fn(i);
          end_.arrive_and_wait();
        }
      });
    }
  }
  Crew(const Crew&) = delete;
  Crew& operator=(const Crew&) = delete;
  ~Crew() {
    stop_.store(true, std::memory_order_relaxed);
    start_.arrive_and_wait();
    for (auto& t : threads_) t.join();
  }
  void round() {
    start_.arrive_and_wait();
    end_.arrive_and_wait();
  }

 private:
  std::barrier<> start_;
  std::barrier<> end_;
  std::atomic<bool> stop_{false};
  std::vector<std::thread> threads_;
};

// Items moved through the queue per benchmark iteration.
constexpr std::uint64_t kRoundItems = 1 << 16;

// ---- one owner, N thieves -------------------------------------------------
// A round: the owner pushes kRoundItems (when full it runs one itself, as a
// worker would), then drains what is left; the thieves take batches until
// every item has been taken. Throughput counts every item taken.
template <class Q>
void spmc(benchmark::State& state) {
  const auto thieves = static_cast<int>(state.range(0));
  Q q;
  std::atomic<std::uint64_t> taken{0};
  Crew crew(thieves + 1, [&](int role) {
    std::uint64_t mine = 0;
    if (role == 0) {
      Item v = 0;
      for (Item next = 0; next < kRoundItems;) {
        if (q.push(next)) {
          ++next;
        } else if (q.pop(v)) {
          ++mine;
        }
      }
      while (q.pop(v)) ++mine;
      taken.fetch_add(mine, std::memory_order_relaxed);
      return;
    }
    std::array<Item, kStealBatch> buf{};
    while (taken.load(std::memory_order_relaxed) + mine < kRoundItems) {
      const std::size_t n = q.take(buf);
      if (n == 0) {
        // Flush ours so the count can reach the total, then let others run.
        taken.fetch_add(mine, std::memory_order_relaxed);
        mine = 0;
        if (taken.load(std::memory_order_relaxed) >= kRoundItems) break;
        std::this_thread::yield();
      }
      mine += n;
    }
    taken.fetch_add(mine, std::memory_order_relaxed);
  });
  for (auto _ : state) {
    taken.store(0, std::memory_order_relaxed);
    crew.round();
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * kRoundItems));
}

// ---- P producers, C consumers --------------------------------------------
template <class Q>
void mpmc(benchmark::State& state) {
  const auto producers = static_cast<int>(state.range(0));
  const auto consumers = static_cast<int>(state.range(1));
  Q q;
  std::atomic<std::uint64_t> taken{0};
  Crew crew(producers + consumers, [&](int role) {
    if (role < producers) {
      for (Item v = static_cast<Item>(role); v < kRoundItems; v += static_cast<Item>(producers)) {
        while (!q.push(v)) std::this_thread::yield();
      }
      return;
    }
    std::array<Item, 32> buf{};
    while (taken.load(std::memory_order_relaxed) < kRoundItems) {
      const std::size_t n = q.take(buf);
      if (n == 0) {
        std::this_thread::yield();
        continue;
      }
      taken.fetch_add(n, std::memory_order_relaxed);
    }
  });
  for (auto _ : state) {
    taken.store(0, std::memory_order_relaxed);
    crew.round();
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * kRoundItems));
}

// ---- the owner's choice when its local queue is full ----------------------
// fallback: the item that does not fit goes to the inject ring (the seed,
//   tpool today); move_half: the owner claims half its queue with one CAS
//   (its own steal_half) and moves it and the new item to the inject ring
//   (Tokio's push_overflow). Then the owner runs everything: local first,
//   then the inject ring in batches, as a worker does with its own burst.
enum class Overflow { kFallback, kMoveHalf };

template <Overflow kPolicy>
void local_overflow(benchmark::State& state) {
  const auto burst = static_cast<Item>(state.range(0));
  tpool::detail::RingQueue<Item> local(kLocalCapacity);
  tpool::detail::BoundedRing<Item> inject(1 << 16);
  std::array<Item, kLocalCapacity / 2> half{};
  std::array<Item, 32> batch{};
  Item sum = 0;
  for (auto _ : state) {
    for (Item i = 0; i < burst; ++i) {
      if (local.push(i)) continue;
      if constexpr (kPolicy == Overflow::kMoveHalf) {
        const std::size_t n = local.steal_half(half, half.size());
        for (std::size_t k = 0; k < n; ++k) (void)inject.try_push(half[k]);
      }
      (void)inject.try_push(i);
    }
    Item v = 0;
    while (local.pop(v)) sum += v;
    for (std::size_t n; (n = inject.pop_many(batch)) != 0;) {
      for (std::size_t k = 0; k < n; ++k) sum += batch[k];
    }
  }
  benchmark::DoNotOptimize(sum);
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()) *
                          static_cast<std::int64_t>(burst));
}

template <class Q>
void register_spmc(int max_thieves) {
  for (int n = 1; n <= max_thieves; ++n) {
    benchmark::RegisterBenchmark((std::string("spmc/") + Q::kName).c_str(), spmc<Q>)
        ->ArgName("stealers")
        ->Arg(n)
        ->UseRealTime();
  }
}

template <class Q>
void register_mpmc() {
  for (int p = 1; p <= 4; ++p) {
    for (int c = 1; c <= 4; ++c) {
      if (p != c && p != 1 && c != 1) continue;  // the diagonal and the 1xN / Nx1 edges
      benchmark::RegisterBenchmark((std::string("mpmc/") + Q::kName).c_str(), mpmc<Q>)
          ->ArgNames({"P", "C"})
          ->Args({p, c})
          ->UseRealTime();
    }
  }
}

template <class Q>
void register_owner() {
  benchmark::RegisterBenchmark((std::string("owner_push_pop/") + Q::kName).c_str(),
                               owner_push_pop<Q>);
}

}  // namespace

int main(int argc, char** argv) {
  register_owner<RingQueueAdapter>();
  register_owner<WorkDequeAdapter>();
  register_owner<BoundedRingAdapter<false>>();
  register_owner<MoodycamelAdapter<false>>();
  register_owner<BoostAdapter>();

  // Thieves: 1..4 (the machine this is tuned on has 2 cores; past that the
  // numbers measure oversubscription, and say so in docs/benchmarks.md).
  register_spmc<RingQueueAdapter>(4);
  register_spmc<WorkDequeAdapter>(4);
  register_spmc<MoodycamelAdapter<true>>(4);
  register_spmc<BoostAdapter>(4);

  register_mpmc<BoundedRingAdapter<false>>();
  register_mpmc<BoundedRingAdapter<true>>();
  register_mpmc<MoodycamelAdapter<false>>();
  register_mpmc<MoodycamelAdapter<true>>();
  register_mpmc<BoostAdapter>();

  for (const char* name : {"local_overflow_fallback", "local_overflow_move_half"}) {
    auto* b = benchmark::RegisterBenchmark(name, std::string(name) == "local_overflow_fallback"
                                                     ? local_overflow<Overflow::kFallback>
                                                     : local_overflow<Overflow::kMoveHalf>);
    b->ArgName("burst")->Arg(512)->Arg(4096);
  }

  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
