// tpool::engine::Engine: the daemon's job engine. Jobs in, pool tasks out.
//
// It owns the job ids, the result store (result_store.h: retention by time,
// bytes and count, the idempotency keys), the in-flight limit and the drain
// state, and it runs every job as one pool task that calls the plugin host.
// Every request goes through one admission pipeline (admission.cc): Submit,
// SubmitBatch and Stream share its checks, messages, retention and
// cancellation. It knows nothing of gRPC or protobuf: daemon/rpc translates
// requests into JobSpecs and engine errors into status codes
// (docs/architecture.md, "The job engine"); rpc reaches the pool and the
// plugin host only through the engine (handlers(), pool_stats()).
//
// Thread safety: every method is safe from any thread (gRPC threads, pool
// workers). Completion callbacks (DoneFn) run on the thread that ended the job.
// Submits never block (the engine asks the pool for reject backpressure
// itself, admission.cc inv A4), so a gRPC thread may call them.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "tpool/common/mutex.h"
#include "tpool/engine/job.h"
#include "tpool/engine/result_store.h"
#include "tpool/plugin_host/host.h"
#include "tpool/pool.h"

namespace tpool::store {
class Journal;
struct JobRecord;
}  // namespace tpool::store

namespace tpool::engine {

// Why a request was not accepted (or a lookup failed). daemon/rpc maps each
// code to one gRPC status.
enum class ErrorCode : std::uint8_t {
  kInvalidArgument,     // empty handler, payload over the limit, bad key or labels
  kNotFound,            // unknown handler, or unknown/expired job id
  kExhausted,           // in-flight limit or pool full; retry after retry_after
  kUnavailable,         // draining: no new jobs; the store cannot write (I/O error)
  kFailedPrecondition,  // idempotency key reused with a different request; durable without a store
};

struct Error {
  ErrorCode code;
  std::string message;  // a sentence: what was wrong, the value, what to do
  std::chrono::milliseconds retry_after{0};
};

template <class T>
struct Expected {
  T value;  // set on success
  std::optional<Error> error;
  bool ok() const noexcept { return !error.has_value(); }
};

// The retry fields a request left at 0 take these (config [retry]).
struct RetryPolicy {
  std::uint32_t max_attempts = 1;
  std::chrono::milliseconds backoff_base{0};
  std::chrono::milliseconds backoff_cap{0};
};

struct EngineLimits {
  std::size_t max_payload_bytes = 1u << 20;
  std::size_t max_inflight_jobs = 65536;
  std::chrono::milliseconds retention{300000};
  std::size_t max_retained_bytes = 64u << 20;
  std::size_t max_retained_entries = 100000;
  // A running job whose handler was told to stop (Cancel, the call's
  // cancellation, cancel_all) and has not returned after this long is ended
  // CANCELLED by the engine itself; a handler still running this long after
  // its job ended (deadline or cancellation) counts in
  // ignored_cancellation. (E4)
  std::chrono::milliseconds cancel_grace{5000};
  // How often the engine's deadline thread looks at the running jobs (E4);
  // zero: no thread (tests call Engine::enforce()). Picked by hand: the
  // lateness of a TIMED_OUT answer against 50 wake-ups a second.
  std::chrono::milliseconds enforce_interval{20};
  // Not a limit: called once on each thread, the first time it runs a job of
  // this engine (the daemon sets up the crash handler's signal stack there).
  void (*thread_init)() = nullptr;
  // This process's incarnation (see JobId); 0: the engine draws one at
  // random. Tests set it to make two engines look like a restart.
  std::uint32_t incarnation = 0;
  // Retries and delays (scheduler.h): the most attempts a request may ask
  // for, the longest delay, and how many delayed jobs may wait at once (a
  // retry's wait is never refused: its job was accepted).
  std::uint32_t max_attempts = 100;
  std::chrono::milliseconds max_delay{std::chrono::hours(24 * 30)};
  std::size_t max_scheduled_jobs = 100000;
  // The defaults for requests that leave max_attempts or a backoff at 0,
  // and per handler name ([retry] and [retry.handlers.NAME]).
  RetryPolicy retry;
  std::vector<std::pair<std::string, RetryPolicy>> handler_retry;  // few: searched in order
  // The retry backoff's jitter, uniform in [0, 1); nullptr: a per-thread
  // PRNG. Tests fix it to check the schedule exactly.
  double (*jitter)() = nullptr;
  // Durable jobs (config [store]): whether a request that does not ask is
  // durable anyway, for every handler and per handler name
  // ([store.handlers.NAME] durable). Either needs a journal (Engine's ctor).
  bool durable = false;
  std::vector<std::pair<std::string, bool>> handler_durable;  // few: searched in order
};

// Job ids (docs/api.md, "Job ids and restarts"). A job id is
//   incarnation (top 24 bits) | sequence (low 40 bits)
// where the incarnation is a random, non-zero number drawn once per process
// and the sequence counts from 1. Ids are unique within one process; a ref
// from an earlier process (a restart, an upgrade) carries another
// incarnation, so it is told apart from this process's jobs instead of
// naming whichever new job got the same sequence number. Two processes draw
// the same incarnation with probability 2^-24. The sequence wraps after 2^40
// jobs in one process (12.7 days at a million jobs a second); results are
// kept for minutes, so only a ref held across 2^40 later jobs could then
// name a newer job. Almost all ids are above 2^53: JSON clients must not
// parse them as doubles (proto3 JSON prints uint64 as a string).
struct JobId {
  static constexpr int kSequenceBits = 40;
  static constexpr int kIncarnationBits = 24;
  static constexpr std::uint64_t kSequenceMask = (std::uint64_t{1} << kSequenceBits) - 1;
  static constexpr std::uint32_t kIncarnationMask = (std::uint32_t{1} << kIncarnationBits) - 1;
  static constexpr std::uint64_t make(std::uint32_t incarnation, std::uint64_t sequence) noexcept {
    return (std::uint64_t{incarnation & kIncarnationMask} << kSequenceBits) |
           (sequence & kSequenceMask);
  }
  static constexpr std::uint32_t incarnation(std::uint64_t id) noexcept {
    return static_cast<std::uint32_t>(id >> kSequenceBits);
  }
  // A random incarnation in [1, 2^24): std::random_device (getrandom(2)).
  static std::uint32_t draw_incarnation();
};

// The daemon's counters for one handler; plain atomics (the metrics exporter
// and AdminService.Stats read them through Engine::snapshot()).
struct HandlerCounters {
  // Set by Engine::counters_for, then read-only: a Job names its handler and
  // reaches its engine through its entry (Job::counters_).
  std::string name;
  Engine* engine = nullptr;
  std::atomic<std::uint64_t> submitted{0};
  std::atomic<std::uint64_t> succeeded{0};
  std::atomic<std::uint64_t> failed{0};
  std::atomic<std::uint64_t> cancelled{0};
  std::atomic<std::uint64_t> timed_out{0};
};

struct HandlerSnapshot {
  std::string handler;
  std::uint64_t submitted = 0, succeeded = 0, failed = 0, cancelled = 0, timed_out = 0;
};

struct EngineSnapshot {
  std::uint64_t in_flight = 0;
  std::uint64_t retained_entries = 0;
  std::uint64_t retained_bytes = 0;
  std::uint64_t rejected_invalid = 0;
  std::uint64_t rejected_not_found = 0;
  std::uint64_t rejected_full = 0;
  std::uint64_t rejected_draining = 0;
  std::uint64_t rejected_unhealthy = 0;  // an isolated plugin marked unhealthy
  std::uint64_t rejected_conflict = 0;   // idempotency key reused differently
  std::uint64_t deduplicated = 0;        // requests answered by an earlier job's key
  std::uint64_t expired = 0;             // results dropped by retention
  std::uint64_t retried = 0;             // failed attempts followed by another, ever
  std::uint64_t scheduled = 0;           // jobs waiting for their time now (delay, backoff)
  // The journal (durable jobs, D1-D6 in durable.cc); all 0 without one.
  std::uint64_t replayed = 0;       // jobs replayed from the journal at start
  std::uint64_t store_refused = 0;  // durable jobs refused because a commit failed
  // Handler calls still running cancel_grace after their job was told to
  // stop (each holds a worker until it returns). The metric
  // tpoold_handler_ignored_cancellation_total adds the host's count of calls
  // that returned OK after it; a call is in one of the two, never both.
  std::uint64_t ignored_cancellation = 0;
  std::uint64_t running_after_end = 0;  // of those, still inside their handler now
  bool draining = false;
  std::vector<HandlerSnapshot> handlers;  // sorted by name
};

// ListJobs' filter (Engine::list); empty fields match everything.
struct ListFilter {
  std::vector<JobState> states;        // any of these
  std::string handler;                 // this handler
  std::string label_key, label_value;  // a label with this key (and value, if not empty)
  std::uint64_t after_id = 0;          // paging: ids above this
  std::size_t limit = 100;
};

// A job a worker is running now (Engine::running()).
struct RunningJob {
  std::uint64_t id = 0;
  std::string handler;
  std::chrono::milliseconds running_for{0};
  // Since the deadline thread first saw the job told to stop (cancelled or
  // past its deadline); zero when it has not.
  std::chrono::milliseconds told_to_stop_for{0};
  JobState state = JobState::kRunning;  // final when the engine ended it (E4)
};

// A party that stopped submitting because the engine was full (a Stream that
// stopped reading); called once, from a thread that just ended a job, when
// there may be room again. Must not block.
class Scheduler;

class CapacityWaiter {
 public:
  virtual void on_capacity() = 0;

