/* testkit: handlers that exercise one host function or boundary rule each,
 * for the plugin host's unit tests (tests/unit/plugin_host/host_test.cc). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <tpool/plugin.h>

static const tpool_host_api* host;

typedef struct testkit_ctx {
  char config[128];
} testkit_ctx;

static int32_t testkit_init(const tpool_host_api* h, const char* config, void** plugin_ctx,
                            char* error, size_t error_size) {
  char line[256];
  testkit_ctx* ctx = (testkit_ctx*)calloc(1, sizeof *ctx);
  (void)error;
  (void)error_size;
  if (ctx == NULL) return TPOOL_STATUS_INTERNAL;
  snprintf(ctx->config, sizeof ctx->config, "%s", config);
  snprintf(line, sizeof line, "testkit init config=%s", config);
  h->log(NULL, TPOOL_LOG_INFO, line);
  *plugin_ctx = ctx;
  return TPOOL_STATUS_OK;
}

static void testkit_fini(void* plugin_ctx) {
  host->log(NULL, TPOOL_LOG_INFO, "testkit fini");
  free(plugin_ctx);
}

static size_t parse_size(const uint8_t* input, size_t size) {
  size_t v = 0, i;
  for (i = 0; i < size && input[i] >= '0' && input[i] <= '9'; ++i)
    v = v * 10 + (size_t)(input[i] - '0');
  return v;
}

/* Writes <input> bytes of 'x', in reserve()d chunks of up to 100. */
static int32_t big_output(void* ctx, tpool_job* job, const uint8_t* input, size_t size) {
  size_t n = parse_size(input, size);
  (void)ctx;
  while (n > 0) {
    size_t chunk = n < 100 ? n : 100;
    char* out = (char*)host->output_reserve(job, chunk);
    if (out == NULL) return TPOOL_STATUS_OUTPUT_TOO_LARGE;
    memset(out, 'x', chunk);
    n -= chunk;
  }
  return TPOOL_STATUS_OK;
}

/* Counts its calls in the output; max_input_bytes 4. */
static int32_t small_input(void* ctx, tpool_job* job, const uint8_t* input, size_t size) {
  (void)ctx;
  return host->output_write(job, input, size);
}

/* Reports progress (the test cancels there), then returns OK regardless. */
static int32_t ignore_cancel(void* ctx, tpool_job* job, const uint8_t* input, size_t size) {
  (void)ctx;
  (void)input;
  (void)size;
  host->progress(job, 0.5, "working");
  return host->output_write(job, "done", 4);
}

/* Logs at every level, reports out-of-range progress, sets a message on
 * success and echoes the plugin's config and the remaining deadline. */
static int32_t chatty(void* plugin_ctx, tpool_job* job, const uint8_t* input, size_t size) {
  const testkit_ctx* ctx = (const testkit_ctx*)plugin_ctx;
  char out[256];
  int n;
  (void)input;
  (void)size;
  host->log(job, TPOOL_LOG_DEBUG, "debug line");
  host->log(job, TPOOL_LOG_WARN, "warn line");
  host->log(job, 99, "level 99 line");
  host->progress(job, 2.0, "over");
  host->progress(job, -1.0, NULL);
  host->set_message(job, "all good");
  n = snprintf(out, sizeof out, "config=%s remaining=%s", ctx->config,
               host->remaining_ns(job) == INT64_MAX ? "none" : "some");
  return host->output_write(job, out, (size_t)n);
}

/* Returns the status given as its input, with no message. */
static int32_t status(void* ctx, tpool_job* job, const uint8_t* input, size_t size) {
  (void)ctx;
  (void)job;
  return (int32_t)parse_size(input, size);
}

/* Input "<handler>": runs three children of it with inputs a, bb, ccc and
 * writes "<rc>|<status>:<output>:<message>|..." */
static int32_t children(void* ctx, tpool_job* job, const uint8_t* input, size_t size) {
  char name[65];
  tpool_bytes in[3] = {
      {(const uint8_t*)"a", 1}, {(const uint8_t*)"bb", 2}, {(const uint8_t*)"ccc", 3}};
  tpool_child_result res[3];
  char out[1024];
  int n, i;
  int32_t rc;
  (void)ctx;
  if (size == 0 || size >= sizeof name) return TPOOL_STATUS_INVALID_INPUT;
  memcpy(name, input, size);
  name[size] = '\0';
  rc = host->run_children(job, name, in, 3, res);
  n = snprintf(out, sizeof out, "%d", rc);
  for (i = 0; i < 3; ++i)
    n += snprintf(out + n, sizeof out - (size_t)n, "|%d:%.*s:%s", res[i].status,
                  (int)res[i].output_size, res[i].output ? (const char*)res[i].output : "",
                  res[i].message);
  return host->output_write(job, out, (size_t)n);
}

/* Writes the host table's version and whether it has run_children. */
static int32_t abi(void* ctx, tpool_job* job, const uint8_t* input, size_t size) {
  char out[128];
  int n;
  (void)ctx;
  (void)input;
  (void)size;
  n = snprintf(out, sizeof out, "%u.%u size=%u run_children=%d", host->abi_major, host->abi_minor,
               host->struct_size, TPOOL_HOST_HAS(host, run_children) ? 1 : 0);
  return host->output_write(job, out, (size_t)n);
}

static const tpool_handler handlers[] = {
    {"big_output", "writes <input> bytes", TPOOL_LANE_DEFAULT, 0, 0, big_output},
    {"small_input", "echo for inputs of at most 4 bytes", TPOOL_LANE_DEFAULT, 0, 4, small_input},
    {"ignore_cancel", "returns OK even when cancelled", TPOOL_LANE_BLOCKING, 0, 0, ignore_cancel},
    {"chatty", "logs, progress, message", TPOOL_LANE_DEFAULT, 0, 0, chatty},
    {"status", "returns <input> as its status", TPOOL_LANE_DEFAULT, 0, 0, status},
    {"children", "runs 3 children of <input>", TPOOL_LANE_DEFAULT, 0, 0, children},
    {"abi", "reports the host table", TPOOL_LANE_DEFAULT, 0, 0, abi},
};

static const tpool_plugin plugin = {
    TPOOL_PLUGIN_HEADER,
    "testkit",
    "0.1",
    "host unit-test handlers",
    handlers,
    sizeof handlers / sizeof handlers[0],
    testkit_init,
    testkit_fini,
};

TPOOL_PLUGIN_EXPORT const tpool_plugin* tpool_plugin_entry(const tpool_host_api* h) {
  host = h;
  return &plugin;
}
