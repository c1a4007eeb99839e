// Fuzz target (a): bytes -> a JobService request (JobRequest, JobBatch, a
// Stream's raw messages, JobRef, WaitRequest) -> daemon/rpc's conversion ->
// the engine's admission, with a real engine and pool and the echo example
// plugin loaded by dlopen.
//
// Calls are made the way gRPC's callback server makes them, without a wire:
// the request is parsed from a grpc::ByteBuffer with rpc::parse_bytes (the
// Stream's own parse; gRPC's typed methods deserialize the same way), the
// JobServiceImpl method is called with a CallbackServerContext, and the
// reactor it returns is bound to a fake call (UnaryCall, StreamCall) that
// records Finish, Read and Write; this thread then runs the reactions
// (OnReadDone, OnWriteDone, OnCancel, OnDone) one at a time, as one gRPC
// thread would. So stream.cc's reactor (S1-S9) and jobs.cc's JobWaitReactor
// run unchanged.
//
// Input layout: byte 0 chooses the call and its circumstances, the rest is
// the message (for Stream: messages, each a 2-byte little-endian length and
// that many bytes, the last one cut by the input's end).
//   bits 0-2  call: 0 Execute, 1 Submit, 2 SubmitBatch, 3 Stream,
//             4 Get and Cancel (JobRef), then ListHandlers, 5 Wait
//             (WaitRequest), 6 Stream, 7 SubmitBatch. A Submit(Batch) job is
//             then followed: Get, Cancel (with bit 5), Wait.
//   bits 3-4  service: 0 default limits, 1 tight limits (in-flight 2,
//             stream window 3, payload 512 bytes, 4 results retained),
//             2 draining, 3 durable: a job store (a real SQLite journal in a
//             temporary directory) and [store] durable = true, so every job
//             takes the durable path (admission A8/A9, durable.cc D1-D7)
//   bit  5    the client cancels: Execute's or Wait's call, each Submit(Batch)
//             job by its ref and then its Wait call, or the Stream after
//             `bits 6-7` messages were read
// Messages reach the parser in two slices, as gRPC may hand them over.
//
// Delayed jobs and retries (delay_ms, not_before_unix_ms; max_attempts when
// an echo fails, its output over max_output_bytes) wait in the engine's scheduler, whose
// time is the injected clock: while a call waits and the engine holds
// scheduled jobs, tick() jumps the clock past max_delay and the largest
// backoff and runs the due jobs (Engine::run_scheduled, scheduler.h K5), as
// the scheduler's own thread would once the time came.
//
// Each run ends with no job in flight, no stream open and no byte buffered
// (checked: a job that never ends is a finding), and the retained results
// and idempotency keys expired (an injected clock jumps past the retention),
// so a run does not depend on the runs before it. The pool, the plugin host
// and the three engines are built once per process.
//
// Properties checked besides the sanitizers (std::abort on violation):
//  - every call finishes; a non-OK status has a sentence;
//  - Execute's OK result is final and fits server.max_message_bytes;
//  - Submit's OK ref names a job of this replica; SubmitBatch answers every
//    item, with a job or with a code and a sentence;
//  - a Stream writes only non-empty ResultBatch messages within
//    max_message_bytes, one at a time; unless cancelled, it answers every item
//    of every message it read, ending OK, or INVALID_ARGUMENT after an
//    unparsable message, or UNAVAILABLE when draining;
//  - a spdlog critical line (stream.cc's illegal state transition, S9) is a
//    finding;
//  - the Stream's plain parse (parse_plain_batch) reads the input's message
//    bytes exactly as protobuf does, or leaves them to protobuf
//    (check_plain_parse).
#include <google/protobuf/stubs/logging.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/test/default_reactor_test_peer.h>
#include <spdlog/sinks/base_sink.h>
#include <spdlog/spdlog.h>
#include <stdlib.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "fuzz_temp_dir.h"
#include "parse.h"
#include "tpool/engine/engine.h"
#include "tpool/rpc/services.h"
#include "tpool/store/journal.h"

