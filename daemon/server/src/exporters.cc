// The seam where exporters start (daemon/metrics): the daemon calls
// start_exporters once it serves and drops the handle when it stops.
#include <spdlog/spdlog.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "daemon.h"
#ifdef TPOOL_HAVE_METRICS
#include "tpool/metrics/exporter.h"
#endif

namespace tpool::server {

std::shared_ptr<void> start_exporters(const DaemonView& view, std::string* error) {
  error->clear();
  const MetricsSection& m = view.config->metrics;
  if (!m.enabled) return nullptr;
#ifdef TPOOL_HAVE_METRICS
  metrics::ExporterOptions opts;
  opts.listen = m.listen;
  opts.basic_auth_user = m.basic_auth_user;
  opts.basic_auth_password = m.basic_auth_password;
  if (!m.basic_auth_password_file.empty()) {
    std::ifstream in(m.basic_auth_password_file);
    if (!in || !std::getline(in, opts.basic_auth_password) || opts.basic_auth_password.empty()) {
      *error = "cannot read a password from metrics.basic_auth_password_file '" +
               m.basic_auth_password_file +
               "'; its first line must hold the password and tpoold must be able to read it";
      return nullptr;
    }
  }
  metrics::Sources sources{view.pool, view.host, view.engine, view.jobs, TPOOL_VERSION};
  auto exporter = metrics::Exporter::start(std::move(sources), opts);
  if (!exporter.ok()) {
    *error = exporter.status().message();
    return nullptr;
  }
  std::shared_ptr<metrics::Exporter> e = std::move(exporter).value();
  spdlog::info("metrics on http://{}/metrics (port {}){}", m.listen, e->port(),
               opts.basic_auth_user.empty() ? "" : ", basic auth");
  if (!m.port_file.empty()) {
    // Written whole, then renamed: a reader never sees half a number.
    const std::string tmp = m.port_file + ".tmp";
    std::ofstream out(tmp);
    out << e->port() << "\n";
    out.close();
    std::error_code ec;
    if (!out || (std::filesystem::rename(tmp, m.port_file, ec), ec)) {
      *error = "cannot write the metrics port to metrics.port_file '" + m.port_file + "'";
      return nullptr;
    }
  }
  return e;
#else
  (void)view;
  spdlog::info(
      "metrics.enabled is set, but this build has no metrics exporter "
      "(daemon/metrics); serving without /metrics");
  return nullptr;
#endif
}

}  // namespace tpool::server
