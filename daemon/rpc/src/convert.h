// Protobuf <-> engine translation and the one table of engine outcome ->
// gRPC status code (docs/api.md, "Status codes").
#pragma once

#include <grpcpp/grpcpp.h>

#include <optional>
#include <string>

#include "tpool/engine/engine.h"
#include "tpool/v1/jobs.pb.h"

namespace tpool::rpc {

// Fills spec from req; the job's deadline is the earlier of req.timeout_ms and
// the call's deadline. An error for a lane outside the enum.
std::optional<engine::Error> to_spec(const tpool::v1::JobRequest& req,
                                     std::chrono::system_clock::time_point call_deadline,
                                     bool retain, engine::JobSpec& spec);

tpool::v1::JobState to_proto(engine::JobState s) noexcept;
tpool::v1::Lane to_proto(Lane lane) noexcept;

// A final job as a JobResult; replica: the serving replica's id.
void fill_result(const engine::Job& job, const std::string& replica, tpool::v1::JobResult& out);

// The gRPC status of an engine error (adds the retry hint trailer when one is
// given and ctx is not null).
grpc::Status to_status(const engine::Error& e, grpc::CallbackServerContext* ctx);
// The google.rpc.Code number of an engine error, for per-item answers.
int code_number(const engine::Error& e) noexcept;

}  // namespace tpool::rpc
