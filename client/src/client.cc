// tpool::client::Client over the generated stubs: deadlines, metadata,
// retries where safe (client.h), proto <-> client types.
// tpool/common/mutex.h first: see the note in stream.cc.
#include "tpool/common/mutex.h"
//
#include "tpool/client/client.h"

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <future>
#include <random>
#include <thread>

#include "internal.h"
#include "tpool/client/stream.h"
#include "tpool/v1/admin.grpc.pb.h"
#include "tpool/v1/jobs.grpc.pb.h"

namespace tpool::client {

namespace {

constexpr const char* kCodeNames[] = {
    "OK",        "CANCELLED",      "UNKNOWN",           "INVALID_ARGUMENT",   "DEADLINE_EXCEEDED",
    "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
    "ABORTED",   "OUT_OF_RANGE",   "UNIMPLEMENTED",     "INTERNAL",           "UNAVAILABLE",
    "DATA_LOSS", "UNAUTHENTICATED"};

// "10.0.0.1:50051,10.0.0.2:50051" -> its two entries; one address -> itself.
std::vector<std::string> split_addresses(const std::string& address) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (true) {
    auto comma = address.find(',', start);
    auto part = address.substr(start, comma == std::string::npos ? comma : comma - start);
    if (!part.empty()) out.push_back(part);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

// The gRPC target: a list becomes the ipv4:/ipv6: resolver's address list;
// a bare absolute path is a Unix socket.
std::string target_of(const std::string& address) {
  if (!address.empty() && address.front() == '/') return "unix:" + address;
  if (is_unix_address(address)) return address;
  if (address.find(',') == std::string::npos) return address;
  return (address.front() == '[' ? "ipv6:" : "ipv4:") + address;
}

// Several addresses, or a name that may resolve to several: spread the calls.
bool balanced(const std::string& address) {
  return address.find(',') != std::string::npos || address.rfind("dns:", 0) == 0;
}

std::shared_ptr<grpc::Channel> make_channel(const ClientOptions& o) {
  grpc::ChannelArguments args;
  if (balanced(o.address)) {
    args.SetServiceConfigJSON(R"({"loadBalancingConfig": [{"round_robin": {}}]})");
  }
  args.SetMaxReceiveMessageSize(o.max_message_bytes);
  args.SetMaxSendMessageSize(o.max_message_bytes);
  // Retries are this library's (client.h), not gRPC's transparent ones.
  args.SetInt(GRPC_ARG_ENABLE_RETRIES, 0);
  for (const auto& [k, v] : o.channel_args) args.SetInt(k, v);
  std::shared_ptr<grpc::ChannelCredentials> creds;
  if (o.tls.enabled) {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = o.tls.root_certs_pem;
    ssl.pem_cert_chain = o.tls.cert_chain_pem;
    ssl.pem_private_key = o.tls.private_key_pem;
    creds = grpc::SslCredentials(ssl);
    if (!o.tls.server_name_override.empty()) {
      args.SetSslTargetNameOverride(o.tls.server_name_override);
    }
  } else {
    creds = grpc::InsecureChannelCredentials();
  }
  return grpc::CreateCustomChannel(target_of(o.address), creds, args);
}

JobState state_of(tpool::v1::JobState s) {
  return static_cast<JobState>(s);
}
Lane lane_of(tpool::v1::Lane l) {
  return static_cast<Lane>(l);
}

bool keyed(const Job& j) {
  return !j.idempotency_key.empty();
}

}  // namespace

std::string Error::code_name() const {
  if (code_ >= 0 && code_ < static_cast<int>(std::size(kCodeNames))) return kCodeNames[code_];
  return "CODE_" + std::to_string(code_);
}

std::string Error::to_string() const {
  return message_.empty() ? code_name() : code_name() + ": " + message_;
}

const char* to_string(JobState s) noexcept {
  switch (s) {
    case JobState::kUnspecified:
      return "UNSPECIFIED";
    case JobState::kQueued:
      return "QUEUED";
    case JobState::kRunning:
      return "RUNNING";
    case JobState::kSucceeded:
      return "SUCCEEDED";
    case JobState::kFailed:
      return "FAILED";
    case JobState::kCancelled:
      return "CANCELLED";
    case JobState::kTimedOut:
      return "TIMED_OUT";
    case JobState::kScheduled:
      return "SCHEDULED";
  }
  return "UNSPECIFIED";
}

const char* to_string(Lane l) noexcept {
  switch (l) {
    case Lane::kUnspecified:
      return "unspecified";
    case Lane::kDefault:
      return "default";
    case Lane::kBlocking:
      return "blocking";
  }
  return "unspecified";
}

const char* to_string(Health h) noexcept {
  switch (h) {
    case Health::kServing:
      return "SERVING";
    case Health::kNotServing:
      return "NOT_SERVING";
    case Health::kUnknown:
      return "UNKNOWN";
  }
  return "UNKNOWN";
}

tpool::v1::JobRequest to_proto(const Job& job) {
  tpool::v1::JobRequest r;
  r.set_handler(job.handler);
  r.set_payload(job.payload);
  r.set_lane(static_cast<tpool::v1::Lane>(job.lane));
  r.set_timeout_ms(static_cast<std::uint64_t>(job.timeout.count()));
  r.set_idempotency_key(job.idempotency_key);
  for (const auto& [k, v] : job.labels) (*r.mutable_labels())[k] = v;
  r.set_tag(job.tag);
  r.set_max_attempts(job.max_attempts);
  r.set_backoff_base_ms(static_cast<std::uint32_t>(job.backoff_base.count()));
  r.set_backoff_cap_ms(static_cast<std::uint32_t>(job.backoff_cap.count()));
  r.set_delay_ms(static_cast<std::uint64_t>(job.delay.count()));
  r.set_durable(job.durable);
  return r;
}

JobResult from_proto(const tpool::v1::JobResult& r) {
  JobResult out;
  out.job_id = r.job_id();
  out.state = state_of(r.state());
  out.output = r.output();
  out.message = r.message();
  out.tag = r.tag();
  out.code = r.code();
  out.wait = std::chrono::microseconds(r.wait_us());
  out.run = std::chrono::microseconds(r.run_us());
  out.replica = r.replica();
  out.attempts = r.attempts();
  return out;
}

HandlerInfo from_proto(const tpool::v1::HandlerInfo& h) {
  return {h.name(),     h.plugin(),      h.plugin_version(),
          h.path(),     h.description(), lane_of(h.lane_hint()),
          h.isolation()};
}

JobStatus from_proto(const tpool::v1::JobStatus& s) {
  JobStatus out;
  out.job_id = s.job_id();
  out.handler = s.handler();
  out.state = state_of(s.state());
  out.lane = lane_of(s.lane());
  out.wait = std::chrono::microseconds(s.wait_us());
  out.run = std::chrono::microseconds(s.run_us());
  out.progress = s.progress();
  out.progress_message = s.progress_message();
  out.message = s.message();
  out.labels.insert(s.labels().begin(), s.labels().end());
  out.accepted_unix_ms = s.accepted_unix_ms();
  out.attempts = s.attempts();
  out.attempt_messages.assign(s.attempt_messages().begin(), s.attempt_messages().end());
  return out;
}

namespace detail {

Error to_error(const grpc::Status& s, const grpc::ClientContext* ctx) {
  std::chrono::milliseconds retry_after{0};
  if (ctx != nullptr) {
    const auto& trailers = ctx->GetServerTrailingMetadata();
    auto it = trailers.find("retry-after-ms");
    if (it != trailers.end()) {
      try {
        retry_after = std::chrono::milliseconds(
            std::stoll(std::string(it->second.data(), it->second.size())));
      } catch (const std::exception&) {
        retry_after = {};  // a malformed trailer is no advice
      }
    }
  }
  std::string msg = s.error_message();
  if (s.error_code() == grpc::StatusCode::UNAVAILABLE && msg.find("connect") != std::string::npos) {
    msg = "cannot reach tpoold (" + msg + ")";
  }
  return Error(static_cast<int>(s.error_code()), std::move(msg), retry_after);
}

}  // namespace detail

struct Client::Impl {
  ClientOptions options;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<tpool::v1::JobService::Stub> jobs;
  std::unique_ptr<tpool::v1::AdminService::Stub> admin;
  // Several addresses: each one's own channel, to reach a job's owner
  // (owner_stub). Empty with one address or a caller's channel. Immutable.
  std::vector<std::string> addresses;
  std::vector<std::unique_ptr<tpool::v1::JobService::Stub>> address_jobs;
  // replica id -> index into addresses, learned by asking (owner_stub).
  // The Client's only mutable state; guarded by owners_mu.
  mutable tpool::Mutex owners_mu;
  mutable std::map<std::string, std::size_t> owners GUARDED_BY(owners_mu);
  // Why the token is withheld (token_transport_problem); "" to send it.
  const std::string token_problem;

