// What a scrape reads: plain numbers, copied at scrape time by whoever owns
// the components (tpoold's server, daemon/server/src/exporters.cc), so that
// tpool::metrics knows the pool's PoolStats and nothing else of the daemon:
// no engine, plugin host or rpc header, no gRPC or protobuf
// (docs/architecture.md, "Arrows"; tests/unit/layers checks it).
//
// Each field is the value of one series of docs/metrics.md, already joined
// and summed: the collector prints, it does not combine components.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "tpool/pool.h"

namespace tpool::metrics {

// One handler's jobs (tpoold_jobs_submitted_total, tpoold_jobs_completed_total).
struct HandlerJobs {
  std::string handler{};
  std::uint64_t submitted = 0;
  std::uint64_t succeeded = 0;
  std::uint64_t failed = 0;
  std::uint64_t cancelled = 0;
  std::uint64_t timed_out = 0;
};

// The job engine: tpoold_jobs_*, tpoold_result_store_*,
// tpoold_handlers_running_after_end, tpoold_draining.
struct JobsSnapshot {
  // One entry per handler, sorted by name, each name once: every handler that
  // ran a job, and every loaded handler (at 0 until its first job, so rate()
  // sees that job).
  std::vector<HandlerJobs> handlers{};
  std::uint64_t rejected_invalid = 0;    // reason="invalid_argument"
  std::uint64_t rejected_not_found = 0;  // reason="not_found"
  std::uint64_t rejected_full = 0;       // reason="exhausted"
  std::uint64_t rejected_draining = 0;   // reason="draining"
  std::uint64_t rejected_conflict = 0;   // reason="idempotency_conflict"
  std::uint64_t rejected_unhealthy = 0;  // reason="unhealthy": its isolated plugin is unhealthy
  std::uint64_t deduplicated = 0;
  std::uint64_t in_progress = 0;  // accepted, not yet ended
  std::uint64_t result_store_entries = 0;
  std::uint64_t result_store_bytes = 0;
  std::uint64_t result_store_expired = 0;
  std::uint64_t handlers_running_after_end = 0;
  std::uint64_t retried = 0;    // failed attempts followed by another
  std::uint64_t scheduled = 0;  // waiting for their time (delay, backoff)
  bool draining = false;
};

// The plugin host: tpoold_plugins_*, tpoold_plugin_*, tpoold_handler_*.
struct PluginsSnapshot {
  std::uint64_t plugins_loaded = 0;
  std::uint64_t handlers_registered = 0;
  std::uint64_t load_failures = 0;
  std::uint64_t reloads = 0;
  std::uint64_t reload_failures = 0;
  std::uint64_t libraries_open = 0;  // mapped now, old generations still in use included
  std::uint64_t invocations = 0;
  std::uint64_t handler_exceptions = 0;
  std::uint64_t output_too_large = 0;
  // Handler calls that ignored cancellation or their deadline, whoever saw
  // it: the host (returned OK after it) plus the engine (still running
  // cancel_grace after it); a call is counted by one of the two, never both.
  std::uint64_t ignored_cancellation = 0;
};

// One process-mode plugin (docs/plugins.md, "Isolation"):
// tpoold_isolated_*{plugin}.
struct IsolatedPlugin {
  std::string plugin{};
  std::uint64_t runners_alive = 0;
  std::uint64_t runners_busy = 0;   // holding a job now
  std::uint64_t calls_waiting = 0;  // the channel's queue: calls waiting for a free runner
  // Runners ended and replaced, by cause: crash (a signal or an exit),
  // time_limit (killed cancel_grace_ms after a deadline or cancel), memory
  // (its address-space limit), cpu (cpu_seconds_per_job), denied_syscall.
  std::uint64_t restarts_crash = 0;
  std::uint64_t restarts_time_limit = 0;
  std::uint64_t restarts_memory = 0;
  std::uint64_t restarts_cpu = 0;
  std::uint64_t restarts_denied = 0;
  std::uint64_t jobs_lost = 0;  // jobs that ended because their runner ended
  // Calls sent to a runner (a job, or a batch of one handler's jobs) and the
  // jobs they carried.
  std::uint64_t runner_calls = 0;
  std::uint64_t runner_call_jobs = 0;
  bool healthy = true;
};

// The gRPC front end: tpoold_grpc_streams_*, tpoold_stream_*.
struct GrpcSnapshot {
  std::uint64_t streams_active = 0;
  std::uint64_t streams_total = 0;
  std::uint64_t streams_rejected = 0;
  std::uint64_t stream_buffered_bytes = 0;
  std::uint64_t stream_unparsable_messages = 0;
};

// A cumulative histogram already in Prometheus form: counts[i] samples at or
// below bounds[i] (ascending; +Inf is count).
struct CumulativeHistogram {
  std::vector<double> bounds{};
  std::vector<std::uint64_t> counts{};
  std::uint64_t count = 0;
  double sum = 0;
};

// The job store (issue 17): tpoold_store_*. Absent without [store] path.
struct StoreSnapshot {
  CumulativeHistogram commit_seconds{};   // BEGIN to COMMIT returned (the fsync included)
  CumulativeHistogram jobs_per_commit{};  // records written by each transaction
  std::uint64_t size_bytes = 0;           // database + WAL on disk
  std::uint64_t pending = 0;              // durable jobs accepted, not ended
  std::uint64_t replayed = 0;             // jobs replayed at this start
  std::uint64_t commit_errors = 0;        // transactions that failed
  std::uint64_t refused = 0;              // durable jobs refused because a commit failed
  bool healthy = true;                    // false from a failed commit until one succeeds
};

// One scrape's numbers. A part left empty leaves its families out of the
// scrape (they are not reported as zero).
struct Snapshot {
  std::optional<PoolStats> pool{};
  std::optional<JobsSnapshot> jobs{};
  std::optional<PluginsSnapshot> plugins{};
  std::optional<GrpcSnapshot> grpc{};
  std::optional<StoreSnapshot> store{};
  // Empty without process-mode plugins: no tpoold_isolated_* families.
  std::vector<IsolatedPlugin> isolated{};
};

// Called once per scrape, on the HTTP server's threads, possibly by several
// at once: it must be safe to call concurrently and should not block (it
// reads counters; it does not wait for jobs).
using SnapshotSource = std::function<Snapshot()>;

}  // namespace tpool::metrics
