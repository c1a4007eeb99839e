// The seam between the plugin host and an out-of-process runner of a plugin
// (issue 18; docs/plugins.md, "Isolation").
//
// The host decides per plugin, at load, whether its handlers run on the
// calling thread (in_process, the default) or in supervised runner processes
// (process). For a process-mode plugin the host still reads the descriptor
// (so names, lanes and limits are checked the same way), but never calls its
// init, fini or handlers: it asks HostConfig::isolation_factory for an
// IsolatedPlugin (tpool::isolation's Supervisor, wired by the server) and
// Host::invoke hands each call of that plugin's handlers to it.
//
// No dependency on tpool::isolation: the host knows this interface only, so
// the arrow goes isolation -> plugin_host and never back (docs/architecture.md).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tpool/common/status.h"
#include "tpool/plugin_host/job.h"

namespace tpool::plugin_host {

struct HandlerInfo;

enum class IsolationMode : std::uint8_t {
  kInProcess,  // handlers run on the pool worker that took the job (the default)
  kProcess,    // handlers run in tpool-runner processes the daemon supervises
};

std::string_view to_string(IsolationMode mode) noexcept;

// [plugins.isolation] and [plugins.isolation.NAME] (docs/configuration.md).
struct IsolationSettings {
  IsolationMode mode = IsolationMode::kInProcess;
  // Runner processes per plugin; each runs one job at a time (a batch's
  // jobs wait in its queue), so this is the plugin's concurrency, and a crash
  // ends exactly the one job it was running.
  std::uint32_t runners = 2;
  // RLIMIT_AS of each runner in MiB; 0: no limit.
  std::uint64_t address_space_mb = 1024;
  // CPU time one job may use in its runner (its handler thread's CPU clock);
  // 0: no limit. Over it the runner is stopped and the job fails.
  std::uint64_t cpu_seconds_per_job = 0;
  // RLIMIT_NOFILE of each runner.
  std::uint64_t open_files = 64;
  // System calls allowed on top of the runner's seccomp allow-list, by name
  // ("socket", "connect"): the documented extension key allow_syscalls.
  std::vector<std::string> allow_syscalls;
  // Crashes (of any cause) within crash_window that mark the plugin
  // unhealthy until it is reloaded.
  std::uint32_t crash_limit = 5;
  std::chrono::milliseconds crash_window{60000};
};

// What the factory gets for one process-mode plugin of one load or reload.
struct IsolatedLoad {
  std::string file;         // the .so as configured (each runner dlopens it itself)
  std::string plugin_name;  // from the descriptor the host read
  std::string plugin_version;
  std::string config;  // the plugin's config string for init (runs in each runner)
  IsolationSettings settings;
  std::size_t max_output_bytes = 0;  // HostConfig::max_output_bytes
  std::function<void(LogLevel, std::string_view plugin, std::string_view message)> log;
};

// Counters of one isolated plugin (plain values, read at scrape time).
struct IsolationStats {
  std::string plugin;
  std::uint64_t runners_alive = 0;
  std::uint64_t runners_busy = 0;  // holding a job now
  // The channel's queue: calls that have come to this plugin and wait for a
  // free runner (each on the pool worker that made it).
  std::uint64_t calls_waiting = 0;
  std::uint64_t restarts_crash = 0;       // a runner died of a signal or exited
  std::uint64_t restarts_time_limit = 0;  // killed past deadline/cancel + cancel grace
  std::uint64_t restarts_memory = 0;      // died at its address-space limit
  std::uint64_t restarts_cpu = 0;         // stopped at cpu_seconds_per_job
  std::uint64_t restarts_denied = 0;      // stopped by its seccomp filter
  std::uint64_t jobs_lost = 0;            // jobs that ended because their runner died
  // Calls sent to a runner (one job, or a batch of one handler's jobs; the
  // jobs behind a failed one count again in the call to the next runner),
  // and the jobs they carried: call_jobs / calls is the mean batch size.
  std::uint64_t runner_calls = 0;
  std::uint64_t runner_call_jobs = 0;
  bool healthy = true;
};

// One call of a batch (IsolatedPlugin::invoke_batch, Host::invoke_batch):
// the job's input and its services, both valid until its result is given.
struct BatchCall {
  std::string_view input;
  JobServices* services = nullptr;
};
// Receives one call's result, by its index in the batch, as that call ends
// (on the thread that made the batch call, in no promised order).
using BatchDone = std::function<void(std::size_t index, InvokeResult&& result)>;

// One process-mode plugin of one registry generation. Kept alive by its
// handlers (as a Library is), so a reload leaves the old runners serving the
// jobs they hold until the last of those jobs ends.
class IsolatedPlugin {
 public:
  virtual ~IsolatedPlugin() = default;
  // Runs one call in a runner and waits for it; same contract as
  // Host::invoke (input size already checked by the host).
  virtual InvokeResult invoke(const HandlerInfo& handler, std::string_view input,
                              JobServices& services) = 0;
  // Runs several calls of one handler and gives each its result through
  // done before it returns: the calls go to one runner together, which runs
  // them one at a time in this order (W1 in tpool/isolation/wire.h), so a
  // batch costs one hand-over instead of one round trip per call. A runner
  // that dies ends only the call it was running; the calls behind it go to
  // another runner.
  virtual void invoke_batch(const HandlerInfo& handler, std::span<const BatchCall> calls,
                            const BatchDone& done) = 0;
  // How many of this handler's jobs are worth one batch now: 1 until its
  // jobs' time is known, then as many as fit the supervisor's budget for a
  // batch, so slow jobs still spread over the runners.
  virtual std::size_t batch_limit(const HandlerInfo& handler) const = 0;
  // Empty while the plugin serves; once it is marked unhealthy, the sentence
  // a refused job gets (the plugin, its crashes, what to do).
  virtual std::string unavailable() const = 0;
  virtual IsolationStats stats() const = 0;
  // Called once when a reload has replaced this generation. Its runners
  // serve the jobs accepted before the reload that still run or wait for a
  // runner ("late" jobs, including retries), and end once none does; a later
  // late job starts one again and it ends after. The generation itself goes
  // when its last unfinished job ends (engine Job::handler_).
  virtual void retire() = 0;
};

// Starts the runners of one plugin (and waits for them to have loaded and
// initialised it); an error is the load error's sentence.
using IsolationFactory = std::function<Result<std::shared_ptr<IsolatedPlugin>>(IsolatedLoad)>;

}  // namespace tpool::plugin_host
