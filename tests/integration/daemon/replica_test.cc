// Replica identity on job refs: tpoold stamps its replica id on every ref and
// result it returns, and turns away (FAILED_PRECONDITION, naming the owner) a
// Wait, Get or Cancel that names another replica. An empty replica (an older
// client) is not checked.
#include <gtest/gtest.h>
#include <unistd.h>

#include <climits>
#include <map>
#include <vector>

#include "daemon_process.h"

namespace tpool::testing {
namespace {

using tpool::v1::JobRef;
using tpool::v1::JobResult;

constexpr const char* kNoMetrics = "[metrics]\nenabled = false\n";

std::string host_name() {
  char name[HOST_NAME_MAX + 1] = {};
  EXPECT_EQ(::gethostname(name, sizeof name - 1), 0);
  return name;
}

JobRef submit(DaemonProcess& d, const tpool::v1::JobRequest& req) {
  grpc::ClientContext ctx;
  JobRef ref;
  grpc::Status s = d.jobs().Submit(&ctx, req, &ref);
  EXPECT_TRUE(s.ok()) << s.error_message();
  return ref;
}

std::string wrong_replica_message(std::uint64_t id, const std::string& owner,
                                  const std::string& me) {
  return "job " + std::to_string(id) + " belongs to replica " + owner + "; this is replica " + me +
         ": send the call to " + owner;
}

TEST(Replica, EveryRefAndResultCarriesTheReplicaId) {
  DaemonProcess d(kNoMetrics, {"--replica-id", "tpoold-a"});
  ASSERT_TRUE(d.started()) << d.log();

  JobRef ref = submit(d, job("echo", "one"));
  EXPECT_NE(ref.job_id(), 0u);
  EXPECT_EQ(ref.replica(), "tpoold-a");

  {  // Wait naming this replica, and Wait naming none (an older client).
    for (const std::string& replica : {std::string("tpoold-a"), std::string()}) {
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
      tpool::v1::WaitRequest w;
      w.set_job_id(ref.job_id());
      w.set_replica(replica);
      JobResult res;
      grpc::Status s = d.jobs().Wait(&ctx, w, &res);
      ASSERT_TRUE(s.ok()) << s.error_message();
      EXPECT_EQ(res.output(), "one");
      EXPECT_EQ(res.replica(), "tpoold-a");
    }
  }
  {
    grpc::ClientContext ctx;
    tpool::v1::JobStatus st;
    ASSERT_TRUE(d.jobs().Get(&ctx, ref, &st).ok());
    EXPECT_EQ(st.job_id(), ref.job_id());
    EXPECT_EQ(st.replica(), "tpoold-a");
  }
  {
    grpc::ClientContext ctx;
    tpool::v1::JobBatch b;
    *b.add_jobs() = job("echo", "x", 1);
    *b.add_jobs() = job("missing", "y", 2);
    tpool::v1::JobRefs refs;
    ASSERT_TRUE(d.jobs().SubmitBatch(&ctx, b, &refs).ok());
    ASSERT_EQ(refs.items_size(), 2);
    EXPECT_EQ(refs.items(0).replica(), "tpoold-a");
    EXPECT_EQ(refs.items(1).code(), grpc::StatusCode::NOT_FOUND);
    EXPECT_EQ(refs.items(1).replica(), "");  // rejected: no job, no owner
  }
  {
    grpc::ClientContext ctx;
    JobResult res;
    ASSERT_TRUE(d.jobs().Execute(&ctx, job("echo", "e"), &res).ok());
    EXPECT_EQ(res.replica(), "tpoold-a");
  }
  {
    grpc::ClientContext ctx;
    auto stream = d.jobs().Stream(&ctx);
    tpool::v1::JobBatch b;
    *b.add_jobs() = job("echo", "s", 1);
    *b.add_jobs() = job("missing", "t", 2);
    ASSERT_TRUE(stream->Write(b));
    stream->WritesDone();
    std::map<std::uint64_t, JobResult> by_tag;
    tpool::v1::ResultBatch rb;
    while (stream->Read(&rb)) {
      for (const auto& r : rb.results()) by_tag[r.tag()] = r;
    }
    ASSERT_TRUE(stream->Finish().ok());
    ASSERT_EQ(by_tag.size(), 2u);
    EXPECT_EQ(by_tag[1].replica(), "tpoold-a");
    EXPECT_EQ(by_tag[2].replica(), "");
  }
  EXPECT_EQ(d.stop(), std::optional<int>(0)) << d.log();
}

TEST(Replica, ACallNamingAnotherReplicaIsFailedPreconditionNamingTheOwner) {
  DaemonProcess d(kNoMetrics, {"--replica-id", "tpoold-a"});
  ASSERT_TRUE(d.started()) << d.log();
  // A job that runs until cancelled, so a wrongly routed Cancel would show.
  JobRef ref = submit(d, job("sleep", "3600000"));
  ASSERT_EQ(ref.replica(), "tpoold-a");
  JobRef elsewhere = ref;
  elsewhere.set_replica("tpoold-b");
  const std::string want = wrong_replica_message(ref.job_id(), "tpoold-b", "tpoold-a");
  {
    grpc::ClientContext ctx;
    tpool::v1::CancelReply reply;
    grpc::Status s = d.jobs().Cancel(&ctx, elsewhere, &reply);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_EQ(s.error_message(), want);
  }
  {
    grpc::ClientContext ctx;
    tpool::v1::JobStatus st;
    grpc::Status s = d.jobs().Get(&ctx, elsewhere, &st);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_EQ(s.error_message(), want);
  }
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    tpool::v1::WaitRequest w;
    w.set_job_id(ref.job_id());
    w.set_replica("tpoold-b");
    JobResult res;
    grpc::Status s = d.jobs().Wait(&ctx, w, &res);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_EQ(s.error_message(), want);
  }
  {  // The wrongly routed Cancel did not touch the job.
    grpc::ClientContext ctx;
    tpool::v1::JobStatus st;
    ASSERT_TRUE(d.jobs().Get(&ctx, ref, &st).ok());
    EXPECT_TRUE(st.state() == tpool::v1::JOB_STATE_QUEUED ||
                st.state() == tpool::v1::JOB_STATE_RUNNING)
        << st.state();
  }
  {  // An unknown job of another replica: still the owner's, not NOT_FOUND.
    JobRef unknown;
    unknown.set_job_id(987654321);
    unknown.set_replica("tpoold-c");
    grpc::ClientContext ctx;
    tpool::v1::JobStatus st;
    grpc::Status s = d.jobs().Get(&ctx, unknown, &st);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_EQ(s.error_message(), wrong_replica_message(987654321, "tpoold-c", "tpoold-a"));
  }
  {  // The right replica, and none, still work: cancel the job.
    JobRef none = ref;
    none.set_replica("");
    grpc::ClientContext ctx;
    tpool::v1::CancelReply reply;
    grpc::Status s = d.jobs().Cancel(&ctx, none, &reply);
    ASSERT_TRUE(s.ok()) << s.error_message();
    grpc::ClientContext wctx;
    wctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    tpool::v1::WaitRequest w;
    w.set_job_id(ref.job_id());
    w.set_replica("tpoold-a");
    JobResult res;
    // The job ended CANCELLED: Wait returns its JobResult with status OK.
    grpc::Status ws = d.jobs().Wait(&wctx, w, &res);
    EXPECT_TRUE(ws.ok()) << ws.error_code() << " " << ws.error_message();
    EXPECT_EQ(res.state(), tpool::v1::JOB_STATE_CANCELLED);
  }
  EXPECT_EQ(d.stop(), std::optional<int>(0)) << d.log();
}

TEST(Replica, TheDefaultIsTheHostNameAndTheFlagOverridesTheConfigKey) {
  {
    DaemonProcess d(kNoMetrics);
    ASSERT_TRUE(d.started()) << d.log();
    EXPECT_EQ(submit(d, job("echo", "h")).replica(), host_name());
    EXPECT_EQ(d.stop(), std::optional<int>(0)) << d.log();
  }
  {
    DaemonProcess d(std::string("[server]\nreplica_id = \"from-file\"\n") + kNoMetrics);
    ASSERT_TRUE(d.started()) << d.log();
    EXPECT_EQ(submit(d, job("echo", "f")).replica(), "from-file");
    EXPECT_NE(d.log().find("replica from-file"), std::string::npos) << d.log();
    EXPECT_EQ(d.stop(), std::optional<int>(0)) << d.log();
  }
  {
    DaemonProcess d(std::string("[server]\nreplica_id = \"from-file\"\n") + kNoMetrics,
                    {"--replica-id", "from-flag"});
    ASSERT_TRUE(d.started()) << d.log();
    EXPECT_EQ(submit(d, job("echo", "g")).replica(), "from-flag");
    EXPECT_EQ(d.stop(), std::optional<int>(0)) << d.log();
  }
  {  // A replica id travels in messages: a space is refused at start-up.
    DaemonProcess d(kNoMetrics, {"--replica-id", "two words"});
    EXPECT_FALSE(d.started());
    auto rc = d.wait_exit(std::chrono::seconds(30));
    ASSERT_TRUE(rc.has_value()) << d.log();
    EXPECT_NE(*rc, 0);
    EXPECT_NE(d.log().find("server.replica_id = 'two words'"), std::string::npos) << d.log();
  }
}

TEST(Replica, ARefFromBeforeARestartIsNotFoundNeverAnotherJob) {
  // Issue 13, item 4: ids restarted at 1 and the replica id stayed the host
  // name, so after a restart an old ref named another client's new job: Get
  // answered its state and Cancel cancelled it. Now the old ref is NOT_FOUND
  // with a sentence saying tpoold restarted, and the new jobs are untouched.
  std::vector<JobRef> old_refs;
  {
    DaemonProcess before(kNoMetrics, {"--replica-id", "vm"});
    ASSERT_TRUE(before.started()) << before.log();
    for (int i = 0; i < 3; ++i) old_refs.push_back(submit(before, job("echo", "before")));
    ASSERT_EQ(before.stop(), std::optional<int>(0)) << before.log();
  }
  DaemonProcess after(kNoMetrics, {"--replica-id", "vm"});
  ASSERT_TRUE(after.started()) << after.log();
  // Another client's jobs after the restart: one that keeps running (the
  // one an old Cancel used to hit), and ended ones.
  tpool::v1::JobRequest long_job = job("sleep", "60000");
  long_job.set_lane(tpool::v1::LANE_BLOCKING);
  std::vector<JobRef> new_refs = {submit(after, long_job), submit(after, job("echo", "after")),
                                  submit(after, job("echo", "after"))};
  // A job id's top 24 bits are its incarnation (docs/api.md).
  const std::uint64_t now_incarnation = new_refs[0].job_id() >> 40;
  auto restarted = [&](const JobRef& ref) {
    const std::string which =
        "job " + std::to_string(ref.job_id()) + " is from another run of tpoold (incarnation " +
        std::to_string(ref.job_id() >> 40) + ", now " + std::to_string(now_incarnation) + ")";
    // The store variant: each DaemonProcess has a store of its own, which
    // knows nothing of the other's jobs.
    if (store_variant()) {
      return which +
             " and the job store has no record of it: it was not durable, or its result has "
             "expired (results.retention_ms); submit the job again";
    }
    return which +
           ": tpoold restarted since this job was accepted; its result is gone, submit the job "
           "again";
  };
  for (const JobRef& ref : old_refs) {
    EXPECT_EQ(ref.replica(), "vm");
    {
      grpc::ClientContext ctx;
      tpool::v1::JobStatus st;
      grpc::Status s = after.jobs().Get(&ctx, ref, &st);
      EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND)
          << "Get of an old ref answered job " << st.job_id() << " (" << st.handler() << ")";
      EXPECT_EQ(s.error_message(), restarted(ref));
    }
    {
      grpc::ClientContext ctx;
      tpool::v1::CancelReply reply;
      grpc::Status s = after.jobs().Cancel(&ctx, ref, &reply);
      EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
      EXPECT_EQ(s.error_message(), restarted(ref));
    }
    {
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
      tpool::v1::WaitRequest w;
      w.set_job_id(ref.job_id());
      w.set_replica(ref.replica());
      JobResult res;
      grpc::Status s = after.jobs().Wait(&ctx, w, &res);
      EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
      EXPECT_EQ(s.error_message(), restarted(ref));
    }
  }
  {  // The old Cancels did not touch the new long job.
    grpc::ClientContext ctx;
    tpool::v1::JobStatus st;
    ASSERT_TRUE(after.jobs().Get(&ctx, new_refs[0], &st).ok());
    EXPECT_TRUE(st.state() == tpool::v1::JOB_STATE_QUEUED ||
                st.state() == tpool::v1::JOB_STATE_RUNNING)
        << st.state();
  }
  grpc::ClientContext ctx;
  tpool::v1::CancelReply reply;
  ASSERT_TRUE(after.jobs().Cancel(&ctx, new_refs[0], &reply).ok());
  EXPECT_EQ(after.stop(), std::optional<int>(0)) << after.log();
}

