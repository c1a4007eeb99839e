// The Supervisor of one process-mode plugin: its runners, the calls it relays,
// and what it does when a runner fails. Invariants S1-S3 in supervisor.h, the
// channel's W1-W5 in wire.h.
#include "tpool/isolation/supervisor.h"

#include <poll.h>
#include <sched.h>
#include <seccomp.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstring>
#include <deque>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>

#include "spawn.h"
#include "tpool/common/mutex.h"
#include "tpool/isolation/wire.h"
#include "tpool/plugin.h"
#include "tpool/plugin_host/host.h"

namespace tpool::isolation {

using plugin_host::InvokeResult;
using plugin_host::JobCode;
using plugin_host::JobServices;
using plugin_host::LogLevel;
using Clock = std::chrono::steady_clock;

namespace {

// How often a worker waiting for its runner looks at the job's cancellation
// and deadline: the engine's deadline thread's period (20 ms).
constexpr auto kWatchPeriod = std::chrono::milliseconds(20);
// A worker alone in a plugin (no other of its calls in flight: the cores are
// likely idle) does not sleep through the end of a short job: a sleeping
// worker's wake-up costs tens of microseconds on a virtual machine, as much
// as an echo job's whole round trip. One such worker in the whole daemon
// (g_whole_spinner) polls the channel from the send until kSpinFor past the
// time the plugin's last round trip predicts, yielding its core to any other
// runnable thread between polls; any other polls for kSpinFor around that
// time (from the send when it was under kSpinFor, else after a timed sleep
// that ends kSpinFor / 2 early: a job whose time varies by more than that
// mostly ends outside the window, which is why the first waits the whole
// job). Not for round trips over kSpinUpTo (the spin would be a rounding
// error), nor with other calls in flight (the spin would take a core from a
// runner). Picked by measurement: docs/benchmarks.md, "Isolated plugins".
constexpr auto kSpinFor = std::chrono::microseconds(50);
constexpr auto kSpinUpTo = std::chrono::milliseconds(1);
// The one worker of the process allowed to spin through a whole round trip
// (kSpinFor): at most one core is ever spent so, however many plugins are
// alone. Claimed with a CAS from false, released with a store; relaxed: the
// flag guards nothing but itself.
std::atomic<bool> g_whole_spinner{false};
// Batches (invoke_batch, the engine's E7): at most kMaxBatch jobs, and
// about kBatchBudget of a handler's work, as the runners measured its calls:
// a job waits about that long at most behind its batch-mates in a runner,
// while runners that could run it in parallel may be idle. Picked by
// measurement: docs/benchmarks.md, "Isolated plugins".
constexpr std::size_t kMaxBatch = 64;
constexpr auto kBatchBudget = std::chrono::microseconds(2000);
constexpr auto kBackoffFirst = std::chrono::milliseconds(100);  // picked by hand
constexpr auto kBackoffCap = std::chrono::milliseconds(5000);   // picked by hand

bool send_all(int fd, const std::string& bytes) {
  const char* p = bytes.data();
  std::size_t n = bytes.size();
  while (n > 0) {
    ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<std::size_t>(w);
  }
  return true;
}

struct Runner {
  pid_t pid = -1;
  int fd = -1;
  wire::FrameBuffer in;
  ~Runner() {
    if (fd >= 0) ::close(fd);
  }
};

// Reads into r.in; false on EOF or error (the runner is gone).
bool fill(Runner& r) {
  char* p = r.in.space(64 * 1024);
  ssize_t n;
  while ((n = ::read(r.fd, p, 64 * 1024)) < 0 && errno == EINTR) {
  }
  if (n <= 0) {
    r.in.commit(0);
    return false;
  }
  r.in.commit(static_cast<std::size_t>(n));
  return true;
}

// Polls fd without sleeping until it is readable (true) or `until` passes.
// Each poll(2) is a system call of well under a microsecond: no pause needed
// between them.
// yield: give the core to any other runnable thread between polls (a spin
// as long as a whole job must not delay the threads that share its core).
bool spin_until_readable(int fd, Clock::time_point until, bool yield = false) {
  pollfd p{fd, POLLIN, 0};
  do {
    if (::poll(&p, 1, 0) != 0) return true;  // readable, or an error poll() will report
    if (yield) ::sched_yield();
  } while (Clock::now() < until);
  return false;
}

// kSpinFor's wait for the first result of a call alone in its plugin: 1 when
// the channel became readable, 0 when the spin ended without it (the caller
// then sleeps in poll).
int await_alone(int fd, Clock::time_point sent_at, std::chrono::nanoseconds expect) {
  bool idle = false;
  if (g_whole_spinner.compare_exchange_strong(idle, true, std::memory_order_relaxed)) {
    const bool ready = spin_until_readable(fd, sent_at + expect + kSpinFor, /*yield=*/true);
    g_whole_spinner.store(false, std::memory_order_relaxed);
    return ready ? 1 : 0;
  }
  pollfd p{fd, POLLIN, 0};
  auto spin_from = sent_at;
  if (expect > kSpinFor) {
    spin_from = sent_at + expect - kSpinFor / 2;
    const auto nap = std::chrono::nanoseconds(spin_from - Clock::now());
    if (nap.count() > 0) {
      const timespec ts{0, static_cast<long>(nap.count())};
      if (const int rc = ::ppoll(&p, 1, &ts, nullptr); rc != 0) return rc > 0 ? 1 : 0;
    }
  }
  return spin_until_readable(fd, spin_from + kSpinFor) ? 1 : 0;
}

std::string syscall_name(std::uint64_t nr) {
  char* name = ::seccomp_syscall_resolve_num_arch(SCMP_ARCH_NATIVE, static_cast<int>(nr));
  std::string s = name != nullptr ? name : "#" + std::to_string(nr);
  std::free(name);
  return s;
}

std::string signal_name(int sig) {
  const char* name = ::sigabbrev_np(sig);
  return name != nullptr ? std::string("SIG") + name : "signal " + std::to_string(sig);
}

// The one runner fault of a job, for its sentence.
struct FaultInfo {
  std::optional<wire::Fault> kind;
  std::uint64_t value = 0;
};

enum class Cause : std::uint8_t { kCrash, kTimeLimit, kMemory, kCpu, kDenied };

class Supervisor final : public plugin_host::IsolatedPlugin {
 public:
  Supervisor(plugin_host::IsolatedLoad load, SupervisorOptions options)
      : load_(std::move(load)), options_(std::move(options)) {}

