// The seam where exporters start (daemon/metrics): the daemon calls
// start_exporters once it serves and drops the handle when it stops.
#include <spdlog/spdlog.h>

#include "daemon.h"

namespace tpool::server {

std::shared_ptr<void> start_exporters(const DaemonView& view, std::string* error) {
  error->clear();
  if (view.config->metrics.enabled) {
    spdlog::info(
        "metrics.enabled is set, but this build has no metrics exporter "
        "(daemon/metrics); serving without /metrics");
  }
  return nullptr;
}

}  // namespace tpool::server
