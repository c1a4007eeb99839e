// tpool::engine::Job: one accepted job, from submission to its final state.
//
// Thread safety, numbered invariants cited in job.cc and engine.cc:
//  (1) state_ moves QUEUED -> RUNNING -> final, or QUEUED -> final, and only
//      through Job::transition(from, to) (a CAS). Exactly one caller wins the
//      move to a final state; only the winner writes the result fields and
//      notifies the waiters. A job that may wait (delayed, or retried after a
//      failed attempt: scheduler.h) also moves SCHEDULED -> QUEUED (its time
//      came), SCHEDULED -> final (cancelled or shut down while waiting) and
//      RUNNING -> SCHEDULED (reschedule: an attempt failed and another may
//      run); a delayed job starts in SCHEDULED.
//  (2) The result fields (outcome_, wait/run times) are written by
//      the winner of (1) before it publishes the final state with a release
//      store (inside transition's CAS); readers check final() (acquire) before
//      reading them, and never write them.
//  (3) The waiters (first_waiter_, then extras_->more_waiters) are guarded by mu_.
//      The winner of (1) takes the list under mu_
//      after publishing the final state, so add_waiter either sees the final
//      state (and returns false) or its waiter is in the list the winner takes.
//      remove_waiter is true only if the waiter was still in the list: then
//      it will never be called.
//  (4) A Job is shared through JobPtr, an intrusive count in the Job (refs_;
//      no control block, no self-pointer): the pool task holds one reference
//      from submit until the task ends (counted by hold_for_task() before the
//      submit, taken back by task_reference() in the task, or by the
//      submitter when the pool refused it), the result store one while it
//      retains the job, each RPC one while it uses it, and the engine's
//      running set one while a worker is inside its handler (E4). The count
//      is std::shared_ptr's protocol: an increment is relaxed (whoever adds
//      a reference already holds one, which keeps the Job alive), the
//      decrement acq_rel, so every use by the other holders happens before
//      the delete by the last one.
//  (5) A job can be final while its worker is still inside the handler: the
//      engine's deadline thread moves RUNNING -> TIMED_OUT once the deadline
//      has passed, and RUNNING -> CANCELLED once a cancelled job's handler
//      has had cancel_grace to return (engine.cc, E4), through the same
//      finish(from, to) as the worker (inv 1), so exactly one of them writes
//      the result. The worker's own finish then fails and its output is
//      dropped; the task still ends only when the handler returns, so the job
//      stays in in_flight (E1) and keeps its worker until then. After the
//      handler returns the worker touches only the engine's counters, and
//      the payload only when its own finish made the job SUCCEEDED (it
//      releases it): the payload of any other ended job is read-only, kept
//      for Retry (Engine::retry reads it, and refuses a SUCCEEDED job).
//  (6) group_cancel_ belongs to the call that submitted the job and lives
//      until the job has reported (its waiters ran), no longer. A job the
//      engine ends under its handler (inv 5) may be polled afterwards, so
//      is_cancelled reads the flag only between group_readers_ increment and
//      decrement, after checking group_detached_; the engine sets
//      group_detached_ and waits for group_readers_ to drain before it ends
//      the job (detach_group). Both sides are seq_cst (Dekker): either the
//      reader sees the detach, or the engine sees the reader and waits.
//  (7) A Job's memory is recycled (Job::operator new and delete, job.cc M1-M4):
//      a Job is made on a gRPC thread and usually freed on a worker, the
//      pattern that sends glibc's malloc down its slow path (the freeing
//      thread's tcache fills, the chunk goes back to the making thread's
//      arena under its lock, the making thread's tcache stays empty). A
//      freed Job's block goes on a shared lock-free list, whole lists of
//      which the making threads take into a cache of their own; at most
//      kKeptJobBlocks blocks are kept, the rest go back to malloc.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tpool/common/mutex.h"
#include "tpool/plugin_host/host.h"
#include "tpool/pool.h"

