// The spawner thread and the reaping of runners (spawn.h).
//
// (P1) Every runner is forked by the one spawner thread, which is started on
//      first use and never exits: the kernel sends PR_SET_PDEATHSIG when the
//      thread that forked the child exits, not when the process does, so a
//      runner spawned from a pool worker would die with that worker.
// (P2) Requests wait on their own flag under the spawner's mutex; the
//      spawner serves them in order.
#include "spawn.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <deque>
#include <thread>

#include "tpool/common/mutex.h"

namespace tpool::isolation::detail {

namespace {

struct Request {
  const std::vector<std::string>* argv;
  Result<Spawned> result = Status::Shutdown("not spawned");
  bool done = false;
};

Result<Spawned> do_spawn(const std::vector<std::string>& argv) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    return Status::IoError(std::string("socketpair failed: ") + ::strerror(errno));
  }
  // The child's end moves to fd 3 through dup2, which clears CLOEXEC on the
  // copy; a source that already is fd 3 would keep it, so it is lifted first.
  int child = sv[1];
  if (child <= 3) {
    child = ::fcntl(sv[1], F_DUPFD_CLOEXEC, 10);
    ::close(sv[1]);
  }
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t attr;
  ::posix_spawn_file_actions_init(&fa);
  ::posix_spawn_file_actions_adddup2(&fa, child, 3);
  ::posix_spawnattr_init(&attr);
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  ::posix_spawnattr_setsigmask(&attr, &none);  // tpoold blocks signals in its threads
  ::posix_spawnattr_setsigdefault(&attr, &all);
  ::posix_spawnattr_setpgroup(&attr, 0);  // its own process group
  ::posix_spawnattr_setflags(
      &attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  char path_env[] = "PATH=/usr/bin:/bin";
  char* envp[] = {path_env, nullptr};
  pid_t pid = -1;
  int rc = ::posix_spawn(&pid, argv[0].c_str(), &fa, &attr, args.data(), envp);
  ::posix_spawn_file_actions_destroy(&fa);
  ::posix_spawnattr_destroy(&attr);
  ::close(child);
  if (rc != 0) {
    ::close(sv[0]);
    return Status::IoError("cannot start the runner " + argv[0] + ": " + ::strerror(rc) +
                           " (it is installed next to tpoold; check the file and its "
                           "permissions, or set plugins.isolation.runner)");
  }
  return Spawned{pid, sv[0]};
}

class Spawner {
 public:
  static Spawner& get() {
    static Spawner* s = new Spawner;  // never destroyed (P1)
    return *s;
  }
  Result<Spawned> spawn(const std::vector<std::string>& argv) {
    Request r{&argv};
    MutexLock lock(mu_);
    queue_.push_back(&r);
    cv_.notify_all();
    cv_.wait(lock, [&] { return r.done; });  // (P2)
    return std::move(r.result);
  }

 private:
  Spawner() {
    std::thread([this] { run(); }).detach();
  }
  void run() {
    MutexLock lock(mu_);
    for (;;) {
      cv_.wait(lock, [&]() REQUIRES(mu_) { return !queue_.empty(); });
      Request* r = queue_.front();
      queue_.pop_front();
      r->result = do_spawn(*r->argv);
      r->done = true;
      cv_.notify_all();
    }
  }
  Mutex mu_;
  CondVar cv_;
  std::deque<Request*> queue_ GUARDED_BY(mu_);
};

}  // namespace

Result<Spawned> spawn_runner(const std::vector<std::string>& argv) {
  return Spawner::get().spawn(argv);
}

int kill_and_reap(pid_t pid) {
  ::kill(-pid, SIGKILL);
  ::kill(pid, SIGKILL);  // in case it had not yet become its group's leader
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return status;
}

int reap_within(pid_t pid, std::chrono::milliseconds grace) {
  int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (pidfd >= 0) {
    pollfd p{pidfd, POLLIN, 0};
    int rc;
    while ((rc = ::poll(&p, 1, static_cast<int>(grace.count()))) < 0 && errno == EINTR) {
    }
    ::close(pidfd);
    int status = 0;
    if (rc > 0 && ::waitpid(pid, &status, WNOHANG) == pid) return status;
  }
  return kill_and_reap(pid);
}

std::string describe_wait_status(int status) {
  if (WIFSIGNALED(status)) {
    const char* name = ::sigabbrev_np(WTERMSIG(status));
    return name != nullptr ? std::string("SIG") + name
                           : "signal " + std::to_string(WTERMSIG(status));
  }
  if (WIFEXITED(status)) return "exit status " + std::to_string(WEXITSTATUS(status));
  return "wait status " + std::to_string(status);
}

}  // namespace tpool::isolation::detail
