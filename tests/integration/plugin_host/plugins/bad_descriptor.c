/* Bad plugins from one source, chosen with -D:
 *   BAD_ABI_MAJOR  declares ABI major TPOOL_PLUGIN_ABI_MAJOR + 1 (minor 0)
 *   BAD_ABI_MINOR  declares ABI minor TPOOL_PLUGIN_ABI_MINOR + 1
 *   BAD_DUPLICATE  declares handler "echo", which the echo example owns
 *   BAD_INIT       init fails with a message
 *   BAD_SIZE       declares a tpool_plugin of 16 bytes (only the header)
 *   BAD_NAME       declares a handler named "no spaces allowed"
 *   BAD_REFUSE     the entry logs why and returns NULL
 * Each is otherwise a correct plugin named PLUGIN_NAME with one handler. */
#include <stdio.h>
#include <tpool/plugin.h>

static int32_t call(void* ctx, tpool_job* job, const uint8_t* in, size_t n) {
  (void)ctx;
  (void)job;
  (void)in;
  (void)n;
  return TPOOL_STATUS_OK;
}

#if defined(BAD_DUPLICATE)
#define HANDLER_NAME "echo"
#elif defined(BAD_NAME)
#define HANDLER_NAME "no spaces allowed"
#else
#define HANDLER_NAME PLUGIN_NAME
#endif

#ifdef BAD_INIT
static int32_t init(const tpool_host_api* host, const char* config, void** ctx, char* error,
                    size_t error_size) {
  (void)host;
  (void)ctx;
  snprintf(error, error_size, "init_error needs \"db=<path>\" in its config string, got \"%s\"",
           config);
  return TPOOL_STATUS_INVALID_INPUT;
}
static void fini(void* ctx) {
  (void)ctx;
}
#define INIT init
#define FINI fini
#else
#define INIT NULL
#define FINI NULL
#endif

#if defined(BAD_ABI_MAJOR)
#define MAJOR (TPOOL_PLUGIN_ABI_MAJOR + 1)
#define MINOR 0
#elif defined(BAD_ABI_MINOR)
#define MAJOR TPOOL_PLUGIN_ABI_MAJOR
#define MINOR (TPOOL_PLUGIN_ABI_MINOR + 1)
#else
#define MAJOR TPOOL_PLUGIN_ABI_MAJOR
#define MINOR TPOOL_PLUGIN_ABI_MINOR
#endif

static const tpool_handler handlers[] = {
    {HANDLER_NAME, "a bad plugin", TPOOL_LANE_DEFAULT, 0, 0, call}};
static const tpool_plugin plugin = {
#ifdef BAD_SIZE
    16,
#else
    (uint32_t)sizeof(tpool_plugin),
#endif
    MAJOR,       MINOR,   (uint32_t)sizeof(tpool_handler),
    PLUGIN_NAME, "6.6.6", "a bad plugin",
    handlers,    1,       INIT,
    FINI,
};

TPOOL_PLUGIN_EXPORT const tpool_plugin* tpool_plugin_entry(const tpool_host_api* host) {
#ifdef BAD_REFUSE
  host->log(NULL, TPOOL_LOG_ERROR, "refuse: this plugin needs a host function this host lacks");
  (void)plugin;
  return NULL;
#else
  (void)host;
  return &plugin;
#endif
}
