// Engine: a job as a pool task, the job's end (accounting, retention), look-up
// by id, drain, capacity waiters. Admission (submit, submit_batch) is in
// admission.cc, the result store in result_store.cc, the running set and the
// deadline thread in running.cc, fan-out in fanout.cc.
//
// Thread safety (see also tpool/engine/job.h and admission.cc):
//  (E1) in_flight_ counts jobs whose pool task has not ended: incremented
//       before submit, decremented when the task's fn or on_cancel returns
//       (JobTask::release). So in_flight_ <= max_inflight_jobs bounds the
//       descriptors the engine's jobs hold.
//  (E2) Retained jobs and their keys live in store_ (result_store.h, S1-S4),
//       which has its own lock; the engine calls it with none of its own
//       held except keyed_mu_ (admission.cc, A5).
//  (E3) Capacity waiters: a registrar pushes itself, then reads in_flight_; a
//       task end decrements in_flight_, then reads the waiter count. Both
//       pairs are seq_cst, so at least one side sees the other (Dekker): a
//       waiter registered while jobs are in flight is always woken.
//  (E4) The running set (running.cc): a worker adds a job before calling its
//       handler and removes it after the handler returns, so the set holds
//       exactly the jobs some worker is inside. The deadline thread reads it
//       every enforce_interval and ends a job whose deadline passed
//       (TIMED_OUT) or that was cancelled and did not return within
//       cancel_grace (CANCELLED), whatever its handler does (inv 5 in job.h);
//       a handler still inside cancel_grace after its job was told to stop
//       is counted once in ignored_cancellation. A queued job is not in the
//       set: it ends when the pool dequeues it (its token) or cancels it.
//       When the thread first saw a job told to stop is kept by job id in
//       stop_seen_ (under enforce_mu_, which only that thread and running()
//       take), not in every Job; an entry goes at the first pass that no
//       longer finds its job in the set (ids are never reused).
//  (E6) Retries (scheduler.h): a worker whose attempt failed retryably with
//       attempts left moves the job RUNNING -> SCHEDULED (Job::reschedule,
//       under the job's mu_ like every finisher, so the deadline thread's
//       end of the job and the reschedule exclude each other), leaves the
//       running set, then hands the job to the scheduler; the task then
//       ends and gives back its in-flight slot (E1). The next attempt takes
//       a slot again when it is due (queue_scheduled). The waiters stay
//       registered: a job reports once, when it is final.
//  (E5) A job that never started ends with one of two sentences, whichever
//       path ended it (the pool's on_cancel, the worker's check before the
//       handler, Job::cancel, an isolated runner that did not call it: wire.h,
//       W6): Job::unstarted_message.
//  (E7) Batches for isolated handlers. Admission links the jobs of one run
//       that share an isolated handler (Job::Rare::batch_next, before any task is
//       submitted). A worker whose task starts such a job (its own CAS
//       QUEUED -> RUNNING, inv 1) also starts the linked jobs after it, each
//       by the same CAS, up to the host's batch_limit for the handler (its
//       measured job time against a budget), and hands them to the host as one
//       batch (one runner, one write). A linked job's own task, when it
//       runs later, loses that CAS and ends at once (as for a job cancelled
//       while queued); its on_cancel finds the job RUNNING and leaves it to
//       the batch. So each job is started by exactly one worker, and every
//       job a task does not start is started by the batch that took it or
//       ended by its own task: none is left. Each task still gives back its
//       own in-flight slot when it ends (E1): a batch's worker is inside its
//       own task until the batch ends, so drain (in_flight_ == 0) never
//       passes a batch still running. A job ends through the same code
//       whether it ran alone or in a batch (JobTask::complete); its wait
//       time ends when the batch took it, so its run time includes its turn
//       in the runner's queue.
#include "tpool/engine/engine.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <random>

#include "job_task.h"
#include "scheduler.h"
#include "tpool/engine/thread_job.h"
#include "tpool/store/journal.h"

