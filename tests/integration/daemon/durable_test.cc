// Durable jobs against the real daemon (issue 17, "Verify"): 100k durable
// jobs through SubmitBatch and Stream, tpoold SIGKILLed at three points and
// restarted on the same store each time.
//
// Evidence, from two independent sources:
//  - the record plugin (plugins/record.c) appends each handler call's input
//    to a file the kill cannot lose: which jobs ran, and how often;
//  - the journal itself, opened by this test while the daemon is dead
//    (tpool::store::Journal::recovered): which jobs were pending (accepted,
//    not ended) at each kill.
// Checked: every acknowledged job ends (SUCCEEDED here) and its result is
// readable by Wait and Get after the last restart; every job ran at least
// once; a job that ran more than once was pending at a kill (at most once
// more per kill it was pending at); a client that resubmits with its
// idempotency keys after a crash gets the first job back, never a second
// run of an ended one. Each job's idempotency key is its payload.
#include <gtest/gtest.h>

#include <atomic>
#include <fstream>
#include <map>
#include <set>
#include <thread>

#include "daemon_process.h"
#include "tpool/store/journal.h"

namespace tpool::testing {
namespace {

using tpool::v1::JobResult;

constexpr int kBatchJobs = 50000;   // through SubmitBatch
constexpr int kStreamJobs = 50000;  // through Stream
constexpr int kPerMessage = 500;

std::string batch_payload(int i) {
  return "b-" + std::to_string(i);
}
std::string stream_payload(int i) {
  return "s-" + std::to_string(i);
}

tpool::v1::JobRequest durable_job(const std::string& payload) {
  tpool::v1::JobRequest r = job("record", payload);
  r.set_durable(true);
  r.set_idempotency_key(payload);
  return r;
}

class DurableKill : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("tpoold-durable-it-" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override {
    daemon_.reset();
    std::filesystem::remove_all(dir_);
  }

  std::string store_path() const { return (dir_ / "jobs.db").string(); }
  std::string record_path() const { return (dir_ / "calls").string(); }

  // tpoold must exit at once, non-zero; its log in log_.
  void start_expecting_failure() {
    const std::string config = "[store]\npath = \"" +
                               (store_override_.empty() ? store_path() : store_override_) +
                               "\"\n[metrics]\nenabled = false\n";
    DaemonProcess d(config);
    EXPECT_FALSE(d.started());
    auto rc = d.wait_exit(std::chrono::seconds(30));
    ASSERT_TRUE(rc.has_value());
    EXPECT_NE(*rc, 0);
    log_ = d.log();
  }

  void start() {
    const std::string config = "[store]\npath = \"" + store_path() +
                               "\"\n[plugins.config]\nrecord = \"" + record_path() +
                               "\"\n[server]\nmax_message_bytes = 4194304\n"
                               "[metrics]\nenabled = false\n";
    daemon_ = std::make_unique<DaemonProcess>(
        config, std::vector<std::string>{"--plugin-dir", TPOOL_RECORD_PLUGIN_DIR});
    ASSERT_TRUE(daemon_->started()) << daemon_->log();
  }

  // SIGKILL, then read the journal as the dead daemon left it: the ids of
  // the jobs pending at the kill, and how many were RUNNING.
  void kill_and_read_journal() {
    daemon_->signal(SIGKILL);
    ASSERT_TRUE(daemon_->wait_exit(std::chrono::seconds(30)).has_value());
    daemon_.reset();
    store::JournalOptions o;
    o.path = store_path();
    auto j = store::Journal::open(o);
    ASSERT_TRUE(j.ok()) << j.status().message();
    std::size_t running = 0;
    for (const auto& r : j.value()->recovered()) {
      ++pending_at_kill_[r.id];
      running += r.state == store::RecordState::kRunning ? 1 : 0;
    }
    kills_.push_back({j.value()->recovered().size(), running});
  }

  // SubmitBatch of payloads [from, to) in messages of kPerMessage; acked[i]
  // gets each acknowledged job's id. Stops at the first failed call (the
  // daemon was killed) and returns the first payload not acknowledged.
  int submit_batches(int from, int to, std::vector<std::uint64_t>& acked,
                     std::atomic<int>* acked_count = nullptr) {
    int i = from;
    while (i < to) {
      tpool::v1::JobBatch b;
      const int end = std::min(to, i + kPerMessage);
      for (int k = i; k < end; ++k) *b.add_jobs() = durable_job(batch_payload(k));
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
      tpool::v1::JobRefs refs;
      grpc::Status s = daemon_->jobs().SubmitBatch(&ctx, b, &refs);
      if (!s.ok()) return i;
      EXPECT_EQ(refs.items_size(), end - i);
      for (int k = 0; k < refs.items_size(); ++k) {
        const auto& item = refs.items(k);
        EXPECT_NE(item.job_id(), 0u) << item.message();
        if (item.job_id() == 0) return i + k;
        acked[static_cast<std::size_t>(i + k)] = item.job_id();
      }
      i = end;
      if (acked_count != nullptr) acked_count->store(i - from);
    }
    return i;
  }

  // One Stream call sending the stream jobs not yet answered; results
  // arrive as jobs end. Returns when every item was answered or the call
  // failed (the daemon was killed).
  void stream(std::vector<std::uint64_t>& answered, std::atomic<int>* results = nullptr) {
    std::vector<int> todo;
    for (int i = 0; i < kStreamJobs; ++i) {
      if (answered[static_cast<std::size_t>(i)] == 0) todo.push_back(i);
    }
    if (todo.empty()) return;
    grpc::ClientContext ctx;
    auto call = daemon_->jobs().Stream(&ctx);
    std::thread writer([&] {
      for (std::size_t k = 0; k < todo.size(); k += kPerMessage) {
        tpool::v1::JobBatch b;
        for (std::size_t m = k; m < std::min(todo.size(), k + kPerMessage); ++m) {
          *b.add_jobs() = durable_job(stream_payload(todo[m]));
          b.mutable_jobs()->rbegin()->set_tag(static_cast<std::uint64_t>(todo[m]));
        }
        if (!call->Write(b)) break;
      }
      call->WritesDone();
    });
    tpool::v1::ResultBatch rb;
    while (call->Read(&rb)) {
      for (const auto& r : rb.results()) {
        EXPECT_EQ(r.state(), tpool::v1::JOB_STATE_SUCCEEDED) << r.message();
        EXPECT_EQ(r.output(), stream_payload(static_cast<int>(r.tag())));
        answered[r.tag()] = r.job_id();
        if (results != nullptr) results->fetch_add(1);
      }
    }
    writer.join();
    (void)call->Finish();
  }

  std::filesystem::path dir_;
  std::string store_override_, log_;
  std::unique_ptr<DaemonProcess> daemon_;
  std::map<std::uint64_t, int> pending_at_kill_;  // job id -> kills it was pending at
  struct Kill {
    std::size_t pending, running;
  };
  std::vector<Kill> kills_;
};

TEST_F(DurableKill, HundredThousandJobsSurviveThreeKills) {
  std::vector<std::uint64_t> batch_ids(kBatchJobs, 0), stream_ids(kStreamJobs, 0);

  // Kill 1: in the middle of the SubmitBatch calls (one call may be cut
  // short: its jobs are not acknowledged, and their resubmission below
  // finds them by key if they were committed).
  start();
  std::atomic<int> acked{0};
  int next = 0;
  std::thread submitter([&] { next = submit_batches(0, kBatchJobs, batch_ids, &acked); });
  while (acked.load() < kBatchJobs * 2 / 5) std::this_thread::yield();
  kill_and_read_journal();
  submitter.join();
  ASSERT_LT(next, kBatchJobs) << "the kill came after the last SubmitBatch";

  // Kill 2: right after the last SubmitBatch was acknowledged, with most of
  // the backlog queued.
  start();
  ASSERT_EQ(submit_batches(next, kBatchJobs, batch_ids), kBatchJobs) << daemon_->log();
  kill_and_read_journal();

  // Kill 3: in the middle of a Stream, with results flowing.
  start();
  std::atomic<int> results{0};
  std::thread streamer([&] { stream(stream_ids, &results); });
  while (results.load() < kStreamJobs * 2 / 5) std::this_thread::yield();
  kill_and_read_journal();
  streamer.join();

  // The last start: the client resubmits what was not answered, by key.
  start();
  stream(stream_ids);
  for (int i = 0; i < kStreamJobs; ++i) {
    ASSERT_NE(stream_ids[static_cast<std::size_t>(i)], 0u) << "stream job " << i << " unanswered";
  }

  // Every acknowledged job ends, and Wait and Get read its result.
  auto check = [&](const std::vector<std::uint64_t>& ids, auto payload) {
    for (std::size_t i = 0; i < ids.size(); ++i) {
      grpc::ClientContext c1;
      c1.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
      tpool::v1::WaitRequest w;
      w.set_job_id(ids[i]);
      JobResult r;
      grpc::Status s = daemon_->jobs().Wait(&c1, w, &r);
      ASSERT_TRUE(s.ok()) << "job " << ids[i] << ": " << s.error_message();
      ASSERT_EQ(r.state(), tpool::v1::JOB_STATE_SUCCEEDED) << r.message();
      ASSERT_EQ(r.output(), payload(static_cast<int>(i)));
      if (i % 97 == 0) {  // Get too, on a sample
        grpc::ClientContext c2;
        tpool::v1::JobRef ref;
        ref.set_job_id(ids[i]);
        tpool::v1::JobStatus st;
        ASSERT_TRUE(daemon_->jobs().Get(&c2, ref, &st).ok());
        ASSERT_EQ(st.state(), tpool::v1::JOB_STATE_SUCCEEDED);
      }
    }
  };
  check(batch_ids, batch_payload);
  check(stream_ids, stream_payload);

  // The handlers' own record: every job ran; a job that ran again was
  // pending at a kill, at most once more per such kill.
  std::map<std::string, int> calls;
  {
    std::ifstream in(record_path());
    std::string line;
    while (std::getline(in, line)) ++calls[line];
  }
  std::map<std::string, std::uint64_t> id_of;
  for (int i = 0; i < kBatchJobs; ++i)
    id_of[batch_payload(i)] = batch_ids[static_cast<std::size_t>(i)];
  for (int i = 0; i < kStreamJobs; ++i)
    id_of[stream_payload(i)] = stream_ids[static_cast<std::size_t>(i)];
  int reruns = 0;
  for (const auto& [payload, id] : id_of) {
    const int n = calls[payload];
    ASSERT_GE(n, 1) << payload << " never ran";
    if (n > 1) {
      ++reruns;
      auto it = pending_at_kill_.find(id);
      ASSERT_NE(it, pending_at_kill_.end())
          << payload << " (job " << id << ") ran " << n << " times but was not pending at a kill";
      ASSERT_LE(n, 1 + it->second) << payload;
    }
  }
  EXPECT_EQ(calls.size(), id_of.size()) << "a handler ran for a job no client knows";
  ASSERT_EQ(kills_.size(), 3u);
  std::cout << "[ durable ] pending at the kills: " << kills_[0].pending << " ("
            << kills_[0].running << " running), " << kills_[1].pending << " (" << kills_[1].running
            << "), " << kills_[2].pending << " (" << kills_[2].running
            << "); jobs run more than once: " << reruns << "\n";
  EXPECT_EQ(daemon_->stop(), std::optional<int>(0)) << daemon_->log();
}

TEST_F(DurableKill, AStoreTpooldCannotUseStopsTheStartWithTheFileAndWhatToDo) {
  // Not a database: refused, the file left as it was (never started fresh).
  { std::ofstream(store_path()) << "this is not an SQLite database, it is a text file\n"; }
  start_expecting_failure();
  EXPECT_NE(log_.find("cannot open the job store ([store] path)"), std::string::npos) << log_;
  EXPECT_NE(log_.find(store_path()), std::string::npos) << log_;
  std::ifstream in(store_path());
  std::string first;
  std::getline(in, first);
  EXPECT_EQ(first, "this is not an SQLite database, it is a text file");
  // A directory that does not exist: refused, saying to create it.
  std::filesystem::remove(store_path());
  store_override_ = (dir_ / "missing" / "jobs.db").string();
  start_expecting_failure();
  EXPECT_NE(log_.find("cannot open the job store"), std::string::npos) << log_;
  EXPECT_NE(log_.find((dir_ / "missing").string()), std::string::npos) << log_;
}

// (J10) A second tpoold on a store in use stops at start, naming the first
// one's pid; the first keeps serving.
TEST_F(DurableKill, ASecondTpooldOnAStoreInUseStopsAtStartNamingTheFirst) {
  start();
  start_expecting_failure();
  EXPECT_NE(log_.find("cannot open the job store"), std::string::npos) << log_;
  EXPECT_NE(log_.find("in use by another process (pid " + std::to_string(daemon_->pid()) + ")"),
            std::string::npos)
      << log_;
  EXPECT_NE(log_.find(store_path()), std::string::npos) << log_;
  std::vector<std::uint64_t> acked(kPerMessage, 0);
  EXPECT_EQ(submit_batches(0, kPerMessage, acked), kPerMessage);
  for (std::uint64_t id : acked) EXPECT_NE(id, 0u);
}

}  // namespace
}  // namespace tpool::testing
