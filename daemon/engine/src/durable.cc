// Durable jobs: the engine's side of the journal (tpool/store/journal.h,
// J1-J9; docs/store.md).
//
// A durable job is one whose JobSpec::durable is set (the request's field, or
// the [store] defaults). The engine records it in the journal when it is
// accepted, as each attempt starts, when it waits for a retry and when it
// ends; after a crash or restart the journal's pending jobs run again. Only
// durable jobs touch the journal: a non-durable job costs nothing here.
//
// Invariants (cited as D1..D6):
//  (D1) Acknowledged after the commit. Admission (admission.cc, A8) appends
//       a run of durable jobs' accept records in one call and waits for its
//       commit (J1) before any of them is put in the result store or handed
//       to the pool, so no client learns of a durable job, and no handler
//       runs one, before it is on disk. The waiting thread is the submitting
//       call's own (a gRPC thread waits for its own acknowledgement, and for
//       nothing else's); concurrent calls' runs share a commit (J2: group
//       commit). A failed commit refuses the whole run with one error (D6),
//       and nothing of it was put anywhere.
//  (D2) A committed job is never refused: if the pool has no room for it
//       (or the in-flight limit, between the commit and the submit), it waits
//       in the scheduler as a due job (park_committed), which queues it when
//       a task ends (scheduler.h, K2). Only a drain ends it there, CANCELLED,
//       and that end is journaled like any other.
//  (D3) Lifecycle records are appended, not waited for: started (QUEUED ->
//       RUNNING, with the attempt's number), retry (RUNNING -> SCHEDULED,
//       with the attempt's message and the wall-clock time it is due),
//       ended (the final state, once, by finish()'s winner: on_job_final).
//       The journal applies them in append order (J3), after the accept. A
//       crash loses at most the records not yet committed: the job is then
//       replayed from an earlier state, never lost (at-least-once).
//  (D4) Replay (recover): every pending record (J7), in acceptance order,
//       becomes a Job under its own id, retained, SCHEDULED, and goes to the
//       scheduler, due at its not_before (now if past): the scheduler admits
//       them as in-flight slots and pool descriptors allow (K2), so a
//       journal of any size replays without refusals. A job that was RUNNING
//       at the crash keeps its attempt count (the next start is attempt + 1:
//       its handler sees a higher attempt number, J7's at-least-once), gets
//       an "interrupted" attempt message (journaled as a retry record), and
//       at least one more attempt than it has used: an interrupted attempt
//       does not use up max_attempts. A job whose handler is no longer
//       loaded ends FAILED, saying so.
//  (D5) Look-ups (find, a repeated idempotency key) see the in-memory store
//       first (it holds every live durable job: they are always retained),
//       then the journal, whose ended records stand in as final Jobs
//       (job_from_record) until the journal's own retention ends. Job ids
//       carry the journal's incarnation (J9), so an id from any earlier run
//       names the same job or none.
//  (D6) A failed commit (disk full, an I/O error) refuses the run's jobs:
//       disk full as kExhausted (RESOURCE_EXHAUSTED, retry after a second),
//       anything else as kUnavailable. It is logged once per episode (from
//       the first failure until a commit succeeds) and counted in
//       store_refused; non-durable jobs are not affected.
//  (D7) Shutdown is not an end. A durable job that ends CANCELLED while
//       tpoold drains (the scheduler closed, the pool's kCancelPending, the
//       second signal's cancel_all) without a client's Cancel is not
//       journaled as ended: it stays pending and runs after the restart, and
//       its waiters in this process hear CANCELLED with the shutdown's
//       sentence. A durable job also ignores its call's cancellation (a
//       dropped Stream): the work outlives the client's connection; Cancel
//       by id ends it.
//  (D8) A caller that acknowledges a job only through its result (a
//       Stream, an Execute: ack_by_result) does not wait for the commit:
//       its durable run is stored, counted and answered Submitted at once,
//       and handed to the pool by the commit's callback, so no handler runs
//       it and no result reaches the client before it is on disk (D1 holds:
//       the result is the acknowledgement), while the calling thread (a
//       gRPC thread) goes on: the Stream reads and commits its next message
//       meanwhile, and an Execute holds no thread while its accept commits.
//       A failed commit ends the run's jobs FAILED with D6's sentence
//       instead of refusing them, marks each with the refusal
//       (store_refusal: an Execute answers with D6's status, as a waited-for
//       submit would have), writes no end for them (they were never on
//       disk), takes them out of the result store (no Get, ListJobs or
//       repeated key finds a job that was never accepted; its caller holds
//       it), and gives their slots back. ~Engine flushes the
//       journal first, so no callback outlives the engine.
//  (D9) A caller that answers once its jobs are on disk but holds no
//       thread meanwhile (Submit, SubmitBatch: submit_batch's `committed`)
//       gets D8's treatment for its unkeyed, undelayed durable runs (stored,
//       counted, to the pool from the commit's callback), and its answer
//       from a CallAck: one count for the call, one per such run; the last
//       release (the call's end on its own thread, or a run's settling on
//       the writer thread, after its jobs went to the pool or ended FAILED)
//       runs the caller's callback, which answers each item: a job with
//       store_refusal() set is answered with that refusal, every other with
//       its JobRef. So D1 holds for these callers too (no JobRef before the
//       commit) while a gRPC thread goes on to its next call: concurrent
//       Submits share commits without one thread per commit waiting. Keyed
//       items keep D1's wait under keyed_mu_ (A5: a concurrent submit of the
//       same key must not find a job whose accept may yet fail), and a
//       delayed item keeps it too (A7).
#include <spdlog/spdlog.h>