namespace tpool::engine {

// Where a job is: one line per state saying who holds it there.
enum class JobState : std::uint8_t {
  kQueued = 0,     // accepted; a pool descriptor holds it until a worker takes it
  kRunning = 1,    // a worker is inside its handler
  kSucceeded = 2,  // final: handler returned OK; output is the result
  kFailed = 3,     // final: handler failed (or threw); message says why
  kCancelled = 4,  // final: Cancel, the client went away, or shutdown
  kTimedOut = 5,   // final: its deadline passed (queued or running)
  kScheduled = 6,  // accepted; the engine's scheduler holds it until its time (a delay, a retry)
};
inline bool is_final(JobState s) noexcept {
  return s >= JobState::kSucceeded && s <= JobState::kTimedOut;
}
std::string_view to_string(JobState s) noexcept;

// Which lane a request asked for.
enum class LaneChoice : std::uint8_t { kHandlerHint, kDefault, kBlocking };

// What every job keeps of its request: all of JobSpec but the idempotency
// key and the labels, which few requests set (a Job keeps those in a block
// of its own, only when set: docs/benchmarks.md, "Memory per job"). The
// fields of one byte and the 32-bit one come last, together.
struct JobSpecCore {
  std::string handler;
  std::string payload;
  // Absolute deadline (job timeout and call deadline, the earlier); max: none.
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
  std::uint64_t tag = 0;  // the client's correlation tag (Stream), carried through
  // Retries (scheduler.h): the most attempts (max_attempts below; 1 = no
  // retry), and the backoff before attempt n+1: uniform in
  // [0, min(cap, base * 2^(n-1))] ("full jitter"). base 0: the next attempt
  // is queued at once. A field left at 0 takes the handler's policy
  // (EngineLimits::retry, handler_retry) at admission, so max_attempts is
  // >= 1 from then on.
  std::chrono::milliseconds backoff_base{0};
  std::chrono::milliseconds backoff_cap{0};
  // A delayed job: the first attempt is queued this long after acceptance
  // (0: at once). The job is SCHEDULED until then.
  std::chrono::milliseconds delay{0};
  // The request's own timeout (0: none), kept for a replay's new deadline;
  // deadline above is what this run enforces.
  std::chrono::milliseconds timeout{0};
  std::uint32_t max_attempts = 0;  // see the retries above
  LaneChoice lane = LaneChoice::kHandlerHint;
  // Keep the job in the result store for Wait/Get/Cancel (Submit). A job with
  // an idempotency key is always retained.
  bool retain = false;
  // Durable (docs/store.md): acknowledged only once the journal committed
  // it, replayed after a restart. Admission ORs in the [store] defaults.
  bool durable = false;
};

using Labels = std::vector<std::pair<std::string, std::string>>;

// A request, free of protocol types.
struct JobSpec : JobSpecCore {
  std::string idempotency_key;
  Labels labels;
};

class Job;
class Engine;
class Scheduler;
struct HandlerCounters;

// An owning reference to a Job (inv 4): std::shared_ptr's interface, less
// what the engine never used (weak references, aliasing, custom deleters),
// with the count inside the Job. 8 bytes, and a Job is one allocation of
// sizeof(Job) (docs/benchmarks.md, "Memory per job").
class JobPtr {
 public:
  constexpr JobPtr() noexcept = default;
  constexpr JobPtr(std::nullptr_t) noexcept {}  // NOLINT: converts like shared_ptr
  JobPtr(const JobPtr& other) noexcept;
  JobPtr(JobPtr&& other) noexcept : p_(std::exchange(other.p_, nullptr)) {}
  JobPtr& operator=(const JobPtr& other) noexcept {
    JobPtr(other).swap(*this);
    return *this;
  }
  JobPtr& operator=(JobPtr&& other) noexcept {
    JobPtr(std::move(other)).swap(*this);
    return *this;
  }
  ~JobPtr();

  // A new Job with one reference, this one.
  template <class... Args>
  static JobPtr make(Args&&... args);