TEST(Replica, AnOverlongReplicaIsInvalidArgumentAndNotEchoed) {
  // Issue 13: the replica of a request had no bound and was echoed twice in
  // the FAILED_PRECONDITION message, so a 10 kB one turned the answer into a
  // metadata-size error. Over 253 bytes (a DNS name) it is INVALID_ARGUMENT
  // with a short message; at 253 it is still just another replica.
  DaemonProcess d(kNoMetrics, {"--replica-id", "tpoold-a"});
  ASSERT_TRUE(d.started()) << d.log();
  JobRef ref = submit(d, job("echo", "x"));
  const std::string want = "the replica of job " + std::to_string(ref.job_id()) +
                           " is 10000 bytes long, over the limit of 253 (a replica id is a DNS "
                           "name at most); send back the replica that tpoold returned with the job";
  JobRef huge = ref;
  huge.set_replica(std::string(10000, 'r'));
  {
    grpc::ClientContext ctx;
    tpool::v1::JobStatus st;
    grpc::Status s = d.jobs().Get(&ctx, huge, &st);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message().size();
    EXPECT_EQ(s.error_message(), want);
  }
  {
    grpc::ClientContext ctx;
    tpool::v1::CancelReply reply;
    grpc::Status s = d.jobs().Cancel(&ctx, huge, &reply);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message().size();
    EXPECT_EQ(s.error_message(), want);
  }
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    tpool::v1::WaitRequest w;
    w.set_job_id(ref.job_id());
    w.set_replica(huge.replica());
    JobResult res;
    grpc::Status s = d.jobs().Wait(&ctx, w, &res);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message().size();
    EXPECT_EQ(s.error_message(), want);
  }
  {  // 253 bytes: a replica id that could exist, so the owner is named.
    JobRef longest = ref;
    longest.set_replica(std::string(253, 'r'));
    grpc::ClientContext ctx;
    tpool::v1::JobStatus st;
    grpc::Status s = d.jobs().Get(&ctx, longest, &st);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_EQ(s.error_message(),
              wrong_replica_message(ref.job_id(), longest.replica(), "tpoold-a"));
  }
  EXPECT_EQ(d.stop(), std::optional<int>(0)) << d.log();
}

}  // namespace
}  // namespace tpool::testing
