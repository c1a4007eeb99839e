// The fatal-signal handler (crash.h). Everything it does is async-signal-safe
// (signal-safety(7)): it formats into a stack buffer, reads the crashing
// thread's ThreadJob (engine/thread_job.h, T3), calls write(2), and returns;
// SA_RESETHAND has put back the default action, so the fault recurs (SIGSEGV,
// SIGBUS, SIGFPE, SIGILL re-execute the instruction) or the signal is raised
// again (SIGABRT, or one sent with kill), and the process dies by it as it
// would have without us.
#include "crash.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "tpool/engine/thread_job.h"

namespace tpool::server {
namespace {

bool g_json = false;  // written once before any thread starts, then read-only

// 64 KiB: enough for the handler's frame and buffer (picked by hand, well
// above MINSIGSTKSZ; glibc's SIGSTKSZ is no longer a constant).
constexpr std::size_t kAltStackBytes = 64 * 1024;

struct Line {
  char buf[512];
  std::size_t n = 0;
  void put(const char* s, std::size_t len) {
    for (std::size_t i = 0; i < len && n < sizeof buf - 1; ++i) buf[n++] = s[i];
  }
  void put(const char* s) { put(s, std::strlen(s)); }  // strlen is async-signal-safe
  void put_u64(std::uint64_t v) {
    char d[24];
    std::size_t k = 0;
    do {
      d[k++] = static_cast<char>('0' + v % 10);
      v /= 10;
    } while (v != 0);
    while (k > 0) put(&d[--k], 1);
  }
  void put_hex(std::uintptr_t v) {
    static const char digits[] = "0123456789abcdef";
    char d[2 * sizeof v];
    std::size_t k = 0;
    do {
      d[k++] = digits[v & 0xf];
      v >>= 4;
    } while (v != 0);
    put("0x");
    while (k > 0) put(&d[--k], 1);
  }
};

const char* signal_name(int sig) {
  switch (sig) {
    case SIGSEGV:
      return "SIGSEGV";
    case SIGBUS:
      return "SIGBUS";
    case SIGFPE:
      return "SIGFPE";
    case SIGILL:
      return "SIGILL";
    case SIGABRT:
      return "SIGABRT";
    default:
      return "signal";
  }
}

extern "C" void on_fatal_signal(int sig, siginfo_t* info, void*) {
  const int saved_errno = errno;
  Line l;
  l.put(g_json ? "{\"level\":\"critical\",\"msg\":\"" : "tpoold: critical: ");
  l.put("fatal signal ");
  l.put(signal_name(sig));
  l.put(" (");
  l.put_u64(static_cast<std::uint64_t>(sig));
  l.put(")");
  const engine::ThreadJob* tj = engine::this_thread_job();  // (T3)
  if (tj->handler != nullptr) {
    l.put(" in handler ");
    // Handler names are [A-Za-z0-9_.-], 1..64 characters: nothing to escape.
    l.put(tj->handler, tj->handler_len < 64 ? tj->handler_len : 64);
    l.put(" running job ");
    l.put_u64(tj->job_id);
  } else {
    l.put(" outside any handler");
  }
  if ((sig == SIGSEGV || sig == SIGBUS) && info != nullptr && info->si_code > 0) {
    l.put(" at address ");
    l.put_hex(reinterpret_cast<std::uintptr_t>(info->si_addr));
  }
  l.put(
      "; tpoold dies with every job it held (accepted, queued, running and retained results "
      "are lost); see docs/operations.md, What a crash loses");
  l.put(g_json ? "\"}\n" : "\n");
  const char* p = l.buf;
  std::size_t left = l.n;
  while (left > 0) {
    ssize_t w = ::write(STDERR_FILENO, p, left);
    if (w <= 0) {
      if (w < 0 && errno == EINTR) continue;
      break;
    }
    p += w;
    left -= static_cast<std::size_t>(w);
  }
  errno = saved_errno;
  // SA_RESETHAND restored the default action. A fault re-executes its
  // instruction on return; a raised or sent signal (abort, kill) is raised
  // again and stays pending (blocked while we run) until we return.
  if (info == nullptr || info->si_code <= 0) ::raise(sig);
}

// The calling thread's alternate signal stack; freed when the thread exits.
struct AltStack {
  void* mem = nullptr;
  void install() {
    if (mem != nullptr) return;
    stack_t current{};
    // A thread that has one already (a sanitizer runtime gives each thread
    // its own) keeps it: replacing it would leave its owner to free ours.
    if (::sigaltstack(nullptr, &current) == 0 && (current.ss_flags & SS_DISABLE) == 0) return;
    mem = std::malloc(kAltStackBytes);
    if (mem == nullptr) return;  // no report on stack overflow: not worth failing for
    stack_t ss{};
    ss.ss_sp = mem;
    ss.ss_size = kAltStackBytes;
    if (::sigaltstack(&ss, nullptr) != 0) {
      std::free(mem);
      mem = nullptr;
    }
  }
  ~AltStack() {
    if (mem == nullptr) return;
    stack_t ss{};
    ss.ss_flags = SS_DISABLE;
    (void)::sigaltstack(&ss, nullptr);
    std::free(mem);
  }
};
thread_local AltStack t_alt_stack;

}  // namespace

void install_crash_handler(bool json) {
  g_json = json;
  t_alt_stack.install();
  struct sigaction sa {};
  sa.sa_sigaction = &on_fatal_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_SIGINFO | SA_RESETHAND | SA_ONSTACK;
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) ::sigaction(sig, &sa, nullptr);
}

void crash_handler_thread_init() {
  t_alt_stack.install();
}

}  // namespace tpool::server
