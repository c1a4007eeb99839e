/* fail: always fails, with the message "fail: <input>" (or "fail: requested
 * failure" for an empty input) and status TPOOL_STATUS_ERROR. Lets clients and
 * tests see how a failed job is reported end to end. */
#include <stdio.h>
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

static const tpool_handler handlers[] = {
    {"fail", "Always fails with the message \"fail: <input>\".", TPOOL_LANE_DEFAULT, 0, 0,
     fail_call},
};

static const tpool_plugin plugin = {
    TPOOL_PLUGIN_HEADER,
    "fail",
    "1.0.0",
    "Fail: a handler that always fails.",
    handlers,
    1,
    NULL,
    NULL,
};

TPOOL_PLUGIN_EXPORT const tpool_plugin* tpool_plugin_entry(const tpool_host_api* h) {
  host = h;
  return &plugin;
}
