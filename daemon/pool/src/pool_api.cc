// tpool::Pool, the public facade: every member forwards to Pool::Impl,
// whose state is private (pool_internal.h). Nothing here touches it.
//
// Invariants:
//   (1) A Pool and its Impl live and die together; Impl::pool() points back
//       here from attach() on, for this_task::pool().
//   (2) The destructor shuts down (drain) and joins every thread before the
//       Impl goes, so no worker outlives the state it uses.

#include "pool_internal.h"

namespace tpool {

Pool::Pool(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {
  impl_->attach(this);
}

Result<std::unique_ptr<Pool>> Pool::create(Config config) {
  if (Status s = config.validate(); !s.ok()) return s;
  auto pool = std::unique_ptr<Pool>(new Pool(std::make_unique<Impl>(std::move(config))));
  if (Status s = pool->impl_->start(); !s.ok()) {
    pool->impl_->abandon();
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
  return impl_->config();
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
  return impl_->wait(h, timeout);
}

void Pool::detach(TaskHandle h) {
  impl_->detach(h);
}

bool Pool::help_wait(WaitGroup& wg, std::chrono::nanoseconds timeout) {
  return impl_->help_wait(wg, timeout);
}

Result<SubmitterSlot> Pool::register_submitter() {
  Result<std::size_t> slot = impl_->register_submitter();
  if (!slot.ok()) return slot.status();
  return SubmitterSlot(this, slot.value());
}

Status Pool::shutdown(ShutdownMode mode, std::chrono::nanoseconds timeout) {
  return impl_->shutdown(mode, timeout);
}

PoolStats Pool::stats() const {
  return impl_->stats();
}

void Pool::watchdog_tick() {
  impl_->tick();
}

std::uint64_t Pool::progress() const noexcept {
  return impl_->progress();
}

}  // namespace tpool