  Job* get() const noexcept { return p_; }
  // The references to the job now, the task's included (0 for null). A
  // snapshot, for tests and reports, as std::shared_ptr::use_count.
  std::uint32_t use_count() const noexcept;
  Job& operator*() const noexcept { return *p_; }
  Job* operator->() const noexcept { return p_; }
  explicit operator bool() const noexcept { return p_ != nullptr; }
  void reset() noexcept { JobPtr().swap(*this); }
  void swap(JobPtr& other) noexcept { std::swap(p_, other.p_); }
  friend bool operator==(const JobPtr& a, const JobPtr& b) noexcept { return a.p_ == b.p_; }
  friend bool operator==(const JobPtr& a, std::nullptr_t) noexcept { return a.p_ == nullptr; }

 private:
  friend class Job;
  struct Adopt {};
  JobPtr(Job* p, Adopt) noexcept : p_(p) {}  // takes over a counted reference
  Job* p_ = nullptr;
};

// Called once when a job reaches its final state, on the thread that ended it
// (a pool worker, the thread that cancelled a queued job, or the engine's
// deadline thread for a job it ended under its handler, inv 5). Must not
// block.
using DoneFn = void (*)(void* user, Job& job);

class Job final : public plugin_host::JobServices {
 public:
  using Clock = std::chrono::steady_clock;

  std::uint64_t id() const noexcept { return id_; }
  // The engine that accepted the job (its handler entry's: engine.h).
  Engine& engine() const noexcept;
  // What the job keeps of its request (JobSpecCore, in less room: below).
  const std::string& handler_name() const noexcept;  // its handler entry's (engine.h)
  std::string_view payload() const noexcept { return payload_.view(payload_size_); }
  std::uint64_t tag() const noexcept { return tag_; }
  std::uint32_t max_attempts() const noexcept { return max_attempts_; }
  std::chrono::milliseconds backoff_base() const noexcept {
    return std::chrono::milliseconds(backoff_base_ms_);
  }
  std::chrono::milliseconds backoff_cap() const noexcept {
    return std::chrono::milliseconds(backoff_cap_ms_);
  }
  std::chrono::milliseconds delay() const noexcept { return std::chrono::milliseconds(delay_ms_); }
  std::chrono::milliseconds timeout() const noexcept { return timeout_; }  // the request's own
  LaneChoice requested_lane() const noexcept { return requested_lane_; }
  bool durable_requested() const noexcept { return durable_requested_; }
  // The absolute deadline (the job's timeout and its call's, the earlier),
  // Clock::time_point::max() for none: the cancel token's.
  Clock::time_point deadline() const noexcept;
  // The request back as a JobSpecCore (copies of its handler and payload).
  JobSpecCore request() const;
  const std::string& idempotency_key() const noexcept;  // empty: none
  const Labels& labels() const noexcept;
  Lane lane() const noexcept { return lane_; }
  JobState state() const noexcept { return state_.load(std::memory_order_acquire); }  // (inv 2)
  bool final() const noexcept { return is_final(state()); }

  // Valid once final() (inv 2), for as long as the caller holds the Job.
  std::string_view output() const noexcept { return outcome_.output(); }
  std::string_view message() const noexcept { return outcome_.message(); }
  std::chrono::microseconds wait_time() const noexcept;  // so far, while queued
  std::chrono::microseconds run_time() const noexcept;   // so far, while running
  // When the job was accepted, on the wall clock (derived from the steady
  // acceptance time, so accepting a job reads one clock).
  std::chrono::system_clock::time_point accepted_wall() const noexcept;
  std::pair<double, std::string> progress_snapshot() const;
  // Attempts started so far (0 while the first has not started).
  std::uint32_t attempts() const noexcept { return attempt_.load(std::memory_order_relaxed); }
  // Each ended attempt's message, oldest first, for a job that may retry
  // (max_attempts > 1); empty otherwise.
  std::vector<std::string> attempt_messages() const EXCLUDES(mu_);
  // Bytes this job holds in the result store.
  std::size_t retained_bytes() const noexcept;