namespace tpool::engine {

using plugin_host::InvokeResult;
using plugin_host::JobCode;

// The pool task of a job: ctx is the Job; the task's reference (counted by
// hold_for_task before the submit) keeps it alive until the task ends (inv 4).
struct JobTask {
  static void run(void* ctx) {
    Job& job = *static_cast<Job*>(ctx);
    JobPtr self = job.task_reference();
    Engine& e = job.engine();
    if (job.transition(JobState::kQueued, JobState::kRunning)) {
      JobPtr next = job.take_batch_next();  // this worker moved it out of QUEUED
      const std::size_t limit = next ? e.host_.batch_limit(job.handler_) : 1;
      if (limit > 1) {
        run_batch(std::move(self), std::move(next), limit);
      } else {
        const auto now = Job::Clock::now();  // the attempt's one clock read before its handler
        start(job, self, now);
        end_attempt(self, execute(job, now));
      }
    }  // else: cancelled while queued, already final, or started by a batch (inv 1, E7)
    release(e);
  }

  // The job is RUNNING (this worker's CAS): its attempt starts at `now`.
  static void start(Job& job, const JobPtr& self, Job::Clock::time_point now) {
    Engine& e = job.engine();
    job.started_ns_.store(now.time_since_epoch().count(), std::memory_order_relaxed);
    job.attempt_.fetch_add(1, std::memory_order_relaxed);  // this attempt's number
    if (job.durable_) e.journal_started(job);              // (D3)
    e.enter_running(self);                                 // (E4)
  }

  static void end_attempt(const JobPtr& self, bool again) {
    Engine& e = self->engine();
    e.leave_running(*self);
    // (E6) Handed to the scheduler only after leaving the running set, so
    // the next attempt (on any worker) never shares it with this one.
    if (again) {
      e.schedule_retry(self);
    } else {
      self->handler_ = {};  // the job has ended (complete): its generation may go
    }
  }

  // (E7) first is RUNNING (this worker's CAS); next is linked to it. Starts
  // the linked jobs this worker wins, up to the host's batch_limit, and runs
  // them all in one host call.
  static void run_batch(JobPtr first, JobPtr next, std::size_t limit) {
    std::vector<JobPtr> jobs;
    jobs.reserve(limit);
    jobs.push_back(std::move(first));
    while (next && jobs.size() < limit && next->transition(JobState::kQueued, JobState::kRunning)) {
      JobPtr after = next->take_batch_next();  // likewise
      jobs.push_back(std::move(next));
      next = std::move(after);
    }
    // Held here: a job that ends in the batch drops its own (end_attempt).
    const plugin_host::HandlerRef handler = jobs.front()->handler_;
    std::vector<plugin_host::BatchCall> calls;
    std::vector<std::size_t> of_call;  // calls[k] is jobs[of_call[k]]
    calls.reserve(jobs.size());
    of_call.reserve(jobs.size());
    const auto now = Job::Clock::now();  // every job of the batch starts here (E7)
    for (std::size_t i = 0; i < jobs.size(); ++i) {
      Job& job = *jobs[i];
      start(job, jobs[i], now);
      if (job.is_cancelled_at(now)) {  // as execute() checks before the handler
        end_unstarted(job, JobState::kRunning);
        end_attempt(jobs[i], false);
        continue;
      }
      calls.push_back({job.payload(), &job});
      of_call.push_back(i);
    }
    if (calls.empty()) return;
    Engine& e = jobs.front()->engine();
    std::vector<bool> ended(calls.size(), false);
    auto done = [&](std::size_t k, InvokeResult&& r) {
      ended[k] = true;
      const JobPtr& job = jobs[of_call[k]];
      end_attempt(job, complete(*job, std::move(r)));
    };
    try {
      e.host_.invoke_batch(handler, calls, done);
    } catch (const std::exception& ex) {  // bad_alloc building a result
      // The calls not yet given a result end now.
      for (std::size_t k = 0; k < calls.size(); ++k) {
        if (ended[k]) continue;
        InvokeResult r;
        r.code = JobCode::kInternal;
        r.message = std::string("the daemon failed while running the handler: ") + ex.what();
        done(k, std::move(r));
      }
    }
  }

  // The pool's on_cancel: the job's token fired while it was queued (cancel,
  // deadline), or the pool dropped it at shutdown. (E5)
  static void cancelled(void* ctx) {
    Job& job = *static_cast<Job*>(ctx);
    JobPtr self = job.task_reference();
    Engine& e = job.engine();
    if (end_unstarted(job, JobState::kQueued)) job.handler_ = {};  // ended here (handler_)
    release(e);
  }

