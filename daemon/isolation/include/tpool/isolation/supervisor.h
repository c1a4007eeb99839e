// tpool::isolation: runs a plugin's handlers in supervised tpool-runner
// processes (issue 18; docs/plugins.md, "Isolation").
//
// The server passes make_factory()'s result to the plugin host
// (HostConfig::isolation_factory); for each process-mode plugin of a load or
// reload the host calls it once and gets a Supervisor, which owns that
// plugin's runners for that registry generation:
//
//   - Start: `runners` processes, spawned by posix_spawn (never a shell) from
//     one long-lived thread (the spawner: PR_SET_PDEATHSIG follows the thread
//     that forked, so a pool worker that later exits must not be it), each
//     with one end of a socketpair as fd 3, an empty signal mask, its own
//     process group and a minimal environment. The factory returns once every
//     runner has loaded the plugin, run its init and confined itself (kReady),
//     or with the first runner's init failure.
//   - A call (Host::invoke or Host::invoke_batch on a pool worker) checks out
//     an idle runner, sends its job, or its batch of one handler's jobs in
//     one write (the engine's E7), and stays in the call until every result,
//     relaying log, progress and run_children to each job's JobServices on
//     that worker: the channel's invariants W1-W5 are in
//     tpool/isolation/wire.h.
//   - Faults end only the job the runner was running (W1): a crash, an address-space
//     failure, the CPU limit or a denied system call fails it with a sentence
//     naming the handler, the cause and the runner's pid; the slot restarts
//     its runner after a backoff (100 ms doubling to 5 s, reset by a job that
//     ends normally; picked by hand). crash_limit crashes within crash_window
//     mark the plugin unhealthy: unavailable() then names it and the engine
//     refuses its new jobs UNAVAILABLE until a reload builds a new Supervisor.
//     The jobs of a batch queued behind that one never started: they go to
//     the next runner (not a new attempt).
//   - Hard time limit: a job cancelled or past its deadline gets kCancel; if
//     it is the one running and has not returned cancel_grace later, the
//     runner is killed (SIGKILL to its process group), reaped and replaced
//     (W3); the jobs behind it go to the next runner.
//   - End: the last HandlerRef of the generation drops the Supervisor: each
//     (idle) runner's channel is closed, it exits, and is reaped (killed if it
//     has not exited within a second).
//
// Thread safety (numbered for the code's comments):
//  (S1) slots_, the crash history and health are guarded by mu_.
//  (S2) A slot that is busy belongs to the one worker that checked it out:
//       only that worker reads or writes its runner's channel, kills or
//       reaps its process, or restarts it; others skip it. So a runner's
//       frames have one reader and the daemon has one writer per runner.
//  (S3) Counters are statistics: relaxed atomics read at scrape time.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "tpool/plugin_host/isolation.h"

namespace tpool::isolation {

struct SupervisorOptions {
  // The tpool-runner executable; empty: "tpool-runner" next to this
  // process's executable (/proc/self/exe), where the package installs it.
  std::string runner_path;
  // server.cancel_grace_ms: how long a cancelled or timed-out job's handler
  // may keep running before its runner is killed.
  std::chrono::milliseconds cancel_grace{2000};
  // How long a runner may take from spawn to kReady (dlopen, init,
  // confinement); picked by hand.
  std::chrono::milliseconds start_timeout{10000};
};

plugin_host::IsolationFactory make_factory(SupervisorOptions options);

// The runner's path for options.runner_path (the default resolved).
std::string resolve_runner_path(const std::string& configured);

// The names of `names` that are not system calls on this architecture
// (for the config check of allow_syscalls); empty when all are known.
std::vector<std::string> unknown_syscalls(const std::vector<std::string>& names);

}  // namespace tpool::isolation
