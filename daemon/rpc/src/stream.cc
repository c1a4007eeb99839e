// JobService.Stream: pipelined submission over one bidi call.
//
// Thread safety (numbered invariants, cited below):
//  (S1) Every field below mu_ is guarded by mu_. gRPC operations (StartRead,
//       StartWrite, Finish) are never started while mu_ is held: a reaction
//       may run inline on the calling thread and take mu_ itself. Decisions
//       are made under mu_ and recorded as Actions, then carried out.
//  (S2) At most one read and one write are outstanding (reading_, writing_).
//       out_writing_ belongs to gRPC while writing_; results gather in
//       out_pending_ meanwhile and go out in one message when the write ends
//       (coalescing).
//  (S3) Backpressure: items of the current upstream message are submitted in
//       order; when the stream's window (stream_window in-flight jobs) is
//       full, or the engine is full, the rest wait in in_ and no read is
//       started, so HTTP/2 flow control pushes back on the client. A job end
//       of this stream (window) or the engine's capacity callback (engine
//       full) resumes submitting.
//  (S4) The reactor lives until gRPC's OnDone, every job of this stream has
//       reported, and the engine no longer holds it as a capacity waiter:
//       refs_ counts those holders.
//  (S5) Ended jobs: job_done pushes its result on ended_ (lock-free); the
//       thread whose push found ended_ empty then takes mu_ and drains the
//       whole list (exchange to empty). A push either finds the list empty
//       (and drains it itself, after its push) or finds a node whose pusher
//       has not drained yet (that drain, which exchanges after both pushes,
//       takes it): no result is left behind. The drainer drops each
//       drained job's reference (S4); in_flight_ counts a job until then.
#include <algorithm>
#include <atomic>
#include <mutex>
#include <optional>
#include <vector>

#include "convert.h"
#include "tpool/rpc/services.h"

namespace tpool::rpc {
namespace {

using tpool::v1::JobBatch;
using tpool::v1::ResultBatch;

class StreamReactor final : public grpc::ServerBidiReactor<JobBatch, ResultBatch>,
                            public engine::CapacityWaiter {
 public:
  StreamReactor(JobServiceImpl& svc, grpc::CallbackServerContext* ctx) : svc_(svc), ctx_(ctx) {
    svc_.streams_total.fetch_add(1, std::memory_order_relaxed);
    if (svc_.streams_active.fetch_add(1, std::memory_order_relaxed) >= svc_.limits().max_streams) {
      svc_.streams_rejected.fetch_add(1, std::memory_order_relaxed);
      finished_ = true;  // no other thread sees the reactor yet (S1)
      Finish(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                          std::to_string(svc_.limits().max_streams) +
                              " streams are open (server.max_streams); close one or retry later"));
      return;
    }
    reading_ = true;  // as above
    StartRead(&in_);
  }

  ~StreamReactor() override { svc_.streams_active.fetch_sub(1, std::memory_order_relaxed); }

  void OnReadDone(bool ok) override {
    Actions a;
    {
      std::lock_guard lock(mu_);  // (S1)
      reading_ = false;
      if (!ok) {
        read_closed_ = true;
        in_.Clear();
        next_item_ = 0;
      } else {
        next_item_ = 0;
        pump_locked();
      }
      decide_locked(a);
    }
    act(a);
  }

  void OnWriteDone(bool ok) override {
    Actions a;
    {
      std::lock_guard lock(mu_);
      writing_ = false;
      out_writing_.Clear();
      if (!ok) write_broken_ = true;  // the client is gone; OnCancel follows
      decide_locked(a);
    }
    act(a);
  }

  void OnCancel() override {
    // relaxed is enough: the jobs poll it (Job::is_cancelled); ordering with
    // the state below is by mu_.
    cancelled_.store(true, std::memory_order_relaxed);
    Actions a;
    {
      std::lock_guard lock(mu_);
      cancelled_seen_ = true;
      decide_locked(a);
    }
    act(a);
  }

  void OnDone() override { unref(); }

  // engine::CapacityWaiter: the engine may have room again (S3).
  void on_capacity() override {
    Actions a;
    {
      std::lock_guard lock(mu_);
      waiting_capacity_ = false;
      pump_locked();
      decide_locked(a);
    }
    act(a);
    unref();  // (S4) the engine's reference
  }