  static bool end_unstarted(Job& job, JobState from) {
    const bool deadline = job.deadline_passed();
    return job.finish(from, deadline ? JobState::kTimedOut : JobState::kCancelled, {},
                      job.unstarted_message(deadline));
  }

  // Runs one attempt, started at `now`; true when the job was rescheduled
  // for another (E6).
  static bool execute(Job& job, Job::Clock::time_point now) {
    // After the pool's check: the group flag, cancel_all, a race. The
    // deadline is judged at the start stamp just taken (no second read).
    if (job.is_cancelled_at(now)) {
      end_unstarted(job, JobState::kRunning);
      return false;
    }
    InvokeResult r;
    try {
      ThreadJobScope on_thread(job.handler_name(), job.id_);  // for a crash report (T1)
      r = job.engine().host_.invoke(job.handler_, job.payload(), job);
    } catch (const std::exception& ex) {  // bad_alloc building the result
      r.code = JobCode::kInternal;
      r.message = std::string("the daemon failed while running the handler: ") + ex.what();
    }
    return complete(job, std::move(r));
  }

  // The end of one attempt whose handler returned r, alone or in a batch:
  // true when the job was rescheduled for another (E6).
  static bool complete(Job& job, InvokeResult r) {
    if (!r.started) {  // (E5) told to stop while it waited in its runner (wire.h, W6)
      end_unstarted(job, JobState::kRunning);
      return false;
    }
    const std::uint32_t attempt = job.attempts();
    const bool may_retry = job.max_attempts_ > 1;
    if (!r.ok() && may_retry && r.message.empty()) r.message = failure_sentence(job, r);
    // (E6) A retryable failure with attempts left, not cancelled, not past
    // its deadline, not draining: the job waits for its next attempt.
    if (!r.ok() && may_retry && plugin_host::is_retryable(r.code) && attempt < job.max_attempts_ &&
        !job.is_cancelled() && !job.deadline_passed() && !job.engine().draining()) {
      return job.reschedule("attempt " + std::to_string(attempt) + ": " + r.message);
    }
    JobState to = JobState::kSucceeded;
    if (!r.ok()) {
      bool stopped = r.code == JobCode::kCancelled || r.code == JobCode::kDeadlineExceeded ||
                     job.is_cancelled();
      if (stopped && job.deadline_passed()) {
        to = JobState::kTimedOut;
      } else if (stopped &&
                 (r.code == JobCode::kCancelled || r.code == JobCode::kDeadlineExceeded)) {
        to = JobState::kCancelled;
      } else {
        to = JobState::kFailed;
      }
      if (r.message.empty()) r.message = failure_sentence(job, r);
      if (may_retry) {
        // Every attempt's outcome is kept; the final message says how many ran.
        {
          WordLock lock(job.mu_);
          job.extras_locked().attempt_messages.push_back("attempt " + std::to_string(attempt) +
                                                         ": " + r.message);
        }
        const char* why = attempt >= job.max_attempts_ ? ""
                          : !plugin_host::is_retryable(r.code)
                              ? "; not retried: the handler said the failure is permanent"
                          : job.engine().draining() ? "; not retried: tpoold is draining"
                                                    : "";
        r.message += " (attempt " + std::to_string(attempt) + " of " +
                     std::to_string(job.max_attempts_) + why + ")";
      }
    }
    // A succeeded job's input is no longer needed. An ended one keeps it
    // for Retry, read-only: this worker lost the finish to the deadline
    // thread (inv 5) or wrote a failure, and touches it no more.
    if (job.finish(JobState::kRunning, to, std::move(r.output), std::move(r.message)) &&
        to == JobState::kSucceeded) {
      job.release_payload();
    }
    return false;
  }

  static std::string failure_sentence(const Job& job, const InvokeResult& r) {
    return "handler " + job.handler_name() + " failed with " +
           std::string(plugin_host::to_string(r.code)) +
           (r.plugin_status != 0 ? " (status " + std::to_string(r.plugin_status) + ")"
                                 : std::string());
  }

