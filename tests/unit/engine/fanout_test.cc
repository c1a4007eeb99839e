// Fan-out (daemon/engine/src/fanout.cc): a handler's run_children runs its
// children as nested pool tasks and help_waits; children the pool cannot take
// run inline on the parent's thread; children share the parent's
// cancellation; a child's failure reaches the parent's handler; children are
// not jobs (no id, no counters, no result store).
#include "engine_test_support.h"

namespace tpool::engine::testing {
namespace {

class EngineFanOut : public EngineBench {};

std::string ok_children(int n, const std::string& out) {
  std::string s = "0";
  for (int i = 0; i < n; ++i) s += "|0:" + out + ":";
  return s;
}

TEST_F(EngineFanOut, ChildrenCompleteAndTheParentSeesEveryResult) {
  start();
  Recorder::Call c = finish(spec("fanout", "echo 5 hi"));
  EXPECT_EQ(c.state, JobState::kSucceeded) << c.message;
  EXPECT_EQ(c.output, ok_children(5, "hi"));
  ASSERT_TRUE(idle());
  EXPECT_EQ(ctl_.calls_now(), 6);
  // Children are not jobs: only the parent was submitted and counted.
  EXPECT_EQ(counts("fanout").submitted, 1u);
  EXPECT_EQ(counts("fanout").succeeded, 1u);
  EXPECT_EQ(counts("echo").submitted, 0u);
  EXPECT_EQ(done_.total(), 1u);
}

TEST_F(EngineFanOut, ManyChildrenOnTwoWorkers) {
  start();
  Recorder::Call c = finish(spec("fanout", "where 200 w"));
  EXPECT_EQ(c.state, JobState::kSucceeded) << c.message;
  EXPECT_EQ(c.output, ok_children(200, "w"));
  std::lock_guard lock(ctl_.mu);
  EXPECT_EQ(ctl_.child_threads.size(), 200u);
}

TEST_F(EngineFanOut, ManyParentsFanningOutAtOnceAllFinish) {
  // Every worker may be a parent waiting for children: help_wait keeps the
  // pool going (no deadlock), and each parent gets its own children's results.
  start();
  std::vector<std::uint64_t> ids;
  for (int i = 0; i < 16; ++i) {
    ids.push_back(run(spec("fanout", "echo 8 p" + std::to_string(i)))->id());
  }
  for (int i = 0; i < 16; ++i) {
    Recorder::Call c = done_.wait_job(ids[i]);
    EXPECT_EQ(c.state, JobState::kSucceeded) << c.message;
    EXPECT_EQ(c.output, ok_children(8, "p" + std::to_string(i)));
  }
  EXPECT_TRUE(done_.each_once(ids));
}

TEST_F(EngineFanOut, AChildsFailureReachesTheParent) {
  start();
  Recorder::Call c = finish(spec("fanout", "fail 3 2:bad child input"));
  EXPECT_EQ(c.state, JobState::kFailed);
  EXPECT_EQ(c.message,
            "child 0 of fail failed: bad child input [0|2::bad child input|2::bad child "
            "input|2::bad child input]");
  EXPECT_TRUE(c.output.empty());  // a failed call keeps no output
  EXPECT_EQ(counts("fanout").failed, 1u);
}

TEST_F(EngineFanOut, AnUnknownChildHandlerFailsEveryChild) {
  start();
  Recorder::Call c = finish(spec("fanout", "nope 2 x"));
  EXPECT_EQ(c.state, JobState::kFailed);
  // TPOOL_STATUS_UNKNOWN_HANDLER for the call and for each child.
  EXPECT_NE(c.message.find("run_children failed: [7|7::"), std::string::npos) << c.message;
  EXPECT_NE(c.message.find("no handler named 'nope' is loaded for the child jobs"),
            std::string::npos)
      << c.message;
  EXPECT_EQ(ctl_.calls_now(), 1);
}

TEST_F(EngineFanOut, GrandchildrenRunAsNestedJobsOfTheRoot) {
  start();
  Recorder::Call c = finish(spec("fanout", "fanout 2 echo 3 g"));
  EXPECT_EQ(c.state, JobState::kSucceeded) << c.message;
  const std::string grand = ok_children(3, "g");
  EXPECT_EQ(c.output, "0|0:" + grand + ":|0:" + grand + ":");
  EXPECT_EQ(ctl_.calls_now(), 1 + 2 + 6);
  EXPECT_EQ(done_.total(), 1u);
}

// Children the pool cannot take run inline on the parent's thread:
// fan-out never fails for lack of room.
TEST_F(EngineFanOut, ChildrenThePoolCannotTakeRunInlineOnTheParentsThread) {
  BenchOptions o;
  o.threads = 2;
  o.queue_capacity = 2;
  start(std::move(o));
  auto holder = run(spec("block"));  // one descriptor and one worker
  ASSERT_TRUE(ctl_.wait_entered(1));
  const std::uint64_t refused_before = pool().stats().rejected_full;
  // The parent takes the other descriptor: no room for any child.
  Recorder::Call c = finish(spec("fanout", "where 5 in"));
  EXPECT_EQ(c.state, JobState::kSucceeded) << c.message;
  EXPECT_EQ(c.output, ok_children(5, "in"));
  {
    std::lock_guard lock(ctl_.mu);
    ASSERT_EQ(ctl_.parent_threads.size(), 1u);
    ASSERT_EQ(ctl_.child_threads.size(), 5u);
    for (auto t : ctl_.child_threads) EXPECT_EQ(t, ctl_.parent_threads[0]);
  }
  EXPECT_GT(pool().stats().rejected_full, refused_before);
  EXPECT_FALSE(holder->final());
}

TEST_F(EngineFanOut, ChildrenThePoolTakesOnlyInPartAllComplete) {
  BenchOptions o;
  o.threads = 2;
  o.queue_capacity = 4;
  start(std::move(o));
  auto holder = run(spec("block"));
  ASSERT_TRUE(ctl_.wait_entered(1));
  Recorder::Call c = finish(spec("fanout", "where 9 part"));
  EXPECT_EQ(c.state, JobState::kSucceeded) << c.message;
  EXPECT_EQ(c.output, ok_children(9, "part"));
  // The only free worker is the parent's: it ran every child itself, the
  // pool's (help_wait) and the ones left over (inline).
  std::lock_guard lock(ctl_.mu);
  for (auto t : ctl_.child_threads) EXPECT_EQ(t, ctl_.parent_threads[0]);
}

TEST_F(EngineFanOut, ChildrenShareTheParentsCancellation) {
  BenchOptions o;
  o.threads = 3;
  start(std::move(o));
  auto parent = run(spec("fanout", "spin 2 x"));
  ASSERT_TRUE(ctl_.wait_entered(2));  // both children spinning
  EXPECT_FALSE(parent->final());
  parent->cancel();
  Recorder::Call c = done_.wait_job(parent->id());
  EXPECT_EQ(c.state, JobState::kCancelled) << c.message;
  EXPECT_EQ(c.message,
            "cancelled; child 0 of spin failed: spin saw the cancellation and stopped [0|3::spin "
            "saw the cancellation and stopped|3::spin saw the cancellation and stopped]");
  ASSERT_TRUE(idle());
}

// A child that had not started when the parent was cancelled does not run
// its handler; it says why (Child::cancelled_before_start).
TEST_F(EngineFanOut, AChildNotStartedWhenTheParentIsCancelledDoesNotRun) {
  BenchOptions o;
  o.threads = 1;  // the parent's worker runs its children one after the other
  start(std::move(o));
  auto parent = run(spec("fanout", "block 2 c"));
  ASSERT_TRUE(ctl_.wait_entered(1));  // the first child holds the only worker
  parent->cancel();
  ctl_.open_gate();
  Recorder::Call c = done_.wait_job(parent->id());
  EXPECT_EQ(c.state, JobState::kCancelled) << c.message;
  // The first child returned OK after the cancellation (the host discards
  // it); the second never started.
  EXPECT_NE(c.message.find("|3::the parent job was cancelled before this child started]"),
            std::string::npos)
      << c.message;
  EXPECT_EQ(ctl_.entered_now(), 1);
  ASSERT_TRUE(idle());
}

TEST_F(EngineFanOut, AChildNotStartedWhenTheParentsDeadlinePassedDoesNotRun) {
  BenchOptions o;
  o.threads = 1;
  start(std::move(o));
  JobSpec s = spec("fanout", "block 2 c");
  s.deadline = std::chrono::steady_clock::now() + 100ms;
  auto parent = run(s);
  ASSERT_TRUE(ctl_.wait_entered(1));
  ASSERT_TRUE(eventually([&] { return parent->deadline_passed(); }));
  ctl_.open_gate();
  Recorder::Call c = done_.wait_job(parent->id());
  EXPECT_EQ(c.state, JobState::kTimedOut) << c.message;
  EXPECT_NE(c.message.find("|4::the parent job's deadline passed before this child started]"),
            std::string::npos)
      << c.message;
  EXPECT_EQ(ctl_.entered_now(), 1);
  ASSERT_TRUE(idle());
}

TEST_F(EngineFanOut, AParentsDeadlineReachesItsChildren) {
  BenchOptions o;
  o.threads = 1;
  start(std::move(o));
  // The child spins until the root's deadline passes (it polls the root's
  // JobServices), then the parent's handler returns and the job times out.
  JobSpec s = spec("fanout", "spin 1 x");
  s.deadline = std::chrono::steady_clock::now() + 100ms;
  auto parent = run(s);
  Recorder::Call c = done_.wait_job(parent->id());
  EXPECT_EQ(c.state, JobState::kTimedOut) << c.message;
  EXPECT_NE(c.message.find("[0|3::spin saw the cancellation"), std::string::npos) << c.message;
  ASSERT_TRUE(idle());
  EXPECT_EQ(ctl_.calls_now(), 2);  // the parent and its one child
}

}  // namespace
}  // namespace tpool::engine::testing
