// tpool::Pool: a work-stealing thread pool of bounded task descriptors.
//
// The algorithms follow the seed reference (docs/algorithms.md): bounded
// descriptors with generation tags, per-slot descriptor caches, the owner LIFO
// slot, the SPMC RingQueue (or a Chase-Lev deque), the Vyukov inject ring with
// pop_many, per-submitter queues, the non-empty-worker bitmap, wake
// coalescing with Julia's sleep/wake handshake (docs/wake-protocol.md), a
// blocking lane, a watchdog with overflow workers, and drain/cancel shutdown.
//
// Standard C++ only: no daemon, gRPC, protobuf or Prometheus types.
//
// A task is a function pointer plus a context pointer; submitting allocates
// nothing. Every accepted task ends exactly once: it runs (its fn is called),
// or it is cancelled before it starts (its on_cancel is called, if given).
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "tpool/common/lane.h"
#include "tpool/common/mutex.h"
#include "tpool/common/status.h"
#include "tpool/pool/histogram.h"

namespace tpool {

namespace detail {  // tpool/pool/event_count.h
struct StdAtomics;
struct StdSync;
template <class Atomics, class Sync>
class BasicEventCount;
using EventCount = BasicEventCount<StdAtomics, StdSync>;
}  // namespace detail

using TaskFn = void (*)(void* ctx);

struct Task {
  TaskFn fn = nullptr;
  void* ctx = nullptr;
};

enum class QueueKind : std::uint8_t { kRing, kChaseLev };
enum class SchedulerVariant : std::uint8_t { kGlobalQueue, kWorkStealing, kLaneExtension };
enum class Backpressure : std::uint8_t { kBlock, kReject };
enum class ShutdownMode : std::uint8_t { kDrain, kCancelPending };
enum class WatchdogDriver : std::uint8_t { kThread, kManual };

// How a task ended, as wait() reports it.
enum class TaskOutcome : std::uint8_t {
  kCompleted,  // fn returned
  kFailed,     // fn threw; the exception was caught and counted
  kCancelled,  // cancelled before it started (token, deadline or shutdown)
};

std::string_view to_string(QueueKind) noexcept;
std::string_view to_string(SchedulerVariant) noexcept;
std::string_view to_string(TaskOutcome) noexcept;

// Cooperative cancellation, owned by the submitter, referenced by pointer from
// SubmitOptions; it must outlive the task. The pool checks it before a task
// starts (a cancelled task does not run) and a running task reads it through
// this_task::is_cancelled(). A deadline counts as cancellation once passed.
class CancelToken {
 public:
  using Clock = std::chrono::steady_clock;
  enum class Reason : std::uint8_t { kNone, kCancelled, kDeadline };

  void cancel() noexcept { word_.fetch_or(kCancelledBit, std::memory_order_acq_rel); }
  // A deadline before the clock's epoch is stored as the epoch (passed
  // either way). Keeps a cancel() made before it.
  void set_deadline(Clock::time_point d) noexcept;
  bool is_cancelled() const noexcept { return reason() != Reason::kNone; }
  // Reads the clock only when a deadline is set.
  Reason reason() const noexcept;
  // The reason at `now`, a reading the caller has just taken (a task's start
  // stamp): the same answer as reason() without a clock read of its own.
  Reason reason_at(Clock::time_point now) const noexcept;
  // The deadline set_deadline() stored (the epoch for one before it),
  // Clock::time_point::max() for none. Relaxed: set before the token is
  // shared, as a Job's is, it needs no ordering.
  Clock::time_point deadline() const noexcept;

 private:
  // One word, so a token costs 8 bytes in whatever holds one (each engine
  // Job does): bit 63 set = cancelled; bits 0-62 the deadline in steady
  // nanoseconds, kNoDeadline for none. Written with release (cancel's
  // read-modify-write is acq_rel, set_deadline's CAS too), read with
  // acquire: whatever the canceller wrote before cancelling is visible to a
  // task that sees the bit.
  static constexpr std::uint64_t kCancelledBit = std::uint64_t{1} << 63;
  static constexpr std::uint64_t kNoDeadline = kCancelledBit - 1;
  // The reason a token whose word is w gives at `now`.
  static Reason reason_of(std::uint64_t w, Clock::time_point now) noexcept;
  std::atomic<std::uint64_t> word_{kNoDeadline};
};

// Counts outstanding tasks; wait() returns when all submitted with it ended.
// Owned by the caller; it must outlive the tasks.
class WaitGroup {
 public:
  void add(std::int64_t n) noexcept { pending_.fetch_add(n, std::memory_order_relaxed); }
  void done() noexcept;
  // True when the count reached zero; false on timeout (negative: forever).
  bool wait(std::chrono::nanoseconds timeout = std::chrono::nanoseconds(-1));
  std::int64_t pending() const noexcept { return pending_.load(std::memory_order_acquire); }

