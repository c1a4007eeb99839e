// tpool::plugin_host::Host: loads handler plugins (.so files speaking the C ABI
// of plugins/include/tpool/plugin.h), keeps a name-keyed registry of their
// handlers, calls them, and reloads them without failing in-flight jobs.
//
// Standard C++ and libdl only: no gRPC or protobuf types (docs/plugins.md).
//
// Lifetimes:
//  - A HandlerRef keeps its plugin's library loaded while it is held. The
//    daemon takes one when it accepts a job and drops it when the job ends, so
//    a reload never unloads code a job still needs.
//  - reload() builds a whole new registry (fresh dlopen of every file, init
//    with the current config) and swaps it in atomically. The old libraries
//    stay loaded until their last HandlerRef is dropped; then fini runs and
//    they are dlclose()d, on the thread that dropped that last reference.
//  - The Host must outlive every invoke() call. HandlerRefs may outlive it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tpool/common/lane.h"
#include "tpool/common/status.h"
#include "tpool/plugin_host/isolation.h"
#include "tpool/plugin_host/job.h"

namespace tpool::plugin_host {

// Receives the host's own log lines (load, reload, init/fini) and the lines a
// plugin logs from init or fini (job == NULL). plugin may be empty.
using LogSink =
    std::function<void(LogLevel level, std::string_view plugin, std::string_view message)>;

struct HostConfig {
  // Directories scanned for "*.so" files, in this order; the files of each are
  // loaded in byte-wise sorted order (deterministic).
  std::vector<std::string> dirs;
  // true: any failed plugin fails load()/reload() as a whole (a bad deploy is
  // loud). false: failed plugins are reported and skipped; the rest serve.
  bool abort_on_load_error = true;
  // Plugin name -> config string passed to its init ("" when absent).
  std::map<std::string, std::string> plugin_config;
  // The most output bytes one handler call may produce; more fails the job
  // with kOutputTooLarge. 64 MiB: picked by hand, under gRPC's usual limits
  // once the daemon sets its max message size accordingly.
  std::size_t max_output_bytes = std::size_t{64} << 20;
  // Where each .so is copied before dlopen (so a reload of a replaced file
  // maps the new file even though glibc dedups dlopen by path). The copy is
  // unlinked right after dlopen. Empty: $TMPDIR, else /tmp. Must allow exec
  // mappings (not mounted noexec).
  std::string staging_dir;
  // nullptr: lines go to stderr. Taken from the first load only (reload keeps
  // it) and called until the last library closes, which may be after the
  // Host is destroyed if a HandlerRef outlives it: it must stay callable.
  LogSink log_sink;
  // Where each plugin's handlers run (tpool/plugin_host/isolation.h): the
  // defaults ([plugins.isolation]) and per-plugin overrides by plugin name
  // ([plugins.isolation.NAME], whole settings, defaults already merged).
  IsolationSettings isolation;
  std::map<std::string, IsolationSettings> plugin_isolation;
  // Starts the runners of a process-mode plugin. Empty: a plugin configured
  // for process mode fails to load with a sentence saying so.
  IsolationFactory isolation_factory;
};

enum class LoadErrorKind : std::uint8_t {
  kDirectory,         // a configured directory is missing, unreadable or world-writable
  kWorldWritable,     // the .so file is writable by everyone
  kUnreadable,        // the file cannot be opened or copied
  kNotElf,            // the file is not an ELF shared object
  kDlopen,            // dlopen failed (missing dependency, wrong architecture, ...)
  kNoEntry,           // no tpool_plugin_entry symbol
  kEntryRefused,      // the entry returned NULL
  kAbiMajorMismatch,  // plugin ABI major != host major
  kAbiMinorNewer,     // plugin ABI minor > host minor
  kBadDescriptor,     // struct sizes too small, missing names or handler functions
  kDuplicateHandler,  // a handler name is already registered (names both plugins)
  kInitFailed,        // init returned non-zero (carries the plugin's message)
};

std::string_view to_string(LoadErrorKind kind) noexcept;

struct LoadError {
  LoadErrorKind kind;
  std::string file;    // the .so (or directory) path as configured
  std::string plugin;  // the plugin's name once known, else empty
  // One or more sentences a plugin author can act on: the file, what was
  // wrong, the values involved (both ABI versions when relevant), what to do.
  std::string message;
};

struct HandlerInfo {
  std::string name;
  std::string description;
  Lane lane = Lane::kDefault;
  std::uint64_t max_input_bytes = 0;  // 0: no handler-specific limit
  std::string plugin_name;
  std::string plugin_version;
  std::string plugin_file;  // the path it was loaded from
  std::uint32_t plugin_abi_major = 0;
  std::uint32_t plugin_abi_minor = 0;
  std::uint64_t generation = 0;  // which load/reload of the host registered it (1, 2, ...)
  IsolationMode isolation = IsolationMode::kInProcess;  // where its calls run
};

struct HostCounters {
  std::uint64_t plugins_loaded = 0;       // plugins in the current registry
  std::uint64_t handlers_registered = 0;  // handlers in the current registry
  std::uint64_t load_failures = 0;        // plugins refused, over all loads and reloads
  std::uint64_t reloads = 0;              // successful reloads
  std::uint64_t reload_failures = 0;      // reloads that kept the old registry
  std::uint64_t libraries_open =
      0;  // mapped now (counted down at dlclose), old generations included
  std::uint64_t libraries_closed = 0;      // fini + dlclose done
  std::uint64_t invocations = 0;           // handler calls started
  std::uint64_t handler_failures = 0;      // calls that ended with a non-OK code
  std::uint64_t handler_exceptions = 0;    // C++ exceptions caught at the boundary
  std::uint64_t output_too_large = 0;      // calls failed by max_output_bytes
  std::uint64_t ignored_cancellation = 0;  // returned OK after cancel/deadline: reported failed
};

namespace detail {
struct Handler;
}

// A counted reference to one registered handler; keeps its plugin loaded.
// Cheap to copy (one atomic increment); empty when default-constructed.
class HandlerRef {
 public:
  HandlerRef() = default;
  explicit operator bool() const noexcept { return handler_ != nullptr; }
  const HandlerInfo& info() const noexcept;  // requires a non-empty ref
  const std::string& name() const noexcept { return info().name; }
  Lane lane() const noexcept { return info().lane; }
  // True when the handler's plugin runs in runner processes (process mode):
  // its jobs are worth batching (Host::invoke_batch). Requires a non-empty ref.
  bool isolated() const noexcept;
  // True when both refer to the same handler of the same registry generation.
  bool same_handler(const HandlerRef& other) const noexcept { return handler_ == other.handler_; }

