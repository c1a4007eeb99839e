// Admission: every request, single or batch, through one pipeline.
//
// Engine::submit is submit_batch of one item. Each item goes through these
// steps, in item order; a step that refuses the item gives it its outcome and
// the item skips the rest:
//   1. check   (Admission::check): tpoold is not draining, the spec is
//              within limits (Engine::validate), its handler is loaded (one
//              look-up per run of one handler name).
//   2. dedupe  (Admission::dedupe, keyed items only): an earlier job with the
//              same idempotency key answers the item (deduplicated), or the
//              item is a conflict (same key, other handler or payload).
//   3. admit   (Admission::admit): an in-flight slot is reserved (E1).
//   4. build   (Admission::add_to_run, Engine::make_job): the Job, its id, its
//              first waiter; it joins the run (admitted jobs of one lane, in
//              item order).
//   5. submit  (Admission::submit_run): the run's retained jobs are put in the
//              result store, and the run is handed to the pool at once, each
//              job with its own cancel token.
//   6. settle  (Admission::settle_run): accepted jobs are counted and
//              answered; refused ones leave the store, give their slot back
//              and are answered with the refusal.
//
// Invariants (cited as A1..A6):
//  (A1) Every item consumed gets exactly one outcome in out[i]. With
//       stop_when_full the first item refused for room (step 3 or 6) ends the
//       call: its outcome is the kExhausted error, its spec (and those after
//       it) are left intact for a retry, and its index is the return value.
//       Items after it get no outcome and are not counted: an item refused
//       while a run is pending first sends the run (Admission::refuse).
//  (A2) Each kind of refusal has one sentence, made by one function
//       (draining_error, validate, unknown_handler_error, conflict_error,
//       inflight_error, pool_refused), whichever path the item took: a batch
//       of one answers exactly as submit, because submit is one.
//  (A3) Every job is handed to the pool with its own CancelToken (cancel for
//       a run of one, SubmitOptions::cancels for more), so a job cancelled or
//       past its deadline while queued ends through the pool's on_cancel on
//       every path (E5 in engine.cc), and the pool counts it cancelled.
//  (A4) Submits never block: every pool submit here asks for
//       Backpressure::kReject itself, whatever the pool's default (the engine
//       no longer relies on server/config.cc choosing reject for the pool), so
//       a gRPC thread is never parked waiting for a descriptor; a refused run
//       is settled at once. Under kReject the pool never runs a task inline
//       on the submitting thread, so step 5 may hold keyed_mu_.
//  (A5) A keyed item is a run of its own (the run before it is submitted
//       first, keeping item order), and its steps 2-6 happen under keyed_mu_:
//       a concurrent submit of the same key waits, then finds the job in the
//       store (the pool accepted it) or not (refused and removed), never a
//       job that was put but will never run.
//  (A6) A retained job is put in the store before the pool has it (its task
//       can end at once, and ResultStore::ended needs it stored), and is
//       removed only when the pool refused it.
//  (A7) A delayed item (JobSpec::delay > 0) skips steps 3 and 5: it is built
//       SCHEDULED and handed to the scheduler (Admission::schedule_item),
//       which admits it when it is due (scheduler.h). Its refusal for room
//       is max_scheduled_jobs, with its own sentence (scheduled_full_error).
//  (A8) Durable items (JobSpec::durable, durable.cc D1-D2) form runs of
//       their own (a run is all durable or all not), and a delayed durable
//       item is committed alone. Step 5 of a durable run first commits the
//       run's accept records and waits (D1; with ack_by_result, a Stream's or
//       an Execute's, it does not wait: D8; nor, for an unkeyed run, with a
//       Committed callback, a Submit's or SubmitBatch's, which answers from
//       the commit: D9): on failure the run is refused
//       whole, before anything was put in the store; after it, a job the
//       pool refuses is not refused but waits in the scheduler (D2). A
//       keyed durable item commits under keyed_mu_ (A5), with the keyed
//       durable items right after it (A9).
//  (A9) Keyed durable items in a row (same lane, undelayed) form one run
//       under keyed_mu_ and one commit, so a Stream of keyed durable jobs
//       costs one fsync per message, not per job. A repeat of a key within
//       the run is deduplicated to the run's job (run_dups); if the commit
//       fails, those items get the run's error too (their waiter removed).
//       Concurrent keyed submits still wait for the lock, as in A5.
#include <algorithm>
#include <functional>

