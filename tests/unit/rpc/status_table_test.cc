// The one table of gRPC status codes (daemon/rpc/src/convert.h, docs/api.md
// "Status codes"): the table itself, then every code and its sentence as a
// client of an in-process server sees them.
#include <gtest/gtest.h>

#include <map>
#include <random>

#include "convert.h"
#include "in_process_server.h"
#include "parse.h"

namespace tpool::rpc::testing {
namespace {

using grpc::StatusCode;

// docs/api.md, "Status codes", row by row.
TEST(RpcStatusTable, EveryReasonHasTheCodeDocsApiMdGives) {
  const std::map<Refusal, StatusCode> docs = {
      {Refusal::kInvalidRequest, StatusCode::INVALID_ARGUMENT},
      {Refusal::kUnparsable, StatusCode::INVALID_ARGUMENT},
      {Refusal::kNotFound, StatusCode::NOT_FOUND},
      {Refusal::kExhausted, StatusCode::RESOURCE_EXHAUSTED},
      {Refusal::kDraining, StatusCode::UNAVAILABLE},
      {Refusal::kConflict, StatusCode::FAILED_PRECONDITION},
      {Refusal::kOtherReplica, StatusCode::FAILED_PRECONDITION},
      {Refusal::kReloadFailed, StatusCode::FAILED_PRECONDITION},
      {Refusal::kCallDeadline, StatusCode::DEADLINE_EXCEEDED},
      {Refusal::kCallCancelled, StatusCode::CANCELLED},
      {Refusal::kUnauthenticated, StatusCode::UNAUTHENTICATED},
      {Refusal::kPermissionDenied, StatusCode::PERMISSION_DENIED},
  };
  ASSERT_EQ(docs.size(), std::size(kAllRefusals));
  for (Refusal r : kAllRefusals) {
    ASSERT_TRUE(docs.count(r)) << static_cast<int>(r);
    EXPECT_EQ(code_of(r), docs.at(r)) << static_cast<int>(r);
    grpc::Status s = to_status(r, "a sentence");
    EXPECT_EQ(s.error_code(), docs.at(r));
    EXPECT_EQ(s.error_message(), "a sentence");
  }
}

TEST(RpcStatusTable, EngineErrorsGoThroughTheTable) {
  const std::map<engine::ErrorCode, StatusCode> want = {
      {engine::ErrorCode::kInvalidArgument, StatusCode::INVALID_ARGUMENT},
      {engine::ErrorCode::kNotFound, StatusCode::NOT_FOUND},
      {engine::ErrorCode::kExhausted, StatusCode::RESOURCE_EXHAUSTED},
      {engine::ErrorCode::kUnavailable, StatusCode::UNAVAILABLE},
      {engine::ErrorCode::kFailedPrecondition, StatusCode::FAILED_PRECONDITION},
  };
  for (const auto& [code, grpc_code] : want) {
    engine::Error e{code, "what was wrong"};
    EXPECT_EQ(to_status(e, nullptr).error_code(), grpc_code);
    EXPECT_EQ(to_status(e, nullptr).error_message(), "what was wrong");
    EXPECT_EQ(code_number(e), static_cast<int>(grpc_code));
  }
}

class RpcStatus : public ::testing::Test {
 protected:
  InProcessServer srv_;
};

TEST_F(RpcStatus, OkForEveryFinalJobState) {
  ASSERT_TRUE(srv_.ok());
  for (auto [handler, state] : {std::pair{"echo", tpool::v1::JOB_STATE_SUCCEEDED},
                                std::pair{"fail", tpool::v1::JOB_STATE_FAILED}}) {
    grpc::ClientContext ctx;
    bound(ctx);
    tpool::v1::JobResult res;
    grpc::Status s = srv_.stub().Execute(&ctx, job(handler, "x"), &res);
    EXPECT_TRUE(s.ok()) << handler << ": " << s.error_message();
    EXPECT_EQ(res.state(), state) << handler;
    EXPECT_EQ(res.replica(), "replica-a");
  }
  // A job's own timeout is a result, not a status.
  grpc::ClientContext ctx;
  bound(ctx);
  auto req = job("sleep", "60000");
  req.set_timeout_ms(20);
  tpool::v1::JobResult res;
  grpc::Status s = srv_.stub().Execute(&ctx, req, &res);
  EXPECT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(res.state(), tpool::v1::JOB_STATE_TIMED_OUT);
}

TEST_F(RpcStatus, InvalidArgumentSaysWhichFieldAndWhatToDo) {
  ASSERT_TRUE(srv_.ok());
  {
    grpc::ClientContext ctx;
    tpool::v1::JobResult res;
    EXPECT_TRUE(is(srv_.stub().Execute(&ctx, job("", "x"), &res), StatusCode::INVALID_ARGUMENT,
                   "the request names no handler; set JobRequest.handler"));
  }
  {
    grpc::ClientContext ctx;
    auto req = job("echo", "x");
    req.set_lane(static_cast<tpool::v1::Lane>(7));
    tpool::v1::JobRef ref;
    EXPECT_TRUE(is(srv_.stub().Submit(&ctx, req, &ref), StatusCode::INVALID_ARGUMENT,
                   "lane 7 is not valid; use LANE_UNSPECIFIED"));
  }
  {
    grpc::ClientContext ctx;
    tpool::v1::JobRef req;
    req.set_job_id(1);
    req.set_replica(std::string(300, 'r'));
    tpool::v1::JobStatus st;
    EXPECT_TRUE(is(srv_.stub().Get(&ctx, req, &st), StatusCode::INVALID_ARGUMENT,
                   "is 300 bytes long, over the limit of 253"));
  }
  {
    grpc::ClientContext ctx;
    tpool::v1::ShutdownRequest req;
    req.set_mode(static_cast<tpool::v1::ShutdownMode>(9));
    tpool::v1::ShutdownReply rep;
    EXPECT_TRUE(is(srv_.admin().Shutdown(&ctx, req, &rep), StatusCode::INVALID_ARGUMENT,
                   "shutdown mode 9 is not valid; use DRAIN (1) or CANCEL (2)"));
    std::lock_guard lock(srv_.life().mu);
    EXPECT_EQ(srv_.life().shutdowns, 0);
  }
}

TEST_F(RpcStatus, NotFoundNamesTheHandlerOrTheJob) {
  ASSERT_TRUE(srv_.ok());
  {
    grpc::ClientContext ctx;
    tpool::v1::JobResult res;
    EXPECT_TRUE(is(srv_.stub().Execute(&ctx, job("no_such", "x"), &res), StatusCode::NOT_FOUND,
                   "no handler named 'no_such' is loaded"));
  }
  {
    grpc::ClientContext ctx;
    tpool::v1::JobRef req;
    req.set_job_id(12345);  // incarnation 0: not this run's
    tpool::v1::JobStatus st;
    EXPECT_TRUE(
        is(srv_.stub().Get(&ctx, req, &st), StatusCode::NOT_FOUND, "from another run of tpoold"));
  }
}

TEST_F(RpcStatus, FailedPreconditionForAConflictAnotherReplicaAndAFailedReload) {
  ASSERT_TRUE(srv_.ok());
  auto keyed = [](const std::string& payload) {
    auto r = job("echo", payload);
    r.set_idempotency_key("k1");
    return r;
  };
  {
    grpc::ClientContext ctx;
    tpool::v1::JobRef ref;
    ASSERT_TRUE(srv_.stub().Submit(&ctx, keyed("a"), &ref).ok());
  }
  {
    grpc::ClientContext ctx;
    tpool::v1::JobRef ref;
    EXPECT_TRUE(is(srv_.stub().Submit(&ctx, keyed("b"), &ref), StatusCode::FAILED_PRECONDITION,
                   "idempotency key 'k1' was already used by job"));
  }
  {
    grpc::ClientContext ctx;
    tpool::v1::JobRef req;
    req.set_job_id(1);
    req.set_replica("replica-b");
    tpool::v1::CancelReply rep;
    EXPECT_TRUE(is(srv_.stub().Cancel(&ctx, req, &rep), StatusCode::FAILED_PRECONDITION,
                   "belongs to replica replica-b; this is replica replica-a"));
  }
  srv_.life().reload_ok = false;
  srv_.life().reload_sentence = "plugin reload failed; the previous plugins stay loaded: x";
  {
    grpc::ClientContext ctx;
    tpool::v1::ReloadPluginsReply rep;
    EXPECT_TRUE(is(srv_.admin().ReloadPlugins(&ctx, {}, &rep), StatusCode::FAILED_PRECONDITION,
                   "the previous plugins stay loaded"));
  }
}

TEST_F(RpcStatus, UnavailableWhileDraining) {
  ASSERT_TRUE(srv_.ok());
  srv_.engine().begin_drain();
  grpc::ClientContext ctx;
  tpool::v1::JobRef ref;
  EXPECT_TRUE(is(srv_.stub().Submit(&ctx, job("echo", "x"), &ref), StatusCode::UNAVAILABLE,
                 "tpoold is draining and accepts no new jobs"));
}

TEST(RpcStatusLimits, ResourceExhaustedWithTheRetryHint) {
  ServerOptions o;
  o.engine.max_inflight_jobs = 1;
  InProcessServer srv(o);
  ASSERT_TRUE(srv.ok());
  tpool::v1::JobRef first;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(srv.stub().Submit(&ctx, job("sleep", "60000"), &first).ok());
  }
  grpc::ClientContext ctx;
  tpool::v1::JobRef ref;
  EXPECT_TRUE(is(srv.stub().Submit(&ctx, job("echo", "x"), &ref), StatusCode::RESOURCE_EXHAUSTED,
                 "1 jobs are in flight (server.max_inflight_jobs)"));
  auto hint = ctx.GetServerTrailingMetadata().find("retry-after-ms");
  ASSERT_NE(hint, ctx.GetServerTrailingMetadata().end());
  EXPECT_EQ(std::string(hint->second.data(), hint->second.size()), "50");
  grpc::ClientContext cctx;
  tpool::v1::CancelReply rep;
  EXPECT_TRUE(srv.stub().Cancel(&cctx, first, &rep).ok());
}

TEST(RpcStatusLimits, ResourceExhaustedForOneStreamTooMany) {
  ServerOptions o;
  o.rpc.max_streams = 0;
  InProcessServer srv(o);
  ASSERT_TRUE(srv.ok());
  grpc::ClientContext ctx;
  bound(ctx);
  auto call = srv.stub().Stream(&ctx);
  tpool::v1::ResultBatch rb;
  EXPECT_FALSE(call->Read(&rb));
  EXPECT_TRUE(is(call->Finish(), StatusCode::RESOURCE_EXHAUSTED,
                 "0 streams are open (server.max_streams); close one or retry later"));
  EXPECT_EQ(srv.jobs().snapshot().streams_rejected, 1u);
}

TEST_F(RpcStatus, DeadlineExceededWhenTheCallsDeadlineEndsTheJob) {
  ASSERT_TRUE(srv_.ok());
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(50));
  tpool::v1::JobResult res;
  grpc::Status s = srv_.stub().Execute(&ctx, job("sleep", "60000"), &res);
  EXPECT_EQ(s.error_code(), StatusCode::DEADLINE_EXCEEDED) << s.error_message();
  EXPECT_TRUE(srv_.wait_idle());
  EXPECT_EQ(srv_.handler_counts("sleep").timed_out, 1u);
}

