// Task descriptors: the free list (free_ring), the per-slot DescCaches in
// front of it, and the one path by which a descriptor goes back to them.
//
// Invariants (pool_internal.h inv 1..3 apply; these are this file's):
//   (1) A descriptor index is in at most one place at a time: the free ring,
//       one DescCache, or held (reserved .. terminal). The free ring has
//       2 x queue_capacity slots, so pushing a free index always succeeds
//       (push_always only retries a slot a consumer is still releasing).
//   (2) recycle() is the only way a descriptor that ran or was cancelled
//       becomes free: bump the generation (pool inv 2), count the release,
//       hand the index on. Its caller is the one thread that won the right
//       to free it (pool inv 1).
//   (3) A DescCache is used only by its owner (pool inv 3); while a submitter
//       is blocked for a free descriptor (free_ec has waiters), releases
//       bypass the caches so the blocked thread can see them in the ring.
//   (4) No blocked submitter sleeps while a descriptor it could take is in
//       the ring: every push to the ring is followed by free_ec.notify_all()
//       (release_desc, return_cached), and the submitter re-checks the ring
//       after prepare_wait (event_count.h inv 3). Indices a release cached
//       just before the submitter registered are not in the ring; the caches
//       hold at most half the descriptors (construct.cc inv 3), so while the
//       ring is empty at least half are held by tasks, and each of those
//       comes back through the ring with a notify once it ends (or, for a
//       waitable task, once it is waited or detached).
#include <algorithm>

#include "pool_internal.h"

namespace tpool {

using detail::Submitter;
using detail::Worker;

// Take n free descriptors: the caller's DescCache first, then the free ring in
// batches of up to 32 with one head CAS (the seed's acquireDescriptorBatch).
bool Pool::Impl::acquire(std::uint32_t* out, std::size_t n, Worker* w, Submitter* s,
                         std::size_t& got) {
  detail::DescCache<32>* cache = w ? &w->own.cache : (s ? &s->own.cache : nullptr);
  if (cache != nullptr) {
    while (got < n && cache->try_pop(out[got])) ++got;
  }
  while (got < n) {
    std::uint32_t batch[32];
    const std::size_t want = cache != nullptr && cache_limit > 0
                                 ? std::min<std::size_t>(32, cache_limit + (n - got))
                                 : std::min<std::size_t>(32, n - got);
    const std::size_t k = free_ring.pop_many(std::span<std::uint32_t>(batch, want));
    if (k == 0) return false;
    std::size_t i = 0;
    for (; i < k && got < n; ++i) out[got++] = batch[i];
    for (; i < k; ++i) {
      if (cache == nullptr || cache->size() >= cache_limit || !cache->push(batch[i])) {
        release_desc(batch[i]);  // (cannot happen with want computed above; kept for safety)
      }
    }
  }
  return true;
}

// Return a free descriptor: the releasing thread's DescCache, else the ring.
void Pool::Impl::release_desc(std::uint32_t idx) {
  Worker* w = worker_of(this);
  Submitter* s = tls.sub_pool == this ? tls.submitter : nullptr;
  detail::DescCache<32>* cache = w ? &w->own.cache : (s ? &s->own.cache : nullptr);
  // (inv 3) A blocked submitter waits on the ring, so bypass the caches then.
  // Relaxed: a release that reads no waiter and caches the index decided
  // before the waiter registered, as if the index had been cached earlier;
  // it is the same to the waiter as any cached index (inv 4 says why the
  // waiter still wakes).
  if (cache != nullptr && cache->size() < cache_limit && !free_ec.has_waiters() &&
      cache->push(idx)) {
    return;
  }
  detail::push_always(free_ring, idx);  // (inv 1)
  // The notifier's side of free_ec (event_count.h inv 3): our push, fence,
  // then the waiter word. Nobody blocked: one fence and one load. Somebody
  // blocked: the first release after it registered wakes it; the releases
  // after that, until it registers again, find it notified and are one load
  // too (event_count.h inv 4), so a blocked submitter costs the releasers
  // one broadcast per time it goes back to sleep, not one per release.
  free_ec.notify_all();
}

// (inv 2) The one way an ended task's descriptor becomes free again.
void Pool::Impl::recycle(std::uint32_t idx, detail::Counters& ctr) {
  descs[idx].bump_generation();  // pool inv 2: the caller is the only writer
  ctr.bump(ctr.released);
  release_desc(idx);
}

// Drain-on-release (seed: DescCache): a worker that exits, a submitter slot
// released, or shutdown after the joins hands a cache's indices back.
void Pool::Impl::return_cached(detail::DescCache<32>& cache) noexcept {
  std::uint32_t buf[32];
  const std::size_t n = cache.drain_all(buf);
  for (std::size_t i = 0; i < n; ++i) detail::push_always(free_ring, buf[i]);
  cache.unbind();
  if (n != 0) free_ec.notify_all();  // (inv 4) the indices are in the ring now
}

// The counter block of a thread freeing a descriptor it did not run: its
// worker's, else the shared one (wait() and detach() from any thread).
detail::Counters& Pool::Impl::caller_counters() noexcept {
  Worker* w = worker_of(this);
  return w ? w->counters : ext;
}

}  // namespace tpool
