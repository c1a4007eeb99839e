// Internal state of tpool::Pool, shared by the pool's translation units.
//
// Thread safety and invariants (cited as "inv N" in the .cc files):
//   (1) Descriptor states: free -> reserved -> queued -> claimed ->
//       {completed, failed, cancelled} -> free. Every transition out of
//       queued (to claimed) and every release to free is a CAS, so two
//       threads can never both run, cancel or free one descriptor. The one
//       thread that claims a descriptor either runs it or cancels it, and
//       only then publishes a terminal state: a terminal state means nobody
//       touches the descriptor's fields any more, so wait()/detach() may free
//       it. (A claim straight to `cancelled` once let wait() free and recycle
//       a descriptor whose on_cancel and finish() were still to run.)
//   (2) A queue entry is {generation, index}. A descriptor's generation is
//       bumped when it is freed, so an entry that outlived its descriptor
//       (cancelled by shutdown, or waited and recycled) is stale and dropped.
//       The generation check is a filter, not a lock: a descriptor may be
//       freed and recycled between a worker's check and its claim, and the
//       claim then owns (and runs) the newer task, whose own entry is dropped.
//   (3) Only the owning worker touches its LIFO slot, pushes to or pops its
//       local queue, and uses its DescCache; only the registering thread does
//       so for a submitter slot. Other threads only steal.
//   (4) Counters live in per-context blocks (one per worker slot, one per
//       submitter slot, one shared block for every other thread). A private
//       block has one writer (relaxed load + store); the shared block uses
//       fetch_add. stats() sums them.
//   (5) Shutdown handshake: a submitter counts the task as accepted, then a
//       seq_cst fence, then reads `accepting_`; shutdown clears `accepting_`,
//       then a seq_cst fence, then sums the accepted counters. So either the
//       submitter sees the shutdown and undoes its count, or shutdown sees the
//       count and waits for the task.
//   (6) Wake protocol (docs/wake-protocol.md; the code is
//       tpool/pool/sleep_wake.h, which the Relacy model runs too): a worker
//       publishes `sleeping` and leaves `awake`, fences, then re-checks every
//       queue it may drain before it parks; a submitter publishes work,
//       fences, then reads `awake` / scans sleep states. Every worker that
//       drains lane L counts in awake[L] while its sleep state is running.
//   (7) The searching gate (Config::searching_gate; docs/algorithms.md, "The
//       searching-worker gate"; tests/model/spin/wake.pml, GATE). A worker
//       that drains the default lane counts in `searching` (Worker::own.
//       searching says whether it does) from a next_task that found nothing,
//       and from every return from idle(), until it takes a task or gives
//       up. It leaves the count with a seq_cst RMW *before* idle()'s c1 and
//       before leave(): c2's (or leave's) fence then orders the decrement
//       before its re-check, as for awake (inv 6). A default-lane producer
//       skips w3 when it reads searching > 0 after w1's fence: some searcher
//       will see its task, in its scan or in its re-check. A searcher that
//       takes a task and was the last one runs w1 and w3 itself (no
//       coalescing, no gate), so a second task pushed meanwhile gets a
//       worker even if the first never returns.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "tpool/common/mutex.h"
#include "tpool/pool.h"
#include "tpool/pool/bounded_ring.h"
#include "tpool/pool/desc_cache.h"
#include "tpool/pool/event_count.h"
#include "tpool/pool/lifo_stack.h"
#include "tpool/pool/ring_queue.h"
#include "tpool/pool/sleep_wake.h"
#include "tpool/pool/work_deque.h"

