// JobService.Stream: pipelined submission over one bidi call.
//
// A raw (ByteBuffer) method: the reactor parses each upstream message itself
// and serializes its own replies, so it can tell a malformed message from the
// end of the stream (S7) and cut replies by bytes (S6).
//
// Thread safety (numbered invariants, cited below):
//  (S1) Every field below mu_ is guarded by mu_. gRPC operations (StartRead,
//       StartWrite, Finish) are never started while mu_ is held: a reaction
//       may run inline on the calling thread and take mu_ itself. Decisions
//       are made under mu_ and recorded as Actions, then carried out.
//  (S2) At most one read and one write are outstanding (state_ kReading or
//       kGoneReading; writing_). While a read is, in_bytes_ belongs to gRPC;
//       while writing_,
//       out_entries_ and out_bytes_ belong to the writing side (act() fills
//       out_bytes_ from out_entries_ outside mu_, then gRPC owns it). Results
//       gather in pending_ meanwhile and go out in as few messages as the
//       byte limit allows when the write ends (coalescing).
//  (S3) Backpressure: a job holds a window slot from its submission until its
//       result has been written (in flight, then unsent), not only until it
//       ends; a client that does not read therefore stops the stream once
//       stream_window results wait. The stream has room while
//         used() = in_flight_ + unsent() < stream_window   and
//         buffered_bytes_ + in_flight_ * largest_result_ < stream_buffer_bytes
//       (the second charges each running job the largest result this stream
//       has produced, so the bytes held stay near the budget: above it by at
//       most one window of results larger than any before). Without room, or
//       when the engine is full, the current message's remaining items wait
//       in in_ (kHeld, kWaitingCapacity) and no read is started, so HTTP/2
//       flow control pushes back on
//       the client. A written message, a job end, or the engine's capacity
//       callback resumes submitting.
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
//  (S6) No reply exceeds max_message_bytes: results are added to a message
//       while it stays under max_message_bytes - kReplyHeadroomBytes, and a
//       message holds at least one result; a result that alone would not fit
//       was made a FAILED result saying so in job_done (fit_result). Every
//       result is sent or, once the client is gone, dropped with the call.
//  (S7) An upstream message that does not parse as a JobBatch ends the call
//       with INVALID_ARGUMENT naming its index, once the jobs of the messages
//       before it have reported; nothing after it is read. (gRPC's typed
//       reactor reports a failed parse as OnReadDone(false), the same as the
//       client's half-close, so the typed method ended such a call OK.)
//  (S8) buffered_bytes_ (pending_ and the message being written) is mirrored
//       in the service's stream_buffered_bytes gauge; every byte added is
//       subtracted when the result is written or dropped, or in the
//       destructor: memory and gauge return when the call ends, however.
//  (S9) The call's state is state_, one StreamState (stream_state.h: one
//       line per state, the diagram of its edges), moved only by
//       transition(from, to) under mu_, which checks the current state and
//       the edge and reports any other move as a bug. The call finishes
//       (kFinished) from kInputClosed once every job has reported and every
//       result is written, or from kGone once every job has reported; never
//       while a read, a write or a capacity wait is outstanding.
//  (S10) Every item is answered with its own tag. An item deduplicated to a
//       job (its idempotency key) is answered by that job's result, which
//       carries the tag of the request that made the job: an ended job's
//       result is re-tagged where it is built (pump_locked); for a job still
//       running, the item's tag waits in dedup_tags_ under the job's id, and
//       drain_ended gives each result of that job one of them until none is
//       left. The job reports once per waiter this stream added (its first
//       request, if it came from this stream, and each deduplicated item), so
//       every tag goes out exactly once, whichever result takes which: they
//       are all the same job's.
//  (S11) Credentials are checked again after a reload. Before a message's
//       items are submitted, the stream asks Access::reloaded_since: if the
//       token file was reloaded since the stream was admitted, the call is
//       admitted again under the new file (its token or certificate, the
//       Stream role). Refused (a revoked token, a removed principal or role):
//       that message is not run and the call ends like S7, with the refusal's
//       code (UNAUTHENTICATED or PERMISSION_DENIED) and a sentence saying so,
//       once the jobs of the messages before it have reported. Admitted: the
//       new Caller decides this message's items and the next ones (a changed
//       handler allow-list applies at once). Checked per message, not per
//       item: a message is what a client sends at once.
//  (S12) Upstream messages are read into two slots in turn, each a block
//       of the message's bytes, its items' fields and a protobuf Arena
//       (issue 19): the plain form every client sends is read in place
//       (parse_plain_batch: the fields view into the bytes, no message
//       object, no string copied), anything else is parsed by protobuf on
//       the slot's arena (a message's JobRequests and their strings in a few
//       blocks) and viewed there. in_ is one slot's items; a read parses
//       into the other (read_slot_), which nothing refers to: the
//       OnReadDone that made in_ the current message, in the same critical
//       section, flipped read_slot_ to the previous message's slot and
//       reset it. Any thread may start the next read (a pump that
//       empties in_ from a job's end or a written reply), but only under mu_
//       after that, so the parse always finds its slot reset and unused
//       (S2: one read at a time). What pump_locked takes from in_ it copies
//       (to_spec, the tags), so nothing outlives its message.
//  (S13) A result is serialized once, where it is made: job_done turns it
//       into its ResultBatch entry (batch_entry: field 1's tag, the length,
//       the JobResult's bytes, written from the job's fields without a
//       JobResult message) on the worker that ended the job, and the
//       entry is what waits in ended_ and pending_ and counts its exact size
//       (S3, S6, S8). A reply is its entries one after the other, copied
//       into one slice (join_entries), which is a valid ResultBatch: the
//       message has that one repeated field. Only S10's re-tag reads an
//       entry back (a deduplicated item's result, rare).
#include <google/protobuf/arena.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <cassert>
#include <deque>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include "convert.h"
#include "parse.h"
#include "stream_state.h"
#include "tpool/common/mutex.h"
#include "tpool/rpc/services.h"

