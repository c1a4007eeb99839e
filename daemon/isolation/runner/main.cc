// tpool-runner: serves the handlers of one plugin to tpoold over the channel
// of tpool/isolation/wire.h. Started by tpoold only (posix_spawn, never a
// shell), with one end of a socketpair as fd 3:
//
//   tpool-runner --protocol 1 --daemon-pid PID --plugin FILE --name PLUGIN
//                [--address-space-mb N] [--open-files N] [--cpu-ms-per-job N]
//                [--max-output-bytes N] [--allow-syscall NAME]...
//
// Threads: the main thread reads the channel (jobs, cancels, child results)
// and watches the running job's CPU clock; one handler thread calls the
// plugin, one job at a time, taking the jobs of the daemon's call in the
// order they came (W1). The plugin's host table is this file's: output and the
// message stay here until the result; is_cancelled and remaining_ns are
// answered here from the kCancel flag and the deadline the job came with;
// log and progress become frames (W4); run_children asks the daemon and waits.
//
// Confinement: confine.h. Faults: a fatal signal, std::bad_alloc, the CPU
// limit or a trapped system call write one kFault frame (W5) and end the
// process; the daemon words the job's failure and starts a new runner.
#include <dlfcn.h>
#include <fcntl.h>
#include <malloc.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "confine.h"
#include "tpool/isolation/wire.h"
#include "tpool/plugin.h"

namespace wire = tpool::isolation::wire;
namespace runner = tpool::isolation::runner;

