/* isolation_bad: a test plugin whose handlers fail in the ways process
 * isolation must contain (tests/integration/daemon/isolation_test.cc, issue
 * 18). Never install it.
 *
 *   iso_segv    writes through a null pointer (SIGSEGV).
 *   iso_abort   calls abort() (SIGABRT).
 *   iso_spin    burns the CPU for ever, never checking cancellation.
 *   iso_hog     allocates and touches 1 MiB blocks until malloc fails, then
 *               uses the failed block as a plugin that does not check would
 *               (SIGSEGV at the address-space limit).
 *   iso_socket  calls socket(2), which the runner's seccomp filter denies.
 *   iso_pid     outputs the process id it runs in (decimal): the runner's
 *               in process mode, tpoold's in in_process mode.
 *   iso_late    waits until its job is cancelled, then returns OK anyway
 *               (a handler that ignores cancellation but does return).
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <tpool/plugin.h>
#include <unistd.h>

static const tpool_host_api* host;

#if defined(__GNUC__)
__attribute__((no_sanitize("undefined"), no_sanitize_address))
#endif
static int32_t
segv_call(void* ctx, tpool_job* job, const uint8_t* in, size_t n) {
  volatile int* volatile p = NULL;
  (void)ctx, (void)job, (void)in, (void)n;
  *p = 1;
  return TPOOL_STATUS_OK;
}

static int32_t abort_call(void* ctx, tpool_job* job, const uint8_t* in, size_t n) {
  (void)ctx, (void)job, (void)in, (void)n;
  abort();
}

static int32_t spin_call(void* ctx, tpool_job* job, const uint8_t* in, size_t n) {
  volatile unsigned long long x = 0;
  (void)ctx, (void)job, (void)in, (void)n;
  for (;;) x = x + 1;
  return TPOOL_STATUS_OK;
}

#if defined(__GNUC__)
__attribute__((no_sanitize("undefined"), no_sanitize_address))
#endif
static int32_t
hog_call(void* ctx, tpool_job* job, const uint8_t* in, size_t n) {
  (void)ctx, (void)job, (void)in, (void)n;
  for (;;) {
    volatile char* block = malloc(1u << 20);
    /* No check: the first failure writes through NULL. */
    memset((char*)block, 1, 1u << 20);
  }
  return TPOOL_STATUS_OK;
}

static int32_t socket_call(void* ctx, tpool_job* job, const uint8_t* in, size_t n) {
  int fd;
  (void)ctx, (void)in, (void)n;
  fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd >= 0) close(fd);
  host->set_message(job, "socket() returned without the filter stopping it");
  return TPOOL_STATUS_ERROR;
}

static int32_t late_call(void* ctx, tpool_job* job, const uint8_t* in, size_t n) {
  const struct timespec ms = {0, 1000000};
  (void)ctx, (void)in, (void)n;
  while (!host->is_cancelled(job)) nanosleep(&ms, NULL);
  return TPOOL_STATUS_OK;
}

static int32_t pid_call(void* ctx, tpool_job* job, const uint8_t* in, size_t n) {
  char buf[32];
  int len = snprintf(buf, sizeof buf, "%ld", (long)getpid());
  (void)ctx, (void)in, (void)n;
  return host->output_write(job, buf, (size_t)len);
}

/* Input-directed, for batches of one handler (E7 in daemon/engine/src/
 * engine.cc): "ok:TEXT" outputs TEXT, "segv" and "abort" crash as iso_segv
 * and iso_abort do, "spin" spins as iso_spin does, "late" waits for its
 * cancellation as iso_late does. */
static int32_t mixed_call(void* ctx, tpool_job* job, const uint8_t* in, size_t n) {
  if (n >= 3 && memcmp(in, "ok:", 3) == 0) return host->output_write(job, in + 3, n - 3);
  if (n == 4 && memcmp(in, "segv", 4) == 0) return segv_call(ctx, job, in, n);
  if (n == 5 && memcmp(in, "abort", 5) == 0) return abort_call(ctx, job, in, n);
  if (n == 4 && memcmp(in, "spin", 4) == 0) return spin_call(ctx, job, in, n);
  if (n == 4 && memcmp(in, "late", 4) == 0) return late_call(ctx, job, in, n);
  host->set_message(job, "iso_mixed takes ok:TEXT, segv, abort, spin or late");
  return TPOOL_STATUS_INVALID_INPUT;
}

static const tpool_handler handlers[] = {
    {"iso_segv", "SIGSEGV (test plugin)", TPOOL_LANE_DEFAULT, 0, 0, segv_call},
    {"iso_abort", "abort() (test plugin)", TPOOL_LANE_DEFAULT, 0, 0, abort_call},
    {"iso_spin", "spins for ever ignoring cancellation (test plugin)", TPOOL_LANE_BLOCKING, 0, 0,
     spin_call},
    {"iso_hog", "allocates until malloc fails, unchecked (test plugin)", TPOOL_LANE_DEFAULT, 0, 0,
     hog_call},
    {"iso_socket", "calls socket(2) (test plugin)", TPOOL_LANE_DEFAULT, 0, 0, socket_call},
    {"iso_pid", "outputs its process id (test plugin)", TPOOL_LANE_DEFAULT, 0, 0, pid_call},
    {"iso_late", "returns OK once cancelled (test plugin)", TPOOL_LANE_BLOCKING, 0, 0, late_call},
    {"iso_mixed", "ok:TEXT echoes, segv/abort/spin/late misbehave (test plugin)",
     TPOOL_LANE_DEFAULT, 0, 0, mixed_call},
};

static const tpool_plugin plugin = {TPOOL_PLUGIN_HEADER,
                                    "isolation_bad",
                                    "1.0.0",
                                    "handlers that crash, hang, hog memory or call denied "
                                    "system calls (isolation tests only)",
                                    handlers,
                                    sizeof handlers / sizeof handlers[0],
                                    NULL,
                                    NULL};

TPOOL_PLUGIN_EXPORT const tpool_plugin* tpool_plugin_entry(const tpool_host_api* h) {
  host = h;
  return &plugin;
}
