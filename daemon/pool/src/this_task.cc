// The calling thread's role in a pool (ThreadCtx, pool_internal.h) and what
// a running task may ask about itself (tpool::this_task).
//
// Invariants:
//   (1) tls is written only by its own thread: worker_main sets the worker
//       fields and clears them on exit, register/release_submitter the
//       submitter fields, run_task and run_inline `current` around a task.
//   (2) Outside a task `current` is null and every answer is the default.

#include "pool_internal.h"

namespace tpool {

using detail::Descriptor;

thread_local ThreadCtx tls;

namespace this_task {
bool is_cancelled() noexcept {
  const Descriptor* d = tls.current;
  return d != nullptr && d->cancel != nullptr && d->cancel->is_cancelled();
}
Lane lane() noexcept {
  return tls.current ? tls.current->lane : Lane::kDefault;
}
Pool* pool() noexcept {
  return tls.current && tls.pool ? tls.pool->pool() : nullptr;
}
int worker_index() noexcept {
  return tls.worker ? static_cast<int>(tls.worker->index) : -1;
}
}  // namespace this_task

}  // namespace tpool