  static void release(Engine& e) { e.release_slot(); }
};

void Engine::release_slot() {
  // (E1, E3) seq_cst: pairs with the registrar's count increment and
  // in_flight_ load in wait_for_capacity.
  std::uint64_t left = in_flight_.fetch_sub(1, std::memory_order_seq_cst) - 1;
  if (capacity_waiter_count_.load(std::memory_order_seq_cst) != 0) {
    CapacityWaiter* w = nullptr;
    {
      MutexLock lock(capacity_mu_);
      if (!capacity_waiters_.empty()) {
        w = capacity_waiters_.front();
        capacity_waiters_.erase(capacity_waiters_.begin());
        capacity_waiter_count_.fetch_sub(1, std::memory_order_seq_cst);
      }
    }
    if (w != nullptr) w->on_capacity();
  }
  if (left == 0 && draining()) {
    MutexLock lock(idle_mu_);
    idle_cv_.notify_all();
  }
}

std::pair<std::size_t, Status> Engine::to_pool(std::span<const Task> tasks,
                                               std::span<CancelToken* const> tokens, Lane lane) {
  SubmitOptions opts;
  opts.on_cancel = job_task::cancelled;
  opts.lane = lane;
  opts.backpressure = Backpressure::kReject;  // (A4)
  if (tasks.size() == 1) {
    opts.cancel = tokens[0];  // (A3)
    Result<TaskHandle> r = pool_.submit(tasks[0], opts);
    return r.ok() ? std::pair{std::size_t{1}, Status::Ok()} : std::pair{std::size_t{0}, r.status()};
  }
  opts.cancels = tokens;  // (A3)
  Result<std::size_t> r = pool_.submit_batch(tasks, opts);
  if (!r.ok()) return {0, r.status()};
  // A batch taken in part: the rest found no room.
  return {r.value(), Status::Full("")};
}

void job_task::run(void* ctx) {
  JobTask::run(ctx);
}
void job_task::cancelled(void* ctx) {
  JobTask::cancelled(ctx);
}

Engine::Engine(Pool& pool, const plugin_host::Host& host, EngineLimits limits,
               const tpool::Clock* clock, std::unique_ptr<ResultStore> store,
               store::Journal* journal)
    : pool_(pool),
      host_(host),
      limits_(limits),
      clock_(clock),
      journal_(journal),
      incarnation_(journal != nullptr        ? journal_incarnation(*journal)  // (J9)
                   : limits.incarnation != 0 ? limits.incarnation & JobId::kIncarnationMask
                                             : JobId::draw_incarnation()),
      store_(store != nullptr
                 ? std::move(store)
                 : std::make_unique<InMemoryResultStore>(RetentionBounds{
                       limits.retention, limits.max_retained_bytes, limits.max_retained_entries})) {
  if (limits_.enforce_interval.count() > 0)
    enforce_thread_ = std::thread([this] { enforce_loop(); });
  scheduler_ = std::make_unique<Scheduler>(*this, /*thread=*/clock_ == nullptr);  // (K5)
}

std::uint32_t JobId::draw_incarnation() {
  std::random_device rd;
  std::uint32_t v = 0;
  while (v == 0) v = rd() & kIncarnationMask;  // 0 is the ids of a tpoold before incarnations
  return v;
}

Engine::~Engine() {
  // (D8) Runs the callbacks of the accepts still being committed (they hand
  // their jobs to the pool, or end them) before anything they use goes.
  if (journal_ != nullptr) (void)journal_->flush();
  forget_capacity_waiter(scheduler_.get());
  scheduler_.reset();  // its thread stops; held jobs are dropped with it
  if (!enforce_thread_.joinable()) return;
  {
    MutexLock lock(enforce_stop_mu_);
    enforce_stop_ = true;
  }
  enforce_stop_cv_.notify_all();
  enforce_thread_.join();
}

Engine::Clock::time_point Engine::now() const noexcept {
  if (clock_ == nullptr) return Clock::now();
  return Clock::time_point(std::chrono::duration_cast<Clock::duration>(clock_->now()));
}

HandlerCounters& Engine::counters_for(const std::string& handler) {
  MutexLock lock(counters_mu_);
  auto& slot = counters_[handler];
  if (!slot) {
    slot = std::make_unique<HandlerCounters>();
    slot->name = handler;
    slot->engine = this;
  }
  return *slot;
}

void Engine::on_job_final(Job& job) {
  HandlerCounters& hc = *job.counters_;
  switch (job.state()) {
    case JobState::kSucceeded:
      hc.succeeded.fetch_add(1, std::memory_order_relaxed);
      break;
    case JobState::kFailed:
      hc.failed.fetch_add(1, std::memory_order_relaxed);
      break;
    case JobState::kCancelled:
      hc.cancelled.fetch_add(1, std::memory_order_relaxed);
      break;
    case JobState::kTimedOut:
      hc.timed_out.fetch_add(1, std::memory_order_relaxed);
      break;
    default:
      break;
  }
  // (D3, D7) A job whose accept failed to commit (D8) was never on disk:
  // nothing to end there.
  if (job.durable_ && !ended_by_shutdown(job) &&
      job.store_refusal_.load(std::memory_order_relaxed) == 0) {
    journal_ended(job);
  }
  if (job.retained_) store_->ended(job, now());  // (E2, S4) its retention starts
}

void Engine::expire() {
  store_->expire(now());
  expire_journal();
}

Expected<JobPtr> Engine::find(std::uint64_t id) {
  if (journal_ != nullptr) return find_durable(id);  // (D5)
  if (const std::uint32_t inc = JobId::incarnation(id); inc != incarnation_) {
    return {nullptr,
            Error{ErrorCode::kNotFound,
                  "job " + std::to_string(id) + " is from another run of tpoold (incarnation " +
                      std::to_string(inc) + ", now " + std::to_string(incarnation_) +
                      "): tpoold restarted since this job was accepted; its result is gone, "
                      "submit the job again"}};
  }
  JobPtr job = store_->get(id);
  if (job == nullptr) {
    return {nullptr, Error{ErrorCode::kNotFound,
                           "job " + std::to_string(id) +
                               " is unknown or its result has expired (results.retention_ms); "
                               "only Submit and SubmitBatch jobs (and keyed ones) are retained"}};
  }
  return {std::move(job), std::nullopt};
}

void Engine::begin_drain() {
  draining_.store(true, std::memory_order_release);
  scheduler_->close("tpoold is draining (shutting down) and does not wait for delays or backoffs");
}

std::size_t Engine::run_scheduled() {
  return scheduler_->run_due();
}

// (E6) A failed attempt's job, RUNNING -> SCHEDULED already (Job::reschedule),
// goes to the scheduler for its backoff.
void Engine::schedule_retry(const JobPtr& job) {
  if (job->state() != JobState::kScheduled) return;  // cancelled meanwhile: it ended
  retried_.fetch_add(1, std::memory_order_relaxed);
  double u = 0;
  if (limits_.jitter != nullptr) {
    u = limits_.jitter();
  } else {
    thread_local std::minstd_rand rng{std::random_device{}()};
    u = std::uniform_real_distribution<double>(0.0, 1.0)(rng);
  }
  Clock::time_point due =
      now() + backoff_delay(job->backoff_base(), job->backoff_cap(), job->attempts(), u);
  if (job->durable_) journal_retry(*job, due);  // (D3) before the scheduler may queue it
  if (!scheduler_->add(job, due)) {             // (K4) draining
    job->end_scheduled(JobState::kCancelled,
                       job->scheduled_message(false) + "; tpoold is draining and does not retry");
  }
}

Engine::Queued Engine::queue_scheduled(const JobPtr& job) {
  if (in_flight_.fetch_add(1, std::memory_order_relaxed) >= limits_.max_inflight_jobs) {  // (E1)
    in_flight_.fetch_sub(1, std::memory_order_relaxed);
    return Queued::kNoRoom;
  }
  if (!job->transition(JobState::kScheduled, JobState::kQueued)) {  // (K3) it ended while held
    in_flight_.fetch_sub(1, std::memory_order_relaxed);
    return Queued::kDropped;
  }
  job->hold_for_task();  // (inv 4)
  const Task task{job_task::run, job.get()};
  CancelToken* const token = &job->token_;
  // (A4) the scheduler's thread never blocks
  const auto [accepted, why] = to_pool(std::span(&task, 1), std::span(&token, 1), job->lane_);
  if (accepted == 1) return Queued::kQueued;
  job->task_reference().reset();
  in_flight_.fetch_sub(1, std::memory_order_relaxed);
  if (why.code() == StatusCode::kFull && job->transition(JobState::kQueued, JobState::kScheduled)) {
    return Queued::kNoRoom;
  }
  // Shut down (or cancelled between the two moves): it ends here.
  job->finish(JobState::kQueued, JobState::kCancelled, {},
              job->scheduled_message(false) + "; the pool refused it: " + why.message());
  return Queued::kDropped;
}

void Engine::forget_capacity_waiter(CapacityWaiter* w) {
  MutexLock lock(capacity_mu_);
  auto it = std::remove(capacity_waiters_.begin(), capacity_waiters_.end(), w);
  capacity_waiter_count_.fetch_sub(static_cast<std::size_t>(capacity_waiters_.end() - it),
                                   std::memory_order_seq_cst);
  capacity_waiters_.erase(it, capacity_waiters_.end());
}

std::size_t Engine::cancel_scheduled(const std::atomic<bool>* group) {
  return scheduler_->cancel_group(group);
}

void Engine::cancel_all() {
  begin_drain();
  // relaxed: handlers poll it (Job::is_cancelled); lateness only delays a stop.
  cancel_all_.store(true, std::memory_order_relaxed);
}

bool Engine::wait_idle(std::chrono::nanoseconds timeout) {
  MutexLock lock(idle_mu_);
  return idle_cv_.wait_for(lock, timeout, [&] { return in_flight() == 0; });
}

bool Engine::wait_for_capacity(CapacityWaiter* w) {
  {
    MutexLock lock(capacity_mu_);
    capacity_waiters_.push_back(w);
    capacity_waiter_count_.fetch_add(1, std::memory_order_seq_cst);  // (E3)
  }
  if (in_flight_.load(std::memory_order_seq_cst) != 0) return true;  // (E3) a task end will call
  // Nothing in flight: no task end will come. Take the registration back,
  // unless a task end already took it (then on_capacity is on its way).
  MutexLock lock(capacity_mu_);
  auto it = std::find(capacity_waiters_.begin(), capacity_waiters_.end(), w);
  if (it == capacity_waiters_.end()) return true;
  capacity_waiters_.erase(it);
  capacity_waiter_count_.fetch_sub(1, std::memory_order_seq_cst);
  return false;
}

std::vector<plugin_host::HandlerInfo> Engine::handlers() const {
  return host_.list();
}

PoolStats Engine::pool_stats() const {
  return pool_.stats();
}

EngineSnapshot Engine::snapshot() const {
  EngineSnapshot s;
  const ResultStoreStats st = store_->stats();
  s.in_flight = in_flight();
  s.retained_entries = st.entries;
  s.retained_bytes = st.bytes;
  s.rejected_invalid = rejected_invalid_.load(std::memory_order_relaxed);
  s.rejected_not_found = rejected_not_found_.load(std::memory_order_relaxed);
  s.rejected_full = rejected_full_.load(std::memory_order_relaxed);
  s.rejected_draining = rejected_draining_.load(std::memory_order_relaxed);
  s.rejected_unhealthy = rejected_unhealthy_.load(std::memory_order_relaxed);
  s.rejected_conflict = rejected_conflict_.load(std::memory_order_relaxed);
  s.deduplicated = deduplicated_.load(std::memory_order_relaxed);
  s.expired = st.expired;
  s.ignored_cancellation = ignored_cancellation_.load(std::memory_order_relaxed);
  s.running_after_end = running_after_end_.load(std::memory_order_relaxed);
  s.retried = retried_.load(std::memory_order_relaxed);
  s.scheduled = scheduler_->size();
  s.replayed = replayed_.load(std::memory_order_relaxed);
  s.store_refused = store_refused_.load(std::memory_order_relaxed);
  s.draining = draining();
  MutexLock lock(counters_mu_);
  for (const auto& [name, c] : counters_) {
    s.handlers.push_back({name, c->submitted.load(std::memory_order_relaxed),
                          c->succeeded.load(std::memory_order_relaxed),
                          c->failed.load(std::memory_order_relaxed),
                          c->cancelled.load(std::memory_order_relaxed),
                          c->timed_out.load(std::memory_order_relaxed)});
  }
  std::sort(s.handlers.begin(), s.handlers.end(),
            [](const auto& a, const auto& b) { return a.handler < b.handler; });
  return s;
}

}  // namespace tpool::engine
