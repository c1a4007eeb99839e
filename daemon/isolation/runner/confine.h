// The runner's confinement (docs/security.md, "The isolation boundary"): what
// a tpool-runner does to itself, in this order, before it serves a job.
//
//  1. prctl(PR_SET_PDEATHSIG, SIGKILL), then getppid() == the daemon's pid
//     (else the daemon died before the call and the runner exits at once):
//     no runner outlives tpoold, even a SIGKILLed one.
//  2. Its own process group (posix_spawn's POSIX_SPAWN_SETPGROUP; checked),
//     so the daemon's kill of a runner reaches the helpers it may start.
//  3. PR_SET_NO_NEW_PRIVS: no set-uid gain, and the seccomp filter below
//     without CAP_SYS_ADMIN.
//  4. setrlimit: RLIMIT_AS (address_space_mb), RLIMIT_NOFILE (open_files),
//     RLIMIT_CORE 0 (a crashing handler leaves no core full of job data);
//     soft == hard, so the plugin cannot raise them.
//  -- dlopen of the plugin, its entry and init (which may open files, read
//     config, start threads) --
//  5. unshare(CLONE_NEWNET): no network (loopback only, down) when the
//     daemon has CAP_SYS_ADMIN; otherwise a note the daemon logs once.
//  6. The seccomp filter (libseccomp; all threads, TSYNC): the system calls
//     of the handler API, libc and threads are allowed; everything else traps
//     (SIGSYS), the runner reports the call's number to the daemon and dies,
//     and the job fails naming the call. Trap-and-die rather than EPERM: a
//     handler that meets an error it never expected may carry on with a wrong
//     result; a stopped runner is loud and names what to allow. A plugin's
//     allow_syscalls key extends the list by name.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tpool::isolation::runner {

struct Limits {
  std::uint64_t address_space_mb = 0;  // 0: none
  std::uint64_t open_files = 0;        // 0: inherit
};

// Steps 1-4; "" or the sentence of what failed (the runner then exits). A
// limit the environment refuses is appended to notes instead (the daemon
// logs the notes once per plugin and the runner goes on without it).
std::string confine_early(long daemon_pid, const Limits& limits, std::string& notes);

// Step 5: "" when the runner has no network; else the note saying why not.
std::string drop_network();

// Step 6; "" or what failed. extra: the allow_syscalls names (validated by
// the daemon at start; an unknown one is reported here too).
// A filter the kernel refuses to load is a note, as for a limit.
std::string install_seccomp(const std::vector<std::string>& extra, std::string& notes);

}  // namespace tpool::isolation::runner
