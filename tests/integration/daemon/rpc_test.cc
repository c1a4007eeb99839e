// Every JobService/AdminService RPC and status code against a real tpoold.
#include <grpcpp/generic/generic_stub.h>
#include <gtest/gtest.h>

#include <future>
#include <latch>

#include "daemon_process.h"

namespace tpool::testing {
namespace {

using tpool::v1::JobResult;

class Rpc : public DaemonSuite<Rpc> {
 public:
  // A small payload limit to reach INVALID_ARGUMENT without big messages,
  // and a small message limit for RESOURCE_EXHAUSTED from gRPC itself.
  static std::string daemon_config() {
    return "[server]\nmax_payload_bytes = 4096\nmax_message_bytes = 65536\n"
           "max_output_bytes = 49152\n"  // a result must fit in a message (16 KiB to spare)
           "[metrics]\nenabled = false\n";
  }

 protected:
  static DaemonProcess& d() { return *daemon_; }

  static grpc::Status execute(const tpool::v1::JobRequest& req, JobResult& out,
                              std::chrono::milliseconds deadline = std::chrono::seconds(30)) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + deadline);
    return d().jobs().Execute(&ctx, req, &out);
  }
  static tpool::v1::HandlerStats handler_stats(const std::string& name) {
    grpc::ClientContext ctx;
    tpool::v1::StatsReply reply;
    EXPECT_TRUE(d().admin().Stats(&ctx, {}, &reply).ok());
    for (const auto& h : reply.daemon().handlers()) {
      if (h.handler() == name) return h;
    }
    return {};
  }
  // Polls (bounded) until pred(stats of handler) holds.
  template <class Pred>
  static bool eventually(const std::string& handler, Pred pred) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (std::chrono::steady_clock::now() < deadline) {
      if (pred(handler_stats(handler))) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }
};

TEST_F(Rpc, ListHandlersNamesEveryExamplePlugin) {
  grpc::ClientContext ctx;
  tpool::v1::ListHandlersReply reply;
  ASSERT_TRUE(d().jobs().ListHandlers(&ctx, {}, &reply).ok());
  std::vector<std::string> names;
  for (const auto& h : reply.handlers()) names.push_back(h.name());
  EXPECT_EQ(names, (std::vector<std::string>{"echo", "fail", "fail_throw", "fanout", "flaky",
                                             "hash", "sleep"}));
  for (const auto& h : reply.handlers()) {
    EXPECT_EQ(h.lane_hint(),
              h.name() == "sleep" ? tpool::v1::LANE_BLOCKING : tpool::v1::LANE_DEFAULT);
    EXPECT_FALSE(h.path().empty());
  }
}

TEST_F(Rpc, ExecuteEachExamplePlugin) {
  JobResult r;
  ASSERT_TRUE(execute(job("echo", std::string("a\0b", 3)), r).ok());
  EXPECT_EQ(r.state(), tpool::v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(r.output(), std::string("a\0b", 3));
  EXPECT_GT(r.job_id(), 0u);

  ASSERT_TRUE(execute(job("sleep", "5"), r).ok());
  EXPECT_EQ(r.state(), tpool::v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(r.output(), "slept 5 ms");

  ASSERT_TRUE(execute(job("hash", "1:abc"), r).ok());
  EXPECT_EQ(r.output(), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");

  ASSERT_TRUE(execute(job("fanout", "3 echo hi"), r).ok());
  EXPECT_EQ(r.state(), tpool::v1::JOB_STATE_SUCCEEDED) << r.message();
  EXPECT_EQ(r.output().substr(0, 8), "hi\nhi\nhi");

  // A handler failure is a result, not an RPC error.
  ASSERT_TRUE(execute(job("fail", "boom"), r).ok());
  EXPECT_EQ(r.state(), tpool::v1::JOB_STATE_FAILED);
  EXPECT_EQ(r.message(), "fail: boom");

  ASSERT_TRUE(execute(job("fail_throw", "bang"), r).ok());
  EXPECT_EQ(r.state(), tpool::v1::JOB_STATE_FAILED);
  EXPECT_NE(r.message().find("fail_throw: bang"), std::string::npos) << r.message();
}

TEST_F(Rpc, ExecuteRejectsBadRequestsWithTheRightStatus) {
  JobResult r;
  grpc::Status s = execute(job("", "x"), r);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("handler"), std::string::npos);

  s = execute(job("no_such_handler", "x"), r);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_NE(s.error_message().find("no_such_handler"), std::string::npos);

  auto bad_lane = job("echo", "x");
  bad_lane.set_lane(static_cast<tpool::v1::Lane>(7));
  s = execute(bad_lane, r);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("lane 7"), std::string::npos);

  s = execute(job("echo", std::string(5000, 'x')), r);  // over max_payload_bytes = 4096
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("4096"), std::string::npos);

  s = execute(job("echo", std::string(100000, 'x')), r);  // over max_message_bytes = 65536
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);

  // Still serving.
  ASSERT_TRUE(execute(job("echo", "ok"), r).ok());
  EXPECT_EQ(r.output(), "ok");
}

