// The journal under real faults, each in a forked child so that the fault
// (SIGKILL, a file size limit) hits that process alone:
//  - (J1) a child killed with SIGKILL mid-run loses no job its callbacks
//    reported as committed;
//  - (J5) a real write error (RLIMIT_FSIZE makes the kernel refuse to grow
//    the WAL) fails the transaction with IoError, and the journal recovers
//    once the disk takes writes again.
// Each test forks while the test process has one thread (ctest runs every
// case in its own process, and no Journal is open at the fork). The child
// never returns into gtest: it ends with _exit (or is killed).
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <set>

#include "store_test_support.h"

namespace tpool::store::testing {
namespace {

bool write_all(int fd, const void* p, std::size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    const ssize_t w = ::write(fd, c, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    c += w;
    n -= static_cast<std::size_t>(w);
  }
  return true;
}

// Reads one id; false at EOF.
bool read_id(int fd, std::uint64_t& id) {
  char* c = reinterpret_cast<char*>(&id);
  std::size_t got = 0;
  while (got < sizeof id) {
    const ssize_t r = ::read(fd, c + got, sizeof id - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    got += static_cast<std::size_t>(r);
  }
  return true;
}

// Kills and reaps the child if the test ends early.
class Child {
 public:
  explicit Child(pid_t pid) : pid_(pid) {}
  ~Child() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  int kill_and_wait() {
    ::kill(pid_, SIGKILL);
    return wait();
  }
  int wait() {
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;
    return status;
  }

 private:
  pid_t pid_;
};

TEST(JournalCrash, SigkillLosesNoJobReportedCommitted) {
  TempDir dir;
  const auto o = options_for(dir.file("jobs.db"));
  constexpr std::uint64_t kJobs = 20000;
  constexpr std::size_t kKillAfter = 300;  // ids reported before the kill
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::close(fds[0]);
    auto j = Journal::open(o);
    if (!j.ok()) ::_exit(2);
    for (std::uint64_t id = 1; id <= kJobs; ++id) {
      // (J1) The callback is the acknowledgement: only then is the id told.
      j.value()->append_accepted({make_job(id)}, [fd = fds[1], id](const Status& s) {
        if (s.ok()) write_all(fd, &id, sizeof id);
      });
    }
    (void)j.value()->flush();
    for (;;) ::pause();  // until the parent kills it, wherever it got to
  }
  Child child(pid);
  ::close(fds[1]);
  std::vector<std::uint64_t> reported;
  std::uint64_t id = 0;
  while (reported.size() < kKillAfter && read_id(fds[0], id)) reported.push_back(id);
  ASSERT_EQ(reported.size(), kKillAfter) << "the child stopped reporting early";
  const int status = child.kill_and_wait();
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "status " << status;
  // What it wrote before it died is still in the pipe; the kill closed the
  // write end, so this ends.
  while (read_id(fds[0], id)) reported.push_back(id);
  ::close(fds[0]);

  auto j = open_ok(o);  // a hot WAL: SQLite recovers it on open
  ASSERT_TRUE(j);
  for (std::uint64_t r : reported) {
    auto got = j->get(r);
    ASSERT_TRUE(got.has_value()) << "job " << r << " was reported committed and is gone";
    ASSERT_EQ(diff(make_job(r), *got), "") << "job " << r;
  }
  // One appending thread: acceptance order is id order, and the recovered
  // jobs are a prefix 1..n of what was appended (no holes: a group is all or
  // nothing, and groups commit in order).
  const auto recovered = ids_of(j->recovered());
  ASSERT_GE(recovered.size(), reported.size());
  for (std::size_t i = 0; i < recovered.size(); ++i) ASSERT_EQ(recovered[i], i + 1);
  EXPECT_GT(j->next_id_floor(), *std::max_element(reported.begin(), reported.end()));
  EXPECT_EQ(j->next_id_floor(), recovered.size() + 1);
  std::cout << "[          ] " << reported.size() << " reported, " << recovered.size()
            << " recovered of " << kJobs << " appended\n";
}

// The child's checks, as text: "" when all held.
std::string write_error_child(const JournalOptions& o) {
  ::signal(SIGXFSZ, SIG_IGN);  // write() past the limit fails with EFBIG instead
  auto opened = Journal::open(o);
  if (!opened.ok()) return "open: " + opened.status().to_string();
  Journal& j = *opened.value();
  j.append_accepted({make_job(1)}, {});
  if (Status s = j.flush(); !s.ok()) return "first commit: " + s.to_string();

  rlimit old{};
  ::getrlimit(RLIMIT_FSIZE, &old);
  rlimit small = old;
  small.rlim_cur = 256 * 1024;  // the WAL may not grow past 256 KiB
  if (::setrlimit(RLIMIT_FSIZE, &small) != 0) return "setrlimit failed";
  JobRecord big = make_job(2);
  big.payload.assign(2 << 20, 'x');  // 2 MiB: the WAL must grow past the limit
  std::string got;
  j.append_accepted({big}, [&got](const Status& s) { got = s.to_string(); });
  const Status f = j.flush();
  if (f.code() != StatusCode::kIoError) return "the too-large commit gave " + f.to_string();
  if (got != f.to_string()) return "its callback got " + got;
  if (f.message().find(o.path) == std::string::npos) return "no file name in " + f.message();
  if (j.healthy()) return "healthy() after a failed commit";

  if (::setrlimit(RLIMIT_FSIZE, &old) != 0) return "setrlimit (restore) failed";
  j.append_accepted({make_job(3)}, {});
  if (Status s = j.flush(); !s.ok()) return "the commit after the fault: " + s.to_string();
  if (!j.healthy()) return "not healthy() after a commit succeeded";
  if (j.get(2)) return "the failed job is there";
  if (!j.get(1) || !j.get(3)) return "a committed job is missing";
  return "";
}

TEST(JournalCrash, ARealWriteErrorFailsTheCommitAndTheJournalRecovers) {
  TempDir dir;
  const auto o = options_for(dir.file("jobs.db"));
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::close(fds[0]);
    const std::string r = write_error_child(o);
    write_all(fds[1], r.data(), r.size());
    ::_exit(r.empty() ? 0 : 1);
  }
  Child child(pid);
  ::close(fds[1]);
  std::string report;
  char buf[512];
  ssize_t n;
  while ((n = ::read(fds[0], buf, sizeof buf)) > 0) report.append(buf, static_cast<std::size_t>(n));
  ::close(fds[0]);
  const int status = child.wait();
  EXPECT_EQ(report, "");
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
  // And the file is good afterwards.
  auto j = open_ok(o);
  ASSERT_TRUE(j);
  EXPECT_EQ(ids_of(j->recovered()), (std::vector<std::uint64_t>{1, 3}));
}

}  // namespace
}  // namespace tpool::store::testing
