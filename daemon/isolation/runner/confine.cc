// The runner's confinement; the order and the why are in confine.h.
#include "confine.h"

#include <errno.h>
#include <linux/sched.h>
#include <sched.h>
#include <seccomp.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <termios.h>
#include <unistd.h>

#include <cstring>

namespace tpool::isolation::runner {

namespace {

std::string errno_text(const char* what) {
  return std::string(what) + " failed: " + std::strerror(errno);
}

bool set_limit(int resource, std::uint64_t value) {
  rlimit r{};
  r.rlim_cur = r.rlim_max = static_cast<rlim_t>(value);
  return ::setrlimit(resource, &r) == 0;
}

// What the handler API, libc, the dynamic loader's lazy work, C++ runtime
// and threads need once the plugin is loaded and initialised. Names, so
// that a name this architecture lacks is skipped (resolve gives
// __NR_SCMP_ERROR). Kept short on purpose: no socket, connect, bind,
// execve, fork, ptrace, mount, kill of other processes.
constexpr const char* kAllowed[] = {
    // I/O on descriptors the runner already has (its channel, stderr, files)
    "read", "write", "readv", "writev", "pread64", "pwrite64", "lseek", "close", "fcntl", "dup",
    "dup3", "poll", "ppoll", "select", "pselect6", "recvmsg", "sendmsg", "recvfrom", "sendto",
    "epoll_create1", "epoll_ctl", "epoll_wait", "epoll_pwait", "eventfd2", "pipe2",
    // files: reading data and libraries a handler opens (no namespace of its
    // own here: the file system is the runner's user's view)
    "openat", "open", "fstat", "newfstatat", "stat", "lstat", "statx", "access", "faccessat",
    "faccessat2", "getdents64", "readlink", "readlinkat", "getcwd", "fsync", "fdatasync",
    "ftruncate",
    // memory
    "mmap", "munmap", "mprotect", "mremap", "madvise", "brk", "mlock", "munlock", "msync",
    "membarrier",
    // threads and time
    "futex", "set_robust_list", "get_robust_list", "rseq", "sched_yield", "sched_getaffinity",
    "clock_gettime", "clock_getres", "clock_nanosleep", "nanosleep", "gettimeofday", "time",
    "getrandom",
    // identity and limits (read only: soft == hard, so no raise)
    "getpid", "gettid", "getppid", "getuid", "geteuid", "getgid", "getegid", "getpgrp", "getrlimit",
    "getrusage", "sysinfo", "uname",
    // signals and leaving
    "rt_sigaction", "rt_sigprocmask", "rt_sigreturn", "sigaltstack", "restart_syscall", "exit",
    "exit_group"};

// libseccomp's SCMP_A0() macros are C compound literals; the same in C++.
// An int argument is compared on its low 32 bits (the upper half of the
// register is not guaranteed to be zero).
scmp_arg_cmp masked(unsigned arg, scmp_datum_t mask, scmp_datum_t value) {
  scmp_arg_cmp c{};
  c.arg = arg;
  c.op = SCMP_CMP_MASKED_EQ;
  c.datum_a = mask;
  c.datum_b = value;
  return c;
}
scmp_arg_cmp int_eq(unsigned arg, scmp_datum_t value) {
  return masked(arg, 0xffffffffu, value);
}

}  // namespace

// A limit the environment will not let the runner set (the systemd unit's
// SystemCallFilter=~@resources answers setrlimit with EPERM) is a note: the
// runner goes on without it and the daemon logs the note once per plugin.
void limit_or_note(int resource, const char* name, std::uint64_t value, std::string& notes) {
  if (set_limit(resource, value)) return;
  notes += std::string(notes.empty() ? "" : "; ") + name +
           " not applied (setrlimit: " + std::strerror(errno) +
           ", e.g. a systemd SystemCallFilter that denies @resources)";
}

std::string confine_early(long daemon_pid, const Limits& limits, std::string& notes) {
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) return errno_text("prctl(PR_SET_PDEATHSIG)");
  // The daemon may have died between posix_spawn and the prctl: then the
  // signal will never come, and the runner is someone else's child.
  if (::getppid() != static_cast<pid_t>(daemon_pid)) {
    return "the daemon (pid " + std::to_string(daemon_pid) + ") is gone";
  }
  if (::getpgrp() != ::getpid()) {
    return "the runner is not the leader of its own process group (tpoold spawns it so)";
  }
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
    return errno_text("prctl(PR_SET_NO_NEW_PRIVS)");
#if defined(__SANITIZE_ADDRESS__)
  // An AddressSanitizer build (make asan) maps terabytes of shadow memory
  // at start: under any RLIMIT_AS the runner could not start. Said, not set.
  if (limits.address_space_mb != 0) {
    notes += std::string(notes.empty() ? "" : "; ") +
             "RLIMIT_AS (address_space_mb) not applied: this tpool-runner is an "
             "AddressSanitizer build";
  }
#else
  if (limits.address_space_mb != 0) {
    limit_or_note(RLIMIT_AS, "RLIMIT_AS (address_space_mb)", limits.address_space_mb << 20, notes);
  }
#endif
  if (limits.open_files != 0) {
    limit_or_note(RLIMIT_NOFILE, "RLIMIT_NOFILE (open_files)", limits.open_files, notes);
  }
  limit_or_note(RLIMIT_CORE, "RLIMIT_CORE 0", 0, notes);
  return "";
}

