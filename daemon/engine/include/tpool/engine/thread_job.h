// tpool::engine::ThreadJob: which job (and handler) the calling thread is
// inside, for the daemon's crash handler (daemon/server/src/crash.cc).
//
// Thread safety:
//  (T1) Each thread's ThreadJob is written only by that thread (the engine,
//       around every handler call), and read by that thread's fatal-signal
//       handler, which interrupts it: no other thread ever reads it.
//  (T2) The handler name it points to stays valid while the handler runs
//       (the job, or the child's handler reference, owns it). A nested call
//       (help_wait runs another job inside a fan-out parent) saves and
//       restores the outer one (ThreadJobScope).
//  (T3) Reads from a signal handler are async-signal-safe: plain loads of an
//       initial-exec thread_local, no allocation, no lock.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace tpool::engine {

struct ThreadJob {
  const char* handler = nullptr;  // not NUL-terminated: handler_len bytes; null: none
  std::size_t handler_len = 0;
  std::uint64_t job_id = 0;
};

// This thread's ThreadJob (never null). Async-signal-safe (T3).
const ThreadJob* this_thread_job() noexcept;

// Marks the calling thread as inside `handler` for job `job_id` until it goes
// out of scope (T1, T2).
class ThreadJobScope {
 public:
  ThreadJobScope(std::string_view handler, std::uint64_t job_id) noexcept;
  ~ThreadJobScope();
  ThreadJobScope(const ThreadJobScope&) = delete;
  ThreadJobScope& operator=(const ThreadJobScope&) = delete;

 private:
  ThreadJob saved_;
};

}  // namespace tpool::engine