  ~Supervisor() override {
    // No call is in progress: every call holds a HandlerRef, which holds us.
    std::vector<std::unique_ptr<Runner>> runners;
    {
      MutexLock lock(mu_);
      for (auto& s : slots_) {
        if (s.runner) runners.push_back(std::move(s.runner));
      }
    }
    for (auto& r : runners) end_runner(std::move(r));
  }

  Status start() {
    {
      MutexLock lock(mu_);
      slots_.resize(std::max<std::uint32_t>(1, load_.settings.runners));
    }
    for (std::size_t i = 0; i < load_.settings.runners; ++i) {
      std::string notes;
      auto r = start_runner(notes);
      if (!r.ok()) return r.status();
      if (i == 0 && !notes.empty()) {
        // Said once per load: the feature the runners go without.
        load_.log(LogLevel::kWarn, load_.plugin_name,
                  "its runners are confined without what this environment refuses: " + notes);
      }
      MutexLock lock(mu_);
      slots_[i].runner = std::move(r).value();
    }
    return Status::Ok();
  }

  std::string unavailable() const override {
    MutexLock lock(mu_);
    return unhealthy_why_;
  }

  plugin_host::IsolationStats stats() const override {
    plugin_host::IsolationStats s;
    s.plugin = load_.plugin_name;
    {
      MutexLock lock(mu_);
      for (const auto& slot : slots_) {
        // A busy slot's runner is with its worker (S2) while it runs a job.
        s.runners_alive += slot.runner || slot.out ? 1 : 0;
        s.runners_busy += slot.out ? 1 : 0;
      }
      s.calls_waiting = waiting_;
      s.healthy = unhealthy_why_.empty();
    }
    auto get = [](const std::atomic<std::uint64_t>& c) {
      return c.load(std::memory_order_relaxed);  // (S3)
    };
    s.restarts_crash = get(restarts_[static_cast<int>(Cause::kCrash)]);
    s.restarts_time_limit = get(restarts_[static_cast<int>(Cause::kTimeLimit)]);
    s.restarts_memory = get(restarts_[static_cast<int>(Cause::kMemory)]);
    s.restarts_cpu = get(restarts_[static_cast<int>(Cause::kCpu)]);
    s.restarts_denied = get(restarts_[static_cast<int>(Cause::kDenied)]);
    s.jobs_lost = get(jobs_lost_);
    s.runner_calls = get(calls_);
    s.runner_call_jobs = get(call_jobs_);
    return s;
  }

  InvokeResult invoke(const plugin_host::HandlerInfo& handler, std::string_view input,
                      JobServices& services) override;
  void invoke_batch(const plugin_host::HandlerInfo& handler,
                    std::span<const plugin_host::BatchCall> calls,
                    const plugin_host::BatchDone& done) override;

  std::size_t batch_limit(const plugin_host::HandlerInfo& handler) const override {
    std::int64_t ns = -1;
    {
      MutexLock lock(mu_);
      auto it = job_ns_.find(handler.name);
      if (it != job_ns_.end()) ns = it->second;
    }
    if (ns < 0) return 1;  // not measured yet: one at a time
    const auto n = std::chrono::nanoseconds(kBatchBudget).count() / std::max<std::int64_t>(ns, 1);
    return static_cast<std::size_t>(std::clamp<std::int64_t>(n, 1, kMaxBatch));
  }

  void retire() override {
    std::vector<std::unique_ptr<Runner>> idle;
    {
      MutexLock lock(mu_);
      retired_ = true;
      idle = take_idle_if_unused();
    }
    for (auto& r : idle) end_runner(std::move(r));
  }