  // A job of this stream ended (on the worker that ended it). Its result is
  // built here, outside mu_, and pushed on ended_; the worker that finds
  // ended_ empty takes mu_ and reports every result gathered by then (S5),
  // so workers ending jobs of one stream do not queue on mu_ one job each.
  static void job_done(void* user, engine::Job& job) {
    auto* self = static_cast<StreamReactor*>(user);
    auto* node = new Ended{new tpool::v1::JobResult, nullptr};
    fill_result(job, self->svc_.replica(), *node->result);
    // (S5) release: publishes the node and its result; pairs with the
    // acquire exchange in drain_ended.
    Ended* head = self->ended_.load(std::memory_order_relaxed);
    do {
      node->next = head;
    } while (!self->ended_.compare_exchange_weak(head, node, std::memory_order_release,
                                                 std::memory_order_relaxed));
    if (head != nullptr) return;  // the thread that pushed onto the empty list drains it
    self->drain_ended();
  }

 private:
  struct Actions {
    bool read = false;
    bool write = false;
    bool finish = false;
    grpc::Status status;
  };

  // Submit the waiting items of in_, in order, until the window or the
  // engine is full (S3): each run of well-formed items as one engine batch
  // (one handler lookup per name, one pool submit_batch).
  void pump_locked() {
    if (cancelled_seen_) {  // nobody will read the results
      next_item_ = in_.jobs_size();
      return;
    }
    const std::uint64_t window = svc_.limits().stream_window;
    while (next_item_ < in_.jobs_size() && !waiting_capacity_ && in_flight_ < window) {
      const int room = static_cast<int>(std::min<std::uint64_t>(window - in_flight_, 1u << 20));
      const int end = std::min(in_.jobs_size(), next_item_ + room);
      specs_.clear();
      int bad = -1;  // an item that does not translate ends the run
      std::optional<engine::Error> bad_err;
      for (int i = next_item_; i < end; ++i) {
        engine::JobSpec& spec = specs_.emplace_back();
        bad_err = to_spec(in_.jobs(i), ctx_->deadline(), false, spec);
        if (bad_err) {
          specs_.pop_back();
          bad = i;
          break;
        }
      }
      results_.resize(std::max(results_.size(), specs_.size()));
      const std::size_t consumed =
          specs_.empty() ? 0
                         : svc_.engine().submit_batch(specs_, &StreamReactor::job_done, this,
                                                      &cancelled_, results_,
                                                      /*stop_when_full=*/true);
      for (std::size_t k = 0; k < consumed; ++k) {
        engine::Engine::SubmitResult& r = results_[k];
        if (!r.ok()) {
          add_error(in_.jobs(next_item_ + static_cast<int>(k)).tag(), *r.error);
        } else if (r.value.will_notify) {
          ++in_flight_;
          refs_.fetch_add(1, std::memory_order_relaxed);  // (S4) the job's; job_done drops it
        } else {  // a deduplicated job that had already ended
          fill_result(*r.value.job, svc_.replica(), *out_pending_.add_results());
        }
        r = {};
      }
      next_item_ += static_cast<int>(consumed);
      if (consumed < specs_.size()) {
        // Refused for room (kExhausted): keep the item; resume when there is
        // room. The reference taken here belongs to the engine's waiter list.
        results_[consumed] = {};
        refs_.fetch_add(1, std::memory_order_relaxed);
        if (svc_.engine().wait_for_capacity(this)) {
          waiting_capacity_ = true;
          return;
        }
        refs_.fetch_sub(1, std::memory_order_relaxed);
        continue;  // room right now: try again
      }
      if (bad >= 0) {
        add_error(in_.jobs(bad).tag(), *bad_err);
        ++next_item_;
      }
    }
  }

  void add_error(std::uint64_t tag, const engine::Error& err) {
    auto* r = out_pending_.add_results();
    r->set_tag(tag);
    r->set_code(code_number(err));
    r->set_message(err.message);
  }

