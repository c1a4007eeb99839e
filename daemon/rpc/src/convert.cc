#include "convert.h"

#include <algorithm>

namespace tpool::rpc {

using engine::ErrorCode;

RequestClock RequestClock::read(std::chrono::system_clock::time_point call_deadline) {
  RequestClock c;
  c.steady = std::chrono::steady_clock::now();
  c.system = std::chrono::system_clock::now();
  if (call_deadline != std::chrono::system_clock::time_point::max()) {
    // Clamped to ~100 years so the addition cannot overflow.
    const auto left = std::min<std::chrono::nanoseconds>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(call_deadline - c.system),
        std::chrono::hours(24 * 365 * 100));
    c.call_deadline = c.steady + left;
  }
  return c;
}

std::optional<engine::Error> to_spec(const RequestFields& req, const RequestClock& clock,
                                     bool retain, engine::JobSpec& spec) {
  switch (req.lane) {
    case tpool::v1::LANE_UNSPECIFIED:
      spec.lane = engine::LaneChoice::kHandlerHint;
      break;
    case tpool::v1::LANE_DEFAULT:
      spec.lane = engine::LaneChoice::kDefault;
      break;
    case tpool::v1::LANE_BLOCKING:
      spec.lane = engine::LaneChoice::kBlocking;
      break;
    default:
      return engine::Error{ErrorCode::kInvalidArgument,
                           "lane " + std::to_string(req.lane) +
                               " is not valid; use LANE_UNSPECIFIED (0), LANE_DEFAULT (1) or "
                               "LANE_BLOCKING (2)"};
  }
  spec.handler = req.handler;
  spec.payload = req.payload;
  spec.idempotency_key = req.idempotency_key;
  if (req.labels != nullptr) {
    spec.labels.assign(req.labels->begin(), req.labels->end());
  } else {
    spec.labels.clear();
  }
  spec.retain = retain;
  spec.tag = req.tag;
  // The engine refuses it without a store (kFailedPrecondition, naming
  // [store] path) and ORs in the [store] defaults.
  spec.durable = req.durable;
  spec.max_attempts = req.max_attempts;  // 0: the handler's default (the engine's)
  spec.backoff_base = std::chrono::milliseconds(req.backoff_base_ms);
  spec.backoff_cap = std::chrono::milliseconds(req.backoff_cap_ms);
  if (req.delay_ms != 0 && req.not_before_unix_ms != 0) {
    return engine::Error{ErrorCode::kInvalidArgument,
                         "the request sets both delay_ms and not_before_unix_ms; set one"};
  }
  // Clamped to ~100 years so the arithmetic cannot overflow; the engine
  // refuses more than its max_delay with the value.
  constexpr std::uint64_t kMaxMs = 3'000'000'000'000ull;
  if (req.delay_ms != 0) {
    spec.delay = std::chrono::milliseconds(std::min<std::uint64_t>(req.delay_ms, kMaxMs));
  } else if (req.not_before_unix_ms != 0) {
    const auto now_ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(clock.system.time_since_epoch())
            .count();
    const auto at =
        static_cast<std::int64_t>(std::min<std::uint64_t>(req.not_before_unix_ms, kMaxMs));
    spec.delay = std::chrono::milliseconds(std::max<std::int64_t>(0, at - now_ms));
  }
  auto deadline = std::chrono::steady_clock::time_point::max();
  if (req.timeout_ms != 0) {
    // Clamp to ~100 years so the addition cannot overflow.
    std::uint64_t ms = std::min<std::uint64_t>(req.timeout_ms, 3'000'000'000'000ull);
    deadline = clock.steady + std::chrono::milliseconds(ms);
    spec.timeout = std::chrono::milliseconds(ms);  // kept for a durable job's replay
  }
  spec.deadline = std::min(deadline, clock.call_deadline);
  return std::nullopt;
}

tpool::v1::JobState to_proto(engine::JobState s) noexcept {
  switch (s) {
    case engine::JobState::kQueued:
      return tpool::v1::JOB_STATE_QUEUED;
    case engine::JobState::kRunning:
      return tpool::v1::JOB_STATE_RUNNING;
    case engine::JobState::kSucceeded:
      return tpool::v1::JOB_STATE_SUCCEEDED;
    case engine::JobState::kFailed:
      return tpool::v1::JOB_STATE_FAILED;
    case engine::JobState::kCancelled:
      return tpool::v1::JOB_STATE_CANCELLED;
    case engine::JobState::kTimedOut:
      return tpool::v1::JOB_STATE_TIMED_OUT;
    case engine::JobState::kScheduled:
      return tpool::v1::JOB_STATE_SCHEDULED;
  }
  return tpool::v1::JOB_STATE_UNSPECIFIED;
}

