// The fatal-signal report: what tpoold writes when a handler (or tpoold
// itself) crashes the process. See crash.cc and docs/operations.md, "What a
// crash loses".
#pragma once

namespace tpool::server {

// Installs handlers for SIGSEGV, SIGBUS, SIGFPE, SIGILL and SIGABRT that
// write one line to stderr naming the signal and the handler and job running
// on the crashing thread, then let the signal kill the process as before
// (exit by the same signal, core dump as configured). json: the line is a
// JSON object like the rest of the log (log.format = "json"). Call once, from
// the main thread, before other threads start.
void install_crash_handler(bool json);

// Gives the calling thread an alternate signal stack, so a crash by stack
// overflow is reported too. Engine::thread_init calls it on every worker.
void crash_handler_thread_init();

}  // namespace tpool::server