namespace tpool {

// ---- build-time switches (CMake options -> constexpr) ----------------------
inline constexpr bool kSinglePool = TPOOL_SINGLE_POOL;
inline constexpr bool kTimestamps = TPOOL_TIMESTAMPS_ENABLED;
#if defined(TPOOL_PINNED_VARIANT_GLOBAL_QUEUE)
inline constexpr bool kVariantPinned = true;
inline constexpr SchedulerVariant kPinnedVariant = SchedulerVariant::kGlobalQueue;
#elif defined(TPOOL_PINNED_VARIANT_WORK_STEALING)
inline constexpr bool kVariantPinned = true;
inline constexpr SchedulerVariant kPinnedVariant = SchedulerVariant::kWorkStealing;
#elif defined(TPOOL_PINNED_VARIANT_LANE_EXTENSION)
inline constexpr bool kVariantPinned = true;
inline constexpr SchedulerVariant kPinnedVariant = SchedulerVariant::kLaneExtension;
#else
inline constexpr bool kVariantPinned = false;
inline constexpr SchedulerVariant kPinnedVariant = SchedulerVariant::kWorkStealing;
#endif

namespace detail {

// {generation, index} packed in one word so the queues move it atomically.
using Entry = std::uint64_t;
inline constexpr Entry make_entry(std::uint32_t gen, std::uint32_t idx) {
  return (static_cast<Entry>(gen) << 32) | idx;
}
inline constexpr std::uint32_t entry_index(Entry e) {
  return static_cast<std::uint32_t>(e);
}
inline constexpr std::uint32_t entry_gen(Entry e) {
  return static_cast<std::uint32_t>(e >> 32);
}
inline constexpr Entry kNoEntry = ~Entry{0};

// (inv 1) One line per state: where a descriptor in that state lives.
enum class DescState : std::uint32_t {
  kFree,       // in the free ring or a DescCache
  kReserved,   // held by a submitter filling it in
  kQueued,     // its entry is in a LIFO slot, a local/submitter queue or an inject ring
  kClaimed,    // one thread runs fn or cancels it (on_cancel); not terminal
  kCompleted,  // waitable, fn returned: kept until wait() or detach()
  kFailed,     // waitable, fn threw: kept until wait() or detach()
  kCancelled,  // waitable, cancelled before start: kept until wait() or detach()
};

struct alignas(kCacheLine) Descriptor {
  std::atomic<DescState> state{DescState::kFree};
  std::atomic<std::uint32_t> generation{0};
  std::atomic<bool> detached{false};  // waitable only: nobody will wait
  // Written by the submitter while reserved, read by the worker after the
  // entry is published (the queues' release/acquire pairs order them).
  TaskFn fn = nullptr;
  void* ctx = nullptr;
  TaskFn on_cancel = nullptr;
  CancelToken* cancel = nullptr;
  WaitGroup* wait_group = nullptr;
  std::int64_t submit_ns = 0;
  Lane lane = Lane::kDefault;
  bool waitable = false;

  // (inv 1) reserved -> queued: the one place a descriptor is filled in.
  // Called by the submitter that reserved it; returns the generation for the
  // queue entry and the handle. The release store of `state` pairs with the
  // acquire of whoever reads the state next: run_task's claim CAS, wait(),
  // the shutdown scan. Workers also get the fields through the queues'
  // release/acquire on the entry, which is pushed after this returns.
  // `token` is o.cancel, or the batch's own token for this task
  // (SubmitOptions::cancels).
  std::uint32_t publish(const Task& t, const SubmitOptions& o, CancelToken* token, Lane routed,
                        std::int64_t stamp_ns) noexcept {
    fn = t.fn;
    ctx = t.ctx;
    on_cancel = o.on_cancel;
    cancel = token;
    wait_group = o.wait_group;
    lane = routed;
    waitable = o.waitable;
    submit_ns = stamp_ns;
    // Relaxed: ordered before any reader by the release store below.
    detached.store(false, std::memory_order_relaxed);
    state.store(DescState::kQueued, std::memory_order_release);
    // Relaxed: only the thread that freed the descriptor bumped it, before
    // the free-list push that handed it to us (see bump_generation()).
    return generation.load(std::memory_order_relaxed);
  }

