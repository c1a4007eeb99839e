/* A complete handler plugin: "upper" returns its input in upper case. */
#include <tpool/plugin.h>

static const tpool_host_api* g_host;

static int32_t upper(void* plugin_ctx, tpool_job* job, const uint8_t* input, size_t input_size) {
  (void)plugin_ctx;
  uint8_t* out = (uint8_t*)g_host->output_reserve(job, input_size);
  if (out == NULL && input_size > 0) return TPOOL_STATUS_OUTPUT_TOO_LARGE;
  for (size_t i = 0; i < input_size; ++i) {
    uint8_t c = input[i];
    out[i] = (c >= 'a' && c <= 'z') ? (uint8_t)(c - 'a' + 'A') : c;
  }
  return TPOOL_STATUS_OK;
}

static const tpool_handler handlers[] = {
    {"upper", "returns the input in upper case", TPOOL_LANE_DEFAULT, 0, 0, upper},
};

static const tpool_plugin plugin = {
    TPOOL_PLUGIN_HEADER,
    "upper",
    "1.0.0",
    "an out-of-tree plugin built with find_package(tpool)",
    handlers,
    1,
    NULL,
    NULL,
};

TPOOL_PLUGIN_EXPORT const tpool_plugin* tpool_plugin_entry(const tpool_host_api* host) {
  g_host = host;
  return &plugin;
}