namespace {

constexpr int kChannelFd = 3;

std::int64_t mono_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// ---- the channel -------------------------------------------------------------

std::mutex write_mu;             // one writer at a time on the channel
std::string pending;             // kLog/kProgress frames not yet written (W4), under write_mu
std::int64_t last_write_ns = 0;  // under write_mu
// kLog/kProgress wait at most this long for company (the main thread flushes
// them on its tick); picked by hand: the daemon's watch period.
constexpr std::int64_t kFlushNs = 20000000;

bool write_all(const char* p, std::size_t n) {
  while (n > 0) {
    ssize_t w = ::send(kChannelFd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<std::size_t>(w);
  }
  return true;
}

// The daemon is gone or the channel broke: nothing left to serve.
[[noreturn]] void channel_lost() {
  ::_exit(0);
}

// Appends a frame and writes everything pending unless it may wait (W4).
template <class Fill>
void send_frame(wire::Type type, std::uint64_t job, Fill fill, bool may_wait = false) {
  std::lock_guard<std::mutex> lock(write_mu);
  wire::FrameWriter w(pending, type, job);
  fill(w);
  w.finish();
  const std::int64_t now = mono_ns();
  if (may_wait && pending.size() < wire::kFlushBytes && now - last_write_ns < kFlushNs) return;
  if (!write_all(pending.data(), pending.size())) channel_lost();
  pending.clear();
  last_write_ns = now;
}

// On a path to the process's end (a fatal signal, std::bad_alloc, the CPU
// limit): what is pending goes first, so the results of the jobs that ended
// before the fault reach the daemon (W1, W5). try_lock, not lock: the thread
// may have faulted while holding write_mu, or another may hold it; then the
// pending frames are lost and the daemon ends the front job for the fault.
// (pthread_mutex_trylock is not on POSIX's async-signal-safe list; glibc's
// is one compare-and-swap on a normal mutex, with no lock taken on failure.)
void flush_pending_before_death() {
  if (!write_mu.try_lock()) return;
  const char* p = pending.data();
  std::size_t n = pending.size();
  while (n > 0) {
    ssize_t w = ::send(kChannelFd, p, n, MSG_NOSIGNAL);
    if (w <= 0) break;
    p += w;
    n -= static_cast<std::size_t>(w);
  }
  // write_mu stays held: nothing else is written before the fault frame.
}

// The main thread's tick: what waited for company goes now.
void flush_pending() {
  std::lock_guard<std::mutex> lock(write_mu);
  if (pending.empty()) return;
  if (!write_all(pending.data(), pending.size())) channel_lost();
  pending.clear();
  last_write_ns = mono_ns();
}

// ---- the job -----------------------------------------------------------------

struct ChildResult {
  std::int32_t status;
  std::string message;
  std::string output;
};

}  // namespace

struct tpool_job {
  std::uint64_t id = 0;
  std::string handler;
  std::uint32_t attempt = 1;
  std::int64_t deadline_ns = 0;  // CLOCK_MONOTONIC; 0: none
  std::string input;
  std::atomic<bool> cancelled{false};
  // (W6) Its kCancel came while it waited in the queue: it is not given to
  // its handler. Written by the main thread before the job is queued or
  // under state.mu while it is; read by the handler thread once it took it.
  bool told_while_queued = false;
  std::size_t max_output = 0;
  std::string output;
  bool overflow = false;
  std::size_t attempted = 0;
  std::string message;
  std::deque<std::vector<ChildResult>> children;  // pointers handed out stay valid
};

namespace {

struct State {
  std::mutex mu;
  std::condition_variable cv;
  // The jobs of the daemon's call, in the order they came (W1): the handler
  // thread runs the front one (current) and pops the next when it is done.
  std::deque<tpool_job*> queue;
  tpool_job* current = nullptr;  // set and cleared by the handler thread
  // The handler thread's CPU clock when it started `current` (ns), for the
  // main thread's cpu_ms_per_job check.
  std::int64_t current_cpu_start = 0;
  // Child results for the handler thread, delivered by the main thread.
  std::vector<ChildResult> child_results;
  bool child_ready = false;
  bool idle() const { return current == nullptr && queue.empty(); }
};
State state;

// The job the handler thread is in, for the fault path (W5). Relaxed is
// enough: the fault runs on the thread that stored it, or (CPU limit) after
// the main thread read it under state.mu.
std::atomic<std::uint64_t> current_job{0};
std::uint64_t as_limit_bytes = 0;

bool over_output(tpool_job* job, std::size_t more) {
  job->attempted = std::max(job->attempted, job->output.size() + more);
  if (job->output.size() + more > job->max_output) {
    job->overflow = true;
    return true;
  }
  return false;
}

int32_t api_output_write(tpool_job* job, const void* data, size_t size) {
  if (over_output(job, size)) return TPOOL_STATUS_OUTPUT_TOO_LARGE;
  job->output.append(static_cast<const char*>(data), size);
  return TPOOL_STATUS_OK;
}

void* api_output_reserve(tpool_job* job, size_t size) {
  if (over_output(job, size)) return nullptr;
  std::size_t at = job->output.size();
  job->output.resize(at + size);
  return job->output.data() + at;
}

void api_set_message(tpool_job* job, const char* message) {
  job->message = message != nullptr ? message : "";
}

int32_t api_is_cancelled(const tpool_job* job) {
  if (job->cancelled.load(std::memory_order_relaxed)) return 1;
  return job->deadline_ns != 0 && mono_ns() >= job->deadline_ns ? 1 : 0;
}

int64_t api_remaining_ns(const tpool_job* job) {
  if (job->deadline_ns == 0) return INT64_MAX;
  std::int64_t left = job->deadline_ns - mono_ns();
  return left > 0 ? left : 0;
}

void api_log(tpool_job* job, int32_t level, const char* message) {
  send_frame(
      wire::Type::kLog, job != nullptr ? job->id : 0,
      [&](wire::FrameWriter& w) { w.i32(level).bytes(message != nullptr ? message : ""); },
      /*may_wait=*/true);
}

void api_progress(tpool_job* job, double fraction, const char* note) {
  send_frame(
      wire::Type::kProgress, job->id,
      [&](wire::FrameWriter& w) { w.f64(fraction).bytes(note != nullptr ? note : ""); },
      /*may_wait=*/true);
}

int32_t api_run_children(tpool_job* job, const char* handler, const tpool_bytes* inputs,
                         size_t count, tpool_child_result* results) {
  send_frame(wire::Type::kChildren, job->id, [&](wire::FrameWriter& w) {
    w.bytes(handler != nullptr ? handler : "").u64(count);
    for (size_t i = 0; i < count; ++i) {
      w.bytes(std::string_view(reinterpret_cast<const char*>(inputs[i].data), inputs[i].size));
    }
  });
  std::unique_lock<std::mutex> lock(state.mu);
  state.cv.wait(lock, [] { return state.child_ready; });
  state.child_ready = false;
  job->children.push_back(std::move(state.child_results));
  lock.unlock();
  const auto& got = job->children.back();
  int32_t overall = TPOOL_STATUS_OK;
  for (size_t i = 0; i < count; ++i) {
    if (i < got.size()) {
      results[i].status = got[i].status;
      results[i].message = got[i].message.c_str();
      results[i].output = reinterpret_cast<const uint8_t*>(got[i].output.data());
      results[i].output_size = got[i].output.size();
    } else {
      results[i] = {TPOOL_STATUS_INTERNAL, "the daemon sent fewer child results than asked for",
                    nullptr, 0};
    }
  }
  // The host's rule (tpool/plugin.h): non-zero when none could run.
  if (!got.empty() && got[0].status == TPOOL_STATUS_UNKNOWN_HANDLER) {
    overall = TPOOL_STATUS_UNKNOWN_HANDLER;
  }
  return overall;
}

uint32_t api_attempt(const tpool_job* job) {
  return job->attempt;
}

const tpool_host_api kHostApi = {
    sizeof(tpool_host_api),
    TPOOL_PLUGIN_ABI_MAJOR,
    TPOOL_PLUGIN_ABI_MINOR,
    0,
    api_output_write,
    api_output_reserve,
    api_set_message,
    api_is_cancelled,
    api_remaining_ns,
    api_log,
    api_progress,
    api_run_children,
    api_attempt,
};

// ---- faults (W5) ---------------------------------------------------------------

// One kFault frame with one write(2); async-signal-safe.
void write_fault(wire::Fault kind, std::uint64_t value) {
  char frame[wire::kHeaderSize + 1 + 8];
  wire::Header h;
  h.body_size = 9;
  h.type = wire::Type::kFault;
  h.job = current_job.load(std::memory_order_relaxed);
  wire::put_header(frame, h);
  frame[wire::kHeaderSize] = static_cast<char>(kind);
  std::memcpy(frame + wire::kHeaderSize + 1, &value, 8);
  (void)::send(kChannelFd, frame, sizeof frame, MSG_NOSIGNAL);
}

// The address space in use, from /proc/self/statm (open/read only).
std::uint64_t vm_bytes() {
  int fd = ::open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char buf[64];
  ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (n <= 0) return 0;
  std::uint64_t pages = 0;
  for (ssize_t i = 0; i < n && buf[i] >= '0' && buf[i] <= '9'; ++i)
    pages = pages * 10 + (buf[i] - '0');
  return pages * static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
}

void on_fatal_signal(int sig, siginfo_t* info, void*) {
  flush_pending_before_death();
  if (sig == SIGSYS) {
    write_fault(wire::Fault::kDeniedSyscall, static_cast<std::uint64_t>(info->si_syscall));
  } else {
    // Within 10% of RLIMIT_AS: the fault is most likely a failed allocation
    // the handler did not check.
    bool near = as_limit_bytes != 0 && vm_bytes() >= as_limit_bytes / 10 * 9;
    write_fault(near ? wire::Fault::kSignalNearAs : wire::Fault::kSignal,
                static_cast<std::uint64_t>(sig));
  }
  // SA_RESETHAND put the default action back: the signal is delivered again
  // when this returns (a fault re-executes; SIGABRT and SIGSYS are raised
  // again) and the process ends with it, as the daemon's waitpid shows.
  if (sig == SIGABRT || sig == SIGSYS) ::raise(sig);
}

void install_fault_handlers() {
  struct sigaction sa {};
  sa.sa_sigaction = on_fatal_signal;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESETHAND;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL, SIGSYS}) ::sigaction(sig, &sa, nullptr);
}

