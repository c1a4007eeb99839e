// Registered submitter slots: a thread that registers gets its own SPMC queue
// (stolen by workers) and its own DescCache until it releases the slot.
//
// Invariants (pool_internal.h inv 3 applies: only the holder pushes to the
// slot's queue and uses its cache):
//   (1) A slot is held by at most one thread: taken by the CAS of `in_use`
//       false -> true, given back by the store of false at the end of
//       release_submitter(), after the queue is emptied and the cache drained.
//   (2) Bit i of submitter_mask is set while slot i is held; stealers read it
//       as a hint and check `in_use` (acquire) before they trust a queue's
//       size (work_visible, lane_has_queued).
//   (3) A thread holds at most one slot (tls.submitter), of one pool.
#include <string>

#include "pool_internal.h"

namespace tpool {

Result<std::size_t> Pool::Impl::register_submitter() {
  if (tls.submitter != nullptr) {
    return Status::InvalidArgument("this thread already holds a submitter slot; release it first");
  }
  // Acquire pairs with shutdown()'s store of false; a stale true is harmless:
  // the slot's submits then meet the shutdown handshake (pool inv 5).
  if (!accepting.load(std::memory_order_acquire)) {
    return Status::Shutdown("the pool is shutting down");
  }
  for (std::size_t i = 0; i < submitters.size(); ++i) {
    bool expect = false;
    // (inv 1) acq_rel: acquire pairs with release_submitter()'s release store
    // of false, so the previous holder's drain of the queue and the cache
    // happens before we use them.
    if (submitters[i]->in_use.compare_exchange_strong(expect, true, std::memory_order_acq_rel)) {
      submitters[i]->own.cache.unbind();
      tls.sub_pool = this;
      tls.submitter = submitters[i].get();
      // Release pairs with the stealers' acquire load of the mask.
      submitter_mask.fetch_or(std::uint64_t{1} << i, std::memory_order_release);
      return i;
    }
  }
  return Status::Full("all " + std::to_string(submitters.size()) +
                      " submitter slots are taken; raise Config.max_submitters or release one");
}

void Pool::Impl::release_submitter(std::size_t slot) noexcept {
  detail::Submitter& s = *submitters[slot];
  // Hand what is still queued to the inject ring, so the slot can be reused
  // (workers may be stealing concurrently: pop claims by CAS).
  detail::Entry e;
  bool moved = false;
  while (s.queue->pop(e)) {
    detail::push_always(*inject[0], e);
    moved = true;
  }
  return_cached(s.own.cache);
  tls.sub_pool = nullptr;
  tls.submitter = nullptr;
  // (inv 2) Release pairs with the stealers' acquire load of the mask.
  submitter_mask.fetch_and(~(std::uint64_t{1} << slot), std::memory_order_release);
  // (inv 1) Release pairs with the next holder's CAS in register_submitter()
  // and the acquire loads of in_use in work_visible, lane_has_queued, stats.
  s.in_use.store(false, std::memory_order_release);
  if (moved) notify(Lane::kDefault, nullptr);
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
  pool_->impl_->release_submitter(slot_);
  pool_ = nullptr;
}

}  // namespace tpool