namespace {

namespace v1 = tpool::v1;
using tpool::rpc::JobServiceImpl;

// How long any one step may take before the run is reported as stuck: far
// above an echo job (microseconds), far below libFuzzer's -timeout=10.
constexpr auto kStuck = std::chrono::seconds(8);

[[noreturn]] void fail(const char* what, const std::string& detail = {}) {
  std::fprintf(stderr, "fuzz_job_request: %s %s\n", what, detail.c_str());
  std::abort();
}

// The service of the current run (tick()'s engine and clock).
struct Service;
Service* g_current = nullptr;
void tick();

// cv.wait_for(lock, kStuck, pred), but each 2 ms without progress lets the
// scheduled jobs' time come (tick(), with the lock released: a job it queues
// may end at once, and its completion takes this lock).
template <class Pred>
bool wait_ticking(std::unique_lock<std::mutex>& lock, std::condition_variable& cv, Pred pred) {
  const auto end = std::chrono::steady_clock::now() + kStuck;
  while (!cv.wait_for(lock, std::chrono::milliseconds(2), pred)) {
    if (std::chrono::steady_clock::now() >= end) return false;
    lock.unlock();
    tick();
    lock.lock();
  }
  return true;
}

// A critical line is an invariant the daemon reports rather than asserts
// (stream.cc's transition(), S9, in a build with NDEBUG): make it a finding.
class AbortOnCritical final : public spdlog::sinks::base_sink<std::mutex> {
 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    if (msg.level >= spdlog::level::critical) {
      fail("spdlog critical:", std::string(msg.payload.data(), msg.payload.size()));
    }
  }
  void flush_() override {}
};

// Retention's time source: jumps past the retention after each run.
class ManualClock final : public tpool::Clock {
 public:
  std::chrono::nanoseconds now() const noexcept override {
    return std::chrono::nanoseconds(ns_.load(std::memory_order_relaxed));
  }
  void advance(std::chrono::nanoseconds d) { ns_.fetch_add(d.count(), std::memory_order_relaxed); }

 private:
  std::atomic<std::int64_t> ns_{std::int64_t{1} << 40};
};

// TPOOL_FUZZ_VERBOSE=1: each call's outcome on stderr (seed authoring).
bool verbose() {
  static const bool v = std::getenv("TPOOL_FUZZ_VERBOSE") != nullptr;
  return v;
}

void report(const char* call, const grpc::Status& s, const std::string& more = {}) {
  if (verbose()) {
    std::fprintf(stderr, "  %s: %d %s%s\n", call, static_cast<int>(s.error_code()),
                 s.error_message().c_str(), more.c_str());
  }
}

// A unary call as gRPC's callback server drives one: binding replays a Finish
// the method already made; the test waits for Finish, then calls OnDone.
class UnaryCall final : public grpc::ServerCallbackUnary {
 public:
  explicit UnaryCall(grpc::ServerUnaryReactor* r) : reactor_(r) { BindReactor(r); }
  void Finish(grpc::Status s) override {
    std::lock_guard lock(mu_);
    if (finished_) fail("a unary call finished twice:", s.error_message());
    status_ = std::move(s);
    finished_ = true;
    cv_.notify_all();
  }
  void SendInitialMetadata() override {}
  grpc::Status wait() {
    std::unique_lock lock(mu_);
    if (!wait_ticking(lock, cv_, [&] { return finished_; })) fail("a unary call never finished");
    return status_;
  }

 private:
  void CallOnDone() override {}
  grpc::internal::ServerReactor* reactor() override { return reactor_; }

  grpc::ServerUnaryReactor* const reactor_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool finished_ = false;
  grpc::Status status_;
};

// One unary method call; cancel: the client cancels once the method returned
// (a reactor of its own sees OnCancel; the default reactor has answered).
// A default reactor may finish after the method returned: a durable Submit or
// SubmitBatch answers from its commit's callback, on the journal's writer
// thread (durable.cc, D9). The wait is for test_status_set(), the last thing
// the test reactor's Finish does, so ctx outlives it.
template <class Method>
grpc::Status unary(const char* name, Method&& method, bool cancel) {
  grpc::CallbackServerContext ctx;
  std::mutex mu;
  std::condition_variable cv;
  grpc::testing::DefaultReactorTestPeer peer(&ctx, [&](const grpc::Status&) {
    std::lock_guard lock(mu);
    cv.notify_all();
  });
  grpc::ServerUnaryReactor* r = method(&ctx);
  grpc::Status s;
  if (r == peer.reactor()) {
    std::unique_lock lock(mu);
    if (!wait_ticking(lock, cv, [&] { return peer.test_status_set(); })) {
      fail("a default reactor never finished");
    }
    s = peer.test_status();
  } else {
    UnaryCall call(r);
    if (cancel) r->OnCancel();
    s = call.wait();
    r->OnDone();
  }
  report(name, s);
  if (!s.ok() && s.error_message().empty()) fail("a refusal without a sentence");
  return s;
}

