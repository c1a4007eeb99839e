// tpool::rpc: the gRPC services of tpoold (callback API).
//
// Requests become engine JobSpecs; engine results and errors become replies
// and gRPC status codes, chosen here and only here (docs/api.md lists them).
// No reactor ever blocks: a job's result completes its RPC from the pool
// worker that ended the job.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <grpcpp/support/message_allocator.h>
#include <grpcpp/support/server_interceptor.h>

#include "tpool/engine/engine.h"
#include "tpool/rpc/access.h"
#include "tpool/rpc/limits.h"
#include "tpool/v1/admin.grpc.pb.h"
#include "tpool/v1/jobs.grpc.pb.h"

namespace tpool::rpc {

// Counters of the rpc layer; plain atomics, read through snapshot().
struct RpcSnapshot {
  std::uint64_t streams_active = 0;
  std::uint64_t streams_total = 0;
  std::uint64_t streams_rejected = 0;
  std::uint64_t stream_buffered_bytes = 0;       // gauge: unsent Stream results, all streams
  std::uint64_t stream_unparsable_messages = 0;  // Stream messages that were not a JobBatch
};

// JobService with Stream as a raw (ByteBuffer) method: the stream parses each
// upstream message itself, so it can tell a malformed message from the end of
// the stream and say which message it was (gRPC's typed read reports both as
// a failed read), and it cuts its replies by bytes. SubmitBatch is raw too,
// so its request is read in place (issue 19). The other methods are the
// typed callback ones.
using JobServiceBase = tpool::v1::JobService::WithCallbackMethod_Execute<
    tpool::v1::JobService::WithCallbackMethod_Submit<
        tpool::v1::JobService::WithRawCallbackMethod_SubmitBatch<
            tpool::v1::JobService::WithRawCallbackMethod_Stream<
                tpool::v1::JobService::WithCallbackMethod_Wait<
                    tpool::v1::JobService::WithCallbackMethod_Get<
                        tpool::v1::JobService::WithCallbackMethod_Cancel<
                            tpool::v1::JobService::WithCallbackMethod_ListHandlers<
                                tpool::v1::JobService::WithCallbackMethod_ListJobs<
                                    tpool::v1::JobService::WithCallbackMethod_Retry<
                                        tpool::v1::JobService::WithCallbackMethod_WaitBatch<
                                            tpool::v1::JobService::Service>>>>>>>>>>>;

class JobServiceImpl final : public JobServiceBase {
 public:
  // replica: this process's replica id, set on every job ref and result it
  // returns and checked against the replica a Wait, Get or Cancel names.
  // access: who may call what on the listener this service is registered on
  // (default: auth off, everything allowed).
  JobServiceImpl(engine::Engine& engine, RpcLimits limits, std::string replica = {},
                 Access access = Access());
  ~JobServiceImpl() override;

  grpc::ServerUnaryReactor* Execute(grpc::CallbackServerContext* ctx,
                                    const tpool::v1::JobRequest* req,
                                    tpool::v1::JobResult* resp) override;
  grpc::ServerUnaryReactor* Submit(grpc::CallbackServerContext* ctx,
                                   const tpool::v1::JobRequest* req,
                                   tpool::v1::JobRef* resp) override;
  // A raw method (issue 19): the request is read in place when it is in the
  // plain form (parse.h, read_job_batch), the reply serialized by the call.
  grpc::ServerUnaryReactor* SubmitBatch(grpc::CallbackServerContext* ctx,
                                        const grpc::ByteBuffer* req,
                                        grpc::ByteBuffer* resp) override;
  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* Stream(
      grpc::CallbackServerContext* ctx) override;
  grpc::ServerUnaryReactor* Wait(grpc::CallbackServerContext* ctx,
                                 const tpool::v1::WaitRequest* req,
                                 tpool::v1::JobResult* resp) override;
  grpc::ServerUnaryReactor* Get(grpc::CallbackServerContext* ctx, const tpool::v1::JobRef* req,
                                tpool::v1::JobStatus* resp) override;
  grpc::ServerUnaryReactor* Cancel(grpc::CallbackServerContext* ctx, const tpool::v1::JobRef* req,
                                   tpool::v1::CancelReply* resp) override;
  grpc::ServerUnaryReactor* ListHandlers(grpc::CallbackServerContext* ctx,
                                         const tpool::v1::ListHandlersRequest* req,
                                         tpool::v1::ListHandlersReply* resp) override;
  grpc::ServerUnaryReactor* ListJobs(grpc::CallbackServerContext* ctx,
                                     const tpool::v1::ListJobsRequest* req,
                                     tpool::v1::ListJobsReply* resp) override;
  grpc::ServerUnaryReactor* Retry(grpc::CallbackServerContext* ctx, const tpool::v1::JobRef* req,
                                  tpool::v1::JobRef* resp) override;
  grpc::ServerUnaryReactor* WaitBatch(grpc::CallbackServerContext* ctx,
                                      const tpool::v1::WaitBatchRequest* req,
                                      tpool::v1::ResultBatch* resp) override;

