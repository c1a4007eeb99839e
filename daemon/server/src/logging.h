// spdlog set-up: text or JSON lines on stderr (journald and container logs
// both take stderr).
#pragma once

#include <string>

namespace tpool::server {

// level and format as validated by DaemonConfig (log.level, log.format).
void setup_logging(const std::string& level, const std::string& format);

}  // namespace tpool::server