  Impl(ClientOptions o, std::shared_ptr<grpc::Channel> ch)
      : options(std::move(o)),
        channel(std::move(ch)),
        jobs(tpool::v1::JobService::NewStub(channel)),
        admin(tpool::v1::AdminService::NewStub(channel)),
        token_problem(token_transport_problem(options)) {}

  void add_addresses() {
    if (is_unix_address(options.address)) return;  // one socket, never a list
    auto list = split_addresses(options.address);
    if (list.size() < 2) return;
    for (const auto& a : list) {
      ClientOptions one = options;
      one.address = a;
      addresses.push_back(a);
      address_jobs.push_back(tpool::v1::JobService::NewStub(make_channel(one)));
    }
  }

  // The stub that reaches ref's owner. With one address (or none to choose
  // from) the balanced channel's; else the address remembered for the
  // replica, or found by asking each address for the job (Get): the owner
  // answers, the others say FAILED_PRECONDITION. forget: drop what was
  // remembered first (it answered FAILED_PRECONDITION: the replica moved).
  Result<tpool::v1::JobService::Stub*> owner_stub(const JobRef& ref, const CallOptions& call,
                                                  bool forget) const {
    if (addresses.empty() || ref.replica.empty()) return jobs.get();
    {
      tpool::MutexLock lock(owners_mu);
      if (forget) owners.erase(ref.replica);
      auto it = owners.find(ref.replica);
      if (it != owners.end()) return address_jobs[it->second].get();
    }
    tpool::v1::JobRef req;
    req.set_job_id(ref.job_id);
    req.set_replica(ref.replica);
    Error refused;
    std::string unreachable;
    for (std::size_t i = 0; i < addresses.size(); ++i) {
      grpc::ClientContext ctx;
      prepare(ctx, deadline_of(call));
      tpool::v1::JobStatus reply;
      grpc::Status s = address_jobs[i]->Get(&ctx, req, &reply);
      if (s.error_code() == grpc::StatusCode::FAILED_PRECONDITION) {
        if (refused.ok()) refused = detail::to_error(s, &ctx);
        continue;
      }
      if (s.error_code() == grpc::StatusCode::UNAVAILABLE ||
          s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
        unreachable += (unreachable.empty() ? "" : ", ") + addresses[i];
        continue;
      }
      // OK, or NOT_FOUND from the owner (the job's result has expired).
      tpool::MutexLock lock(owners_mu);
      owners[ref.replica] = i;
      return address_jobs[i].get();
    }
    if (!unreachable.empty()) {
      return Error(static_cast<int>(grpc::StatusCode::UNAVAILABLE),
                   "job " + std::to_string(ref.job_id) + " belongs to replica " + ref.replica +
                       ", which none of the reachable addresses is (unreachable: " + unreachable +
                       "); if " + ref.replica + " stopped, the jobs it had accepted are lost");
    }
    return refused.ok() ? Error(static_cast<int>(grpc::StatusCode::FAILED_PRECONDITION),
                                "no address answers for replica " + ref.replica)
                        : refused;
  }