 protected:
  ~CapacityWaiter() = default;
};

class Engine {
 public:
  using Clock = std::chrono::steady_clock;

  // pool and host must outlive the engine. clock: retention's time source
  // (nullptr: steady_clock), injected so tests expire results without sleeping.
  // store: where retained jobs live (nullptr: an InMemoryResultStore with the
  // limits' retention bounds). journal: the durable record of durable jobs
  // (nullptr: none; a durable request is then kFailedPrecondition); it must
  // outlive the engine, and with it the job ids take its incarnation (J9),
  // not limits.incarnation. Call recover() before serving.
  Engine(Pool& pool, const plugin_host::Host& host, EngineLimits limits,
         const tpool::Clock* clock = nullptr, std::unique_ptr<ResultStore> store = nullptr,
         store::Journal* journal = nullptr);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  struct Submitted {
    JobPtr job;
    bool deduplicated = false;  // an earlier job with the same idempotency key
    // done will be called. False only for a deduplicated job that had already
    // ended: read its result now.
    bool will_notify = false;
  };
  // One request's outcome, by value (no allocation beyond the Job's own).
  struct SubmitResult {
    Submitted value;  // set when ok()
    std::optional<Error> error;
    bool ok() const noexcept { return !error.has_value(); }
  };
  // Validates, admits and submits one job: submit_batch of one item (the
  // same steps, the same messages). done(user, job) runs once when the
  // job ends (also for a deduplicated job, unless it had already ended: then
  // done is not called and the caller reads the result at once).
  // group_cancel: see Job. On error nothing was submitted. ack_by_result:
  // as for submit_batch (Execute: its reply is the job's result, so a
  // durable job is not waited for; durable.cc, D8).
  SubmitResult submit(JobSpec spec, DoneFn done, void* user,
                      const std::atomic<bool>* group_cancel = nullptr, bool ack_by_result = false);
  // A final job that was never accepted because its accept record could not
  // be committed (ack_by_result, durable.cc D8): the refusal, as submit
  // would have returned it had it waited (D6: kExhausted for a full disk,
  // kUnavailable otherwise; the job's message is its sentence). nullopt for
  // every other job, and for a job not yet final.
  static std::optional<Error> store_refusal(const Job& job);

