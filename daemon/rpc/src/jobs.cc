// JobService's unary RPCs. Execute, Wait and WaitBatch finish from the thread
// that ends the (last) job; Submit and SubmitBatch once their durable jobs'
// accepts are committed (from the journal's writer thread: D9 in
// durable.cc), at once when they have none; the others answer at once.
#include <atomic>
#include <charconv>
#include <chrono>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <google/protobuf/arena.h>

#include "convert.h"
#include "parse.h"
#include "tpool/common/mutex.h"
#include "tpool/rpc/services.h"

namespace tpool::rpc {

namespace {

// A unary call that waits for a job: Execute (owns the job) or Wait (or an
// Execute deduplicated onto an earlier job: only watches it).
//
// Lifetime: two references, gRPC's (dropped in OnDone) and the starting
// thread's (dropped when start() returns): the job's waiter may Finish the
// call, and gRPC may call OnDone, before start() has returned.
class JobWaitReactor final : public grpc::ServerUnaryReactor {
 public:
  // replica: the service's, which outlives every call. max_reply_bytes: the
  // largest reply gRPC will send (server.max_message_bytes).
  // call_deadline: the call's own deadline. submitting: the call submitted
  // the job (Execute), so a job its durable commit never accepted is
  // answered with that refusal (ctx: for its retry hint; valid until OnDone).
  JobWaitReactor(tpool::v1::JobResult* resp, const std::string& replica,
                 std::uint64_t max_reply_bytes, std::chrono::system_clock::time_point call_deadline,
                 grpc::CallbackServerContext* submitting = nullptr)
      : resp_(resp),
        replica_(replica),
        max_reply_bytes_(max_reply_bytes),
        call_deadline_(call_deadline),
        submitting_(submitting) {}

  // After submitting (or finding) the job: waits for it, or answers now.
  void watch(engine::JobPtr job, bool owns, bool will_notify) {
    {
      tpool::MutexLock lock(mu_);
      job_ = job;
      owns_ = owns;
    }
    if (!will_notify) done(this, *job);  // already final
    unref();
  }
  void fail(const grpc::Status& s) {
    Finish(s);
    unref();
  }

  static void done(void* user, engine::Job& job) {
    auto* self = static_cast<JobWaitReactor*>(user);
    if (self->submitting_ != nullptr) {
      // (D8 in durable.cc) Never accepted: the status a submit that waited
      // for the commit would have returned (RESOURCE_EXHAUSTED with a retry
      // hint for a full disk, UNAVAILABLE otherwise), not a FAILED result.
      if (auto refusal = engine::Engine::store_refusal(job)) {
        self->Finish(to_status(*refusal, self->submitting_));
        return;
      }
    }
    fill_result(job, self->replica_, *self->resp_);
    // A result too large to send is reported FAILED, saying so, rather than
    // failing the call with RESOURCE_EXHAUSTED (which reads as retryable).
    fit_result(*self->resp_, self->max_reply_bytes_);
    // Every final state, CANCELLED and TIMED_OUT included, is a JobResult
    // with status OK, as in a Stream (docs/api.md, "Job outcomes"), but a
    // job the call's own deadline ended (convert.h, the one table). A client
    // that cancelled its own call sees CANCELLED from its own gRPC library,
    // whatever is sent here.
    self->Finish(to_status(job, self->call_deadline_));
  }

  void OnCancel() override {
    engine::JobPtr job;
    bool owns = false;
    {
      tpool::MutexLock lock(mu_);
      job = job_;
      owns = owns_;
    }
    if (!job) return;  // not yet watching: watch() or fail() will Finish
    if (owns) {
      job->cancel();  // the job ends (CANCELLED) and its waiter finishes the call
    } else if (job->remove_waiter(&JobWaitReactor::done, this)) {
      Finish(to_status(Refusal::kCallCancelled, "the call was cancelled by the client"));
    }
  }
  void OnDone() override { unref(); }

