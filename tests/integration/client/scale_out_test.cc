// Scale-out across three replicas (issue 20; docs/operations.md, "Scaling
// out"): three real tpoold processes on loopback, each with its own replica id,
// behind one Client given the three addresses (gRPC round_robin).
//
// - A Wait/Get sent to a replica that does not own the job answers
//   FAILED_PRECONDITION naming the owner; the client given the addresses
//   follows to the owner.
// - 100k Stream jobs and 10k Submit+Wait jobs spread over the three (every
//   replica gets a share, printed); one replica is killed (SIGKILL) halfway,
//   while refs it owns are outstanding: the clients go on with the other two,
//   and the jobs the killed one had accepted are reported lost (UNAVAILABLE,
//   naming it), never as results.
//
// No sleeps: the kill happens when both workloads have reached their half and
// stopped there (a condition variable); every wait is bounded.
#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>

#include "daemon_process.h"
#include "tpool/client/client.h"
#include "tpool/client/stream.h"

namespace tpool::testing {
namespace {

using namespace std::chrono_literals;
using tpool::client::Client;
using tpool::client::ClientOptions;
using tpool::client::Job;
using tpool::client::JobRef;

constexpr int kFailedPrecondition = 9, kUnavailable = 14;
constexpr const char* kConfig = "[metrics]\nenabled = false\n";
const std::array<std::string, 3> kReplicas = {"replica-0", "replica-1", "replica-2"};

struct Replicas {
  std::vector<std::unique_ptr<DaemonProcess>> d;
  Replicas() {
    for (const auto& id : kReplicas) {
      d.push_back(
          std::make_unique<DaemonProcess>(kConfig, std::vector<std::string>{"--replica-id", id}));
    }
  }
  bool started() const {
    for (const auto& p : d) {
      if (!p->started()) return false;
    }
    return true;
  }
  std::string logs() const {
    std::string out;
    for (const auto& p : d) out += p->log();
    return out;
  }
  std::string list() const {
    return d[0]->address() + "," + d[1]->address() + "," + d[2]->address();
  }
};

ClientOptions at(const std::string& address) {
  ClientOptions o;
  o.address = address;
  o.default_deadline = 30s;
  return o;
}

Job echo(std::string payload, std::uint64_t tag = 0) {
  Job j;
  j.handler = "echo";
  j.payload = std::move(payload);
  j.tag = tag;
  return j;
}

TEST(ScaleOut, WrongReplicaAnswersFailedPreconditionAndTheClientFollowsTheOwner) {
  Replicas r;
  ASSERT_TRUE(r.started()) << r.logs();
  Client only0(at(r.d[0]->address())), only1(at(r.d[1]->address())), all(at(r.list()));

  auto ref = only0.submit_ref(echo("owned by replica-0"));
  ASSERT_TRUE(ref.ok()) << ref.error().to_string();
  EXPECT_EQ(ref->replica, "replica-0");

  // The wrong replica refuses, naming the owner.
  auto wrong = only1.wait(*ref);
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.error().code(), kFailedPrecondition);
  EXPECT_NE(wrong.error().message().find("belongs to replica replica-0"), std::string::npos)
      << wrong.error().message();
  auto wrong_get = only1.get(*ref);
  ASSERT_FALSE(wrong_get.ok());
  EXPECT_EQ(wrong_get.error().code(), kFailedPrecondition);

  // Given all three addresses, the client finds the owner (several times:
  // once by asking, then from what it remembered).
  for (int i = 0; i < 3; ++i) {
    auto got = all.wait(*ref);
    ASSERT_TRUE(got.ok()) << got.error().to_string();
    EXPECT_EQ(got->output, "owned by replica-0");
    EXPECT_EQ(got->replica, "replica-0");
    auto st = all.get(*ref);
    ASSERT_TRUE(st.ok()) << st.error().to_string();
    EXPECT_EQ(st->job_id, ref->job_id);
  }

