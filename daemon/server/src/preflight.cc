#include "preflight.h"

#include <unistd.h>

#include <filesystem>

#include "tpool/plugin_host/host.h"

namespace tpool::server {
namespace {

// The start writes `path` whole, then renames it into place: its directory
// must exist and be writable by this user.
std::string port_file_dir_error(const std::string& key, const std::string& path) {
  if (path.empty()) return "";
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  const std::string dir = parent.empty() ? std::string(".") : parent.string();
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    return key + " = '" + path + "': its directory '" + dir +
           "' does not exist; create it or pick another path";
  }
  if (::access(dir.c_str(), W_OK | X_OK) != 0) {
    return key + " = '" + path + "': its directory '" + dir +
           "' is not writable by this user; fix its permissions or pick another path";
  }
  return "";
}

}  // namespace

PreflightReport preflight(const DaemonConfig& config) {
  PreflightReport r;
  if (config.plugins.dirs.empty()) {
    r.warnings.push_back(
        "no plugin directories are configured (plugins.dirs or --plugin-dir): tpoold would "
        "serve no handlers");
  }
  for (const auto& e : plugin_host::Host::check_dirs(config.plugins.dirs)) {
    if (config.plugins.abort_on_load_error) {
      r.errors.push_back(e.message);
    } else {
      r.warnings.push_back(e.message +
                           " (plugins.abort_on_load_error = false: tpoold would start without "
                           "this directory's plugins)");
    }
  }
  if (auto e = port_file_dir_error("server.port_file", config.server.port_file); !e.empty()) {
    r.errors.push_back(e);
  }
  if (config.metrics.enabled) {
    if (auto e = port_file_dir_error("metrics.port_file", config.metrics.port_file); !e.empty()) {
      r.errors.push_back(e);
    }
  }
  if (auto e = check_exporters(config); !e.empty()) r.errors.push_back(e);
  return r;
}

}  // namespace tpool::server