  // attempt(stub, ctx) on ref's owner (owner_stub), with run()'s retries;
  // once more after finding the owner again if a remembered one refuses.
  template <class Attempt>
  Error run_on_owner(const JobRef& ref, const CallOptions& call, Attempt attempt) const {
    for (int pass = 0;; ++pass) {
      auto stub = owner_stub(ref, call, pass > 0);
      if (!stub.ok()) return stub.error();
      Error e = run(true, call, [&](grpc::ClientContext& ctx) { return attempt(**stub, ctx); });
      if (e.code() == static_cast<int>(grpc::StatusCode::UNAVAILABLE) && !addresses.empty()) {
        return Error(e.code(), "replica " + ref.replica + " (owner of job " +
                                   std::to_string(ref.job_id) + "): " + e.message() + "; if " +
                                   ref.replica + " stopped, the jobs it had accepted are lost");
      }
      if (e.code() != static_cast<int>(grpc::StatusCode::FAILED_PRECONDITION) || pass > 0 ||
          addresses.empty()) {
        return e;
      }
    }
  }

  std::chrono::system_clock::time_point deadline_of(const CallOptions& call) const {
    auto d = call.deadline.count() > 0 ? call.deadline : options.default_deadline;
    return std::chrono::system_clock::now() + d;
  }