  // The most ids one WaitBatch may name (each holds a waiter until its job
  // ends; more is INVALID_ARGUMENT, saying to split the call).
  static constexpr int kMaxWaitBatchIds = 10000;

  RpcSnapshot snapshot() const noexcept;
  engine::Engine& engine() noexcept { return engine_; }
  const RpcLimits& limits() const noexcept { return limits_; }
  const std::string& replica() const noexcept { return replica_; }
  const Access& access() const noexcept { return access_; }

  // Used by the stream reactor (stream.cc).
  std::atomic<std::uint64_t> streams_active{0};
  std::atomic<std::uint64_t> streams_total{0};
  std::atomic<std::uint64_t> streams_rejected{0};
  std::atomic<std::uint64_t> stream_buffered_bytes{0};
  std::atomic<std::uint64_t> stream_unparsable_messages{0};

 private:
  engine::Engine& engine_;
  const RpcLimits limits_;
  const std::string replica_;
  const Access access_;
};

// For grpc::ServerBuilder::experimental().SetInterceptorCreators: turns
// gRPC's UNIMPLEMENTED-with-no-message answer to a unary request that does
// not parse into INVALID_ARGUMENT "the request could not be parsed as <type>".
std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
unparsable_request_interceptors();

// What AdminService needs from the daemon's lifecycle (daemon/server
// implements it).
class Lifecycle {
 public:
  struct DrainOutcome {
    bool drained = false;
    std::uint64_t finished = 0;
    std::uint64_t cancelled = 0;
  };
  virtual ~Lifecycle() = default;
  // The daemon's phase by name (daemon/server/src/phase.h): "starting", "serving", "draining",
  // "stopping" or "stopped".
  virtual std::string state() const = 0;
  virtual std::chrono::milliseconds uptime() const = 0;
  virtual std::uint64_t plugin_reloads() const = 0;
  // Reload the plugins now; the sentence says what happened or why it failed.
  virtual bool reload_plugins(std::string* sentence) = 0;
  // Start a shutdown (idempotent); done (may be empty) runs when the drain
  // part ends, on a daemon thread, before the process stops serving.
  virtual void shutdown(bool cancel_pending, std::chrono::milliseconds timeout,
                        std::function<void(const DrainOutcome&)> done) = 0;
};

class AdminServiceImpl final : public tpool::v1::AdminService::CallbackService {
 public:
  // access: who may call what on the admin listener (default: auth off).
  AdminServiceImpl(engine::Engine& engine, const JobServiceImpl& jobs, Lifecycle& life,
                   std::string version, Access access = Access())
      : engine_(engine), jobs_(jobs), life_(life), version_(std::move(version)), access_(access) {}

  grpc::ServerUnaryReactor* Stats(grpc::CallbackServerContext* ctx,
                                  const tpool::v1::StatsRequest* req,
                                  tpool::v1::StatsReply* resp) override;
  grpc::ServerUnaryReactor* ReloadPlugins(grpc::CallbackServerContext* ctx,
                                          const tpool::v1::ReloadPluginsRequest* req,
                                          tpool::v1::ReloadPluginsReply* resp) override;
  grpc::ServerUnaryReactor* Drain(grpc::CallbackServerContext* ctx,
                                  const tpool::v1::DrainRequest* req,
                                  tpool::v1::DrainReply* resp) override;
  grpc::ServerUnaryReactor* Shutdown(grpc::CallbackServerContext* ctx,
                                     const tpool::v1::ShutdownRequest* req,
                                     tpool::v1::ShutdownReply* resp) override;

 private:
  engine::Engine& engine_;
  const JobServiceImpl& jobs_;
  Lifecycle& life_;
  const std::string version_;
  const Access access_;
};

}  // namespace tpool::rpc