 private:
  struct Slot {
    std::unique_ptr<Runner> runner;  // null: dead, restarts at restart_at
    bool busy = false;               // (S2) checked out by one worker
    bool out = false;                // its runner is with that worker (for stats())
    Clock::time_point restart_at{};
  };

  // A call of invoke_batch without its outcome yet; id: its kJob's on the
  // runner it was last sent to.
  struct Pending {
    std::size_t index = 0;
    std::uint64_t id = 0;
    bool cancel_sent = false;
  };

  // Sends every call of todo to runner r (checked out as `slot`) and serves
  // them until todo is empty (the runner is checked in) or the runner is gone
  // (the front call ended with the fault; the rest stay in todo, unsent).
  void serve(const plugin_host::HandlerInfo& h, std::span<const plugin_host::BatchCall> calls,
             const plugin_host::BatchDone& done, std::size_t slot, std::unique_ptr<Runner> r,
             std::deque<Pending>& todo, bool may_spin);
  // Adds one measurement of a job's time to the handler's average
  // (batch_limit's basis): the new figure weighs a quarter.
  void note_job_time(const plugin_host::HandlerInfo& h, std::int64_t ns) {
    MutexLock lock(mu_);
    auto it = job_ns_.find(h.name);
    if (it == job_ns_.end()) {
      job_ns_.emplace(h.name, ns);
    } else {
      it->second += (ns - it->second) / 4;
    }
  }
  // A kResult's body as the job's outcome.
  // run_ns: the handler call's time in the runner, as it reported.
  InvokeResult result_of(const plugin_host::HandlerInfo& h, wire::BodyReader& body,
                         JobServices& services, std::int64_t& run_ns) const;
  Result<std::unique_ptr<Runner>> start_runner(std::string& notes);
  // Checks out a slot with a live runner (S2); nullopt when the job was
  // cancelled while it waited, or the plugin is unhealthy (why set).
  std::optional<std::size_t> checkout(JobServices& services, std::string& why);
  void checkin(std::size_t slot, std::unique_ptr<Runner> runner, bool ok_job);
  // A replaced generation (retired_) keeps its runners while its late jobs
  // (accepted before the reload) run or wait for one, so they do not each
  // start a runner; once none does, its idle runners are taken to be ended
  // (a later late job, such as a retry, starts one again).
  std::vector<std::unique_ptr<Runner>> take_idle_if_unused() REQUIRES(mu_) {
    std::vector<std::unique_ptr<Runner>> idle;
    const bool used = waiting_ != 0 || std::any_of(slots_.begin(), slots_.end(),
                                                   [](const Slot& x) { return x.busy; });
    if (used) return idle;
    for (auto& x : slots_) {
      if (x.runner) idle.push_back(std::move(x.runner));
      x.restart_at = Clock::time_point{};  // started again only if a late job needs it
    }
    return idle;
  }
  // Records a runner's death (not a time-limit kill) towards crash_limit.
  void record_crash(const std::string& what) REQUIRES(mu_);
  std::vector<std::string> runner_argv() const;
  // Closes an idle runner's channel (it runs fini and exits) and reaps it.
  static void end_runner(std::unique_ptr<Runner> r) {
    ::close(std::exchange(r->fd, -1));
    // A second for fini and _exit; picked by hand.
    (void)detail::reap_within(r->pid, std::chrono::milliseconds(1000));
  }

  std::string who(const plugin_host::HandlerInfo& h) const {
    return "handler '" + h.name + "' (" + plugin_ref() + ")";
  }
  std::string plugin_ref() const {
    return "plugin '" + load_.plugin_name + "' " + load_.plugin_version;
  }
  std::string failure_sentence(const plugin_host::HandlerInfo& h, pid_t pid, int status,
                               const FaultInfo& fault, JobServices& services, JobCode& code,
                               Cause& cause) const;

