// JobService.Stream against a real tpoold with a small pool: 100k jobs in
// batches, backpressure, nothing lost, bounded memory.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <thread>

#include "daemon_process.h"

namespace tpool::testing {
namespace {

std::uint64_t rss_kib(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string key;
  while (in >> key) {
    if (key == "VmHWM:") {
      std::uint64_t kib = 0;
      in >> kib;
      return kib;
    }
  }
  return 0;
}

TEST(Stream, HundredThousandJobsInBatchesWithASmallPool) {
  constexpr std::uint64_t kWindow = 256;
  DaemonProcess d(
      "[server]\nmax_inflight_jobs = 1024\nstream_window = 256\n"
      "[pool]\nmax_threads = 2\nblocking_workers = 1\nqueue_capacity = 1024\n"
      "max_overflow_workers = 0\n"
      "[metrics]\nenabled = false\n");
  ASSERT_TRUE(d.started()) << d.log();
  constexpr std::uint64_t kJobs = 100000;
  constexpr std::uint64_t kBatch = 1000;
  grpc::ClientContext ctx;
  auto stream = d.jobs().Stream(&ctx);

  std::atomic<std::uint64_t> max_in_flight{0};
  std::atomic<bool> writing{true};
  std::thread writer([&] {
    for (std::uint64_t first = 0; first < kJobs; first += kBatch) {
      tpool::v1::JobBatch b;
      for (std::uint64_t t = first; t < first + kBatch; ++t) {
        *b.add_jobs() = job("echo", std::to_string(t), t);
      }
      if (!stream->Write(b)) break;
    }
    stream->WritesDone();
    writing = false;
  });
  // Watch the daemon's in-flight count while the stream runs.
  std::thread watcher([&] {
    while (writing) {
      grpc::ClientContext c;
      tpool::v1::StatsReply s;
      if (d.admin().Stats(&c, {}, &s).ok()) {
        std::uint64_t n = s.daemon().jobs_in_flight();
        std::uint64_t m = max_in_flight.load();
        while (n > m && !max_in_flight.compare_exchange_weak(m, n)) {
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));  // sampling rate, not sync
    }
  });

  std::vector<char> seen(kJobs, 0);
  std::uint64_t results = 0, messages = 0, bad = 0;
  tpool::v1::ResultBatch rb;
  while (stream->Read(&rb)) {
    ++messages;
    for (const auto& r : rb.results()) {
      ++results;
      if (r.tag() >= kJobs || r.state() != tpool::v1::JOB_STATE_SUCCEEDED ||
          r.output() != std::to_string(r.tag())) {
        ++bad;
        continue;
      }
      seen[r.tag()]++;
    }
  }
  grpc::Status s = stream->Finish();
  writer.join();
  watcher.join();
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(bad, 0u);
  EXPECT_EQ(results, kJobs);
  EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), static_cast<std::ptrdiff_t>(kJobs));
  // Backpressure: the stream never had more than its window in flight. The
  // engine counts a job until its pool task returns, a moment after its
  // result freed the stream's window slot, so each of the 3 workers (no
  // overflow workers in this config) may add one.
  EXPECT_LE(max_in_flight.load(), kWindow + 3);
  EXPECT_GT(max_in_flight.load(), 0u);
  // Results are coalesced: fewer messages than jobs.
  EXPECT_LT(messages, kJobs);

  // The last jobs' pool tasks return just after their results went out:
  // poll (bounded) for the in-flight count to reach zero.
  tpool::v1::StatsReply stats;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  do {
    grpc::ClientContext c;
    ASSERT_TRUE(d.admin().Stats(&c, {}, &stats).ok());
  } while (stats.daemon().jobs_in_flight() != 0 && std::chrono::steady_clock::now() < deadline);
  EXPECT_EQ(stats.daemon().jobs_in_flight(), 0u);
  EXPECT_EQ(stats.daemon().result_store_entries(), 0u);  // Stream results are not retained
  // Memory stays bounded: 100k results are never all buffered. 512 MiB is a
  // generous ceiling (also under ASan) for a daemon whose idle footprint is
  // ~30 MiB.
  EXPECT_LT(rss_kib(d.pid()), 512u * 1024) << "peak RSS in KiB";
  EXPECT_EQ(d.stop(), std::optional<int>(0)) << d.log();
}

TEST(Stream, BadItemsAreAnsweredInBandAndTheRestRun) {
  DaemonProcess d("[metrics]\nenabled = false\n");
  ASSERT_TRUE(d.started()) << d.log();
  grpc::ClientContext ctx;
  auto stream = d.jobs().Stream(&ctx);
  tpool::v1::JobBatch b;
  *b.add_jobs() = job("echo", "a", 1);
  *b.add_jobs() = job("missing", "b", 2);
  *b.add_jobs() = job("", "c", 3);
  *b.add_jobs() = job("fail", "d", 4);
  *b.add_jobs() = job("echo", "e", 5);
  ASSERT_TRUE(stream->Write(b));
  stream->WritesDone();
  std::map<std::uint64_t, tpool::v1::JobResult> by_tag;
  tpool::v1::ResultBatch rb;
  while (stream->Read(&rb)) {
    for (const auto& r : rb.results()) by_tag[r.tag()] = r;
  }
  ASSERT_TRUE(stream->Finish().ok());
  ASSERT_EQ(by_tag.size(), 5u);
  EXPECT_EQ(by_tag[1].output(), "a");
  EXPECT_EQ(by_tag[2].code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(by_tag[2].job_id(), 0u);
  EXPECT_EQ(by_tag[3].code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(by_tag[4].state(), tpool::v1::JOB_STATE_FAILED);
  EXPECT_EQ(by_tag[5].output(), "e");
  EXPECT_EQ(d.stop(), std::optional<int>(0)) << d.log();
}

TEST(Stream, MaxStreamsIsResourceExhausted) {
  DaemonProcess d("[server]\nmax_streams = 1\n[metrics]\nenabled = false\n");
  ASSERT_TRUE(d.started()) << d.log();
  grpc::ClientContext c1;
  auto first = d.jobs().Stream(&c1);
  tpool::v1::JobBatch b;
  *b.add_jobs() = job("echo", "x", 1);
  ASSERT_TRUE(first->Write(b));
  tpool::v1::ResultBatch rb;
  ASSERT_TRUE(first->Read(&rb));  // the first stream is open and served
  grpc::ClientContext c2;
  auto second = d.jobs().Stream(&c2);
  second->WritesDone();
  while (second->Read(&rb)) {
  }
  EXPECT_EQ(second->Finish().error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  first->WritesDone();
  while (first->Read(&rb)) {
  }
  EXPECT_TRUE(first->Finish().ok());
  EXPECT_EQ(d.stop(), std::optional<int>(0)) << d.log();
}

}  // namespace
}  // namespace tpool::testing