 private:
  void unref() {
    if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }
  tpool::v1::JobResult* resp_;
  const std::string& replica_;
  const std::uint64_t max_reply_bytes_;
  const std::chrono::system_clock::time_point call_deadline_;
  grpc::CallbackServerContext* const submitting_;
  std::atomic<int> refs_{2};
  tpool::Mutex mu_;
  engine::JobPtr job_ GUARDED_BY(mu_);
  bool owns_ GUARDED_BY(mu_) = false;
};

grpc::ServerUnaryReactor* finish_now(grpc::CallbackServerContext* ctx, const grpc::Status& s) {
  auto* r = ctx->DefaultReactor();
  r->Finish(s);
  return r;
}

// A replica id is at most a DNS name long (server.replica_id has the same
// bound, docs/configuration.md), so a longer one in a request was never one
// tpoold returned.
constexpr std::size_t kMaxReplicaBytes = 253;

// A call naming a job of another replica: FAILED_PRECONDITION, saying where to
// send it. An empty replica (an older client) is not checked. A replica over
// the bound is INVALID_ARGUMENT, and is not echoed: the message would grow
// with it (twice) past what gRPC's metadata limit lets through.
std::optional<grpc::Status> other_replica(std::uint64_t job_id, const std::string& owner,
                                          const std::string& me) {
  if (owner.size() > kMaxReplicaBytes) {
    return to_status(Refusal::kInvalidRequest,
                     "the replica of job " + std::to_string(job_id) + " is " +
                         std::to_string(owner.size()) + " bytes long, over the limit of " +
                         std::to_string(kMaxReplicaBytes) +
                         " (a replica id is a DNS name at most); send back the replica "
                         "that tpoold returned with the job");
  }
  if (owner.empty() || owner == me) return std::nullopt;
  return to_status(Refusal::kOtherReplica,
                   "job " + std::to_string(job_id) + " belongs to replica " + owner +
                       "; this is replica " + me + ": send the call to " + owner);
}

// Submit's answer, given once the job's accept is committed (D9 in
// durable.cc): from the journal's writer thread, or from Submit itself
// when nothing was waited for. Deletes itself.
struct SubmitCall {
  grpc::ServerUnaryReactor* reactor;
  grpc::CallbackServerContext* ctx;  // valid until Finish: for a refusal's retry hint
  tpool::v1::JobRef* resp;
  const std::string& replica;  // the service's, which outlives every call
  engine::Engine::SubmitResult result;

  static void committed(void* arg) {
    std::unique_ptr<SubmitCall> self(static_cast<SubmitCall*>(arg));
    const engine::Engine::SubmitResult& r = self->result;
    if (!r.ok()) {
      self->reactor->Finish(to_status(*r.error, self->ctx));
      return;
    }
    if (auto refusal = engine::Engine::store_refusal(*r.value.job)) {  // never accepted
      self->reactor->Finish(to_status(*refusal, self->ctx));
      return;
    }
    self->resp->set_job_id(r.value.job->id());
    self->resp->set_replica(self->replica);
    self->reactor->Finish(grpc::Status::OK);
  }
};

// SubmitBatch's answer, likewise: the items the engine had (item_of[k] is
// results[k]'s) are filled in once their accepts are committed; the items
// refused before the engine were filled in by SubmitBatch. SubmitBatch is a
// raw method (issue 19): its request is read by read_job_batch (parse.h: the
// plain form in place, anything else through protobuf on the call's arena),
// its reply built on the same arena and serialized into the call's
// ByteBuffer once every item is settled.
struct SubmitBatchCall {
  SubmitBatchCall(grpc::ByteBuffer* reply, const std::string& rep)
      : out(reply),
        replica(rep),
        arena(options()),
        refs(google::protobuf::Arena::CreateMessage<tpool::v1::JobRefs>(&arena)) {}

  grpc::ServerUnaryReactor* reactor = nullptr;  // set once the request is read
  grpc::ByteBuffer* out;
  const std::string& replica;
  // A batch of 1,000 items and its 1,000 JobRefItems in a few blocks, not a
  // few heap allocations per item.
  google::protobuf::Arena arena;
  tpool::v1::JobRefs* refs;
  std::vector<int> item_of;
  std::vector<engine::Engine::SubmitResult> results;

  static google::protobuf::ArenaOptions options() {
    google::protobuf::ArenaOptions o;
    o.start_block_size = 8192;      // picked by hand: a small batch in one block,
    o.max_block_size = 256 * 1024;  // a batch of 1,000 16-byte jobs in about five
    return o;
  }