  plugin_host::IsolatedLoad load_;
  SupervisorOptions options_;
  mutable Mutex mu_;
  CondVar cv_;
  std::vector<Slot> slots_ GUARDED_BY(mu_);
  std::deque<Clock::time_point> crashes_ GUARDED_BY(mu_);
  // Per handler: the time one of its handler calls takes in a runner (as the
  // runner measures it), averaged over its last calls; batch_limit's basis.
  std::map<std::string, std::int64_t, std::less<>> job_ns_ GUARDED_BY(mu_);
  std::uint32_t consecutive_crashes_ GUARDED_BY(mu_) = 0;
  std::string unhealthy_why_ GUARDED_BY(mu_);
  // Calls in checkout() waiting for a free runner (the channel's queue).
  std::uint64_t waiting_ GUARDED_BY(mu_) = 0;
  bool retired_ GUARDED_BY(mu_) = false;  // a reload replaced this generation
  std::atomic<std::uint64_t> next_job_{1};
  std::atomic<std::uint64_t> restarts_[5] = {};
  std::atomic<std::uint64_t> jobs_lost_{0};
  std::atomic<std::uint64_t> calls_{0};      // (S3) calls sent to a runner
  std::atomic<std::uint64_t> call_jobs_{0};  // (S3) the jobs they carried
  // The last job's send-to-result time (kSpinFor's hint; S3: relaxed, a
  // stale value only costs one spin or one sleep).
  std::atomic<std::int64_t> round_trip_ns_{0};
};

std::vector<std::string> Supervisor::runner_argv() const {
  const auto& s = load_.settings;
  std::vector<std::string> a = {resolve_runner_path(options_.runner_path),
                                "--protocol",
                                std::to_string(wire::kProtocol),
                                "--daemon-pid",
                                std::to_string(::getpid()),
                                "--plugin",
                                load_.file,
                                "--name",
                                load_.plugin_name,
                                "--address-space-mb",
                                std::to_string(s.address_space_mb),
                                "--open-files",
                                std::to_string(s.open_files),
                                "--cpu-ms-per-job",
                                std::to_string(s.cpu_seconds_per_job * 1000),
                                "--max-output-bytes",
                                std::to_string(load_.max_output_bytes)};
  for (const auto& name : s.allow_syscalls) {
    a.push_back("--allow-syscall");
    a.push_back(name);
  }
  return a;
}

Result<std::unique_ptr<Runner>> Supervisor::start_runner(std::string& notes) {
  auto spawned = detail::spawn_runner(runner_argv());
  if (!spawned.ok()) return spawned.status();
  auto r = std::make_unique<Runner>();
  r->pid = spawned.value().pid;
  r->fd = spawned.value().fd;
  std::string init;
  wire::FrameWriter w(init, wire::Type::kInit, 0);
  w.bytes(load_.config);
  w.finish();
  auto fail = [&](std::string why) -> Status {
    (void)detail::kill_and_reap(r->pid);
    return Status::FailedPrecondition(std::move(why));
  };
  if (!send_all(r->fd, init)) {
    int status = detail::reap_within(r->pid, std::chrono::milliseconds(1000));
    return Status::FailedPrecondition("the runner ended before it read its start-up frame (" +
                                      detail::describe_wait_status(status) + ")");
  }
  const auto until = Clock::now() + options_.start_timeout;
  for (;;) {
    bool bad = false;
    if (auto f = r->in.next(bad)) {
      wire::BodyReader body(f->body);
      switch (f->header.type) {
        case wire::Type::kLog: {
          auto level = static_cast<LogLevel>(std::clamp(body.i32(), 0, 3));
          load_.log(level, load_.plugin_name, body.bytes());
          continue;
        }
        case wire::Type::kReady:
          notes = std::string(body.bytes());
          return r;
        case wire::Type::kInitFailed: {
          std::int32_t st = body.i32();
          std::string msg(body.bytes());
          (void)detail::reap_within(r->pid, std::chrono::milliseconds(1000));
          return Status::FailedPrecondition(
              "init in the runner returned " + std::to_string(st) + ": " + msg +
              "; fix its config string ([plugins.config] " + load_.plugin_name + ") or the plugin");
        }
        default:
          return fail("the runner sent an unexpected frame at start-up");
      }
    }
    if (bad) return fail("the runner sent a malformed frame at start-up");
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
    if (left.count() <= 0) {
      return fail("the runner did not report ready within " +
                  std::to_string(options_.start_timeout.count()) +
                  " ms (dlopen, init and confinement); it was killed");
    }
    pollfd p{r->fd, POLLIN, 0};
    int rc = ::poll(&p, 1, static_cast<int>(left.count()));
    if (rc < 0 && errno != EINTR) return fail(std::string("poll failed: ") + std::strerror(errno));
    if (rc > 0 && !fill(*r)) {
      int status = detail::reap_within(r->pid, std::chrono::milliseconds(1000));
      return Status::FailedPrecondition("the runner ended during start-up (" +
                                        detail::describe_wait_status(status) + ")");
    }
  }
}

void Supervisor::record_crash(const std::string& what) {
  const auto now = Clock::now();
  crashes_.push_back(now);
  while (!crashes_.empty() && now - crashes_.front() > load_.settings.crash_window) {
    crashes_.pop_front();
  }
  ++consecutive_crashes_;
  if (unhealthy_why_.empty() && load_.settings.crash_limit != 0 &&
      crashes_.size() >= load_.settings.crash_limit) {
    unhealthy_why_ =
        "plugin '" + load_.plugin_name + "' is unhealthy: its runners failed " +
        std::to_string(crashes_.size()) + " times within " +
        std::to_string(load_.settings.crash_window.count()) + " ms (crash_limit " +
        std::to_string(load_.settings.crash_limit) + "; the last: " + what +
        "); it takes no new jobs until it is reloaded (SIGHUP or tpoolctl reload) after a fix";
    load_.log(LogLevel::kError, load_.plugin_name, unhealthy_why_);
  }
}

std::optional<std::size_t> Supervisor::checkout(JobServices& services, std::string& why) {
  MutexLock lock(mu_);
  for (;;) {
    if (!unhealthy_why_.empty()) {
      why = unhealthy_why_;
      return std::nullopt;
    }
    const auto now = Clock::now();
    Clock::time_point next_restart = Clock::time_point::max();
    std::optional<std::size_t> dead;
    for (std::size_t i = 0; i < slots_.size(); ++i) {
      Slot& s = slots_[i];
      if (s.busy) continue;
      if (s.runner) {
        s.busy = true;  // (S2)
        return i;
      }
      if (s.restart_at <= now) {
        dead = i;
      } else {
        next_restart = std::min(next_restart, s.restart_at);
      }
    }
    if (dead) {
      slots_[*dead].busy = true;  // (S2) restarted by this worker, outside the lock
      lock.unlock();
      std::string notes;
      auto r = start_runner(notes);
      lock.lock();
      if (r.ok()) {
        slots_[*dead].runner = std::move(r).value();
        return dead;
      }
      slots_[*dead].busy = false;
      record_crash("a restart failed: " + r.status().message());
      slots_[*dead].restart_at =
          Clock::now() +
          std::min<Clock::duration>(kBackoffCap,
                                    kBackoffFirst * (1u << std::min(consecutive_crashes_, 6u)));
      continue;
    }
    if (services.is_cancelled()) {
      why.clear();
      return std::nullopt;
    }
    ++waiting_;  // seen by stats() only while the lock is released, in the wait
    cv_.wait_until(lock, std::min(next_restart, Clock::now() + kWatchPeriod));
    --waiting_;
  }
}

void Supervisor::checkin(std::size_t slot, std::unique_ptr<Runner> runner, bool ok_job) {
  MutexLock lock(mu_);
  Slot& s = slots_[slot];
  s.busy = false;
  s.out = false;
  if (runner && retired_) {
    s.runner = std::move(runner);
    std::vector<std::unique_ptr<Runner>> idle = take_idle_if_unused();
    cv_.notify_all();
    lock.unlock();
    for (auto& r : idle) end_runner(std::move(r));
    return;
  }
  if (runner) {
    s.runner = std::move(runner);
    if (ok_job) consecutive_crashes_ = 0;
  } else {
    // Backoff before the slot's next runner: 100 ms doubling to the cap.
    const std::uint32_t n = std::min(consecutive_crashes_ == 0 ? 0u : consecutive_crashes_ - 1, 6u);
    s.restart_at = Clock::now() + std::min<Clock::duration>(kBackoffCap, kBackoffFirst * (1u << n));
  }
  cv_.notify_all();
}

std::string Supervisor::failure_sentence(const plugin_host::HandlerInfo& h, pid_t pid, int status,
                                         const FaultInfo& fault, JobServices& services,
                                         JobCode& code, Cause& cause) const {
  const std::string runner = "runner " + std::to_string(pid);
  const std::string attempt = " on attempt " + std::to_string(services.attempt());
  const std::string mb = std::to_string(load_.settings.address_space_mb);
  code = JobCode::kInternal;
  cause = Cause::kCrash;
  if (fault.kind == wire::Fault::kDeniedSyscall) {
    cause = Cause::kDenied;
    code = JobCode::kPermanent;
    const std::string name = syscall_name(fault.value);
    return "handler '" + h.name + "' called the system call '" + name +
           "', which the runner's seccomp filter denies: " + runner + " was stopped" + attempt +
           " and replaced; if plugin '" + load_.plugin_name + "' needs it, add \"" + name +
           "\" to allow_syscalls in [plugins.isolation." + load_.plugin_name + "]";
  }
  if (fault.kind == wire::Fault::kOutOfMemory) {
    cause = Cause::kMemory;
    return "handler '" + h.name + "' ran out of memory in " + runner +
           ": an allocation failed (std::bad_alloc) under its address-space limit of " + mb +
           " MiB (address_space_mb)" + attempt +
           "; the runner was replaced. Make the job use less memory or raise the limit";
  }
  if (fault.kind == wire::Fault::kSignalNearAs) {
    cause = Cause::kMemory;
    return "handler '" + h.name + "' crashed: " + signal_name(static_cast<int>(fault.value)) +
           " in " + runner + " with its address space at its limit of " + mb +
           " MiB (address_space_mb): it ran out of memory" + attempt +
           "; the runner was replaced. Make the job use less memory or raise the limit";
  }
  if (fault.kind == wire::Fault::kCpuLimit) {
    cause = Cause::kCpu;
    code = JobCode::kPermanent;
    return "handler '" + h.name + "' used " + std::to_string(fault.value) +
           " ms of CPU time, over its limit of " +
           std::to_string(load_.settings.cpu_seconds_per_job) +
           " s (cpu_seconds_per_job): " + runner + " was stopped" + attempt + " and replaced";
  }
  std::string how = detail::describe_wait_status(status);
  if (WIFEXITED(status)) {
    return "handler '" + h.name + "' ended " + runner + " (" + plugin_ref() + ", " + how +
           ") in the middle of the job" + attempt + "; the runner was replaced";
  }
  return "handler '" + h.name + "' crashed: " + how + " in " + runner + " (" + plugin_ref() + ")" +
         attempt + "; the runner was replaced";
}

InvokeResult Supervisor::result_of(const plugin_host::HandlerInfo& h, wire::BodyReader& body,
                                   JobServices& services, std::int64_t& run_ns) const {
  InvokeResult res;
  const std::int32_t status = body.i32();
  const bool overflow = body.u32() != 0;
  const std::uint64_t attempted = body.u64();
  (void)body.u32();
  std::string msg(body.bytes());
  std::string_view out = body.bytes();
  run_ns = body.i64();
  if (run_ns < 0) {  // (W6) never given to the handler
    res.started = false;
    res.code = services.deadline_passed() ? JobCode::kDeadlineExceeded : JobCode::kCancelled;
    return res;
  }
  if (overflow) {
    res.code = JobCode::kOutputTooLarge;
    res.plugin_status = status;
    res.message = plugin_host::output_too_large_message(who(h), attempted, load_.max_output_bytes);
  } else if (status != TPOOL_STATUS_OK) {
    res.plugin_status = status;
    res.code = plugin_host::code_of_status(status);
    if (status == TPOOL_STATUS_INTERNAL && msg.rfind("threw", 0) == 0) {
      res.threw = true;
      msg = who(h) + " " + msg;
    }
    res.message = !msg.empty() ? std::move(msg)
                               : who(h) + " failed with status " + std::to_string(status) +
                                     " and gave no message";
  } else if (services.is_cancelled()) {
    res.ignored_cancellation = services.claim_ignored_cancellation();
    const bool deadline = services.deadline_passed();
    res.code = deadline ? JobCode::kDeadlineExceeded : JobCode::kCancelled;
    res.message = "the job was " + std::string(deadline ? "past its deadline" : "cancelled") +
                  " when " + who(h) + " returned; its output is discarded";
  } else {
    res.output = std::string(out);
    res.message = std::move(msg);
  }
  return res;
}

InvokeResult Supervisor::invoke(const plugin_host::HandlerInfo& h, std::string_view input,
                                JobServices& services) {
  InvokeResult out;
  const plugin_host::BatchCall call{input, &services};
  invoke_batch(h, std::span<const plugin_host::BatchCall>(&call, 1),
               [&out](std::size_t, InvokeResult&& r) { out = std::move(r); });
  return out;
}

void Supervisor::invoke_batch(const plugin_host::HandlerInfo& h,
                              std::span<const plugin_host::BatchCall> calls,
                              const plugin_host::BatchDone& done) {
  // The calls without an outcome, in the order they go to a runner (W1).
  std::deque<Pending> todo;
  for (std::size_t i = 0; i < calls.size(); ++i) todo.push_back(Pending{i});
  while (!todo.empty()) {
    JobServices& first = *calls[todo.front().index].services;
    std::string why;
    auto slot = checkout(first, why);
    if (!slot) {
      if (!why.empty()) {  // unhealthy: retrying cannot help until a reload
        for (const Pending& p : todo) {
          InvokeResult res;
          res.code = JobCode::kPermanent;
          res.message = why;
          done(p.index, std::move(res));
        }
        return;
      }
      // The first call was cancelled or past its deadline while no runner
      // was free; the others wait on. Its handler never ran: the engine
      // ends it with the one sentence for that (E5, as W6).
      InvokeResult res;
      res.started = false;
      res.code = first.deadline_passed() ? JobCode::kDeadlineExceeded : JobCode::kCancelled;
      const std::size_t index = todo.front().index;
      todo.pop_front();
      done(index, std::move(res));
      continue;
    }
    std::unique_ptr<Runner> r;
    bool alone = false;  // no other call of this plugin in flight: spin (kSpinFor)
    {
      MutexLock lock(mu_);
      r = std::move(slots_[*slot].runner);  // (S2) ours until checkin
      slots_[*slot].out = r != nullptr;
      alone =
          std::count_if(slots_.begin(), slots_.end(), [](const Slot& s) { return s.busy; }) == 1;
    }
    // An idle runner writes nothing (W1): readable means it is gone (killed
    // from outside, or its plugin's own thread crashed it). Replace it before
    // the jobs are sent, so no job is blamed for it.
    if (r) {
      pollfd idle{r->fd, POLLIN, 0};
      if (::poll(&idle, 1, 0) != 0) {
        const pid_t pid = r->pid;
        const std::string how =
            detail::describe_wait_status(detail::reap_within(pid, std::chrono::milliseconds(1000)));
        r.reset();
        restarts_[static_cast<int>(Cause::kCrash)].fetch_add(1, std::memory_order_relaxed);
        load_.log(
            LogLevel::kWarn, load_.plugin_name,
            "runner " + std::to_string(pid) + " ended while idle (" + how + "); starting another");
        std::string notes;
        auto fresh = start_runner(notes);
        if (!fresh.ok()) {
          {
            MutexLock lock(mu_);
            record_crash("runner " + std::to_string(pid) + " ended while idle (" + how +
                         ") and could not be restarted: " + fresh.status().message());
          }
          checkin(*slot, nullptr, false);
          continue;  // another runner, or the backoff
        }
        r = std::move(fresh).value();
      }
    }
    serve(h, calls, done, *slot, std::move(r), todo, alone && calls.size() == 1);
  }
}

void Supervisor::serve(const plugin_host::HandlerInfo& h,
                       std::span<const plugin_host::BatchCall> calls,
                       const plugin_host::BatchDone& done, std::size_t slot,
                       std::unique_ptr<Runner> r, std::deque<Pending>& todo, bool may_spin) {
  // Every call still to do goes to this runner in one write, each with a
  // fresh id: the runner queues them and runs them in this order (W1).
  {
    std::string frames;
    for (Pending& p : todo) {
      p.id = next_job_.fetch_add(1, std::memory_order_relaxed);
      p.cancel_sent = false;
      JobServices& services = *calls[p.index].services;
      wire::FrameWriter w(frames, wire::Type::kJob, p.id);
      auto left = services.remaining();
      std::int64_t remaining = -1;
      if (left) remaining = std::max<std::int64_t>(0, left->count());
      p.cancel_sent = services.is_cancelled();  // goes with its flag set
      w.bytes(h.name)
          .u32(services.attempt())
          .i64(remaining)
          .u32(p.cancel_sent ? 1 : 0)
          .bytes(calls[p.index].input);
      w.finish();
    }
    (void)send_all(r->fd, frames);                   // a failure shows as EOF below
    calls_.fetch_add(1, std::memory_order_relaxed);  // (S3)
    call_jobs_.fetch_add(todo.size(), std::memory_order_relaxed);
  }
  // The handler calls' time in the runner, for batch_limit.
  std::int64_t run_ns_sum = 0;
  std::int64_t results = 0;
  auto services_of = [&](std::uint64_t id) -> JobServices* {
    for (const Pending& p : todo) {
      if (p.id == id) return calls[p.index].services;
    }
    return nullptr;
  };
  const auto sent_at = Clock::now();
  // kSpinFor: when to expect the result, if this call spins at all.
  const std::chrono::nanoseconds expect(round_trip_ns_.load(std::memory_order_relaxed));
  may_spin = may_spin && expect <= kSpinUpTo;  // once, on the first wait
  FaultInfo fault;
  // The front call (the one the runner runs) was seen told to stop at this
  // time; its cancel_grace counts from then (W3).
  std::optional<Clock::time_point> front_stop_seen;
  bool eof = false;
  for (;;) {
    bool bad = false;
    std::optional<wire::FrameBuffer::Frame> f;
    while ((f = r->in.next(bad))) {
      wire::BodyReader body(f->body);
      switch (f->header.type) {
        case wire::Type::kLog: {
          auto level = static_cast<LogLevel>(std::clamp(body.i32(), 0, 3));
          std::string_view msg = body.bytes();
          JobServices* s = f->header.job == 0 ? nullptr : services_of(f->header.job);
          if (s != nullptr) {
            s->log(level, msg);
          } else {
            load_.log(level, load_.plugin_name, msg);
          }
          break;
        }
        case wire::Type::kProgress: {
          double frac = body.f64();
          if (JobServices* s = services_of(f->header.job)) {
            s->progress(std::clamp(frac, 0.0, 1.0), body.bytes());
          }
          break;
        }
        case wire::Type::kChildren: {
          JobServices* s = services_of(f->header.job);
          if (s == nullptr) {
            bad = true;
            break;
          }
          std::string child(body.bytes());
          const std::uint64_t n = body.u64();
          std::vector<std::string> owned;
          for (std::uint64_t i = 0; i < n && body.ok(); ++i) owned.emplace_back(body.bytes());
          std::vector<std::string_view> inputs(owned.begin(), owned.end());
          std::vector<InvokeResult> got = s->run_children(child, inputs);
          std::string reply;
          wire::FrameWriter w(reply, wire::Type::kChildrenResult, f->header.job);
          w.u64(got.size());
          for (const auto& c : got) {
            w.i32(c.plugin_status != 0 ? c.plugin_status : static_cast<std::int32_t>(c.code))
                .bytes(c.message)
                .bytes(c.output);
          }
          w.finish();
          (void)send_all(r->fd, reply);
          break;
        }
        case wire::Type::kFault:
          if (f->body.size() < 9) {
            bad = true;
            break;
          }
          fault.kind = static_cast<wire::Fault>(static_cast<std::uint8_t>(f->body[0]));
          std::memcpy(&fault.value, f->body.data() + 1, 8);
          break;
        case wire::Type::kResult: {
          // Results come in the order the jobs went (W1): this is the front's.
          if (todo.empty() || f->header.job != todo.front().id) {
            bad = true;
            break;
          }
          const std::size_t index = todo.front().index;
          std::int64_t run_ns = 0;
          InvokeResult res = result_of(h, body, *calls[index].services, run_ns);
          if (run_ns >= 0) {  // a job never called (W6) says nothing of the handler's time
            run_ns_sum += run_ns;
            ++results;
          }
          todo.pop_front();
          front_stop_seen.reset();
          if (todo.empty()) {
            checkin(slot, std::move(r), true);
            if (calls.size() == 1 && run_ns >= 0) {
              round_trip_ns_.store(std::chrono::nanoseconds(Clock::now() - sent_at).count(),
                                   std::memory_order_relaxed);
            }
            if (results != 0) note_job_time(h, run_ns_sum / results);
            done(index, std::move(res));
            return;
          }
          done(index, std::move(res));
          break;
        }
        default:
          bad = true;
          break;
      }
      if (bad) break;
    }
    // The runner is gone (EOF, a malformed frame, or killed at the time
    // limit): reap it, word the front job's end, free the slot for a restart
    // (W2). The calls behind the front never started: they stay in todo for
    // the next runner.
    auto runner_gone = [&](bool time_limit) {
      const std::size_t index = todo.front().index;
      JobServices& services = *calls[index].services;
      todo.pop_front();
      const pid_t pid = r->pid;
      int status = time_limit || bad ? detail::kill_and_reap(pid)
                                     : detail::reap_within(pid, std::chrono::milliseconds(1000));
      r.reset();
      jobs_lost_.fetch_add(1, std::memory_order_relaxed);
      InvokeResult res;
      if (time_limit) {
        const bool deadline = services.deadline_passed();
        res.code = deadline ? JobCode::kDeadlineExceeded : JobCode::kCancelled;
        res.message = who(h) + " did not return within cancel_grace_ms (" +
                      std::to_string(options_.cancel_grace.count()) + " ms) after its job was " +
                      (deadline ? "past its deadline" : "cancelled") + ": runner " +
                      std::to_string(pid) + " was killed and replaced";
        restarts_[static_cast<int>(Cause::kTimeLimit)].fetch_add(1, std::memory_order_relaxed);
        load_.log(LogLevel::kWarn, load_.plugin_name, res.message);
      } else {
        Cause cause = Cause::kCrash;
        res.message = bad ? who(h) + ": runner " + std::to_string(pid) +
                                " broke the channel's protocol and was replaced"
                          : failure_sentence(h, pid, status, fault, services, res.code, cause);
        restarts_[static_cast<int>(cause)].fetch_add(1, std::memory_order_relaxed);
        load_.log(LogLevel::kError, load_.plugin_name, res.message);
        MutexLock lock(mu_);
        record_crash(res.message);
      }
      checkin(slot, nullptr, false);
      done(index, std::move(res));
    };
    if (bad || eof) {
      runner_gone(false);
      return;
    }
    // Cancellation: every call told once (kCancel); the front one, still
    // running cancel_grace after it was seen told, is the hard time limit
    // (W3).
    const auto now = Clock::now();
    for (Pending& p : todo) {
      if (!p.cancel_sent && calls[p.index].services->is_cancelled()) {
        std::string c;
        wire::FrameWriter w(c, wire::Type::kCancel, p.id);
        w.finish();
        (void)send_all(r->fd, c);
        p.cancel_sent = true;
      }
    }
    if (todo.front().cancel_sent) {
      if (!front_stop_seen) {
        front_stop_seen = now;
      } else if (now - *front_stop_seen >= options_.cancel_grace) {
        runner_gone(true);
        return;
      }
    }
    pollfd p{r->fd, POLLIN, 0};
    int rc = 0;
    if (may_spin) {
      may_spin = false;
      rc = await_alone(r->fd, sent_at, expect);
    }
    if (rc == 0) rc = ::poll(&p, 1, static_cast<int>(kWatchPeriod.count()));
    // EOF: the frames already buffered (a result, a kFault) are taken on the
    // next turn, before the end.
    if (rc > 0 && !fill(*r)) eof = true;
  }
}

}  // namespace

std::string resolve_runner_path(const std::string& configured) {
  if (!configured.empty()) return configured;
  std::error_code ec;
  auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return "tpool-runner";
  return (exe.parent_path() / "tpool-runner").string();
}

std::vector<std::string> unknown_syscalls(const std::vector<std::string>& names) {
  std::vector<std::string> out;
  for (const auto& n : names) {
    if (::seccomp_syscall_resolve_name(n.c_str()) == __NR_SCMP_ERROR) out.push_back(n);
  }
  return out;
}

plugin_host::IsolationFactory make_factory(SupervisorOptions options) {
  return
      [options](
          plugin_host::IsolatedLoad load) -> Result<std::shared_ptr<plugin_host::IsolatedPlugin>> {
        auto s = std::make_shared<Supervisor>(std::move(load), options);
        if (Status st = s->start(); !st.ok()) return st;
        return std::shared_ptr<plugin_host::IsolatedPlugin>(std::move(s));
      };
}

}  // namespace tpool::isolation
