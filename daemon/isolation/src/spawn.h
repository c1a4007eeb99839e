// Starting and ending tpool-runner processes (supervisor.h, "Start", "End").
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

#include "tpool/common/status.h"

namespace tpool::isolation::detail {

struct Spawned {
  pid_t pid = -1;
  int fd = -1;  // the daemon's end of the socketpair (CLOEXEC)
};

// posix_spawn of argv[0] with argv, on the spawner thread (the process-wide
// thread that never exits, so PR_SET_PDEATHSIG in the runner fires only when
// tpoold itself dies). The child gets the other end of a socketpair as fd 3,
// an empty signal mask and default dispositions, its own process group and
// the environment PATH=/usr/bin:/bin only (a daemon's environment may hold
// secrets). Waits for the spawn, not for the runner.
Result<Spawned> spawn_runner(const std::vector<std::string>& argv);

// SIGKILL to the runner's process group, then reaps it; returns the wait
// status.
int kill_and_reap(pid_t pid);

// Waits up to `grace` for pid to exit (pidfd), then kill_and_reap; returns
// the wait status.
int reap_within(pid_t pid, std::chrono::milliseconds grace);

// "SIGSEGV", "exit status 3", ... for a wait status.
std::string describe_wait_status(int status);

}  // namespace tpool::isolation::detail