  // (inv 2) Invalidate the entries and handles of the task that just ended.
  // Only the one thread that frees the descriptor (inv 1: the claimer of a
  // non-waitable task, the winner of the CAS to kFree otherwise) calls it,
  // before the descriptor goes back to a free list, so there is never a
  // second writer: a plain load + store, not a read-modify-write. That
  // thread sees the last bump: it came before the free-list push that handed
  // the descriptor on (release/acquire through the free ring or a DescCache,
  // then the queues and the claim). Release pairs with the acquire loads of
  // the generation in run_task() and wait().
  void bump_generation() noexcept {
    generation.store(generation.load(std::memory_order_relaxed) + 1, std::memory_order_release);
  }
};

// (inv 4) A block of counters with one writer (or shared, see bump()).
struct alignas(kCacheLine) Counters {
  std::atomic<std::uint64_t> submitted{0}, accepted{0}, unaccepted{0};
  std::atomic<std::uint64_t> completed{0}, failed{0}, cancelled{0};
  std::atomic<std::uint64_t> acquired{0}, released{0};
  std::atomic<std::uint64_t> rejected_full{0}, rejected_shutdown{0}, rejected_timeout{0};
  std::atomic<std::uint64_t> steal_ops{0}, steal_tasks{0}, parks{0}, wakeups_no_work{0};
  std::atomic<std::uint64_t> local_overflows{0};
  std::atomic<std::uint64_t> inline_runs{0};  // caller-runs under backpressure
  std::atomic<std::uint64_t> lane_completed[kLaneCount]{};
  bool shared = false;

  void bump(std::atomic<std::uint64_t>& c, std::uint64_t n = 1) noexcept {
    if (shared) {
      c.fetch_add(n, std::memory_order_relaxed);  // statistics: no ordering needed
    } else {
      c.store(c.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);  // one writer
    }
  }
};

// A worker's owner-local queue: RingQueue (default) or Chase-Lev, chosen at
// run time by Config::queue_kind.
class LocalQueue {
 public:
  LocalQueue(QueueKind kind, std::size_t cap);
  bool push(Entry e) noexcept { return ring_ ? ring_->push(e) : deque_->push_bottom(e); }
  std::size_t push_many(std::span<const Entry> es) noexcept;
  bool pop(Entry& e) noexcept { return ring_ ? ring_->pop(e) : deque_->pop_bottom(e); }
  std::size_t steal(std::span<Entry> dst, std::size_t max_batch) noexcept;
  std::size_t size_approx() const noexcept {
    return ring_ ? ring_->size_approx() : deque_->size_approx();
  }
  std::size_t free_space() const noexcept {
    return ring_ ? ring_->free_space() : deque_->free_space();
  }