TEST_F(RpcStatus, CancelledWhenTheClientCancelsAWait) {
  ASSERT_TRUE(srv_.ok());
  tpool::v1::JobRef ref;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(srv_.stub().Submit(&ctx, job("sleep", "60000"), &ref).ok());
  }
  grpc::ClientContext ctx;
  tpool::v1::WaitRequest req;
  req.set_job_id(ref.job_id());
  req.set_replica(ref.replica());
  tpool::v1::JobResult res;
  // Whether the cancel reaches the server before or after the Wait is in
  // the job's waiter list, the call ends CANCELLED and the job runs on.
  std::thread canceller([&] { ctx.TryCancel(); });
  grpc::Status s = srv_.stub().Wait(&ctx, req, &res);
  canceller.join();
  EXPECT_EQ(s.error_code(), StatusCode::CANCELLED) << s.error_message();
  // The job was only watched: it runs on.
  grpc::ClientContext gctx;
  tpool::v1::JobStatus st;
  ASSERT_TRUE(srv_.stub().Get(&gctx, ref, &st).ok());
  EXPECT_FALSE(st.state() == tpool::v1::JOB_STATE_CANCELLED);
  grpc::ClientContext cctx;
  tpool::v1::CancelReply rep;
  EXPECT_TRUE(srv_.stub().Cancel(&cctx, ref, &rep).ok());
}

}  // namespace
}  // namespace tpool::rpc::testing

