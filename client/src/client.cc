// tpool::client::Client over the generated stubs: deadlines, metadata,
// retries where safe (client.h), proto <-> client types.
#include "tpool/client/client.h"

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

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

std::shared_ptr<grpc::Channel> make_channel(const ClientOptions& o) {
  grpc::ChannelArguments args;
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
  return grpc::CreateCustomChannel(o.address, creds, args);
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
  return out;
}

HandlerInfo from_proto(const tpool::v1::HandlerInfo& h) {
  return {h.name(), h.plugin(),      h.plugin_version(),
          h.path(), h.description(), lane_of(h.lane_hint())};
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

  Impl(ClientOptions o, std::shared_ptr<grpc::Channel> ch)
      : options(std::move(o)),
        channel(std::move(ch)),
        jobs(tpool::v1::JobService::NewStub(channel)),
        admin(tpool::v1::AdminService::NewStub(channel)) {}

  std::chrono::system_clock::time_point deadline_of(const CallOptions& call) const {
    auto d = call.deadline.count() > 0 ? call.deadline : options.default_deadline;
    return std::chrono::system_clock::now() + d;
  }

  void prepare(grpc::ClientContext& ctx, std::chrono::system_clock::time_point deadline) const {
    ctx.set_deadline(deadline);
    for (const auto& [k, v] : options.metadata) ctx.AddMetadata(k, v);
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
}  // namespace

void Client::execute_async(const Job& job, std::function<void(Result<JobResult>)> done,
                           const CallOptions& call) const {
  auto* c = new AsyncCall<tpool::v1::JobRequest, tpool::v1::JobResult>;
  impl_->prepare(c->ctx, impl_->deadline_of(call));
  c->request = to_proto(job);
  c->done = std::move(done);
  impl_->jobs->async()->Execute(&c->ctx, &c->request, &c->reply, [c](grpc::Status s) {
    std::unique_ptr<AsyncCall<tpool::v1::JobRequest, tpool::v1::JobResult>> own(c);
    if (s.ok()) {
      own->done(from_proto(own->reply));
    } else {
      own->done(detail::to_error(s, &own->ctx));
    }
  });
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
    out.push_back({it.job_id(), Error(it.code(), it.message()), it.tag()});
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

void Client::wait_async(std::uint64_t job_id, std::function<void(Result<JobResult>)> done,
                        const CallOptions& call) const {
  auto* c = new AsyncCall<tpool::v1::WaitRequest, tpool::v1::JobResult>;
  impl_->prepare(c->ctx, impl_->deadline_of(call));
  c->request.set_job_id(job_id);
  c->done = std::move(done);
  impl_->jobs->async()->Wait(&c->ctx, &c->request, &c->reply, [c](grpc::Status s) {
    std::unique_ptr<AsyncCall<tpool::v1::WaitRequest, tpool::v1::JobResult>> own(c);
    if (s.ok()) {
      own->done(from_proto(own->reply));
    } else {
      own->done(detail::to_error(s, &own->ctx));
    }
  });
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

Result<JobState> Client::cancel(std::uint64_t job_id, const CallOptions& call) const {
  tpool::v1::JobRef req;
  req.set_job_id(job_id);
  tpool::v1::CancelReply reply;
  Error e = impl_->run(
      true, call, [&](grpc::ClientContext& ctx) { return impl_->jobs->Cancel(&ctx, req, &reply); });
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

}  // namespace tpool::client
