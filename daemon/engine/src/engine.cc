// Engine: admission, submission as pool tasks, the result store, drain.
//
// Thread safety (see also tpool/engine/job.h):
//  (E1) in_flight_ counts jobs whose pool task has not ended: incremented
//       before submit, decremented when the task's fn or on_cancel returns
//       (JobTask::release). So in_flight_ <= max_inflight_jobs bounds the
//       descriptors the engine's jobs hold.
//  (E2) retained_, keys_, ended_ and retained_bytes_ are guarded by store_mu_.
//       A key maps to a job that is in retained_; eviction removes both.
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
#include "tpool/engine/engine.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <functional>
#include <random>

#include "tpool/engine/thread_job.h"

namespace tpool::engine {

using plugin_host::InvokeResult;
using plugin_host::JobCode;

// The pool task of a job: ctx is the Job; the Job's self_ keeps it alive
// until the task ends (inv 4).
struct JobTask {
  static void run(void* ctx) {
    Job& job = *static_cast<Job*>(ctx);
    std::shared_ptr<Job> self = std::move(job.self_);
    Engine& e = job.engine_;
    if (job.transition(JobState::kQueued, JobState::kRunning)) {
      job.started_ns_.store(std::chrono::steady_clock::now().time_since_epoch().count(),
                            std::memory_order_relaxed);
      e.enter_running(self);  // (E4)
      execute(job);
      e.leave_running(job);
    }  // else: cancelled while queued, already final (inv 1)
    release(e);
  }

  static void cancelled(void* ctx) {
    Job& job = *static_cast<Job*>(ctx);
    std::shared_ptr<Job> self = std::move(job.self_);
    Engine& e = job.engine_;
    if (job.token_.reason() == CancelToken::Reason::kDeadline) {
      job.finish(JobState::kQueued, JobState::kTimedOut, {},
                 "job " + std::to_string(job.id_) + " (" + job.spec_.handler +
                     ") timed out while queued; raise its timeout or the call's deadline, or "
                     "submit less at once");
    } else {
      job.finish(JobState::kQueued, JobState::kCancelled, {},
                 "job " + std::to_string(job.id_) +
                     " was cancelled before it started (cancel request or daemon shutdown)");
    }
    release(e);
  }

  static void execute(Job& job) {
    if (job.is_cancelled()) {
      bool deadline = job.deadline_passed();
      job.finish(JobState::kRunning, deadline ? JobState::kTimedOut : JobState::kCancelled, {},
                 deadline ? "job " + std::to_string(job.id_) + " timed out before it started"
                          : "job " + std::to_string(job.id_) + " was cancelled before it started");
      return;
    }
    InvokeResult r;
    try {
      ThreadJobScope on_thread(job.spec_.handler, job.id_);  // for a crash report (T1)
      r = job.engine_.host_.invoke(job.handler_, job.spec_.payload, job);
    } catch (const std::exception& ex) {  // bad_alloc building the result
      r.code = JobCode::kInternal;
      r.message = std::string("the daemon failed while running the handler: ") + ex.what();
    }
    std::string{}.swap(job.spec_.payload);  // the input is no longer needed
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
      if (r.message.empty()) {
        r.message = "handler " + job.spec_.handler + " failed with " +
                    std::string(plugin_host::to_string(r.code)) +
                    (r.plugin_status != 0 ? " (status " + std::to_string(r.plugin_status) + ")"
                                          : std::string());
      }
    }
    job.finish(JobState::kRunning, to, std::move(r.output), std::move(r.message));
  }