  // The same for many requests (a Stream message, a SubmitBatch call), in
  // order (admission.cc), with one handler lookup per run of one handler name
  // and one pool submit_batch per run of unkeyed jobs of one lane; out[i] receives specs[i]'s
  // outcome (out.size() >= specs.size()). Returns how many items were
  // consumed: all of them, unless stop_when_full and an item was refused
  // for room (ErrorCode::kExhausted): then the return value is that item's
  // index, its spec (and those after it) are left intact in specs for a
  // retry, and out[return value] holds the kExhausted error.
  // ack_by_result: the caller tells its client of a job only through the
  // job's result (a Stream, an Execute): a run of durable jobs is then not waited for;
  // its jobs go to the pool from the commit's callback, and a failed commit
  // ends them FAILED with the commit's sentence (durable.cc, D8).
  //
  // committed (durable.cc, D9): the caller answers its client once the
  // call's accepts are on disk, but does not hold its thread meanwhile (a
  // Submit, a SubmitBatch). Its unkeyed, undelayed durable runs are then not
  // waited for (as with ack_by_result); committed.fn(committed.arg) runs
  // once, when every one of them has committed or failed: on the journal's
  // writer thread (it must not wait for the journal: J4), or on this thread
  // before submit_batch returns when there was nothing to wait for (no such
  // run, or no journal). out[] is complete by then; an item whose commit
  // failed holds an accepted job that is FAILED with store_refusal() set,
  // and the caller answers it with that refusal. Keyed and delayed durable
  // items are still waited for here (A5, A7).
  struct Committed {  // {} (both null): the caller waits for the commits
    void (*fn)(void* arg);
    void* arg;
  };
  std::size_t submit_batch(std::span<JobSpec> specs, DoneFn done, void* user,
                           const std::atomic<bool>* group_cancel, std::span<SubmitResult> out,
                           bool stop_when_full, bool ack_by_result = false,
                           Committed committed = {});

