/* tpool/plugin.h: the C ABI between tpoold and its handler plugins.
 *
 * A plugin is a shared object that exports one symbol, tpool_plugin_entry.
 * The daemon (the "host") dlopen()s it with RTLD_NOW | RTLD_LOCAL, calls the
 * entry with its function table, and gets back a descriptor that lists the
 * plugin's handlers. The plugin never links against daemon symbols: every
 * service it uses (output, cancellation, deadline, log, progress, child jobs)
 * is a function pointer in the host table (after SQLite's sqlite3ext.h).
 *
 * Compiles as C99 and as C++. Guide: docs/plugins.md.
 *
 * Versioning (after nginx's module signature and OBS's sizeof handshake):
 *  - ABI major: changes only when an existing field or function changes
 *    meaning; the host refuses a plugin whose major differs from its own.
 *  - ABI minor: grows when fields or host functions are appended; the host
 *    refuses a plugin built against a newer minor than the host has, and keeps
 *    loading every plugin built against an older one.
 *  - Every struct either side fills carries its size (struct_size,
 *    handler_size), so each side reads only the fields the other one knows.
 *    Structs and the host table only grow at the end: fields are never
 *    removed, reordered or retyped within one major.
 *
 * Ownership, in one line: the host owns everything it passes to the plugin and
 * the plugin owns everything it passes to the host; each pointer below says for
 * how long it stays valid. Nothing crosses the boundary that needs the other
 * side's allocator.
 *
 * Threads: handlers are called concurrently from many threads (pool workers),
 * also for the same handler; a handler must be thread-safe. init and fini are
 * called once per load, on one thread, never concurrently with a handler of
 * the same load. C++ exceptions must not escape a handler: the host catches
 * them as a last resort and fails the job, but a C caller in between would be
 * undefined behaviour.
 */
#ifndef TPOOL_PLUGIN_H
#define TPOOL_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- version -------------------------------------------------------------- */

#define TPOOL_PLUGIN_ABI_MAJOR 1
#define TPOOL_PLUGIN_ABI_MINOR 1

/* The one symbol a plugin exports (see tpool_plugin_entry_fn below). */
#define TPOOL_PLUGIN_ENTRY_SYMBOL "tpool_plugin_entry"

#if defined(__GNUC__) || defined(__clang__)
#define TPOOL_PLUGIN_EXPORT __attribute__((visibility("default")))
#else
#define TPOOL_PLUGIN_EXPORT
#endif

/* ---- status codes ----------------------------------------------------------
 * A handler returns one of these (any other non-zero value is kept and
 * reported as a failure too). The host uses the same codes for child results
 * and for failures it detects itself. */
typedef enum tpool_status {
  TPOOL_STATUS_OK = 0,
  TPOOL_STATUS_ERROR = 1,             /* the handler failed; see its message */
  TPOOL_STATUS_INVALID_INPUT = 2,     /* the input is malformed for this handler */
  TPOOL_STATUS_CANCELLED = 3,         /* the job was cancelled and the handler stopped */
  TPOOL_STATUS_DEADLINE_EXCEEDED = 4, /* the job's deadline passed */
  TPOOL_STATUS_OUTPUT_TOO_LARGE = 5,  /* output would exceed the host's limit (host-set) */
  TPOOL_STATUS_INPUT_TOO_LARGE = 6,   /* input exceeds the handler's max_input_bytes (host-set) */
  TPOOL_STATUS_UNKNOWN_HANDLER = 7,   /* run_children named a handler that is not loaded */
  TPOOL_STATUS_INTERNAL = 8,          /* a C++ exception escaped, or the host failed (host-set) */
  /* ABI 1.1: how a failure should be retried (docs/plugins.md, "Retries").
   * A job with attempts left (JobRequest.max_attempts) runs again after its
   * backoff when its handler returns RETRY, ERROR, INTERNAL or a code of its
   * own; PERMANENT, INVALID_INPUT, INPUT_TOO_LARGE, OUTPUT_TOO_LARGE and
   * UNKNOWN_HANDLER fail it at once, whatever attempts are left. An older
   * host (ABI 1.0) reports both new values as a plain failure. */
  TPOOL_STATUS_RETRY = 9,     /* a transient failure: run the job again if it may */
  TPOOL_STATUS_PERMANENT = 10 /* fail the job now: running it again cannot help */
} tpool_status;

typedef enum tpool_lane {
  TPOOL_LANE_DEFAULT = 0, /* CPU-bound work: runs on the default lane's workers */
  TPOOL_LANE_BLOCKING = 1 /* sleeps or blocks on I/O: runs on the blocking lane */
} tpool_lane;