  // Registers fn(user, *this) to run when the job ends; false if it already
  // has (then fn is not called: read the result now). (inv 3)
  bool add_waiter(DoneFn fn, void* user) EXCLUDES(mu_);
  // True if the waiter was removed before being called (it never will be).
  bool remove_waiter(DoneFn fn, void* user) EXCLUDES(mu_);

  // Requests cancellation. A queued job ends CANCELLED at once (TIMED_OUT if
  // its deadline has passed: deadline_passed() looks at the deadline, not at
  // the token, so a cancel after the deadline never hides it); a running one
  // sees is_cancelled() and ends when its handler returns, or cancel_grace
  // later without it (the engine's deadline thread, inv 5).
  void cancel();

  // plugin_host::JobServices
  bool is_cancelled() const noexcept override;
  // is_cancelled() with the deadline judged at `now`, a reading the caller
  // has just taken (the attempt's start stamp): no clock read of its own.
  bool is_cancelled_at(Clock::time_point now) const noexcept;
  std::optional<std::chrono::nanoseconds> remaining() const noexcept override;
  bool deadline_passed() const noexcept override;
  void log(plugin_host::LogLevel level, std::string_view message) noexcept override;
  void progress(double fraction, std::string_view note) noexcept override;
  std::vector<plugin_host::InvokeResult> run_children(
      std::string_view handler, std::span<const std::string_view> inputs) override;
  bool claim_ignored_cancellation() noexcept override;
  std::uint32_t attempt() const noexcept override { return std::max<std::uint32_t>(1, attempts()); }

  // first_waiter: the submitting call's DoneFn (may be {nullptr, nullptr});
  // accepted: when its wait starts (admission reads the clock once per call).
  // counters: the engine's entry for spec.handler (Engine::counters_for),
  // looked up here when null.
  Job(Engine& engine, std::uint64_t id, JobSpec spec, plugin_host::HandlerRef handler, Lane lane,
      const std::atomic<bool>* group_cancel, std::pair<DoneFn, void*> first_waiter = {},
      Clock::time_point accepted = Clock::now(), HandlerCounters* counters = nullptr);
  ~Job() override;
  Job(const Job&) = delete;
  Job& operator=(const Job&) = delete;

  // (inv 7) A Job's block from the recycled ones when there is one.
  static void* operator new(std::size_t size);
  static void operator delete(void* p) noexcept;
  // The most freed Jobs' blocks kept for reuse (~850 KB); false when the
  // build does not recycle (AddressSanitizer: a freed Job's block is
  // malloc's, so a use after free is caught).
  static constexpr std::size_t kKeptJobBlocks = 4096;
  static const bool kRecyclesMemory;
  // Blocks kept now (on the shared list and in the threads' caches).
  static std::size_t kept_blocks_for_testing() noexcept;

 private:
  friend class Engine;
  // is_cancelled's checks after the token's: the call's group, cancel_all.
  bool group_or_all_cancelled() const noexcept;
  // (inv 1) CAS from -> to; the only way state_ changes.
  bool transition(JobState from, JobState to) noexcept;
  // Moves the job from `from` to the final state `to` with the given result;
  // false if it was not in `from` (another caller moved it first) (inv 1).
  bool finish(JobState from, JobState to, std::string_view output, std::string_view message)
      EXCLUDES(mu_);
  // (inv 1) RUNNING -> SCHEDULED after a failed attempt that may be retried,
  // keeping the attempt's message; false if the job is no longer RUNNING
  // (the deadline thread ended it, inv 5). The waiters stay registered.
  bool reschedule(std::string attempt_message) EXCLUDES(mu_);
  // Ends a SCHEDULED job (cancelled, or shut down) with the sentence for
  // where it was; false if it was not SCHEDULED.
  bool end_scheduled(JobState to, std::string message) EXCLUDES(mu_);
  // (inv 6) Stop reading group_cancel_ (it reads as cancelled from now on),
  // and wait until no reader is inside it. Before the engine ends a job whose
  // handler is still running.
  void detach_group() noexcept;
  // (E5 in engine.cc) The one sentence for a job that ended before its
  // handler ran: past its deadline, or cancelled.
  std::string unstarted_message(bool deadline) const;
  // The sentence for a SCHEDULED job that ends before its next attempt:
  // unstarted_message for a delayed job, else naming the last failure.
  std::string scheduled_message(bool deadline) const EXCLUDES(mu_);