 private:
  std::unique_ptr<RingQueue<Entry>> ring_;
  std::unique_ptr<WorkDeque<Entry>> deque_;
};

// Push onto a ring that has room by construction: the pool's rings have
// twice as many slots as there are descriptors, so a push can only meet a
// slot whose consumer has claimed it but not yet released it (BoundedRing
// inv 3) and must retry, never drop the entry.
template <class Ring, class T>
void push_always(Ring& ring, T v) noexcept {
  while (!ring.try_push(v)) std::this_thread::yield();
}

// The handshake of inv 6, as the pool compiles it (sleep_wake.h).
using Wake = SleepWake<StdAtomics, StdSync>;

// What the watchdog knows of the task a worker runs: its start time and its
// lane, in one word so that a tick never pairs one task's start with another
// task's lane. 0 means no task. Bit 0 is set for a task, bit 1 is the lane,
// the rest is the start in ns of Config::clock (clamped to 0..2^62: a
// steady_clock reading since boot fits for 146 years).
struct TaskStamp {
  static std::uint64_t make(std::int64_t start_ns, Lane lane) noexcept {
    const auto t = static_cast<std::uint64_t>(std::max<std::int64_t>(0, start_ns));
    return ((t & ((std::uint64_t{1} << 62) - 1)) << 2) |
           (lane == Lane::kBlocking ? std::uint64_t{2} : 0) | 1;
  }
  static bool running(std::uint64_t s) noexcept { return (s & 1) != 0; }
  static std::int64_t start_ns(std::uint64_t s) noexcept {
    return static_cast<std::int64_t>(s >> 2);
  }
  static Lane lane(std::uint64_t s) noexcept {
    return (s & 2) != 0 ? Lane::kBlocking : Lane::kDefault;
  }
};

// A worker, in two halves (Tokio's Local/Steal split of a run queue, applied
// to the whole worker): OwnerState is touched only by the worker's own
// thread (inv 3), so every such access reads `w->own.`; the rest is read or
// written by other threads, each field with the roles it says.
struct Worker {
  // ---- owner-only (inv 3) ----
  // Also touched by start_worker before the thread starts and by shutdown
  // after it is joined: never while the owner runs.
  struct OwnerState {
    // The LIFO stack (Config::lifo_capacity; 1: the seed's LIFO slot): only
    // the owner fills or drains it (lifo_stack.h inv 1).
    LifoStack<Entry> lifo;
    DescCache<32> cache;
    std::uint32_t submit_tick = 0;  // wake coalescing
    std::uint32_t steal_hint = 0;
    bool searching = false;  // counted in Impl::searching (inv 7)
    // The end stamp of the last task this worker ran, and whether the worker
    // went straight on from it (no idle spin, no park, no cancel in between):
    // then it is also the next task's start stamp (run_task), one clock read
    // per task instead of two.
    std::int64_t last_end_ns = 0;
    bool last_end_fresh = false;
  };
  OwnerState own;
  // ---- shared with other threads ----
  // The owner pushes and pops, any thread steals (the queue's invariants).
  std::unique_ptr<LocalQueue> local;
  Counters counters;  // inv 4: the owner writes, stats() reads
  LatencyHistogram wait_hist[kLaneCount];
  LatencyHistogram run_hist[kLaneCount];
  alignas(kCacheLine) std::atomic<SleepState> sleep{SleepState::kRunning};
  // The task this worker runs, for the watchdog (TaskStamp; 0: none).
  std::atomic<std::uint64_t> task_stamp{0};
  std::atomic<std::uint64_t> tasks_started{0};
  std::atomic<bool> busy{false};
  std::atomic<bool> parked{false};  // inside the condvar wait (stats, overflow retire)
  std::atomic<bool> retire{false};  // overflow: told to exit by the watchdog
  std::atomic<bool> exited{false};
  // True from start_worker until the join: stats() reads it instead of
  // `thread`, which only spawn_mu holders may touch.
  std::atomic<bool> spawned{false};
  // The park of sleep_wake.h c3 (its inv 4): a tpool::Mutex that guards no
  // member (sleep and parked are atomics); it only closes the window between
  // the worker's check of `sleep` and its wait.
  StdSync::Mutex park_mu;
  std::condition_variable park_cv;
  std::thread thread;
  // ---- fixed at construction ----
  std::uint32_t index = 0;
  Lane lane = Lane::kDefault;
  bool overflow = false;
  bool drains[kLaneCount] = {true, false};  // lanes whose queues this worker takes from
  // ---- watchdog thread only ----
  std::uint64_t wd_stalled_task = ~std::uint64_t{0};
  std::uint32_t wd_idle_ticks = 0;
};

// A registered submitter slot, split as Worker is: OwnerState belongs to the
// thread that holds the slot (inv 3); workers steal from `queue`.
struct Submitter {
  struct OwnerState {
    DescCache<32> cache;
    std::uint32_t submit_tick = 0;
  };
  OwnerState own;
  std::unique_ptr<RingQueue<Entry>> queue;
  Counters counters;  // inv 4: the holder writes, stats() reads
  std::atomic<bool> in_use{false};
};

}  // namespace detail

// The pool's state and every operation on it. Pool is a facade
// (pool_api.cc) whose members forward here; the data is private, and each
// group of members below is used by the files its comment names.
class Pool::Impl {
 public:
  explicit Impl(Config c);
  ~Impl();
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

  // construct.cc
  Status start();
  void attach(Pool* self) noexcept { self_ = self; }
  Pool* pool() const noexcept { return self_; }
  const Config& config() const noexcept { return cfg; }
  // submit.cc
  Result<TaskHandle> submit_one(Task t, const SubmitOptions& o);
  Result<std::size_t> submit_many(std::span<const Task> ts, const SubmitOptions& o,
                                  std::span<TaskHandle> handles);
  // wait.cc
  Result<TaskOutcome> wait(TaskHandle h, std::chrono::nanoseconds timeout);
  void detach(TaskHandle h);
  bool help_wait(WaitGroup& wg, std::chrono::nanoseconds timeout);
  // shutdown.cc
  Status shutdown(ShutdownMode mode, std::chrono::nanoseconds timeout);
  void join_all();
  void abandon();  // create() failed to start a thread: stop what did start
  // submitter.cc: the slot index, for SubmitterSlot
  Result<std::size_t> register_submitter();
  void release_submitter(std::size_t slot) noexcept;
  // watchdog.cc
  void tick();
  // stats.cc
  PoolStats stats() const;
  std::uint64_t progress() const noexcept;