TEST_F(Rpc, BytesThatAreNotAProtobufAreRejectedAndTheDaemonKeepsServing) {
  grpc::GenericStub generic(d().channel());
  // 0x0a (field 1, length-delimited) claiming 100 bytes that are not there.
  const char garbage[] = {'\x0a', '\x64', 'x'};
  grpc::Slice slice(garbage, sizeof garbage);
  grpc::ByteBuffer request(&slice, 1);
  grpc::ByteBuffer response;
  grpc::ClientContext ctx;
  std::promise<grpc::Status> done;
  generic.UnaryCall(&ctx, "/tpool.v1.JobService/Execute", grpc::StubOptions(), &request, &response,
                    [&done](grpc::Status s) { done.set_value(s); });
  grpc::Status s = done.get_future().get();
  // gRPC alone answers UNIMPLEMENTED with an empty message; tpoold says what
  // was wrong (issue 13, docs/api.md).
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_NE(s.error_message().find("could not be parsed as tpool.v1.JobRequest"), std::string::npos)
      << s.error_message();
  JobResult r;
  ASSERT_TRUE(execute(job("echo", "still here"), r).ok());
  EXPECT_EQ(r.output(), "still here");
}

TEST_F(Rpc, InvalidUtf8InAStringFieldIsRefusedWithoutALogLinePerRequest) {
  grpc::GenericStub generic(d().channel());
  // JobRequest.handler (field 1, a string) holding 0xff 0xfe: not UTF-8.
  const char bad[] = {'\x0a', '\x02', '\xff', '\xfe'};
  for (int i = 0; i < 3; ++i) {
    grpc::Slice slice(bad, sizeof bad);
    grpc::ByteBuffer request(&slice, 1);
    grpc::ByteBuffer response;
    grpc::ClientContext ctx;
    std::promise<grpc::Status> done;
    generic.UnaryCall(&ctx, "/tpool.v1.JobService/Execute", grpc::StubOptions(), &request,
                      &response, [&done](grpc::Status s) { done.set_value(s); });
    grpc::Status s = done.get_future().get();
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  }
  // protobuf's own stderr line ("[libprotobuf ERROR ...] ... invalid UTF-8")
  // is written before the parse returns, so before the reply: none here.
  EXPECT_EQ(d().log().find("libprotobuf"), std::string::npos) << d().log();
  JobResult r;
  ASSERT_TRUE(execute(job("echo", "still here"), r).ok());
}

TEST_F(Rpc, JobTimeoutEndsASleepJobTimedOutWithStatusOk) {
  auto before = handler_stats("sleep");
  auto req = job("sleep", "60000");
  req.set_timeout_ms(100);
  JobResult r;
  auto start = std::chrono::steady_clock::now();
  grpc::Status s = execute(req, r);
  // A final state is a JobResult, not an RPC error (docs/api.md).
  ASSERT_TRUE(s.ok()) << s.error_code() << " " << s.error_message();
  EXPECT_EQ(r.state(), tpool::v1::JOB_STATE_TIMED_OUT);
  EXPECT_NE(r.message(), "");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
  EXPECT_TRUE(
      eventually("sleep", [&](const auto& h) { return h.timed_out() > before.timed_out(); }));
}

TEST_F(Rpc, CallDeadlineCancelsTheJob) {
  auto before = handler_stats("sleep");
  JobResult r;
  grpc::Status s = execute(job("sleep", "60000"), r, std::chrono::milliseconds(200));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  // The server side ends the job (not after 60 s).
  EXPECT_TRUE(eventually("sleep", [&](const auto& h) {
    return h.timed_out() + h.cancelled() > before.timed_out() + before.cancelled();
  }));
}