#include "job_task.h"
#include "scheduler.h"
#include "tpool/engine/engine.h"

namespace tpool::engine {

// One submit_batch call.
struct Engine::Admission {
  Admission(Engine& engine, std::span<JobSpec> s, DoneFn fn, void* u,
            const std::atomic<bool>* group, std::span<SubmitResult> o, bool stop_full,
            bool ack_result, Committed committed)
      : e(engine),
        specs(s),
        done(fn),
        user(u),
        group_cancel(group),
        out(o),
        stop_when_full(stop_full),
        ack_by_result(ack_result),
        call_ack(committed.fn != nullptr ? std::make_shared<CallAck>(committed) : nullptr) {}

  Engine& e;
  std::span<JobSpec> specs;
  DoneFn done;
  void* user;
  const std::atomic<bool>* group_cancel;
  std::span<SubmitResult> out;
  bool stop_when_full;
  bool ack_by_result;                 // (D8)
  std::shared_ptr<CallAck> call_ack;  // (D9) null: the caller waits here
  std::size_t stop = specs.size();    // the first item refused for room (A1)
  // Every job of the call is accepted at this one reading (its wait time
  // starts here): one clock read per call, not per job (issue 19).
  const Job::Clock::time_point accepted_at = Job::Clock::now();

  // The run: jobs built and admitted, not yet handed to the pool.
  std::vector<JobPtr> run;
  std::vector<std::size_t> run_index;  // their items
  std::vector<Task> tasks;
  std::vector<CancelToken*> tokens;
  Lane run_lane = Lane::kDefault;
  bool run_durable = false;  // (A8)
  bool run_keyed = false;    // (A5, A9) a keyed run: its commit is waited for under keyed_mu_
  std::vector<std::size_t> run_dups;  // (A9) items deduplicated to a job of the run

  // Step 1's look-up, kept while items name the same handler.
  const std::string* cached_name = nullptr;
  plugin_host::HandlerRef cached;
  HandlerCounters* cached_counters = nullptr;
  Lane item_lane = Lane::kDefault;  // the checked item's lane

  bool stopped() const noexcept { return stop != specs.size(); }

  void refuse(std::size_t i, std::atomic<std::uint64_t>& counter, Error err) {
    // (A1) With stop_when_full, whether item i is consumed at all depends on
    // the run before it: hand that to the pool first. If the pool refused
    // part of it, the call ends there and item i gets no outcome and is not
    // counted (its retry answers it).
    if (stop_when_full && !run.empty()) {
      submit_run();
      if (stopped()) return;
    }
    counter.fetch_add(1, std::memory_order_relaxed);  // relaxed: a reporting counter
    out[i] = {{}, std::move(err)};
  }

  // Step 1.
  bool check(std::size_t i) {
    e.apply_retry_defaults(specs[i]);
    const JobSpec& spec = specs[i];
    if (e.draining()) {
      refuse(i, e.rejected_draining_, draining_error());
      return false;
    }
    if (auto err = e.validate(spec)) {
      refuse(i, e.rejected_invalid_, std::move(*err));
      return false;
    }
    if (cached_name == nullptr || *cached_name != spec.handler) {
      cached = e.host_.find(spec.handler);
      cached_name = cached ? &cached.name() : nullptr;
      cached_counters = cached ? &e.counters_for(spec.handler) : nullptr;
    }
    if (!cached) {
      refuse(i, e.rejected_not_found_, unknown_handler_error(spec.handler));
      return false;
    }
    // A process-mode plugin marked unhealthy after repeated runner crashes
    // (docs/plugins.md, "Isolation"): refused until it is reloaded.
    if (std::string why = e.host_.unavailable(cached); !why.empty()) {
      refuse(i, e.rejected_unhealthy_, Error{ErrorCode::kUnavailable, std::move(why)});
      return false;
    }
    item_lane = lane_of(spec.lane, cached);
    return true;
  }