 private:
  friend class Pool;  // Pool::help_wait registers its event count (add_waker)
  // help_wait: the done() that takes the count to zero also notifies `ec`
  // (under mu_, after its decrement). One pool's event count at a time:
  // false if another is registered. Every true is matched by remove_waker.
  bool add_waker(detail::EventCount* ec) noexcept;
  void remove_waker(detail::EventCount* ec) noexcept;

  std::atomic<std::int64_t> pending_{0};
  Mutex mu_;  // the last done() and every wait() (config.cc inv 2)
  CondVar cv_;
  detail::EventCount* waker_ GUARDED_BY(mu_) = nullptr;
  std::uint32_t waker_refs_ GUARDED_BY(mu_) = 0;  // help_waits registered with waker_
};

// The watchdog's time source, injected so tests drive it without sleeping.
class Clock {
 public:
  virtual ~Clock() = default;
  virtual std::chrono::nanoseconds now() const noexcept = 0;
};

struct Config {
  // Workers: min_threads start with the pool, more start on demand up to
  // max_threads. 0 for max_threads means std::thread::hardware_concurrency().
  std::size_t min_threads = 0;
  std::size_t max_threads = 0;
  // Descriptors: the most tasks queued or running at once. Power of two.
  std::size_t queue_capacity = 1 << 16;
  // Each worker's local queue. Power of two, 2..65536.
  std::size_t local_queue_capacity = 256;
  // Tasks a default-lane worker keeps for itself when it submits from inside
  // a task, newest first (tpool/pool/lifo_stack.h), 1..256. 1 (the default)
  // is the seed's LIFO slot: one task, the others go to the stealable local
  // queue, which the owner pops oldest first. More makes nested fan-out
  // unfold depth first (measured: 22% less time per task on the 4^9 fan-out,
  // docs/benchmarks.md): the oldest half spills to the local queue when the
  // stack is full, and while another worker is asleep the worker submits to
  // its local queue and, before it runs the next task from its stack, hands
  // the older half of the stack to the local queue. The cost, and why it is
  // not the default: an entry under the top of the stack is invisible to the
  // other workers while its owner runs a task. If that task runs long, or
  // waits for a sibling still in the stack by any means but help_wait (a
  // latch, a condition variable, a spin), the siblings wait for it or never
  // run. Use it for short compute tasks that join with help_wait / TaskGroup
  // (docs/algorithms.md, "The owner's LIFO stack"). Blocking-lane workers
  // keep one, as in the seed.
  std::size_t lifo_capacity = 1;
  QueueKind queue_kind = QueueKind::kRing;
  SchedulerVariant scheduler_variant = SchedulerVariant::kWorkStealing;
  // Wake at most one parked worker per this many submits (1 = every submit).
  std::size_t wake_coalesce_batch = 1;
  // The searching-worker gate (Go's nmspinning, Tokio's num_searching): a
  // worker that found no task counts itself searching while it scans once
  // more, and again after every return from its sleep; a default-lane submit
  // skips its wake while any worker is searching, and the last searcher to
  // find a task wakes one more worker. Fewer wakes that find nothing, one
  // more hand-off before a second worker joins. Off by default: measured, it
  // saves wake-ups only with more workers than cores, where it makes fast
  // tasks wait ~10x longer (docs/algorithms.md, "The searching-worker
  // gate"). The blocking lane is never gated.
  bool searching_gate = false;
  // Entries taken from an inject ring per head CAS, 1..32.
  std::size_t inject_batch_size = 32;
  // Most entries one steal_half moves, 1..local_queue_capacity/2.
  std::size_t steal_batch_size = 128;
  // Default for submits that do not say.
  Backpressure backpressure = Backpressure::kBlock;
  // How long a blocking submit waits for a descriptor; negative: forever.
  std::chrono::nanoseconds block_timeout{-1};
  // Registered submitter slots (own SPMC queue and DescCache each), 0..64.
  std::size_t max_submitters = 16;

  // Lanes (scheduler_variant = kLaneExtension): workers [0, blocking_workers)
  // serve the blocking lane; they help the default lane when theirs is empty.
  std::size_t blocking_workers = 0;
  bool cpu_helps_blocking = false;

