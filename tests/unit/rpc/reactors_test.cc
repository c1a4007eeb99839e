// Each JobService and AdminService reactor against an in-process server: what
// a client sends, what it gets back, and what the engine then holds.
#include <grpcpp/generic/generic_stub.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <future>
#include <set>

#include "in_process_server.h"
#include "store_test_support.h"
#include "tpool/store/journal.h"

namespace tpool::rpc::testing {
namespace {

class RpcReactors : public ::testing::Test {
 protected:
  InProcessServer srv_;

  tpool::v1::JobRef submit(const tpool::v1::JobRequest& req) {
    grpc::ClientContext ctx;
    bound(ctx);
    tpool::v1::JobRef ref;
    grpc::Status s = srv_.stub().Submit(&ctx, req, &ref);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return ref;
  }
  tpool::v1::JobResult wait(const tpool::v1::JobRef& ref) {
    grpc::ClientContext ctx;
    bound(ctx);
    tpool::v1::WaitRequest req;
    req.set_job_id(ref.job_id());
    req.set_replica(ref.replica());
    tpool::v1::JobResult res;
    grpc::Status s = srv_.stub().Wait(&ctx, req, &res);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return res;
  }
};

TEST_F(RpcReactors, ExecuteRunsTheJobAndAnswersWithItsResult) {
  ASSERT_TRUE(srv_.ok());
  grpc::ClientContext ctx;
  bound(ctx);
  tpool::v1::JobResult res;
  ASSERT_TRUE(srv_.stub().Execute(&ctx, job("echo", "hello", 42), &res).ok());
  EXPECT_EQ(res.state(), tpool::v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(res.output(), "hello");
  EXPECT_EQ(res.tag(), 42u);
  EXPECT_NE(res.job_id(), 0u);
}

TEST_F(RpcReactors, ExecuteWithAKeyReturnsTheFirstJobsResult) {
  ASSERT_TRUE(srv_.ok());
  auto req = job("echo", "once");
  req.set_idempotency_key("same");
  std::uint64_t first_id = 0;
  for (int i = 0; i < 2; ++i) {
    grpc::ClientContext ctx;
    bound(ctx);
    tpool::v1::JobResult res;
    ASSERT_TRUE(srv_.stub().Execute(&ctx, req, &res).ok());
    EXPECT_EQ(res.output(), "once");
    if (i == 0) first_id = res.job_id();
    EXPECT_EQ(res.job_id(), first_id);
  }
  EXPECT_EQ(srv_.handler_counts("echo").submitted, 1u);
}

TEST_F(RpcReactors, SubmitThenWaitAndGet) {
  ASSERT_TRUE(srv_.ok());
  auto req = job("echo", "later", 7);
  (*req.mutable_labels())["team"] = "a";
  tpool::v1::JobRef ref = submit(req);
  EXPECT_EQ(ref.replica(), "replica-a");
  tpool::v1::JobResult res = wait(ref);
  EXPECT_EQ(res.state(), tpool::v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(res.output(), "later");
  grpc::ClientContext ctx;
  bound(ctx);
  tpool::v1::JobStatus st;
  ASSERT_TRUE(srv_.stub().Get(&ctx, ref, &st).ok());
  EXPECT_EQ(st.job_id(), ref.job_id());
  EXPECT_EQ(st.handler(), "echo");
  EXPECT_EQ(st.state(), tpool::v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(st.progress(), 1.0);
  EXPECT_EQ(st.labels().at("team"), "a");
}

TEST_F(RpcReactors, SubmitBatchAnswersEveryItemInOrder) {
  ASSERT_TRUE(srv_.ok());
  tpool::v1::JobBatch batch;
  *batch.add_jobs() = job("echo", "a", 1);
  *batch.add_jobs() = job("", "b", 2);         // no handler: answered in band
  *batch.add_jobs() = job("no_such", "c", 3);  // unknown handler: answered in band
  *batch.add_jobs() = job("echo", "d", 4);
  grpc::ClientContext ctx;
  bound(ctx);
  tpool::v1::JobRefs refs;
  ASSERT_TRUE(srv_.stub().SubmitBatch(&ctx, batch, &refs).ok());
  ASSERT_EQ(refs.items_size(), 4);
  EXPECT_EQ(refs.items(0).code(), 0);
  EXPECT_EQ(refs.items(1).code(), static_cast<int>(grpc::StatusCode::INVALID_ARGUMENT));
  EXPECT_NE(refs.items(1).message().find("names no handler"), std::string::npos);
  EXPECT_EQ(refs.items(2).code(), static_cast<int>(grpc::StatusCode::NOT_FOUND));
  EXPECT_EQ(refs.items(3).code(), 0);
  for (int i : {0, 3}) {
    tpool::v1::JobRef ref;
    ref.set_job_id(refs.items(i).job_id());
    ref.set_replica(refs.items(i).replica());
    EXPECT_EQ(refs.items(i).tag(), static_cast<std::uint64_t>(i + 1));
    EXPECT_EQ(wait(ref).output(), i == 0 ? "a" : "d");
  }
}

// SubmitBatch is a raw method (issue 19): a batch in the plain form is read
// in place; one with labels (or anything else the plain read leaves alone) is
// parsed by protobuf, and its jobs keep their labels; bytes that are not a
// JobBatch are refused, saying so.
TEST_F(RpcReactors, SubmitBatchReadsBothFormsAndRefusesBytesThatAreNotABatch) {
  ASSERT_TRUE(srv_.ok());
  tpool::v1::JobBatch batch;
  *batch.add_jobs() = job("echo", "plain", 1);
  *batch.add_jobs() = job("echo", "labelled", 2);
  (*batch.mutable_jobs(1)->mutable_labels())["team"] = "b";
  for (bool with_labels : {false, true}) {
    tpool::v1::JobBatch b = batch;
    if (!with_labels) b.mutable_jobs()->RemoveLast();
    grpc::ClientContext ctx;
    bound(ctx);
    tpool::v1::JobRefs refs;
    ASSERT_TRUE(srv_.stub().SubmitBatch(&ctx, b, &refs).ok());
    ASSERT_EQ(refs.items_size(), b.jobs_size());
    for (int i = 0; i < refs.items_size(); ++i) {
      ASSERT_EQ(refs.items(i).code(), 0) << refs.items(i).message();
      EXPECT_EQ(refs.items(i).tag(), static_cast<std::uint64_t>(i + 1));
      tpool::v1::JobRef ref;
      ref.set_job_id(refs.items(i).job_id());
      ref.set_replica(refs.items(i).replica());
      EXPECT_EQ(wait(ref).output(), i == 0 ? "plain" : "labelled");
      grpc::ClientContext gctx;
      bound(gctx);
      tpool::v1::JobStatus st;
      ASSERT_TRUE(srv_.stub().Get(&gctx, ref, &st).ok());
      EXPECT_EQ(st.labels_size(), i == 1 ? 1 : 0);
      if (i == 1) {
        EXPECT_EQ(st.labels().at("team"), "b");
      }
    }
  }
  grpc::GenericStub generic(srv_.channel());
  const char garbage[] = {'\x0a', '\x64', 'x'};  // field 1 claiming 100 bytes that are not there
  grpc::Slice slice(garbage, sizeof garbage);
  grpc::ByteBuffer request(&slice, 1);
  grpc::ByteBuffer response;
  grpc::ClientContext ctx;
  bound(ctx);
  std::promise<grpc::Status> done;
  generic.UnaryCall(&ctx, "/tpool.v1.JobService/SubmitBatch", grpc::StubOptions(), &request,
                    &response, [&done](grpc::Status st) { done.set_value(st); });
  const grpc::Status st = done.get_future().get();
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
  EXPECT_NE(st.error_message().find("could not be parsed as tpool.v1.JobBatch"), std::string::npos)
      << st.error_message();
}

TEST_F(RpcReactors, CancelEndsAQueuedOrRunningJobAndWaitSeesIt) {
  ASSERT_TRUE(srv_.ok());
  tpool::v1::JobRef ref = submit(job("sleep", "60000"));
  grpc::ClientContext ctx;
  bound(ctx);
  tpool::v1::CancelReply rep;
  ASSERT_TRUE(srv_.stub().Cancel(&ctx, ref, &rep).ok());
  tpool::v1::JobResult res = wait(ref);
  EXPECT_EQ(res.state(), tpool::v1::JOB_STATE_CANCELLED);
}

TEST_F(RpcReactors, ListHandlersListsThePlugins) {
  ASSERT_TRUE(srv_.ok());
  grpc::ClientContext ctx;
  bound(ctx);
  tpool::v1::ListHandlersReply rep;
  ASSERT_TRUE(srv_.stub().ListHandlers(&ctx, {}, &rep).ok());
  std::set<std::string> names;
  for (const auto& h : rep.handlers()) names.insert(h.name());
  for (const char* n : {"echo", "sleep", "fail"}) EXPECT_TRUE(names.count(n)) << n;
}

TEST_F(RpcReactors, AdminStatsReportsTheDaemonAndThePool) {
  ASSERT_TRUE(srv_.ok());
  {
    grpc::ClientContext ctx;
    tpool::v1::JobResult res;
    ASSERT_TRUE(srv_.stub().Execute(&ctx, job("echo", "x"), &res).ok());
  }
  grpc::ClientContext ctx;
  bound(ctx);
  tpool::v1::StatsReply rep;
  ASSERT_TRUE(srv_.admin().Stats(&ctx, {}, &rep).ok());
  EXPECT_EQ(rep.daemon().state(), "serving");
  EXPECT_EQ(rep.daemon().version(), "test-version");
  EXPECT_EQ(rep.daemon().plugin_reloads(), 7u);
  EXPECT_EQ(rep.daemon().uptime_ms(), 1234u);
  EXPECT_GE(rep.pool().submitted(), 1u);
  EXPECT_EQ(rep.pool().workers(), 4u);
  bool echo_seen = false;
  for (const auto& h : rep.daemon().handlers()) {
    if (h.handler() == "echo") echo_seen = h.succeeded() == 1;
  }
  EXPECT_TRUE(echo_seen);
}

TEST_F(RpcReactors, AdminDrainAnswersWhenTheDrainEnds) {
  ASSERT_TRUE(srv_.ok());
  grpc::ClientContext ctx;
  bound(ctx);
  tpool::v1::DrainRequest req;
  req.set_timeout_ms(250);
  tpool::v1::DrainReply rep;
  ASSERT_TRUE(srv_.admin().Drain(&ctx, req, &rep).ok());
  EXPECT_TRUE(rep.drained());
  EXPECT_EQ(rep.finished(), 3u);
  EXPECT_EQ(rep.cancelled(), 1u);
  std::lock_guard lock(srv_.life().mu);
  EXPECT_EQ(srv_.life().shutdowns, 1);
  EXPECT_FALSE(srv_.life().last_cancel);
  EXPECT_EQ(srv_.life().last_timeout, std::chrono::milliseconds(250));
}

TEST_F(RpcReactors, AdminShutdownCancelAsksTheLifecycle) {
  ASSERT_TRUE(srv_.ok());
  grpc::ClientContext ctx;
  bound(ctx);
  tpool::v1::ShutdownRequest req;
  req.set_mode(tpool::v1::SHUTDOWN_MODE_CANCEL);
  tpool::v1::ShutdownReply rep;
  ASSERT_TRUE(srv_.admin().Shutdown(&ctx, req, &rep).ok());
  EXPECT_TRUE(rep.accepted());
  std::lock_guard lock(srv_.life().mu);
  EXPECT_EQ(srv_.life().shutdowns, 1);
  EXPECT_TRUE(srv_.life().last_cancel);
}

TEST_F(RpcReactors, AdminReloadAnswersWithTheHandlers) {
  ASSERT_TRUE(srv_.ok());
  grpc::ClientContext ctx;
  bound(ctx);
  tpool::v1::ReloadPluginsReply rep;
  ASSERT_TRUE(srv_.admin().ReloadPlugins(&ctx, {}, &rep).ok());
  EXPECT_EQ(rep.message(), "plugins reloaded; handlers: echo");
  EXPECT_GT(rep.handlers_size(), 0);
}

// A journal in a directory of its own (removed however the test ends) and
// an in-process server over it; req_ is a durable echo request.
class RpcDurable : public ::testing::Test {
 protected:
  void SetUp() override {
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    store::JournalOptions jo;
    jo.path = (dir_ / "jobs.db").string();
    auto opened = store::Journal::open(jo);
    ASSERT_TRUE(opened.ok()) << opened.status().message();
    journal_ = std::move(opened).value();
    ServerOptions o;
    o.journal = journal_.get();
    srv_ = std::make_unique<InProcessServer>(o);
    ASSERT_TRUE(srv_->ok());
    req_ = job("echo", "kept", 5);
    req_.set_durable(true);
  }
  void TearDown() override {
    srv_.reset();  // the server before its journal
    journal_.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  // Polls (bounded: 30 s) until the engine counts an echo job submitted
  // beyond `before`: the call under test was accepted.
  std::uint64_t submitted_after(std::uint64_t before) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (srv_->handler_counts("echo").submitted == before &&
           std::chrono::steady_clock::now() < end) {
      std::this_thread::yield();
    }
    return srv_->handler_counts("echo").submitted;
  }

  // The next commit fails (disk full, or another I/O error). Whatever is
  // queued is committed first (a job's end record is appended before its
  // result is answered), so the failure falls on the next accept alone.
  void fail_next_commit(bool full) {
    (void)journal_->flush();  // a previous refusal's flush reports it (J5)
    journal_->inject_commit_failures_for_testing(1, /*disk_full=*/full);
  }
  // A call answered with the store's refusal (D6): its status and sentence,
  // and a retry hint of one second for a full disk only.
  static void expect_refusal(const grpc::Status& s, const grpc::ClientContext& ctx, bool full) {
    EXPECT_TRUE(is(s, full ? grpc::StatusCode::RESOURCE_EXHAUSTED : grpc::StatusCode::UNAVAILABLE,
                   "the job store could not record the job, so it was not accepted"));
    const auto& trailers = ctx.GetServerTrailingMetadata();
    const auto hint = trailers.find("retry-after-ms");
    ASSERT_EQ(hint != trailers.end(), full);
    if (full) {
      EXPECT_EQ(std::string(hint->second.data(), hint->second.size()), "1000");
    }
  }

  const std::filesystem::path dir_ =
      std::filesystem::temp_directory_path() / ("tpool-rpc-durable-" + std::to_string(::getpid()));
  std::unique_ptr<store::Journal> journal_;
  std::unique_ptr<InProcessServer> srv_;
  tpool::v1::JobRequest req_;
};

// Execute of a durable job (issue 17, durable.cc D8): its accept is not
// waited for on the gRPC thread, and a commit that fails is still answered
// as the refusal it is, with the status and retry hint a waited-for submit
// gives (D6), not as a FAILED result.
TEST_F(RpcDurable, ExecuteAnswersWithTheResultOrWithTheStoresRefusal) {
  InProcessServer& srv = *srv_;
  const tpool::v1::JobRequest& req = req_;
  {
    grpc::ClientContext ctx;
    bound(ctx);
    tpool::v1::JobResult res;
    grpc::Status s = srv.stub().Execute(&ctx, req, &res);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(res.state(), tpool::v1::JOB_STATE_SUCCEEDED);
    EXPECT_EQ(res.output(), "kept");
    EXPECT_EQ(res.tag(), 5u);
    ASSERT_TRUE(journal_->flush().ok());
    EXPECT_TRUE(journal_->get(res.job_id()).has_value());  // on disk: it ran after its accept
  }
  {
    // Accepted before its commit: with the journal's writer held in an
    // earlier commit's callback (J4), the Execute's job is counted
    // submitted, and not run, while its accept waits; a gRPC thread that
    // waited for the commit would count it only after.
    store::testing::WriterGate gate;
    gate.hold(*journal_, 1);  // id 1: below every id the engine hands out
    const engine::HandlerSnapshot before = srv.handler_counts("echo");
    grpc::ClientContext ctx;
    bound(ctx);
    tpool::v1::JobResult res;
    std::promise<grpc::Status> answered;
    srv.stub().async()->Execute(&ctx, &req, &res,
                                [&answered](grpc::Status st) { answered.set_value(st); });
    EXPECT_EQ(submitted_after(before.submitted), before.submitted + 1)
        << "the Execute was not accepted while its commit was held";
    EXPECT_EQ(srv.handler_counts("echo").succeeded,
              before.succeeded);  // not run before its commit
    gate.open();
    const grpc::Status st = answered.get_future().get();
    ASSERT_TRUE(st.ok()) << st.error_message();
    EXPECT_EQ(res.state(), tpool::v1::JOB_STATE_SUCCEEDED);
  }
  const std::uint64_t ran = srv.handler_counts("echo").succeeded;
  for (const bool full : {true, false}) {
    fail_next_commit(full);
    grpc::ClientContext ctx;
    bound(ctx);
    tpool::v1::JobResult res;
    expect_refusal(srv.stub().Execute(&ctx, req, &res), ctx, full);
  }
  EXPECT_EQ(srv.handler_counts("echo").succeeded, ran);  // neither refused job ran
  EXPECT_TRUE(srv.wait_idle());
}

// Submit and SubmitBatch of durable jobs (durable.cc, D9): answered from
// the commit's callback, never before the accept is on disk, and with the
// store's refusal when the commit failed: the call's status for Submit, the
// item's code and message for SubmitBatch.
TEST_F(RpcDurable, SubmitAndSubmitBatchAnswerOnceCommittedOrWithTheStoresRefusal) {
  InProcessServer& srv = *srv_;
  const tpool::v1::JobRequest& req = req_;
  {
    grpc::ClientContext ctx;
    bound(ctx);
    tpool::v1::JobRef ref;
    ASSERT_TRUE(srv.stub().Submit(&ctx, req, &ref).ok());
    EXPECT_TRUE(journal_->get(ref.job_id()).has_value());  // on disk when answered, no flush
  }
  {
    grpc::ClientContext ctx;
    bound(ctx);
    tpool::v1::JobBatch batch;
    for (int i = 0; i < 3; ++i) *batch.add_jobs() = req;
    batch.add_jobs()->set_handler("no-such-handler");
    tpool::v1::JobRefs refs;
    ASSERT_TRUE(srv.stub().SubmitBatch(&ctx, batch, &refs).ok());
    ASSERT_EQ(refs.items_size(), 4);
    for (int i = 0; i < 3; ++i) {
      EXPECT_EQ(refs.items(i).code(), 0) << refs.items(i).message();
      EXPECT_TRUE(journal_->get(refs.items(i).job_id()).has_value());
    }
    EXPECT_EQ(refs.items(3).code(), static_cast<int>(grpc::StatusCode::NOT_FOUND));
  }
  {
    // With the journal's writer held in an earlier commit's callback (J4),
    // the Submit is accepted (counted) but not answered until its accept
    // commits.
    store::testing::WriterGate gate;
    gate.hold(*journal_, 1);  // id 1: below every id the engine hands out
    const engine::HandlerSnapshot before = srv.handler_counts("echo");
    grpc::ClientContext ctx;
    bound(ctx);
    tpool::v1::JobRef ref;
    std::promise<grpc::Status> answered;
    std::future<grpc::Status> answer = answered.get_future();
    srv.stub().async()->Submit(&ctx, &req, &ref,
                               [&answered](grpc::Status st) { answered.set_value(st); });
    EXPECT_EQ(submitted_after(before.submitted), before.submitted + 1);
    EXPECT_EQ(answer.wait_for(std::chrono::seconds(0)), std::future_status::timeout)
        << "the JobRef went out before the accept was committed";
    gate.open();
    const grpc::Status st = answer.get();
    ASSERT_TRUE(st.ok()) << st.error_message();
    EXPECT_TRUE(journal_->get(ref.job_id()).has_value());
  }
  for (const bool full : {true, false}) {
    fail_next_commit(full);
    grpc::ClientContext ctx;
    bound(ctx);
    tpool::v1::JobRef ref;
    expect_refusal(srv.stub().Submit(&ctx, req, &ref), ctx, full);
    EXPECT_EQ(ref.job_id(), 0u);
  }
  {
    fail_next_commit(/*full=*/true);
    grpc::ClientContext ctx;
    bound(ctx);
    tpool::v1::JobBatch batch;
    for (int i = 0; i < 2; ++i) *batch.add_jobs() = req;
    tpool::v1::JobRefs refs;
    ASSERT_TRUE(srv.stub().SubmitBatch(&ctx, batch, &refs).ok());
    ASSERT_EQ(refs.items_size(), 2);
    for (int i = 0; i < 2; ++i) {
      EXPECT_EQ(refs.items(i).code(), static_cast<int>(grpc::StatusCode::RESOURCE_EXHAUSTED));
      EXPECT_NE(refs.items(i).message().find("could not record the job"), std::string::npos)
          << refs.items(i).message();
      EXPECT_EQ(refs.items(i).job_id(), 0u);
    }
  }
  EXPECT_TRUE(srv.wait_idle());
}

}  // namespace
}  // namespace tpool::rpc::testing