// A message as gRPC may hand it over: in two slices (the reader must cross
// the boundary).
grpc::ByteBuffer as_buffer(std::string_view bytes) {
  const std::size_t half = bytes.size() / 2;
  grpc::Slice slices[2] = {grpc::Slice(bytes.data(), half),
                           grpc::Slice(bytes.data() + half, bytes.size() - half)};
  return grpc::ByteBuffer(slices, 2);
}

bool parse(std::string_view bytes, google::protobuf::MessageLite& out) {
  grpc::ByteBuffer buffer = as_buffer(bytes);
  return tpool::rpc::parse_bytes(buffer, out);
}

std::string dump(const grpc::ByteBuffer& b) {
  std::vector<grpc::Slice> slices;
  if (!b.Dump(&slices).ok()) fail("a written ByteBuffer could not be read");
  std::string out;
  for (const auto& s : slices) out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return out;
}

bool is_final(v1::JobState s) {
  return s == v1::JOB_STATE_SUCCEEDED || s == v1::JOB_STATE_FAILED ||
         s == v1::JOB_STATE_CANCELLED || s == v1::JOB_STATE_TIMED_OUT;
}

// One service: an engine (its limits, maybe draining) and its JobService.
struct Service {
  ManualClock clock;
  std::unique_ptr<tpool::engine::Engine> engine;
  std::unique_ptr<JobServiceImpl> jobs;
  std::chrono::milliseconds retention{0};
  tpool::engine::EngineLimits limits;
};

void tick() {
  Service* const svc = g_current;
  if (svc == nullptr || svc->engine->snapshot().scheduled == 0) return;
  // Past the longest delay (max_delay) and the longest backoff (an hour,
  // scheduler.cc's kMaxBackoff): every scheduled job is due.
  svc->clock.advance(svc->limits.max_delay + std::chrono::hours(1) + std::chrono::seconds(1));
  (void)svc->engine->run_scheduled();
}

struct World {
  std::unique_ptr<tpool::plugin_host::Host> host;
  std::unique_ptr<tpool::Pool> pool;
  std::unique_ptr<tpool::store::Journal> journal;  // service 3's; outlives its engine
  Service services[4];
};

const std::string kReplica = "fuzz-replica";

void make_service(World& w, Service& s, tpool::engine::EngineLimits el, tpool::rpc::RpcLimits rl,
                  bool draining, tpool::store::Journal* journal = nullptr) {
  el.enforce_interval = std::chrono::milliseconds(0);  // no thread: enforce() after each run
  el.incarnation = 7;                                  // the same ids every process
  // A minute (the daemon's default is 30 days): tick()'s jumps stay small
  // enough that the clock never overflows in a long campaign.
  el.max_delay = std::chrono::minutes(1);
  s.retention = el.retention;
  s.limits = el;
  s.engine =
      std::make_unique<tpool::engine::Engine>(*w.pool, *w.host, el, &s.clock, nullptr, journal);
  s.jobs = std::make_unique<JobServiceImpl>(*s.engine, rl, kReplica);
  if (draining) s.engine->begin_drain();
}

