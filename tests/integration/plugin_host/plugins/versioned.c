/* The plugin the reload test swaps: the same source built as version 1 and 2
 * (-DVERSIONED_VERSION=1|2). Handler "versioned" outputs "v<N>:<input>" after
 * reporting progress 0.5 (the test holds chosen jobs there); fini logs
 * "versioned v<N> fini" so the test sees when each library is closed. */
#include <stdio.h>
#include <tpool/plugin.h>

#define STR2(x) #x
#define STR(x) STR2(x)

static const tpool_host_api* host;

static int32_t call(void* ctx, tpool_job* job, const uint8_t* in, size_t n) {
  static const char prefix[] = "v" STR(VERSIONED_VERSION) ":";
  int32_t rc;
  (void)ctx;
  host->progress(job, 0.5, "half way");
  rc = host->output_write(job, prefix, sizeof prefix - 1);
  if (rc != TPOOL_STATUS_OK) return rc;
  return host->output_write(job, in, n);
}

static void fini(void* ctx) {
  (void)ctx;
  host->log(NULL, TPOOL_LOG_INFO, "versioned v" STR(VERSIONED_VERSION) " fini");
}

static const tpool_handler handlers[] = {
    {"versioned", "outputs v<N>:<input>", TPOOL_LANE_DEFAULT, 0, 0, call}};
static const tpool_plugin plugin = {
    TPOOL_PLUGIN_HEADER,
    "versioned",
    STR(VERSIONED_VERSION) ".0.0",
    "reload test plugin",
    handlers,
    1,
    NULL,
    fini,
};

TPOOL_PLUGIN_EXPORT const tpool_plugin* tpool_plugin_entry(const tpool_host_api* h) {
  host = h;
  return &plugin;
}