std::string drop_network() {
  if (::unshare(CLONE_NEWNET) == 0) return "";
  return std::string("no network namespace (unshare(CLONE_NEWNET): ") + std::strerror(errno) +
         "; it needs CAP_SYS_ADMIN, which tpoold does not have): the plugin's runners keep "
         "the host's network, though the seccomp filter still denies socket()";
}

std::string install_seccomp(const std::vector<std::string>& extra, std::string& notes) {
  scmp_filter_ctx ctx = ::seccomp_init(SCMP_ACT_TRAP);
  if (ctx == nullptr) return "seccomp_init failed";
  std::string err;
  auto allow = [&](const char* name, bool must) {
    int nr = ::seccomp_syscall_resolve_name(name);
    if (nr == __NR_SCMP_ERROR) {
      if (must) err = "unknown system call '" + std::string(name) + "' in allow_syscalls";
      return;
    }
    if (::seccomp_rule_add(ctx, SCMP_ACT_ALLOW, nr, 0) != 0 && must) {
      err = "cannot allow system call '" + std::string(name) + "'";
    }
  };
  for (const char* name : kAllowed) allow(name, false);
  // Threads only: clone with CLONE_THREAD (pthread_create); clone3 takes its
  // flags in memory a filter cannot read, so it answers ENOSYS and glibc
  // falls back to clone. fork and vfork are not allowed.
  ::seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(clone), 1,
                     masked(0, CLONE_THREAD, CLONE_THREAD));
  ::seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0);
  // Signals to itself only (raise, abort, pthread_kill).
  ::seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(tgkill), 1,
                     int_eq(0, static_cast<scmp_datum_t>(::getpid())));
  // isatty() (stdio's buffering choice) and naming threads.
  ::seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(ioctl), 1, int_eq(1, TCGETS));
  ::seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(prctl), 1, int_eq(0, PR_SET_NAME));
  ::seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(prctl), 1, int_eq(0, PR_GET_NAME));
  for (const auto& name : extra) allow(name.c_str(), true);
  // Refused by the environment (an outer filter that denies seccomp(2), as a
  // systemd unit's SystemCallFilter= does unless it lists seccomp): a note,
  // as for a limit; the allow-list itself was built above. libseccomp probes
  // seccomp(2) when TSYNC is asked for, so a refusal shows there first.
  auto refused = [&](const std::string& what) {
    notes += std::string(notes.empty() ? "" : "; ") + "no seccomp filter (" + what +
             ": the environment refuses seccomp(2); a systemd unit must list it in "
             "SystemCallFilter=, as deploy/systemd/tpoold.service does)";
  };
  if (err.empty() && ::seccomp_attr_set(ctx, SCMP_FLTATR_CTL_TSYNC, 1) != 0) {
    refused("cannot apply a filter to every thread (TSYNC)");
  } else if (err.empty()) {
    if (int rc = ::seccomp_load(ctx); rc != 0)
      refused("seccomp_load: " + std::string(std::strerror(-rc)));
  }
  ::seccomp_release(ctx);
  return err;
}

}  // namespace tpool::isolation::runner