World& world() {
  static World* const the_world = [] {
    grpc_init();
    // Protobuf logs an ERROR line for every string field that is not UTF-8
    // (the parse then fails, as it should): thousands of lines a second here.
    google::protobuf::SetLogHandler(
        +[](google::protobuf::LogLevel, const char*, int, const std::string&) {});
    spdlog::set_default_logger(
        std::make_shared<spdlog::logger>("fuzz", std::make_shared<AbortOnCritical>()));
    auto* w = new World;
    tpool::plugin_host::HostConfig hc;
    hc.dirs = {TPOOL_FUZZ_ECHO_DIR};
    hc.max_output_bytes = 1024;  // an echo of more fails the job (kOutputTooLarge)
    hc.log_sink = [](tpool::plugin_host::LogLevel, std::string_view, std::string_view) {};
    auto h = tpool::plugin_host::Host::load(hc);
    if (!h.ok()) fail("cannot load the echo plugin:", h.status().message());
    w->host = std::move(h).value();
    tpool::Config pc;
    pc.min_threads = pc.max_threads = 2;
    pc.queue_capacity = 1024;
    pc.scheduler_variant = tpool::SchedulerVariant::kLaneExtension;
    pc.blocking_workers = 1;
    pc.backpressure = tpool::Backpressure::kReject;
    auto p = tpool::Pool::create(pc);
    if (!p.ok()) fail("cannot create the pool:", p.status().message());
    w->pool = std::move(p).value();
    // The daemon's defaults; tight ones at the bottom of each range
    // server/src/config.cc accepts (max_message_bytes must leave 16 KiB above
    // max_output_bytes).
    tpool::engine::EngineLimits tight;
    tight.max_payload_bytes = 512;
    tight.max_inflight_jobs = 2;
    tight.max_retained_entries = 4;
    tight.max_retained_bytes = 4096;
    tpool::rpc::RpcLimits tight_rpc;
    tight_rpc.max_streams = 1;
    tight_rpc.stream_window = 3;  // above the engine's limit: the stream waits for capacity
    tight_rpc.max_message_bytes = 20u << 10;
    tight_rpc.stream_buffer_bytes = 64u << 10;
    make_service(*w, w->services[0], {}, {}, false);
    make_service(*w, w->services[1], tight, tight_rpc, false);
    make_service(*w, w->services[2], {}, {}, true);
    // The durable service: its journal in a directory of this process's own,
    // ended jobs expired at once (retention 0) so a run's keys and results do
    // not reach the next run (settle() expires and flushes).
    const std::string dir = tpool::fuzz::temp_dir_removed_at_exit("fuzz-job-request-store");
    if (dir.empty()) fail("cannot make the store's directory");
    tpool::store::JournalOptions jo;
    jo.path = dir + "/jobs.db";
    jo.retention = std::chrono::milliseconds(0);
    auto j = tpool::store::Journal::open(jo);
    if (!j.ok()) fail("cannot open the job store:", j.status().message());
    w->journal = std::move(j).value();
    tpool::engine::EngineLimits durable;
    durable.durable = true;
    make_service(*w, w->services[3], durable, {}, false, w->journal.get());
    return w;
  }();
  return *the_world;
}

// ---- Unary calls ----

void check_ref(const grpc::Status& s, const v1::JobRef& ref) {
  if (s.ok() && (ref.job_id() == 0 || ref.replica() != kReplica)) fail("Submit: a bad ref");
}

// Get, maybe Cancel, then Wait on a job this run submitted.
void follow(Service& svc, std::uint64_t id, bool cancel) {
  v1::JobRef ref;
  ref.set_job_id(id);
  ref.set_replica(kReplica);
  v1::JobStatus st;
  (void)unary(
      "Get", [&](auto* ctx) { return svc.jobs->Get(ctx, &ref, &st); }, false);
  if (cancel) {
    v1::CancelReply cr;
    (void)unary(
        "Cancel", [&](auto* ctx) { return svc.jobs->Cancel(ctx, &ref, &cr); }, false);
  }
  v1::WaitRequest wr;
  wr.set_job_id(id);
  wr.set_replica(kReplica);
  v1::JobResult res;
  auto s = unary(
      "Wait", [&](auto* ctx) { return svc.jobs->Wait(ctx, &wr, &res); }, cancel);
  // A retained job may have been evicted already (tight: 4 results).
  if (s.ok() && !is_final(res.state())) fail("Wait answered OK before the job ended");
}

