// The scrape: every value comes from one Snapshot, taken when Prometheus
// asks from the counters the pool, the engine, the plugin host and the rpc
// layer keep anyway (snapshot.h; the server fills it). Names, types, help
// texts and labels are documented in docs/metrics.md; keep the two in step
// (tests/integration/metrics checks every family it names, and the whole
// shape of a scrape against scrape_shape.txt).
#include <cmath>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "families.h"
#include "tpool/metrics/exporter.h"

#ifndef TPOOL_METRICS_COMPILER
#define TPOOL_METRICS_COMPILER "unknown"
#endif
#ifndef TPOOL_METRICS_BUILD_TYPE
#define TPOOL_METRICS_BUILD_TYPE "unknown"
#endif

namespace tpool::metrics {
namespace {

using detail::Families;
using detail::Labels;

double d(std::uint64_t v) {
  return static_cast<double>(v);
}

std::string lane_name(std::size_t l) {
  return std::string(to_string(static_cast<Lane>(l)));
}

void collect_pool(const PoolStats& s, Families& f) {
  f.gauge("tpoold_pool_workers",
          "Pool worker threads running, by lane and kind (core: started with the pool; "
          "overflow: spawned by the watchdog for the default lane).");
  for (std::size_t l = 0; l < kLaneCount; ++l) {
    f.value(d(s.lanes[l].workers), {{"kind", "core"}, {"lane", lane_name(l)}});
    f.value(l == static_cast<std::size_t>(Lane::kDefault) ? d(s.overflow_active) : 0.0,
            {{"kind", "overflow"}, {"lane", lane_name(l)}});
  }
  f.gauge("tpoold_pool_workers_busy", "Pool workers running a task now.").value(d(s.busy_workers));
  f.gauge("tpoold_pool_workers_parked", "Pool workers parked (asleep, waiting for work).")
      .value(d(s.parked_workers));

  f.counter("tpoold_watchdog_stalls_total",
            "Default-lane workers the watchdog found running one task past "
            "pool.blocking_promotion_timeout_ms.")
      .value(d(s.stalls_detected));
  f.gauge("tpoold_watchdog_stalled_workers",
          "Workers stalled at the watchdog's last tick (one task past the promotion timeout; "
          "a blocking worker on blocking-lane work does not count).")
      .value(d(s.stalled_now));
  f.counter("tpoold_overflow_workers_spawned_total",
            "Overflow workers the watchdog started because workers stalled.")
      .value(d(s.overflow_spawned));
  f.counter("tpoold_overflow_workers_retired_total",
            "Overflow workers that exited after running out of work.")
      .value(d(s.overflow_retired));
  f.gauge("tpoold_overflow_workers", "Overflow workers running now.").value(d(s.overflow_active));
  f.gauge("tpoold_overflow_workers_max",
          "The most overflow workers the watchdog may run (pool.max_overflow_workers).")
      .value(d(s.overflow_max));

  f.gauge("tpoold_pool_queue_depth",
          "Tasks waiting in the pool's queues: inject (shared, per lane), local (the "
          "own queues of the lane's workers) and submitter (registered submitters' "
          "queues, default lane only).");
  for (std::size_t l = 0; l < kLaneCount; ++l) {
    f.value(d(s.lanes[l].inject_depth), {{"lane", lane_name(l)}, {"queue", "inject"}});
    f.value(d(s.lanes[l].local_depth), {{"lane", lane_name(l)}, {"queue", "local"}});
  }
  f.value(d(s.submitter_depth), {{"lane", "default"}, {"queue", "submitter"}});
  f.gauge("tpoold_pool_local_queue_depth_max", "The deepest worker's local queue.")
      .value(d(s.local_depth_max));
  f.gauge("tpoold_pool_descriptors_live",
          "Task descriptors in use: every queued or running job holds one.")
      .value(d(s.live_descriptors));
  f.gauge("tpoold_pool_descriptors_capacity",
          "Task descriptors in all (pool.queue_capacity): the most jobs queued or running.")
      .value(d(s.descriptor_capacity));

  f.counter("tpoold_pool_steals_total", "Successful steal operations between workers.")
      .value(d(s.steal_ops));
  f.counter("tpoold_pool_stolen_tasks_total", "Tasks moved by steal operations.")
      .value(d(s.steal_tasks));
  f.counter("tpoold_pool_parks_total", "Times a worker parked for lack of work.").value(d(s.parks));
  f.counter("tpoold_pool_wakeups_no_work_total", "Times a woken worker found no work.")
      .value(d(s.wakeups_no_work));
  f.counter("tpoold_pool_local_overflows_total",
            "Times a worker's local queue was full and a task went to a shared queue.")
      .value(d(s.local_overflows));

  f.counter("tpoold_pool_tasks_submitted_total",
            "Tasks the pool accepted (jobs and fan-out children).")
      .value(d(s.submitted));
  f.counter("tpoold_pool_tasks_ended_total", "Tasks the pool finished, by outcome.")
      .value(d(s.completed), {{"outcome", "completed"}})
      .value(d(s.failed), {{"outcome", "failed"}})
      .value(d(s.cancelled), {{"outcome", "cancelled"}});
  f.counter("tpoold_pool_tasks_rejected_total", "Tasks the pool refused, by reason.")
      .value(d(s.rejected_full), {{"reason", "full"}})
      .value(d(s.rejected_shutdown), {{"reason", "shutdown"}})
      .value(d(s.rejected_timeout), {{"reason", "timeout"}});

  if (s.timestamps_enabled) {
    f.histogram("tpoold_job_wait_seconds",
                "Time from submission to start, per lane, from the pool's histograms.");
    for (std::size_t l = 0; l < kLaneCount; ++l) {
      f.hist(to_prometheus(s.lanes[l].wait), {{"lane", lane_name(l)}});
    }
    f.histogram("tpoold_job_run_seconds",
                "Time from start to end, per lane, from the pool's histograms.");
    for (std::size_t l = 0; l < kLaneCount; ++l) {
      f.hist(to_prometheus(s.lanes[l].run), {{"lane", lane_name(l)}});
    }
  }
}

void collect_jobs(const JobsSnapshot& e, Families& f) {
  f.counter("tpoold_jobs_submitted_total", "Jobs accepted, by handler.");
  for (const auto& h : e.handlers) f.value(d(h.submitted), {{"handler", h.handler}});
  f.counter("tpoold_jobs_completed_total", "Jobs that ended, by handler and outcome.");
  for (const auto& h : e.handlers) {
    f.value(d(h.succeeded), {{"handler", h.handler}, {"outcome", "succeeded"}});
    f.value(d(h.failed), {{"handler", h.handler}, {"outcome", "failed"}});
    f.value(d(h.cancelled), {{"handler", h.handler}, {"outcome", "cancelled"}});
    f.value(d(h.timed_out), {{"handler", h.handler}, {"outcome", "timed_out"}});
  }
  f.counter("tpoold_jobs_rejected_total", "Job requests refused, by reason.")
      .value(d(e.rejected_invalid), {{"reason", "invalid_argument"}})
      .value(d(e.rejected_not_found), {{"reason", "not_found"}})
      .value(d(e.rejected_full), {{"reason", "exhausted"}})
      .value(d(e.rejected_draining), {{"reason", "draining"}})
      .value(d(e.rejected_conflict), {{"reason", "idempotency_conflict"}})
      .value(d(e.rejected_unhealthy), {{"reason", "unhealthy"}});
  f.counter("tpoold_jobs_deduplicated_total",
            "Requests answered by an earlier job with the same idempotency key.")
      .value(d(e.deduplicated));
  f.gauge("tpoold_jobs_in_progress", "Jobs accepted and not yet ended (queued or running).")
      .value(d(e.in_progress));
  f.counter("tpoold_jobs_retried_total",
            "Failed job attempts that were followed by another attempt (max_attempts).")
      .value(d(e.retried));
  f.gauge("tpoold_jobs_scheduled",
          "Jobs waiting for their time: delayed jobs before their first attempt, retries in "
          "their backoff.")
      .value(d(e.scheduled));
  f.gauge("tpoold_result_store_entries", "Ended jobs whose results are retained.")
      .value(d(e.result_store_entries));
  f.gauge("tpoold_result_store_bytes", "Bytes of retained results.").value(d(e.result_store_bytes));
  f.counter("tpoold_result_store_expired_total", "Results dropped by retention.")
      .value(d(e.result_store_expired));
  f.gauge("tpoold_handlers_running_after_end",
          "Handlers still running although their job has ended (timed out or cancelled by the "
          "engine).")
      .value(d(e.handlers_running_after_end));
  f.gauge("tpoold_draining", "1 while the daemon drains (accepts no new jobs).")
      .value(e.draining ? 1.0 : 0.0);
}

prometheus::ClientMetric::Histogram to_prometheus(const CumulativeHistogram& h) {
  prometheus::ClientMetric::Histogram out;
  out.sample_count = h.count;
  out.sample_sum = h.sum;
  for (std::size_t i = 0; i < h.bounds.size() && i < h.counts.size(); ++i) {
    out.bucket.push_back({h.counts[i], h.bounds[i]});
  }
  out.bucket.push_back({h.count, INFINITY});
  return out;
}

void collect_store(const StoreSnapshot& s, Families& f) {
  f.histogram("tpoold_store_commit_duration_seconds",
              "Job store transactions, BEGIN to COMMIT returned (its fsync included).")
      .hist(to_prometheus(s.commit_seconds));
  f.histogram("tpoold_store_jobs_per_commit",
              "Records (accepts, starts, ends, retries) written by each job store transaction.")
      .hist(to_prometheus(s.jobs_per_commit));
  f.gauge("tpoold_store_size_bytes", "The job store's database and WAL on disk.")
      .value(d(s.size_bytes));
  f.gauge("tpoold_store_pending_jobs", "Durable jobs accepted and not yet ended.")
      .value(d(s.pending));
  f.counter("tpoold_store_replayed_jobs_total",
            "Durable jobs replayed from the store when tpoold started.")
      .value(d(s.replayed));
  f.counter("tpoold_store_commit_errors_total",
            "Job store transactions that failed (disk full, I/O error); the log says why.")
      .value(d(s.commit_errors));
  f.counter("tpoold_store_refused_jobs_total",
            "Durable jobs refused because the job store could not commit them.")
      .value(d(s.refused));
  f.gauge("tpoold_store_healthy",
          "0 from a failed job store commit until a commit succeeds again, else 1.")
      .value(s.healthy ? 1.0 : 0.0);
}

void collect_plugins(const PluginsSnapshot& c, Families& f) {
  f.gauge("tpoold_plugins_loaded", "Plugins in the current registry.").value(d(c.plugins_loaded));
  f.gauge("tpoold_handlers_registered", "Handlers in the current registry.")
      .value(d(c.handlers_registered));
  f.counter("tpoold_plugin_load_failures_total",
            "Plugins refused at load or reload (the log says why).")
      .value(d(c.load_failures));
  f.counter("tpoold_plugin_reloads_total", "Successful plugin reloads.").value(d(c.reloads));
  f.counter("tpoold_plugin_reload_failures_total", "Reloads that kept the old registry.")
      .value(d(c.reload_failures));
  f.gauge("tpoold_plugin_libraries_open",
          "Plugin libraries mapped, old generations still in use included.")
      .value(d(c.libraries_open));
  f.counter("tpoold_handler_invocations_total", "Handler calls started.").value(d(c.invocations));
  f.counter("tpoold_handler_exceptions_total",
            "C++ exceptions thrown by handlers and caught at the plugin boundary.")
      .value(d(c.handler_exceptions));
  f.counter("tpoold_handler_output_too_large_total",
            "Handler calls failed because their output exceeded server.max_output_bytes.")
      .value(d(c.output_too_large));
  f.counter("tpoold_handler_ignored_cancellation_total",
            "Handler calls that ignored cancellation or their deadline: returned OK after it "
            "(reported failed), or were still running server.cancel_grace_ms after it (each "
            "holds a worker until it returns).")
      .value(d(c.ignored_cancellation));
}

void collect_isolated(const std::vector<IsolatedPlugin>& plugins, Families& f) {
  auto& alive = f.gauge("tpoold_isolated_runners_alive",
                        "Runner processes of a process-mode plugin serving or idle now.");
  for (const auto& p : plugins) alive.value(d(p.runners_alive), {{"plugin", p.plugin}});
  auto& busy = f.gauge("tpoold_isolated_runners_busy",
                       "Runner processes of a process-mode plugin holding a job now.");
  for (const auto& p : plugins) busy.value(d(p.runners_busy), {{"plugin", p.plugin}});
  auto& waiting = f.gauge("tpoold_isolated_channel_queue_depth",
                          "Calls to a process-mode plugin waiting for a free runner now (each "
                          "holds the pool worker that made it).");
  for (const auto& p : plugins) waiting.value(d(p.calls_waiting), {{"plugin", p.plugin}});
  auto& restarts = f.counter("tpoold_isolated_runner_restarts_total",
                             "Runners of a process-mode plugin ended and replaced, by cause.");
  for (const auto& p : plugins) {
    restarts.value(d(p.restarts_crash), {{"plugin", p.plugin}, {"cause", "crash"}})
        .value(d(p.restarts_time_limit), {{"plugin", p.plugin}, {"cause", "time_limit"}})
        .value(d(p.restarts_memory), {{"plugin", p.plugin}, {"cause", "memory"}})
        .value(d(p.restarts_cpu), {{"plugin", p.plugin}, {"cause", "cpu"}})
        .value(d(p.restarts_denied), {{"plugin", p.plugin}, {"cause", "denied_syscall"}});
  }
  auto& lost = f.counter("tpoold_isolated_jobs_lost_total",
                         "Jobs of a process-mode plugin that ended because their runner ended.");
  for (const auto& p : plugins) lost.value(d(p.jobs_lost), {{"plugin", p.plugin}});
  auto& calls = f.counter("tpoold_isolated_runner_calls_total",
                          "Calls a process-mode plugin's runners were sent: one job, or a "
                          "batch of one handler's jobs.");
  for (const auto& p : plugins) calls.value(d(p.runner_calls), {{"plugin", p.plugin}});
  auto& call_jobs = f.counter("tpoold_isolated_runner_call_jobs_total",
                              "Jobs carried by the calls of tpoold_isolated_runner_calls_total "
                              "(the ratio is the mean batch size).");
  for (const auto& p : plugins) call_jobs.value(d(p.runner_call_jobs), {{"plugin", p.plugin}});
  auto& healthy = f.gauge("tpoold_isolated_plugin_healthy",
                          "0 once a process-mode plugin's runners failed crash_limit times "
                          "within crash_window_ms (its new jobs are refused) until a reload.");
  for (const auto& p : plugins) healthy.value(p.healthy ? 1.0 : 0.0, {{"plugin", p.plugin}});
}

void collect_grpc(const GrpcSnapshot& r, Families& f) {
  f.gauge("tpoold_grpc_streams_active", "JobService.Stream calls open now.")
      .value(d(r.streams_active));
  f.counter("tpoold_grpc_streams_total", "JobService.Stream calls accepted.")
      .value(d(r.streams_total));
  f.counter("tpoold_grpc_streams_rejected_total",
            "JobService.Stream calls refused at server.max_streams.")
      .value(d(r.streams_rejected));
  f.gauge("tpoold_stream_buffered_bytes",
          "Bytes of Stream results finished but not yet sent, over all open streams.")
      .value(d(r.stream_buffered_bytes));
  f.counter("tpoold_stream_unparsable_messages_total",
            "Stream messages that could not be parsed as a JobBatch (each ended its call).")
      .value(d(r.stream_unparsable_messages));
}

void collect_process(const ProcessStats& p, Families& f) {
  // The names every Prometheus client library uses for its process
  // collector, so standard dashboards and alerts work unchanged.
  auto add = [&](double v, const char* type, const char* name, const char* help) {
    if (v < 0) return;
    if (std::string_view(type) == "counter") {
      f.counter(name, help).value(v);
    } else {
      f.gauge(name, help).value(v);
    }
  };
  add(p.cpu_seconds, "counter", "process_cpu_seconds_total",
      "Total user and system CPU time spent in seconds.");
  add(p.resident_bytes, "gauge", "process_resident_memory_bytes", "Resident memory size in bytes.");
  add(p.virtual_bytes, "gauge", "process_virtual_memory_bytes", "Virtual memory size in bytes.");
  add(p.start_time_seconds, "gauge", "process_start_time_seconds",
      "Start time of the process since unix epoch in seconds.");
  add(p.open_fds, "gauge", "process_open_fds", "Number of open file descriptors.");
  add(p.max_fds, "gauge", "process_max_fds", "Maximum number of open file descriptors.");
  add(p.threads, "gauge", "process_threads", "Number of OS threads in the process.");
}

}  // namespace

std::vector<prometheus::MetricFamily> Collector::Collect() const {
  Families f;
  f.gauge("tpoold_build_info", "Always 1; the labels describe the running build.")
      .value(1.0, {{"build_type", TPOOL_METRICS_BUILD_TYPE},
                   {"compiler", TPOOL_METRICS_COMPILER},
                   {"version", sources_.version}});
  if (sources_.snapshot) {
    const Snapshot s = sources_.snapshot();
    if (s.pool) collect_pool(*s.pool, f);
    if (s.jobs) collect_jobs(*s.jobs, f);
    if (s.plugins) collect_plugins(*s.plugins, f);
    if (!s.isolated.empty()) collect_isolated(s.isolated, f);
    if (s.grpc) collect_grpc(*s.grpc, f);
    if (s.store) collect_store(*s.store, f);
  }
  collect_process(read_process_stats(), f);
  return std::move(f).take();
}

}  // namespace tpool::metrics
