/* echo: returns its input unchanged. The smallest useful handler; the daemon's
 * smoke tests and `tpoolctl` examples use it. */
#include <tpool/plugin.h>

static const tpool_host_api* host;

static int32_t echo_call(void* plugin_ctx, tpool_job* job, const uint8_t* input,
                         size_t input_size) {
  (void)plugin_ctx;
  return host->output_write(job, input, input_size);
}

static const tpool_handler handlers[] = {
    {"echo", "Returns its input unchanged.", TPOOL_LANE_DEFAULT, 0, 0, echo_call},
};

static const tpool_plugin plugin = {
    TPOOL_PLUGIN_HEADER, "echo", "1.0.0", "Echo: returns the input.", handlers, 1, NULL, NULL,
};

TPOOL_PLUGIN_EXPORT const tpool_plugin* tpool_plugin_entry(const tpool_host_api* h) {
  host = h;
  return &plugin;
}