// An alternate stack per thread, so a stack overflow still reports.
void alt_stack() {
  static thread_local std::vector<char> stack(64 * 1024);
  stack_t ss{};
  ss.ss_sp = stack.data();
  ss.ss_size = stack.size();
  ::sigaltstack(&ss, nullptr);
}

[[noreturn]] void out_of_memory() {
  flush_pending_before_death();
  write_fault(wire::Fault::kOutOfMemory, 0);
  ::_exit(3);
}

// ---- the handler thread ----------------------------------------------------------

const tpool_plugin* plugin = nullptr;
void* plugin_ctx = nullptr;

const tpool_handler* find_handler(const std::string& name) {
  const char* base = reinterpret_cast<const char*>(plugin->handlers);
  for (size_t i = 0; i < plugin->handler_count; ++i) {
    const auto* h = reinterpret_cast<const tpool_handler*>(base + i * plugin->handler_size);
    if (name == h->name) return h;
  }
  return nullptr;
}

void run_job(tpool_job& job) {
  std::int32_t status = TPOOL_STATUS_OK;
  const tpool_handler* h = find_handler(job.handler);
  const std::int64_t started_ns = mono_ns();
  bool called = false;
  if (h == nullptr) {
    status = TPOOL_STATUS_UNKNOWN_HANDLER;
    job.message = "the runner's copy of the plugin has no handler '" + job.handler + "'";
  } else if (job.told_while_queued) {
    // (W6) Told to stop (cancelled, or past its deadline) while it waited
    // behind its batch-mates: never called. The daemon words its end.
    status = TPOOL_STATUS_CANCELLED;
  } else {
    called = true;
    try {
      status = h->call(plugin_ctx, &job, reinterpret_cast<const uint8_t*>(job.input.data()),
                       job.input.size());
    } catch (const std::bad_alloc&) {
      out_of_memory();
    } catch (const std::exception& e) {
      status = TPOOL_STATUS_INTERNAL;
      job.message = std::string("threw a C++ exception: ") + e.what() +
                    " (handlers must catch their exceptions and return a status)";
    } catch (...) {
      status = TPOOL_STATUS_INTERNAL;
      job.message =
          "threw a C++ exception that is not a std::exception (handlers must catch their "
          "exceptions and return a status)";
    }
  }
  const std::int64_t run_ns = called || h == nullptr ? mono_ns() - started_ns : -1;  // (W6)
  // Out of `current` before the result is written. With more jobs queued the
  // result may wait for company (W4): it leaves with the batch's last result
  // (which does not wait), on the main thread's 20 ms tick, at kFlushBytes,
  // when a kCancel comes, or before the process dies of a fault in a later
  // job (flush_pending_before_death), so that fault cannot take it along.
  bool more = false;
  {
    std::lock_guard<std::mutex> lock(state.mu);
    state.current = nullptr;
    more = !state.queue.empty();
  }
  try {
    send_frame(
        wire::Type::kResult, job.id,
        [&](wire::FrameWriter& w) {
          w.i32(status)
              .u32(job.overflow ? 1 : 0)
              .u64(job.attempted)
              .u32(h == nullptr ? 1 : 0)
              .bytes(job.message)
              .bytes(job.output)
              .i64(run_ns);
        },
        /*may_wait=*/more);
  } catch (const std::bad_alloc&) {
    out_of_memory();
  }
}