  static void release(Engine& e) {
    // (E1, E3) seq_cst: pairs with the registrar's count increment and
    // in_flight_ load in wait_for_capacity.
    std::uint64_t left = e.in_flight_.fetch_sub(1, std::memory_order_seq_cst) - 1;
    if (e.capacity_waiter_count_.load(std::memory_order_seq_cst) != 0) {
      CapacityWaiter* w = nullptr;
      {
        std::lock_guard lock(e.capacity_mu_);
        if (!e.capacity_waiters_.empty()) {
          w = e.capacity_waiters_.front();
          e.capacity_waiters_.erase(e.capacity_waiters_.begin());
          e.capacity_waiter_count_.fetch_sub(1, std::memory_order_seq_cst);
        }
      }
      if (w != nullptr) w->on_capacity();
    }
    if (left == 0 && e.draining()) {
      std::lock_guard lock(e.idle_mu_);
      e.idle_cv_.notify_all();
    }
  }
};

Engine::Engine(Pool& pool, const plugin_host::Host& host, EngineLimits limits,
               const tpool::Clock* clock)
    : pool_(pool),
      host_(host),
      limits_(limits),
      clock_(clock),
      incarnation_(limits.incarnation != 0 ? limits.incarnation & JobId::kIncarnationMask
                                           : JobId::draw_incarnation()) {
  if (limits_.enforce_interval.count() > 0)
    enforce_thread_ = std::thread([this] { enforce_loop(); });
}

std::uint32_t JobId::draw_incarnation() {
  std::random_device rd;
  std::uint32_t v = 0;
  while (v == 0) v = rd() & kIncarnationMask;  // 0 is the ids of a tpoold before incarnations
  return v;
}

