// tpool::client against a real tpoold on loopback (the example plugins):
// every call, the error paths, the stream session in both modes, and the
// retry policy (observed through the daemon's own rejection counter).
#include <gtest/gtest.h>

#include <algorithm>
#include <future>
#include <numeric>
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
using tpool::client::JobState;

constexpr int kNotFound = 5, kDeadlineExceeded = 4, kUnavailable = 14;

// The job port; in the secure variant over TLS with the test CA and token.
ClientOptions at(const DaemonProcess& d) {
  ClientOptions o;
  o.address = d.address();
  o.default_deadline = 30s;
  if (secure_variant()) {
    o.tls.enabled = true;
    o.tls.root_certs_pem = SecureMaterial::get().read("ca.pem");
    o.bearer_token = SecureMaterial::get().token();
  }
  return o;
}

// AdminService: the daemon's admin socket (plaintext; its mode is its access
// control). The token of the secure variant goes along: with auth on, a
// token on the socket is checked (the test's principal has every role).
ClientOptions admin_at(const DaemonProcess& d) {
  ClientOptions o = at(d);
  o.address = d.admin_address();
  o.tls = {};
  return o;
}

Job job_of(std::string handler, std::string payload, std::uint64_t tag = 0) {
  Job j;
  j.handler = std::move(handler);
  j.payload = std::move(payload);
  j.tag = tag;
  return j;
}

class ClientLib : public DaemonSuite<ClientLib> {
 public:
  static std::string daemon_config() { return "[metrics]\nenabled = false\n"; }

 protected:
  static Client& c() {
    static Client client(at(*daemon_));
    return client;
  }
  static Client& admin() {
    static Client client(admin_at(*daemon_));
    return client;
  }
};

TEST_F(ClientLib, ExecuteReturnsTheHandlersOutput) {
  auto r = c().execute(job_of("echo", std::string("a\0b", 3)));
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  EXPECT_EQ(r->state, JobState::kSucceeded);
  EXPECT_EQ(r->output, std::string("a\0b", 3));
  EXPECT_GT(r->job_id, 0u);
}

TEST_F(ClientLib, ExecuteAsyncCallsBackOnce) {
  std::promise<tpool::client::Result<tpool::client::JobResult>> p;
  c().execute_async(job_of("echo", "async"), [&p](auto r) { p.set_value(std::move(r)); });
  auto r = p.get_future().get();
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  EXPECT_EQ(r->output, "async");
}

// (end_async in client.cc) An asynchronous call's context, which holds a
// reference to the channel, is gone before its callback runs: a caller that
// destroys its Client once the last callback has run then drops the
// channel's last reference on its own thread, never on gRPC's callback
// thread (there it shuts down the callback queue from that queue's own
// thread: a double free at exit, seen in tpoolctl bench under ASan).
TEST_F(ClientLib, AnAsyncCallDropsItsChannelReferenceBeforeItsCallback) {
  auto client = std::make_unique<Client>(at(*daemon_));
  const std::weak_ptr<grpc::Channel> channel = client->channel();
  const long idle = channel.use_count();
  std::promise<long> seen;
  client->execute_async(job_of("echo", "x"), [&](auto r) {
    EXPECT_TRUE(r.ok()) << r.error().to_string();
    seen.set_value(channel.use_count());
  });
  EXPECT_EQ(seen.get_future().get(), idle);
  auto ref = client->submit(job_of("echo", "y"));
  ASSERT_TRUE(ref.ok()) << ref.error().to_string();
  std::promise<long> waited;
  client->wait_async(*ref, [&](auto r) {
    EXPECT_TRUE(r.ok()) << r.error().to_string();
    waited.set_value(channel.use_count());
  });
  EXPECT_EQ(waited.get_future().get(), idle);
  client.reset();
  EXPECT_TRUE(channel.expired());
}

TEST_F(ClientLib, UnknownHandlerIsNotFound) {
  auto r = c().execute(job_of("no_such_handler", "x"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), kNotFound);
  EXPECT_EQ(r.error().code_name(), "NOT_FOUND");
  EXPECT_NE(r.error().message().find("no_such_handler"), std::string::npos) << r.error().message();
}

TEST_F(ClientLib, AHandlerFailureIsAResultNotAnError) {
  auto r = c().execute(job_of("fail", "boom"));
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  EXPECT_EQ(r->state, JobState::kFailed);
  EXPECT_FALSE(r->message.empty());
}

TEST_F(ClientLib, CallDeadlineExceeded) {
  auto r = c().execute(job_of("sleep", "60000"), {.deadline = 200ms});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), kDeadlineExceeded) << r.error().to_string();
}

TEST_F(ClientLib, JobTimeoutIsATimedOutResult) {
  Job j = job_of("sleep", "60000");
  j.timeout = 100ms;
  auto r = c().execute(j);
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  EXPECT_EQ(r->state, JobState::kTimedOut);
}