namespace tpool::rpc {
namespace {

using tpool::v1::JobBatch;

class StreamReactor final : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>,
                            public engine::CapacityWaiter {
 public:
  StreamReactor(JobServiceImpl& svc, grpc::CallbackServerContext* ctx)
      : svc_(svc), ctx_(ctx), admission_(svc.access().admit(ctx, security::Method::kStream)) {
    svc_.streams_total.fetch_add(1, std::memory_order_relaxed);
    // Counted here whatever follows: the destructor takes it back.
    const bool over_limit =
        svc_.streams_active.fetch_add(1, std::memory_order_relaxed) >= svc_.limits().max_streams;
    std::optional<grpc::Status> refused;
    {
      tpool::MutexLock lock(mu_);  // nobody else sees the reactor yet; for the analysis (S1)
      refused = admission_.refused;
      if (refused) transition(StreamState::kHeld, StreamState::kFinished);
    }
    if (refused) {  // the role; each item's handler is checked in pump_locked
      Finish(*refused);
      return;
    }
    if (over_limit) {
      svc_.streams_rejected.fetch_add(1, std::memory_order_relaxed);
      {
        tpool::MutexLock lock(mu_);  // nobody else sees the reactor yet; for the analysis (S1)
        transition(StreamState::kHeld, StreamState::kFinished);
      }
      Finish(to_status(Refusal::kExhausted,
                       std::to_string(svc_.limits().max_streams) +
                           " streams are open (server.max_streams); close one or retry later"));
      return;
    }
    {
      tpool::MutexLock lock(mu_);  // as above
      transition(StreamState::kHeld, StreamState::kReading);
    }
    StartRead(&in_bytes_);
  }

  ~StreamReactor() override {
    // (S8) whatever is still counted (results of a call that ended unsent).
    pending_.clear();
    svc_.stream_buffered_bytes.fetch_sub(buffered_bytes_, std::memory_order_relaxed);
    svc_.streams_active.fetch_sub(1, std::memory_order_relaxed);
  }

  void OnReadDone(bool ok) override {
    // (S2) in_bytes_ is ours until the next StartRead: parse outside mu_,
    // (S12) onto the arena nothing refers to.
    int slot = 0;
    {
      tpool::MutexLock lock(mu_);
      slot = read_slot_;
    }
    const bool parsed = ok && read_items(slot);
    bool took = false;
    Actions a;
    {
      tpool::MutexLock lock(mu_);  // (S1)
      next_item_ = 0;
      in_ = &kNoItems;
      if (state_ == StreamState::kGoneReading) {
        transition(StreamState::kGoneReading, StreamState::kGone);  // nobody reads the results
      } else if (!ok) {                                             // the client half-closed
        transition(StreamState::kReading, StreamState::kInputClosed);
      } else if (!parsed) {  // (S7)
        svc_.stream_unparsable_messages.fetch_add(1, std::memory_order_relaxed);
        transition(StreamState::kReading, StreamState::kInputClosed);
        end_status_ = to_status(
            Refusal::kUnparsable,
            "message " + std::to_string(messages_read_ + 1) +
                " of this stream (counting from 1) could not be parsed as tpool.v1.JobBatch; "
                "the jobs of the " +
                std::to_string(messages_read_) +
                " messages before it were run and their results sent, nothing after it was "
                "read: fix the client's encoding and send the rest on a new call");
      } else if (std::optional<grpc::Status> revoked = readmit_locked()) {  // (S11)
        transition(StreamState::kReading, StreamState::kInputClosed);
        end_status_ = grpc::Status(
            revoked->error_code(),
            "message " + std::to_string(messages_read_ + 1) +
                " of this stream (counting from 1) was not run: the token file was reloaded "
                "and this stream's credentials no longer admit it (" +
                revoked->error_message() + "); the jobs of the " + std::to_string(messages_read_) +
                " messages before it were run and their results sent, nothing after it was "
                "read: send the rest on a new call with valid credentials");
      } else {
        ++messages_read_;
        in_ = &items_[slot];
        took = true;
        // (S12) The message before it is referenced no more: its slot is
        // reset and takes the next read, before anything here can start one.
        read_slot_ ^= 1;
        reset_slot(read_slot_);
        transition(StreamState::kReading, StreamState::kHeld);
        pump_locked();
      }
      decide_locked(a);
    }
    if (!took) reset_slot(slot);  // (S12) not taken: this message goes
    act(a);
  }

  // (S12) The read's message into slot's items (parse.h, read_job_batch:
  // the plain form in place, anything else through protobuf on the slot's
  // arena). False if the bytes are not a JobBatch (S7). Consumes in_bytes_.
  bool read_items(int slot) {
    const bool ok = read_job_batch(in_bytes_, bytes_[slot], arenas_[slot], items_[slot]);
    in_bytes_.Clear();
    return ok;
  }

  // (S12) A slot nothing refers to, made ready for the next read; a large
  // message's memory is given back rather than kept for the stream's life.
  void reset_slot(int slot) {
    arenas_[slot].Reset();
    items_[slot].clear();
    if (items_[slot].capacity() > kKeepItems) std::vector<RequestFields>().swap(items_[slot]);
    bytes_[slot].clear();
    if (bytes_[slot].capacity() > kKeepBytes) std::string().swap(bytes_[slot]);
  }

  void OnWriteDone(bool ok) override {
    Actions a;
    {
      tpool::MutexLock lock(mu_);
      writing_ = false;
      unbuffer_locked(out_bytes_size_);  // (S8) written, or never will be
      out_count_ = 0;
      out_bytes_size_ = 0;
      if (!ok) client_gone_locked();  // OnCancel follows
      refill_locked();                // (S3) the written results' slots are free
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
      tpool::MutexLock lock(mu_);
      client_gone_locked();
      decide_locked(a);
    }
    act(a);
    // Its jobs waiting for their time (a delay, a retry's backoff) end now:
    // the call finishes once they have reported (S9), not when they are due.
    // Without mu_: their ends call job_done, which takes it.
    svc_.engine().cancel_scheduled(&cancelled_);
  }

  void OnDone() override { unref(); }

  // engine::CapacityWaiter: the engine may have room again (S3).
  void on_capacity() override {
    Actions a;
    {
      tpool::MutexLock lock(mu_);
      if (state_ == StreamState::kGoneWaitingCapacity) {
        transition(StreamState::kGoneWaitingCapacity, StreamState::kGone);
      } else {
        transition(StreamState::kWaitingCapacity, StreamState::kHeld);
        pump_locked();
      }
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
    // (S13) The result goes straight from the job's fields to its entry's
    // bytes (no JobResult built); (S6) one too large for a reply becomes
    // fit_result's FAILED result there.
    auto* node = new Ended{batch_entry(result_fields(job, self->svc_.replica()),
                                       self->svc_.limits().max_message_bytes),
                           job.id(), nullptr};
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

  // A result waiting to be written: its ResultBatch entry (S13).
  struct Unsent {
    std::string entry;
  };
  std::uint64_t unsent() const REQUIRES(mu_) { return pending_.size() + out_count_; }

  // The current message's items (in_, S3, S12).
  int items_locked() const REQUIRES(mu_) { return static_cast<int>(in_->size()); }
  const RequestFields& item_locked(int i) const REQUIRES(mu_) {
    return (*in_)[static_cast<std::size_t>(i)];
  }

  // (S9) The one way state_ changes.
  void transition(StreamState from, StreamState to) REQUIRES(mu_) {
    if (auto bug = check_transition(state_, from, to)) {
      spdlog::critical("{}", *bug);
      assert(false && "illegal Stream state transition (S9)");
      return;
    }
    state_ = to;
  }

  // OnCancel or a failed write: nobody will read the results (S8).
  void client_gone_locked() REQUIRES(mu_) {
    switch (state_) {
      case StreamState::kReading:
        transition(StreamState::kReading, StreamState::kGoneReading);
        break;
      case StreamState::kWaitingCapacity:
        transition(StreamState::kWaitingCapacity, StreamState::kGoneWaitingCapacity);
        break;
      case StreamState::kHeld:
      case StreamState::kInputClosed:
        transition(state_, StreamState::kGone);
        break;
      case StreamState::kGoneReading:
      case StreamState::kGoneWaitingCapacity:
      case StreamState::kGone:
      case StreamState::kFinished:
        return;  // already gone (a failed write, then OnCancel), or finished
    }
    drop_pending_locked();
  }

  // (S3) How many more jobs the stream may start now (0: none).
  std::uint64_t room_locked() const REQUIRES(mu_) {
    const RpcLimits& l = svc_.limits();
    const std::uint64_t used = in_flight_ + unsent();
    if (used >= l.stream_window) return 0;
    std::uint64_t room = l.stream_window - used;
    const std::uint64_t charged = buffered_bytes_ + in_flight_ * largest_result_;
    if (charged >= l.stream_buffer_bytes) return 0;
    if (largest_result_ > 0) {
      room = std::min(
          room, std::max<std::uint64_t>(1, (l.stream_buffer_bytes - charged) / largest_result_));
    }
    return room;
  }

  // (S11) After a reload of the token file, admits the call again: the
  // refusal to end it with, or nullopt (admission_ now holds the new Caller,
  // or nothing was reloaded). Under mu_: admission_ is read by pump_locked;
  // the check is a pointer comparison, the admission runs only after a reload.
  std::optional<grpc::Status> readmit_locked() REQUIRES(mu_) {
    if (!svc_.access().reloaded_since(admission_.caller)) return std::nullopt;
    Admission again = svc_.access().admit(ctx_, security::Method::kStream);
    if (again.refused) return std::move(again.refused);
    admission_ = std::move(again);
    return std::nullopt;
  }

  // Submit the waiting items of in_, in order, while the stream has room and
  // the engine takes them (S3): each run of well-formed items as one engine
  // batch (one handler lookup per name, one pool submit_batch).
  void pump_locked() REQUIRES(mu_) {
    if (client_gone(state_)) {  // nobody will read the results
      next_item_ = items_locked();
      return;
    }
    while (next_item_ < items_locked() && state_ == StreamState::kHeld) {
      const std::uint64_t room = room_locked();
      if (room == 0) return;
      const int end = static_cast<int>(std::min<std::uint64_t>(
          static_cast<std::uint64_t>(items_locked()),
          static_cast<std::uint64_t>(next_item_) + std::min<std::uint64_t>(room, 1u << 20)));
      specs_.clear();
      int bad = -1;  // an item that does not translate, or is not allowed, ends the run
      std::optional<engine::Error> bad_err;
      std::string denied;  // why the item `bad` is not allowed (the caller's snapshot)
      // One reading of the clocks (and of the call's deadline) for the
      // message's jobs, not one per job (issue 19).
      const RequestClock clock = RequestClock::read(ctx_->deadline());
      for (int i = next_item_; i < end; ++i) {
        denied =
            admission_.caller.handler_refusal(security::Method::kStream, item_locked(i).handler);
        if (!denied.empty()) {
          bad = i;
          break;
        }
        engine::JobSpec& spec = specs_.emplace_back();
        bad_err = to_spec(item_locked(i), clock, false, spec);
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
                                                      /*stop_when_full=*/true,
                                                      /*ack_by_result=*/true);  // (D8)
      for (std::size_t k = 0; k < consumed; ++k) {
        engine::Engine::SubmitResult& r = results_[k];
        if (!r.ok()) {
          add_error(item_locked(next_item_ + static_cast<int>(k)).tag, *r.error);
        } else if (r.value.will_notify) {
          ++in_flight_;
          refs_.fetch_add(1, std::memory_order_relaxed);  // (S4) the job's; job_done drops it
          if (r.value.deduplicated) {  // (S10) its result will carry this item's tag
            dedup_tags_.emplace(r.value.job->id(),
                                item_locked(next_item_ + static_cast<int>(k)).tag);
          }
        } else {  // a deduplicated job that had already ended
          ResultFields f = result_fields(*r.value.job, svc_.replica());
          f.tag = item_locked(next_item_ + static_cast<int>(k)).tag;  // (S10)
          add_pending_locked(f);
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
          transition(StreamState::kHeld, StreamState::kWaitingCapacity);
          return;
        }
        refs_.fetch_sub(1, std::memory_order_relaxed);
        continue;  // room right now: try again
      }
      if (bad >= 0) {
        if (!denied.empty()) {
          add_refusal(item_locked(bad).tag, Refusal::kPermissionDenied, denied);
        } else {
          add_error(item_locked(bad).tag, *bad_err);
        }
        ++next_item_;
      }
    }
  }

  // (S3) Slots came free (results written or jobs ended). Refill only once a
  // batch's worth is free (a quarter of the window, or all that waits), so
  // the stream submits in batches rather than one job per result written.
  void refill_locked() REQUIRES(mu_) {
    const std::uint64_t window = svc_.limits().stream_window;
    const std::uint64_t waiting =
        static_cast<std::uint64_t>(std::max(0, items_locked() - next_item_));
    if (waiting == 0) return;
    const std::uint64_t used = std::min(window, in_flight_ + unsent());
    if (window - used >= std::min(std::max<std::uint64_t>(1, window / 4), waiting)) {
      pump_locked();
    }
  }

  void add_error(std::uint64_t tag, const engine::Error& err) REQUIRES(mu_) {
    add_refusal(tag, refusal_of(err.code), err.message);
  }
  void add_refusal(std::uint64_t tag, Refusal why, const std::string& sentence) REQUIRES(mu_) {
    ResultFields f;
    f.tag = tag;
    f.code = code_number(why);
    f.message = sentence;
    add_pending_locked(f);
  }

  // (S13) The same encoder as job_done's; (S6) within a reply's bytes.
  void add_pending_locked(const ResultFields& f) REQUIRES(mu_) {
    std::string entry = batch_entry(f, svc_.limits().max_message_bytes);
    buffer_locked(entry.size());
    pending_.push_back({std::move(entry)});
  }

  // (S8) Count bytes held here in the stream's and the service's totals.
  void buffer_locked(std::uint64_t bytes) REQUIRES(mu_) {
    buffered_bytes_ += bytes;
    largest_result_ = std::max(largest_result_, bytes);
    svc_.stream_buffered_bytes.fetch_add(bytes, std::memory_order_relaxed);  // a gauge
  }
  void unbuffer_locked(std::uint64_t bytes) REQUIRES(mu_) {
    buffered_bytes_ -= bytes;
    svc_.stream_buffered_bytes.fetch_sub(bytes, std::memory_order_relaxed);
  }

  void drop_pending_locked() REQUIRES(mu_) {
    std::uint64_t bytes = 0;
    for (const Unsent& u : pending_) bytes += u.entry.size();
    pending_.clear();
    pending_.shrink_to_fit();
    unbuffer_locked(bytes);
  }

  // What to start now (S1, S2, S9).
  void decide_locked(Actions& a) REQUIRES(mu_) {
    if (state_ == StreamState::kFinished) return;
    const bool items_waiting = next_item_ < items_locked();
    if (!writing_ && !client_gone(state_) && !pending_.empty()) {
      // (S6) Cut the message by bytes as well as by what is pending.
      const std::uint64_t cap = svc_.limits().max_message_bytes > kReplyHeadroomBytes
                                    ? svc_.limits().max_message_bytes - kReplyHeadroomBytes
                                    : svc_.limits().max_message_bytes;
      std::uint64_t size = 0;
      do {
        Unsent& u = pending_.front();
        if (out_count_ > 0 && size + u.entry.size() > cap) break;
        size += u.entry.size();
        out_entries_.push_back(std::move(u.entry));  // (S13)
        ++out_count_;
        pending_.pop_front();
      } while (!pending_.empty());
      out_bytes_size_ = size;  // stays in buffered_bytes_ until written (S8)
      writing_ = true;
      a.write = true;
    }
    if (state_ == StreamState::kHeld && !items_waiting && room_locked() > 0) {
      if (svc_.engine().draining()) {
        // Stop taking work; finish once this stream's jobs have reported.
        transition(StreamState::kHeld, StreamState::kInputClosed);
        end_status_ = to_status(Refusal::kDraining,
                                "tpoold is draining and accepts no new jobs; reconnect to "
                                "another instance or after the restart");
      } else {
        transition(StreamState::kHeld, StreamState::kReading);
        a.read = true;
      }
    }
    if (writing_ || in_flight_ != 0) return;  // (S9) never with a write or a job outstanding
    if (state_ == StreamState::kGone) {
      transition(StreamState::kGone, StreamState::kFinished);
      a.finish = true;
      a.status = to_status(Refusal::kCallCancelled, "the call was cancelled");
    } else if (state_ == StreamState::kInputClosed && !items_waiting && pending_.empty()) {
      transition(StreamState::kInputClosed, StreamState::kFinished);
      a.finish = true;
      a.status = end_status_;
    }
  }

  // (S5) Reports the ended jobs on ended_ and drops their references.
  void drain_ended() {
    Actions a;
    std::uint64_t n = 0;
    {
      tpool::MutexLock lock(mu_);
      Ended* list = ended_.exchange(nullptr, std::memory_order_acquire);  // (S5)
      Ended* in_order = nullptr;  // the list is newest first: reverse it
      while (list != nullptr) {
        Ended* next = list->next;
        list->next = in_order;
        in_order = list;
        list = next;
      }
      const bool keep = !client_gone(state_);  // else nobody reads them
      while (in_order != nullptr) {
        if (!dedup_tags_.empty()) {  // (S10) a deduplicated item's own tag
          const auto it = dedup_tags_.find(in_order->job_id);
          if (it != dedup_tags_.end()) {
            retag_entry(in_order->entry, it->second);  // (S13) read back, rare
            dedup_tags_.erase(it);
          }
        }
        if (keep) {
          buffer_locked(in_order->entry.size());  // (S8)
          pending_.push_back({std::move(in_order->entry)});
        }
        Ended* next = in_order->next;
        delete in_order;
        in_order = next;
        ++n;
      }
      in_flight_ -= n;
      // (S3) In-flight slots became unsent ones: the window is no freer, but
      // the byte charge of a job that produced less than the largest result
      // is, so try (cheap when there is no room).
      refill_locked();
      decide_locked(a);
    }
    act(a);
    // (S4) the n jobs' references
    if (refs_.fetch_sub(static_cast<int>(n), std::memory_order_acq_rel) == static_cast<int>(n)) {
      delete this;
    }
  }

  void act(const Actions& a) {
    if (a.write) {
      // (S2) out_entries_ belong to the writing side: one slice outside mu_
      // (S13), then the entries are freed at once.
      join_entries(out_entries_, out_bytes_);
      out_entries_.clear();
      StartWrite(&out_bytes_);
    }
    if (a.read) StartRead(&in_bytes_);
    if (a.finish) Finish(a.status);
  }

  void unref() {
    if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }

  // A result built by job_done, waiting to be reported (S5).
  // (S12) A message of a hundred 16-byte jobs fits in about three blocks;
  // Reset frees them all, so an idle stream holds none.
  static google::protobuf::ArenaOptions arena_options() {
    google::protobuf::ArenaOptions o;
    o.start_block_size = 4096;
    o.max_block_size = 65536;
    return o;
  }

  struct Ended {
    std::string entry;  // (S13) the result's ResultBatch entry
    std::uint64_t job_id;
    Ended* next;
  };

  JobServiceImpl& svc_;
  grpc::CallbackServerContext* ctx_;
  // The caller, admitted at the start and again after a reload of the token
  // file (S11); its snapshot decides the items of this call (access.h).
  Admission admission_ GUARDED_BY(mu_);
  std::atomic<Ended*> ended_{nullptr};  // (S5) a Treiber stack, drained whole
  // (S10) job id -> the tag of an item deduplicated to it, one per item.
  std::unordered_multimap<std::uint64_t, std::uint64_t> dedup_tags_ GUARDED_BY(mu_);
  std::atomic<bool> cancelled_{false};  // the jobs' group cancel flag
  std::atomic<int> refs_{1};            // (S4) gRPC's reference, dropped in OnDone
  grpc::ByteBuffer in_bytes_;           // (S2) the read's target
  // (S12) The arenas the upstream messages are parsed on, in turn.
  google::protobuf::Arena arenas_[2] = {google::protobuf::Arena(arena_options()),
                                        google::protobuf::Arena(arena_options())};
  std::vector<std::string> out_entries_;  // (S2, S13) the message being written, before act()
  grpc::ByteBuffer out_bytes_;            // (S2) ... and as gRPC writes it

  tpool::Mutex mu_;  // (S1) guards everything below
  // The upstream message being submitted (S3): the items of slot
  // read_slot_ ^ 1 (S12), or none.
  const std::vector<RequestFields>* in_ GUARDED_BY(mu_) = &kNoItems;
  int read_slot_ GUARDED_BY(mu_) = 0;  // (S12) the slot the next read parses into
  // (S12) Each slot's message: its bytes, its items' fields (viewing into the
  // bytes or into a JobBatch on the slot's arena). A slot is written only by
  // the read that parses into it, outside mu_ (S2: one read at a time).
  std::string bytes_[2];
  std::vector<RequestFields> items_[2];
  static inline const std::vector<RequestFields> kNoItems;
  // What a reset slot keeps for the next message (a 1,000-job message of
  // small jobs fits): more is given back.
  static constexpr std::size_t kKeepBytes = 256 * 1024;
  static constexpr std::size_t kKeepItems = 2048;
  // Scratch for pump_locked, kept to reuse their memory.
  std::vector<engine::JobSpec> specs_ GUARDED_BY(mu_);
  std::vector<engine::Engine::SubmitResult> results_ GUARDED_BY(mu_);
  int next_item_ GUARDED_BY(mu_) = 0;                // its first item not yet submitted
  std::uint64_t messages_read_ GUARDED_BY(mu_) = 0;  // upstream messages parsed (S7)
  std::deque<Unsent> pending_ GUARDED_BY(mu_);       // results gathering (S2)
  std::uint64_t out_count_ GUARDED_BY(mu_) = 0;  // results in the message being written (S2, S3)
  std::uint64_t out_bytes_size_ GUARDED_BY(mu_) = 0;  // ... and their bytes (S8)
  std::uint64_t buffered_bytes_ GUARDED_BY(mu_) =
      0;  // pending_ + the message being written (S3, S8)
  std::uint64_t largest_result_ GUARDED_BY(mu_) = 0;        // the largest result entry so far (S3)
  std::uint64_t in_flight_ GUARDED_BY(mu_) = 0;             // this stream's jobs not yet reported
  StreamState state_ GUARDED_BY(mu_) = StreamState::kHeld;  // (S9)
  bool writing_ GUARDED_BY(mu_) = false;                    // (S2) the one write is outstanding
  // kInputClosed's status: OK, or why (S7).
  grpc::Status end_status_ GUARDED_BY(mu_) = grpc::Status::OK;
};

}  // namespace

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* JobServiceImpl::Stream(
    grpc::CallbackServerContext* ctx) {
  return new StreamReactor(*this, ctx);
}

}  // namespace tpool::rpc