 private:
  friend class Host;
  explicit HandlerRef(std::shared_ptr<const detail::Handler> h) : handler_(std::move(h)) {}
  std::shared_ptr<const detail::Handler> handler_;
};

class Host {
 public:
  // Loads every plugin of config.dirs. With abort_on_load_error, any failure
  // returns an InvalidArgument Status whose message lists every LoadError, one
  // per line; otherwise the Host is returned and load_errors() lists them.
  // errors (optional) receives the list in both cases.
  static Result<std::unique_ptr<Host>> load(HostConfig config,
                                            std::vector<LoadError>* errors = nullptr);
  // The checks load() makes on each directory before it opens any file
  // (it exists, is a directory, is not world-writable, can be listed),
  // loading nothing: for `tpoold --check-config`. One LoadError per failing
  // directory, with the same message load() would give.
  static std::vector<LoadError> check_dirs(const std::vector<std::string>& dirs);
  ~Host();
  Host(const Host&) = delete;
  Host& operator=(const Host&) = delete;

  // Rescans the directories (re-reading changed files) and swaps the registry
  // atomically. With abort_on_load_error, any failure keeps the old registry
  // and returns InvalidArgument listing the errors. Serialised: concurrent
  // reloads run one after the other. Safe alongside find/list/invoke.
  Status reload();
  // The same with a new configuration (dirs, plugin configs, limits).
  Status reload(HostConfig config);

  // The handler of that name in the current registry; empty if none.
  HandlerRef find(std::string_view name) const;
  // Every handler of the current registry, sorted by name.
  std::vector<HandlerInfo> list() const;
  // The errors of the last load or reload.
  std::vector<LoadError> load_errors() const;
  HostCounters counters() const;
  // One entry per process-mode plugin of the current registry.
  std::vector<IsolationStats> isolation_stats() const;

  // Empty when the handler's jobs may be admitted; else why not (a
  // process-mode plugin marked unhealthy after repeated runner crashes).
  std::string unavailable(const HandlerRef& handler) const;

  // Calls the handler on this thread. Input over the handler's max_input_bytes,
  // a non-zero status, a C++ exception, output over max_output_bytes, or an OK
  // return after the job was cancelled or timed out all become a failed
  // result with a message; never throws (except std::bad_alloc building it).
  InvokeResult invoke(const HandlerRef& handler, std::string_view input,
                      JobServices& services) const;
  // invoke() for several calls of one handler, each result given to done as
  // its call ends, all before this returns. An isolated handler's calls go
  // to one runner together (IsolatedPlugin::invoke_batch); an in-process
  // handler's run one after another on this thread, as invoke() would.
  void invoke_batch(const HandlerRef& handler, std::span<const BatchCall> calls,
                    const BatchDone& done) const;
  // The most calls of this handler worth one invoke_batch now (1 for an
  // in-process handler: its calls gain nothing from a batch).
  std::size_t batch_limit(const HandlerRef& handler) const;

  struct Impl;

 private:
  explicit Host(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tpool::plugin_host