  // A retained job (Submit, or keyed), queued, running or ended. Without a
  // journal an id of another incarnation is kNotFound with a sentence saying
  // tpoold restarted; with one, a durable job of an earlier run is found in
  // it (D5 in durable.cc), ended or replayed.
  Expected<JobPtr> find(std::uint64_t id);
  // Replays the journal's pending jobs (accepted, not ended; J7) in
  // acceptance order, each under its own id, through the scheduler (D4 in
  // durable.cc); how many. Call once, before the first submit. No-op
  // without a journal.
  std::size_t recover();
  bool durable_enabled() const noexcept { return journal_ != nullptr; }

  // The retained jobs matching filter, by id ascending, at most
  // filter.limit; with a journal also its ended durable jobs of earlier
  // runs (D5). *more: whether a next page may hold more.
  std::vector<JobPtr> list(const ListFilter& filter, bool* more);
  // Runs an ended job again (Retry): a new job with the first one's
  // handler, payload, labels, lane, retry policy and durability, without
  // its idempotency key, retained, through the same admission as submit.
  // kFailedPrecondition for a job not ended or SUCCEEDED; kNotFound as
  // find(). done as for submit.
  SubmitResult retry(std::uint64_t id, DoneFn done, void* user);
  // This process's incarnation: the top bits of every job id it hands out.
  std::uint32_t incarnation() const noexcept { return incarnation_; }

  // The retention sweep by time; the daemon calls it about once a second.
  void expire();
  // Queues the scheduled jobs (delayed, or waiting to retry) that are due at
  // now(); how many went to the pool. The scheduler's thread does this by
  // itself with the real clock; with an injected clock tests call it after
  // advancing the clock (scheduler.h, K5).
  std::size_t run_scheduled();

  // Stop accepting jobs (kUnavailable), and end the jobs waiting in the
  // scheduler (CANCELLED, saying so): a drain waits for running jobs, not for
  // a delay or a backoff. Idempotent.
  void begin_drain();
  bool draining() const noexcept { return draining_.load(std::memory_order_acquire); }
  // Make every running handler see is_cancelled() (second signal, drain
  // timeout). Queued jobs are cancelled by the pool's kCancelPending shutdown.
  void cancel_all();
  // A call that owns a group of jobs (a Stream) was cancelled and has set
  // its flag: its jobs waiting in the scheduler (delayed, or between retry
  // attempts) end CANCELLED now rather than when due (scheduler.h, K6).
  // Queued and running ones see the flag themselves. Returns how many ended.
  std::size_t cancel_scheduled(const std::atomic<bool>* group);
  // Wait until no job is in flight; false on timeout. Call it after
  // begin_drain(): a task end wakes it only while draining (the hot path
  // takes no lock otherwise), so without a drain it returns at the timeout.
  bool wait_idle(std::chrono::nanoseconds timeout);

  // One pass of the deadline thread (E4): ends running jobs whose deadline
  // passed (TIMED_OUT) or that were cancelled cancel_grace ago and are still
  // in their handler (CANCELLED), and counts handlers that ignore
  // cancellation. Safe from any thread; tests call it with enforce_interval 0.
  void enforce() EXCLUDES(enforce_mu_);
  // The jobs of this engine that workers are running now (also those the
  // engine already ended whose handler has not returned), by id.
  std::vector<RunningJob> running() const EXCLUDES(enforce_mu_);

  // Register a waiter called once when capacity may be free (see
  // CapacityWaiter). Returns false (and does not register) when there is room
  // right now, so the caller retries immediately.
  bool wait_for_capacity(CapacityWaiter* w);

  std::uint64_t in_flight() const noexcept { return in_flight_.load(std::memory_order_relaxed); }
  EngineSnapshot snapshot() const;
  const EngineLimits& limits() const noexcept { return limits_; }

  // What rpc may know of the layers below, asked of the engine (rpc never
  // holds the pool or the plugin host itself).
  // The loaded handlers, sorted by name (ListHandlers, AdminService.Stats).
  std::vector<plugin_host::HandlerInfo> handlers() const;
  // The pool's counters and gauges (AdminService.Stats).
  PoolStats pool_stats() const;