  // (A1 in admission.cc) The request back, whole, for a refused item the
  // caller may submit again; the job is not used after.
  JobSpec take_spec() noexcept;

  // A payload of up to kInline bytes lives in the Job, a longer one in a
  // heap block of its own; the size is the Job's payload_size_ (among the
  // four-byte fields, so the class is 16 bytes with no padding). A 16-byte
  // payload costs no allocation (a std::string's 32 bytes keep 15 inline and
  // allocate a 32-byte chunk past that: docs/benchmarks.md, "Memory per
  // job").
  class PayloadBytes {
   public:
    static constexpr std::size_t kInline = 16;
    PayloadBytes() noexcept : heap_(nullptr) {}
    ~PayloadBytes() = default;  // the Job frees a heap block (release)
    PayloadBytes(const PayloadBytes&) = delete;
    PayloadBytes& operator=(const PayloadBytes&) = delete;
    void assign(std::string_view v);  // on an empty one
    std::string_view view(std::uint32_t size) const noexcept {
      return {size <= kInline ? inline_ : heap_, size};
    }
    void release(std::uint32_t size) noexcept {
      if (size > kInline) delete[] heap_;
      heap_ = nullptr;
    }

   private:
    union {
      char inline_[kInline];
      char* heap_;
    };
  };

  const std::uint64_t id_;
  // What the job keeps of its request, JobSpecCore in fewer bytes
  // (docs/benchmarks.md, "Memory per job"): the handler's name is its
  // counters entry's (counters_), the deadline its token's, the payload
  // inline when short, the retry and delay policy 32-bit milliseconds (every
  // source fits: the proto's uint32 fields, the config's hour, the 30-day
  // delay limit); the rest among the four- and one-byte fields below.
  PayloadBytes payload_;  // payload_size_ bytes; released after success (inv 5)
  // The payload's heap block, if any, goes; payload() is empty from then on.
  void release_payload() noexcept {
    payload_.release(payload_size_);
    payload_size_ = 0;
  }
  std::uint64_t tag_;
  std::chrono::milliseconds timeout_;
  // What few jobs have: the request's idempotency key and labels, the
  // payload's hash that a repeat of the key is checked against, the time a
  // job rebuilt from the journal was first accepted, and the next job of an
  // isolated handler's batch. Null for most jobs (docs/benchmarks.md, "Memory
  // per job"): made by the constructor when the request has a key or labels,
  // else by rare() for the first of the others set. Written only before the
  // job is shared (submitted, stored or returned), read-only after.
  struct Rare {
    std::string idempotency_key;
    Labels labels;
    // Idempotency: a repeat of the key must name the same handler and
    // payload; the payload itself is released once the handler has run. Set
    // by the constructor for a job with a key; 0 without one.
    std::size_t payload_hash = 0;
    // A job rebuilt from a journal record (durable.cc, D4 replay, D5 an ended
    // record): when it was first accepted, wall-clock ms; 0 = accepted_ is.
    std::int64_t recorded_accepted_unix_ms = 0;
    // (E7 in engine.cc) The next job of the same admission run for the same
    // isolated handler, if any: the worker that starts this job may start
    // that one too and send both to one runner. A reference, taken when this
    // job starts or dropped when it ends unstarted (take_batch_next): so it
    // keeps the next job alive only while this one waits, which the next
    // job's own task does anyway. The only write to Rare after the job is
    // shared, by the one thread that won that move (inv 1).
    JobPtr batch_next;
  };
  std::unique_ptr<Rare> rare_;
  Rare& rare() {  // before the job is shared only
    if (!rare_) rare_ = std::make_unique<Rare>();
    return *rare_;
  }
  std::size_t payload_hash() const noexcept { return rare_ ? rare_->payload_hash : 0; }
  // (E7) The link, taken by the one thread that starts the job (its CAS
  // QUEUED -> RUNNING, inv 1), or dropped by finish() of a job that ends
  // without starting (from QUEUED or SCHEDULED): one owner at a time.
  JobPtr take_batch_next() noexcept { return rare_ ? std::move(rare_->batch_next) : nullptr; }
  // The handler of the job's registry generation. Dropped (reset) once the
  // job has ended, by the one thread that may still use it: the worker whose
  // attempt ended it (JobTask::end_attempt), or the thread that ended it
  // while queued (Job::cancel, the pool's on_cancel). So a generation a reload
  // replaced (its libraries, its runners: plugin_host::IsolatedPlugin) lives
  // as long as its unfinished jobs, not as long as their retained results.
  // Nothing reads it after the job ended (Retry submits anew by name).
  plugin_host::HandlerRef handler_;
  // Set by the call that owns a group of jobs (a Stream): cancelling the call
  // cancels them all. May be null. Outlives the job's report (inv 6).
  const std::atomic<bool>* group_cancel_;
  CancelToken token_;
  const Clock::time_point accepted_;
  std::atomic<std::int64_t> started_ns_{0};   // relaxed: a timing figure only
  std::atomic<std::int64_t> finished_ns_{0};  // relaxed: a timing figure only
  // (inv 2) The result's output and message in one block, made by the
  // finisher (null when both are empty, as while the job is in flight): 8
  // bytes in every job instead of two strings' 64, and one allocation of
  // 8 + their sizes for a retained result instead of 64 inline plus each
  // string's own heap block past 15 bytes (docs/benchmarks.md, "Memory per
  // job").
  class Outcome {
   public:
    Outcome() = default;
    Outcome(std::string_view output, std::string_view message);
    std::string_view output() const noexcept;
    std::string_view message() const noexcept;
    std::size_t bytes() const noexcept { return output().size() + message().size(); }