TEST_F(Rpc, ClientCancelCancelsTheJob) {
  auto before = handler_stats("sleep");
  grpc::ClientContext ctx;
  JobResult r;
  std::promise<grpc::Status> done;
  const tpool::v1::JobRequest req = job("sleep", "60000");  // outlives the call (done below)
  d().jobs().async()->Execute(&ctx, &req, &r, [&done](grpc::Status s) { done.set_value(s); });
  // Wait until the job is accepted before cancelling the call.
  ASSERT_TRUE(
      eventually("sleep", [&](const auto& h) { return h.submitted() > before.submitted(); }));
  ctx.TryCancel();
  EXPECT_EQ(done.get_future().get().error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_TRUE(
      eventually("sleep", [&](const auto& h) { return h.cancelled() > before.cancelled(); }));
}

TEST_F(Rpc, SubmitWaitGetCancel) {
  grpc::ClientContext c1;
  tpool::v1::JobRef ref;
  ASSERT_TRUE(d().jobs().Submit(&c1, job("echo", "later"), &ref).ok());
  grpc::ClientContext c2;
  tpool::v1::WaitRequest w;
  w.set_job_id(ref.job_id());
  JobResult r;
  ASSERT_TRUE(d().jobs().Wait(&c2, w, &r).ok());
  EXPECT_EQ(r.state(), tpool::v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(r.output(), "later");
  grpc::ClientContext c3;
  tpool::v1::JobStatus st;
  ASSERT_TRUE(d().jobs().Get(&c3, ref, &st).ok());
  EXPECT_EQ(st.state(), tpool::v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(st.handler(), "echo");
  EXPECT_EQ(st.progress(), 1.0);

  // A running job: Get says RUNNING, Cancel stops it, Wait reports CANCELLED.
  grpc::ClientContext c4;
  auto long_job = job("sleep", "60000");
  (*long_job.mutable_labels())["team"] = "infra";
  ASSERT_TRUE(d().jobs().Submit(&c4, long_job, &ref).ok());
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  do {
    grpc::ClientContext c;
    ASSERT_TRUE(d().jobs().Get(&c, ref, &st).ok());
  } while (st.state() != tpool::v1::JOB_STATE_RUNNING &&
           std::chrono::steady_clock::now() < deadline);
  EXPECT_EQ(st.state(), tpool::v1::JOB_STATE_RUNNING);
  EXPECT_EQ(st.labels().at("team"), "infra");
  EXPECT_EQ(st.lane(), tpool::v1::LANE_BLOCKING);
  grpc::ClientContext c5;
  tpool::v1::CancelReply cr;
  ASSERT_TRUE(d().jobs().Cancel(&c5, ref, &cr).ok());
  grpc::ClientContext c6;
  w.set_job_id(ref.job_id());
  grpc::Status s = d().jobs().Wait(&c6, w, &r);
  // Wait on a cancelled job returns its final JobResult (state CANCELLED),
  // not a CANCELLED status, which would read as "the Wait was cancelled".
  ASSERT_TRUE(s.ok()) << s.error_code() << " " << s.error_message();
  EXPECT_EQ(r.state(), tpool::v1::JOB_STATE_CANCELLED);
  EXPECT_EQ(r.job_id(), ref.job_id());

  // Unknown ids.
  tpool::v1::JobRef unknown;
  unknown.set_job_id(1u << 30);
  grpc::ClientContext c7, c8, c9;
  EXPECT_EQ(d().jobs().Get(&c7, unknown, &st).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(d().jobs().Cancel(&c8, unknown, &cr).error_code(), grpc::StatusCode::NOT_FOUND);
  w.set_job_id(unknown.job_id());
  EXPECT_EQ(d().jobs().Wait(&c9, w, &r).error_code(), grpc::StatusCode::NOT_FOUND);
}

// Issue 17, items 4 and 5, through the real daemon and the example "flaky"
// handler: a retried job, a permanently failing one, a delayed one.
TEST_F(Rpc, RetriesAndDelayedJobs) {
  // Fails twice (TPOOL_STATUS_RETRY), then succeeds on its third attempt.
  auto flaky = job("flaky", "2");
  flaky.set_max_attempts(3);
  JobResult r;
  ASSERT_TRUE(execute(flaky, r).ok());
  EXPECT_EQ(r.state(), tpool::v1::JOB_STATE_SUCCEEDED) << r.message();
  EXPECT_EQ(r.output(), "ok on attempt 3");
  EXPECT_EQ(r.attempts(), 3u);

  // Attempts run out: FAILED, every attempt's message kept, Get shows them.
  grpc::ClientContext c1;
  tpool::v1::JobRef ref;
  flaky.set_payload("5");
  ASSERT_TRUE(d().jobs().Submit(&c1, flaky, &ref).ok());
  grpc::ClientContext c2;
  tpool::v1::WaitRequest w;
  w.set_job_id(ref.job_id());
  ASSERT_TRUE(d().jobs().Wait(&c2, w, &r).ok());
  EXPECT_EQ(r.state(), tpool::v1::JOB_STATE_FAILED);
  EXPECT_EQ(r.message(), "flaky: attempt 3 of the first 5 fails (attempt 3 of 3)");
  grpc::ClientContext c3;
  tpool::v1::JobStatus st;
  ASSERT_TRUE(d().jobs().Get(&c3, ref, &st).ok());
  EXPECT_EQ(st.attempts(), 3u);
  ASSERT_EQ(st.attempt_messages_size(), 3);
  EXPECT_EQ(st.attempt_messages(0), "attempt 1: flaky: attempt 1 of the first 5 fails");

  // A permanent failure (INVALID_INPUT) is not retried.
  flaky.set_payload("x");
  ASSERT_TRUE(execute(flaky, r).ok());
  EXPECT_EQ(r.state(), tpool::v1::JOB_STATE_FAILED);
  EXPECT_EQ(r.attempts(), 1u);
  EXPECT_NE(r.message().find("not retried"), std::string::npos) << r.message();

  // A delayed job is SCHEDULED until its time; Cancel ends it there.
  auto later = job("echo", "in an hour");
  later.set_delay_ms(3600 * 1000);
  grpc::ClientContext c4;
  ASSERT_TRUE(d().jobs().Submit(&c4, later, &ref).ok());
  grpc::ClientContext c5;
  ASSERT_TRUE(d().jobs().Get(&c5, ref, &st).ok());
  EXPECT_EQ(st.state(), tpool::v1::JOB_STATE_SCHEDULED);
  grpc::ClientContext c6;
  tpool::v1::StatsReply stats;
  ASSERT_TRUE(d().admin().Stats(&c6, {}, &stats).ok());
  EXPECT_EQ(stats.daemon().jobs_scheduled(), 1u);
  EXPECT_GE(stats.daemon().jobs_retried(), 4u);  // 2 + 2 above
  grpc::ClientContext c7;
  tpool::v1::CancelReply cr;
  ASSERT_TRUE(d().jobs().Cancel(&c7, ref, &cr).ok());
  EXPECT_EQ(cr.state(), tpool::v1::JOB_STATE_CANCELLED);

  // A delay already past runs at once; both delay fields: INVALID_ARGUMENT.
  auto past = job("echo", "now");
  past.set_not_before_unix_ms(1000);
  ASSERT_TRUE(execute(past, r).ok());
  EXPECT_EQ(r.output(), "now");
  past.set_delay_ms(10);
  EXPECT_EQ(execute(past, r).error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  // durable without a store: FAILED_PRECONDITION saying how to turn it on
  // (the store variant has one: the job runs).
  auto durable = job("echo", "keep me");
  durable.set_durable(true);
  grpc::Status s = execute(durable, r);
  if (store_variant()) {
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(r.output(), "keep me");
  } else {
    EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_NE(s.error_message().find("[store] path"), std::string::npos) << s.error_message();
  }
}

TEST_F(Rpc, ListJobsFindsTheDeadLettersAndRetryRunsOneAgain) {
  // A failed job with a label, among others; ListJobs by state and label.
  auto bad = job("fail", "x");
  (*bad.mutable_labels())["batch"] = "dead-letter-test";
  grpc::ClientContext c1;
  tpool::v1::JobRef ref;
  ASSERT_TRUE(d().jobs().Submit(&c1, bad, &ref).ok());
  grpc::ClientContext c2;
  tpool::v1::WaitRequest w;
  w.set_job_id(ref.job_id());
  JobResult r;
  ASSERT_TRUE(d().jobs().Wait(&c2, w, &r).ok());
  ASSERT_EQ(r.state(), tpool::v1::JOB_STATE_FAILED);

  tpool::v1::ListJobsRequest lr;
  lr.add_states(tpool::v1::JOB_STATE_FAILED);
  lr.add_states(tpool::v1::JOB_STATE_TIMED_OUT);
  lr.set_label_key("batch");
  lr.set_label_value("dead-letter-test");
  grpc::ClientContext c3;
  tpool::v1::ListJobsReply reply;
  ASSERT_TRUE(d().jobs().ListJobs(&c3, lr, &reply).ok());
  ASSERT_EQ(reply.jobs_size(), 1);
  EXPECT_EQ(reply.jobs(0).job_id(), ref.job_id());
  EXPECT_EQ(reply.jobs(0).state(), tpool::v1::JOB_STATE_FAILED);
  EXPECT_EQ(reply.jobs(0).handler(), "fail");
  EXPECT_EQ(reply.next_page_token(), "");

  // Retry: a new job, same handler and payload; it fails the same way.
  grpc::ClientContext c4;
  tpool::v1::JobRef again;
  ASSERT_TRUE(d().jobs().Retry(&c4, ref, &again).ok());
  EXPECT_NE(again.job_id(), ref.job_id());
  grpc::ClientContext c5;
  w.set_job_id(again.job_id());
  ASSERT_TRUE(d().jobs().Wait(&c5, w, &r).ok());
  EXPECT_EQ(r.state(), tpool::v1::JOB_STATE_FAILED);
  grpc::ClientContext c6;
  ASSERT_TRUE(d().jobs().ListJobs(&c6, lr, &reply).ok());
  EXPECT_EQ(reply.jobs_size(), 2);  // the retry carries the label

  // Paging: one job a page, the token leads to the next.
  lr.set_page_size(1);
  grpc::ClientContext c7;
  ASSERT_TRUE(d().jobs().ListJobs(&c7, lr, &reply).ok());
  ASSERT_EQ(reply.jobs_size(), 1);
  ASSERT_FALSE(reply.next_page_token().empty());
  lr.set_page_token(reply.next_page_token());
  grpc::ClientContext c8;
  ASSERT_TRUE(d().jobs().ListJobs(&c8, lr, &reply).ok());
  ASSERT_EQ(reply.jobs_size(), 1);
  EXPECT_EQ(reply.jobs(0).job_id(), again.job_id());

  // Bad input: INVALID_ARGUMENT with a sentence; a succeeded job cannot be
  // retried (FAILED_PRECONDITION).
  lr.set_page_token("not-a-token");
  grpc::ClientContext c9;
  grpc::Status s = d().jobs().ListJobs(&c9, lr, &reply);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("next_page_token"), std::string::npos) << s.error_message();
  lr.set_page_token("");
  lr.set_page_size(5000);
  grpc::ClientContext c10;
  EXPECT_EQ(d().jobs().ListJobs(&c10, lr, &reply).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  grpc::ClientContext c11;
  ASSERT_TRUE(d().jobs().Submit(&c11, job("echo", "fine"), &ref).ok());
  grpc::ClientContext c12;
  w.set_job_id(ref.job_id());
  ASSERT_TRUE(d().jobs().Wait(&c12, w, &r).ok());
  grpc::ClientContext c13;
  s = d().jobs().Retry(&c13, ref, &again);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(s.error_message().find("submit a new job"), std::string::npos) << s.error_message();
}

TEST_F(Rpc, SubmitBatchAnswersEachItem) {
  tpool::v1::JobBatch batch;
  *batch.add_jobs() = job("echo", "one", 1);
  *batch.add_jobs() = job("", "no handler", 2);
  *batch.add_jobs() = job("nope", "unknown", 3);
  auto bad_lane = job("echo", "lane", 4);
  bad_lane.set_lane(static_cast<tpool::v1::Lane>(9));
  *batch.add_jobs() = bad_lane;
  *batch.add_jobs() = job("echo", "five", 5);
  grpc::ClientContext ctx;
  tpool::v1::JobRefs refs;
  ASSERT_TRUE(d().jobs().SubmitBatch(&ctx, batch, &refs).ok());
  ASSERT_EQ(refs.items_size(), 5);
  std::vector<int> codes;
  for (const auto& i : refs.items()) codes.push_back(i.code());
  EXPECT_EQ(codes,
            (std::vector<int>{0, grpc::StatusCode::INVALID_ARGUMENT, grpc::StatusCode::NOT_FOUND,
                              grpc::StatusCode::INVALID_ARGUMENT, 0}));
  for (int i = 0; i < 5; ++i) EXPECT_EQ(refs.items(i).tag(), static_cast<std::uint64_t>(i + 1));
  for (int i : {0, 4}) {
    grpc::ClientContext c;
    tpool::v1::WaitRequest w;
    w.set_job_id(refs.items(i).job_id());
    JobResult r;
    ASSERT_TRUE(d().jobs().Wait(&c, w, &r).ok());
    EXPECT_EQ(r.output(), i == 0 ? "one" : "five");
  }
}

// WaitBatch: results in request order, whatever finished first; an unknown
// id is an item, not a failed call; the call waits for running jobs (its
// deadline ends it, the job goes on); a repeated id gets its own result.
TEST_F(Rpc, WaitBatchAnswersEachIdInRequestOrder) {
  JobResult done;
  grpc::ClientContext c0;
  tpool::v1::JobRef echo_ref, sleep_ref;
  ASSERT_TRUE(d().jobs().Submit(&c0, job("echo", "ended"), &echo_ref).ok());
  {
    grpc::ClientContext c;
    tpool::v1::WaitRequest w;
    w.set_job_id(echo_ref.job_id());
    ASSERT_TRUE(d().jobs().Wait(&c, w, &done).ok());  // final before the WaitBatch
  }
  grpc::ClientContext c1;
  ASSERT_TRUE(d().jobs().Submit(&c1, job("sleep", "60000"), &sleep_ref).ok());
  tpool::v1::WaitBatchRequest req;
  for (std::uint64_t id :
       {sleep_ref.job_id(), echo_ref.job_id(), std::uint64_t{1} << 40, echo_ref.job_id()}) {
    req.add_job_ids(id);
  }
  // The sleep job runs for a minute: a short deadline ends the call, not the job.
  {
    grpc::ClientContext c;
    c.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(300));
    tpool::v1::ResultBatch rb;
    EXPECT_EQ(d().jobs().WaitBatch(&c, req, &rb).error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
    grpc::ClientContext g;
    tpool::v1::JobStatus st;
    ASSERT_TRUE(d().jobs().Get(&g, sleep_ref, &st).ok());
    EXPECT_FALSE(st.state() == tpool::v1::JOB_STATE_CANCELLED ||
                 st.state() == tpool::v1::JOB_STATE_TIMED_OUT)
        << st.state();
  }
  // Now one that waits until the sleep job is cancelled.
  auto pending = std::async(std::launch::async, [&] {
    grpc::ClientContext c;
    c.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    tpool::v1::ResultBatch rb;
    grpc::Status s = d().jobs().WaitBatch(&c, req, &rb);
    return std::make_pair(s, rb);
  });
  grpc::ClientContext c2;
  tpool::v1::CancelReply cr;
  ASSERT_TRUE(d().jobs().Cancel(&c2, sleep_ref, &cr).ok());
  auto [s, rb] = pending.get();
  ASSERT_TRUE(s.ok()) << s.error_code() << " " << s.error_message();
  ASSERT_EQ(rb.results_size(), 4);
  EXPECT_EQ(rb.results(0).job_id(), sleep_ref.job_id());
  EXPECT_EQ(rb.results(0).state(), tpool::v1::JOB_STATE_CANCELLED);
  EXPECT_EQ(rb.results(0).code(), 0);
  for (int i : {1, 3}) {
    EXPECT_EQ(rb.results(i).job_id(), echo_ref.job_id());
    EXPECT_EQ(rb.results(i).state(), tpool::v1::JOB_STATE_SUCCEEDED);
    EXPECT_EQ(rb.results(i).output(), "ended");
    EXPECT_EQ(rb.results(i).code(), 0);
  }
  EXPECT_EQ(rb.results(2).job_id(), std::uint64_t{1} << 40);
  EXPECT_EQ(rb.results(2).code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_NE(rb.results(2).message().find("1099511627776"), std::string::npos)
      << rb.results(2).message();
  EXPECT_EQ(rb.results(2).state(), tpool::v1::JOB_STATE_UNSPECIFIED);
  // No ids: an empty answer.
  grpc::ClientContext c3;
  tpool::v1::ResultBatch empty;
  ASSERT_TRUE(d().jobs().WaitBatch(&c3, tpool::v1::WaitBatchRequest(), &empty).ok());
  EXPECT_EQ(empty.results_size(), 0);
}

TEST_F(Rpc, WaitBatchRefusesTooManyIdsAnotherReplicaAndCutsAnOversizedReply) {
  tpool::v1::WaitBatchRequest many;
  for (int i = 0; i < 10001; ++i) many.add_job_ids(1);
  grpc::ClientContext c1;
  tpool::v1::ResultBatch rb;
  grpc::Status s = d().jobs().WaitBatch(&c1, many, &rb);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("10001 jobs, more than the 10000"), std::string::npos)
      << s.error_message();
  EXPECT_NE(s.error_message().find("split the ids"), std::string::npos) << s.error_message();

  tpool::v1::WaitBatchRequest other;
  other.add_job_ids(1);
  other.set_replica("somewhere-else");
  grpc::ClientContext c2;
  s = d().jobs().WaitBatch(&c2, other, &rb);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(s.error_message().find("belongs to replica somewhere-else"), std::string::npos)
      << s.error_message();

  // One 4,000-byte result asked for 20 times: a 64 KiB reply holds about 16;
  // the rest say to Wait for the job alone, and the call succeeds.
  grpc::ClientContext c3;
  tpool::v1::JobRef ref;
  ASSERT_TRUE(d().jobs().Submit(&c3, job("echo", std::string(4000, 'x')), &ref).ok());
  tpool::v1::WaitBatchRequest twenty;
  for (int i = 0; i < 20; ++i) twenty.add_job_ids(ref.job_id());
  grpc::ClientContext c4;
  s = d().jobs().WaitBatch(&c4, twenty, &rb);
  ASSERT_TRUE(s.ok()) << s.error_code() << " " << s.error_message();
  ASSERT_EQ(rb.results_size(), 20);
  EXPECT_LE(rb.ByteSizeLong(), 65536u);
  int whole = 0;
  for (int i = 0; i < rb.results_size(); ++i) {
    const JobResult& r = rb.results(i);
    EXPECT_EQ(r.job_id(), ref.job_id());
    if (r.code() == 0) {
      EXPECT_EQ(r.output().size(), 4000u);
      EXPECT_EQ(whole, i) << "a cut item before a whole one";
      ++whole;
    } else {
      EXPECT_EQ(r.code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
      EXPECT_TRUE(r.output().empty());
      EXPECT_NE(r.message().find("does not fit in this reply"), std::string::npos) << r.message();
      EXPECT_NE(r.message().find("Wait for it alone"), std::string::npos) << r.message();
    }
  }
  EXPECT_GT(whole, 10);
  EXPECT_LT(whole, 20);
}

TEST_F(Rpc, IdempotencyKeyRunsOnce) {
  auto before = handler_stats("hash");
  auto req = job("hash", "1000:idem");
  req.set_idempotency_key("key-1");
  tpool::v1::JobRef a, b;
  grpc::ClientContext c1, c2;
  ASSERT_TRUE(d().jobs().Submit(&c1, req, &a).ok());
  ASSERT_TRUE(d().jobs().Submit(&c2, req, &b).ok());
  EXPECT_EQ(a.job_id(), b.job_id());
  JobResult r1, r2;
  ASSERT_TRUE(execute(req, r1).ok());  // Execute with the same key: the first job's result
  EXPECT_EQ(r1.job_id(), a.job_id());
  EXPECT_EQ(r1.output().size(), 64u);
  EXPECT_EQ(handler_stats("hash").submitted(), before.submitted() + 1);

  auto other = req;
  other.set_payload("1000:different");
  grpc::Status s = execute(other, r2);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(s.error_message().find("key-1"), std::string::npos);
}

TEST_F(Rpc, StatsReloadAndHealth) {
  grpc::ClientContext c1;
  tpool::v1::StatsReply stats;
  ASSERT_TRUE(d().admin().Stats(&c1, {}, &stats).ok());
  EXPECT_EQ(stats.daemon().state(), "serving");
  EXPECT_GT(stats.pool().workers(), 0u);
  EXPECT_EQ(stats.pool().lanes_size(), 2);
  EXPECT_EQ(stats.daemon().version(), "0.1.0");

  grpc::ClientContext c2;
  tpool::v1::ReloadPluginsReply reload;
  ASSERT_TRUE(d().admin().ReloadPlugins(&c2, {}, &reload).ok());
  EXPECT_EQ(reload.handlers_size(), 7);  // the examples' handlers (docs/plugins.md)
  JobResult r;
  ASSERT_TRUE(execute(job("echo", "after reload"), r).ok());

  // grpc.health.v1.Health/Check with an empty request: status SERVING (1).
  grpc::GenericStub generic(d().channel());
  grpc::Slice empty(std::string{});
  grpc::ByteBuffer request(&empty, 1), response;
  grpc::ClientContext c3;
  std::promise<grpc::Status> done;
  generic.UnaryCall(&c3, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request, &response,
                    [&done](grpc::Status s) { done.set_value(s); });
  ASSERT_TRUE(done.get_future().get().ok());
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(response.Dump(&slices).ok());
  std::string bytes;
  for (auto& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  EXPECT_EQ(bytes, std::string("\x08\x01", 2));
}

// Server reflection lists the services (grpc.reflection.v1alpha, as grpcurl
// uses it), through a raw bidi call: ServerReflectionRequest{list_services: ""}.
class ReflectionCall final : public grpc::ClientBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  explicit ReflectionCall(grpc::GenericStub& stub) {
    stub.PrepareBidiStreamingCall(&ctx_,
                                  "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
                                  grpc::StubOptions(), this);
    const char req[] = {'\x3a', '\x00'};  // field 7 (list_services), empty string
    grpc::Slice slice(req, sizeof req);
    out_ = grpc::ByteBuffer(&slice, 1);
    StartWrite(&out_);
    StartRead(&in_);
    StartCall();
  }
  void OnWriteDone(bool) override { StartWritesDone(); }
  void OnReadDone(bool ok) override {
    if (ok) {
      std::vector<grpc::Slice> slices;
      (void)in_.Dump(&slices);
      for (auto& s : slices) bytes_.append(reinterpret_cast<const char*>(s.begin()), s.size());
    }
  }
  void OnDone(const grpc::Status& s) override { done_.set_value(s); }
  std::pair<grpc::Status, std::string> result() {
    grpc::Status s = done_.get_future().get();
    return {s, bytes_};
  }

 private:
  grpc::ClientContext ctx_;
  grpc::ByteBuffer out_, in_;
  std::string bytes_;
  std::promise<grpc::Status> done_;
};

TEST_F(Rpc, ReflectionListsTheServices) {
  grpc::GenericStub generic(d().channel());
  ReflectionCall call(generic);
  auto [status, bytes] = call.result();
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_NE(bytes.find("tpool.v1.JobService"), std::string::npos);
  // AdminService is on the admin listener, not the job port (issue 16).
  EXPECT_EQ(bytes.find("tpool.v1.AdminService"), std::string::npos);
  EXPECT_NE(bytes.find("grpc.health.v1.Health"), std::string::npos);
}

// A daemon with room for two jobs: the third is RESOURCE_EXHAUSTED with a
// retry hint.
TEST(RpcLimits, InFlightLimitIsResourceExhaustedWithARetryHint) {
  DaemonProcess d("[server]\nmax_inflight_jobs = 2\n[metrics]\nenabled = false\n");
  ASSERT_TRUE(d.started()) << d.log();
  tpool::v1::JobRef a, b, c;
  grpc::ClientContext c1, c2, c3;
  ASSERT_TRUE(d.jobs().Submit(&c1, job("sleep", "60000"), &a).ok());
  ASSERT_TRUE(d.jobs().Submit(&c2, job("sleep", "60000"), &b).ok());
  grpc::Status s = d.jobs().Submit(&c3, job("echo", "x"), &c);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(s.error_message().find("max_inflight_jobs"), std::string::npos);
  auto trailer = c3.GetServerTrailingMetadata().find("retry-after-ms");
  ASSERT_NE(trailer, c3.GetServerTrailingMetadata().end());
  EXPECT_EQ(std::string(trailer->second.data(), trailer->second.size()), "50");
  for (auto* ref : {&a, &b}) {
    grpc::ClientContext cc;
    tpool::v1::CancelReply cr;
    ASSERT_TRUE(d.jobs().Cancel(&cc, *ref, &cr).ok());
  }
  EXPECT_EQ(d.stop(), std::optional<int>(0)) << d.log();
}

}  // namespace
}  // namespace tpool::testing