 private:
  // submit.cc
  bool enqueue(detail::Entry e, Lane lane, detail::Worker* w, detail::Submitter* s);
  // The owner's LIFO stack (docs/algorithms.md, "The owner's LIFO stack"):
  // whether a worker that drains the default lane is asleep now (a relaxed
  // hint, never part of the wake handshake), and the move of the stack's
  // older entries to the owner's stealable local queue.
  // Workers running now (core started + overflow active): what awake[] is
  // compared with. Relaxed loads: a hint or a w2 decision (inv 6).
  std::int64_t workers_running() const noexcept;
  bool default_lane_has_sleeper() const noexcept;
  void spill_lifo(detail::Worker* w, std::size_t n);
  void run_inline(detail::Worker* w, const Task& t, const SubmitOptions& o, Lane lane);
  // `chain`: the last searcher's wake (inv 7): no coalescing, no gate.
  void notify(Lane lane, std::uint32_t* tick, bool fenced = false, bool chain = false);
  bool wake_one(Lane lane);
  // (inv 7) Enter / leave the searching count. stop_searching() wakes one
  // more worker when `found` and it was the last searcher.
  void start_searching(detail::Worker* w);
  void stop_searching(detail::Worker* w, bool found);
  Lane route(Lane requested) const noexcept;

  // descriptors.cc: the free list and the DescCaches
  bool acquire(std::uint32_t* out, std::size_t n, detail::Worker* w, detail::Submitter* s,
               std::size_t& got);
  void release_desc(std::uint32_t idx);
  void recycle(std::uint32_t idx, detail::Counters& ctr);
  void return_cached(detail::DescCache<32>& cache) noexcept;
  detail::Counters& caller_counters() noexcept;

  // worker.cc
  void worker_main(detail::Worker* w);
  detail::Entry next_task(detail::Worker* w);
  void run_task(detail::Worker* w, detail::Entry e);
  void finish(detail::Worker* w, std::uint32_t idx, detail::DescState outcome);
  bool idle(detail::Worker* w);
  bool work_visible(detail::Worker* w);
  void mark_nonempty(std::size_t i) noexcept;
  void clear_nonempty(std::size_t i) noexcept;
  detail::Entry take_from_inject(detail::Worker* w, Lane lane);
  detail::Entry steal_from(detail::Worker* w, Lane lane);

  // construct.cc
  bool start_worker(std::size_t slot, bool overflow);

  // watchdog.cc
  void watchdog_main();
  bool stalled(const detail::Worker& w, std::int64_t now) const noexcept;
  bool lane_has_queued(Lane lane) const noexcept;

  // stats.cc
  std::uint64_t sum_accepted() const;
  std::uint64_t sum_finished() const;
  void for_each_counters(const std::function<void(const detail::Counters&)>& f) const;

  SchedulerVariant effective_variant() const noexcept {
    if constexpr (kVariantPinned) return kPinnedVariant;
    return variant;
  }
  bool uses_local_queues() const noexcept {
    return effective_variant() != SchedulerVariant::kGlobalQueue;
  }
  std::int64_t now_ns() const noexcept {
    if (cfg.clock != nullptr) return cfg.clock->now().count();
    return std::chrono::steady_clock::now().time_since_epoch().count();
  }
  // Whether a task's token stops it, judged at `stamp` (its start, from
  // now_ns()) when that is a steady_clock reading: no second clock read per
  // task. A deadline that passes between the stamp and this check (at most
  // the few hundred ns a chained stamp is old, run_task) lets the task start;
  // its handler sees the deadline at its next poll. With an injected clock
  // or without timestamps the token reads steady_clock itself.
  bool cancelled_at(const CancelToken& token, std::int64_t stamp) const noexcept {
    if (kTimestamps && cfg.clock == nullptr) {
      return token.reason_at(CancelToken::Clock::time_point(CancelToken::Clock::duration(stamp))) !=
             CancelToken::Reason::kNone;
    }
    return token.is_cancelled();
  }