  // Step 2 (A5): true when no earlier job holds the key.
  bool dedupe(std::size_t i) REQUIRES(e.keyed_mu_) {
    const JobSpec& spec = specs[i];
    JobPtr first = e.store_->find_key(spec.idempotency_key);
    if (first == nullptr && e.journal_ != nullptr) first = e.find_key_durable(spec.idempotency_key);
    bool in_run = false;
    if (first == nullptr) {  // (A9) a key earlier in the pending keyed run
      for (const auto& j : run) {
        if (j->idempotency_key() == spec.idempotency_key) {
          first = j;
          in_run = true;
          break;
        }
      }
    }
    if (first == nullptr) return true;
    if (first->handler_name() != spec.handler ||
        first->payload_hash() != std::hash<std::string_view>{}(spec.payload)) {
      refuse(i, e.rejected_conflict_, conflict_error(spec.idempotency_key, first->id()));
      return false;
    }
    e.deduplicated_.fetch_add(1, std::memory_order_relaxed);  // relaxed: a reporting counter
    const bool notify = done != nullptr && first->add_waiter(done, user);
    if (in_run) run_dups.push_back(i);  // (A9) answered like its job if the commit fails
    out[i] = {Submitted{std::move(first), true, notify}, std::nullopt};
    return false;
  }

  // Step 3 (E1): reserve an in-flight slot. relaxed: the count only bounds
  // the descriptors; the waiters' pairing is on the decrement (E3).
  bool admit(std::size_t i) {
    if (e.in_flight_.fetch_add(1, std::memory_order_relaxed) >= e.limits_.max_inflight_jobs) {
      e.in_flight_.fetch_sub(1, std::memory_order_relaxed);
      refuse(i, e.rejected_full_, e.inflight_error());
      if (stop_when_full) stop = std::min(stop, i);  // (A1) its spec is intact
      return false;
    }
    return true;
  }

  // Steps 3-6 for a delayed item (spec.delay > 0): it holds no in-flight
  // slot while it waits; the scheduler (scheduler.h) admits it when it is
  // due. Bounded by max_scheduled_jobs instead (A7).
  void schedule_item(std::size_t i) {
    if (e.scheduler_->size() >= e.limits_.max_scheduled_jobs) {
      refuse(i, e.rejected_full_, e.scheduled_full_error());
      if (stop_when_full && !stopped()) stop = std::min(stop, i);  // (A1) its spec is intact
      return;
    }
    const auto delay = specs[i].delay;
    JobPtr j = e.make_job(std::move(specs[i]), cached, item_lane, *cached_counters, group_cancel,
                          done, user, accepted_at);
    j->state_.store(JobState::kScheduled, std::memory_order_relaxed);  // not yet shared
    if (j->durable_) {                                                 // (A8, D1)
      if (auto err = e.commit_accepted(std::span<const JobPtr>(&j, 1))) {
        refuse_built(i, *j, std::move(*err));
        return;
      }
    }
    if (j->retained_) e.store_->put(j);            // (A6)
    if (!e.scheduler_->add(j, e.now() + delay)) {  // (K4) draining
      if (j->retained_) e.store_->remove(*j);
      refuse(i, e.rejected_draining_, draining_error());
      return;
    }
    j->counters_->submitted.fetch_add(1, std::memory_order_relaxed);
    out[i] = {Submitted{std::move(j), false, done != nullptr}, std::nullopt};
  }

  // Step 4.
  void add_to_run(std::size_t i) {
    run_lane = item_lane;
    run_durable = specs[i].durable;
    run_keyed = !specs[i].idempotency_key.empty();
    run.push_back(e.make_job(std::move(specs[i]), cached, item_lane, *cached_counters, group_cancel,
                             done, user, accepted_at));
    run_index.push_back(i);
  }

