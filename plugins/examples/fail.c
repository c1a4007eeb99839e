/* fail: always fails, with the message "fail: <input>" (or "fail: requested
 * failure" for an empty input) and status TPOOL_STATUS_ERROR. Lets clients and
 * tests see how a failed job is reported end to end. flaky (below) shows
 * retries. */
#include <stdio.h>
#include <string.h>
#include <tpool/plugin.h>

static const tpool_host_api* host;

static int32_t fail_call(void* plugin_ctx, tpool_job* job, const uint8_t* input,
                         size_t input_size) {
  char message[512];
  (void)plugin_ctx;
  if (input_size == 0) {
    snprintf(message, sizeof message, "fail: requested failure");
  } else {
    /* The input is echoed into the message, cut to fit. */
    int shown = input_size > 400 ? 400 : (int)input_size;
    snprintf(message, sizeof message, "fail: %.*s", shown, (const char*)input);
  }
  host->set_message(job, message);
  return TPOOL_STATUS_ERROR;
}

/* flaky: fails its job's first N attempts (input: N, a decimal number; empty
 * = 1) with TPOOL_STATUS_RETRY and the message "flaky: attempt <k> of the
 * first <N> fails", then succeeds with the output "ok on attempt <k>". With
 * JobRequest.max_attempts > N the job ends SUCCEEDED after N retries (docs/api.md,
 * "Retries and delayed jobs"). Reads its attempt through the ABI 1.1 host call. */
static int32_t flaky_call(void* plugin_ctx, tpool_job* job, const uint8_t* input,
                          size_t input_size) {
  char message[128];
  unsigned long n = input_size == 0 ? 1 : 0;
  size_t i;
  uint32_t k;
  (void)plugin_ctx;
  for (i = 0; i < input_size; ++i) {
    if (input[i] < '0' || input[i] > '9' || n > 1000000) {
      host->set_message(job, "flaky: the input must be a number of attempts to fail, e.g. 2");
      return TPOOL_STATUS_INVALID_INPUT;
    }
    n = n * 10 + (unsigned long)(input[i] - '0');
  }
  if (!TPOOL_HOST_HAS(host, attempt)) {
    host->set_message(job, "flaky: this tpoold predates ABI 1.1 (no attempt numbers)");
    return TPOOL_STATUS_PERMANENT;
  }
  k = host->attempt(job);
  if (k <= n) {
    snprintf(message, sizeof message, "flaky: attempt %u of the first %lu fails", (unsigned)k, n);
    host->set_message(job, message);
    return TPOOL_STATUS_RETRY;
  }
  snprintf(message, sizeof message, "ok on attempt %u", (unsigned)k);
  return host->output_write(job, message, strlen(message));
}

static const tpool_handler handlers[] = {
    {"fail", "Always fails with the message \"fail: <input>\".", TPOOL_LANE_DEFAULT, 0, 0,
     fail_call},
    {"flaky", "Fails its first <input> attempts (retryable), then succeeds.", TPOOL_LANE_DEFAULT, 0,
     0, flaky_call},
};

static const tpool_plugin plugin = {
    TPOOL_PLUGIN_HEADER,
    "fail",
    "1.0.0",
    "Fail: a handler that always fails, and one that fails until it is retried enough.",
    handlers,
    2,
    NULL,
    NULL,
};

TPOOL_PLUGIN_EXPORT const tpool_plugin* tpool_plugin_entry(const tpool_host_api* h) {
  host = h;
  return &plugin;
}