void run_unary(Service& svc, int call, bool cancel, std::string_view msg) {
  switch (call) {
    case 0: {  // Execute
      v1::JobRequest req;
      if (!parse(msg, req)) return;
      v1::JobResult res;
      auto s = unary(
          "Execute", [&](auto* ctx) { return svc.jobs->Execute(ctx, &req, &res); }, cancel);
      if (verbose())
        std::fprintf(stderr, "    job %s: %s\n", v1::JobState_Name(res.state()).c_str(),
                     res.message().c_str());
      if (s.ok() && !is_final(res.state())) fail("Execute answered OK with a job not final");
      if (s.ok() && res.ByteSizeLong() > svc.jobs->limits().max_message_bytes)
        fail("Execute's result is over max_message_bytes");
      return;
    }
    case 1: {  // Submit
      v1::JobRequest req;
      if (!parse(msg, req)) return;
      v1::JobRef ref;
      auto s = unary(
          "Submit", [&](auto* ctx) { return svc.jobs->Submit(ctx, &req, &ref); }, false);
      check_ref(s, ref);
      if (s.ok()) follow(svc, ref.job_id(), cancel);
      return;
    }
    case 2:
    case 7: {  // SubmitBatch: a raw method, given the bytes as gRPC would
      v1::JobBatch batch;
      const bool parses = parse(msg, batch);
      const grpc::ByteBuffer request = as_buffer(msg);
      grpc::ByteBuffer reply;
      auto s = unary(
          "SubmitBatch", [&](auto* ctx) { return svc.jobs->SubmitBatch(ctx, &request, &reply); },
          false);
      if (!parses) {  // the unparsable request's own answer, naming the type
        if (s.error_code() != grpc::StatusCode::INVALID_ARGUMENT ||
            s.error_message().find("could not be parsed as tpool.v1.JobBatch") ==
                std::string::npos) {
          fail("SubmitBatch: bytes that are not a JobBatch were not refused as such",
               s.error_message());
        }
        return;
      }
      v1::JobRefs refs;
      if (s.ok() && !refs.ParseFromString(dump(reply)))
        fail("SubmitBatch: a reply that does not parse");
      if (!s.ok() || refs.items_size() != batch.jobs_size()) fail("SubmitBatch: items missing");
      for (const auto& item : refs.items()) {
        const bool job = item.job_id() != 0 && item.code() == 0 && item.replica() == kReplica;
        const bool refused = item.job_id() == 0 && item.code() != 0 && !item.message().empty();
        if (job == refused) fail("SubmitBatch: an item neither a job nor a refusal");
        if (job) follow(svc, item.job_id(), cancel);
      }
      return;
    }
    case 4: {  // Get and Cancel of any ref
      v1::JobRef ref;
      if (!parse(msg, ref)) return;
      v1::JobStatus st;
      (void)unary(
          "Get", [&](auto* ctx) { return svc.jobs->Get(ctx, &ref, &st); }, false);
      v1::CancelReply cr;
      (void)unary(
          "Cancel", [&](auto* ctx) { return svc.jobs->Cancel(ctx, &ref, &cr); }, false);
      v1::ListHandlersRequest lr;
      v1::ListHandlersReply lh;
      auto s = unary(
          "ListHandlers", [&](auto* ctx) { return svc.jobs->ListHandlers(ctx, &lr, &lh); }, false);
      if (!s.ok() || lh.handlers_size() != 1 || lh.handlers(0).name() != "echo")
        fail("ListHandlers does not list echo alone");
      return;
    }
    case 5: {  // Wait on any ref
      v1::WaitRequest wr;
      if (!parse(msg, wr)) return;
      v1::JobResult res;
      (void)unary(
          "Wait", [&](auto* ctx) { return svc.jobs->Wait(ctx, &wr, &res); }, cancel);
      return;
    }
  }
}

// ---- Stream ----