  static void committed(void* arg) {
    std::unique_ptr<SubmitBatchCall> self(static_cast<SubmitBatchCall*>(arg));
    for (std::size_t k = 0; k < self->results.size(); ++k) {
      auto* item = self->refs->mutable_items(self->item_of[k]);
      const engine::Engine::SubmitResult& r = self->results[k];
      std::optional<engine::Error> err = r.error;
      if (!err) err = engine::Engine::store_refusal(*r.value.job);  // never accepted
      if (!err) {
        item->set_job_id(r.value.job->id());
        item->set_replica(self->replica);
      } else {
        item->set_code(code_number(*err));
        item->set_message(err->message);
      }
    }
    bool own_buffer = false;
    const grpc::Status s = grpc::SerializationTraits<tpool::v1::JobRefs>::Serialize(
        *self->refs, self->out, &own_buffer);
    self->reactor->Finish(s);
  }
};

}  // namespace

JobServiceImpl::JobServiceImpl(engine::Engine& engine, RpcLimits limits, std::string replica,
                               Access access)
    : engine_(engine), limits_(limits), replica_(std::move(replica)), access_(access) {}

JobServiceImpl::~JobServiceImpl() = default;

grpc::ServerUnaryReactor* JobServiceImpl::Execute(grpc::CallbackServerContext* ctx,
                                                  const tpool::v1::JobRequest* req,
                                                  tpool::v1::JobResult* resp) {
  if (auto a = access_.admit(ctx, security::Method::kExecute, req->handler()); a.refused) {
    return finish_now(ctx, *a.refused);
  }
  auto* r = new JobWaitReactor(resp, replica_, limits_.max_message_bytes, ctx->deadline(), ctx);
  engine::JobSpec spec;
  if (auto err = to_spec(*req, ctx->deadline(), false, spec)) {
    r->fail(to_status(*err, ctx));
    return r;
  }
  // ack_by_result: the reply is the job's result, so a durable job's accept
  // is not waited for on this gRPC thread (durable.cc, D8).
  auto sub = engine_.submit(std::move(spec), &JobWaitReactor::done, r, nullptr,
                            /*ack_by_result=*/true);
  if (!sub.ok()) {
    r->fail(to_status(*sub.error, ctx));
    return r;
  }
  r->watch(sub.value.job, !sub.value.deduplicated, sub.value.will_notify);
  return r;
}

grpc::ServerUnaryReactor* JobServiceImpl::Submit(grpc::CallbackServerContext* ctx,
                                                 const tpool::v1::JobRequest* req,
                                                 tpool::v1::JobRef* resp) {
  if (auto a = access_.admit(ctx, security::Method::kSubmit, req->handler()); a.refused) {
    return finish_now(ctx, *a.refused);
  }
  engine::JobSpec spec;
  // A submitted job outlives the call: the call's deadline bounds only the
  // call, not the job (use timeout_ms for that).
  if (auto err = to_spec(*req, std::chrono::system_clock::time_point::max(), true, spec)) {
    return finish_now(ctx, to_status(*err, ctx));
  }
  // (D9 in durable.cc) A durable job's JobRef goes out once its accept is
  // committed, from the commit's callback: this gRPC thread does not wait.
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  auto* call = new SubmitCall{reactor, ctx, resp, replica_, {}};
  engine_.submit_batch(std::span<engine::JobSpec>(&spec, 1), nullptr, nullptr, nullptr,
                       std::span<engine::Engine::SubmitResult>(&call->result, 1),
                       /*stop_when_full=*/false, /*ack_by_result=*/false,
                       {&SubmitCall::committed, call});
  return reactor;  // not call->reactor: committed() may have deleted call already
}

grpc::ServerUnaryReactor* JobServiceImpl::SubmitBatch(grpc::CallbackServerContext* ctx,
                                                      const grpc::ByteBuffer* req,
                                                      grpc::ByteBuffer* resp) {
  // The role here; each item's handler against the allow-list below.
  auto admission = access_.admit(ctx, security::Method::kSubmitBatch);
  if (admission.refused) return finish_now(ctx, *admission.refused);
  auto call = std::make_unique<SubmitBatchCall>(resp, replica_);
  std::string bytes;
  std::vector<RequestFields> items;
  if (!read_job_batch(*req, bytes, call->arena, items)) {
    return finish_now(ctx, unparsable_request(tpool::v1::JobBatch::descriptor()->full_name()));
  }
  // Taken only now: a call has one default reactor, and finish_now above
  // takes it for the refusal.
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  call->reactor = reactor;
  const int n = static_cast<int>(items.size());
  call->refs->mutable_items()->Reserve(n);
  // Translate every item, then submit the valid ones with one engine batch.
  std::vector<engine::JobSpec> specs;
  specs.reserve(items.size());
  call->item_of.reserve(items.size());
  const RequestClock clock = RequestClock::read();  // for every item (issue 19)
  for (int i = 0; i < n; ++i) {
    const RequestFields& item = items[static_cast<std::size_t>(i)];
    auto* out = call->refs->add_items();
    out->set_tag(item.tag);
    if (std::string why =
            admission.caller.handler_refusal(security::Method::kSubmitBatch, item.handler);
        !why.empty()) {
      out->set_code(code_number(Refusal::kPermissionDenied));
      out->set_message(why);
      continue;
    }
    engine::JobSpec& spec = specs.emplace_back();
    if (auto err = to_spec(item, clock, true, spec)) {
      specs.pop_back();
      out->set_code(code_number(*err));
      out->set_message(err->message);
      continue;
    }
    call->item_of.push_back(i);
  }
  // (D9 in durable.cc) The items are answered once the batch's durable
  // accepts are committed, from the commit's callback: this gRPC thread
  // does not wait for the disk.
  call->results.resize(specs.size());
  SubmitBatchCall* c = call.release();  // committed() deletes it
  engine_.submit_batch(specs, nullptr, nullptr, nullptr, c->results, /*stop_when_full=*/false,
                       /*ack_by_result=*/false, {&SubmitBatchCall::committed, c});
  return reactor;  // not c->reactor: committed() may have deleted c already
}

grpc::ServerUnaryReactor* JobServiceImpl::Wait(grpc::CallbackServerContext* ctx,
                                               const tpool::v1::WaitRequest* req,
                                               tpool::v1::JobResult* resp) {
  if (auto a = access_.admit(ctx, security::Method::kWait); a.refused) {
    return finish_now(ctx, *a.refused);
  }
  if (auto s = other_replica(req->job_id(), req->replica(), replica_)) return finish_now(ctx, *s);
  auto found = engine_.find(req->job_id());
  if (!found.ok()) return finish_now(ctx, to_status(*found.error, ctx));
  auto* r = new JobWaitReactor(resp, replica_, limits_.max_message_bytes, ctx->deadline());
  bool will_notify = found.value->add_waiter(&JobWaitReactor::done, r);
  r->watch(found.value, false, will_notify);
  return r;
}

namespace {

// WaitBatch: one call waiting for many jobs, each through its own waiter.
//
// Invariants:
//  (B1) Every result slot is created before the first waiter is registered
//       and the repeated field is never resized afterwards: each slot is
//       written by exactly one thread (the registering thread for an id that
//       is unknown or already final; else the job's waiter, or nobody if
//       OnCancel removed the waiter first), so no two threads write one slot.
//  (B2) pending_ counts the holds on Finish: one for the registering thread
//       (dropped when every waiter is registered) and one per registered
//       waiter (dropped by the waiter, or by OnCancel when remove_waiter
//       took it back). Whoever drops the last hold calls Finish, once. The
//       acq_rel decrements order every slot's writes before the final pass.
//  (B3) mu_ orders OnCancel against the registration loop: OnCancel removes
//       only the waiters registered before it took mu_, and the loop
//       registers no waiter after OnCancel has run (it checks cancelled_).
//
// Lifetime: as JobWaitReactor, two references (gRPC's, the starting
// thread's); the last hold may Finish before start() returns.
class JobWaitBatchReactor final : public grpc::ServerUnaryReactor {
 public:
  JobWaitBatchReactor(tpool::v1::ResultBatch* resp, const std::string& replica,
                      std::uint64_t max_reply_bytes, int n)
      : resp_(resp), replica_(replica), max_reply_bytes_(max_reply_bytes) {
    resp_->mutable_results()->Reserve(n);
    for (int i = 0; i < n; ++i) resp_->add_results();  // (B1)
    items_.resize(static_cast<std::size_t>(n));
  }