  // Steps 5 and 6.
  void submit_run() {
    if (run.empty()) return;
    // (D8) its result is the acknowledgement; (D9) the caller answers from
    // the commit's callback.
    if (run_durable && (ack_by_result || (call_ack != nullptr && !run_keyed))) {
      submit_run_async();
      return;
    }
    if (run_durable) {  // (A8, D1) on disk before anyone learns of it
      if (auto err = e.commit_accepted(run)) {
        refuse_run(*err);
        return;
      }
    }
    link_batches();
    for (const auto& j : run) {
      if (j->retained_) e.store_->put(j);  // (A6)
      j->hold_for_task();                  // (inv 4) the task's reference
      tasks.push_back(Task{job_task::run, j.get()});
      tokens.push_back(&j->token_);  // (A3)
    }
    const auto [accepted, why] = e.to_pool(tasks, tokens, run_lane);
    settle_run(accepted, why);
  }

  // (E7 in engine.cc) Jobs next to each other in the run with the same
  // isolated handler are linked, before the pool has any of them: the worker
  // that starts one may start the ones after it in the same runner call.
  void link_batches() {
    for (std::size_t k = 0; k + 1 < run.size(); ++k) {
      const plugin_host::HandlerRef& h = run[k]->handler_;
      if (h && h.isolated() && h.same_handler(run[k + 1]->handler_)) {
        run[k]->rare().batch_next = run[k + 1];
      }
    }
  }

  void settle_run(std::size_t accepted, const Status& why) {
    for (std::size_t k = 0; k < run.size(); ++k) {
      JobPtr& j = run[k];
      const std::size_t i = run_index[k];
      if (k < accepted) {
        j->counters_->submitted.fetch_add(1, std::memory_order_relaxed);
        out[i] = {Submitted{std::move(j), false, done != nullptr}, std::nullopt};
        continue;
      }
      if (run_durable) {  // (D2) committed: it waits for room instead
        e.park_committed(j);
        j->counters_->submitted.fetch_add(1, std::memory_order_relaxed);
        out[i] = {Submitted{std::move(j), false, done != nullptr}, std::nullopt};
        continue;
      }
      j->task_reference().reset();
      if (j->retained_) e.store_->remove(*j);  // (A6)
      e.in_flight_.fetch_sub(1, std::memory_order_relaxed);
      refuse_built(i, *j, e.pool_refused(why));
    }
    clear_run();
  }

  // (D8) The run is accepted now and answered through its jobs' results;
  // the pool gets it once the commit's callback runs.
  void submit_run_async() {
    link_batches();
    auto pending = std::make_shared<PendingRun>();
    pending->lane = run_lane;
    if (call_ack != nullptr) {
      call_ack->pending.fetch_add(1, std::memory_order_relaxed);  // the call's own count is held
      pending->ack = call_ack;
    }
    for (std::size_t k = 0; k < run.size(); ++k) {
      JobPtr& j = run[k];
      if (j->retained_) e.store_->put(j);  // (A6)
      j->hold_for_task();                  // (inv 4) the task's reference, from now
      j->counters_->submitted.fetch_add(1, std::memory_order_relaxed);
      pending->jobs.push_back(j);
      out[run_index[k]] = {Submitted{std::move(j), false, done != nullptr}, std::nullopt};
    }
    e.commit_async(std::move(pending));
    clear_run();
  }

  // Item i's job was built but is refused with err; refused for room with
  // stop_when_full, the call stops there and its spec goes back intact (A1).
  void refuse_built(std::size_t i, Job& j, Error err) {
    const bool room = err.code == ErrorCode::kExhausted;
    out[i] = {{}, std::move(err)};
    if (stop_when_full && room) {
      specs[i] = j.take_spec();  // (A1) intact for the retry
      stop = std::min(stop, i);
    }
  }

  void clear_run() {
    run_dups.clear();
    run.clear();
    run_index.clear();
    tasks.clear();
    tokens.clear();
  }

  // (A8, D1) A durable run whose commit failed: every job refused with err,
  // none was put in the store or submitted.
  void refuse_run(const Error& err) {
    for (std::size_t i : run_dups) {  // (A9) their job was never accepted either
      (void)out[i].value.job->remove_waiter(done, user);
      out[i] = {{}, err};
    }
    for (std::size_t k = 0; k < run.size(); ++k) {
      const std::size_t i = run_index[k];
      e.in_flight_.fetch_sub(1, std::memory_order_relaxed);
      refuse_built(i, *run[k], err);
    }
    clear_run();
  }

