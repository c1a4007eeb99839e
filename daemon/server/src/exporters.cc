// The seam where exporters start: the daemon calls start_exporters once it
// serves and drops the handle when it stops. With daemon/metrics built
// (TPOOL_HAVE_METRICS), that is the Prometheus endpoint on metrics.listen.
#include <spdlog/spdlog.h>

#include "daemon.h"
#include "preflight.h"

#if TPOOL_HAVE_METRICS
#include "tpool/metrics/exporter.h"
#endif

namespace tpool::server {

std::shared_ptr<void> start_exporters(const DaemonView& view, std::string* error) {
  error->clear();
  if (!view.config->metrics.enabled) return nullptr;
#if TPOOL_HAVE_METRICS
  metrics::Sources sources;
  sources.pool = view.pool;
  sources.host = view.host;
  sources.engine = view.engine;
  sources.jobs = view.jobs;
  sources.version = TPOOL_VERSION;
  metrics::ExporterOptions opts;
  opts.listen = view.config->metrics.listen;
  opts.port_file = view.config->metrics.port_file;
  opts.basic_auth_user = view.config->metrics.basic_auth_user;
  opts.basic_auth_password = view.config->metrics.basic_auth_password;
  opts.basic_auth_password_file = view.config->metrics.basic_auth_password_file;
  auto exporter = metrics::Exporter::start(std::move(sources), opts);
  if (!exporter.ok()) {
    *error = "cannot start the metrics endpoint (metrics.listen / --metrics-listen): " +
             exporter.status().message();
    return nullptr;
  }
  spdlog::info("metrics: Prometheus /metrics on port {}", exporter.value()->port());
  return std::shared_ptr<metrics::Exporter>(std::move(exporter).value());
#else
  spdlog::info(
      "metrics.enabled is set, but this build has no metrics exporter "
      "(daemon/metrics); serving without /metrics");
  return nullptr;
#endif
}

std::string check_exporters(const DaemonConfig& config) {
  if (!config.metrics.enabled || config.metrics.basic_auth_password_file.empty()) return "";
#if TPOOL_HAVE_METRICS
  // The same reading Exporter::start does.
  auto pw = metrics::read_password_file(config.metrics.basic_auth_password_file);
  if (!pw.ok()) return pw.status().message();
#endif
  return "";
}

}  // namespace tpool::server