   private:
    // [uint32 output size][uint32 message size][output][message]
    std::unique_ptr<char[]> block_;
  };
  Outcome outcome_;

  // Most jobs have exactly one waiter (the call that submitted them): it
  // lives inline, so a job allocates nothing for it. (inv 3)
  std::pair<DoneFn, void*> first_waiter_ GUARDED_BY(mu_){nullptr, nullptr};
  // What few jobs use: more waiters, a progress report, the messages of
  // failed attempts. In a block of its own, made under mu_ by the first
  // write that needs it (extras_locked), so a job that uses none of it is 80
  // bytes smaller (docs/benchmarks.md, "Memory per job"); null reads as
  // empty.
  struct Extras {
    std::vector<std::pair<DoneFn, void*>> more_waiters;  // (inv 3)
    double progress = 0;
    std::string progress_note;
    std::vector<std::string> attempt_messages;
  };
  std::unique_ptr<Extras> extras_ GUARDED_BY(mu_);
  Extras& extras_locked() REQUIRES(mu_) {
    if (!extras_) extras_ = std::make_unique<Extras>();
    return *extras_;
  }

  // (inv 4) The pool task's reference: counted before the submit, taken
  // back as a JobPtr by the task (or by the submitter when the pool refused
  // it, or never took it).
  void hold_for_task() noexcept { refs_.fetch_add(1, std::memory_order_relaxed); }
  JobPtr task_reference() noexcept { return JobPtr(this, JobPtr::Adopt{}); }
  // This handler's entry in the engine: its counters, its name, the engine
  // (entries are never erased, so the pointer stays valid for the engine's
  // life). Set by the constructor, never null.
  HandlerCounters* counters_;

