/* record: a test plugin that leaves evidence of every handler call, for the
 * durable jobs' kill -9 test (tests/integration/daemon/durable_test.cc,
 * issue 17): the daemon's journal says which jobs were pending at a kill,
 * this file says which jobs' handlers actually ran, and how often.
 * Never install it.
 *
 *   record   appends "<input>\n" to the file named by its config
 *            ([plugins.config] record = "PATH") in one write(2) of an
 *            O_APPEND descriptor (atomic against the other workers' lines,
 *            and in the kernel before the call returns: a SIGKILL of the
 *            daemon cannot lose it), then outputs its input (echo).
 */
#define _POSIX_C_SOURCE 200809L
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <tpool/plugin.h>
#include <unistd.h>

typedef struct {
  const tpool_host_api* host;
  int fd;
} record_ctx;

static int32_t record_init(const tpool_host_api* host, const char* config, void** plugin_ctx,
                           char* error, size_t error_size) {
  record_ctx* c;
  if (config == NULL || config[0] == '\0') {
    snprintf(error, error_size, "record needs a file: [plugins.config] record = \"PATH\"");
    return TPOOL_STATUS_INVALID_INPUT;
  }
  c = malloc(sizeof *c);
  if (c == NULL) return TPOOL_STATUS_INTERNAL;
  c->host = host;
  c->fd = open(config, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
  if (c->fd < 0) {
    snprintf(error, error_size, "record cannot open %s", config);
    free(c);
    return TPOOL_STATUS_INVALID_INPUT;
  }
  *plugin_ctx = c;
  return TPOOL_STATUS_OK;
}

static void record_fini(void* plugin_ctx) {
  record_ctx* c = plugin_ctx;
  close(c->fd);
  free(c);
}

static int32_t record_call(void* p, tpool_job* job, const uint8_t* input, size_t size) {
  const record_ctx* c = p;
  char line[256];
  if (size >= sizeof line) return TPOOL_STATUS_INVALID_INPUT;
  if (size != 0) memcpy(line, input, size);
  line[size] = '\n';
  if (write(c->fd, line, size + 1) != (ssize_t)(size + 1)) return TPOOL_STATUS_INTERNAL;
  return c->host->output_write(job, input, size);
}

static const tpool_handler handlers[] = {
    {"record", "Appends its input to the config's file, then echoes it.", TPOOL_LANE_DEFAULT, 0, 0,
     record_call},
};

static const tpool_plugin plugin = {
    TPOOL_PLUGIN_HEADER,
    "record",
    "1.0.0",
    "Test plugin: records every call's input in a file.",
    handlers,
    sizeof handlers / sizeof handlers[0],
    record_init,
    record_fini,
};

TPOOL_PLUGIN_EXPORT const tpool_plugin* tpool_plugin_entry(const tpool_host_api* h) {
  (void)h;
  return &plugin;
}
