/* Compiled as strict C99 with -Wpedantic -Werror: the SDK header must stay C99.
 * The static checks pin the ABI 1.0 layout on LP64: a change here is an ABI
 * break (bump TPOOL_PLUGIN_ABI_MAJOR) or an append (bump the minor and move
 * the pinned size only in a way old plugins still satisfy). */
#include <tpool/plugin.h>

typedef char check_plugin_header_first[offsetof(tpool_plugin, name) == 16 ? 1 : -1];
typedef char check_plugin_size[sizeof(tpool_plugin) == 72 ? 1 : -1];
typedef char check_handler_size[sizeof(tpool_handler) == 40 ? 1 : -1];
typedef char check_host_api_size[sizeof(tpool_host_api) == 88 ? 1 : -1]; /* 1.1: + attempt */
typedef char check_child_result_size[sizeof(tpool_child_result) == 32 ? 1 : -1];

static int32_t call(void* ctx, tpool_job* job, const uint8_t* in, size_t n) {
  (void)ctx;
  (void)job;
  (void)in;
  (void)n;
  return TPOOL_STATUS_OK;
}

static const tpool_handler handlers[] = {{"c99", "C99 check", TPOOL_LANE_DEFAULT, 0, 0, call}};
static const tpool_plugin plugin = {
    TPOOL_PLUGIN_HEADER, "c99", "1", "C99 check", handlers, 1, NULL, NULL,
};

const tpool_plugin* tpool_abi_c99_check(void);
const tpool_plugin* tpool_abi_c99_check(void) {
  return &plugin;
}