typedef enum tpool_log_level {
  TPOOL_LOG_DEBUG = 0,
  TPOOL_LOG_INFO = 1,
  TPOOL_LOG_WARN = 2,
  TPOOL_LOG_ERROR = 3
} tpool_log_level;

/* ---- opaque job context ----------------------------------------------------
 * One per handler call, created and owned by the host. Valid from the moment
 * the handler is called until it returns; never keep it after that, never pass
 * it to another thread that outlives the call. */
typedef struct tpool_job tpool_job;

/* A byte range owned by whoever filled it (see each use). */
typedef struct tpool_bytes {
  const uint8_t* data; /* may be NULL when size is 0 */
  size_t size;
} tpool_bytes;

/* What one child job of run_children produced. Filled by the host into an
 * array the plugin owns; the pointed-to bytes are owned by the host and stay
 * valid until the parent handler returns. */
typedef struct tpool_child_result {
  int32_t status;        /* tpool_status (or the child handler's own non-zero code) */
  const char* message;   /* NUL-terminated, never NULL ("" when there is none) */
  const uint8_t* output; /* the child's output; NULL when output_size is 0 */
  size_t output_size;
} tpool_child_result;

/* ---- the host function table -----------------------------------------------
 * Passed to tpool_plugin_entry and to init. Owned by the host; valid until
 * fini returns (store the pointer, do not copy the struct: a newer host's
 * table is longer than the one this header declares).
 *
 * Append-only: a function added in minor N is present when
 * TPOOL_HOST_HAS(host, field) is true; check it before calling anything newer
 * than ABI 1.0. Every function below is thread-safe; each is ABI 1.0 unless
 * its group says otherwise. */
typedef struct tpool_host_api {
  uint32_t struct_size; /* sizeof(tpool_host_api) as the host was built */
  uint32_t abi_major;   /* the host's TPOOL_PLUGIN_ABI_MAJOR */
  uint32_t abi_minor;   /* the host's TPOOL_PLUGIN_ABI_MINOR */
  uint32_t reserved;    /* zero */

  /* Append size bytes to the job's output. data is borrowed for the call only
   * (the host copies it). Returns TPOOL_STATUS_OK, or
   * TPOOL_STATUS_OUTPUT_TOO_LARGE when the output would exceed the host's
   * limit: nothing is appended and the job will fail with a message naming the
   * limit whatever the handler returns, so the handler should return. */
  int32_t (*output_write)(tpool_job* job, const void* data, size_t size);

  /* Grow the job's output by size bytes and return a pointer to them for the
   * handler to fill (all of them). The pointer is owned by the host and valid
   * until the next output_write/output_reserve on this job or the handler's
   * return, whichever comes first. NULL when the limit would be exceeded
   * (as for output_write) or memory is exhausted. */
  void* (*output_reserve)(tpool_job* job, size_t size);

  /* Set the job's message: for a failed job, the sentence the caller sees
   * (what failed, the value, what to do). message is borrowed for the call
   * only (copied); NULL clears it. The last call wins. */
  void (*set_message)(tpool_job* job, const char* message);

  /* Non-zero once the job is cancelled or its deadline has passed. Cheap:
   * poll it in long loops and return TPOOL_STATUS_CANCELLED when it is set. */
  int32_t (*is_cancelled)(const tpool_job* job);

  /* Nanoseconds until the job's deadline: INT64_MAX when it has none, 0 when
   * it has passed (never negative). */
  int64_t (*remaining_ns)(const tpool_job* job);

  /* Log a line at a tpool_log_level. message is borrowed for the call only.
   * job may be NULL from init and fini (the line is attributed to the plugin
   * being initialised or finalised). */
  void (*log)(tpool_job* job, int32_t level, const char* message);

  /* Report progress: fraction is clamped to 0..1; note (may be NULL) is
   * borrowed for the call only. */
  void (*progress)(tpool_job* job, double fraction, const char* note);

  /* Fan-out: run count child jobs of the handler named handler, child i with
   * inputs[i] as its input, and wait for all of them. The children run as
   * nested jobs of this one (same cancellation and deadline). handler and
   * inputs are borrowed for the call only; results points to count elements
   * owned by the plugin, which the host fills (see tpool_child_result for how
   * long their bytes stay valid). Returns TPOOL_STATUS_OK when every child ran
   * (each child's own outcome is in its result), or a non-zero status when
   * none could run (e.g. TPOOL_STATUS_UNKNOWN_HANDLER, with every result set
   * to that status and a message). */
  int32_t (*run_children)(tpool_job* job, const char* handler, const tpool_bytes* inputs,
                          size_t count, tpool_child_result* results);

  /* ---- ABI 1.1 ---- (check TPOOL_HOST_HAS(host, attempt) first) */

  /* Which attempt of its job this call is: 1 for the first, 2 for the first
   * retry, and so on (a job retried after a failure, or re-run after tpoold
   * restarted during it). A child job of run_children reports its parent's. */
  uint32_t (*attempt)(const tpool_job* job);
} tpool_host_api;

