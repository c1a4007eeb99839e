/* Bad plugin: a complete descriptor, but exported under the wrong name, so the
 * host finds no tpool_plugin_entry. */
#include <tpool/plugin.h>

static int32_t call(void* ctx, tpool_job* job, const uint8_t* in, size_t n) {
  (void)ctx;
  (void)job;
  (void)in;
  (void)n;
  return TPOOL_STATUS_OK;
}

static const tpool_handler handlers[] = {{"no_entry", "", TPOOL_LANE_DEFAULT, 0, 0, call}};
static const tpool_plugin plugin = {
    TPOOL_PLUGIN_HEADER, "no_entry", "1", "", handlers, 1, NULL, NULL,
};

TPOOL_PLUGIN_EXPORT const tpool_plugin* tpool_plugin_entry_typo(const tpool_host_api* host);
TPOOL_PLUGIN_EXPORT const tpool_plugin* tpool_plugin_entry_typo(const tpool_host_api* host) {
  (void)host;
  return &plugin;
}