TEST_F(ClientLib, SubmitGetWait) {
  Job j = job_of("sleep", "20");
  j.labels = {{"team", "core"}};
  auto id = c().submit(j);
  ASSERT_TRUE(id.ok()) << id.error().to_string();
  auto s = c().get(*id);
  ASSERT_TRUE(s.ok()) << s.error().to_string();
  EXPECT_EQ(s->job_id, *id);
  EXPECT_EQ(s->handler, "sleep");
  EXPECT_EQ(s->lane, tpool::client::Lane::kBlocking);
  EXPECT_EQ(s->labels.at("team"), "core");
  auto r = c().wait(*id);
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  EXPECT_EQ(r->state, JobState::kSucceeded);
  EXPECT_EQ(r->output, "slept 20 ms");
  auto after = c().get(*id);
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->state, JobState::kSucceeded);
}

TEST_F(ClientLib, WaitAndGetOfAnUnknownJobAreNotFound) {
  EXPECT_EQ(c().wait(999'999'999).error().code(), kNotFound);
  EXPECT_EQ(c().get(999'999'999).error().code(), kNotFound);
  EXPECT_EQ(c().cancel(999'999'999).error().code(), kNotFound);
}

TEST_F(ClientLib, CancelEndsASubmittedJob) {
  auto id = c().submit(job_of("sleep", "60000"));
  ASSERT_TRUE(id.ok()) << id.error().to_string();
  auto st = c().cancel(*id);
  ASSERT_TRUE(st.ok()) << st.error().to_string();
  EXPECT_TRUE(*st == JobState::kCancelled || *st == JobState::kRunning || *st == JobState::kQueued)
      << to_string(*st);
  // A cancelled job's Wait is its final result, state CANCELLED, as its
  // Execute's would be.
  auto r = c().wait(*id, {.deadline = 20s});
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  EXPECT_EQ(r->state, JobState::kCancelled);
  auto s = c().get(*id);
  ASSERT_TRUE(s.ok()) << s.error().to_string();
  EXPECT_EQ(s->state, JobState::kCancelled);
}

TEST_F(ClientLib, SubmitBatchReportsEachItem) {
  std::vector<Job> jobs = {job_of("echo", "one", 1), job_of("nope", "two", 2),
                           job_of("echo", "three", 3)};
  auto items = c().submit_batch(jobs);
  ASSERT_TRUE(items.ok()) << items.error().to_string();
  ASSERT_EQ(items->size(), 3u);
  EXPECT_TRUE((*items)[0].error.ok());
  EXPECT_EQ((*items)[1].error.code(), kNotFound);
  EXPECT_EQ((*items)[1].job_id, 0u);
  EXPECT_EQ((*items)[1].tag, 2u);
  EXPECT_TRUE((*items)[2].error.ok());
  EXPECT_EQ(c().wait((*items)[0].job_id)->output, "one");
  EXPECT_EQ(c().wait((*items)[2].job_id)->output, "three");
}

TEST_F(ClientLib, WaitBatchReturnsEveryResultInOrder) {
  std::vector<Job> jobs = {job_of("echo", "one", 1), job_of("echo", "two", 2),
                           job_of("echo", "three", 3)};
  auto items = c().submit_batch(jobs);
  ASSERT_TRUE(items.ok()) << items.error().to_string();
  std::vector<std::uint64_t> ids;
  for (const auto& it : *items) ids.push_back(it.job_id);
  ids.push_back(999'999'999);
  // By the replica that accepted them, as tpoolctl bench does.
  auto r = c().wait_batch((*items)[0].replica, ids, {.deadline = 20s});
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  ASSERT_EQ(r->size(), 4u);
  const char* want[] = {"one", "two", "three"};
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ((*r)[i].job_id, ids[i]);
    EXPECT_EQ((*r)[i].code, 0);
    EXPECT_EQ((*r)[i].output, want[i]);
    EXPECT_TRUE((*r)[i].succeeded());
  }
  EXPECT_EQ((*r)[3].code, kNotFound);
  EXPECT_EQ((*r)[3].job_id, 999'999'999u);
  // Without a replica: the default channel.
  auto again = c().wait_batch({ids[1]});
  ASSERT_TRUE(again.ok()) << again.error().to_string();
  ASSERT_EQ(again->size(), 1u);
  EXPECT_EQ((*again)[0].output, "two");
}

TEST_F(ClientLib, StreamQueueReturnsEveryTagOnce) {
  auto s = c().stream({.on_result = {}, .deadline = 60s});
  constexpr std::uint64_t kJobs = 2000, kPerMessage = 50;
  for (std::uint64_t i = 0; i < kJobs; i += kPerMessage) {
    std::vector<Job> msg;
    for (std::uint64_t k = i; k < i + kPerMessage; ++k) {
      msg.push_back(job_of("echo", std::to_string(k), k));
    }
    ASSERT_TRUE(s->send(msg));
  }
  s->send(job_of("nope", "", kJobs));  // rejected in-band, not fatal to the stream
  s->close_send();
  std::vector<std::uint64_t> tags;
  int rejected = 0;
  while (auto r = s->next(20s)) {
    if (r->code != 0) {
      EXPECT_EQ(r->code, kNotFound);
      EXPECT_EQ(r->tag, kJobs);
      ++rejected;
      continue;
    }
    EXPECT_EQ(r->output, std::to_string(r->tag));
    tags.push_back(r->tag);
  }
  EXPECT_TRUE(s->ended());
  EXPECT_TRUE(s->finish().ok());
  EXPECT_EQ(rejected, 1);
  std::sort(tags.begin(), tags.end());
  std::vector<std::uint64_t> want(kJobs);
  std::iota(want.begin(), want.end(), 0);
  EXPECT_EQ(tags, want);
}

