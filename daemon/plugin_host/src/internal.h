// Internals shared by the plugin host's translation units: a loaded library,
// a registered handler, the per-call job context behind the C ABI's opaque
// tpool_job, and the host-wide state that outlives the Host object.
#pragma once

#include <atomic>
#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <vector>

#include "tpool/plugin.h"
#include "tpool/plugin_host/host.h"

namespace tpool::plugin_host::detail {

// State a library needs after the Host is gone (a HandlerRef may outlive the
// Host, and the last one to drop runs fini and dlclose).
struct Shared {
  LogSink log_sink;  // never empty (Host::load installs the stderr sink)
  std::atomic<std::uint64_t> load_failures{0};
  std::atomic<std::uint64_t> reloads{0};
  std::atomic<std::uint64_t> reload_failures{0};
  std::atomic<std::uint64_t> libraries_open{0};
  std::atomic<std::uint64_t> libraries_closed{0};
  std::atomic<std::uint64_t> invocations{0};
  std::atomic<std::uint64_t> handler_failures{0};
  std::atomic<std::uint64_t> handler_exceptions{0};
  std::atomic<std::uint64_t> output_too_large{0};
  std::atomic<std::uint64_t> ignored_cancellation{0};
  // All counters are statistics: relaxed increments, read at scrape time; a
  // stale value only delays a metric by one scrape.
  static void bump(std::atomic<std::uint64_t>& c) noexcept {
    c.fetch_add(1, std::memory_order_relaxed);
  }
};

// One dlopen()ed copy of a plugin file. Immutable once initialised; destroyed
// (fini, then dlclose) when the last Handler of it is released.
class Library {
 public:
  Library(std::shared_ptr<Shared> shared, std::string file, void* dl);
  ~Library();
  Library(const Library&) = delete;
  Library& operator=(const Library&) = delete;

  // Runs init with config; on failure fills error and returns false.
  bool init(const std::string& config, std::string& error, std::int32_t& status);
  void log(LogLevel level, std::string_view message) const;

  std::shared_ptr<Shared> shared;
  std::string file;  // as configured (not the staging copy)
  void* dl;
  tpool_plugin desc{};  // copied, zero-extended to this host's layout
  std::string name;     // the plugin's name once read, else the file name
  std::string version;
  void* plugin_ctx = nullptr;
  bool initialised = false;
};

struct Handler {
  HandlerInfo info;
  tpool_handler_fn call = nullptr;
  std::shared_ptr<Library> library;  // keeps the code loaded while this Handler lives
  // Set for a process-mode plugin: calls go to its runners, never to `call`
  // (the library is mapped for its descriptor only; init never ran here).
  std::shared_ptr<IsolatedPlugin> isolated;
};

// The plugin whose init/fini/entry runs on this thread, for log(job == NULL).
extern thread_local const Library* tls_current_library;

// The C host table this host hands to every plugin.
const tpool_host_api* host_api() noexcept;

}  // namespace tpool::plugin_host::detail

// The opaque job context of the C ABI (tpool/plugin.h): lives on the stack of
// Host::invoke for exactly one handler call.
struct tpool_job {
  tpool::plugin_host::JobServices* services = nullptr;
  const tpool::plugin_host::detail::Handler* handler = nullptr;
  std::size_t max_output = 0;
  std::string output;
  bool output_overflow = false;
  std::size_t attempted_output = 0;  // the total size the handler tried to reach
  std::string message;
  // Child results stay here until the handler returns (tpool_child_result's
  // pointers point into them); a list keeps earlier batches in place and,
  // unlike a deque, allocates nothing while empty: a std::deque's
  // constructor allocates its map and a first 512-byte node, two mallocs per
  // call for the handlers (nearly all) that run no children (issue 19).
  std::list<std::vector<tpool::plugin_host::InvokeResult>> children;
};
