#include "raw_echo.h"

#include <grpcpp/grpcpp.h>
#include <signal.h>

#include <fstream>

#include "tpool/v1/jobs.grpc.pb.h"

namespace tpool::bench {
namespace {

using tpool::v1::JobBatch;
using tpool::v1::ResultBatch;

void echo_into(const tpool::v1::JobRequest& req, tpool::v1::JobResult& out) {
  out.set_state(tpool::v1::JOB_STATE_SUCCEEDED);
  out.set_output(req.payload());
  out.set_tag(req.tag());
}

// One read, one write, then the next read: the simplest correct pipeline.
class EchoStream final : public grpc::ServerBidiReactor<JobBatch, ResultBatch> {
 public:
  EchoStream() { StartRead(&in_); }
  void OnReadDone(bool ok) override {
    if (!ok) {
      Finish(grpc::Status::OK);
      return;
    }
    out_.Clear();
    for (const auto& j : in_.jobs()) echo_into(j, *out_.add_results());
    StartWrite(&out_);
  }
  void OnWriteDone(bool ok) override {
    if (!ok) {
      Finish(grpc::Status::CANCELLED);
      return;
    }
    StartRead(&in_);
  }
  void OnDone() override { delete this; }

 private:
  JobBatch in_;
  ResultBatch out_;
};

class RawEcho final : public tpool::v1::JobService::CallbackService {
  grpc::ServerUnaryReactor* Execute(grpc::CallbackServerContext* ctx,
                                    const tpool::v1::JobRequest* req,
                                    tpool::v1::JobResult* resp) override {
    echo_into(*req, *resp);
    auto* r = ctx->DefaultReactor();
    r->Finish(grpc::Status::OK);
    return r;
  }
  grpc::ServerBidiReactor<JobBatch, ResultBatch>* Stream(grpc::CallbackServerContext*) override {
    return new EchoStream();
  }
};

}  // namespace

int run_raw_echo_server(const std::string& port_file) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  RawEcho service;
  grpc::ServerBuilder b;
  int port = 0;
  b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  b.SetMaxReceiveMessageSize(64 << 20);
  b.SetMaxSendMessageSize(64 << 20);
  b.RegisterService(&service);
  auto server = b.BuildAndStart();
  if (!server) return 1;
  { std::ofstream(port_file + ".tmp") << port << "\n"; }
  std::rename((port_file + ".tmp").c_str(), port_file.c_str());
  int sig = 0;
  sigwait(&set, &sig);
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  return 0;
}

}  // namespace tpool::bench
