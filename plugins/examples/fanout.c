/* fanout: input "<k> <handler> <payload>": runs k child jobs (1..1024) of
 * <handler>, each with <payload> as its input, through the host's
 * run_children (the daemon runs them as nested pool tasks and waits), and
 * outputs the children's outputs in child order, each followed by "\n".
 * Fails with the first failed child's status and message. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <tpool/plugin.h>

static const tpool_host_api* host;

#define FANOUT_MAX_CHILDREN 1024 /* picked by hand: bounds one job's memory */

static int32_t fanout_call(void* plugin_ctx, tpool_job* job, const uint8_t* input,
                           size_t input_size) {
  size_t k = 0, pos = 0, name_start, name_len, i;
  char handler[65];
  char message[512];
  tpool_bytes* inputs;
  tpool_child_result* results;
  int32_t rc;
  (void)plugin_ctx;

  while (pos < input_size && pos < 5 && input[pos] >= '0' && input[pos] <= '9')
    k = k * 10 + (size_t)(input[pos++] - '0');
  name_start = pos + 1;
  name_len = 0;
  while (name_start + name_len < input_size && input[name_start + name_len] != ' ') ++name_len;
  if (pos == 0 || k == 0 || k > FANOUT_MAX_CHILDREN || pos >= input_size || input[pos] != ' ' ||
      name_len == 0 || name_len >= sizeof handler || name_start + name_len >= input_size) {
    host->set_message(job,
                      "fanout: the input must be \"<k> <handler> <payload>\" with k from 1 to "
                      "1024, e.g. \"4 echo hi\"");
    return TPOOL_STATUS_INVALID_INPUT;
  }
  memcpy(handler, input + name_start, name_len);
  handler[name_len] = '\0';

  inputs = (tpool_bytes*)malloc(k * sizeof *inputs);
  results = (tpool_child_result*)malloc(k * sizeof *results);
  if (inputs == NULL || results == NULL) {
    free(inputs);
    free(results);
    host->set_message(job, "fanout: out of memory for the child list");
    return TPOOL_STATUS_INTERNAL;
  }
  for (i = 0; i < k; ++i) {
    inputs[i].data = input + name_start + name_len + 1;
    inputs[i].size = input_size - (name_start + name_len + 1);
  }
  rc = host->run_children(job, handler, inputs, k, results);
  if (rc != TPOOL_STATUS_OK) {
    /* No child ran; every result carries the host's reason. */
    snprintf(message, sizeof message, "fanout: no child of handler '%s' could run: %s", handler,
             results[0].message);
  }
  for (i = 0; rc == TPOOL_STATUS_OK && i < k; ++i) {
    if (results[i].status != TPOOL_STATUS_OK) {
      snprintf(message, sizeof message, "fanout: child %zu of %zu (handler '%s') failed: %s", i + 1,
               k, handler, results[i].message);
      rc = results[i].status;
    } else {
      rc = host->output_write(job, results[i].output, results[i].output_size);
      if (rc == TPOOL_STATUS_OK) rc = host->output_write(job, "\n", 1);
      if (rc != TPOOL_STATUS_OK) snprintf(message, sizeof message, "fanout: output too large");
    }
  }
  if (rc != TPOOL_STATUS_OK) {
    host->set_message(job, message);
  } else {
    host->progress(job, 1.0, "all children done");
  }
  free(inputs);
  free(results);
  return rc;
}

static const tpool_handler handlers[] = {
    {"fanout",
     "Input \"<k> <handler> <payload>\": runs k child jobs of <handler> and joins their outputs.",
     TPOOL_LANE_DEFAULT, 0, 0, fanout_call},
};

static const tpool_plugin plugin = {
    TPOOL_PLUGIN_HEADER,
    "fanout",
    "1.0.0",
    "Fanout: child jobs through the host.",
    handlers,
    1,
    NULL,
    NULL,
};

TPOOL_PLUGIN_EXPORT const tpool_plugin* tpool_plugin_entry(const tpool_host_api* h) {
  host = h;
  return &plugin;
}