tpool::v1::Lane to_proto(Lane lane) noexcept {
  return lane == Lane::kBlocking ? tpool::v1::LANE_BLOCKING : tpool::v1::LANE_DEFAULT;
}

ResultFields result_fields(const engine::Job& job, std::string_view replica) {
  ResultFields f;
  f.job_id = job.id();
  f.replica = replica;
  f.state = to_proto(job.state());
  f.output = job.output();
  f.message = job.message();
  f.tag = job.tag();
  f.wait_us = static_cast<std::uint64_t>(job.wait_time().count());
  f.run_us = static_cast<std::uint64_t>(job.run_time().count());
  f.attempts = job.attempts();
  return f;
}

void fill_result(const engine::Job& job, const std::string& replica, tpool::v1::JobResult& out) {
  const ResultFields f = result_fields(job, replica);
  out.set_job_id(f.job_id);
  out.set_replica(replica);
  out.set_state(f.state);
  // assign, not set_output(data, size): protobuf 3.21's set_X(const char*,
  // size_t) builds a temporary std::string first (a malloc past 15 bytes);
  // an empty one stays the default (no string made for it).
  if (f.output.empty()) {
    out.clear_output();
  } else {
    out.mutable_output()->assign(f.output);
  }
  if (f.message.empty()) {
    out.clear_message();
  } else {
    out.mutable_message()->assign(f.message);
  }
  out.set_tag(f.tag);
  out.set_wait_us(f.wait_us);
  out.set_run_us(f.run_us);
  out.set_attempts(f.attempts);
}

grpc::StatusCode code_of(Refusal r) noexcept {
  switch (r) {
    case Refusal::kInvalidRequest:
    case Refusal::kUnparsable:
      return grpc::StatusCode::INVALID_ARGUMENT;
    case Refusal::kNotFound:
      return grpc::StatusCode::NOT_FOUND;
    case Refusal::kExhausted:
      return grpc::StatusCode::RESOURCE_EXHAUSTED;
    case Refusal::kDraining:
      return grpc::StatusCode::UNAVAILABLE;
    case Refusal::kConflict:
    case Refusal::kOtherReplica:
    case Refusal::kReloadFailed:
      return grpc::StatusCode::FAILED_PRECONDITION;
    case Refusal::kCallDeadline:
      return grpc::StatusCode::DEADLINE_EXCEEDED;
    case Refusal::kCallCancelled:
      return grpc::StatusCode::CANCELLED;
    case Refusal::kUnauthenticated:
      return grpc::StatusCode::UNAUTHENTICATED;
    case Refusal::kPermissionDenied:
      return grpc::StatusCode::PERMISSION_DENIED;
  }
  return grpc::StatusCode::INTERNAL;  // unreachable: a new Refusal without a code is a bug
}

Refusal refusal_of(ErrorCode c) noexcept {
  switch (c) {
    case ErrorCode::kInvalidArgument:
      return Refusal::kInvalidRequest;
    case ErrorCode::kNotFound:
      return Refusal::kNotFound;
    case ErrorCode::kExhausted:
      return Refusal::kExhausted;
    case ErrorCode::kUnavailable:
      return Refusal::kDraining;
    case ErrorCode::kFailedPrecondition:
      return Refusal::kConflict;
  }
  return Refusal::kInvalidRequest;  // unreachable: every ErrorCode is listed
}

grpc::Status to_status(Refusal r, std::string sentence) {
  return {code_of(r), std::move(sentence)};
}

grpc::Status to_status(const engine::Error& e, grpc::CallbackServerContext* ctx) {
  if (ctx != nullptr && e.retry_after.count() > 0) {
    ctx->AddTrailingMetadata("retry-after-ms", std::to_string(e.retry_after.count()));
  }
  return to_status(refusal_of(e.code), e.message);
}

int code_number(const engine::Error& e) noexcept {
  return code_number(refusal_of(e.code));
}

int code_number(Refusal r) noexcept {
  return static_cast<int>(code_of(r));
}

grpc::Status to_status(const engine::Job& final_job,
                       std::chrono::system_clock::time_point call_deadline) {
  if (final_job.state() == engine::JobState::kTimedOut &&
      std::chrono::system_clock::now() >= call_deadline) {
    return to_status(Refusal::kCallDeadline, std::string(final_job.message()));
  }
  return grpc::Status::OK;
}

}  // namespace tpool::rpc
