/* misbehave: a test plugin whose handlers do what a plugin must not, so the
 * daemon's integration tests can show what tpoold does about it
 * (tests/integration/daemon/misbehave_test.cc, issue 13 items 3, 7 and 9).
 * Never install it.
 *
 *   spin      default lane; burns the CPU for <input> ms (decimal, default
 *             600000) and never checks cancellation or the deadline.
 *   block     blocking lane; sleeps <input> ms (default 600000) in one
 *             nanosleep per second and never checks cancellation.
 *   segfault  writes through a null pointer (SIGSEGV).
 *   abort     calls abort() (SIGABRT).
 */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <time.h>
#include <tpool/plugin.h>

static long long input_ms(const uint8_t* input, size_t size) {
  long long v = 0;
  size_t i;
  if (size == 0 || size > 9) return 600000;
  for (i = 0; i < size; ++i) {
    if (input[i] < '0' || input[i] > '9') return 600000;
    v = v * 10 + (input[i] - '0');
  }
  return v;
}

static long long now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int32_t spin_call(void* ctx, tpool_job* job, const uint8_t* input, size_t size) {
  volatile unsigned long long n = 0;
  long long end = now_ns() + input_ms(input, size) * 1000000LL;
  (void)ctx;
  (void)job;
  while (now_ns() < end) {
    for (int i = 0; i < 100000; ++i) n = n + 1;
  }
  return TPOOL_STATUS_OK;
}

static int32_t block_call(void* ctx, tpool_job* job, const uint8_t* input, size_t size) {
  long long end = now_ns() + input_ms(input, size) * 1000000LL;
  long long left;
  (void)ctx;
  (void)job;
  while ((left = end - now_ns()) > 0) {
    struct timespec ts;
    if (left > 1000000000LL) left = 1000000000LL;
    ts.tv_sec = (time_t)(left / 1000000000LL);
    ts.tv_nsec = (long)(left % 1000000000LL);
    nanosleep(&ts, NULL);
  }
  return TPOOL_STATUS_OK;
}

/* A real fault at address 0 even in `make asan`: the sanitizers would report
 * the null store themselves (UBSan halts first) instead of letting it fault. */
#if defined(__GNUC__)
__attribute__((no_sanitize("undefined"), no_sanitize_address))
#endif
static int32_t
segfault_call(void* ctx, tpool_job* job, const uint8_t* input, size_t size) {
  volatile int* volatile p = NULL;
  (void)ctx;
  (void)job;
  (void)input;
  (void)size;
  *p = 1;
  return TPOOL_STATUS_OK;
}

static int32_t abort_call(void* ctx, tpool_job* job, const uint8_t* input, size_t size) {
  (void)ctx;
  (void)job;
  (void)input;
  (void)size;
  abort();
}

static const tpool_handler handlers[] = {
    {"spin", "Burns the CPU for <input> ms, ignoring cancellation.", TPOOL_LANE_DEFAULT, 0, 16,
     spin_call},
    {"block", "Sleeps <input> ms, ignoring cancellation.", TPOOL_LANE_BLOCKING, 0, 16, block_call},
    {"segfault", "Writes through a null pointer.", TPOOL_LANE_DEFAULT, 0, 0, segfault_call},
    {"abort", "Calls abort().", TPOOL_LANE_DEFAULT, 0, 0, abort_call},
};

static const tpool_plugin plugin = {
    TPOOL_PLUGIN_HEADER,
    "misbehave",
    "1.0.0",
    "Test plugin: handlers that ignore cancellation or crash.",
    handlers,
    sizeof handlers / sizeof handlers[0],
    NULL,
    NULL,
};

TPOOL_PLUGIN_EXPORT const tpool_plugin* tpool_plugin_entry(const tpool_host_api* h) {
  (void)h;
  return &plugin;
}