// A bidi call as gRPC drives one: Read/Write/Finish are recorded (from any
// thread); the fuzzing thread completes them one at a time.
class StreamCall final
    : public grpc::ServerCallbackReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  using Reactor = grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>;
  explicit StreamCall(Reactor* r) : reactor_(r) { BindReactor(r); }

  void Finish(grpc::Status s) override {
    std::lock_guard lock(mu_);
    if (finished_) fail("a stream finished twice");
    if (read_ != nullptr || write_ != nullptr) fail("a stream finished with a read or write out");
    status_ = std::move(s);
    finished_ = true;
    cv_.notify_all();
  }
  void SendInitialMetadata() override {}
  void Read(grpc::ByteBuffer* msg) override {
    std::lock_guard lock(mu_);
    if (read_ != nullptr || finished_) fail("a second read, or a read after Finish (S2)");
    read_ = msg;
    cv_.notify_all();
  }
  void Write(const grpc::ByteBuffer* msg, grpc::WriteOptions) override {
    std::lock_guard lock(mu_);
    if (write_ != nullptr || finished_) fail("a second write, or a write after Finish (S2)");
    write_ = msg;
    cv_.notify_all();
  }
  void WriteAndFinish(const grpc::ByteBuffer*, grpc::WriteOptions, grpc::Status) override {
    fail("WriteAndFinish: stream.cc does not use it");
  }

  // What the client sees.
  struct Outcome {
    grpc::Status status;
    std::uint64_t results = 0;  // JobResults written
    std::uint64_t items = 0;    // JobRequests in the messages the server read
    bool unparsable = false;    // the server read a message that is not a JobBatch
    bool cancelled = false;
  };

  // Runs the call: messages are what the client sends; cancel_after >= 0:
  // the client cancels once the server has read that many.
  Outcome drive(const std::vector<std::string_view>& messages, int cancel_after,
                std::uint64_t max_message_bytes) {
    Outcome o;
    std::size_t next = 0;
    for (;;) {
      if (cancel_after >= 0 && !o.cancelled && next >= static_cast<std::size_t>(cancel_after)) {
        o.cancelled = true;
        reactor_->OnCancel();
        continue;
      }
      grpc::ByteBuffer* read = nullptr;
      const grpc::ByteBuffer* write = nullptr;
      {
        std::unique_lock lock(mu_);
        if (!wait_ticking(lock, cv_, [&] { return read_ || write_ || finished_; }))
          fail("a stream made no progress");
        if (write_ != nullptr) {
          write = write_;
        } else if (read_ != nullptr) {
          read = read_;
          read_ = nullptr;
        } else {
          o.status = status_;
          break;
        }
      }
      if (write != nullptr) {
        const std::string bytes = dump(*write);
        v1::ResultBatch batch;
        if (bytes.size() > max_message_bytes || !batch.ParseFromString(bytes) ||
            batch.results_size() == 0) {
          fail("a stream wrote a bad message (S6), bytes:", std::to_string(bytes.size()));
        }
        o.results += static_cast<std::uint64_t>(batch.results_size());
        {
          std::lock_guard lock(mu_);
          write_ = nullptr;
        }
        reactor_->OnWriteDone(!o.cancelled);
      } else if (o.cancelled || next == messages.size()) {
        reactor_->OnReadDone(false);  // cancelled, or the client half-closed
      } else {
        std::string_view m = messages[next++];
        *read = as_buffer(m);
        v1::JobBatch b;
        if (b.ParseFromArray(m.data(), static_cast<int>(m.size()))) {
          o.items += static_cast<std::uint64_t>(b.jobs_size());
        } else {
          o.unparsable = true;
        }
        reactor_->OnReadDone(true);
      }
    }
    reactor_->OnDone();
    return o;
  }

 private:
  void CallOnDone() override {}
  grpc::internal::ServerReactor* reactor() override { return reactor_; }

  Reactor* const reactor_;
  std::mutex mu_;
  std::condition_variable cv_;
  grpc::ByteBuffer* read_ = nullptr;
  const grpc::ByteBuffer* write_ = nullptr;
  bool finished_ = false;
  grpc::Status status_;
};

void run_stream(Service& svc, bool cancel, int cancel_after, std::string_view rest) {
  std::vector<std::string_view> messages;
  while (rest.size() >= 2) {
    const std::size_t len = static_cast<std::uint8_t>(rest[0]) |
                            (static_cast<std::size_t>(static_cast<std::uint8_t>(rest[1])) << 8);
    rest.remove_prefix(2);
    messages.push_back(rest.substr(0, len));
    rest.remove_prefix(std::min(len, rest.size()));
  }
  grpc::CallbackServerContext ctx;
  auto* reactor = svc.jobs->Stream(&ctx);
  StreamCall call(reactor);
  const auto o =
      call.drive(messages, cancel ? cancel_after : -1, svc.jobs->limits().max_message_bytes);
  report("Stream", o.status,
         " (" + std::to_string(o.results) + " results, " + std::to_string(o.items) + " items" +
             (o.cancelled ? ", cancelled)" : ")"));
  if (!o.status.ok() && o.status.error_message().empty())
    fail("Stream: a status without a sentence");
  if (o.cancelled) return;  // results may be dropped, the status is CANCELLED
  const auto code = o.status.error_code();
  const bool draining = svc.engine->draining();
  if (!(code == grpc::StatusCode::OK ||
        (o.unparsable && code == grpc::StatusCode::INVALID_ARGUMENT) ||
        (draining && code == grpc::StatusCode::UNAVAILABLE))) {
    fail("Stream ended with an unexpected status:", o.status.error_message());
  }
  if (o.results != o.items) {
    fail("Stream: not every item answered (S3, S7):",
         std::to_string(o.results) + " results for " + std::to_string(o.items) + " items");
  }
}

