// Shared between client.cc and stream.cc; not installed.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>

#include "tpool/client/client.h"
#include "tpool/client/stream.h"
#include "tpool/v1/jobs.grpc.pb.h"

namespace tpool::client::detail {

// A gRPC status as an Error, with the `retry-after-ms` trailer when ctx has one.
Error to_error(const grpc::Status& s, const grpc::ClientContext* ctx);

// Starts JobService.Stream on ctx (deadline and metadata already set).
std::unique_ptr<Stream> open_stream(tpool::v1::JobService::Stub& stub,
                                    std::unique_ptr<grpc::ClientContext> ctx,
                                    const StreamOptions& options);

}  // namespace tpool::client::detail