  // Every call's context goes through here: the one place the token is put
  // on the wire, and only when the transport allows it (client.h).
  void prepare(grpc::ClientContext& ctx, std::chrono::system_clock::time_point deadline) const {
    ctx.set_deadline(deadline);
    for (const auto& [k, v] : options.metadata) ctx.AddMetadata(k, v);
    if (!options.bearer_token.empty() && token_problem.empty())
      ctx.AddMetadata("authorization", "Bearer " + options.bearer_token);
  }

  // Runs attempt(ctx) until it succeeds, fails with a code other than
  // UNAVAILABLE, `retryable` is false, the attempts run out, or the deadline
  // is too close for another backoff.
  template <class Attempt>
  Error run(bool retryable, const CallOptions& call, Attempt attempt) const {
    const auto deadline = deadline_of(call);
    const int attempts =
        retryable ? std::max(1, call.max_attempts > 0 ? call.max_attempts : options.max_attempts)
                  : 1;
    auto backoff = options.initial_backoff;
    thread_local std::minstd_rand rng(std::random_device{}());
    if (!token_problem.empty())
      return Error(static_cast<int>(grpc::StatusCode::UNAUTHENTICATED), token_problem);
    for (int i = 1;; ++i) {
      grpc::ClientContext ctx;
      prepare(ctx, deadline);
      grpc::Status s = attempt(ctx);
      if (s.ok()) return {};
      Error e = detail::to_error(s, &ctx);
      if (i >= attempts || s.error_code() != grpc::StatusCode::UNAVAILABLE) return e;
      // Full jitter (AWS architecture blog, "Exponential Backoff And Jitter").
      std::uniform_int_distribution<long> pick(0, std::max<long>(1, backoff.count()));
      auto sleep = std::chrono::milliseconds(pick(rng));
      if (std::chrono::system_clock::now() + sleep >= deadline) return e;
      std::this_thread::sleep_for(sleep);
      backoff *= 2;
    }
  }
};

Client::Client(ClientOptions options) {
  auto ch = make_channel(options);
  impl_ = std::make_unique<Impl>(std::move(options), std::move(ch));
  impl_->add_addresses();
}

Client::Client(std::shared_ptr<grpc::Channel> channel, ClientOptions options)
    : impl_(std::make_unique<Impl>(std::move(options), std::move(channel))) {}

Client::~Client() = default;

const ClientOptions& Client::options() const noexcept {
  return impl_->options;
}
std::shared_ptr<grpc::Channel> Client::channel() const {
  return impl_->channel;
}

Result<JobResult> Client::execute(const Job& job, const CallOptions& call) const {
  auto req = to_proto(job);
  tpool::v1::JobResult reply;
  Error e = impl_->run(keyed(job), call, [&](grpc::ClientContext& ctx) {
    return impl_->jobs->Execute(&ctx, req, &reply);
  });
  if (!e.ok()) return e;
  return from_proto(reply);
}

namespace {
// One asynchronous unary call: owns what gRPC needs until the callback.
template <class Req, class Rep>
struct AsyncCall {
  grpc::ClientContext ctx;
  Req request;
  Rep reply;
  std::function<void(Result<JobResult>)> done;
};

// The end of an AsyncCall, on the gRPC thread that runs its callback. The
// call (its ClientContext, which holds a reference to the channel) is
// destroyed before `done` runs, so a caller that destroys its Client once its
// last callback has run drops the channel's last reference on its own thread.
// Dropped here instead, the last reference would shut down gRPC's callback
// completion queue from one of that queue's own threads, which cannot join
// itself: a double free at exit (seen under ASan in tpoolctl bench, ~1 run in
// 30 of secure.Tpoolctl.BenchEveryMode; grpc/grpc#32584 describes the join).
template <class Req>
void end_async(AsyncCall<Req, tpool::v1::JobResult>* c, const grpc::Status& s) {
  std::unique_ptr<AsyncCall<Req, tpool::v1::JobResult>> own(c);
  Result<JobResult> r = s.ok() ? Result<JobResult>(from_proto(own->reply))
                               : Result<JobResult>(detail::to_error(s, &own->ctx));
  std::function<void(Result<JobResult>)> done = std::move(own->done);
  own.reset();
  done(std::move(r));
}
}  // namespace

void Client::execute_async(const Job& job, std::function<void(Result<JobResult>)> done,
                           const CallOptions& call) const {
  auto* c = new AsyncCall<tpool::v1::JobRequest, tpool::v1::JobResult>;
  impl_->prepare(c->ctx, impl_->deadline_of(call));
  c->request = to_proto(job);
  c->done = std::move(done);
  impl_->jobs->async()->Execute(&c->ctx, &c->request, &c->reply,
                                [c](grpc::Status s) { end_async(c, s); });
}

Result<std::uint64_t> Client::submit(const Job& job, const CallOptions& call) const {
  auto req = to_proto(job);
  tpool::v1::JobRef reply;
  Error e = impl_->run(keyed(job), call, [&](grpc::ClientContext& ctx) {
    return impl_->jobs->Submit(&ctx, req, &reply);
  });
  if (!e.ok()) return e;
  return reply.job_id();
}

Result<JobRef> Client::submit_ref(const Job& job, const CallOptions& call) const {
  auto req = to_proto(job);
  tpool::v1::JobRef reply;
  Error e = impl_->run(keyed(job), call, [&](grpc::ClientContext& ctx) {
    return impl_->jobs->Submit(&ctx, req, &reply);
  });
  if (!e.ok()) return e;
  return JobRef{reply.job_id(), reply.replica()};
}

Result<std::vector<BatchItem>> Client::submit_batch(const std::vector<Job>& jobs,
                                                    const CallOptions& call) const {
  tpool::v1::JobBatch req;
  bool all_keyed = !jobs.empty();
  for (const auto& j : jobs) {
    *req.add_jobs() = to_proto(j);
    all_keyed = all_keyed && keyed(j);
  }
  tpool::v1::JobRefs reply;
  Error e = impl_->run(all_keyed, call, [&](grpc::ClientContext& ctx) {
    return impl_->jobs->SubmitBatch(&ctx, req, &reply);
  });
  if (!e.ok()) return e;
  std::vector<BatchItem> out;
  out.reserve(static_cast<std::size_t>(reply.items_size()));
  for (const auto& it : reply.items()) {
    out.push_back({it.job_id(), Error(it.code(), it.message()), it.tag(), it.replica()});
  }
  return out;
}

Result<JobResult> Client::wait(std::uint64_t job_id, const CallOptions& call) const {
  tpool::v1::WaitRequest req;
  req.set_job_id(job_id);
  tpool::v1::JobResult reply;
  Error e = impl_->run(
      true, call, [&](grpc::ClientContext& ctx) { return impl_->jobs->Wait(&ctx, req, &reply); });
  if (!e.ok()) return e;
  return from_proto(reply);
}

Result<std::vector<JobResult>> Client::wait_batch(const std::vector<std::uint64_t>& job_ids,
                                                  const CallOptions& call) const {
  return wait_batch(std::string(), job_ids, call);
}

Result<std::vector<JobResult>> Client::wait_batch(const std::string& replica,
                                                  const std::vector<std::uint64_t>& job_ids,
                                                  const CallOptions& call) const {
  tpool::v1::WaitBatchRequest req;
  req.mutable_job_ids()->Add(job_ids.begin(), job_ids.end());
  req.set_replica(replica);
  tpool::v1::ResultBatch reply;
  const JobRef owner{job_ids.empty() ? 0 : job_ids.front(), replica};
  Error e = impl_->run_on_owner(owner, call, [&](auto& stub, grpc::ClientContext& ctx) {
    return stub.WaitBatch(&ctx, req, &reply);
  });
  if (!e.ok()) return e;
  std::vector<JobResult> out;
  out.reserve(static_cast<std::size_t>(reply.results_size()));
  for (const auto& r : reply.results()) out.push_back(from_proto(r));
  return out;
}

void Client::wait_async(std::uint64_t job_id, std::function<void(Result<JobResult>)> done,
                        const CallOptions& call) const {
  auto* c = new AsyncCall<tpool::v1::WaitRequest, tpool::v1::JobResult>;
  impl_->prepare(c->ctx, impl_->deadline_of(call));
  c->request.set_job_id(job_id);
  c->done = std::move(done);
  impl_->jobs->async()->Wait(&c->ctx, &c->request, &c->reply,
                             [c](grpc::Status s) { end_async(c, s); });
}

Result<JobStatus> Client::get(std::uint64_t job_id, const CallOptions& call) const {
  tpool::v1::JobRef req;
  req.set_job_id(job_id);
  tpool::v1::JobStatus reply;
  Error e = impl_->run(
      true, call, [&](grpc::ClientContext& ctx) { return impl_->jobs->Get(&ctx, req, &reply); });
  if (!e.ok()) return e;
  return from_proto(reply);
}

Result<JobPage> Client::list_jobs(const ListJobsRequest& in, const CallOptions& call) const {
  tpool::v1::ListJobsRequest req;
  for (JobState st : in.states) req.add_states(static_cast<tpool::v1::JobState>(st));
  req.set_handler(in.handler);
  req.set_label_key(in.label_key);
  req.set_label_value(in.label_value);
  req.set_page_size(in.page_size);
  req.set_page_token(in.page_token);
  tpool::v1::ListJobsReply reply;
  Error e = impl_->run(true, call, [&](grpc::ClientContext& ctx) {
    return impl_->jobs->ListJobs(&ctx, req, &reply);
  });
  if (!e.ok()) return e;
  JobPage page;
  for (const auto& j : reply.jobs()) page.jobs.push_back(from_proto(j));
  page.next_page_token = reply.next_page_token();
  return page;
}

Result<JobRef> Client::retry(std::uint64_t job_id, const CallOptions& call) const {
  tpool::v1::JobRef req;
  req.set_job_id(job_id);
  tpool::v1::JobRef reply;
  Error e = impl_->run(
      false, call, [&](grpc::ClientContext& ctx) { return impl_->jobs->Retry(&ctx, req, &reply); });
  if (!e.ok()) return e;
  return JobRef{reply.job_id(), reply.replica()};
}

Result<JobState> Client::cancel(std::uint64_t job_id, const CallOptions& call) const {
  tpool::v1::JobRef req;
  req.set_job_id(job_id);
  tpool::v1::CancelReply reply;
  Error e = impl_->run(
      true, call, [&](grpc::ClientContext& ctx) { return impl_->jobs->Cancel(&ctx, req, &reply); });
  if (!e.ok()) return e;
  return state_of(reply.state());
}

Result<JobResult> Client::wait(const JobRef& ref, const CallOptions& call) const {
  tpool::v1::WaitRequest req;
  req.set_job_id(ref.job_id);
  req.set_replica(ref.replica);
  tpool::v1::JobResult reply;
  Error e = impl_->run_on_owner(ref, call, [&](auto& stub, grpc::ClientContext& ctx) {
    return stub.Wait(&ctx, req, &reply);
  });
  if (!e.ok()) return e;
  return from_proto(reply);
}

void Client::wait_async(const JobRef& ref, std::function<void(Result<JobResult>)> done,
                        const CallOptions& call) const {
  auto stub = impl_->owner_stub(ref, call, false);
  if (!stub.ok()) {
    done(stub.error());
    return;
  }
  auto* c = new AsyncCall<tpool::v1::WaitRequest, tpool::v1::JobResult>;
  impl_->prepare(c->ctx, impl_->deadline_of(call));
  c->request.set_job_id(ref.job_id);
  c->request.set_replica(ref.replica);
  c->done = std::move(done);
  (*stub)->async()->Wait(&c->ctx, &c->request, &c->reply, [c](grpc::Status s) { end_async(c, s); });
}

Result<JobStatus> Client::get(const JobRef& ref, const CallOptions& call) const {
  tpool::v1::JobRef req;
  req.set_job_id(ref.job_id);
  req.set_replica(ref.replica);
  tpool::v1::JobStatus reply;
  Error e = impl_->run_on_owner(
      ref, call, [&](auto& stub, grpc::ClientContext& ctx) { return stub.Get(&ctx, req, &reply); });
  if (!e.ok()) return e;
  return from_proto(reply);
}

Result<JobState> Client::cancel(const JobRef& ref, const CallOptions& call) const {
  tpool::v1::JobRef req;
  req.set_job_id(ref.job_id);
  req.set_replica(ref.replica);
  tpool::v1::CancelReply reply;
  Error e = impl_->run_on_owner(ref, call, [&](auto& stub, grpc::ClientContext& ctx) {
    return stub.Cancel(&ctx, req, &reply);
  });
  if (!e.ok()) return e;
  return state_of(reply.state());
}

Result<std::vector<HandlerInfo>> Client::handlers(const CallOptions& call) const {
  tpool::v1::ListHandlersReply reply;
  Error e = impl_->run(true, call, [&](grpc::ClientContext& ctx) {
    return impl_->jobs->ListHandlers(&ctx, {}, &reply);
  });
  if (!e.ok()) return e;
  std::vector<HandlerInfo> out;
  for (const auto& h : reply.handlers()) out.push_back(from_proto(h));
  return out;
}

Result<tpool::v1::StatsReply> Client::stats(const CallOptions& call) const {
  tpool::v1::StatsReply reply;
  Error e = impl_->run(
      true, call, [&](grpc::ClientContext& ctx) { return impl_->admin->Stats(&ctx, {}, &reply); });
  if (!e.ok()) return e;
  return reply;
}

Result<Health> Client::health(const CallOptions& call) const {
  // grpc.health.v1.HealthCheckRequest{service = ""} encodes to no bytes; the
  // response is field 1 (status) as a varint. Hand-coded so the library does
  // not need the health proto, which Debian does not ship.
  grpc::GenericStub generic(impl_->channel);
  std::string body;
  Error e = impl_->run(true, call, [&](grpc::ClientContext& ctx) {
    grpc::Slice empty(std::string{});
    grpc::ByteBuffer request(&empty, 1), response;
    std::promise<grpc::Status> done;
    generic.UnaryCall(&ctx, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request,
                      &response, [&done](grpc::Status s) { done.set_value(std::move(s)); });
    grpc::Status s = done.get_future().get();
    if (s.ok()) {
      std::vector<grpc::Slice> slices;
      (void)response.Dump(&slices);
      body.clear();
      for (auto& sl : slices) body.append(reinterpret_cast<const char*>(sl.begin()), sl.size());
    }
    return s;
  });
  if (!e.ok()) return e;
  if (body.size() == 2 && body[0] == '\x08') {
    if (body[1] == '\x01') return Health::kServing;
    if (body[1] == '\x02') return Health::kNotServing;
  }
  return Health::kUnknown;
}

Result<DrainResult> Client::drain(std::chrono::milliseconds timeout,
                                  const CallOptions& call) const {
  tpool::v1::DrainRequest req;
  req.set_timeout_ms(static_cast<std::uint64_t>(timeout.count()));
  tpool::v1::DrainReply reply;
  Error e = impl_->run(false, call, [&](grpc::ClientContext& ctx) {
    return impl_->admin->Drain(&ctx, req, &reply);
  });
  if (!e.ok()) return e;
  return DrainResult{reply.drained(), reply.finished(), reply.cancelled()};
}

Result<ReloadResult> Client::reload(const CallOptions& call) const {
  tpool::v1::ReloadPluginsReply reply;
  Error e = impl_->run(false, call, [&](grpc::ClientContext& ctx) {
    return impl_->admin->ReloadPlugins(&ctx, {}, &reply);
  });
  if (!e.ok()) return e;
  ReloadResult out;
  for (const auto& h : reply.handlers()) out.handlers.push_back(from_proto(h));
  out.message = reply.message();
  return out;
}

std::unique_ptr<Stream> Client::stream(const StreamOptions& options) const {
  auto d = options.deadline.count() > 0 ? options.deadline : impl_->options.default_deadline;
  auto ctx = std::make_unique<grpc::ClientContext>();
  impl_->prepare(*ctx, std::chrono::system_clock::now() + d);
  return detail::open_stream(*impl_->jobs, std::move(ctx), options);
}

bool is_unix_address(const std::string& address) {
  return address.rfind("unix:", 0) == 0 || address.rfind("unix-abstract:", 0) == 0 ||
         (!address.empty() && address.front() == '/');
}

std::string token_transport_problem(const ClientOptions& o) {
  if (o.bearer_token.empty() || o.tls.enabled || o.allow_insecure_token ||
      is_unix_address(o.address))
    return "";
  return "the bearer token is not sent to " + o.address +
         " over plaintext TCP, where anyone on the path could read it: use TLS (--tls-ca), a "
         "unix: socket address, or, if a TLS-terminating proxy on this host forwards the "
         "call, --insecure-token (ClientOptions::allow_insecure_token)";
}

Result<std::string> read_token_file(const std::string& path) {
  auto usage = [](std::string m) {
    return Error(static_cast<int>(grpc::StatusCode::INVALID_ARGUMENT), std::move(m));
  };
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    return usage("cannot read the token file '" + path + "' (" + std::strerror(errno) +
                 "); check the path");
  if ((st.st_mode & (S_IRGRP | S_IROTH)) != 0)
    return usage("the token file '" + path + "' can be read by other users; run `chmod 600 " +
                 path + "`");
  std::ifstream in(path, std::ios::binary);
  std::string line;
  if (!in || !std::getline(in, line))
    return usage("the token file '" + path +
                 "' is empty or unreadable; put the token printed by "
                 "`tpoolctl token create` on its first line");
  auto first = line.find_first_not_of(" \t\r");
  auto last = line.find_last_not_of(" \t\r");
  if (first == std::string::npos)
    return usage("the token file '" + path +
                 "' has an empty first line; put the token printed "
                 "by `tpoolctl token create` there");
  return line.substr(first, last - first + 1);
}

}  // namespace tpool::client