  // ---- configuration, fixed after create() ----
  Config cfg;  // Config::resolved(): every default filled in
  SchedulerVariant variant;
  bool lanes_on = false;  // lane_extension with blocking workers
  std::size_t core_slots = 0;
  std::size_t total_slots = 0;  // core + overflow
  std::size_t cache_limit = 0;  // per-slot DescCache use (0: off for tiny pools)
  Pool* self_ = nullptr;

  // ---- descriptors and queues ----
  std::unique_ptr<detail::Descriptor[]> descs;
  detail::BoundedRing<std::uint32_t> free_ring;
  std::unique_ptr<detail::BoundedRing<detail::Entry>> inject[kLaneCount];
  std::vector<std::unique_ptr<detail::Worker>> workers;
  std::vector<std::unique_ptr<detail::Submitter>> submitters;
  std::vector<std::atomic<std::uint64_t>> nonempty;  // bitmap words, bit i: worker i's queue
  std::atomic<std::uint64_t> submitter_mask{0};
  detail::Counters ext;  // every thread that is neither a worker nor a submitter

  // ---- lifecycle ----
  alignas(detail::kCacheLine) std::atomic<bool> accepting{true};  // (inv 5)
  std::atomic<bool> stop{false};                                  // workers exit when set
  std::atomic<std::size_t> started{0};                            // core workers started
  std::atomic<std::int64_t> awake[kLaneCount] = {};               // (inv 6)
  std::atomic<std::uint32_t> wake_hint{0};
  // (inv 7) Default-lane workers searching for work; only with the gate on.
  alignas(detail::kCacheLine) std::atomic<std::int64_t> searching{0};
  // Serialises starting and joining workers (construct.cc inv 2,
  // shutdown.cc inv 1, watchdog.cc inv 1). Worker::thread is touched under
  // it too, except by join_all's joins (shutdown.cc inv 2), so it is not
  // GUARDED_BY.
  Mutex spawn_mu;
  Mutex shutdown_mu;  // one shutdown() at a time
  bool joined GUARDED_BY(spawn_mu) = false;
  // Parking (tpool/pool/event_count.h; docs/wake-protocol.md, "Event
  // counts"). Each names its waiters, then its notifiers.
  // Blocked submitters: a descriptor went back to the free ring
  // (release_desc, return_cached), shutdown began, or work was published
  // that a blocked worker could run (notify()).
  detail::EventCount free_ec;
  // wait(): a waitable task reached a terminal state (finish()).
  detail::EventCount done_ec;
  // help_wait(): work was published (notify()), or the group reached zero
  // (WaitGroup::done, through the waker help_wait registers).
  detail::EventCount help_ec;
  // shutdown(): accepted == finished. A worker passing through its sleep
  // transition or its exit (after their seq_cst fences), a submit that gives
  // back what it counted (unaccept, the take-back in submit_one).
  detail::EventCount idle_ec;

  // ---- watchdog ----
  std::thread watchdog;
  Mutex wd_mu;
  CondVar wd_cv;
  bool wd_stop GUARDED_BY(wd_mu) = false;
  std::atomic<std::uint64_t> stalls_detected{0};
  std::atomic<std::size_t> stalled_now{0};
  std::atomic<std::uint64_t> overflow_spawned{0};
  std::atomic<std::uint64_t> overflow_retired{0};
  std::atomic<std::size_t> overflow_active{0};
};

// The calling thread's role in a pool (inv 3).
struct ThreadCtx {
  Pool::Impl* pool = nullptr;  // the pool whose worker this thread is
  detail::Worker* worker = nullptr;
  Pool::Impl* sub_pool = nullptr;  // the pool this thread holds a submitter slot of
  detail::Submitter* submitter = nullptr;
  detail::Descriptor* current = nullptr;  // the running task's descriptor
};
extern thread_local ThreadCtx tls;

// The worker context of the calling thread for pool p, or null.
inline detail::Worker* worker_of(const Pool::Impl* p) noexcept {
  if constexpr (kSinglePool) {
    // TPOOL_SINGLE_POOL: no identity check. A worker of another pool would
    // be taken for ours (the seed's cross-pool hazard): only for processes
    // with exactly one Pool.
    return tls.worker;
  }
  return tls.pool == p ? tls.worker : nullptr;
}

}  // namespace tpool