 private:
  friend class Job;
  friend struct JobTask;
  friend class Scheduler;
  // What queue_scheduled did with a due job (scheduler.h).
  enum class Queued : std::uint8_t {
    kQueued,   // the pool has it (QUEUED)
    kNoRoom,   // no in-flight slot or pool descriptor: still SCHEDULED, wait for capacity
    kDropped,  // it had ended while held (K3), or the pool is shut down (then it ended)
  };
  Queued queue_scheduled(const JobPtr& job);
  // A failed attempt's job, now SCHEDULED (E6): to the scheduler after its backoff.
  void schedule_retry(const JobPtr& job);
  void forget_capacity_waiter(CapacityWaiter* w) EXCLUDES(capacity_mu_);
  struct Admission;  // one submit_batch call's state (admission.cc)
  HandlerCounters& counters_for(const std::string& handler) EXCLUDES(counters_mu_);
  static Error draining_error();
  static Error unknown_handler_error(const std::string& name);
  static Error conflict_error(const std::string& key, std::uint64_t first_id);
  Error inflight_error() const;
  Error scheduled_full_error() const;
  // The error for a job the pool refused; counts the rejection.
  Error pool_refused(const Status& st);
  static Lane lane_of(LaneChoice c, const plugin_host::HandlerRef& handler) noexcept;
  JobPtr make_job(JobSpec&& spec, plugin_host::HandlerRef handler, Lane lane,
                  HandlerCounters& counters, const std::atomic<bool>* group_cancel, DoneFn done,
                  void* user, Job::Clock::time_point accepted);
  void on_job_final(Job& job);  // accounting and retention once a job ended
  Clock::time_point now() const noexcept;
  std::optional<Error> validate(const JobSpec& spec) const;
  // The retry fields spec left at 0 from the handler's policy (or [retry]'s),
  // and durable from [store]'s defaults.
  void apply_retry_defaults(JobSpec& spec) const;
  // Durable jobs (durable.cc, D1-D6).
  // (D1) Appends the jobs' accept records and waits for their commit; the
  // error to answer them with when it failed.
  std::optional<Error> commit_accepted(std::span<const JobPtr> jobs);
  // (D8) The same without waiting: the jobs (admitted, stored, the task's reference held)
  // go to the pool from the commit's callback, or end FAILED if it failed.
  // (D9) One submit_batch call's acknowledgement: one count for the call
  // itself and one per run it did not wait for; the last release runs it.
  struct CallAck {
    explicit CallAck(Committed c) : to(c) {}
    std::atomic<std::size_t> pending{1};
    Committed to;
    // acq_rel: the release that runs to.fn has seen every earlier
    // releaser's writes (the call's out[], a failed run's FAILED jobs).
    void release() {
      if (pending.fetch_sub(1, std::memory_order_acq_rel) == 1) to.fn(to.arg);
    }
  };
  struct PendingRun {
    std::vector<JobPtr> jobs;
    Lane lane = Lane::kDefault;
    std::shared_ptr<CallAck> ack;  // (D9) released once the run is settled
  };
  void commit_async(std::shared_ptr<PendingRun> run);
  void on_async_commit(PendingRun& run, const Status& st);
  // (D6) The refusal for a failed commit; logs once per episode, counts n.
  Error store_error(const Status& st, std::size_t n);
  void store_ok();
  // (E1, E3) A task's in-flight slot back, waking a capacity waiter.
  void release_slot();
  // Hands jobs' tasks to the pool, each with its own token (A3), never
  // blocking (A4): how many it took (a prefix), and why not the rest.
  std::pair<std::size_t, Status> to_pool(std::span<const Task> tasks,
                                         std::span<CancelToken* const> tokens, Lane lane);
  // A durable record's request, as admission would have built it (D4, D5).
  static JobSpec spec_from_record(const store::JobRecord& r);
  // (D3) A durable job's lifecycle, appended (not waited for).
  void journal_started(const Job& job);
  void journal_retry(const Job& job, Clock::time_point due);
  void journal_ended(const Job& job);
  // (D5) A final Job standing for an ended record of the journal.
  JobPtr job_from_record(const store::JobRecord& r);
  // (D2) A durable job the pool refused after its commit: it waits in the
  // scheduler for room instead of being refused (its client has it).
  void park_committed(const JobPtr& job);
  static std::int64_t wall_ms() noexcept;
  bool ended_by_shutdown(const Job& job) const noexcept;  // (D7)
  static std::uint32_t journal_incarnation(const store::Journal& j) noexcept;
  Expected<JobPtr> find_durable(std::uint64_t id);
  JobPtr find_key_durable(std::string_view key);
  void expire_journal();
  std::vector<plugin_host::InvokeResult> run_children(Job& parent, std::string_view handler,
                                                      std::span<const std::string_view> inputs);
  // (E4) the worker's side: the job is running on this thread / has left it.
  void enter_running(const JobPtr& job);
  void leave_running(const Job& job);
  void enforce_loop() EXCLUDES(enforce_stop_mu_);
  // (E4) When the deadline thread first saw a running job told to stop
  // (steady ns; 0: not yet), by job id: a few jobs, kept out of every Job.
  std::int64_t stop_seen(const Job& job) const REQUIRES(enforce_mu_);
  void set_stop_seen(Job& job, std::int64_t ns) REQUIRES(enforce_mu_);