  // A replica no address answers for: FAILED_PRECONDITION, not a guess.
  auto ghost = all.wait(JobRef{ref->job_id, "replica-9"});
  ASSERT_FALSE(ghost.ok());
  EXPECT_EQ(ghost.error().code(), kFailedPrecondition) << ghost.error().to_string();
  for (auto& d : r.d) EXPECT_EQ(d->stop(), std::optional<int>(0)) << d->log();
}

// Counts per replica, before and after the kill.
struct Shares {
  std::mutex mu;
  std::map<std::string, std::uint64_t> before, after;
  void add(const std::string& replica, bool killed, std::uint64_t n = 1) {
    std::lock_guard lock(mu);
    (killed ? after : before)[replica] += n;
  }
  std::string str() {
    std::lock_guard lock(mu);
    std::string s = "before the kill:";
    for (const auto& [k, v] : before) s += " " + k + "=" + std::to_string(v);
    s += "; after:";
    for (const auto& [k, v] : after) s += " " + k + "=" + std::to_string(v);
    return s;
  }
};

// The workloads stop at their half until the replica is killed.
struct Halfway {
  std::mutex mu;
  std::condition_variable cv;
  int arrived = 0;
  bool killed = false;
  void arrive_and_wait() {
    std::unique_lock lock(mu);
    ++arrived;
    cv.notify_all();
    cv.wait_for(lock, 120s, [&] { return killed; });
  }
  bool wait_all(int expected) {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, 120s, [&] { return arrived == expected; });
  }
  void kill_done() {
    std::lock_guard lock(mu);
    killed = true;
    cv.notify_all();
  }
  bool is_killed() {
    std::lock_guard lock(mu);
    return killed;
  }
};

