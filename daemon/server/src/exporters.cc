// The seam where exporters start: the daemon calls start_exporters once it
// serves and drops the handle when it stops. With daemon/metrics built
// (TPOOL_HAVE_METRICS), that is the Prometheus endpoint on metrics.listen.
//
// tpool::metrics knows no engine, plugin host or rpc type (docs/architecture.md):
// it calls scrape_snapshot below, which copies their counters into the plain
// structs of tpool/metrics/snapshot.h.
#include <spdlog/spdlog.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "daemon.h"
#include "preflight.h"

#if TPOOL_HAVE_METRICS
#include "tpool/metrics/exporter.h"
#endif

namespace tpool::server {

#if TPOOL_HAVE_METRICS
namespace {

// The one place where the components' counters meet for a scrape (the
// metric each field feeds is named in tpool/metrics/snapshot.h). It runs on
// the metrics server's threads, possibly several at once, while the daemon
// serves: each read is a component's own counter snapshot, safe from any
// thread, and none waits for a job. A null component leaves its part empty.
metrics::Snapshot scrape_snapshot(const DaemonView& v) {
  metrics::Snapshot s;
  if (v.pool != nullptr) s.pool = v.pool->stats();
  std::uint64_t engine_ignored = 0;
  std::optional<engine::EngineSnapshot> engine_snapshot;  // read once, for jobs and the store
  if (v.engine != nullptr) {
    const engine::EngineSnapshot& e = engine_snapshot.emplace(v.engine->snapshot());
    engine_ignored = e.ignored_cancellation;
    metrics::JobsSnapshot& j = s.jobs.emplace();
    // Joined by handler name: the engine counts a handler from its first job,
    // and every loaded handler gets its series at 0 from the start, so rate()
    // and increase() see the first job. Sorted by name, each name once.
    std::map<std::string, metrics::HandlerJobs> by_name;
    for (const auto& h : e.handlers) {
      by_name.emplace(h.handler, metrics::HandlerJobs{.handler = h.handler,
                                                      .submitted = h.submitted,
                                                      .succeeded = h.succeeded,
                                                      .failed = h.failed,
                                                      .cancelled = h.cancelled,
                                                      .timed_out = h.timed_out});
    }
    if (v.host != nullptr) {
      for (const auto& info : v.host->list()) {
        by_name.try_emplace(info.name, metrics::HandlerJobs{.handler = info.name});
      }
    }
    for (auto& [name, h] : by_name) j.handlers.push_back(std::move(h));
    j.rejected_invalid = e.rejected_invalid;
    j.rejected_not_found = e.rejected_not_found;
    j.rejected_full = e.rejected_full;
    j.rejected_draining = e.rejected_draining;
    j.rejected_conflict = e.rejected_conflict;
    j.rejected_unhealthy = e.rejected_unhealthy;
    j.deduplicated = e.deduplicated;
    j.in_progress = e.in_flight;
    j.result_store_entries = e.retained_entries;
    j.result_store_bytes = e.retained_bytes;
    j.result_store_expired = e.expired;
    j.handlers_running_after_end = e.running_after_end;
    j.retried = e.retried;
    j.scheduled = e.scheduled;
    j.draining = e.draining;
  }
  if (v.host != nullptr) {
    const plugin_host::HostCounters c = v.host->counters();
    metrics::PluginsSnapshot& p = s.plugins.emplace();
    p.plugins_loaded = c.plugins_loaded;
    p.handlers_registered = c.handlers_registered;
    p.load_failures = c.load_failures;
    p.reloads = c.reloads;
    p.reload_failures = c.reload_failures;
    // The host counts a library down when it closes it (host.cc): this is
    // already the number mapped now; libraries_closed is not subtracted again.
    p.libraries_open = c.libraries_open;
    p.invocations = c.invocations;
    p.handler_exceptions = c.handler_exceptions;
    p.output_too_large = c.output_too_large;
    // One count per handler call: the host's (returned OK after cancellation)
    // and the engine's (still running cancel_grace_ms after it) never overlap
    // (JobServices::claim_ignored_cancellation).
    p.ignored_cancellation = c.ignored_cancellation + engine_ignored;
    for (const plugin_host::IsolationStats& i : v.host->isolation_stats()) {
      s.isolated.push_back({.plugin = i.plugin,
                            .runners_alive = i.runners_alive,
                            .runners_busy = i.runners_busy,
                            .calls_waiting = i.calls_waiting,
                            .restarts_crash = i.restarts_crash,
                            .restarts_time_limit = i.restarts_time_limit,
                            .restarts_memory = i.restarts_memory,
                            .restarts_cpu = i.restarts_cpu,
                            .restarts_denied = i.restarts_denied,
                            .jobs_lost = i.jobs_lost,
                            .runner_calls = i.runner_calls,
                            .runner_call_jobs = i.runner_call_jobs,
                            .healthy = i.healthy});
    }
  }
  if (v.jobs != nullptr) {
    const rpc::RpcSnapshot r = v.jobs->snapshot();
    s.grpc = metrics::GrpcSnapshot{.streams_active = r.streams_active,
                                   .streams_total = r.streams_total,
                                   .streams_rejected = r.streams_rejected,
                                   .stream_buffered_bytes = r.stream_buffered_bytes,
                                   .stream_unparsable_messages = r.stream_unparsable_messages};
  }
  if (v.store != nullptr) {
    store::Journal& jn = v.store->journal();
    const store::JournalStats st = jn.stats();
    metrics::StoreSnapshot& m = s.store.emplace();
    StoreMetrics::Histogram commit, per_commit;
    v.store->read(commit, per_commit);
    m.commit_seconds = {commit.bounds, commit.counts, commit.count, commit.sum};
    m.jobs_per_commit = {per_commit.bounds, per_commit.counts, per_commit.count, per_commit.sum};
    m.size_bytes = st.file_bytes;
    m.pending = st.pending;
    m.commit_errors = st.commit_errors;
    m.healthy = jn.healthy();
    if (engine_snapshot) {
      m.replayed = engine_snapshot->replayed;
      m.refused = engine_snapshot->store_refused;
    }
  }
  return s;
}

}  // namespace
#endif

std::shared_ptr<void> start_exporters(const DaemonView& view, std::string* error) {
  error->clear();
  if (!view.config->metrics.enabled) return nullptr;
#if TPOOL_HAVE_METRICS
  metrics::Sources sources;
  // The view's pointers stay valid while the exporter runs: the daemon drops
  // the exporter before it stops any component (daemon.cc).
  sources.snapshot = [view] { return scrape_snapshot(view); };
  sources.version = TPOOL_VERSION;
  metrics::ExporterOptions opts;
  opts.listen = view.config->metrics.listen;
  opts.port_file = view.config->metrics.port_file;
  opts.basic_auth_user = view.config->metrics.basic_auth_user;
  opts.basic_auth_password = view.config->metrics.basic_auth_password;
  opts.basic_auth_password_file = view.config->metrics.basic_auth_password_file;
  opts.tls = view.config->metrics.tls;
  opts.tls_cert_file = view.config->tls.cert_file;
  opts.tls_key_file = view.config->tls.key_file;
  if (!opts.tls && !view.config->metrics_transport_is_private()) {
    // validate() let it through only with server.allow_insecure.
    spdlog::warn(
        "metrics.listen = '{}' serves /metrics in plain HTTP on a non-loopback address "
        "(server.allow_insecure = true){}; set metrics.tls = true",
        opts.listen,
        opts.basic_auth_user.empty() ? "" : ": the basic auth password crosses the network");
  }
  auto exporter = metrics::Exporter::start(std::move(sources), opts);
  if (!exporter.ok()) {
    *error = "cannot start the metrics endpoint (metrics.listen / --metrics-listen): " +
             exporter.status().message();
    return nullptr;
  }
  spdlog::info("metrics: Prometheus /metrics on port {} over {}", exporter.value()->port(),
               opts.tls ? "HTTPS" : "HTTP");
  return std::shared_ptr<metrics::Exporter>(std::move(exporter).value());
#else
  spdlog::info(
      "metrics.enabled is set, but this build has no metrics exporter "
      "(daemon/metrics); serving without /metrics");
  return nullptr;
#endif
}

std::string check_exporters(const DaemonConfig& config) {
  if (!config.metrics.enabled) return "";
#if TPOOL_HAVE_METRICS
  // The same readings Exporter::start does.
  if (!config.metrics.basic_auth_password_file.empty()) {
    auto pw = metrics::read_password_file(config.metrics.basic_auth_password_file);
    if (!pw.ok()) return pw.status().message();
  }
  metrics::ExporterOptions opts;
  opts.tls = config.metrics.tls;
  opts.tls_cert_file = config.tls.cert_file;
  opts.tls_key_file = config.tls.key_file;
  if (Status s = metrics::check_tls(opts); !s.ok()) return s.message();
#endif
  return "";
}

}  // namespace tpool::server
