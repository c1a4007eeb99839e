// tpoold's lifecycle against the real process: drain on SIGTERM (also under a
// 100k-job load), cancel on a second SIGTERM, reload on SIGHUP under load,
// AdminService.Drain and Shutdown, start-up failures.
#include <grpcpp/generic/generic_stub.h>
#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <future>
#include <set>
#include <thread>

#include "daemon_process.h"

namespace tpool::testing {
namespace {

std::string health(DaemonProcess& d) {
  grpc::GenericStub generic(d.channel());
  grpc::Slice empty(std::string{});
  grpc::ByteBuffer request(&empty, 1), response;
  grpc::ClientContext ctx;
  std::promise<grpc::Status> done;
  generic.UnaryCall(&ctx, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request, &response,
                    [&done](grpc::Status s) { done.set_value(s); });
  if (!done.get_future().get().ok()) return "error";
  std::vector<grpc::Slice> slices;
  (void)response.Dump(&slices);
  std::string b;
  for (auto& s : slices) b.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return b == std::string("\x08\x01", 2)   ? "SERVING"
         : b == std::string("\x08\x02", 2) ? "NOT_SERVING"
                                           : "other";
}

std::uint64_t in_flight(DaemonProcess& d) {
  grpc::ClientContext c;
  tpool::v1::StatsReply s;
  return d.admin().Stats(&c, {}, &s).ok() ? s.daemon().jobs_in_flight() : 0;
}

bool wait_in_flight(DaemonProcess& d, std::uint64_t n) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < deadline) {
    if (in_flight(d) == n) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

// Streams `jobs` jobs of `handler` in batches of 1000; at `signal_after`
// results, sends sig (once, or every 2000 results with repeat).
struct LoadOutcome {
  std::uint64_t accepted_results = 0;  // results of accepted jobs (job_id != 0)
  std::uint64_t rejected = 0;          // items answered with a code
  std::uint64_t succeeded = 0;
  std::uint64_t duplicates = 0;
  std::uint64_t written = 0;  // jobs the writer sent
  grpc::Status status;
};

// Streams `jobs` jobs in messages of 1,000 (more while keep_writing() says
// so, up to 2,000,000), sending `sig` once `signal_after` results came back
// (and every 2,000 more if repeat).
LoadOutcome stream_load(DaemonProcess& d, std::uint64_t jobs, const std::string& handler,
                        const std::string& payload, std::uint64_t signal_after, int sig,
                        bool repeat, const std::function<bool()>& keep_writing = {}) {
  constexpr std::uint64_t kMaxJobs = 2000000;
  LoadOutcome o;
  grpc::ClientContext ctx;
  auto stream = d.jobs().Stream(&ctx);
  std::thread writer([&] {
    std::uint64_t first = 0;
    for (; first < kMaxJobs && (first < jobs || (keep_writing && keep_writing())); first += 1000) {
      tpool::v1::JobBatch b;
      const std::uint64_t end = first < jobs ? std::min(first + 1000, jobs) : first + 1000;
      for (std::uint64_t t = first; t < end; ++t) {
        *b.add_jobs() = job(handler, payload, t);
      }
      if (!stream->Write(b)) break;
      o.written = end;
    }
    stream->WritesDone();
  });
  std::set<std::uint64_t> tags;
  std::uint64_t next_signal = signal_after;
  tpool::v1::ResultBatch rb;
  while (stream->Read(&rb)) {
    for (const auto& r : rb.results()) {
      if (!tags.insert(r.tag()).second) ++o.duplicates;
      if (r.job_id() == 0) {
        ++o.rejected;
        continue;
      }
      ++o.accepted_results;
      if (r.state() == tpool::v1::JOB_STATE_SUCCEEDED) ++o.succeeded;
    }
    if (next_signal != 0 && tags.size() >= next_signal) {
      d.signal(sig);
      next_signal = repeat ? next_signal + 2000 : 0;
    }
  }
  o.status = stream->Finish();
  writer.join();
  return o;
}

TEST(Lifecycle, SigtermDuringAHundredThousandJobLoadLosesNothingAndExitsZero) {
  DaemonProcess d("[server]\ndrain_timeout_ms = 20000\n[metrics]\nenabled = false\n");
  ASSERT_TRUE(d.started()) << d.log();
  LoadOutcome o = stream_load(d, 100000, "hash", "50:x", 5000, SIGTERM, false);
  auto start = std::chrono::steady_clock::now();
  auto rc = d.wait_exit(std::chrono::seconds(25));
  ASSERT_EQ(rc, std::optional<int>(0)) << d.log();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(22));
  // The stream ended normally (draining: UNAVAILABLE, or OK if the writer
  // had finished), so every accepted job reported before it ended.
  EXPECT_TRUE(o.status.ok() || o.status.error_code() == grpc::StatusCode::UNAVAILABLE)
      << o.status.error_code() << " " << o.status.error_message();
  EXPECT_EQ(o.duplicates, 0u);
  EXPECT_GE(o.accepted_results, 5000u);
  // Drained, not cancelled: every accepted job ran to completion.
  EXPECT_EQ(o.succeeded, o.accepted_results);
  // The daemon's own count of what finished during the drain matches.
  EXPECT_NE(d.log().find("drain complete"), std::string::npos) << d.log();
}

TEST(Lifecycle, SighupDuringLoadFailsNoJob) {
  DaemonProcess d("[metrics]\nenabled = false\n");
  ASSERT_TRUE(d.started()) << d.log();
  // The load goes on until a reload has finished under it, however fast the
  // jobs run (a reload of isolated plugins starts their runners afresh).
  auto not_reloaded = [&d] { return d.log().find("plugins reloaded") == std::string::npos; };
  LoadOutcome o = stream_load(d, 20000, "echo", "x", 2000, SIGHUP, true, not_reloaded);
  ASSERT_TRUE(o.status.ok()) << o.status.error_message();
  EXPECT_GE(o.written, 20000u);
  EXPECT_EQ(o.accepted_results, o.written);
  EXPECT_EQ(o.succeeded, o.written);
  EXPECT_EQ(o.rejected, 0u);
  EXPECT_FALSE(not_reloaded()) << d.log();
  EXPECT_EQ(d.stop(), std::optional<int>(0)) << d.log();
}

// Distinct staging copies of plugin `name` (the host's "/tpool-plugin.*.
// name.so" files) mapped into process pid now.
std::size_t mapped_copies(pid_t pid, const std::string& name) {
  std::ifstream maps("/proc/" + std::to_string(pid) + "/maps");
  std::set<std::string> paths;
  for (std::string line; std::getline(maps, line);) {
    auto at = line.find("/tpool-plugin.");
    if (at != std::string::npos && line.find("." + name + ".so", at) != std::string::npos) {
      paths.insert(line.substr(at));
    }
  }
  return paths.size();
}

// A job lets go of its handler when it ends (Job::handler_ in
// tpool/engine/job.h): a result kept for Wait and Get does not keep the
// plugin generation a reload replaced loaded.
TEST(Lifecycle, ARetainedResultDoesNotKeepAReplacedPluginLoaded) {
  DaemonProcess d("[metrics]\nenabled = false\n");
  ASSERT_TRUE(d.started()) << d.log();
  tpool::v1::JobRef ref;
  {
    grpc::ClientContext c;
    ASSERT_TRUE(d.jobs().Submit(&c, job("echo", "kept"), &ref).ok());
  }
  // The result of a Wait for job `id` (the call must succeed).
  auto wait_for = [&d](std::uint64_t id) {
    grpc::ClientContext c;
    tpool::v1::WaitRequest w;
    w.set_job_id(id);
    tpool::v1::JobResult r;
    EXPECT_TRUE(d.jobs().Wait(&c, w, &r).ok());
    return r;
  };
  ASSERT_EQ(wait_for(ref.job_id()).state(), tpool::v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(mapped_copies(d.pid(), "echo"), 1u);
  {
    grpc::ClientContext c;
    tpool::v1::ReloadPluginsReply reply;
    ASSERT_TRUE(d.admin().ReloadPlugins(&c, {}, &reply).ok());
  }
  // The new copy is mapped; the old one was closed within the reload, when
  // the registry let go of it: the finished job holds it no more.
  EXPECT_EQ(mapped_copies(d.pid(), "echo"), 1u);
  // The result is still served.
  EXPECT_EQ(wait_for(ref.job_id()).output(), "kept");
  EXPECT_EQ(d.stop(), std::optional<int>(0)) << d.log();
}

TEST(Lifecycle, DrainRejectsNewJobsAndASecondSigtermCancelsPending) {
  DaemonProcess d(
      "[server]\ndrain_timeout_ms = 600000\n[pool]\nblocking_workers = 1\n"
      "[metrics]\nenabled = false\n");
  ASSERT_TRUE(d.started()) << d.log();
  EXPECT_EQ(health(d), "SERVING");
  // One sleep job runs (one blocking worker), one waits behind it.
  std::vector<std::promise<grpc::Status>> done(2);
  std::vector<grpc::ClientContext> ctx(2);
  std::vector<tpool::v1::JobResult> res(2);
  tpool::v1::JobRequest req = job("sleep", "600000");
  for (int i = 0; i < 2; ++i) {
    d.jobs().async()->Execute(&ctx[i], &req, &res[i],
                              [&done, i](grpc::Status s) { done[i].set_value(s); });
  }
  ASSERT_TRUE(wait_in_flight(d, 2));
  d.signal(SIGTERM);
  // Draining: NOT_SERVING, and new jobs are UNAVAILABLE.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (health(d) != "NOT_SERVING" && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(health(d), "NOT_SERVING");
  grpc::ClientContext c;
  tpool::v1::JobResult r;
  grpc::Status s = d.jobs().Execute(&c, job("echo", "late"), &r);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_NE(s.error_message().find("draining"), std::string::npos);
  // The second SIGTERM cancels both (the running one through its handler).
  d.signal(SIGTERM);
  for (int i = 0; i < 2; ++i) {
    grpc::Status st = done[i].get_future().get();
    EXPECT_TRUE(st.ok()) << st.error_code() << " " << st.error_message();
    EXPECT_EQ(res[i].state(), tpool::v1::JOB_STATE_CANCELLED);
  }
  EXPECT_EQ(d.wait_exit(std::chrono::seconds(20)), std::optional<int>(0)) << d.log();
}

TEST(Lifecycle, AdminDrainRepliesThenTheDaemonExits) {
  DaemonProcess d("[metrics]\nenabled = false\n");
  ASSERT_TRUE(d.started()) << d.log();
  tpool::v1::JobRef ref;
  grpc::ClientContext c1;
  ASSERT_TRUE(d.jobs().Submit(&c1, job("sleep", "50"), &ref).ok());
  grpc::ClientContext c2;
  tpool::v1::DrainRequest req;
  req.set_timeout_ms(20000);
  tpool::v1::DrainReply reply;
  ASSERT_TRUE(d.admin().Drain(&c2, req, &reply).ok());
  EXPECT_TRUE(reply.drained());
  EXPECT_EQ(reply.cancelled(), 0u);
  EXPECT_EQ(d.wait_exit(std::chrono::seconds(20)), std::optional<int>(0)) << d.log();
}

TEST(Lifecycle, AdminShutdownCancelStopsRunningJobs) {
  DaemonProcess d("[server]\ndrain_timeout_ms = 600000\n[metrics]\nenabled = false\n");
  ASSERT_TRUE(d.started()) << d.log();
  grpc::ClientContext ec;
  tpool::v1::JobResult er;
  std::promise<grpc::Status> done;
  tpool::v1::JobRequest sleep = job("sleep", "600000");
  d.jobs().async()->Execute(&ec, &sleep, &er, [&done](grpc::Status s) { done.set_value(s); });
  ASSERT_TRUE(wait_in_flight(d, 1));
  grpc::ClientContext c;
  tpool::v1::ShutdownRequest req;
  req.set_mode(tpool::v1::SHUTDOWN_MODE_CANCEL);
  tpool::v1::ShutdownReply reply;
  ASSERT_TRUE(d.admin().Shutdown(&c, req, &reply).ok());
  EXPECT_TRUE(reply.accepted());
  grpc::Status st = done.get_future().get();
  EXPECT_TRUE(st.ok()) << st.error_code() << " " << st.error_message();
  EXPECT_EQ(er.state(), tpool::v1::JOB_STATE_CANCELLED);
  EXPECT_EQ(d.wait_exit(std::chrono::seconds(20)), std::optional<int>(0)) << d.log();
}

TEST(Lifecycle, StartupFailuresExitNonZeroWithASentence) {
  DaemonProcess first("[metrics]\nenabled = false\n");
  ASSERT_TRUE(first.started());
  // The same port again: cannot listen.
  DaemonProcess second("[metrics]\nenabled = false\n", {"--listen", first.address()});
  EXPECT_FALSE(second.started());
  EXPECT_EQ(second.wait_exit(std::chrono::seconds(20)), std::optional<int>(1));
  EXPECT_NE(second.log().find("cannot listen on " + first.address()), std::string::npos)
      << second.log();
  // A plugin directory that does not exist.
  DaemonProcess third("[metrics]\nenabled = false\n", {"--plugin-dir", "/nonexistent/tpool"});
  EXPECT_FALSE(third.started());
  EXPECT_EQ(third.wait_exit(std::chrono::seconds(20)), std::optional<int>(1));
  EXPECT_NE(third.log().find("/nonexistent/tpool"), std::string::npos) << third.log();
  EXPECT_EQ(first.stop(), std::optional<int>(0));
}

}  // namespace
}  // namespace tpool::testing