/* True when the host table has the function (or field) named member. */
#define TPOOL_HOST_HAS(host, member) \
  ((host)->struct_size >= offsetof(tpool_host_api, member) + sizeof((host)->member))

/* ---- what a plugin declares ------------------------------------------------ */

/* A handler call. plugin_ctx is what init stored (NULL without init); job is
 * the host's context for this call (see tpool_job); input is owned by the host
 * and valid until the handler returns (input_size bytes, input may be NULL
 * when input_size is 0). Returns TPOOL_STATUS_OK or a failure status, after
 * set_message for a failure. */
typedef int32_t (*tpool_handler_fn)(void* plugin_ctx, tpool_job* job, const uint8_t* input,
                                    size_t input_size);

typedef struct tpool_handler {
  /* Both NUL-terminated, owned by the plugin, valid until the library is
   * unloaded (string literals are the usual choice). name: 1..64 characters
   * from [A-Za-z0-9_.-], unique across every loaded plugin. */
  const char* name;
  const char* description;
  uint32_t lane;            /* tpool_lane: where the daemon runs this handler */
  uint32_t reserved;        /* zero */
  uint64_t max_input_bytes; /* larger inputs are refused before the call; 0: no own limit */
  tpool_handler_fn call;    /* required */
} tpool_handler;

typedef struct tpool_plugin {
  uint32_t struct_size;  /* sizeof(tpool_plugin) */
  uint32_t abi_major;    /* TPOOL_PLUGIN_ABI_MAJOR */
  uint32_t abi_minor;    /* TPOOL_PLUGIN_ABI_MINOR */
  uint32_t handler_size; /* sizeof(tpool_handler): the stride of handlers[] */

  /* NUL-terminated, owned by the plugin, valid until the library is unloaded.
   * name: the plugin's name (the key of its config string), same rules as a
   * handler name; version: free text such as "1.2.0". */
  const char* name;
  const char* version;
  const char* description;

  /* handler_count entries, owned by the plugin, valid until unloaded. */
  const tpool_handler* handlers;
  size_t handler_count;

  /* Optional (may be NULL). Called once after the host has accepted the
   * descriptor and before any handler. host: see tpool_host_api. config: the
   * daemon's config string for this plugin, NUL-terminated, borrowed for the
   * call only ("" when none is configured). *plugin_ctx: the plugin may store
   * a pointer there (it starts NULL); the host passes it to every handler and
   * to fini and never dereferences it. On failure return non-zero and write a
   * NUL-terminated sentence into error (error_size bytes, host-owned, valid for
   * the call): the host then reports it, does not call fini, and unloads. */
  int32_t (*init)(const tpool_host_api* host, const char* config, void** plugin_ctx, char* error,
                  size_t error_size);

  /* Optional. Called once, after the last handler call of this load has
   * returned (on reload, when the last job that used the old version ends),
   * just before dlclose. Frees what init allocated. */
  void (*fini)(void* plugin_ctx);
} tpool_plugin;

/* Fills the four header fields of a tpool_plugin:
 *   static const tpool_plugin plugin = { TPOOL_PLUGIN_HEADER, "name", ... }; */
#ifdef __cplusplus
#define TPOOL_PLUGIN_U32_(x) static_cast<uint32_t>(x)
#else
#define TPOOL_PLUGIN_U32_(x) (uint32_t)(x)
#endif
#define TPOOL_PLUGIN_HEADER                                                                \
  TPOOL_PLUGIN_U32_(sizeof(tpool_plugin)), TPOOL_PLUGIN_ABI_MAJOR, TPOOL_PLUGIN_ABI_MINOR, \
      TPOOL_PLUGIN_U32_(sizeof(tpool_handler))

/* ---- the entry symbol -------------------------------------------------------
 * host: the host table, valid until fini returns (see tpool_host_api). Returns
 * the plugin's descriptor, owned by the plugin and valid until the library is
 * unloaded (a static const object), or NULL to refuse this host (for instance
 * when host->abi_minor lacks a function the plugin cannot do without; log why
 * through host->log with a NULL job first). Called once per load, before
 * init. */
typedef const tpool_plugin* (*tpool_plugin_entry_fn)(const tpool_host_api* host);

TPOOL_PLUGIN_EXPORT const tpool_plugin* tpool_plugin_entry(const tpool_host_api* host);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* TPOOL_PLUGIN_H */