Engine::~Engine() {
  if (!enforce_thread_.joinable()) return;
  {
    std::lock_guard lock(enforce_stop_mu_);
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
  {
    std::shared_lock lock(counters_mu_);
    auto it = counters_.find(handler);
    if (it != counters_.end()) return *it->second;
  }
  std::unique_lock lock(counters_mu_);
  auto& slot = counters_[handler];
  if (!slot) slot = std::make_unique<HandlerCounters>();
  return *slot;
}

std::optional<Error> Engine::validate(const JobSpec& spec) const {
  if (spec.handler.empty()) {
    return Error{ErrorCode::kInvalidArgument,
                 "the request names no handler; set JobRequest.handler (ListHandlers lists them)"};
  }
  if (spec.payload.size() > limits_.max_payload_bytes) {
    return Error{ErrorCode::kInvalidArgument,
                 "the payload is " + std::to_string(spec.payload.size()) +
                     " bytes, over the limit of " + std::to_string(limits_.max_payload_bytes) +
                     " (server.max_payload_bytes); send less or raise the limit"};
  }
  if (spec.idempotency_key.size() > 256) {
    return Error{ErrorCode::kInvalidArgument, "the idempotency key is " +
                                                  std::to_string(spec.idempotency_key.size()) +
                                                  " bytes; use at most 256"};
  }
  if (spec.labels.size() > 32) {
    return Error{
        ErrorCode::kInvalidArgument,
        "the request has " + std::to_string(spec.labels.size()) + " labels; use at most 32"};
  }
  for (const auto& [k, v] : spec.labels) {
    if (k.size() > 256 || v.size() > 256) {
      return Error{ErrorCode::kInvalidArgument,
                   "label '" + k.substr(0, 64) + "' is longer than 256 bytes; shorten it"};
    }
  }
  return std::nullopt;
}

namespace {

Engine::SubmitResult rejected(std::atomic<std::uint64_t>& counter, Error e) {
  counter.fetch_add(1, std::memory_order_relaxed);
  return {{}, std::move(e)};
}

}  // namespace

Error Engine::draining_error() {
  return {ErrorCode::kUnavailable,
          "tpoold is draining and accepts no new jobs; send the job to another instance or retry "
          "after the restart"};
}

Error Engine::unknown_handler_error(const std::string& name) {
  return {ErrorCode::kNotFound, "no handler named '" + name.substr(0, 128) +
                                    "' is loaded; ListHandlers lists the loaded ones"};
}

Error Engine::inflight_error() const {
  return {ErrorCode::kExhausted,
          std::to_string(limits_.max_inflight_jobs) +
              " jobs are in flight (server.max_inflight_jobs); retry after the hinted delay or "
              "raise the limit",
          std::chrono::milliseconds(50)};
}

Error Engine::pool_refused(const Status& st) {
  if (st.code() == StatusCode::kShutdown) {
    rejected_draining_.fetch_add(1, std::memory_order_relaxed);
    return {ErrorCode::kUnavailable,
            "tpoold is shutting down and accepts no new jobs; retry against another instance or "
            "after the restart"};
  }
  if (st.code() == StatusCode::kInvalidArgument) {  // e.g. a lane this pool lacks
    rejected_invalid_.fetch_add(1, std::memory_order_relaxed);
    return {ErrorCode::kInvalidArgument, "the pool refused the job: " + st.message()};
  }
  rejected_full_.fetch_add(1, std::memory_order_relaxed);
  return {ErrorCode::kExhausted,
          "the pool has no free task slot (" + st.message() + "); retry after the hinted delay",
          std::chrono::milliseconds(50)};
}

Lane Engine::lane_of(LaneChoice c, const plugin_host::HandlerRef& handler) noexcept {
  return c == LaneChoice::kHandlerHint ? handler.lane()
         : c == LaneChoice::kBlocking  ? Lane::kBlocking
                                       : Lane::kDefault;
}

std::shared_ptr<Job> Engine::make_job(JobSpec&& spec, plugin_host::HandlerRef handler, Lane lane,
                                      HandlerCounters& counters,
                                      const std::atomic<bool>* group_cancel, DoneFn done,
                                      void* user) {
  const std::size_t hash =
      spec.idempotency_key.empty() ? 0 : std::hash<std::string_view>{}(spec.payload);
  const bool retain = spec.retain || !spec.idempotency_key.empty();
  const std::uint64_t id =
      JobId::make(incarnation_, next_sequence_.fetch_add(1, std::memory_order_relaxed));
  auto job =
      std::make_shared<Job>(*this, id, std::move(spec), std::move(handler), lane, group_cancel);
  job->payload_hash_ = hash;
  job->counters_ = &counters;
  job->retained_ = retain;
  if (done != nullptr) job->first_waiter_ = {done, user};  // not shared yet
  return job;
}

Engine::SubmitResult Engine::submit(JobSpec spec, DoneFn done, void* user,
                                    const std::atomic<bool>* group_cancel) {
  if (draining()) return rejected(rejected_draining_, draining_error());
  if (auto err = validate(spec)) return rejected(rejected_invalid_, std::move(*err));
  plugin_host::HandlerRef handler = host_.find(spec.handler);
  if (!handler) return rejected(rejected_not_found_, unknown_handler_error(spec.handler));
  const Lane lane = lane_of(spec.lane, handler);

  std::unique_lock store_lock(store_mu_, std::defer_lock);
  if (!spec.idempotency_key.empty()) {
    const std::size_t hash = std::hash<std::string_view>{}(spec.payload);
    store_lock.lock();  // (E2) held until the new job and its key are in the store
    if (auto k = keys_.find(spec.idempotency_key); k != keys_.end()) {
      std::shared_ptr<Job> first = retained_.at(k->second);
      if (first->spec_.handler != spec.handler || first->payload_hash_ != hash) {
        return rejected(rejected_conflict_,
                        {ErrorCode::kFailedPrecondition,
                         "idempotency key '" + spec.idempotency_key.substr(0, 64) +
                             "' was already used by job " + std::to_string(first->id()) +
                             " with a different handler or payload; use a new key"});
      }
      deduplicated_.fetch_add(1, std::memory_order_relaxed);
      bool notify = done != nullptr && first->add_waiter(done, user);
      return {Submitted{std::move(first), true, notify}, std::nullopt};
    }
  }

  // (E1) admit: reserve an in-flight slot before submitting.
  if (in_flight_.fetch_add(1, std::memory_order_relaxed) >= limits_.max_inflight_jobs) {
    in_flight_.fetch_sub(1, std::memory_order_relaxed);
    return rejected(rejected_full_, inflight_error());
  }

  HandlerCounters& hc = counters_for(spec.handler);
  std::shared_ptr<Job> job =
      make_job(std::move(spec), std::move(handler), lane, hc, group_cancel, done, user);
  const std::uint64_t id = job->id();
  const bool retain = job->retained_;
  if (retain) {
    if (!store_lock.owns_lock()) store_lock.lock();
    retained_.emplace(id, job);
    if (!job->spec_.idempotency_key.empty()) keys_.emplace(job->spec_.idempotency_key, id);
    retained_count_.store(retained_.size(), std::memory_order_relaxed);
  }

  job->self_ = job;  // (inv 4) the task's reference
  SubmitOptions opts;
  opts.cancel = &job->token_;
  opts.on_cancel = &JobTask::cancelled;
  opts.lane = lane;
  Result<TaskHandle> r = pool_.submit(Task{&JobTask::run, job.get()}, opts);
  if (!r.ok()) {
    job->self_.reset();
    if (retain) unretain_locked(*job);
    in_flight_.fetch_sub(1, std::memory_order_relaxed);
    return {{}, pool_refused(r.status())};
  }
  hc.submitted.fetch_add(1, std::memory_order_relaxed);
  return {Submitted{std::move(job), false, done != nullptr}, std::nullopt};
}

void Engine::unretain_locked(const Job& job) {
  retained_.erase(job.id());
  if (!job.spec_.idempotency_key.empty()) keys_.erase(job.spec_.idempotency_key);
  retained_count_.store(retained_.size(), std::memory_order_relaxed);
}

std::size_t Engine::submit_batch(std::span<JobSpec> specs, DoneFn done, void* user,
                                 const std::atomic<bool>* group_cancel, std::span<SubmitResult> out,
                                 bool stop_when_full) {
  // Jobs built and admitted but not yet handed to the pool: one run of one
  // lane, submitted together by flush().
  std::vector<std::shared_ptr<Job>> run;
  std::vector<std::size_t> run_index;  // their items
  std::vector<Task> tasks;
  run.reserve(specs.size());
  run_index.reserve(specs.size());
  tasks.reserve(specs.size());
  Lane run_lane = Lane::kDefault;
  std::size_t stop = specs.size();  // the first item refused for room, when stop_when_full

  // One handler lookup per distinct name in a row (a batch usually names one).
  const std::string* cached_name = nullptr;
  plugin_host::HandlerRef cached;
  HandlerCounters* cached_counters = nullptr;

  auto flush = [&] {
    if (run.empty()) return;
    bool any_retained = false;
    for (const auto& j : run) any_retained |= j->retained_;
    std::unique_lock store_lock(store_mu_, std::defer_lock);
    if (any_retained) {
      store_lock.lock();  // (E2) once per run, not per job
      for (const auto& j : run) {
        if (j->retained_) retained_.emplace(j->id(), j);
      }
      retained_count_.store(retained_.size(), std::memory_order_relaxed);
    }
    for (auto& j : run) {
      j->self_ = j;  // (inv 4) the task's reference
      tasks.push_back(Task{&JobTask::run, j.get()});
    }
    // No per-task CancelToken: one batch shares one SubmitOptions. A job's
    // own token (cancel, deadline) is checked by JobTask when it starts, and
    // Job::cancel ends a queued job at once; on_cancel still reports a task
    // the pool drops at shutdown.
    SubmitOptions opts;
    opts.on_cancel = &JobTask::cancelled;
    opts.lane = run_lane;
    Result<std::size_t> r = pool_.submit_batch(tasks, opts);
    const std::size_t accepted = r.ok() ? r.value() : 0;
    const Status why = r.ok() ? Status::Full("the pool took only part of the batch") : r.status();
    for (std::size_t k = 0; k < run.size(); ++k) {
      std::shared_ptr<Job>& j = run[k];
      SubmitResult& o = out[run_index[k]];
      if (k < accepted) {
        j->counters_->submitted.fetch_add(1, std::memory_order_relaxed);
        o = {Submitted{std::move(j), false, done != nullptr}, std::nullopt};
        continue;
      }
      j->self_.reset();
      if (j->retained_) unretain_locked(*j);
      in_flight_.fetch_sub(1, std::memory_order_relaxed);
      Error refusal = pool_refused(why);
      if (stop_when_full && refusal.code == ErrorCode::kExhausted) {
        specs[run_index[k]] = std::move(j->spec_);  // intact for the retry
        stop = std::min(stop, run_index[k]);
        if (run_index[k] == stop) o = {{}, refusal};
      } else {
        o = {{}, refusal};
      }
    }
    run.clear();
    run_index.clear();
    tasks.clear();
  };

  std::size_t i = 0;
  for (; i < specs.size() && stop == specs.size(); ++i) {
    JobSpec& spec = specs[i];
    if (!spec.idempotency_key.empty()) {  // rare: the store decides; keep the order
      flush();
      if (stop != specs.size()) break;
      out[i] = submit(std::move(spec), done, user, group_cancel);
      if (stop_when_full && !out[i].ok() && out[i].error->code == ErrorCode::kExhausted) {
        stop = i;
      }
      continue;
    }
    if (draining()) {
      out[i] = rejected(rejected_draining_, draining_error());
      continue;
    }
    if (auto err = validate(spec)) {
      out[i] = rejected(rejected_invalid_, std::move(*err));
      continue;
    }
    if (cached_name == nullptr || *cached_name != spec.handler) {
      cached = host_.find(spec.handler);
      cached_name = cached ? &cached.name() : nullptr;
      cached_counters = cached ? &counters_for(spec.handler) : nullptr;
    }
    if (!cached) {
      out[i] = rejected(rejected_not_found_, unknown_handler_error(spec.handler));
      continue;
    }
    // (E1) admit: reserve an in-flight slot before submitting.
    if (in_flight_.fetch_add(1, std::memory_order_relaxed) >= limits_.max_inflight_jobs) {
      in_flight_.fetch_sub(1, std::memory_order_relaxed);
      out[i] = rejected(rejected_full_, inflight_error());
      if (stop_when_full) stop = i;
      continue;
    }
    const Lane lane = lane_of(spec.lane, cached);
    if (!run.empty() && lane != run_lane) flush();
    if (stop != specs.size()) {  // the flush was refused for room
      in_flight_.fetch_sub(1, std::memory_order_relaxed);
      break;
    }
    run_lane = lane;
    run.push_back(
        make_job(std::move(spec), cached, lane, *cached_counters, group_cancel, done, user));
    run_index.push_back(i);
  }
  flush();
  return std::min(stop, specs.size());
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
  if (!job.retained_) return;
  std::lock_guard lock(store_mu_);
  if (!retained_.contains(job.id())) return;
  std::size_t bytes = job.retained_bytes();
  Clock::time_point t = now();
  ended_.push_back(Ended{t, job.id(), bytes});
  retained_bytes_ += bytes;
  evict_locked(t);
}

void Engine::evict_locked(Clock::time_point t) {
  // (E2) oldest first, while any of the three bounds is exceeded.
  while (!ended_.empty()) {
    const Ended& e = ended_.front();
    bool too_old = t - e.at > limits_.retention;
    bool too_big = retained_bytes_ > limits_.max_retained_bytes;
    bool too_many = ended_.size() > limits_.max_retained_entries;
    if (!too_old && !too_big && !too_many) break;
    if (auto it = retained_.find(e.id); it != retained_.end()) {
      const std::string& key = it->second->spec_.idempotency_key;
      if (!key.empty()) {
        if (auto k = keys_.find(key); k != keys_.end() && k->second == e.id) keys_.erase(k);
      }
      retained_.erase(it);
    }
    retained_bytes_ -= e.bytes;
    ended_.pop_front();
    expired_.fetch_add(1, std::memory_order_relaxed);
  }
  retained_count_.store(retained_.size(), std::memory_order_relaxed);
  retained_bytes_mirror_.store(retained_bytes_, std::memory_order_relaxed);
}

void Engine::expire() {
  std::lock_guard lock(store_mu_);
  evict_locked(now());
}

Expected<Job> Engine::find(std::uint64_t id) {
  if (const std::uint32_t inc = JobId::incarnation(id); inc != incarnation_) {
    return {nullptr,
            Error{ErrorCode::kNotFound,
                  "job " + std::to_string(id) + " is from another run of tpoold (incarnation " +
                      std::to_string(inc) + ", now " + std::to_string(incarnation_) +
                      "): tpoold restarted since this job was accepted; its result is gone, "
                      "submit the job again"}};
  }
  std::lock_guard lock(store_mu_);
  auto it = retained_.find(id);
  if (it == retained_.end()) {
    return {nullptr, Error{ErrorCode::kNotFound,
                           "job " + std::to_string(id) +
                               " is unknown or its result has expired (results.retention_ms); "
                               "only Submit and SubmitBatch jobs (and keyed ones) are retained"}};
  }
  return {it->second, std::nullopt};
}

void Engine::begin_drain() {
  draining_.store(true, std::memory_order_release);
}

void Engine::cancel_all() {
  begin_drain();
  // relaxed: handlers poll it (Job::is_cancelled); lateness only delays a stop.
  cancel_all_.store(true, std::memory_order_relaxed);
}

bool Engine::wait_idle(std::chrono::nanoseconds timeout) {
  std::unique_lock lock(idle_mu_);
  return idle_cv_.wait_for(lock, timeout, [&] { return in_flight() == 0; });
}

bool Engine::wait_for_capacity(CapacityWaiter* w) {
  {
    std::lock_guard lock(capacity_mu_);
    capacity_waiters_.push_back(w);
    capacity_waiter_count_.fetch_add(1, std::memory_order_seq_cst);  // (E3)
  }
  if (in_flight_.load(std::memory_order_seq_cst) != 0) return true;  // (E3) a task end will call
  // Nothing in flight: no task end will come. Take the registration back,
  // unless a task end already took it (then on_capacity is on its way).
  std::lock_guard lock(capacity_mu_);
  auto it = std::find(capacity_waiters_.begin(), capacity_waiters_.end(), w);
  if (it == capacity_waiters_.end()) return true;
  capacity_waiters_.erase(it);
  capacity_waiter_count_.fetch_sub(1, std::memory_order_seq_cst);
  return false;
}

EngineSnapshot Engine::snapshot() const {
  EngineSnapshot s;
  s.in_flight = in_flight();
  s.retained_entries = retained_count_.load(std::memory_order_relaxed);
  s.retained_bytes = retained_bytes_mirror_.load(std::memory_order_relaxed);
  s.rejected_invalid = rejected_invalid_.load(std::memory_order_relaxed);
  s.rejected_not_found = rejected_not_found_.load(std::memory_order_relaxed);
  s.rejected_full = rejected_full_.load(std::memory_order_relaxed);
  s.rejected_draining = rejected_draining_.load(std::memory_order_relaxed);
  s.rejected_conflict = rejected_conflict_.load(std::memory_order_relaxed);
  s.deduplicated = deduplicated_.load(std::memory_order_relaxed);
  s.expired = expired_.load(std::memory_order_relaxed);
  s.ignored_cancellation = ignored_cancellation_.load(std::memory_order_relaxed);
  s.running_after_end = running_after_end_.load(std::memory_order_relaxed);
  s.draining = draining();
  std::shared_lock lock(counters_mu_);
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