  std::size_t all() {
    run.reserve(specs.size());
    run_index.reserve(specs.size());
    tasks.reserve(specs.size());
    tokens.reserve(specs.size());
    for (std::size_t i = 0; i < specs.size() && !stopped(); ++i) {
      if (!check(i)) continue;
      if (specs[i].idempotency_key.empty()) {
        if (!run.empty() && (item_lane != run_lane || specs[i].durable != run_durable)) {  // (A8)
          submit_run();
          if (stopped()) break;
        }
        if (specs[i].delay.count() > 0) {
          schedule_item(i);
        } else if (admit(i)) {
          add_to_run(i);
        }
        continue;
      }
      submit_run();  // (A5) the run before a keyed item goes first
      if (stopped()) break;
      MutexLock lock(e.keyed_mu_);
      if (!dedupe(i)) continue;
      if (specs[i].delay.count() > 0) {
        schedule_item(i);
        continue;
      }
      if (!admit(i)) continue;
      add_to_run(i);
      // (A9) A keyed durable run: the keyed, durable, undelayed items right
      // after it, of its lane, join it under the same lock and share its
      // commit.
      while (run_durable && !run.empty() && i + 1 < specs.size() && !stopped() &&
             !specs[i + 1].idempotency_key.empty() && specs[i + 1].delay.count() == 0) {
        if (!check(i + 1)) {
          ++i;  // refused (its outcome is set)
          continue;
        }
        if (!specs[i + 1].durable || item_lane != run_lane) break;  // the outer loop takes it
        ++i;
        if (dedupe(i) && admit(i)) add_to_run(i);
      }
      submit_run();
    }
    submit_run();
    const std::size_t consumed = std::min(stop, specs.size());
    if (call_ack != nullptr) call_ack->release();  // (D9) out[] is complete
    return consumed;
  }
};

Engine::SubmitResult Engine::submit(JobSpec spec, DoneFn done, void* user,
                                    const std::atomic<bool>* group_cancel, bool ack_by_result) {
  SubmitResult out;
  submit_batch(std::span<JobSpec>(&spec, 1), done, user, group_cancel,
               std::span<SubmitResult>(&out, 1), /*stop_when_full=*/false, ack_by_result);
  return out;
}

std::size_t Engine::submit_batch(std::span<JobSpec> specs, DoneFn done, void* user,
                                 const std::atomic<bool>* group_cancel, std::span<SubmitResult> out,
                                 bool stop_when_full, bool ack_by_result, Committed committed) {
  Admission a(*this, specs, done, user, group_cancel, out, stop_when_full, ack_by_result,
              committed);
  return a.all();
}

void Engine::apply_retry_defaults(JobSpec& spec) const {
  const RetryPolicy* p = &limits_.retry;
  for (const auto& [name, policy] : limits_.handler_retry) {
    if (name == spec.handler) {
      p = &policy;
      break;
    }
  }
  if (spec.max_attempts == 0) spec.max_attempts = p->max_attempts;
  if (spec.backoff_base.count() == 0) spec.backoff_base = p->backoff_base;
  if (spec.backoff_cap.count() == 0) spec.backoff_cap = p->backoff_cap;
  if (!spec.durable && journal_ != nullptr) {  // [store] durable, [store.handlers.NAME]
    bool d = limits_.durable;
    for (const auto& [name, durable] : limits_.handler_durable) {
      if (name == spec.handler) {
        d = durable;
        break;
      }
    }
    spec.durable = d;
  }
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
  if (spec.max_attempts < 1 || spec.max_attempts > limits_.max_attempts) {
    return Error{ErrorCode::kInvalidArgument,
                 "max_attempts is " + std::to_string(spec.max_attempts) + "; use 1 to " +
                     std::to_string(limits_.max_attempts) +
                     " (0 in a request means the handler's default, config [retry])"};
  }
  if (spec.backoff_cap.count() != 0 && spec.backoff_cap < spec.backoff_base) {
    return Error{ErrorCode::kInvalidArgument,
                 "backoff_cap_ms (" + std::to_string(spec.backoff_cap.count()) +
                     ") is below backoff_base_ms (" + std::to_string(spec.backoff_base.count()) +
                     "); make the cap at least the base, or 0 for no cap"};
  }
  if (spec.durable && journal_ == nullptr) {
    return Error{ErrorCode::kFailedPrecondition,
                 "the job asks to be durable, but this tpoold keeps jobs in memory only: durable "
                 "jobs need the store ([store] path in the config, docs/store.md); send it "
                 "without durable, or to a tpoold with a store"};
  }
  if (spec.delay.count() < 0 || spec.delay > limits_.max_delay) {
    return Error{ErrorCode::kInvalidArgument,
                 "the job is delayed by " + std::to_string(spec.delay.count()) +
                     " ms; use at most " + std::to_string(limits_.max_delay.count()) +
                     " ms (30 days)"};
  }
  for (const auto& [k, v] : spec.labels) {
    if (k.size() > 256 || v.size() > 256) {
      return Error{ErrorCode::kInvalidArgument,
                   "label '" + k.substr(0, 64) + "' is longer than 256 bytes; shorten it"};
    }
  }
  return std::nullopt;
}

Error Engine::draining_error() {
  return {ErrorCode::kUnavailable,
          "tpoold is draining and accepts no new jobs; send the job to another instance or retry "
          "after the restart"};
}

Error Engine::unknown_handler_error(const std::string& name) {
  return {ErrorCode::kNotFound, "no handler named '" + name.substr(0, 128) +
                                    "' is loaded; ListHandlers lists the loaded ones"};
}

Error Engine::conflict_error(const std::string& key, std::uint64_t first_id) {
  return {ErrorCode::kFailedPrecondition,
          "idempotency key '" + key.substr(0, 64) + "' was already used by job " +
              std::to_string(first_id) + " with a different handler or payload; use a new key"};
}

Error Engine::inflight_error() const {
  return {ErrorCode::kExhausted,
          std::to_string(limits_.max_inflight_jobs) +
              " jobs are in flight (server.max_inflight_jobs); retry after the hinted delay or "
              "raise the limit",
          std::chrono::milliseconds(50)};
}

Error Engine::scheduled_full_error() const {
  return {ErrorCode::kExhausted,
          std::to_string(limits_.max_scheduled_jobs) +
              " delayed jobs are waiting already (the engine's max_scheduled_jobs); retry later "
              "or delay fewer jobs",
          std::chrono::milliseconds(1000)};
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
  // Full (all of a run or its tail): one sentence whether the pool refused a
  // single job or took part of a batch (A2).
  rejected_full_.fetch_add(1, std::memory_order_relaxed);
  return {ErrorCode::kExhausted,
          "the pool has no free task slot (all " + std::to_string(pool_.config().queue_capacity) +
              " are queued or running, pool.queue_capacity); retry after the hinted delay",
          std::chrono::milliseconds(50)};
}

Lane Engine::lane_of(LaneChoice c, const plugin_host::HandlerRef& handler) noexcept {
  return c == LaneChoice::kHandlerHint ? handler.lane()
         : c == LaneChoice::kBlocking  ? Lane::kBlocking
                                       : Lane::kDefault;
}

JobPtr Engine::make_job(JobSpec&& spec, plugin_host::HandlerRef handler, Lane lane,
                        HandlerCounters& counters, const std::atomic<bool>* group_cancel,
                        DoneFn done, void* user, Job::Clock::time_point accepted) {
  // (D5) a durable job is always retained: look-ups find it in memory while it lives.
  const bool durable = spec.durable;
  const bool retain = spec.retain || !spec.idempotency_key.empty() || durable;
  // relaxed: only uniqueness matters.
  const std::uint64_t id =
      JobId::make(incarnation_, next_sequence_.fetch_add(1, std::memory_order_relaxed));
  // (D7) a durable job outlives its call: the call's cancellation (a Stream
  // the client dropped) does not cancel it.
  auto job = JobPtr::make(
      *this, id, std::move(spec), std::move(handler), lane, durable ? nullptr : group_cancel,
      done != nullptr ? std::make_pair(done, user) : std::pair<DoneFn, void*>{nullptr, nullptr},
      accepted, &counters);
  job->retained_ = retain;
  job->durable_ = durable;
  return job;
}

}  // namespace tpool::engine
