// The Stream session over the synchronous bidi API: the caller's threads
// write, one owned reader thread reads (invariants (1)-(3) in stream.h).
#include <deque>
#include <thread>

// Before any gRPC header: absl/base/internal/thread_annotations.h (pulled in
// by gRPC) defines GUARDED_BY & co. again without #ifndef; after ours it is a
// silent redefinition in a system header, before ours a -Werror one.
#include "tpool/common/mutex.h"
//
#include "internal.h"

namespace tpool::client::detail {
namespace {

class StreamImpl final : public Stream {
 public:
  StreamImpl(tpool::v1::JobService::Stub& stub, std::unique_ptr<grpc::ClientContext> ctx,
             const StreamOptions& options)
      : ctx_(std::move(ctx)), on_result_(options.on_result), on_end_(options.on_end) {
    rw_ = stub.Stream(ctx_.get());
    reader_ = std::thread([this] { read_loop(); });
  }

  ~StreamImpl() override {
    if (!finished_) {
      cancel();
      (void)finish();
    }
  }

  bool send(const std::vector<Job>& jobs) override {
    tpool::v1::JobBatch batch;
    for (const auto& j : jobs) *batch.add_jobs() = to_proto(j);
    tpool::MutexLock lock(write_mu_);  // (1)
    if (send_closed_) return false;
    if (!rw_->Write(batch)) {
      send_closed_ = true;  // the call ended; finish() has the status
      return false;
    }
    return true;
  }

  void close_send() override {
    tpool::MutexLock lock(write_mu_);  // (1)
    if (send_closed_) return;
    send_closed_ = true;
    (void)rw_->WritesDone();
  }

  std::optional<JobResult> next(std::chrono::milliseconds timeout) override {
    tpool::MutexLock lock(queue_mu_);
    queue_cv_.wait_for(lock, timeout,
                       [this]() REQUIRES(queue_mu_) { return !queue_.empty() || read_done_; });
    if (queue_.empty()) return std::nullopt;
    JobResult r = std::move(queue_.front());
    queue_.pop_front();
    return r;
  }

  bool ended() const override {
    tpool::MutexLock lock(queue_mu_);
    return read_done_ && queue_.empty();
  }

  Error finish() override {
    if (finished_) return status_;
    close_send();
    if (reader_.joinable()) reader_.join();  // (3)
    grpc::Status s = rw_->Finish();
    status_ = s.ok() ? Error() : to_error(s, ctx_.get());
    finished_ = true;
    return status_;
  }

  void cancel() override { ctx_->TryCancel(); }

 private:
  void read_loop() {
    tpool::v1::ResultBatch batch;
    while (rw_->Read(&batch)) {
      for (const auto& r : batch.results()) {
        if (on_result_) {
          on_result_(from_proto(r));  // (2) one at a time, on this thread
        } else {
          tpool::MutexLock lock(queue_mu_);
          queue_.push_back(from_proto(r));
          queue_cv_.notify_one();
        }
      }
    }
    {
      tpool::MutexLock lock(queue_mu_);
      read_done_ = true;
      queue_cv_.notify_all();
    }
    if (on_end_) on_end_();
  }

  std::unique_ptr<grpc::ClientContext> ctx_;
  std::function<void(const JobResult&)> on_result_;
  std::function<void()> on_end_;
  std::unique_ptr<grpc::ClientReaderWriter<tpool::v1::JobBatch, tpool::v1::ResultBatch>> rw_;
  std::thread reader_;

  tpool::Mutex write_mu_;
  bool send_closed_ GUARDED_BY(write_mu_) = false;

  mutable tpool::Mutex queue_mu_;
  tpool::CondVar queue_cv_;
  std::deque<JobResult> queue_ GUARDED_BY(queue_mu_);
  bool read_done_ GUARDED_BY(queue_mu_) = false;

  // finish() is called by the owner only (not concurrently with itself).
  bool finished_ = false;
  Error status_;
};

}  // namespace

std::unique_ptr<Stream> open_stream(tpool::v1::JobService::Stub& stub,
                                    std::unique_ptr<grpc::ClientContext> ctx,
                                    const StreamOptions& options) {
  return std::make_unique<StreamImpl>(stub, std::move(ctx), options);
}

}  // namespace tpool::client::detail