  // Watchdog: every watchdog_interval, a worker running one task for longer
  // than blocking_promotion_timeout counts as stalled (any worker, any lane,
  // except a blocking worker running a blocking-lane task), and one overflow
  // worker (up to max_overflow_workers; they drain both lanes) is spawned per
  // tick. Each tick also wakes one sleeping worker per lane with queued work.
  // Zero max_overflow_workers and a zero interval switch it off entirely.
  std::chrono::nanoseconds watchdog_interval{0};
  std::chrono::nanoseconds blocking_promotion_timeout = std::chrono::milliseconds(100);
  std::size_t max_overflow_workers = 0;
  WatchdogDriver watchdog_driver = WatchdogDriver::kThread;
  const Clock* clock = nullptr;  // nullptr: steady_clock

  std::string name = "tpool";  // thread names: "<name>-w<i>", "<name>-wd"

  // Checks every field; the error names the field, its value and the range.
  // It checks the fields of resolved(), so a default is judged as the pool
  // will use it (max_threads 0 is checked as the core count).
  Status validate() const;

  // A copy with every default filled in, as the pool runs it: the one place
  // the pool's defaults are computed (Pool::create and validate() use it;
  // Pool::config() returns it; a daemon that reports or sizes by these
  // fields should call it rather than repeat the rules):
  //   max_threads 0 -> std::max(1u, std::thread::hardware_concurrency());
  //   min_threads 0 -> max_threads;
  //   lane_extension with blocking_workers > 0 (the variant as the build
  //   pins it, TPOOL_SCHEDULER_VARIANT) -> min_threads is at least
  //   blocking_workers + 1, since the blocking lane has no server but its
  //   own workers and they all start with the pool.
  // Every other field is copied unchanged. On a config that validate()
  // refuses the result is filled in the same way but means nothing more.
  Config resolved() const;
};

struct SubmitOptions {
  // The caller will wait(handle) (or detach(handle)); the descriptor is kept
  // until then. Otherwise it is recycled when the task ends.
  bool waitable = false;
  // Overrides Config::backpressure / block_timeout when set.
  std::optional<Backpressure> backpressure;
  std::optional<std::chrono::nanoseconds> block_timeout;  // negative: forever; 0: never wait
  CancelToken* cancel = nullptr;
  // submit_batch only: task i's own token (cancels[i] overrides cancel; null
  // entries mean none). Empty: every task gets cancel. When set it must hold
  // an entry for every task.
  std::span<CancelToken* const> cancels;
  WaitGroup* wait_group = nullptr;  // add(1) on accept, done() when the task ends
  Lane lane = Lane::kDefault;
  // Called instead of fn when the task is cancelled before it starts, so the
  // owner of ctx learns its fate. May be null.
  TaskFn on_cancel = nullptr;
};

struct TaskHandle {
  std::uint32_t index = UINT32_MAX;
  std::uint32_t generation = 0;
  bool valid() const noexcept { return index != UINT32_MAX; }
};

struct LaneStats {
  std::uint64_t completed = 0;  // tasks that ran to return or throw in this lane
  std::uint64_t inject_depth = 0;
  // Entries in the own (local) queues of the workers whose lane this is; a
  // blocking worker that helps the default lane may hold default tasks there.
  std::uint64_t local_depth = 0;
  std::size_t workers = 0;  // core workers serving this lane
  HistogramSnapshot wait;   // submit to start
  HistogramSnapshot run;    // start to end
};

struct PoolStats {
  std::uint64_t submitted = 0;
  std::uint64_t completed = 0;  // ran, returned normally
  std::uint64_t failed = 0;     // ran, threw
  std::uint64_t cancelled = 0;  // never ran
  std::uint64_t rejected_full = 0;
  std::uint64_t rejected_shutdown = 0;
  std::uint64_t rejected_timeout = 0;
  std::uint64_t steal_ops = 0;    // successful steal operations
  std::uint64_t steal_tasks = 0;  // tasks moved by them
  std::uint64_t parks = 0;
  std::uint64_t wakeups_no_work = 0;  // a woken worker found nothing
  std::uint64_t local_overflows = 0;  // owner's local queue full: fell back
  // A worker's submit found no descriptor and nothing to run: it ran the
  // task itself (caller-runs), so nested submits never deadlock.
  std::uint64_t inline_runs = 0;
  std::uint64_t inject_depth = 0;
  std::uint64_t local_depth_sum = 0;
  std::uint64_t local_depth_max = 0;
  std::uint64_t submitter_depth = 0;
  std::uint64_t live_descriptors = 0;
  std::uint64_t descriptor_capacity = 0;
  std::size_t workers = 0;  // core workers started
  std::size_t busy_workers = 0;
  std::size_t parked_workers = 0;
  // Workers counted searching (Config::searching_gate; 0 with it off).
  std::size_t searching_workers = 0;
  // Watchdog and overflow workers.
  std::uint64_t stalls_detected = 0;
  std::size_t stalled_now = 0;
  std::uint64_t overflow_spawned = 0;
  std::uint64_t overflow_retired = 0;
  std::size_t overflow_active = 0;
  std::size_t overflow_max = 0;
  // Threads parked (or about to park) on the pool's event counts: submits
  // waiting for a free descriptor (Backpressure::kBlock), wait() and
  // help_wait() calls waiting for their task or group, shutdown() waiting
  // for the accepted tasks to end.
  std::size_t blocked_submits = 0;
  std::size_t blocked_waits = 0;
  std::size_t blocked_help_waits = 0;
  std::size_t blocked_shutdowns = 0;
  bool timestamps_enabled = true;  // false: built with TPOOL_TIMESTAMPS=disabled
  LaneStats lanes[kLaneCount];
};

class Pool;

// A registered submitter: the registering thread's submits go to its own SPMC
// queue (stolen by workers) with its own DescCache. Release by destruction,
// on the same thread.
class SubmitterSlot {
 public:
  SubmitterSlot() = default;
  SubmitterSlot(SubmitterSlot&& o) noexcept : pool_(o.pool_), slot_(o.slot_) { o.pool_ = nullptr; }
  SubmitterSlot& operator=(SubmitterSlot&& o) noexcept;
  ~SubmitterSlot() { release(); }
  void release() noexcept;
  bool active() const noexcept { return pool_ != nullptr; }