  void start(engine::Engine& engine, const tpool::v1::WaitBatchRequest& req) {
    {
      tpool::MutexLock lock(mu_);
      for (int i = 0; i < req.job_ids_size() && !cancelled_; ++i) {
        const std::uint64_t id = req.job_ids(i);
        tpool::v1::JobResult& slot = *resp_->mutable_results(i);
        slot.set_job_id(id);
        auto found = engine.find(id);
        if (!found.ok()) {
          slot.set_code(code_number(*found.error));
          slot.set_message(found.error->message);
          continue;
        }
        Item& item = items_[static_cast<std::size_t>(i)];
        item = {this, i, found.value};
        pending_.fetch_add(1, std::memory_order_relaxed);  // (B2) ours keeps it above 0
        if (!item.job->add_waiter(&JobWaitBatchReactor::done, &item)) {
          fill_result(*item.job, replica_, slot);  // already final: ours to write (B1)
          pending_.fetch_sub(1, std::memory_order_relaxed);
          item.job.reset();
        }
      }
    }
    release();  // (B2) the registering thread's hold
    unref();
  }

  static void done(void* user, engine::Job& job) {
    auto* item = static_cast<Item*>(user);
    JobWaitBatchReactor* self = item->self;
    fill_result(job, self->replica_, *self->resp_->mutable_results(item->index));
    self->release();
  }

