// tpoold: the job-execution daemon. See docs/configuration.md for the flags
// and the config file, docs/architecture.md for the lifecycle.
#include <spdlog/spdlog.h>

#include <cstdio>

#include "config.h"
#include "crash.h"
#include "daemon.h"
#include "logging.h"
#include "preflight.h"

int main(int argc, char** argv) {
  using namespace tpool::server;
  auto opts = parse_args(argc, argv);
  if (!opts.ok()) {
    std::fprintf(stderr, "tpoold: %s\n", opts.status().message().c_str());
    return 2;
  }
  if (opts->show_help) {
    std::fputs(usage().c_str(), stdout);
    return 0;
  }
  if (opts->show_version) {
    std::printf("tpoold %s\n", TPOOL_VERSION);
    return 0;
  }
  auto config = resolve_config(opts.value());
  if (!config.ok()) {
    std::fprintf(stderr, "tpoold: %s\n", config.status().message().c_str());
    return opts->check_only ? 1 : 2;
  }
  if (opts->check_only) {
    const PreflightReport report = preflight(config.value());
    for (const auto& w : report.warnings) std::fprintf(stderr, "tpoold: warning: %s\n", w.c_str());
    for (const auto& e : report.errors) {
      std::fprintf(stderr, "tpoold: %s: %s\n", opts->config_path.c_str(), e.c_str());
    }
    if (!report.errors.empty()) return 1;
    std::printf("tpoold: %s is valid\n", opts->config_path.c_str());
    return 0;
  }
  setup_logging(config->log.level, config->log.format);
  install_crash_handler(config->log.format == "json");
  Daemon daemon(std::move(config).value());
  return daemon.run();
}
