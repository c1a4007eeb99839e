// JobService.Stream's state machine (daemon/rpc/src/stream_state.h, S9)
// against an in-process server: the edges, then each way a call ends
// (half-close, client cancel, a bad message, draining) and the window.
#include <grpcpp/generic/generic_stub.h>
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "in_process_server.h"
#include "stream_state.h"

namespace tpool::rpc::testing {
namespace {

using S = StreamState;

TEST(StreamStateMachine, OnlyTheDiagramsEdgesAreLegal) {
  const std::set<std::pair<S, S>> edges = {
      {S::kHeld, S::kReading},         {S::kHeld, S::kWaitingCapacity},
      {S::kHeld, S::kInputClosed},     {S::kHeld, S::kGone},
      {S::kHeld, S::kFinished},        {S::kReading, S::kHeld},
      {S::kReading, S::kInputClosed},  {S::kReading, S::kGoneReading},
      {S::kWaitingCapacity, S::kHeld}, {S::kWaitingCapacity, S::kGoneWaitingCapacity},
      {S::kInputClosed, S::kGone},     {S::kInputClosed, S::kFinished},
      {S::kGoneReading, S::kGone},     {S::kGoneWaitingCapacity, S::kGone},
      {S::kGone, S::kFinished},
  };
  const S all[] = {S::kHeld,        S::kReading, S::kWaitingCapacity,     S::kInputClosed,
                   S::kGoneReading, S::kGone,    S::kGoneWaitingCapacity, S::kFinished};
  for (S from : all) {
    for (S to : all) {
      EXPECT_EQ(legal_transition(from, to), edges.count({from, to}) == 1)
          << to_string(from) << " -> " << to_string(to);
    }
  }
  // Nothing leaves kFinished: a finished call is never finished again.
  for (S to : all) EXPECT_FALSE(legal_transition(S::kFinished, to));
}

TEST(StreamStateMachine, AnIllegalTransitionIsReportedWithBothStates) {
  EXPECT_EQ(check_transition(S::kReading, S::kReading, S::kHeld), std::nullopt);
  // A legal edge from a state the stream is not in.
  auto bug = check_transition(S::kInputClosed, S::kReading, S::kHeld);
  ASSERT_TRUE(bug.has_value());
  EXPECT_NE(bug->find("illegal Stream state transition reading -> held (the stream is input "
                      "closed)"),
            std::string::npos)
      << *bug;
  // Finishing twice.
  EXPECT_TRUE(check_transition(S::kFinished, S::kFinished, S::kGone).has_value());
}

std::vector<std::uint64_t> tags_of(const tpool::v1::ResultBatch& rb) {
  std::vector<std::uint64_t> t;
  for (const auto& r : rb.results()) t.push_back(r.tag());
  return t;
}

tpool::v1::JobBatch batch_of(const std::string& handler, const std::string& payload,
                             std::uint64_t first, int n) {
  tpool::v1::JobBatch b;
  for (int i = 0; i < n; ++i) *b.add_jobs() = job(handler, payload, first + i);
  return b;
}

// Waits (bounded: 30 s) until cond() holds: a condition, not a delay.
template <class Cond>
bool within_bound(Cond cond) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!cond()) {
    if (std::chrono::steady_clock::now() >= end) return false;
    std::this_thread::yield();
  }
  return true;
}

// Waits (bounded) until the engine holds n jobs.
bool wait_in_flight(InProcessServer& srv, std::uint64_t n) {
  return within_bound([&] { return srv.engine().in_flight() >= n; });
}

// kReading -> kHeld per message, kReading -> kInputClosed at the half-close,
// kInputClosed -> kFinished (OK) once every result is written.
// Reads a typed Stream call to its end: every result SUCCEEDED with output,
// no tag twice, the call OK. Returns the tags.
template <class Call>
std::set<std::uint64_t> read_succeeded(Call& call, const std::string& output) {
  std::set<std::uint64_t> tags;
  tpool::v1::ResultBatch rb;
  while (call.Read(&rb)) {
    for (const auto& r : rb.results()) {
      EXPECT_EQ(r.state(), tpool::v1::JOB_STATE_SUCCEEDED) << r.message();
      EXPECT_EQ(r.output(), output);
      EXPECT_TRUE(tags.insert(r.tag()).second) << "tag " << r.tag() << " twice";
    }
  }
  const grpc::Status s = call.Finish();
  EXPECT_TRUE(s.ok()) << s.error_code() << " " << s.error_message();
  return tags;
}