  void OnCancel() override {
    std::vector<Item*> taken;
    {
      tpool::MutexLock lock(mu_);  // (B3)
      cancelled_ = true;
      for (Item& item : items_) {
        if (item.job && item.job->remove_waiter(&JobWaitBatchReactor::done, &item)) {
          taken.push_back(&item);
        }
      }
    }
    for (std::size_t k = 0; k < taken.size(); ++k) release();
  }
  void OnDone() override { unref(); }

 private:
  struct Item {
    JobWaitBatchReactor* self = nullptr;
    int index = 0;
    engine::JobPtr job;  // set while its waiter may be registered
  };

  void release() {
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) != 1) return;  // (B2)
    bool cancelled;
    {
      tpool::MutexLock lock(mu_);
      cancelled = cancelled_;
    }
    if (cancelled) {
      Finish(to_status(Refusal::kCallCancelled, "the call was cancelled by the client"));
      return;
    }
    // The results in request order, while they fit in one reply: one too
    // large alone is FAILED, saying so (as in Wait); one that would take the
    // reply past the limit keeps its id and says to wait for it alone.
    std::uint64_t used = 0;
    for (auto& r : *resp_->mutable_results()) {
      fit_result(r, max_reply_bytes_);
      if (used + batch_entry_bytes(r) > max_reply_bytes_) {
        const std::uint64_t id = r.job_id();
        r.Clear();
        r.set_job_id(id);
        r.set_code(code_number(Refusal::kExhausted));
        r.set_message("job " + std::to_string(id) +
                      " has ended, but its result does not fit in this reply "
                      "(server.max_message_bytes = " +
                      std::to_string(max_reply_bytes_) + "): Wait for it alone");
      }
      used += batch_entry_bytes(r);
    }
    Finish(grpc::Status::OK);
  }
  void unref() {
    if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }

  tpool::v1::ResultBatch* resp_;
  const std::string& replica_;
  const std::uint64_t max_reply_bytes_;
  std::atomic<int> refs_{2};
  std::atomic<int> pending_{1};  // (B2) the registering thread's hold
  tpool::Mutex mu_;
  bool cancelled_ GUARDED_BY(mu_) = false;
  // Sized once, in the constructor: waiters hold pointers to its elements.
  std::vector<Item> items_;
};

}  // namespace

grpc::ServerUnaryReactor* JobServiceImpl::WaitBatch(grpc::CallbackServerContext* ctx,
                                                    const tpool::v1::WaitBatchRequest* req,
                                                    tpool::v1::ResultBatch* resp) {
  if (auto a = access_.admit(ctx, security::Method::kWaitBatch); a.refused) {
    return finish_now(ctx, *a.refused);
  }
  if (req->job_ids_size() > kMaxWaitBatchIds) {
    return finish_now(ctx,
                      to_status(Refusal::kInvalidRequest,
                                "WaitBatch names " + std::to_string(req->job_ids_size()) +
                                    " jobs, more than the " + std::to_string(kMaxWaitBatchIds) +
                                    " one call may wait for: split the ids into calls "
                                    "of at most " +
                                    std::to_string(kMaxWaitBatchIds)));
  }
  if (req->job_ids_size() > 0) {
    if (auto s = other_replica(req->job_ids(0), req->replica(), replica_)) {
      return finish_now(ctx, *s);
    }
  }
  auto* r = new JobWaitBatchReactor(resp, replica_, limits_.max_message_bytes, req->job_ids_size());
  r->start(engine_, *req);
  return r;
}

