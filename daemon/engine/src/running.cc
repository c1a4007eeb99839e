// The running set and the deadline thread (E4 in engine.cc), and the
// per-thread ThreadJob the crash handler reads (thread_job.h).
//
// Every thread that runs jobs owns one Slot in a process-wide registry: a
// stack of the jobs it is inside (help_wait nests a job inside a fan-out
// parent's handler). The worker pushes and pops under its slot's mutex, which
// only the deadline thread (and running()) ever contends for, so the hot path
// takes an uncontended lock twice per job. The registry is never destroyed
// and a slot is reused once its thread exits, so a worker that outlives an
// engine (or an engine that outlives a worker) never touches freed memory.
#include <pthread.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <unordered_set>

#include "tpool/engine/engine.h"
#include "tpool/engine/thread_job.h"

namespace tpool::engine {
namespace {

// (T3) initial-exec: a signal handler reads it without __tls_get_addr.
thread_local ThreadJob t_job __attribute__((tls_model("initial-exec")));

struct Slot;

struct Registry {
  Mutex mu;
  std::vector<Slot*> slots GUARDED_BY(mu);  // append-only, never freed
};

Registry& registry() {
  static Registry* r = new Registry;  // immortal: worker threads may exit after main
  return *r;
}

struct Slot {
  Mutex mu;
  std::vector<JobPtr> stack GUARDED_BY(mu);  // outermost first
  bool free GUARDED_BY(registry().mu) = false;
};

// Gives the thread's slot back for reuse when the thread exits.
struct SlotOwner {
  Slot* slot = nullptr;
  ~SlotOwner() {
    if (slot == nullptr) return;
    MutexLock lock(registry().mu);
    slot->free = true;
  }
};
thread_local SlotOwner t_slot;

Slot& my_slot(void (*thread_init)()) {
  if (t_slot.slot != nullptr) return *t_slot.slot;
  {
    MutexLock lock(registry().mu);
    for (Slot* s : registry().slots) {
      if (s->free) {
        s->free = false;
        t_slot.slot = s;
        break;
      }
    }
    if (t_slot.slot == nullptr) {
      registry().slots.push_back(new Slot);
      t_slot.slot = registry().slots.back();
    }
  }
  if (thread_init != nullptr) thread_init();
  return *t_slot.slot;
}

std::int64_t steady_ns() noexcept {
  return std::chrono::steady_clock::now().time_since_epoch().count();
}

}  // namespace

const ThreadJob* this_thread_job() noexcept {
  return &t_job;
}

ThreadJobScope::ThreadJobScope(std::string_view handler, std::uint64_t job_id) noexcept
    : saved_(t_job) {
  t_job = ThreadJob{handler.data(), handler.size(), job_id};
  // (T1) the signal handler runs on this thread: a compiler barrier is all
  // that orders these stores before the handler call.
  std::atomic_signal_fence(std::memory_order_release);
}

ThreadJobScope::~ThreadJobScope() {
  std::atomic_signal_fence(std::memory_order_release);
  t_job = saved_;
}

void Engine::enter_running(const JobPtr& job) {
  Slot& s = my_slot(limits_.thread_init);
  MutexLock lock(s.mu);
  s.stack.push_back(job);  // (inv 4) the running set's reference
}

void Engine::leave_running(const Job& job) {
  Slot& s = *t_slot.slot;  // set by enter_running on this thread
  JobPtr last;             // dropped outside the lock
  MutexLock lock(s.mu);
  auto it = std::find_if(s.stack.rbegin(), s.stack.rend(),
                         [&](const JobPtr& j) { return j.get() == &job; });
  if (it != s.stack.rend()) {
    last = std::move(*it);
    s.stack.erase(std::next(it).base());
  }
}

namespace {

// The running jobs of one engine, copied out of the slots (E4: the deadline
// thread works on them without holding a slot's lock, so a worker never
// waits for a waiter callback).
template <class Pred>
std::vector<JobPtr> collect(Pred mine) {
  std::vector<JobPtr> out;
  MutexLock rlock(registry().mu);
  for (Slot* s : registry().slots) {
    MutexLock slock(s->mu);
    for (const auto& j : s->stack) {
      if (mine(*j)) out.push_back(j);
    }
  }
  return out;
}

}  // namespace

void Engine::enforce() {
  MutexLock lock(enforce_mu_);
  auto jobs = collect([this](const Job& j) { return &j.engine() == this; });
  const auto now = Clock::now();
  const std::int64_t now_ns = now.time_since_epoch().count();
  const std::int64_t grace_ns = std::chrono::nanoseconds(limits_.cancel_grace).count();
  std::uint64_t after_end = 0;
  for (const auto& jp : jobs) {
    Job& job = *jp;
    if (!job.final()) {
      const Clock::time_point due = job.deadline();
      const bool deadline = due != Clock::time_point::max() && due <= now;
      if (deadline) {
        if (stop_seen(job) == 0) set_stop_seen(job, now_ns);
        // (inv 5) the caller's answer does not wait for the handler; (inv 6)
        // once it is given, the call's group flag may be gone.
        job.detach_group();
        job.finish(JobState::kRunning, JobState::kTimedOut, {},
                   "job " + std::to_string(job.id_) + " (" + job.handler_name() +
                       ") timed out; its handler has not returned (it does not check "
                       "cancellation) and keeps a worker until it does");
      } else if (job.is_cancelled()) {
        if (stop_seen(job) == 0) {
          set_stop_seen(job, now_ns);
        } else if (now_ns - stop_seen(job) >= grace_ns) {
          job.detach_group();  // (inv 6)
          job.finish(JobState::kRunning, JobState::kCancelled, {},
                     "job " + std::to_string(job.id_) + " (" + job.handler_name() +
                         ") was cancelled; its handler did not return within " +
                         std::to_string(limits_.cancel_grace.count()) +
                         " ms (server.cancel_grace_ms) and keeps a worker until it does");
        }
      }
    }
    // Final, and still in the set: ended by us (or ended by its handler
    // after being told to stop), with the handler still inside or about to
    // leave. A job never told to stop is only on its way out of the set.
    const std::int64_t seen = stop_seen(job);
    if (!job.final() || seen == 0) continue;
    ++after_end;
    if (now_ns - seen >= grace_ns && job.claim_ignored_cancellation()) {
      ignored_cancellation_.fetch_add(1, std::memory_order_relaxed);
      spdlog::warn(
          "handler {} ignores cancellation: job {} ended {} but the handler is still running "
          "{} ms after it was told to stop; it holds a worker until it returns",
          job.handler_name(), job.id_, to_string(job.state()), (now_ns - seen) / 1000000);
    }
  }
  // (E4) The entries of jobs no longer in the running set go: their
  // handlers returned. Ids are never reused, so a later job cannot find one.
  if (!stop_seen_.empty()) {
    std::unordered_set<std::uint64_t> present;
    for (const auto& jp : jobs) present.insert(jp->id());
    std::erase_if(stop_seen_, [&](const auto& e) { return !present.contains(e.first); });
  }
  // relaxed: a gauge read only for reporting.
  running_after_end_.store(after_end, std::memory_order_relaxed);
}

std::vector<RunningJob> Engine::running() const {
  MutexLock lock(enforce_mu_);  // stop_seen_ (E4)
  auto jobs = collect([this](const Job& j) { return &j.engine() == this; });
  const std::int64_t now_ns = steady_ns();
  std::vector<RunningJob> out;
  out.reserve(jobs.size());
  for (const auto& j : jobs) {
    RunningJob r;
    r.id = j->id();
    r.handler = j->handler_name();
    r.running_for = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::nanoseconds(now_ns - j->started_ns_.load(std::memory_order_relaxed)));
    if (const std::int64_t seen = stop_seen(*j); seen != 0) {
      r.told_to_stop_for = std::chrono::duration_cast<std::chrono::milliseconds>(
          std::chrono::nanoseconds(now_ns - seen));
    }
    r.state = j->state();
    out.push_back(std::move(r));
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
  return out;
}

std::int64_t Engine::stop_seen(const Job& job) const {
  const auto it = stop_seen_.find(job.id());
  return it == stop_seen_.end() ? 0 : it->second;
}

void Engine::set_stop_seen(Job& job, std::int64_t ns) {
  stop_seen_[job.id()] = ns;
}

void Engine::enforce_loop() {
  pthread_setname_np(pthread_self(), "tpool-deadline");
  MutexLock lock(enforce_stop_mu_);
  while (!enforce_stop_) {
    enforce_stop_cv_.wait_until(lock, std::chrono::steady_clock::now() + limits_.enforce_interval);
    if (enforce_stop_) break;
    lock.unlock();
    enforce();
    lock.lock();
  }
}

}  // namespace tpool::engine