TEST(ScaleOut, ThreeReplicasShareTheLoadAndClientsGoOnWhenOneIsKilled) {
  constexpr std::uint64_t kStreamJobs = 100'000, kSubmitJobs = 10'000;
  constexpr int kStreamWorkers = 3, kSubmitWorkers = 2;
  constexpr std::uint64_t kMessage = 100;  // jobs per Stream message
  constexpr std::uint64_t kChunk = 100;    // refs submitted before they are waited
  Replicas r;
  ASSERT_TRUE(r.started()) << r.logs();
  Client all(at(r.list()));
  Halfway half;
  Shares stream_shares, submit_shares;
  std::atomic<std::uint64_t> stream_ok{0}, stream_lost{0}, submit_ok{0}, submit_lost{0};
  std::atomic<std::uint64_t> submit_errors{0}, wrong_losses{0}, sessions_broken{0};
  auto t0 = std::chrono::steady_clock::now();

  // Stream workers: sessions of at most 2000 jobs (each session is one call,
  // placed on a replica by round_robin). A session that ends early loses the
  // jobs it had sent and not had answered; the rest go to a new session.
  auto stream_worker = [&](int w) {
    const std::uint64_t mine = kStreamJobs / kStreamWorkers + (w == 0 ? kStreamJobs % 3 : 0);
    std::uint64_t done = 0;  // answered or lost
    bool halted = false;
    int failed_opens = 0;
    while (done < mine) {
      std::atomic<std::uint64_t> answered{0};
      const bool killed_at_open = half.is_killed();
      auto s = all.stream({.on_result =
                               [&](const tpool::client::JobResult& res) {
                                 if (res.succeeded()) {
                                   stream_shares.add(res.replica, killed_at_open);
                                   ++stream_ok;
                                 }
                                 ++answered;
                               },
                           .deadline = 120s});
      std::uint64_t sent = 0;
      const std::uint64_t session = std::min<std::uint64_t>(2000, mine - done);
      bool alive = true;
      while (alive && sent < session) {
        std::vector<Job> msg(std::min(kMessage, session - sent), echo("x"));
        alive = s->send(msg);
        if (alive) sent += msg.size();
        if (!halted && done + sent >= mine / 2) {
          halted = true;  // this session stays open across the kill
          half.arrive_and_wait();
        }
      }
      tpool::client::Error e = s->finish();
      if (!e.ok()) ++sessions_broken;
      stream_lost += sent - answered.load();
      done += sent;
      if (sent == 0 && !e.ok() && (!half.is_killed() || ++failed_opens > 100)) {
        ADD_FAILURE() << "stream sessions fail to open: " << e.to_string();
        return;
      }
    }
  };

  // Submit+Wait workers: submit a chunk of refs (keyed: a retry after
  // UNAVAILABLE is safe), then wait each one at its owner.
  auto submit_worker = [&](int w) {
    const std::uint64_t mine = kSubmitJobs / kSubmitWorkers;
    bool halted = false;
    for (std::uint64_t first = 0; first < mine; first += kChunk) {
      std::vector<JobRef> refs;
      const bool killed_before = half.is_killed();
      for (std::uint64_t i = first; i < first + kChunk && i < mine; ++i) {
        Job j = echo("s");
        j.idempotency_key = "w" + std::to_string(w) + "-" + std::to_string(i);
        auto ref = all.submit_ref(j);
        if (!ref.ok()) {
          ++submit_errors;
          ADD_FAILURE() << "submit: " << ref.error().to_string();
          continue;
        }
        refs.push_back(*ref);
      }
      if (!halted && first + kChunk >= mine / 2) {
        halted = true;  // these refs are outstanding across the kill
        half.arrive_and_wait();
      }
      for (const auto& ref : refs) {
        auto res = all.wait(ref);
        if (res.ok() && res->succeeded()) {
          EXPECT_EQ(res->replica, ref.replica);
          submit_shares.add(ref.replica, killed_before);
          ++submit_ok;
        } else if (!res.ok() && res.error().code() == kUnavailable && ref.replica == kReplicas[2]) {
          ++submit_lost;  // owned by the killed replica: reported lost
        } else {
          ++wrong_losses;
          ADD_FAILURE() << "job " << ref.job_id << "@" << ref.replica << ": "
                        << (res.ok() ? "not SUCCEEDED" : res.error().to_string());
        }
      }
    }
  };

  std::vector<std::thread> threads;
  for (int w = 0; w < kStreamWorkers; ++w) threads.emplace_back(stream_worker, w);
  for (int w = 0; w < kSubmitWorkers; ++w) threads.emplace_back(submit_worker, w);
  bool all_halfway = half.wait_all(kStreamWorkers + kSubmitWorkers);
  EXPECT_TRUE(all_halfway) << "the workloads did not reach their half within 120 s";
  r.d[2]->signal(SIGKILL);
  EXPECT_EQ(r.d[2]->wait_exit(30s), std::optional<int>(128 + SIGKILL));
  half.kill_done();
  for (auto& t : threads) t.join();
  auto secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  std::printf(
      "scale-out: %.1f s; Stream: %llu ok, %llu lost with the killed replica (%llu sessions "
      "broken); shares %s\n"
      "scale-out: Submit+Wait: %llu ok, %llu lost with the killed replica; shares %s\n",
      secs, static_cast<unsigned long long>(stream_ok.load()),
      static_cast<unsigned long long>(stream_lost.load()),
      static_cast<unsigned long long>(sessions_broken.load()), stream_shares.str().c_str(),
      static_cast<unsigned long long>(submit_ok.load()),
      static_cast<unsigned long long>(submit_lost.load()), submit_shares.str().c_str());

  // Every job is accounted for: a result, or reported lost.
  EXPECT_EQ(stream_ok + stream_lost, kStreamJobs);
  EXPECT_EQ(submit_ok + submit_lost + submit_errors, kSubmitJobs);
  EXPECT_EQ(wrong_losses.load(), 0u);
  // The chunk outstanding at the kill held refs of the killed replica.
  EXPECT_GT(submit_lost.load(), 0u);
  // Before the kill every replica had a share of both workloads; after it,
  // only the two that live.
  for (const auto& id : kReplicas) {
    EXPECT_GT(stream_shares.before[id], 0u) << id << ": " << stream_shares.str();
    EXPECT_GT(submit_shares.before[id], 0u) << id << ": " << submit_shares.str();
  }
  for (const auto& id : {kReplicas[0], kReplicas[1]}) {
    EXPECT_GT(stream_shares.after[id] + submit_shares.after[id], 0u) << id;
  }
  EXPECT_EQ(stream_shares.after[kReplicas[2]], 0u);
  EXPECT_EQ(submit_shares.after[kReplicas[2]], 0u);
  for (int i = 0; i < 2; ++i) EXPECT_EQ(r.d[i]->stop(), std::optional<int>(0)) << r.d[i]->log();
}

}  // namespace
}  // namespace tpool::testing