TEST(StreamInProcess, HalfCloseFinishesOkAfterEveryResult) {
  InProcessServer srv;
  ASSERT_TRUE(srv.ok());
  grpc::ClientContext ctx;
  bound(ctx);
  auto call = srv.stub().Stream(&ctx);
  for (int m = 0; m < 3; ++m) ASSERT_TRUE(call->Write(batch_of("echo", "x", 100 * m, 5)));
  ASSERT_TRUE(call->WritesDone());
  const std::set<std::uint64_t> tags = read_succeeded(*call, "x");
  EXPECT_EQ(tags.size(), 15u);
  EXPECT_EQ(srv.jobs().snapshot().streams_total, 1u);
}

// (K6 in scheduler.h) A client that cancels a Stream holding a delayed job:
// the job ends CANCELLED now and the call's reactor finishes, instead of both
// waiting an hour for the job's time to find the call's flag.
TEST(StreamInProcess, ClientCancelEndsItsDelayedJobsNow) {
  InProcessServer srv;
  ASSERT_TRUE(srv.ok());
  grpc::ClientContext ctx;
  bound(ctx);
  auto call = srv.stub().Stream(&ctx);
  tpool::v1::JobBatch b;
  tpool::v1::JobRequest& delayed = *b.add_jobs() = job("echo", "later", 1);
  delayed.set_delay_ms(3'600'000);
  delayed.set_idempotency_key("k6");  // retained, so the test can find it
  *b.add_jobs() = job("echo", "now", 2);
  ASSERT_TRUE(call->Write(b));
  tpool::v1::ResultBatch rb;
  ASSERT_TRUE(call->Read(&rb));  // job 2's result: the message was submitted
  ASSERT_EQ(tags_of(rb), std::vector<std::uint64_t>{2});
  bool more = false;
  const std::vector<engine::JobPtr> found = srv.engine().list(engine::ListFilter{}, &more);
  engine::JobPtr held;
  for (const auto& j : found) {
    if (j->idempotency_key() == "k6") held = j;
  }
  ASSERT_NE(held, nullptr);
  EXPECT_EQ(held->state(), engine::JobState::kScheduled);
  ctx.TryCancel();
  while (call->Read(&rb)) {
  }
  EXPECT_EQ(call->Finish().error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_TRUE(within_bound([&] { return held->state() == engine::JobState::kCancelled; }))
      << "the delayed job waits for its time: " << engine::to_string(held->state());
  EXPECT_TRUE(within_bound([&] { return srv.engine().in_flight() == 0; }));
  if (!held->final()) held->cancel();  // a failed run must not hang the server's shutdown
}

// A bad item is a result with its code; the call goes on.
TEST(StreamInProcess, ABadItemIsAnsweredInBand) {
  InProcessServer srv;
  ASSERT_TRUE(srv.ok());
  grpc::ClientContext ctx;
  bound(ctx);
  auto call = srv.stub().Stream(&ctx);
  tpool::v1::JobBatch b = batch_of("echo", "x", 1, 1);
  *b.add_jobs() = job("no_such", "x", 2);
  *b.add_jobs() = job("echo", "x", 3);
  ASSERT_TRUE(call->Write(b));
  ASSERT_TRUE(call->WritesDone());
  std::map<std::uint64_t, int> code_of_tag;
  tpool::v1::ResultBatch rb;
  while (call->Read(&rb)) {
    for (const auto& r : rb.results()) code_of_tag[r.tag()] = r.code();
  }
  EXPECT_TRUE(call->Finish().ok());
  EXPECT_EQ(code_of_tag, (std::map<std::uint64_t, int>{
                             {1, 0}, {2, static_cast<int>(grpc::StatusCode::NOT_FOUND)}, {3, 0}}));
}

// kHeld/kReading -> kGone on OnCancel: the jobs are cancelled (the group
// flag), results dropped, and the call finishes once they have reported.
TEST(StreamInProcess, ClientCancelCancelsTheStreamsJobs) {
  InProcessServer srv;
  ASSERT_TRUE(srv.ok());
  grpc::ClientContext ctx;
  bound(ctx);
  auto call = srv.stub().Stream(&ctx);
  ASSERT_TRUE(call->Write(batch_of("sleep", "60000", 1, 3)));
  ASSERT_TRUE(wait_in_flight(srv, 3));
  ctx.TryCancel();
  tpool::v1::ResultBatch rb;
  while (call->Read(&rb)) {
  }
  EXPECT_EQ(call->Finish().error_code(), grpc::StatusCode::CANCELLED);
  // The sleeps end because the call's cancel reached them, not after 60 s.
  ASSERT_TRUE(srv.wait_idle());
  EXPECT_EQ(srv.handler_counts("sleep").cancelled, 3u);
}

// (S3) The window bounds the jobs a stream holds: with stream_window 2 and
// jobs that do not end, a message of 6 submits 2 and the rest wait.
TEST(StreamInProcess, AFullWindowHoldsTheRestOfTheMessage) {
  ServerOptions o;
  o.rpc.stream_window = 2;
  InProcessServer srv(o);
  ASSERT_TRUE(srv.ok());
  grpc::ClientContext ctx;
  bound(ctx);
  auto call = srv.stub().Stream(&ctx);
  ASSERT_TRUE(call->Write(batch_of("sleep", "60000", 1, 6)));
  ASSERT_TRUE(wait_in_flight(srv, 2));
  // One submit_batch under the stream's lock took what the window allowed;
  // nothing else ends or is written, so nothing more is submitted.
  ctx.TryCancel();
  tpool::v1::ResultBatch rb;
  while (call->Read(&rb)) {
  }
  EXPECT_EQ(call->Finish().error_code(), grpc::StatusCode::CANCELLED);
  ASSERT_TRUE(srv.wait_idle());
  EXPECT_EQ(srv.handler_counts("sleep").submitted, 2u);
  EXPECT_EQ(srv.handler_counts("sleep").cancelled, 2u);
}

// A window of 1 still delivers every result of a message, in order.
TEST(StreamInProcess, AWindowOfOneDeliversEverything) {
  ServerOptions o;
  o.rpc.stream_window = 1;
  InProcessServer srv(o);
  ASSERT_TRUE(srv.ok());
  grpc::ClientContext ctx;
  bound(ctx);
  auto call = srv.stub().Stream(&ctx);
  ASSERT_TRUE(call->Write(batch_of("echo", "x", 1, 8)));
  ASSERT_TRUE(call->WritesDone());
  std::vector<std::uint64_t> tags;
  tpool::v1::ResultBatch rb;
  while (call->Read(&rb)) {
    for (auto t : tags_of(rb)) tags.push_back(t);
  }
  EXPECT_TRUE(call->Finish().ok());
  EXPECT_EQ(tags, (std::vector<std::uint64_t>{1, 2, 3, 4, 5, 6, 7, 8}));
}

// kHeld -> kInputClosed while draining: the message's jobs are refused in
// band and the call ends UNAVAILABLE.
TEST(StreamInProcess, DrainingEndsTheCallUnavailable) {
  InProcessServer srv;
  ASSERT_TRUE(srv.ok());
  srv.engine().begin_drain();
  grpc::ClientContext ctx;
  bound(ctx);
  auto call = srv.stub().Stream(&ctx);
  ASSERT_TRUE(call->Write(batch_of("echo", "x", 1, 2)));
  std::vector<int> codes;
  tpool::v1::ResultBatch rb;
  while (call->Read(&rb)) {
    for (const auto& r : rb.results()) codes.push_back(r.code());
  }
  EXPECT_TRUE(is(call->Finish(), grpc::StatusCode::UNAVAILABLE,
                 "tpoold is draining and accepts no new jobs"));
  const int unavailable = static_cast<int>(grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(codes, (std::vector<int>{unavailable, unavailable}));
}

// A raw Stream call through the generic stub, to send bytes that are not a
// JobBatch. Each step waits (bounded) for its event.
class RawStream {
 public:
  explicit RawStream(const std::shared_ptr<grpc::Channel>& ch) : generic_(ch) {
    call_ = generic_.PrepareCall(&ctx_, "/tpool.v1.JobService/Stream", &cq_);
    call_->StartCall(tag(1));
    EXPECT_TRUE(next(1));
  }
  ~RawStream() {
    cq_.Shutdown();
    void* t;
    bool ok;
    while (cq_.Next(&t, &ok)) {
    }
  }
  bool write(const std::string& bytes) {
    grpc::Slice slice(bytes);
    grpc::ByteBuffer b(&slice, 1);
    call_->Write(b, tag(2));
    return next(2);
  }
  bool writes_done() {
    call_->WritesDone(tag(3));
    return next(3);
  }
  bool read(tpool::v1::ResultBatch& out) {
    grpc::ByteBuffer b;
    call_->Read(&b, tag(4));
    if (!next(4)) return false;
    std::vector<grpc::Slice> slices;
    EXPECT_TRUE(b.Dump(&slices).ok());
    std::string bytes;
    for (auto& sl : slices) bytes.append(reinterpret_cast<const char*>(sl.begin()), sl.size());
    EXPECT_TRUE(out.ParseFromString(bytes));
    return true;
  }
  grpc::Status finish() {
    grpc::Status s;
    call_->Finish(&s, tag(5));
    EXPECT_TRUE(next(5));
    return s;
  }

 private:
  static void* tag(std::intptr_t i) { return reinterpret_cast<void*>(i); }
  bool next(std::intptr_t want) {
    void* got = nullptr;
    bool ok = false;
    auto st = cq_.AsyncNext(&got, &ok, std::chrono::system_clock::now() + std::chrono::seconds(30));
    EXPECT_EQ(st, grpc::CompletionQueue::GOT_EVENT) << "no event for step " << want;
    EXPECT_EQ(got, tag(want));
    return st == grpc::CompletionQueue::GOT_EVENT && ok;
  }

  grpc::GenericStub generic_;
  grpc::CompletionQueue cq_;
  grpc::ClientContext ctx_;
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> call_;
};

// (S7) kReading -> kInputClosed on a message that does not parse: the call
// ends INVALID_ARGUMENT naming it, after the results of the messages before.
TEST(StreamInProcess, ABadMessageEndsTheCallWithInvalidArgument) {
  InProcessServer srv;
  ASSERT_TRUE(srv.ok());
  RawStream call(srv.channel());
  ASSERT_TRUE(call.write(batch_of("echo", "x", 10, 3).SerializeAsString()));
  call.write(std::string("\x0a\x64x", 3));  // field 1 claiming 100 bytes that are not there
  call.write(batch_of("echo", "x", 30, 3).SerializeAsString());  // may fail: the call may be over
  call.writes_done();
  std::set<std::uint64_t> tags;
  tpool::v1::ResultBatch rb;
  while (call.read(rb)) {
    for (auto t : tags_of(rb)) tags.insert(t);
  }
  EXPECT_TRUE(is(call.finish(), grpc::StatusCode::INVALID_ARGUMENT,
                 "message 2 of this stream (counting from 1) could not be parsed as "
                 "tpool.v1.JobBatch"));
  EXPECT_EQ(tags, (std::set<std::uint64_t>{10, 11, 12}));
  EXPECT_EQ(srv.jobs().snapshot().stream_unparsable_messages, 1u);
}

// (S12) A client whose channel compresses its messages (gzip): the stream
// reads them as any other, because gRPC hands a raw method its message
// decompressed, and the plain parse reads those bytes.
TEST(StreamInProcess, AGzipClientsMessagesAreReadAsAnyOther) {
  InProcessServer srv;
  ASSERT_TRUE(srv.ok());
  grpc::ChannelArguments args;
  args.SetCompressionAlgorithm(GRPC_COMPRESS_GZIP);
  auto channel = grpc::CreateCustomChannel("127.0.0.1:" + std::to_string(srv.port()),
                                           grpc::InsecureChannelCredentials(), args);
  auto stub = tpool::v1::JobService::NewStub(channel);
  grpc::ClientContext ctx;
  bound(ctx);
  ctx.set_compression_algorithm(GRPC_COMPRESS_GZIP);
  auto call = stub->Stream(&ctx);
  const std::string payload(3000, 'z');  // compresses to a few dozen bytes
  for (int m = 0; m < 2; ++m) ASSERT_TRUE(call->Write(batch_of("echo", payload, 100 * m, 10)));
  ASSERT_TRUE(call->WritesDone());
  const std::set<std::uint64_t> tags = read_succeeded(*call, payload);
  EXPECT_EQ(tags.size(), 20u);
  EXPECT_EQ(srv.jobs().snapshot().stream_unparsable_messages, 0u);
}

}  // namespace
}  // namespace tpool::rpc::testing
