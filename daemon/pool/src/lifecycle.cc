// Pool construction, workers, watchdog, shutdown, waiting and stats.
#include <algorithm>
#include <string>

#include "pool_internal.h"

#if defined(__linux__)
#include <pthread.h>
#endif

namespace tpool {

using detail::Descriptor;
using detail::DescState;
using detail::Worker;

Pool::Impl::Impl(Config c)
    : cfg(c.resolved()),  // every default filled in, in that one place
      variant(cfg.scheduler_variant),
      free_ring(2 * cfg.queue_capacity),
      nonempty(1) {
  lanes_on = effective_variant() == SchedulerVariant::kLaneExtension && cfg.blocking_workers > 0;
  core_slots = cfg.max_threads;
  total_slots = core_slots + cfg.max_overflow_workers;
  // Per-slot DescCaches may hold at most half the descriptors in all, so a
  // blocked external submitter is never starved by cached free descriptors.
  const std::size_t slots = total_slots + cfg.max_submitters;
  cache_limit = std::min<std::size_t>(32, cfg.queue_capacity / (2 * slots));
  wake_free_batch = std::max<std::size_t>(1, std::min<std::size_t>(256, cfg.queue_capacity / 4));
  descs = std::make_unique<Descriptor[]>(cfg.queue_capacity);
  for (std::uint32_t i = 0; i < cfg.queue_capacity; ++i) {
    detail::push_always(free_ring, i);
  }
  for (auto& r : inject)
    r = std::make_unique<detail::BoundedRing<detail::Entry>>(2 * cfg.queue_capacity);
  nonempty = std::vector<std::atomic<std::uint64_t>>((total_slots + 63) / 64);
  ext.shared = true;
  workers.reserve(total_slots);
  for (std::size_t i = 0; i < total_slots; ++i) {
    auto w = std::make_unique<Worker>();
    w->index = static_cast<std::uint32_t>(i);
    w->overflow = i >= core_slots;
    w->lane = (lanes_on && i < cfg.blocking_workers) ? Lane::kBlocking : Lane::kDefault;
    if (lanes_on) {
      w->drains[0] = true;  // blocking workers help the default lane
      // Overflow workers drain both lanes: a stall in either lane (a worker
      // of any lane stuck on a task, docs/algorithms.md "Watchdog") is
      // served by them, whatever the lane of the queued work.
      w->drains[1] = w->lane == Lane::kBlocking || w->overflow || cfg.cpu_helps_blocking;
    } else {
      w->drains[0] = true;
      w->drains[1] = false;
    }
    w->local = std::make_unique<detail::LocalQueue>(cfg.queue_kind, cfg.local_queue_capacity);
    workers.push_back(std::move(w));
  }
  submitters.reserve(cfg.max_submitters);
  for (std::size_t i = 0; i < cfg.max_submitters; ++i) {
    auto s = std::make_unique<detail::Submitter>();
    s->queue = std::make_unique<detail::RingQueue<detail::Entry>>(cfg.local_queue_capacity);
    submitters.push_back(std::move(s));
  }
}

Pool::Impl::~Impl() = default;

bool Pool::Impl::start_worker(std::size_t slot, bool overflow) {
  Worker* w = workers[slot].get();
  w->exited.store(false, std::memory_order_relaxed);
  w->retire.store(false, std::memory_order_relaxed);
  w->sleep.store(detail::SleepState::kRunning, std::memory_order_relaxed);
  w->wd_idle_ticks = 0;
  // (inv 6) A new worker counts as awake before it can take work.
  for (std::size_t l = 0; l < kLaneCount; ++l) {
    if (w->drains[l]) awake[l].fetch_add(1, std::memory_order_seq_cst);
  }
  try {
    w->thread = std::thread([this, w] { worker_main(w); });
    w->spawned.store(true, std::memory_order_release);  // pairs with stats()' acquire
  } catch (const std::system_error&) {
    for (std::size_t l = 0; l < kLaneCount; ++l) {
      if (w->drains[l]) awake[l].fetch_sub(1, std::memory_order_seq_cst);
    }
    return false;
  }
#if defined(__linux__)
  const std::string name = cfg.name.substr(0, 8) + (overflow ? "-o" : "-w") + std::to_string(slot);
  pthread_setname_np(w->thread.native_handle(), name.substr(0, 15).c_str());
#endif
  if (overflow) {
    overflow_active.fetch_add(1, std::memory_order_relaxed);
  } else {
    started.fetch_add(1, std::memory_order_release);
  }
  return true;
}

Status Pool::Impl::start() {
  std::lock_guard lk(spawn_mu);
  for (std::size_t i = 0; i < cfg.min_threads; ++i) {
    if (!start_worker(i, false)) {
      return Status::InvalidArgument("could not start worker thread " + std::to_string(i) +
                                     "; lower min_threads or raise the process's thread limit");
    }
  }
  const bool wd = cfg.watchdog_interval.count() > 0 && cfg.max_overflow_workers > 0;
  if (wd && cfg.watchdog_driver == WatchdogDriver::kThread) {
    watchdog = std::thread([this] { watchdog_main(); });
  }
  return Status::Ok();
}

void Pool::Impl::watchdog_main() {
  std::unique_lock lk(wd_mu);
  while (!wd_stop) {
    // The real clock paces the thread; tick() judges stalls on cfg.clock.
    if (wd_cv.wait_for(lk, cfg.watchdog_interval, [&] { return wd_stop; })) break;
    lk.unlock();
    tick();
    lk.lock();
  }
}

// The watchdog's stall rule (docs/algorithms.md, "Watchdog"): a worker is
// stalled when it has run one task for longer than
// blocking_promotion_timeout, whatever its lane or the task's, except a
// blocking worker running a blocking-lane task (blocking work may block:
// that is what the lane is for). A blocking worker that helped the default
// lane and got stuck there is stalled like a default worker: its own lane
// waits behind it. Watchdog thread (or the manual driver) only.
bool Pool::Impl::stalled(const Worker& w, std::int64_t now) const noexcept {
  // Acquire pairs with run_task's release store of the stamp.
  const std::uint64_t s = w.task_stamp.load(std::memory_order_acquire);
  if (!detail::TaskStamp::running(s)) return false;
  if (w.lane == Lane::kBlocking && detail::TaskStamp::lane(s) == Lane::kBlocking) return false;
  return now - detail::TaskStamp::start_ns(s) > cfg.blocking_promotion_timeout.count();
}

// Is work of `lane` queued where a worker that drains the lane could take
// it (inject ring, the lane's local queues, submitter queues for the default
// lane)? Sizes are approximate: a hint for the tick's wake, not a handshake.
// LIFO slots are left out: only their owner drains them, and an owner never
// parks with its slot full (inv 6).
bool Pool::Impl::lane_has_queued(Lane lane) const noexcept {
  const auto l = static_cast<std::size_t>(lane);
  if (inject[l]->size_approx() > 0) return true;
  if (!uses_local_queues()) return false;
  for (std::size_t i = 0; i < total_slots; ++i) {
    if (workers[i]->lane == lane && workers[i]->local->size_approx() > 0) return true;
  }
  if (lane == Lane::kDefault) {
    for (const auto& s : submitters) {
      if (s->in_use.load(std::memory_order_acquire) && s->queue->size_approx() > 0) return true;
    }
  }
  return false;
}

// One watchdog tick (the seed's watchdogMain body): join retired overflow
// workers, count stalled workers (stalled()), spawn at most one overflow
// worker, wake one sleeping worker per lane with queued work, and tell idle
// overflow workers to retire.
void Pool::Impl::tick() {
  std::lock_guard lk(spawn_mu);  // serialises with spawn, shutdown's joins
  // stop: join_all is joining the threads without spawn_mu (see there).
  if (joined || stop.load(std::memory_order_relaxed)) return;
  // Reap: join overflow workers that exited since the last tick.
  for (std::size_t i = core_slots; i < total_slots; ++i) {
    Worker& w = *workers[i];
    if (w.thread.joinable() && w.exited.load(std::memory_order_acquire)) {
      w.thread.join();
      w.spawned.store(false, std::memory_order_release);
      overflow_active.fetch_sub(1, std::memory_order_relaxed);
      overflow_retired.fetch_add(1, std::memory_order_relaxed);
    }
  }
  const std::int64_t now = now_ns();
  std::size_t stalled_count = 0;
  for (std::size_t i = 0; i < total_slots; ++i) {
    Worker& w = *workers[i];
    if (!w.thread.joinable() || !stalled(w, now)) continue;
    ++stalled_count;
    const std::uint64_t task = w.tasks_started.load(std::memory_order_relaxed);
    if (w.wd_stalled_task != task) {  // count each stalled task once
      w.wd_stalled_task = task;
      stalls_detected.fetch_add(1, std::memory_order_relaxed);
    }
  }
  stalled_now.store(stalled_count, std::memory_order_relaxed);
  if (stalled_count > 0 && accepting.load(std::memory_order_relaxed)) {
    for (std::size_t i = core_slots; i < total_slots; ++i) {
      if (!workers[i]->thread.joinable()) {
        if (start_worker(i, true)) overflow_spawned.fetch_add(1, std::memory_order_relaxed);
        break;
      }
    }
  }
  // A backstop for wakes that were skipped on an awake count which includes
  // a worker stuck in a task (coalescing skips while awake[lane] > 0, and a
  // stuck worker stays counted): a lane with queued work never waits longer
  // than one tick while a worker that drains it sleeps. wake_one wakes at
  // most one, and only a worker that is asleep (nobody: nothing to do).
  for (std::size_t l = 0; l < (lanes_on ? kLaneCount : 1); ++l) {
    if (lane_has_queued(static_cast<Lane>(l))) (void)wake_one(static_cast<Lane>(l));
  }
  // Retire: an overflow worker parked through two whole ticks (2 x interval).
  for (std::size_t i = core_slots; i < total_slots; ++i) {
    Worker& w = *workers[i];
    if (!w.thread.joinable() || w.exited.load(std::memory_order_acquire)) continue;
    if (!w.parked.load(std::memory_order_relaxed)) {
      w.wd_idle_ticks = 0;
      continue;
    }
    if (++w.wd_idle_ticks > 2) {
      {
        std::lock_guard plk(w.park_mu);
        w.retire.store(true, std::memory_order_release);
      }
      w.park_cv.notify_one();
    }
  }
}

std::uint64_t Pool::Impl::sum_accepted() const {
  std::uint64_t n = 0;
  for_each_counters([&](const detail::Counters& c) {
    n += c.accepted.load(std::memory_order_relaxed) - c.unaccepted.load(std::memory_order_relaxed);
  });
  return n;
}

std::uint64_t Pool::Impl::sum_finished() const {
  std::uint64_t n = 0;
  for_each_counters([&](const detail::Counters& c) {
    n += c.completed.load(std::memory_order_relaxed) + c.failed.load(std::memory_order_relaxed) +
         c.cancelled.load(std::memory_order_relaxed);
  });
  return n;
}

void Pool::Impl::for_each_counters(const std::function<void(const detail::Counters&)>& f) const {
  f(ext);
  for (const auto& w : workers) f(w->counters);
  for (const auto& s : submitters) f(s->counters);
}

void Pool::Impl::join_all() {
  {
    std::lock_guard lk(wd_mu);
    wd_stop = true;
  }
  wd_cv.notify_all();
  if (watchdog.joinable()) watchdog.join();
  {
    // Set stop under spawn_mu, then join WITHOUT it: a worker may be inside
    // notify() waiting for spawn_mu to grow the pool (a spill from an inject
    // ring while cancelled or timed-out work is still queued). Holding
    // spawn_mu across the joins deadlocked that worker against this thread
    // (found by the fuzz harness on a loaded machine). After stop is set
    // nothing starts a worker: notify() checks stop under spawn_mu, tick()
    // cannot run (the watchdog is joined above), and start() ran before. So
    // the joins below are the only writers of the threads' state; callers of
    // join_all do not race each other (shutdown_mu, or the destructor).
    std::lock_guard lk(spawn_mu);
    if (joined) return;
    stop.store(true, std::memory_order_seq_cst);
  }
  for (auto& w : workers) {
    { std::lock_guard plk(w->park_mu); }
    w->park_cv.notify_all();
  }
  for (std::size_t i = 0; i < total_slots; ++i) {
    Worker& w = *workers[i];
    if (!w.thread.joinable()) continue;
    w.thread.join();
    w.spawned.store(false, std::memory_order_release);
    if (w.overflow) {
      overflow_active.fetch_sub(1, std::memory_order_relaxed);
      overflow_retired.fetch_add(1, std::memory_order_relaxed);
    }
  }
  std::lock_guard lk(spawn_mu);
  joined = true;
}

// ---------------------------------------------------------------------------

Pool::Pool(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {
  impl_->self = this;
}

Result<std::unique_ptr<Pool>> Pool::create(Config config) {
  if (Status s = config.validate(); !s.ok()) return s;
  auto pool = std::unique_ptr<Pool>(new Pool(std::make_unique<Impl>(std::move(config))));
  if (Status s = pool->impl_->start(); !s.ok()) {
    pool->impl_->accepting.store(false);
    pool->impl_->join_all();
    return s;
  }
  return pool;
}

Pool::~Pool() {
  const Status s = shutdown(ShutdownMode::kDrain);
  (void)s;
  impl_->join_all();  // after a timed-out shutdown: wait for the running tasks
}

const Config& Pool::config() const noexcept {
  return impl_->cfg;
}

Result<TaskHandle> Pool::submit(Task task, const SubmitOptions& opts) {
  return impl_->submit_one(task, opts);
}

Result<TaskHandle> Pool::try_submit(Task task, const SubmitOptions& opts) {
  SubmitOptions o = opts;
  o.backpressure = Backpressure::kReject;
  return impl_->submit_one(task, o);
}

Result<std::size_t> Pool::submit_batch(std::span<const Task> tasks, const SubmitOptions& opts,
                                       std::span<TaskHandle> handles) {
  return impl_->submit_many(tasks, opts, handles);
}

Result<TaskOutcome> Pool::wait(TaskHandle h, std::chrono::nanoseconds timeout) {
  Impl& p = *impl_;
  if (!h.valid() || h.index >= p.cfg.queue_capacity) {
    return Status::InvalidArgument(
        "wait() needs the handle of a task submitted with waitable = true");
  }
  Descriptor& d = p.descs[h.index];
  auto stale = [&] { return d.generation.load(std::memory_order_acquire) != h.generation; };
  auto terminal = [&](DescState s) {
    return s == DescState::kCompleted || s == DescState::kFailed || s == DescState::kCancelled;
  };
  if (stale()) return Status::StaleHandle("this task was already waited for or detached");
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  DescState s = d.state.load(std::memory_order_acquire);  // pairs with finish()'s release
  if (!terminal(s)) {
    p.task_waiters.fetch_add(1, std::memory_order_seq_cst);  // pairs with finish()'s fence
    std::unique_lock lk(p.done_mu);
    auto ready = [&] {
      s = d.state.load(std::memory_order_acquire);
      return terminal(s) || stale();
    };
    bool ok = true;
    if (timeout.count() < 0) {
      p.done_cv.wait(lk, ready);
    } else {
      ok = p.done_cv.wait_until(lk, deadline, ready);
    }
    lk.unlock();
    p.task_waiters.fetch_sub(1, std::memory_order_relaxed);
    if (!ok)
      return Status::Timeout("the task did not end within the wait timeout; wait again or detach");
    if (stale()) return Status::StaleHandle("this task was already waited for or detached");
  }
  // (inv 1) CAS on release: a concurrent wait() or detach() frees it only once.
  DescState expect = s;
  if (!d.state.compare_exchange_strong(expect, DescState::kFree, std::memory_order_acq_rel)) {
    return Status::StaleHandle("this task was already waited for or detached");
  }
  d.bump_generation();  // (inv 2) we won the CAS to kFree: the only writer
  Worker* w = worker_of(impl_.get());
  detail::Counters& ctr = w ? w->counters : p.ext;
  ctr.bump(ctr.released);
  p.release_desc(h.index);
  switch (s) {
    case DescState::kFailed:
      return TaskOutcome::kFailed;
    case DescState::kCancelled:
      return TaskOutcome::kCancelled;
    default:
      return TaskOutcome::kCompleted;
  }
}

void Pool::detach(TaskHandle h) {
  Impl& p = *impl_;
  if (!h.valid() || h.index >= p.cfg.queue_capacity) return;
  Descriptor& d = p.descs[h.index];
  if (d.generation.load(std::memory_order_acquire) != h.generation) return;
  d.detached.store(true, std::memory_order_relaxed);
  // seq_cst pairs with finish()'s fence between its state store and its
  // load of `detached`.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  DescState s = d.state.load(std::memory_order_relaxed);
  if (s == DescState::kCompleted || s == DescState::kFailed || s == DescState::kCancelled) {
    if (d.state.compare_exchange_strong(s, DescState::kFree, std::memory_order_acq_rel)) {
      d.bump_generation();  // (inv 2) we won the CAS to kFree: the only writer
      Worker* w = worker_of(impl_.get());
      detail::Counters& ctr = w ? w->counters : p.ext;
      ctr.bump(ctr.released);
      p.release_desc(h.index);
    }
  }
}

bool Pool::help_wait(WaitGroup& wg, std::chrono::nanoseconds timeout) {
  Impl& p = *impl_;
  Worker* w = worker_of(impl_.get());
  if (w == nullptr) return wg.wait(timeout);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (wg.pending() > 0) {
    const detail::Entry e = p.next_task(w);
    if (e != detail::kNoEntry) {
      p.run_task(w, e);
      continue;
    }
    // Nothing we can run now: the rest is running elsewhere, or queued where
    // we cannot see it yet (an inject slot claimed but not yet published
    // hides every entry behind it). Block on the group in rounds of at most
    // 1 ms (picked by hand), looking for work between rounds. Blocking once
    // and for good deadlocked: with every worker inside a help_wait, each
    // waiting for children the others could no longer look for, and no wake
    // coming (they count as awake, inv 6), the pool stood still until the
    // timeout (found by the fuzz harness, seed 5382, 2 workers).
    std::chrono::nanoseconds round = std::chrono::milliseconds(1);
    if (timeout.count() >= 0) {
      const auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) break;
      round = std::min(round, left);
    }
    if (wg.wait(round)) break;
  }
  // Through wait(): it takes the group's mutex, so the last done() has let
  // go of the group before our caller destroys it (WaitGroup::done()).
  return wg.wait(std::chrono::nanoseconds(0));
}

Status Pool::shutdown(ShutdownMode mode, std::chrono::nanoseconds timeout) {
  Impl& p = *impl_;
  if (this_task::pool() == this) {
    return Status::InvalidArgument(
        "shutdown() was called from one of the pool's own tasks; call it "
        "from a thread that is not a worker");
  }
  std::lock_guard lk(p.shutdown_mu);
  if (p.joined) return Status::Ok();
  // (inv 5) Stop accepting, then fence, then count what was accepted.
  p.accepting.store(false, std::memory_order_seq_cst);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  {
    std::lock_guard flk(p.free_mu);  // release submitters blocked on backpressure
  }
  p.free_cv.notify_all();
  if (mode == ShutdownMode::kCancelPending) {
    // Claim every queued descriptor (the seed's cancelQueuedTasks) and end it
    // cancelled; their queue entries go stale (inv 2). Claimed, not straight
    // to cancelled: a terminal state would let wait() free the descriptor
    // while on_cancel and finish() still use it (inv 1).
    for (std::uint32_t i = 0; i < p.cfg.queue_capacity; ++i) {
      Descriptor& d = p.descs[i];
      DescState expect = DescState::kQueued;
      if (d.state.compare_exchange_strong(expect, DescState::kClaimed, std::memory_order_acq_rel)) {
        if (d.on_cancel != nullptr) d.on_cancel(d.ctx);
        p.finish(nullptr, i, DescState::kCancelled);
      }
    }
  }
  // Wait for everything accepted to end.
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  bool drained = true;
  {
    std::unique_lock ilk(p.idle_mu);
    auto all_done = [&] {
      const std::uint64_t fin = p.sum_finished();  // finished first: fin <= accepted
      return fin >= p.sum_accepted();
    };
    // In rounds of at most 1 ms (picked by hand), not on the notify alone:
    // finish() counts a task and then reads `accepting` with no fence in
    // between (a fence per task would cost every task for the sake of
    // shutdown), so its notify can be missed (store-buffering: its count not
    // yet visible to our check, our store of `accepting` not yet visible to
    // its read). The rounds bound that miss to 1 ms.
    while (!all_done()) {
      auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(1);
      if (timeout.count() >= 0) {
        if (std::chrono::steady_clock::now() >= deadline) {
          drained = false;
          break;
        }
        until = std::min(until, deadline);
      }
      p.idle_cv.wait_until(ilk, until);
    }
  }
  if (!drained) {
    return Status::Timeout("shutdown did not finish within " + std::to_string(timeout.count()) +
                           " ns: " + std::to_string(p.sum_accepted() - p.sum_finished()) +
                           " tasks are still queued or running; call shutdown again, or with "
                           "kCancelPending, to finish");
  }
  p.join_all();
  // Drain-on-release of every slot's DescCache (the seed's shutdown order).
  std::uint32_t buf[32];
  for (auto& w : p.workers) {
    w->cache.unbind();
    const std::size_t n = w->cache.drain_all(buf);
    for (std::size_t i = 0; i < n; ++i) detail::push_always(p.free_ring, buf[i]);
    w->cache.unbind();
  }
  return Status::Ok();
}

Result<SubmitterSlot> Pool::register_submitter() {
  Impl& p = *impl_;
  if (tls.submitter != nullptr) {
    return Status::InvalidArgument("this thread already holds a submitter slot; release it first");
  }
  if (!p.accepting.load(std::memory_order_acquire)) {
    return Status::Shutdown("the pool is shutting down");
  }
  for (std::size_t i = 0; i < p.submitters.size(); ++i) {
    bool expect = false;
    if (p.submitters[i]->in_use.compare_exchange_strong(expect, true, std::memory_order_acq_rel)) {
      p.submitters[i]->cache.unbind();
      tls.sub_pool = impl_.get();
      tls.submitter = p.submitters[i].get();
      // Release pairs with the stealers' acquire load of the mask.
      p.submitter_mask.fetch_or(std::uint64_t{1} << i, std::memory_order_release);
      return SubmitterSlot(this, i);
    }
  }
  return Status::Full("all " + std::to_string(p.submitters.size()) +
                      " submitter slots are taken; raise Config.max_submitters or release one");
}

SubmitterSlot& SubmitterSlot::operator=(SubmitterSlot&& o) noexcept {
  if (this != &o) {
    release();
    pool_ = o.pool_;
    slot_ = o.slot_;
    o.pool_ = nullptr;
  }
  return *this;
}

void SubmitterSlot::release() noexcept {
  if (pool_ == nullptr) return;
  Pool::Impl& p = *pool_->impl_;
  detail::Submitter& s = *p.submitters[slot_];
  // Hand what is still queued to the inject ring, so the slot can be reused
  // (workers may be stealing concurrently: pop claims by CAS).
  detail::Entry e;
  bool moved = false;
  while (s.queue->pop(e)) {
    detail::push_always(*p.inject[0], e);
    moved = true;
  }
  std::uint32_t buf[32];
  const std::size_t n = s.cache.drain_all(buf);
  for (std::size_t i = 0; i < n; ++i) detail::push_always(p.free_ring, buf[i]);
  s.cache.unbind();
  tls.sub_pool = nullptr;
  tls.submitter = nullptr;
  p.submitter_mask.fetch_and(~(std::uint64_t{1} << slot_), std::memory_order_release);
  s.in_use.store(false, std::memory_order_release);
  if (moved) p.notify(Lane::kDefault, nullptr);
  pool_ = nullptr;
}

void Pool::watchdog_tick() {
  impl_->tick();
}

std::uint64_t Pool::progress() const noexcept {
  std::uint64_t n = 0;
  for (const auto& w : impl_->workers) n += w->tasks_started.load(std::memory_order_relaxed);
  return n;
}

PoolStats Pool::stats() const {
  const Impl& p = *impl_;
  PoolStats st;
  std::uint64_t acquired = 0;
  std::uint64_t released = 0;
  p.for_each_counters([&](const detail::Counters& c) {
    auto r = [](const std::atomic<std::uint64_t>& a) { return a.load(std::memory_order_relaxed); };
    st.submitted += r(c.submitted);
    st.completed += r(c.completed);
    st.failed += r(c.failed);
    st.cancelled += r(c.cancelled);
    st.rejected_full += r(c.rejected_full);
    st.rejected_shutdown += r(c.rejected_shutdown);
    st.rejected_timeout += r(c.rejected_timeout);
    st.steal_ops += r(c.steal_ops);
    st.steal_tasks += r(c.steal_tasks);
    st.parks += r(c.parks);
    st.wakeups_no_work += r(c.wakeups_no_work);
    st.local_overflows += r(c.local_overflows);
    st.inline_runs += r(c.inline_runs);
    acquired += r(c.acquired);
    released += r(c.released);
    for (std::size_t l = 0; l < kLaneCount; ++l) st.lanes[l].completed += r(c.lane_completed[l]);
  });
  st.live_descriptors = acquired >= released ? acquired - released : 0;
  st.descriptor_capacity = p.cfg.queue_capacity;
  for (std::size_t l = 0; l < kLaneCount; ++l) {
    st.lanes[l].inject_depth = p.inject[l]->size_approx();
    st.inject_depth += st.lanes[l].inject_depth;
  }
  for (std::size_t i = 0; i < p.total_slots; ++i) {
    const Worker& w = *p.workers[i];
    const std::uint64_t depth = w.local->size_approx();  // the LIFO slot is owner-only (inv 3)
    st.local_depth_sum += depth;
    st.lanes[static_cast<std::size_t>(w.lane)].local_depth += depth;
    st.local_depth_max = std::max(st.local_depth_max, depth);
    for (std::size_t l = 0; l < kLaneCount; ++l) {
      w.wait_hist[l].add_to(st.lanes[l].wait);
      w.run_hist[l].add_to(st.lanes[l].run);
    }
    const bool running =
        w.spawned.load(std::memory_order_acquire) && !w.exited.load(std::memory_order_acquire);
    if (!running) continue;
    if (!w.overflow) {
      ++st.workers;
      ++st.lanes[static_cast<std::size_t>(w.lane)].workers;
    }
    if (w.busy.load(std::memory_order_relaxed)) ++st.busy_workers;
    if (w.parked.load(std::memory_order_relaxed)) ++st.parked_workers;
  }
  for (const auto& s : p.submitters) {
    if (s->in_use.load(std::memory_order_acquire)) st.submitter_depth += s->queue->size_approx();
  }
  st.stalls_detected = p.stalls_detected.load(std::memory_order_relaxed);
  st.stalled_now = p.stalled_now.load(std::memory_order_relaxed);
  st.overflow_spawned = p.overflow_spawned.load(std::memory_order_relaxed);
  st.overflow_retired = p.overflow_retired.load(std::memory_order_relaxed);
  st.overflow_active = p.overflow_active.load(std::memory_order_relaxed);
  st.overflow_max = p.cfg.max_overflow_workers;
  st.timestamps_enabled = kTimestamps;
  return st;
}

namespace this_task {
bool is_cancelled() noexcept {
  const Descriptor* d = tls.current;
  return d != nullptr && d->cancel != nullptr && d->cancel->is_cancelled();
}
Lane lane() noexcept {
  return tls.current ? tls.current->lane : Lane::kDefault;
}
Pool* pool() noexcept {
  return tls.current && tls.pool ? tls.pool->self : nullptr;
}
int worker_index() noexcept {
  return tls.worker ? static_cast<int>(tls.worker->index) : -1;
}
}  // namespace this_task

}  // namespace tpool