  // What to start now (S1, S2).
  void decide_locked(Actions& a) {
    if (finished_) return;
    bool items_waiting = next_item_ < in_.jobs_size();
    if (!writing_ && !write_broken_ && out_pending_.results_size() > 0 && !cancelled_seen_) {
      out_writing_.Swap(&out_pending_);
      writing_ = true;
      a.write = true;
    }
    if (!reading_ && !read_closed_ && !items_waiting && !cancelled_seen_) {
      if (svc_.engine().draining()) {
        // Stop taking work; finish once this stream's jobs have reported.
        read_closed_ = true;
        end_status_ = grpc::Status(grpc::StatusCode::UNAVAILABLE,
                                   "tpoold is draining and accepts no new jobs; reconnect to "
                                   "another instance or after the restart");
      } else {
        in_.Clear();
        reading_ = true;
        a.read = true;
      }
    }
    bool quiet = !reading_ && !writing_ && in_flight_ == 0 && !waiting_capacity_;
    bool done_reading = read_closed_ && !items_waiting;
    bool flushed = out_pending_.results_size() == 0 || write_broken_ || cancelled_seen_;
    if (quiet && flushed && (done_reading || cancelled_seen_)) {
      finished_ = true;
      a.finish = true;
      a.status = cancelled_seen_
                     ? grpc::Status(grpc::StatusCode::CANCELLED, "the call was cancelled")
                     : end_status_;
    }
  }

  // (S5) Reports the ended jobs on ended_ and drops their references.
  void drain_ended() {
    Actions a;
    std::uint64_t n = 0;
    {
      std::lock_guard lock(mu_);
      Ended* list = ended_.exchange(nullptr, std::memory_order_acquire);  // (S5)
      Ended* in_order = nullptr;  // the list is newest first: reverse it
      while (list != nullptr) {
        Ended* next = list->next;
        list->next = in_order;
        in_order = list;
        list = next;
      }
      while (in_order != nullptr) {
        out_pending_.mutable_results()->AddAllocated(in_order->result);  // takes ownership
        Ended* next = in_order->next;
        delete in_order;
        in_order = next;
        ++n;
      }
      in_flight_ -= n;
      // (S3) Window slots are free. Refill only once a batch's worth is free
      // (a quarter of the window, or all that waits), so the stream submits
      // in batches rather than one job per job that ends.
      const std::uint64_t window = svc_.limits().stream_window;
      const std::uint64_t waiting =
          static_cast<std::uint64_t>(std::max(0, in_.jobs_size() - next_item_));
      if (window - in_flight_ >= std::min(std::max<std::uint64_t>(1, window / 4), waiting)) {
        pump_locked();
      }
      decide_locked(a);
    }
    act(a);
    // (S4) the n jobs' references
    if (refs_.fetch_sub(static_cast<int>(n), std::memory_order_acq_rel) == static_cast<int>(n)) {
      delete this;
    }
  }

  void act(const Actions& a) {
    if (a.write) StartWrite(&out_writing_);
    if (a.read) StartRead(&in_);
    if (a.finish) Finish(a.status);
  }

  void unref() {
    if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }

  // A result built by job_done, waiting to be reported (S5).
  struct Ended {
    tpool::v1::JobResult* result;  // heap; out_pending_ takes it
    Ended* next;
  };

  JobServiceImpl& svc_;
  grpc::CallbackServerContext* ctx_;
  std::atomic<Ended*> ended_{nullptr};  // (S5) a Treiber stack, drained whole
  std::atomic<bool> cancelled_{false};  // the jobs' group cancel flag
  std::atomic<int> refs_{1};            // (S4) gRPC's reference, dropped in OnDone

  std::mutex mu_;
  JobBatch in_;  // the upstream message being submitted (S3)
  // Scratch for pump_locked, kept to reuse their memory.
  std::vector<engine::JobSpec> specs_;
  std::vector<engine::Engine::SubmitResult> results_;
  int next_item_ = 0;            // its first item not yet submitted
  ResultBatch out_pending_;      // results gathering (S2)
  ResultBatch out_writing_;      // the message gRPC is writing (S2)
  std::uint64_t in_flight_ = 0;  // this stream's jobs not yet reported
  bool reading_ = false;
  bool writing_ = false;
  bool read_closed_ = false;
  bool write_broken_ = false;
  bool cancelled_seen_ = false;
  bool waiting_capacity_ = false;
  bool finished_ = false;
  grpc::Status end_status_ = grpc::Status::OK;
};

}  // namespace

grpc::ServerBidiReactor<JobBatch, ResultBatch>* JobServiceImpl::Stream(
    grpc::CallbackServerContext* ctx) {
  return new StreamReactor(*this, ctx);
}

}  // namespace tpool::rpc