// After a run: no job in flight, no stream left, no byte buffered; the
// results retained by this run expire.
void settle(Service& svc) {
  const auto end = std::chrono::steady_clock::now() + kStuck;
  while (svc.engine->in_flight() != 0 || svc.jobs->snapshot().streams_active != 0 ||
         svc.engine->snapshot().scheduled != 0) {
    if (std::chrono::steady_clock::now() >= end) fail("a job or a stream never ended");
    tick();
    std::this_thread::yield();
  }
  if (svc.jobs->snapshot().stream_buffered_bytes != 0) fail("stream bytes still counted (S8)");
  svc.engine->enforce();
  svc.clock.advance(svc.retention + std::chrono::seconds(1));
  svc.engine->expire();
  if (svc.engine->snapshot().retained_entries != 0) fail("results retained after expiry");
  if (svc.engine->durable_enabled()) {
    // Every job of the run ended and is journaled as such; expire() queued
    // their deletion (retention 0): nothing is left for the next run.
    const tpool::Status st = world().journal->flush();
    if (!st.ok()) fail("the job store failed:", st.message());
    world().journal->expire(std::numeric_limits<std::int64_t>::max());
    (void)world().journal->flush();
    if (world().journal->stats().pending != 0) fail("durable jobs left pending in the store");
  }
}

}  // namespace

// The Stream's plain parse (parse.h, parse_plain_batch) against protobuf's,
// on the input's message bytes as one JobBatch: when the plain parse reads
// them, protobuf must accept them too and give every field the same value.
static void check_plain_parse(std::string_view bytes) {
  std::vector<tpool::rpc::RequestFields> items;
  if (!tpool::rpc::parse_plain_batch(bytes, items)) {
    if (!items.empty()) fail("parse_plain_batch: refused, but left items behind");
    return;
  }
  v1::JobBatch batch;
  if (!batch.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    fail("parse_plain_batch: read bytes that protobuf refuses");
  }
  if (items.size() != static_cast<std::size_t>(batch.jobs_size())) {
    fail("parse_plain_batch: a different number of jobs than protobuf");
  }
  for (std::size_t i = 0; i < items.size(); ++i) {
    const tpool::rpc::RequestFields& a = items[i];
    const tpool::rpc::RequestFields b = tpool::rpc::request_fields(batch.jobs(static_cast<int>(i)));
    if (a.handler != b.handler || a.payload != b.payload ||
        a.idempotency_key != b.idempotency_key || a.labels != nullptr || b.labels != nullptr ||
        a.lane != b.lane || a.timeout_ms != b.timeout_ms || a.tag != b.tag ||
        a.max_attempts != b.max_attempts || a.backoff_base_ms != b.backoff_base_ms ||
        a.backoff_cap_ms != b.backoff_cap_ms || a.delay_ms != b.delay_ms ||
        a.not_before_unix_ms != b.not_before_unix_ms || a.durable != b.durable) {
      fail("parse_plain_batch: a field differs from protobuf's, job", std::to_string(i));
    }
  }
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  check_plain_parse(std::string_view(reinterpret_cast<const char*>(data) + 1, size - 1));
  World& w = world();
  const int call = data[0] & 7;
  const int which = (data[0] >> 3) & 3;
  Service& svc = w.services[which];
  const bool cancel = (data[0] >> 5) & 1;
  const int cancel_after = data[0] >> 6;
  const std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  g_current = &svc;
  if (call == 3 || call == 6) {
    run_stream(svc, cancel, cancel_after, rest);
  } else {
    run_unary(svc, call, cancel, rest);
  }
  settle(svc);
  return 0;
}
