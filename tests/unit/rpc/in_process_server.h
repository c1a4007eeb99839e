// JobService and AdminService on a grpc::Server inside the test process
// (127.0.0.1:0), over a real engine and pool and the example plugins (dlopen).
#pragma once

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "tpool/engine/engine.h"
#include "tpool/rpc/services.h"
#include "tpool/store/journal.h"
#include "tpool/v1/admin.grpc.pb.h"
#include "tpool/v1/jobs.grpc.pb.h"

namespace tpool::rpc::testing {

// What AdminService asks the daemon; the test decides the answers.
class FakeLifecycle final : public Lifecycle {
 public:
  std::string state() const override { return "serving"; }
  std::chrono::milliseconds uptime() const override { return std::chrono::milliseconds(1234); }
  std::uint64_t plugin_reloads() const override { return 7; }
  bool reload_plugins(std::string* sentence) override {
    *sentence = reload_sentence;
    return reload_ok;
  }
  void shutdown(bool cancel_pending, std::chrono::milliseconds timeout,
                std::function<void(const DrainOutcome&)> done) override {
    std::lock_guard lock(mu);
    ++shutdowns;
    last_cancel = cancel_pending;
    last_timeout = timeout;
    if (done) done(DrainOutcome{true, 3, 1});  // at once, as a finished drain would
  }

  bool reload_ok = true;
  std::string reload_sentence = "plugins reloaded; handlers: echo";
  std::mutex mu;
  int shutdowns = 0;
  bool last_cancel = false;
  std::chrono::milliseconds last_timeout{0};
};

struct ServerOptions {
  engine::EngineLimits engine;
  RpcLimits rpc;
  std::size_t threads = 4;
  std::size_t queue_capacity = 1024;
  std::string replica = "replica-a";
  Access access;  // who may call what (default: auth off), on both services
  // The durable journal (nullptr: none), opened by the test; it must outlive
  // the server.
  store::Journal* journal = nullptr;
};

class InProcessServer {
 public:
  explicit InProcessServer(ServerOptions o = {}) {
    plugin_host::HostConfig hc;
    hc.dirs = {TPOOL_PLUGIN_DIR};
    hc.log_sink = [](plugin_host::LogLevel, std::string_view, std::string_view) {};
    auto h = plugin_host::Host::load(hc);
    EXPECT_TRUE(h.ok()) << h.status().message();
    if (!h.ok()) return;
    host_ = std::move(h).value();
    tpool::Config pc;
    pc.max_threads = o.threads;
    pc.min_threads = o.threads;
    pc.queue_capacity = o.queue_capacity;
    pc.scheduler_variant = SchedulerVariant::kLaneExtension;
    pc.blocking_workers = 1;
    pc.backpressure = Backpressure::kReject;
    auto p = Pool::create(pc);
    EXPECT_TRUE(p.ok()) << p.status().message();
    if (!p.ok()) return;
    pool_ = std::move(p).value();
    engine_ =
        std::make_unique<engine::Engine>(*pool_, *host_, o.engine, nullptr, nullptr, o.journal);
    engine_->recover();
    jobs_ = std::make_unique<JobServiceImpl>(*engine_, o.rpc, o.replica, o.access);
    admin_ = std::make_unique<AdminServiceImpl>(*engine_, *jobs_, life_, "test-version", o.access);
    grpc::ServerBuilder b;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    b.SetMaxReceiveMessageSize(static_cast<int>(o.rpc.max_message_bytes));
    b.SetMaxSendMessageSize(static_cast<int>(o.rpc.max_message_bytes));
    std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> f;
    f.push_back(unparsable_request_interceptors());
    b.experimental().SetInterceptorCreators(std::move(f));
    b.RegisterService(jobs_.get());
    b.RegisterService(admin_.get());
    server_ = b.BuildAndStart();
    EXPECT_TRUE(server_ && port_ != 0) << "cannot bind 127.0.0.1:0";
    channel_ = grpc::CreateChannel("127.0.0.1:" + std::to_string(port_),
                                   grpc::InsecureChannelCredentials());
    jobs_stub_ = tpool::v1::JobService::NewStub(channel_);
    admin_stub_ = tpool::v1::AdminService::NewStub(channel_);
  }
  ~InProcessServer() {
    // As the daemon: no call reaches the engine once it is gone, no job runs
    // once the host is gone.
    if (server_) server_->Shutdown(std::chrono::system_clock::now());
    if (pool_) (void)pool_->shutdown(ShutdownMode::kCancelPending);
    server_.reset();
    admin_.reset();
    jobs_.reset();
    engine_.reset();
    pool_.reset();
    host_.reset();
  }

  bool ok() const { return server_ != nullptr && port_ != 0; }
  int port() const { return port_; }
  engine::Engine& engine() { return *engine_; }
  JobServiceImpl& jobs() { return *jobs_; }
  FakeLifecycle& life() { return life_; }
  const std::shared_ptr<grpc::Channel>& channel() { return channel_; }
  tpool::v1::JobService::Stub& stub() { return *jobs_stub_; }
  tpool::v1::AdminService::Stub& admin() { return *admin_stub_; }

  // Waits (bounded) until the engine has no job in flight: a condition, not
  // a delay; true if it came.
  bool wait_idle(std::chrono::seconds limit = std::chrono::seconds(30)) {
    auto end = std::chrono::steady_clock::now() + limit;
    while (engine_->in_flight() != 0) {
      if (std::chrono::steady_clock::now() >= end) return false;
      std::this_thread::yield();
    }
    return true;
  }
  // The engine's counters for one handler.
  engine::HandlerSnapshot handler_counts(const std::string& name) {
    for (const auto& h : engine_->snapshot().handlers) {
      if (h.handler == name) return h;
    }
    return {};
  }

 private:
  FakeLifecycle life_;
  std::unique_ptr<plugin_host::Host> host_;
  std::unique_ptr<Pool> pool_;
  std::unique_ptr<engine::Engine> engine_;
  std::unique_ptr<JobServiceImpl> jobs_;
  std::unique_ptr<AdminServiceImpl> admin_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<tpool::v1::JobService::Stub> jobs_stub_;
  std::unique_ptr<tpool::v1::AdminService::Stub> admin_stub_;
};

inline tpool::v1::JobRequest job(const std::string& handler, const std::string& payload,
                                 std::uint64_t tag = 0) {
  tpool::v1::JobRequest r;
  r.set_handler(handler);
  r.set_payload(payload);
  r.set_tag(tag);
  return r;
}

// A bounded call deadline so a broken rule fails the test instead of hanging.
inline void bound(grpc::ClientContext& ctx, std::chrono::seconds s = std::chrono::seconds(30)) {
  ctx.set_deadline(std::chrono::system_clock::now() + s);
}

// A gRPC status has the code and its sentence contains `words`.
inline ::testing::AssertionResult is(const grpc::Status& s, grpc::StatusCode code,
                                     const std::string& words) {
  if (s.error_code() == code && s.error_message().find(words) != std::string::npos) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << "status " << s.error_code() << " '" << s.error_message()
                                       << "', want " << code << " with '" << words << "'";
}

}  // namespace tpool::rpc::testing
