// Protobuf <-> engine translation and the one table of engine outcome ->
// gRPC status code (docs/api.md, "Status codes").
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "parse.h"
#include "tpool/engine/engine.h"
#include "tpool/v1/jobs.pb.h"

namespace tpool::rpc {

// The clocks of one request, or of one Stream message, read once for all of
// its jobs (issue 19: no clock read per job). Each job's deadline and delay
// are computed from these readings, so the jobs of one message share them.
struct RequestClock {
  std::chrono::steady_clock::time_point steady;
  std::chrono::system_clock::time_point system;
  // The call's deadline on the steady clock; max() for none.
  std::chrono::steady_clock::time_point call_deadline =
      std::chrono::steady_clock::time_point::max();

  // call_deadline: the call's (ServerContext::deadline()), or max() for a
  // call without one or whose jobs outlive it.
  static RequestClock read(std::chrono::system_clock::time_point call_deadline =
                               std::chrono::system_clock::time_point::max());
};

// Fills spec from req; the job's deadline is the earlier of req.timeout_ms and
// the call's deadline, both counted from `clock`. An error for a lane outside
// the enum, or for both delay_ms and not_before_unix_ms set.
std::optional<engine::Error> to_spec(const RequestFields& req, const RequestClock& clock,
                                     bool retain, engine::JobSpec& spec);
inline std::optional<engine::Error> to_spec(const tpool::v1::JobRequest& req,
                                            const RequestClock& clock, bool retain,
                                            engine::JobSpec& spec) {
  return to_spec(request_fields(req), clock, retain, spec);
}
// The same for a request of one job: reads the clocks itself.
inline std::optional<engine::Error> to_spec(const tpool::v1::JobRequest& req,
                                            std::chrono::system_clock::time_point call_deadline,
                                            bool retain, engine::JobSpec& spec) {
  return to_spec(req, RequestClock::read(call_deadline), retain, spec);
}

tpool::v1::JobState to_proto(engine::JobState s) noexcept;
tpool::v1::Lane to_proto(Lane lane) noexcept;

// A final job's result fields (views into job and replica, valid while both
// are); replica: the serving replica's id. The one place that says what a
// job's JobResult holds: fill_result sets these, the Stream encodes them
// (parse.h, batch_entry).
ResultFields result_fields(const engine::Job& job, std::string_view replica);
// A final job as a JobResult.
void fill_result(const engine::Job& job, const std::string& replica, tpool::v1::JobResult& out);

// ---- The one table of gRPC status codes (docs/api.md, "Status codes") ----
//
// Every status other than OK that tpoold sends is chosen here: a call site
// names why the call fails (a Refusal) and gives the sentence; code_of() is
// the only place that turns a reason into a grpc::StatusCode. No other file
// of daemon/rpc names a grpc::StatusCode but OK.
enum class Refusal : std::uint8_t {
  kInvalidRequest,    // INVALID_ARGUMENT: a field out of range (handler, lane, payload,
                      //   key, labels, replica, shutdown mode)
  kUnparsable,        // INVALID_ARGUMENT: bytes that are not a message of the method's type
  kNotFound,          // NOT_FOUND: unknown handler, unknown or expired job id
  kExhausted,         // RESOURCE_EXHAUSTED: in-flight limit, pool full, max_streams
  kDraining,          // UNAVAILABLE: draining or stopping, no new jobs
  kConflict,          // FAILED_PRECONDITION: an idempotency key reused for another request
  kOtherReplica,      // FAILED_PRECONDITION: the job belongs to another replica
  kReloadFailed,      // FAILED_PRECONDITION: a plugin reload failed, the old plugins stay
  kCallDeadline,      // DEADLINE_EXCEEDED: the call's own deadline passed
  kCallCancelled,     // CANCELLED: the client cancelled its call
  kUnauthenticated,   // UNAUTHENTICATED: auth is on and the call has no credentials, a
                      //   malformed or wrong token, or a certificate naming no principal
  kPermissionDenied,  // PERMISSION_DENIED: a known principal without the method's role,
                      //   or a handler outside its allow-list (also per item)
};
inline constexpr Refusal kAllRefusals[] = {
    Refusal::kInvalidRequest, Refusal::kUnparsable,      Refusal::kNotFound,
    Refusal::kExhausted,      Refusal::kDraining,        Refusal::kConflict,
    Refusal::kOtherReplica,   Refusal::kReloadFailed,    Refusal::kCallDeadline,
    Refusal::kCallCancelled,  Refusal::kUnauthenticated, Refusal::kPermissionDenied};

// The table.
grpc::StatusCode code_of(Refusal r) noexcept;
// The reason behind an engine error.
Refusal refusal_of(engine::ErrorCode c) noexcept;

// The status a call ends with for a reason and its sentence (what was wrong,
// the value, what to do).
grpc::Status to_status(Refusal r, std::string sentence);
// The status of an engine error; adds the retry hint trailer when one is
// given and ctx is not null.
grpc::Status to_status(const engine::Error& e, grpc::CallbackServerContext* ctx);
// The google.rpc.Code number of an engine error, for per-item answers
// (SubmitBatch items, Stream results).
int code_number(const engine::Error& e) noexcept;
// The google.rpc.Code number of a reason, for per-item answers.
int code_number(Refusal r) noexcept;
// The status of a call that waited for a job (Execute, Wait) that is now
// final: OK in every final state (the JobResult says which), except a job
// that timed out because the call's own deadline (call_deadline) passed:
// DEADLINE_EXCEEDED, which the client's gRPC library reports at that moment
// anyway (answering OK would race with it).
grpc::Status to_status(const engine::Job& final_job,
                       std::chrono::system_clock::time_point call_deadline);

}  // namespace tpool::rpc
