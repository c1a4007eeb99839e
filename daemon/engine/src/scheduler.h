// Scheduler: the engine's timer for jobs that must wait before an attempt (a
// delayed job's first attempt, a retry's backoff). One thread and a min-heap
// by due time; no thread or timer per job. When a job is due the scheduler
// queues it through Engine::queue_scheduled (an in-flight slot, then the
// pool); when the engine is full it waits as a CapacityWaiter for a task end
// instead of polling.
//
// Thread safety, cited as K1..K5:
//  (K1) heap_, ready_, closed_, stop_ and waiting_capacity_ are guarded by
//       mu_. A held job is in exactly one of heap_ (not yet due) and ready_
//       (due, in due order, not yet queued), or in the hands of run_due()
//       between popping it from ready_ and queueing it; its state is
//       SCHEDULED throughout (inv 1 in job.h).
//  (K2) run_due() is serialised by run_mu_ (the thread, or a test calling it
//       with the thread off), so ready_'s front is taken by one caller at a
//       time and due jobs are queued in due order (ties: in add order).
//  (K3) A held job that ends while waiting (Job::cancel: SCHEDULED -> final)
//       stays held until it is due; queue_scheduled then finds it final and
//       drops it. The scheduler's reference keeps it alive meanwhile (inv 4).
//  (K4) close() (drain) sets closed_ and ends every held job, under the
//       same mu_ that add() checks closed_ under: a job added after close()
//       is refused (add() returns false and the caller ends it), so no job is
//       left held after a drain.
//  (K6) cancel_group() ends the held jobs of a cancelled call (its group
//       flag, job.h inv 6: the call outlives their report) at once, where
//       they would otherwise wait for their due time to find the flag: a
//       Stream the client cancelled finishes without waiting for its
//       delayed jobs and retry backoffs. It ends them as Job::cancel does
//       (K3: they stay held until due, and queue_scheduled drops them); a
//       job run_due() has already popped is not found, and the pool sees the
//       flag when it starts it.
//  (K5) The thread runs only with the real clock (the engine's clock is
//       steady_clock); with an injected clock tests call run_due() after
//       advancing it. on_capacity() (a worker's task end) only sets a flag
//       and notifies: it never queues a job itself.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <thread>
#include <vector>

#include "tpool/common/mutex.h"
#include "tpool/engine/engine.h"

namespace tpool::engine {

class Scheduler final : public CapacityWaiter {
 public:
  using TimePoint = Engine::Clock::time_point;

  // thread: run the timer thread (K5).
  Scheduler(Engine& engine, bool thread);
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Holds job (SCHEDULED) until due. False when closed (K4): the caller ends
  // the job itself.
  bool add(JobPtr job, TimePoint due) EXCLUDES(mu_);
  // Queues the jobs that are due at the engine's now(), in due order, until
  // one finds no room (then waits for capacity, K5). Returns how many were
  // handed to the pool.
  std::size_t run_due() EXCLUDES(run_mu_, mu_);
  // Ends every held job with `message` (CANCELLED); later adds are refused (K4).
  void close(const std::string& why) EXCLUDES(mu_);
  // (K6) Ends, CANCELLED, every held job whose call's group flag is `group`
  // (a Stream the client cancelled); they stay held until due (K3).
  // Returns how many it ended.
  std::size_t cancel_group(const std::atomic<bool>* group) EXCLUDES(mu_);
  std::size_t size() const EXCLUDES(mu_);
  // The earliest due time held (TimePoint::max() when none).
  TimePoint next_due() const EXCLUDES(mu_);

  void on_capacity() override EXCLUDES(mu_);

 private:
  struct Entry {
    TimePoint due;
    std::uint64_t seq;  // add order: ties run in it
    JobPtr job;
    bool operator>(const Entry& o) const noexcept {
      return due != o.due ? due > o.due : seq > o.seq;
    }
  };
  void loop() EXCLUDES(mu_);
  bool runnable_locked(TimePoint now) const REQUIRES(mu_);

  Engine& engine_;
  Mutex run_mu_;  // (K2)
  mutable Mutex mu_;
  CondVar cv_;
  std::vector<Entry> heap_ GUARDED_BY(mu_);  // std::push_heap with greater<>: min-heap
  std::deque<JobPtr> ready_ GUARDED_BY(mu_);
  std::uint64_t next_seq_ GUARDED_BY(mu_) = 0;
  bool closed_ GUARDED_BY(mu_) = false;
  bool stop_ GUARDED_BY(mu_) = false;
  bool waiting_capacity_ GUARDED_BY(mu_) = false;
  std::thread thread_;
};

// The backoff before the attempt after `failed` failed attempts (>= 1):
// uniform in [0, min(cap, base * 2^(failed-1))] with u01 in [0, 1) ("full
// jitter", after the AWS Architecture Blog's "Exponential Backoff And
// Jitter"). cap 0 means no cap but the hour every backoff is held to.
std::chrono::milliseconds backoff_delay(std::chrono::milliseconds base,
                                        std::chrono::milliseconds cap, std::uint32_t failed,
                                        double u01) noexcept;

}  // namespace tpool::engine