namespace tpool::rpc::testing {
namespace {

// JobRequest's retry, delay and durable fields as the engine receives them
// (issue 17; docs/api.md, "Retries and delayed jobs").
TEST(RpcToSpec, RetryDelayAndDurableFields) {
  const auto no_deadline = std::chrono::system_clock::time_point::max();
  tpool::v1::JobRequest req;
  req.set_handler("echo");
  engine::JobSpec spec;
  ASSERT_FALSE(to_spec(req, no_deadline, true, spec).has_value());
  EXPECT_EQ(spec.max_attempts, 0u);  // 0: the handler's default, resolved by the engine
  EXPECT_EQ(spec.delay, std::chrono::milliseconds(0));

  req.set_max_attempts(4);
  req.set_backoff_base_ms(100);
  req.set_backoff_cap_ms(900);
  req.set_delay_ms(2500);
  spec = {};
  ASSERT_FALSE(to_spec(req, no_deadline, true, spec).has_value());
  EXPECT_EQ(spec.max_attempts, 4u);
  EXPECT_EQ(spec.backoff_base, std::chrono::milliseconds(100));
  EXPECT_EQ(spec.backoff_cap, std::chrono::milliseconds(900));
  EXPECT_EQ(spec.delay, std::chrono::milliseconds(2500));

  req.set_not_before_unix_ms(1);  // both set
  auto err = to_spec(req, no_deadline, true, spec);
  ASSERT_TRUE(err.has_value());
  EXPECT_EQ(err->code, engine::ErrorCode::kInvalidArgument);
  EXPECT_NE(err->message.find("set one"), std::string::npos);

  req.set_delay_ms(0);  // a time in the past runs at once
  spec = {};
  ASSERT_FALSE(to_spec(req, no_deadline, true, spec).has_value());
  EXPECT_EQ(spec.delay, std::chrono::milliseconds(0));
  const auto in_a_minute = std::chrono::duration_cast<std::chrono::milliseconds>(
                               std::chrono::system_clock::now().time_since_epoch()) +
                           std::chrono::minutes(1);
  req.set_not_before_unix_ms(static_cast<std::uint64_t>(in_a_minute.count()));
  spec = {};
  ASSERT_FALSE(to_spec(req, no_deadline, true, spec).has_value());
  EXPECT_GT(spec.delay, std::chrono::seconds(50));
  EXPECT_LE(spec.delay, std::chrono::minutes(1));

  // durable passes through; the engine refuses it without a store
  // (tests/unit/engine/durable_test.cc, kFailedPrecondition naming [store] path).
  req.set_durable(true);
  req.set_timeout_ms(1500);
  spec = {};
  ASSERT_FALSE(to_spec(req, no_deadline, true, spec).has_value());
  EXPECT_TRUE(spec.durable);
  EXPECT_EQ(spec.timeout, std::chrono::milliseconds(1500));  // kept for a replay
}

// The jobs of one request or Stream message are timed from one reading of
// the clocks (RequestClock, issue 19: no clock read per job): a job's
// deadline is the earlier of its timeout and the call's deadline, and a
// not_before time becomes a delay, all counted from those readings.
TEST(RpcToSpec, AJobsDeadlineAndDelayAreCountedFromTheRequestsClockReadings) {
  RequestClock clock;
  clock.steady = std::chrono::steady_clock::time_point(std::chrono::hours(1));
  clock.system = std::chrono::system_clock::time_point(std::chrono::hours(500000));
  clock.call_deadline = clock.steady + std::chrono::seconds(5);
  tpool::v1::JobRequest req;
  req.set_handler("echo");
  engine::JobSpec spec;
  req.set_timeout_ms(10'000);  // later than the call's deadline: the call's
  ASSERT_FALSE(to_spec(req, clock, false, spec).has_value());
  EXPECT_EQ(spec.deadline, clock.call_deadline);
  req.set_timeout_ms(1'000);  // earlier: its own
  spec = {};
  ASSERT_FALSE(to_spec(req, clock, false, spec).has_value());
  EXPECT_EQ(spec.deadline, clock.steady + std::chrono::seconds(1));
  req.set_timeout_ms(0);  // none: the call's
  spec = {};
  ASSERT_FALSE(to_spec(req, clock, false, spec).has_value());
  EXPECT_EQ(spec.deadline, clock.call_deadline);
  clock.call_deadline = std::chrono::steady_clock::time_point::max();  // neither: none
  spec = {};
  ASSERT_FALSE(to_spec(req, clock, false, spec).has_value());
  EXPECT_EQ(spec.deadline, std::chrono::steady_clock::time_point::max());

  const auto system_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(clock.system.time_since_epoch());
  req.set_not_before_unix_ms(
      static_cast<std::uint64_t>((system_ms + std::chrono::seconds(90)).count()));
  spec = {};
  ASSERT_FALSE(to_spec(req, clock, true, spec).has_value());
  EXPECT_EQ(spec.delay, std::chrono::seconds(90));
}

// Stream results are serialized as ResultBatch entries where they are made
// and joined into a reply (stream.cc, S13): the joined bytes parse as the
// ResultBatch of those results in that order, an entry is exactly the bytes
// its result takes in one, and a re-tag changes the tag alone.
TEST(ResultEntries, JoinedEntriesAreTheResultBatchOfTheirResults) {
  tpool::v1::ResultBatch expected;
  std::vector<std::string> entries;
  for (int i = 0; i < 3; ++i) {
    tpool::v1::JobResult& r = *expected.add_results();
    r.set_job_id(100 + static_cast<std::uint64_t>(i));
    r.set_state(tpool::v1::JOB_STATE_SUCCEEDED);
    r.set_output(std::string(static_cast<std::size_t>(i) * 300, 'x'));  // a 2-byte length too
    r.set_tag(7 + static_cast<std::uint64_t>(i));
    entries.push_back(batch_entry(r));
  }
  EXPECT_EQ(entries[0].size() + entries[1].size() + entries[2].size(), expected.ByteSizeLong());
  grpc::ByteBuffer joined;
  join_entries(entries, joined);
  tpool::v1::ResultBatch got;
  ASSERT_TRUE(parse_bytes(joined, got));
  EXPECT_EQ(got.SerializeAsString(), expected.SerializeAsString());

  retag_entry(entries[1], 99);
  grpc::ByteBuffer again;
  join_entries(entries, again);
  ASSERT_TRUE(parse_bytes(again, got));
  ASSERT_EQ(got.results_size(), 3);
  EXPECT_EQ(got.results(1).tag(), 99u);
  expected.mutable_results(1)->set_tag(99);
  EXPECT_EQ(got.SerializeAsString(), expected.SerializeAsString());
}

// The Stream writes its entries from a result's fields (parse.h, batch_entry
// of ResultFields) instead of through a JobResult: the bytes are protobuf's
// own for every field at zero, at one-byte and at multi-byte values (an
// int32 code and an enum below zero are ten bytes), in any combination
// taken here; and the encoder writes exactly the fields JobResult has, so a
// field added to jobs.proto fails this test until the encoder writes it.
TEST(ResultEntries, AnEntryWrittenFromFieldsIsProtobufsOwnBytes) {
  const auto* d = tpool::v1::JobResult::descriptor();
  using FD = google::protobuf::FieldDescriptor;
  const std::map<int, std::pair<std::string, FD::Type>> written = {
      {1, {"job_id", FD::TYPE_UINT64}},  {2, {"state", FD::TYPE_ENUM}},
      {3, {"output", FD::TYPE_BYTES}},   {4, {"message", FD::TYPE_STRING}},
      {5, {"tag", FD::TYPE_UINT64}},     {6, {"code", FD::TYPE_INT32}},
      {7, {"wait_us", FD::TYPE_UINT64}}, {8, {"run_us", FD::TYPE_UINT64}},
      {9, {"replica", FD::TYPE_STRING}}, {10, {"attempts", FD::TYPE_UINT32}}};
  ASSERT_EQ(static_cast<std::size_t>(d->field_count()), written.size())
      << "JobResult gained a field: write it in parse.cc's batch_entry(ResultFields) and here";
  for (int i = 0; i < d->field_count(); ++i) {
    const FD* fd = d->field(i);
    const auto it = written.find(fd->number());
    ASSERT_NE(it, written.end()) << fd->name();
    EXPECT_EQ(fd->name(), it->second.first);
    EXPECT_EQ(fd->type(), it->second.second) << fd->name();
    EXPECT_FALSE(fd->is_repeated()) << fd->name();
  }

  const std::uint64_t u64s[] = {0, 1, 127, 128, 300, 1ull << 35, ~0ull};
  const std::int32_t i32s[] = {0, 5, 200, -1, INT32_MIN};
  const std::string strings[] = {"", "x", std::string(127, 'o'), std::string(200, 'p')};
  int cases = 0;
  for (std::size_t k = 0; k < 7 * 5 * 4; ++k) {
    ResultFields f;
    const std::uint64_t u = u64s[k % 7];
    const std::int32_t i = i32s[k % 5];
    const std::string& str = strings[k % 4];
    const std::string& other = strings[(k / 4) % 4];
    f.job_id = u;
    f.state = static_cast<tpool::v1::JobState>(i % 7 == 0 ? i : k % 7);
    f.output = str;
    f.message = other;
    f.tag = u64s[(k + 3) % 7];
    f.code = i;
    f.wait_us = u64s[(k + 1) % 7];
    f.run_us = u64s[(k + 5) % 7];
    f.replica = other;
    f.attempts = static_cast<std::uint32_t>(u64s[(k + 2) % 7]);
    tpool::v1::JobResult r;
    r.set_job_id(f.job_id);
    r.set_state(f.state);
    r.set_output(std::string(f.output));
    r.set_message(std::string(f.message));
    r.set_tag(f.tag);
    r.set_code(f.code);
    r.set_wait_us(f.wait_us);
    r.set_run_us(f.run_us);
    r.set_replica(std::string(f.replica));
    r.set_attempts(f.attempts);
    ASSERT_EQ(batch_entry(f, 1u << 20), batch_entry(r)) << "case " << k;
    ++cases;
  }
  EXPECT_EQ(cases, 140);
}

// A result whose entry would not fit in a reply is written as fit_result
// makes it: FAILED, its output dropped, the sentence that says so.
TEST(ResultEntries, AnEntryTooLargeForAReplyIsTheFailedResultFitResultMakes) {
  const std::string big(5000, 'b');
  ResultFields f;
  f.job_id = 42;
  f.state = tpool::v1::JOB_STATE_SUCCEEDED;
  f.output = big;
  f.tag = 9;
  f.replica = "r1";
  tpool::v1::JobResult r;
  r.set_job_id(42);
  r.set_state(tpool::v1::JOB_STATE_SUCCEEDED);
  r.set_output(big);
  r.set_tag(9);
  r.set_replica("r1");
  ASSERT_TRUE(fit_result(r, 4096));
  const std::string entry = batch_entry(f, 4096);
  EXPECT_EQ(entry, batch_entry(r));
  EXPECT_NE(r.message().find("more than one reply may hold"), std::string::npos) << r.message();
  // At 8 KiB it fits: the result is as it was.
  const std::vector<std::string> kept = {batch_entry(f, 8192)};
  grpc::ByteBuffer bytes;
  join_entries(kept, bytes);
  tpool::v1::ResultBatch got;
  ASSERT_TRUE(parse_bytes(bytes, got));
  ASSERT_EQ(got.results_size(), 1);
  EXPECT_EQ(got.results(0).state(), tpool::v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(got.results(0).output(), big);
  EXPECT_EQ(got.results(0).message(), "");
}

// The Stream reads an upstream message's plain form in place (parse.h,
// parse_plain_batch) and leaves anything else to protobuf. Random JobBatches
// (every field, labels sometimes, non-ASCII strings and negative or large
// values sometimes), half of them then damaged (a byte changed, the end cut,
// bytes appended, a field repeated): whenever the plain parse reads a message,
// protobuf reads it too, with the same value in every field; and every
// undamaged message in the plain form (no labels, ASCII strings, values in
// range) is read by the plain parse, not left to protobuf.
TEST(PlainBatch, ReadsWhatProtobufReadsOrLeavesItToProtobuf) {
  std::mt19937_64 rng(20261207);
  const auto pick = [&](std::uint64_t n) { return rng() % n; };
  const auto text = [&](bool ascii) {
    std::string t(pick(12), 'a');
    for (char& c : t) c = static_cast<char>('a' + pick(26));
    if (!ascii) t += "\xc3\xa9";  // valid UTF-8, not ASCII
    return t;
  };
  const std::uint64_t u64s[] = {0, 1, 127, 128, 16384, 1ull << 32, ~0ull};
  int plain = 0, plain_read = 0, damaged_read = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    tpool::v1::JobBatch batch;
    bool is_plain = true;
    const int jobs = static_cast<int>(pick(5));
    for (int j = 0; j < jobs; ++j) {
      tpool::v1::JobRequest& r = *batch.add_jobs();
      if (pick(4) != 0) {
        const bool ascii = pick(8) != 0;
        r.set_handler(text(ascii));
        is_plain = is_plain && ascii;
      }
      if (pick(4) != 0) {
        std::string p(pick(300), '\0');
        for (char& c : p) c = static_cast<char>(pick(256));
        r.set_payload(p);
      }
      if (pick(3) == 0) {
        const int lanes[] = {0, 1, 2, 7, -1};
        r.set_lane(static_cast<tpool::v1::Lane>(lanes[pick(5)]));
        is_plain = is_plain && r.lane() >= 0;
      }
      if (pick(3) == 0) r.set_timeout_ms(u64s[pick(7)]);
      if (pick(3) == 0) r.set_idempotency_key(text(true));
      if (pick(6) == 0) {
        (*r.mutable_labels())[text(true)] = text(true);
        is_plain = false;
      }
      r.set_tag(u64s[pick(7)]);
      if (pick(3) == 0) r.set_max_attempts(static_cast<std::uint32_t>(u64s[pick(6)]));
      if (pick(3) == 0) r.set_backoff_base_ms(static_cast<std::uint32_t>(pick(1u << 20)));
      if (pick(3) == 0) r.set_backoff_cap_ms(~0u);
      if (pick(3) == 0) r.set_delay_ms(u64s[pick(7)]);
      if (pick(3) == 0) r.set_not_before_unix_ms(u64s[pick(7)]);
      if (pick(2) == 0) r.set_durable(true);
    }
    std::string bytes = batch.SerializeAsString();
    const bool damage = pick(2) == 0;
    if (damage) {
      switch (pick(4)) {
        case 0:
          if (!bytes.empty()) bytes[pick(bytes.size())] = static_cast<char>(pick(256));
          break;
        case 1:
          bytes.resize(pick(bytes.size() + 1));
          break;
        case 2:
          for (int k = 0; k < 3; ++k) bytes.push_back(static_cast<char>(pick(256)));
          break;
        default:  // the last job's tag again: a field twice in a JobRequest
          if (jobs > 0) {
            tpool::v1::JobRequest twice = batch.jobs(jobs - 1);
            std::string more = twice.SerializeAsString();
            more.push_back(static_cast<char>((7 << 3) | 0));
            more.push_back(5);
            tpool::v1::JobBatch one;
            ASSERT_TRUE(one.mutable_jobs()->Add()->ParseFromString(more));
            bytes += "\x0a" + std::string(1, static_cast<char>(more.size())) + more;
          }
          break;
      }
    }
    std::vector<RequestFields> items;
    const bool read = parse_plain_batch(bytes, items);
    tpool::v1::JobBatch parsed;
    const bool accepted = parsed.ParseFromString(bytes);
    if (!damage && is_plain) {
      ++plain;
      EXPECT_TRUE(read) << "iteration " << iter << ": a plain message was left to protobuf";
    }
    if (!read) {
      EXPECT_TRUE(items.empty());
      continue;
    }
    plain_read += !damage && is_plain ? 1 : 0;
    damaged_read += damage ? 1 : 0;
    ASSERT_TRUE(accepted) << "iteration " << iter << ": read bytes protobuf refuses";
    ASSERT_EQ(items.size(), static_cast<std::size_t>(parsed.jobs_size())) << iter;
    for (int j = 0; j < parsed.jobs_size(); ++j) {
      const RequestFields& a = items[static_cast<std::size_t>(j)];
      const RequestFields b = request_fields(parsed.jobs(j));
      EXPECT_EQ(a.handler, b.handler) << iter;
      EXPECT_EQ(a.payload, b.payload) << iter;
      EXPECT_EQ(a.idempotency_key, b.idempotency_key) << iter;
      EXPECT_EQ(a.labels, nullptr) << iter;
      EXPECT_EQ(b.labels, nullptr) << iter;
      EXPECT_EQ(a.lane, b.lane) << iter;
      EXPECT_EQ(a.timeout_ms, b.timeout_ms) << iter;
      EXPECT_EQ(a.tag, b.tag) << iter;
      EXPECT_EQ(a.max_attempts, b.max_attempts) << iter;
      EXPECT_EQ(a.backoff_base_ms, b.backoff_base_ms) << iter;
      EXPECT_EQ(a.backoff_cap_ms, b.backoff_cap_ms) << iter;
      EXPECT_EQ(a.delay_ms, b.delay_ms) << iter;
      EXPECT_EQ(a.not_before_unix_ms, b.not_before_unix_ms) << iter;
      EXPECT_EQ(a.durable, b.durable) << iter;
    }
  }
  // Both branches were taken, and damaged bytes were sometimes still plain.
  EXPECT_GT(plain, 500);
  EXPECT_EQ(plain_read, plain);
  EXPECT_GT(damaged_read, 50);
}

// A JobRequest read either way becomes the same JobSpec: to_spec reads the
// fields, not the message.
TEST(PlainBatch, AJobSpecIsTheSameWhicheverWayItsRequestWasRead) {
  tpool::v1::JobBatch batch;
  tpool::v1::JobRequest& r = *batch.add_jobs();
  r.set_handler("echo");
  r.set_payload(std::string("pay\0load-of-18-by", 18));
  r.set_lane(tpool::v1::LANE_BLOCKING);
  r.set_timeout_ms(2500);
  r.set_idempotency_key("k-1");
  r.set_tag(77);
  r.set_max_attempts(3);
  r.set_backoff_base_ms(10);
  r.set_backoff_cap_ms(1000);
  r.set_delay_ms(50);
  r.set_durable(true);
  const std::string bytes = batch.SerializeAsString();
  std::vector<RequestFields> items;
  ASSERT_TRUE(parse_plain_batch(bytes, items));
  ASSERT_EQ(items.size(), 1u);
  const RequestClock clock = RequestClock::read();
  tpool::engine::JobSpec a, b;
  ASSERT_FALSE(to_spec(items[0], clock, true, a));
  ASSERT_FALSE(to_spec(r, clock, true, b));
  EXPECT_EQ(a.handler, "echo");
  EXPECT_EQ(a.handler, b.handler);
  EXPECT_EQ(a.payload, b.payload);
  EXPECT_EQ(a.payload.size(), 18u);
  EXPECT_EQ(a.idempotency_key, b.idempotency_key);
  EXPECT_EQ(a.lane, b.lane);
  EXPECT_EQ(a.timeout, b.timeout);
  EXPECT_EQ(a.deadline, b.deadline);
  EXPECT_EQ(a.tag, b.tag);
  EXPECT_EQ(a.max_attempts, b.max_attempts);
  EXPECT_EQ(a.backoff_base, b.backoff_base);
  EXPECT_EQ(a.backoff_cap, b.backoff_cap);
  EXPECT_EQ(a.delay, b.delay);
  EXPECT_EQ(a.durable, b.durable);
  EXPECT_TRUE(a.durable);
  EXPECT_EQ(a.retain, b.retain);
}

// RequestClock::read puts the call's deadline on the steady clock, as far
// from its steady reading as the deadline is from its system reading.
TEST(RpcToSpec, ACallsDeadlineIsCarriedOverToTheSteadyClock) {
  const auto in_a_minute = std::chrono::system_clock::now() + std::chrono::minutes(1);
  const RequestClock clock = RequestClock::read(in_a_minute);
  EXPECT_EQ(clock.call_deadline - clock.steady, in_a_minute - clock.system);
  EXPECT_EQ(RequestClock::read().call_deadline, std::chrono::steady_clock::time_point::max());
}

}  // namespace
}  // namespace tpool::rpc::testing