TEST_F(ClientLib, StreamCallbackSeesEveryResultBeforeFinishReturns) {
  std::atomic<int> ok{0};
  auto s = c().stream({.on_result =
                           [&ok](const tpool::client::JobResult& r) {
                             if (r.succeeded()) ok.fetch_add(1, std::memory_order_relaxed);
                           },
                       .deadline = 60s});
  for (int i = 0; i < 500; ++i) ASSERT_TRUE(s->send(job_of("echo", "x", 1)));
  EXPECT_TRUE(s->finish().ok());
  // finish() joined the reader thread: every callback has run (stream.h (3)).
  EXPECT_EQ(ok.load(std::memory_order_relaxed), 500);
}

TEST_F(ClientLib, HandlersStatsHealth) {
  auto hs = c().handlers();
  ASSERT_TRUE(hs.ok()) << hs.error().to_string();
  std::vector<std::string> names;
  for (const auto& h : *hs) names.push_back(h.name);
  EXPECT_NE(std::find(names.begin(), names.end(), "echo"), names.end());
  auto st = admin().stats();
  ASSERT_TRUE(st.ok()) << st.error().to_string();
  EXPECT_EQ(st->daemon().state(), "serving");
  EXPECT_FALSE(st->daemon().version().empty());
  auto h = c().health();
  ASSERT_TRUE(h.ok()) << h.error().to_string();
  EXPECT_EQ(*h, tpool::client::Health::kServing);
  auto rl = admin().reload();
  ASSERT_TRUE(rl.ok()) << rl.error().to_string();
  EXPECT_EQ(rl->handlers.size(), hs->size());
}

TEST(ClientDown, EveryCallIsUnavailableWhenNoDaemonListens) {
  // Start a daemon to learn a free loopback port, then stop it: nothing
  // listens there any more.
  std::string address;
  {
    DaemonProcess d("[metrics]\nenabled = false\n");
    ASSERT_TRUE(d.started()) << d.log();
    address = d.address();
    ASSERT_EQ(d.stop(), std::optional<int>(0));
  }
  ClientOptions o;
  o.address = address;
  o.default_deadline = 5s;
  o.max_attempts = 2;
  o.initial_backoff = 1ms;
  Client down(o);
  auto r = down.execute(job_of("echo", "x"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), kUnavailable) << r.error().to_string();
  EXPECT_EQ(down.health().error().code(), kUnavailable);
  EXPECT_EQ(down.stats().error().code(), kUnavailable);
  auto s = down.stream({.on_result = {}, .deadline = 5s});
  (void)s->send(job_of("echo", "x"));
  EXPECT_EQ(s->finish().code(), kUnavailable);
}

// UNAVAILABLE from a draining daemon is retried for a keyed job only; the
// daemon's rejected_draining counter counts the attempts.
TEST(ClientRetry, OnlyKeyedJobsAreRetriedOnUnavailable) {
  DaemonProcess d("[metrics]\nenabled = false\n");
  ASSERT_TRUE(d.started()) << d.log();
  ClientOptions o = at(d);
  o.max_attempts = 3;
  o.initial_backoff = 1ms;
  Client client(o);
  Client admin(admin_at(d));
  // A long job keeps the drain going while the test probes it.
  auto blocker = client.submit(job_of("sleep", "600000"));
  ASSERT_TRUE(blocker.ok()) << blocker.error().to_string();
  auto drain = std::async(std::launch::async, [&] { return admin.drain(60s, {.deadline = 90s}); });
  auto deadline = std::chrono::steady_clock::now() + 20s;
  while (client.health().ok() && *client.health() == tpool::client::Health::kServing &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(10ms);  // polling an external process, bounded
  }
  ASSERT_EQ(*client.health(), tpool::client::Health::kNotServing);
  auto rejected = [&] { return admin.stats()->daemon().rejected_draining(); };
  const auto before = rejected();

  auto unkeyed = client.execute(job_of("echo", "x"));
  EXPECT_EQ(unkeyed.error().code(), kUnavailable);
  EXPECT_EQ(rejected(), before + 1);

  Job keyed = job_of("echo", "x");
  keyed.idempotency_key = "retry-me";
  auto k = client.execute(keyed);
  EXPECT_EQ(k.error().code(), kUnavailable);
  EXPECT_EQ(rejected(), before + 1 + 3);

  ASSERT_TRUE(client.cancel(*blocker).ok());
  auto dr = drain.get();
  ASSERT_TRUE(dr.ok()) << dr.error().to_string();
  EXPECT_TRUE(dr->drained);
  EXPECT_EQ(d.wait_exit(30s), std::optional<int>(0)) << d.log();
}

}  // namespace
}  // namespace tpool::testing