namespace {

// Get's answer, and each of ListJobs'.
void fill_status(const engine::Job& job, const std::string& replica, tpool::v1::JobStatus* resp) {
  engine::JobState state = job.state();
  resp->set_job_id(job.id());
  resp->set_replica(replica);
  resp->set_handler(job.handler_name());
  resp->set_state(to_proto(state));
  resp->set_wait_us(static_cast<std::uint64_t>(job.wait_time().count()));
  resp->set_run_us(static_cast<std::uint64_t>(job.run_time().count()));
  auto [fraction, note] = job.progress_snapshot();
  resp->set_progress(engine::is_final(state) && state == engine::JobState::kSucceeded ? 1.0
                                                                                      : fraction);
  resp->set_progress_message(note);
  if (engine::is_final(state)) {
    const std::string_view message = job.message();
    resp->set_message(message.data(), message.size());
  }
  for (const auto& [k, v] : job.labels()) (*resp->mutable_labels())[k] = v;
  resp->set_accepted_unix_ms(static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(job.accepted_wall().time_since_epoch())
          .count()));
  resp->set_lane(to_proto(job.lane()));
  resp->set_attempts(job.attempts());
  for (std::string& m : job.attempt_messages()) resp->add_attempt_messages(std::move(m));
}

}  // namespace

grpc::ServerUnaryReactor* JobServiceImpl::Get(grpc::CallbackServerContext* ctx,
                                              const tpool::v1::JobRef* req,
                                              tpool::v1::JobStatus* resp) {
  if (auto a = access_.admit(ctx, security::Method::kGet); a.refused) {
    return finish_now(ctx, *a.refused);
  }
  if (auto s = other_replica(req->job_id(), req->replica(), replica_)) return finish_now(ctx, *s);
  auto found = engine_.find(req->job_id());
  if (!found.ok()) return finish_now(ctx, to_status(*found.error, ctx));
  fill_status(*found.value, replica_, resp);
  return finish_now(ctx, grpc::Status::OK);
}

grpc::ServerUnaryReactor* JobServiceImpl::Cancel(grpc::CallbackServerContext* ctx,
                                                 const tpool::v1::JobRef* req,
                                                 tpool::v1::CancelReply* resp) {
  if (auto a = access_.admit(ctx, security::Method::kCancel); a.refused) {
    return finish_now(ctx, *a.refused);
  }
  if (auto s = other_replica(req->job_id(), req->replica(), replica_)) return finish_now(ctx, *s);
  auto found = engine_.find(req->job_id());
  if (!found.ok()) return finish_now(ctx, to_status(*found.error, ctx));
  found.value->cancel();
  resp->set_state(to_proto(found.value->state()));
  return finish_now(ctx, grpc::Status::OK);
}

grpc::ServerUnaryReactor* JobServiceImpl::ListHandlers(grpc::CallbackServerContext* ctx,
                                                       const tpool::v1::ListHandlersRequest*,
                                                       tpool::v1::ListHandlersReply* resp) {
  if (auto a = access_.admit(ctx, security::Method::kListHandlers); a.refused) {
    return finish_now(ctx, *a.refused);
  }
  for (const auto& h : engine_.handlers()) {
    auto* out = resp->add_handlers();
    out->set_name(h.name);
    out->set_plugin(h.plugin_name);
    out->set_plugin_version(h.plugin_version);
    out->set_path(h.plugin_file);
    out->set_description(h.description);
    out->set_lane_hint(to_proto(h.lane));
    out->set_isolation(h.isolation == plugin_host::IsolationMode::kProcess ? "process"
                                                                           : "in_process");
  }
  return finish_now(ctx, grpc::Status::OK);
}

