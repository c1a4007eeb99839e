// Constructing the pool: sizes from Config::resolved(), the descriptors, the
// rings, the worker and submitter slots; starting the first workers and the
// watchdog thread.
//
// Invariants:
//   (1) Everything sized here is fixed for the pool's life: descriptors
//       (queue_capacity), worker slots (max_threads + max_overflow_workers),
//       submitter slots, ring capacities. Threads come and go in fixed slots.
//   (2) A worker slot is (re)started only under spawn_mu, by start(),
//       notify() or tick(), and counts itself awake (pool inv 6) before its
//       thread can take work.
//   (3) Per-slot DescCaches hold at most half the descriptors in all
//       (cache_limit), so a blocked external submitter is never starved.
#include <algorithm>
#include <string>

#if defined(__linux__)
#include <pthread.h>
#endif

#include "pool_internal.h"

namespace tpool {

using detail::Descriptor;
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
    // Overflow workers keep none (submit.cc, enqueue); blocking-lane workers
    // the seed's one slot: their tasks block, and an entry in a stack is
    // hidden from the other workers until its owner's task returns.
    w->own.lifo.init(w->lane == Lane::kDefault ? cfg.lifo_capacity : 1);
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
  // (inv 6) A new worker counts as awake before it can take work. seq_cst:
  // in the handshake's total order with the producers' w1 fence and their
  // load of awake (sleep_wake.h inv 2, 3), as every awake update is.
  for (std::size_t l = 0; l < kLaneCount; ++l) {
    if (w->drains[l]) awake[l].fetch_add(1, std::memory_order_seq_cst);
  }
  try {
    w->thread = std::thread([this, w] { worker_main(w); });
    w->spawned.store(true, std::memory_order_release);  // pairs with stats()' acquire
  } catch (const std::system_error&) {
    for (std::size_t l = 0; l < kLaneCount; ++l) {  // undo the count above, in the same order
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
    // Release pairs with notify()'s acquire load of `started` (submit.cc): a
    // producer that counts this worker sees its slot set up; notify() reads
    // it again under spawn_mu before it grows the pool.
    started.fetch_add(1, std::memory_order_release);
  }
  return true;
}

Status Pool::Impl::start() {
  MutexLock lk(spawn_mu);
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

}  // namespace tpool