std::int64_t thread_cpu_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

void handler_thread() {
  alt_stack();
  for (;;) {
    tpool_job* job = nullptr;
    {
      std::unique_lock<std::mutex> lock(state.mu);
      state.cv.wait(lock, [] { return !state.queue.empty(); });
      job = state.queue.front();
      state.queue.pop_front();
      state.current = job;
      state.current_cpu_start = thread_cpu_ns();
    }
    current_job.store(job->id, std::memory_order_relaxed);
    run_job(*job);  // leaves `current` before it sends the result
    current_job.store(0, std::memory_order_relaxed);
    delete job;
  }
}

// ---- start-up ----------------------------------------------------------------------

struct Args {
  long daemon_pid = 0;
  std::string plugin_file, plugin_name;
  runner::Limits limits;
  std::uint64_t cpu_ms_per_job = 0;
  std::uint64_t max_output = std::uint64_t{64} << 20;
  std::vector<std::string> allow;
  bool ok = false;
};

Args parse_args(int argc, char** argv) {
  Args a;
  bool protocol = false;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    char* end = nullptr;
    std::uint64_t n = std::strtoull(v.c_str(), &end, 10);
    if (k == "--protocol") {
      protocol = n == wire::kProtocol;
    } else if (k == "--daemon-pid") {
      a.daemon_pid = static_cast<long>(n);
    } else if (k == "--plugin") {
      a.plugin_file = v;
    } else if (k == "--name") {
      a.plugin_name = v;
    } else if (k == "--address-space-mb") {
      a.limits.address_space_mb = n;
    } else if (k == "--open-files") {
      a.limits.open_files = n;
    } else if (k == "--cpu-ms-per-job") {
      a.cpu_ms_per_job = n;
    } else if (k == "--max-output-bytes") {
      a.max_output = n;
    } else if (k == "--allow-syscall") {
      a.allow.push_back(v);
    } else {
      return a;
    }
  }
  a.ok = protocol && a.daemon_pid > 0 && !a.plugin_file.empty() && !a.plugin_name.empty();
  return a;
}

[[noreturn]] void init_failed(std::int32_t status, const std::string& message) {
  send_frame(wire::Type::kInitFailed, 0,
             [&](wire::FrameWriter& w) { w.i32(status).bytes(message); });
  ::_exit(2);
}