 private:
  friend class Pool;
  SubmitterSlot(Pool* p, std::size_t s) : pool_(p), slot_(s) {}
  Pool* pool_ = nullptr;
  std::size_t slot_ = 0;
};

class Pool {
 public:
  // Validates config and starts min_threads workers (and the watchdog).
  static Result<std::unique_ptr<Pool>> create(Config config);
  // Shuts down (drain, no timeout) if still running.
  ~Pool();
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;

  // Submit one task. Blocks for a descriptor under Backpressure::kBlock.
  Result<TaskHandle> submit(Task task, const SubmitOptions& opts = {});
  // Never blocks: Full when no descriptor is free.
  Result<TaskHandle> try_submit(Task task, const SubmitOptions& opts = {});
  // Submit many with one descriptor batch and one wake; returns how many were
  // accepted (a prefix of tasks). With handles non-empty (and opts.waitable),
  // handles[i] receives task i's handle.
  Result<std::size_t> submit_batch(std::span<const Task> tasks, const SubmitOptions& opts = {},
                                   std::span<TaskHandle> handles = {});

  // Wait for a waitable task; releases its descriptor unless it times out
  // (then the handle stays valid). Negative timeout: forever.
  Result<TaskOutcome> wait(TaskHandle h,
                           std::chrono::nanoseconds timeout = std::chrono::nanoseconds(-1));
  // Give up waiting: the descriptor is recycled when the task ends.
  void detach(TaskHandle h);

  // Wait for wg to reach zero. On a worker of this pool, runs other tasks
  // meanwhile (help-first join), so a task can fan out and wait for its
  // children without starving the pool; with nothing to run it sleeps until
  // work it could run is published or wg reaches zero. False on timeout.
  bool help_wait(WaitGroup& wg, std::chrono::nanoseconds timeout = std::chrono::nanoseconds(-1));

  Result<SubmitterSlot> register_submitter();

  // Stop accepting work and stop the workers. kDrain runs everything queued;
  // kCancelPending cancels what has not started. Running tasks finish. Returns
  // Timeout if the work did not finish in time (workers are then told to stop
  // after their current task and are joined). Idempotent.
  Status shutdown(ShutdownMode mode,
                  std::chrono::nanoseconds timeout = std::chrono::nanoseconds(-1));

  PoolStats stats() const;
  const Config& config() const noexcept;

  // With WatchdogDriver::kManual: run one watchdog tick now (tests).
  void watchdog_tick();
  // The number of tasks started by every worker so far: it grows while the
  // pool makes progress (the daemon's systemd watchdog ping reads it).
  std::uint64_t progress() const noexcept;

  class Impl;

 private:
  friend class SubmitterSlot;
  explicit Pool(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// What a running task may ask about itself.
namespace this_task {
bool is_cancelled() noexcept;  // false outside a task
Lane lane() noexcept;          // kDefault outside a task
Pool* pool() noexcept;         // nullptr outside a task
int worker_index() noexcept;   // -1 outside a worker
}  // namespace this_task

}  // namespace tpool