  // The fields of four bytes and of one, together after everything wider,
  // so no padding falls between them (docs/benchmarks.md, "Memory per
  // job"). Each is initialised by default or by the constructor from its
  // parameters, never from another member.
  // mu_ also serialises the finishers (inv 1); outcome_ is written under it
  // but read without it once final() (inv 2), so it is not GUARDED_BY it.
  // One word, not a std::mutex's 40 bytes (docs/benchmarks.md, "Memory per
  // job"): its critical sections are a few stores, and no condition variable
  // waits on it. Here, among the four-byte fields, for the layout (the
  // annotations above may name a member declared later).
  mutable WordMutex mu_;
  mutable std::atomic<std::uint32_t> group_readers_{0};  // (inv 6)
  // (inv 4) The references: JobPtr's, and the task's (hold_for_task).
  mutable std::atomic<std::uint32_t> refs_{0};
  // Attempts started: incremented by the worker as an attempt starts
  // (QUEUED -> RUNNING); relaxed: a figure, and the worker's own reads are
  // program-ordered.
  std::atomic<std::uint32_t> attempt_{0};
  // The request's (above): its payload's size, retry policy and delay.
  std::uint32_t payload_size_ = 0;
  const std::uint32_t max_attempts_;
  const std::uint32_t backoff_base_ms_;
  const std::uint32_t backoff_cap_ms_;
  const std::uint32_t delay_ms_;
  const Lane lane_;
  const LaneChoice requested_lane_;
  const bool retain_requested_;
  const bool durable_requested_;
  std::atomic<bool> group_detached_{false};  // (inv 6)
  std::atomic<JobState> state_{JobState::kQueued};
  bool retained_ = false;  // set before submission, then read-only
  bool durable_ = false;   // set before submission, then read-only (durable.cc)
  // Set by cancel() (a client's Cancel), never cleared: a durable job that
  // ends CANCELLED while tpoold drains is journaled as ended only if a
  // client asked (durable.cc, D7). relaxed: read by the thread that ends the
  // job, which the cancel itself caused or which saw the token.
  std::atomic<bool> cancel_requested_{false};
  // Whether the handler call was counted as ignoring cancellation, by the
  // engine (it overstayed cancel_grace) or by the host (it returned OK after
  // cancellation), whichever came first: exchanged to true by the counter,
  // so the call is counted once. relaxed: the flag itself is all it orders.
  std::atomic<bool> ignored_claimed_{false};
  // (D8 in durable.cc) Why a job answered through its result was never
  // accepted: 0, or 1 + the ErrorCode of the failed commit's refusal
  // (Engine::store_refusal). Stored by the journal's writer thread just
  // before it tries to end the job FAILED, and read only once the job is
  // final and FAILED: relaxed, because finish() publishes the state with
  // release and the reader acquires it (inv 2). If another end won (a
  // client's Cancel before the commit failed), the job is not FAILED and the
  // field is not read, so its late store is harmless. on_job_final also
  // reads it, to write no end for a job never on disk: on the writer thread
  // that stored it when that thread ends the job; a canceller that won may
  // read 0 and write an end the journal refuses (no such job), or read the
  // late store and skip it: either leaves the file right.
  std::atomic<std::uint8_t> store_refusal_{0};
  friend struct JobTask;
  friend class Scheduler;
  friend class JobPtr;
};

inline JobPtr::JobPtr(const JobPtr& other) noexcept : p_(other.p_) {
  if (p_ != nullptr) p_->refs_.fetch_add(1, std::memory_order_relaxed);  // (inv 4)
}

inline std::uint32_t JobPtr::use_count() const noexcept {
  return p_ == nullptr ? 0 : p_->refs_.load(std::memory_order_relaxed);
}

inline JobPtr::~JobPtr() {
  // (inv 4) acq_rel: this holder's uses before the decrement, and the
  // others' before theirs, happen before the delete.
  if (p_ != nullptr && p_->refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete p_;
}

template <class... Args>
JobPtr JobPtr::make(Args&&... args) {
  Job* j = new Job(std::forward<Args>(args)...);
  j->refs_.store(1, std::memory_order_relaxed);  // not shared yet
  return JobPtr(j, Adopt{});
}

}  // namespace tpool::engine
