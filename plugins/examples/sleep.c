/* sleep: waits the number of milliseconds given as its input (decimal text,
 * 0..3600000), then outputs "slept <n> ms". Runs on the blocking lane: it
 * holds its thread without using the CPU. Honours cancellation and the
 * deadline: it wakes every 10 ms to check them and returns
 * TPOOL_STATUS_CANCELLED or TPOOL_STATUS_DEADLINE_EXCEEDED. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <tpool/plugin.h>

static const tpool_host_api* host;

/* picked by hand: the longest a cancelled sleep keeps its thread, against
 * 100 wake-ups a second. */
#define SLEEP_SLICE_NS 10000000LL
#define SLEEP_MAX_MS 3600000LL

static int parse_ms(const uint8_t* input, size_t size, long long* ms) {
  long long v = 0;
  size_t i;
  if (size == 0 || size > 7) return 0;
  for (i = 0; i < size; ++i) {
    if (input[i] < '0' || input[i] > '9') return 0;
    v = v * 10 + (input[i] - '0');
  }
  if (v > SLEEP_MAX_MS) return 0;
  *ms = v;
  return 1;
}

static long long now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int32_t sleep_call(void* plugin_ctx, tpool_job* job, const uint8_t* input,
                          size_t input_size) {
  long long ms = 0, end, left_ns;
  char text[128];
  (void)plugin_ctx;
  if (!parse_ms(input, input_size, &ms)) {
    host->set_message(job,
                      "sleep: the input must be a whole number of milliseconds from 0 to 3600000 "
                      "in decimal digits, e.g. \"250\"");
    return TPOOL_STATUS_INVALID_INPUT;
  }
  snprintf(text, sizeof text, "sleeping %lld ms", ms);
  host->progress(job, 0.0, text);
  end = now_ns() + ms * 1000000LL;
  while ((left_ns = end - now_ns()) > 0) {
    long long slice = left_ns < SLEEP_SLICE_NS ? left_ns : SLEEP_SLICE_NS;
    int64_t deadline_ns = host->remaining_ns(job);
    struct timespec ts;
    if (host->is_cancelled(job) || deadline_ns == 0) {
      int timed_out = deadline_ns == 0;
      snprintf(text, sizeof text, "sleep: %s with %lld of %lld ms left",
               timed_out ? "deadline passed" : "cancelled", left_ns / 1000000LL, ms);
      host->set_message(job, text);
      return timed_out ? TPOOL_STATUS_DEADLINE_EXCEEDED : TPOOL_STATUS_CANCELLED;
    }
    if (deadline_ns < slice) slice = deadline_ns;
    ts.tv_sec = (time_t)(slice / 1000000000LL);
    ts.tv_nsec = (long)(slice % 1000000000LL);
    nanosleep(&ts, NULL); /* EINTR: the loop re-reads the clock */
  }
  host->progress(job, 1.0, "done");
  snprintf(text, sizeof text, "slept %lld ms", ms);
  return host->output_write(job, text, strlen(text));
}

static const tpool_handler handlers[] = {
    {"sleep", "Waits <input> milliseconds (0..3600000), honouring cancellation and the deadline.",
     TPOOL_LANE_BLOCKING, 0, 16, sleep_call},
};

static const tpool_plugin plugin = {
    TPOOL_PLUGIN_HEADER,
    "sleep",
    "1.0.0",
    "Sleep: a blocking-lane handler that waits.",
    handlers,
    1,
    NULL,
    NULL,
};

TPOOL_PLUGIN_EXPORT const tpool_plugin* tpool_plugin_entry(const tpool_host_api* h) {
  host = h;
  return &plugin;
}