// Reads one whole frame (start-up only; the serve loop reads incrementally).
bool read_frame(wire::FrameBuffer& in, wire::FrameBuffer::Frame& out) {
  for (;;) {
    bool bad = false;
    if (auto f = in.next(bad)) {
      out = *f;
      return true;
    }
    if (bad) return false;
    char* p = in.space(64 * 1024);
    ssize_t n = ::read(kChannelFd, p, 64 * 1024);
    if (n < 0 && errno == EINTR) {
      in.commit(0);
      continue;
    }
    if (n <= 0) return false;
    in.commit(static_cast<std::size_t>(n));
  }
}

}  // namespace

int main(int argc, char** argv) {
  Args args = parse_args(argc, argv);
  if (!args.ok) {
    std::fprintf(stderr,
                 "tpool-runner is started by tpoold for a plugin in process isolation "
                 "(docs/plugins.md, \"Isolation\"); it is not run by hand\n");
    return 64;
  }
  // One arena: a second thread's malloc arena would reserve 64 MiB of
  // address space at once, counted against RLIMIT_AS.
  ::mallopt(M_ARENA_MAX, 1);
  // Only stdin/out/err and the channel: whatever else the daemon had open
  // without close-on-exec (a library's descriptor) is not the plugin's.
  ::close_range(kChannelFd + 1, ~0u, 0);
#if !defined(__SANITIZE_ADDRESS__)  // not applied under ASan (confine_early)
  as_limit_bytes = args.limits.address_space_mb << 20;
#endif
  alt_stack();
  install_fault_handlers();
  std::string notes;
  if (std::string err = runner::confine_early(args.daemon_pid, args.limits, notes); !err.empty()) {
    if (err.find("is gone") != std::string::npos) return 0;  // no one to tell
    init_failed(TPOOL_STATUS_INTERNAL, "confinement: " + err);
  }

  wire::FrameBuffer in;
  wire::FrameBuffer::Frame f;
  if (!read_frame(in, f) || f.header.type != wire::Type::kInit) channel_lost();
  std::string config(wire::BodyReader(f.body).bytes());

  void* dl = ::dlopen(args.plugin_file.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (dl == nullptr) {
    const char* e = ::dlerror();
    init_failed(TPOOL_STATUS_INTERNAL, std::string("dlopen in the runner failed: ") +
                                           (e != nullptr ? e : "unknown error"));
  }
  auto entry = reinterpret_cast<tpool_plugin_entry_fn>(::dlsym(dl, TPOOL_PLUGIN_ENTRY_SYMBOL));
  plugin = entry != nullptr ? entry(&kHostApi) : nullptr;
  if (plugin == nullptr || plugin->name == nullptr || args.plugin_name != plugin->name ||
      plugin->handler_size < offsetof(tpool_handler, call) + sizeof(tpool_handler_fn)) {
    init_failed(TPOOL_STATUS_INTERNAL, "the file no longer holds plugin '" + args.plugin_name +
                                           "' (it changed after the daemon read it); reload again");
  }
  const bool has_init = plugin->struct_size >= offsetof(tpool_plugin, init) + sizeof(void*);
  if (has_init && plugin->init != nullptr) {
    char error[1024] = "";
    std::int32_t st = TPOOL_STATUS_INTERNAL;
    try {
      st = plugin->init(&kHostApi, config.c_str(), &plugin_ctx, error, sizeof error);
    } catch (...) {
      std::snprintf(error, sizeof error, "init threw a C++ exception");
    }
    error[sizeof error - 1] = '\0';
    if (st != 0) init_failed(st, error[0] != '\0' ? error : "(init gave no message)");
  }
  config.assign(config.size(), '\0');  // the config string may hold a secret

  if (std::string net = runner::drop_network(); !net.empty()) {
    notes += (notes.empty() ? "" : "; ") + net;
  }
  std::thread worker(handler_thread);
  clockid_t cpu_clock{};
  ::pthread_getcpuclockid(worker.native_handle(), &cpu_clock);
  worker.detach();
  if (std::string err = runner::install_seccomp(args.allow, notes); !err.empty()) {
    init_failed(TPOOL_STATUS_INTERNAL, "seccomp: " + err);
  }
  send_frame(wire::Type::kReady, 0, [&](wire::FrameWriter& w) { w.bytes(notes); });

  // Serve: frames from the daemon; the CPU clock of the handler thread.
  for (;;) {
    bool busy = false;
    std::int64_t job_cpu_start = 0;
    {
      std::lock_guard<std::mutex> lock(state.mu);
      busy = !state.idle();
      job_cpu_start = state.current != nullptr ? state.current_cpu_start : -1;
    }
    const bool watching = job_cpu_start >= 0 && args.cpu_ms_per_job != 0;
    pollfd p{kChannelFd, POLLIN, 0};
    // 20 ms while a job runs: the CPU limit's resolution and the longest a
    // log line waits (W4); picked by hand (the daemon's deadline thread uses
    // the same period).
    int rc = ::poll(&p, 1, busy ? 20 : -1);
    if (rc < 0 && errno == EINTR) continue;
    if (busy) flush_pending();
    if (watching) {
      timespec ts{};
      ::clock_gettime(cpu_clock, &ts);
      std::int64_t used = static_cast<std::int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
      // The job read may be older than the handler thread's current one (it
      // moved on meanwhile): then the figure is at most a job's worth high
      // for one tick, and the next tick reads the new start.
      std::lock_guard<std::mutex> lock(state.mu);
      if (state.current != nullptr && state.current_cpu_start == job_cpu_start &&
          static_cast<std::uint64_t>((used - job_cpu_start) / 1000000) > args.cpu_ms_per_job) {
        flush_pending_before_death();
        write_fault(wire::Fault::kCpuLimit,
                    static_cast<std::uint64_t>((used - job_cpu_start) / 1000000));
        ::_exit(4);
      }
    }
    if (rc == 0) continue;
    char* buf = in.space(64 * 1024);
    ssize_t n = ::read(kChannelFd, buf, 64 * 1024);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) {
      in.commit(0);
      continue;
    }
    if (n <= 0) {
      // The daemon closed an idle runner (a reload, or the last job of its
      // generation ended): fini, as in process mode, then leave. With a job
      // running, the daemon is gone: leave at once.
      bool idle = false;
      {
        std::lock_guard<std::mutex> lock(state.mu);
        idle = state.idle();
      }
      const bool has_fini = plugin->struct_size >= offsetof(tpool_plugin, fini) + sizeof(void*);
      if (n == 0 && idle && has_fini && plugin->fini != nullptr) plugin->fini(plugin_ctx);
      channel_lost();
    }
    in.commit(static_cast<std::size_t>(n));
    bool bad = false;
    std::vector<tpool_job*> jobs;  // the kJob frames of this read, in order
    while (auto fr = in.next(bad)) {
      wire::BodyReader r(fr->body);
      switch (fr->header.type) {
        case wire::Type::kJob: {
          auto* job = new tpool_job;
          job->id = fr->header.job;
          job->handler = std::string(r.bytes());
          job->attempt = r.u32();
          std::int64_t remaining = r.i64();
          job->deadline_ns = remaining >= 0 ? mono_ns() + remaining : 0;
          job->cancelled.store(r.u32() != 0, std::memory_order_relaxed);
          job->input = std::string(r.bytes());
          job->max_output = args.max_output;
          if (!r.ok()) channel_lost();
          jobs.push_back(job);  // handed over once this read's frames are parsed
          break;
        }
        case wire::Type::kCancel: {
          // The daemon's hard time limit counts for the job it has no result
          // of yet (W3): results waiting here go first, so it counts for the
          // job that is really running.
          flush_pending();
          const auto tell_queued = [&](tpool_job* j) {  // (W6)
            if (j->id != fr->header.job) return;
            j->cancelled.store(true, std::memory_order_relaxed);
            j->told_while_queued = true;
          };
          for (tpool_job* j : jobs) tell_queued(j);
          std::lock_guard<std::mutex> lock(state.mu);
          if (state.current != nullptr && state.current->id == fr->header.job) {
            state.current->cancelled.store(true, std::memory_order_relaxed);
          }
          for (tpool_job* j : state.queue) tell_queued(j);
          break;
        }
        case wire::Type::kChildrenResult: {
          std::vector<ChildResult> results(r.u64());
          for (auto& c : results) {
            c.status = r.i32();
            c.message = std::string(r.bytes());
            c.output = std::string(r.bytes());
          }
          if (!r.ok()) channel_lost();
          std::lock_guard<std::mutex> lock(state.mu);
          state.child_results = std::move(results);
          state.child_ready = true;
          state.cv.notify_all();
          break;
        }
        default:
          channel_lost();
      }
    }
    if (bad) channel_lost();
    if (!jobs.empty()) {  // one hand-over (and one wake-up) per read
      std::lock_guard<std::mutex> lock(state.mu);
      state.queue.insert(state.queue.end(), jobs.begin(), jobs.end());
      state.cv.notify_all();
    }
  }
}