  Pool& pool_;
  const plugin_host::Host& host_;
  const EngineLimits limits_;
  const tpool::Clock* clock_;

  // Durable jobs (durable.cc); null: no store. Before incarnation_, which
  // comes from it (J9).
  store::Journal* const journal_;
  const std::uint32_t incarnation_;
  std::atomic<std::uint64_t> next_sequence_{1};  // relaxed: only uniqueness matters
  std::atomic<std::uint64_t> in_flight_{0};
  std::atomic<bool> draining_{false};
  std::atomic<bool> cancel_all_{false};

  // Rejections; relaxed: counters read only for reporting.
  std::atomic<std::uint64_t> rejected_invalid_{0};
  std::atomic<std::uint64_t> rejected_not_found_{0};
  std::atomic<std::uint64_t> rejected_full_{0};
  std::atomic<std::uint64_t> rejected_draining_{0};
  std::atomic<std::uint64_t> rejected_unhealthy_{0};
  std::atomic<std::uint64_t> rejected_conflict_{0};
  std::atomic<std::uint64_t> deduplicated_{0};

  // Entries are never erased: a HandlerCounters& stays valid for the
  // engine's life (Job::counters_).
  mutable Mutex counters_mu_;
  std::unordered_map<std::string, std::unique_ptr<HandlerCounters>> counters_
      GUARDED_BY(counters_mu_);

  // The result store (result_store.h) and the lock that makes an
  // idempotency key's look-up, the new job's put and its pool submit one
  // step for keyed submits (admission.cc, inv A5). Held only around a keyed
  // item, never while a job's waiters run.
  const std::unique_ptr<ResultStore> store_;
  Mutex keyed_mu_;

  Mutex idle_mu_;  // pairs idle_cv_'s wait with release()'s notify (in_flight_ is atomic)
  CondVar idle_cv_;

  // (E4) the deadline thread and what it needs.
  mutable Mutex enforce_mu_;  // serialises enforce(); guards stop_seen_
  // (E4) Entries of jobs that left the running set go at the next enforce().
  std::unordered_map<std::uint64_t, std::int64_t> stop_seen_ GUARDED_BY(enforce_mu_);
  std::atomic<std::uint64_t> ignored_cancellation_{0};
  std::atomic<std::uint64_t> running_after_end_{0};
  Mutex enforce_stop_mu_;
  CondVar enforce_stop_cv_;
  bool enforce_stop_ GUARDED_BY(enforce_stop_mu_) = false;
  std::thread enforce_thread_;

  Mutex capacity_mu_;
  std::vector<CapacityWaiter*> capacity_waiters_ GUARDED_BY(capacity_mu_);
  std::atomic<std::size_t> capacity_waiter_count_{0};

  std::atomic<std::uint64_t> retried_{0};  // relaxed: a reporting counter

  // Durable jobs (durable.cc).
  std::atomic<bool> store_failing_{false};       // (D6) one log line per episode
  std::atomic<std::uint64_t> store_refused_{0};  // relaxed: a reporting counter
  std::atomic<std::uint64_t> replayed_{0};       // relaxed: a reporting counter
  // Declared last: destroyed first, its thread stopped before the rest goes.
  std::unique_ptr<Scheduler> scheduler_;
};

inline Engine& Job::engine() const noexcept {
  return *counters_->engine;
}

inline const std::string& Job::handler_name() const noexcept {
  return counters_->name;
}

}  // namespace tpool::engine