#include <algorithm>
#include <functional>

#include "job_task.h"
#include "record_state.h"
#include "scheduler.h"
#include "tpool/engine/engine.h"
#include "tpool/store/journal.h"

namespace tpool::engine {

namespace {

// (D6) When a client refused for a full disk may try again.
constexpr std::chrono::milliseconds kFullDiskRetryAfter{1000};

store::JobRecord accept_record(const Job& job, std::int64_t now_ms) {
  store::JobRecord r;
  r.id = job.id();
  r.handler = job.handler_name();
  r.payload = job.payload();
  r.idempotency_key = job.idempotency_key();
  r.labels = job.labels();
  r.lane = static_cast<std::uint32_t>(job.requested_lane());
  r.timeout_ms = static_cast<std::uint64_t>(std::max<std::int64_t>(0, job.timeout().count()));
  r.accepted_unix_ms = now_ms;
  r.max_attempts = std::max<std::uint32_t>(1, job.max_attempts());
  r.backoff_base_ms = static_cast<std::uint32_t>(job.backoff_base().count());
  r.backoff_cap_ms = static_cast<std::uint32_t>(job.backoff_cap().count());
  r.tag = job.tag();
  if (job.delay().count() > 0) {
    r.state = store::RecordState::kScheduled;
    r.not_before_unix_ms = now_ms + job.delay().count();
  }
  return r;
}

}  // namespace

std::int64_t Engine::wall_ms() noexcept {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::uint32_t Engine::journal_incarnation(const store::Journal& j) noexcept {
  static_assert(store::kIncarnationMask <= JobId::kIncarnationMask);  // ids below 2^63
  return j.incarnation();
}

// (D1) One accept per run; the caller's thread waits for the commit.
std::optional<Error> Engine::commit_accepted(std::span<const JobPtr> jobs) {
  std::vector<store::JobRecord> records;
  records.reserve(jobs.size());
  const std::int64_t now_ms = wall_ms();
  for (const auto& j : jobs) records.push_back(accept_record(*j, now_ms));
  // On this stack until the callback has run: it notifies under the lock,
  // so the wait below cannot return (and destroy these) before it is done.
  struct Commit {
    Mutex mu;
    CondVar cv;
    bool done = false;
    Status status;
  } c;
  journal_->append_accepted(std::move(records), [&c](const Status& st) {
    MutexLock lock(c.mu);
    c.status = st;
    c.done = true;
    c.cv.notify_all();
  });
  Status st;
  {
    MutexLock lock(c.mu);
    c.cv.wait(lock, [&c] { return c.done; });
    st = c.status;
  }
  if (st.ok()) {
    store_ok();
    return std::nullopt;
  }
  return store_error(st, jobs.size());
}

void Engine::store_ok() {
  if (store_failing_.exchange(false, std::memory_order_relaxed)) {  // (D6) episode over
    spdlog::info("the job store commits again ({}); durable jobs are accepted", journal_->path());
  }
}

Error Engine::store_error(const Status& st, std::size_t n) {
  // relaxed: a reporting counter; the flag only decides who logs.
  store_refused_.fetch_add(n, std::memory_order_relaxed);
  if (!store_failing_.exchange(true, std::memory_order_relaxed)) {  // (D6) once per episode
    spdlog::error(
        "durable jobs are refused until the job store can commit again (non-durable jobs still "
        "run): {}",
        st.message());
  }
  const bool full = st.message().find("disk is full") != std::string::npos;
  std::string why =
      "the job store could not record the job, so it was not accepted: " + st.message() +
      "; retry later, or send it without durable";
  if (full) return Error{ErrorCode::kExhausted, std::move(why), kFullDiskRetryAfter};
  return Error{ErrorCode::kUnavailable, std::move(why)};
}

// (D8) A run answered through its results: accepted now, to the pool from
// the commit's callback (on the journal's writer thread: J4, it must not
// wait for the journal; a pool submit with kReject never blocks, A4).
void Engine::commit_async(std::shared_ptr<PendingRun> run) {
  std::vector<store::JobRecord> records;
  records.reserve(run->jobs.size());
  const std::int64_t now_ms = wall_ms();
  for (const auto& j : run->jobs) records.push_back(accept_record(*j, now_ms));
  journal_->append_accepted(std::move(records), [this, run = std::move(run)](const Status& st) {
    on_async_commit(*run, st);
  });
}

void Engine::on_async_commit(PendingRun& run, const Status& st) {
  if (!st.ok()) {
    // Never on disk: each job ends FAILED with the refusal's sentence (its
    // client learns it from the result), and gives its slot back.
    const Error err = store_error(st, run.jobs.size());
    for (auto& j : run.jobs) {
      j->task_reference().reset();
      j->store_refusal_.store(static_cast<std::uint8_t>(1 + static_cast<int>(err.code)),
                              std::memory_order_relaxed);  // published by finish (inv 2)
      (void)j->finish(JobState::kQueued, JobState::kFailed, {}, err.message);
      if (j->retained_) store_->remove(*j);  // no Get, ListJobs or key finds it
      release_slot();
    }
    if (run.ack) run.ack->release();  // (D9) after every job is FAILED with its refusal
    return;
  }
  store_ok();
  std::vector<Task> tasks;
  std::vector<CancelToken*> tokens;
  tasks.reserve(run.jobs.size());
  tokens.reserve(run.jobs.size());
  for (const auto& j : run.jobs) {
    tasks.push_back(Task{job_task::run, j.get()});
    tokens.push_back(&j->token_);  // (A3)
  }
  const std::size_t accepted = to_pool(tasks, tokens, run.lane).first;
  for (std::size_t k = accepted; k < run.jobs.size(); ++k) park_committed(run.jobs[k]);  // (D2)
  if (run.ack) run.ack->release();  // (D9) on disk: the caller may answer
}

std::optional<Error> Engine::store_refusal(const Job& job) {
  // Acquires the state (inv 2), which orders the relaxed load after the
  // writer's store; only D8's failed commit ends a job FAILED with a refusal.
  if (job.state() != JobState::kFailed) return std::nullopt;
  const std::uint8_t r = job.store_refusal_.load(std::memory_order_relaxed);
  if (r == 0) return std::nullopt;
  const auto code = static_cast<ErrorCode>(r - 1);
  return Error{code, std::string(job.message()),
               code == ErrorCode::kExhausted ? kFullDiskRetryAfter : std::chrono::milliseconds(0)};
}

bool Engine::ended_by_shutdown(const Job& job) const noexcept {
  return job.state() == JobState::kCancelled && draining() &&
         !job.cancel_requested_.load(std::memory_order_relaxed);
}

void Engine::journal_started(const Job& job) {
  journal_->append_started(job.id(), job.attempts());
}

void Engine::journal_retry(const Job& job, Clock::time_point due) {
  const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(due - now());
  std::vector<std::string> messages = job.attempt_messages();
  journal_->append_retry(job.id(), wall_ms() + std::max<std::int64_t>(0, wait.count()),
                         messages.empty() ? std::string() : std::move(messages.back()));
}

void Engine::journal_ended(const Job& job) {
  journal_->append_ended(job.id(), record_state(job.state()), std::string(job.output()),
                         std::string(job.message()), wall_ms());
}

// (D2) The pool refused a committed job: it waits for room in the scheduler.
void Engine::park_committed(const JobPtr& job) {
  job->task_reference().reset();
  in_flight_.fetch_sub(1, std::memory_order_relaxed);  // queue_scheduled takes one again
  if (!job->transition(JobState::kQueued, JobState::kScheduled)) return;  // ended meanwhile
  if (!scheduler_->add(job, now())) {                                     // (K4) draining
    job->end_scheduled(JobState::kCancelled, job->scheduled_message(false) +
                                                 "; tpoold is draining and the pool had no "
                                                 "room for it");
  }
}

JobSpec Engine::spec_from_record(const store::JobRecord& r) {
  JobSpec spec;
  spec.handler = r.handler;
  spec.payload = r.payload;  // to run it (D4), or for Retry (listing.cc, L2)
  spec.tag = r.tag;
  spec.idempotency_key = r.idempotency_key;
  spec.labels = r.labels;
  spec.lane = r.lane <= static_cast<std::uint32_t>(LaneChoice::kBlocking)
                  ? static_cast<LaneChoice>(r.lane)
                  : LaneChoice::kHandlerHint;
  spec.timeout = std::chrono::milliseconds(r.timeout_ms);
  spec.max_attempts = std::max<std::uint32_t>(1, r.max_attempts);
  spec.backoff_base = std::chrono::milliseconds(r.backoff_base_ms);
  spec.backoff_cap = std::chrono::milliseconds(r.backoff_cap_ms);
  spec.retain = true;
  spec.durable = true;
  return spec;
}

// (D5) An ended record as a final Job: for Get, Wait and a repeated key.
JobPtr Engine::job_from_record(const store::JobRecord& r) {
  JobSpec spec = spec_from_record(r);
  auto job =
      JobPtr::make(*this, r.id, std::move(spec), host_.find(r.handler), Lane::kDefault, nullptr);
  job->rare().recorded_accepted_unix_ms = r.accepted_unix_ms;
  // It neither waited nor ran in this process: its wait and run times are 0
  // (the journal keeps when it was accepted and ended, not how long it ran).
  job->finished_ns_.store(job->accepted_.time_since_epoch().count(), std::memory_order_relaxed);
  job->attempt_.store(r.attempt, std::memory_order_relaxed);
  {
    WordLock lock(job->mu_);
    job->outcome_ = Job::Outcome(r.output, r.message);
    if (r.max_attempts > 1 && !r.attempt_messages.empty()) {
      job->extras_locked().attempt_messages = r.attempt_messages;
    }
  }
  job->state_.store(job_state(r.state), std::memory_order_release);  // (inv 2) not yet shared
  return job;
}

Expected<JobPtr> Engine::find_durable(std::uint64_t id) {
  if (JobPtr job = store_->get(id)) return {std::move(job), std::nullopt};
  std::optional<store::JobRecord> r = journal_->get(id);
  if (r && store::is_final(r->state)) return {job_from_record(*r), std::nullopt};
  rejected_not_found_.fetch_add(1, std::memory_order_relaxed);
  if (const std::uint32_t inc = JobId::incarnation(id); inc != incarnation_) {
    return {nullptr,
            Error{ErrorCode::kNotFound,
                  "job " + std::to_string(id) + " is from another run of tpoold (incarnation " +
                      std::to_string(inc) + ", now " + std::to_string(incarnation_) +
                      ") and the job store has no record of it: it was not durable, or its "
                      "result has expired (results.retention_ms); submit the job again"}};
  }
  return {nullptr,
          Error{ErrorCode::kNotFound,
                "job " + std::to_string(id) +
                    " is unknown or its result has expired (results.retention_ms); the job "
                    "store keeps durable jobs across restarts, other jobs only while tpoold runs"}};
}

JobPtr Engine::find_key_durable(std::string_view key) {
  std::optional<store::JobRecord> r = journal_->find_key(key);
  if (!r || !store::is_final(r->state)) return nullptr;  // a live one is in store_ (D5)
  return job_from_record(*r);
}

void Engine::expire_journal() {
  if (journal_ != nullptr) journal_->expire(wall_ms());
}

// (D4)
std::size_t Engine::recover() {
  if (journal_ == nullptr) return 0;
  const std::int64_t now_ms = wall_ms();
  std::size_t n = 0;
  for (const store::JobRecord& r : journal_->recovered()) {
    plugin_host::HandlerRef handler = host_.find(r.handler);
    if (!handler) {
      journal_->append_ended(r.id, store::RecordState::kFailed, {},
                             "handler " + r.handler +
                                 " is not loaded in this tpoold (it was when the job was "
                                 "accepted): load its plugin and submit the job again",
                             now_ms);
      continue;
    }
    JobSpec spec = spec_from_record(r);
    if (r.timeout_ms != 0) spec.deadline = std::chrono::steady_clock::now() + spec.timeout;
    std::vector<std::string> history = r.attempt_messages;
    if (r.state == store::RecordState::kRunning) {
      std::string m = "attempt " + std::to_string(r.attempt) +
                      ": interrupted: tpoold stopped while it ran (a crash, kill or power loss); "
                      "it runs again";
      journal_->append_retry(r.id, 0, m);
      history.push_back(std::move(m));
      spec.max_attempts = std::max(spec.max_attempts, r.attempt + 1);
    }
    const Lane lane = lane_of(spec.lane, handler);
    auto job = JobPtr::make(*this, r.id, std::move(spec), std::move(handler), lane, nullptr);
    job->retained_ = true;
    job->durable_ = true;
    job->rare().recorded_accepted_unix_ms = r.accepted_unix_ms;
    job->attempt_.store(r.attempt, std::memory_order_relaxed);
    {
      WordLock lock(job->mu_);
      if (!history.empty()) job->extras_locked().attempt_messages = std::move(history);
    }
    job->state_.store(JobState::kScheduled, std::memory_order_relaxed);  // not yet shared
    store_->put(job);
    const auto wait =
        std::chrono::milliseconds(std::max<std::int64_t>(0, r.not_before_unix_ms - now_ms));
    if (!scheduler_->add(job, now() + wait)) {  // (K4) draining already
      job->end_scheduled(JobState::kCancelled,
                         "tpoold was draining as it started; the job was not replayed");
      continue;
    }
    job->counters_->submitted.fetch_add(1, std::memory_order_relaxed);
    ++n;
  }
  replayed_.store(n, std::memory_order_relaxed);
  if (n != 0) spdlog::info("replayed {} durable jobs from {}", n, journal_->path());
  return n;
}

}  // namespace tpool::engine