grpc::ServerUnaryReactor* JobServiceImpl::ListJobs(grpc::CallbackServerContext* ctx,
                                                   const tpool::v1::ListJobsRequest* req,
                                                   tpool::v1::ListJobsReply* resp) {
  if (auto a = access_.admit(ctx, security::Method::kListJobs); a.refused) {
    return finish_now(ctx, *a.refused);
  }
  engine::ListFilter f;
  if (req->page_size() > 1000) {
    return finish_now(ctx, grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                        "page_size is " + std::to_string(req->page_size()) +
                                            "; ask for at most 1000 jobs a page (0: 100)"));
  }
  f.limit = req->page_size() == 0 ? 100 : req->page_size();
  if (!req->page_token().empty()) {
    // The token is the last id of the previous page, in decimal.
    const std::string& t = req->page_token();
    std::uint64_t v = 0;
    const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
    if (ec != std::errc() || end != t.data() + t.size()) {
      return finish_now(ctx, grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                          "page_token '" + t.substr(0, 32) +
                                              "' is not one this server returned; pass a "
                                              "next_page_token unchanged, or none to start again"));
    }
    f.after_id = v;
  }
  for (int st : req->states()) {
    switch (static_cast<tpool::v1::JobState>(st)) {
      case tpool::v1::JOB_STATE_QUEUED:
        f.states.push_back(engine::JobState::kQueued);
        break;
      case tpool::v1::JOB_STATE_RUNNING:
        f.states.push_back(engine::JobState::kRunning);
        break;
      case tpool::v1::JOB_STATE_SUCCEEDED:
        f.states.push_back(engine::JobState::kSucceeded);
        break;
      case tpool::v1::JOB_STATE_FAILED:
        f.states.push_back(engine::JobState::kFailed);
        break;
      case tpool::v1::JOB_STATE_CANCELLED:
        f.states.push_back(engine::JobState::kCancelled);
        break;
      case tpool::v1::JOB_STATE_TIMED_OUT:
        f.states.push_back(engine::JobState::kTimedOut);
        break;
      case tpool::v1::JOB_STATE_SCHEDULED:
        f.states.push_back(engine::JobState::kScheduled);
        break;
      default:
        return finish_now(ctx, grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                            "states holds " + std::to_string(st) +
                                                ", not a job state; use JOB_STATE_QUEUED (1) to "
                                                "JOB_STATE_SCHEDULED (7)"));
    }
  }
  f.handler = req->handler();
  f.label_key = req->label_key();
  f.label_value = req->label_value();
  if (f.label_key.empty() && !f.label_value.empty()) {
    return finish_now(ctx, grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                        "label_value is set without label_key; name the label"));
  }
  bool more = false;
  for (const auto& job : engine_.list(f, &more)) fill_status(*job, replica_, resp->add_jobs());
  if (more && resp->jobs_size() > 0) {
    resp->set_next_page_token(std::to_string(resp->jobs(resp->jobs_size() - 1).job_id()));
  }
  return finish_now(ctx, grpc::Status::OK);
}

grpc::ServerUnaryReactor* JobServiceImpl::Retry(grpc::CallbackServerContext* ctx,
                                                const tpool::v1::JobRef* req,
                                                tpool::v1::JobRef* resp) {
  auto a = access_.admit(ctx, security::Method::kRetry);
  if (a.refused) return finish_now(ctx, *a.refused);
  if (auto s = other_replica(req->job_id(), req->replica(), replica_)) return finish_now(ctx, *s);
  // The allow-list names handlers: check the retried job's.
  auto found = engine_.find(req->job_id());
  if (!found.ok()) return finish_now(ctx, to_status(*found.error, ctx));
  if (std::string why =
          a.caller.handler_refusal(security::Method::kRetry, found.value->handler_name());
      !why.empty()) {
    return finish_now(ctx, grpc::Status(grpc::StatusCode::PERMISSION_DENIED, why));
  }
  auto sub = engine_.retry(req->job_id(), nullptr, nullptr);
  if (!sub.ok()) return finish_now(ctx, to_status(*sub.error, ctx));
  resp->set_job_id(sub.value.job->id());
  resp->set_replica(replica_);
  return finish_now(ctx, grpc::Status::OK);
}

RpcSnapshot JobServiceImpl::snapshot() const noexcept {
  return {streams_active.load(std::memory_order_relaxed),
          streams_total.load(std::memory_order_relaxed),
          streams_rejected.load(std::memory_order_relaxed),
          stream_buffered_bytes.load(std::memory_order_relaxed),
          stream_unparsable_messages.load(std::memory_order_relaxed)};
}

}  // namespace tpool::rpc
