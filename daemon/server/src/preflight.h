// What `tpoold --check-config` checks beyond the config's own values: every
// check a start makes that needs neither the network nor plugin code, so the
// unit's ExecStartPre fails where the start would (issue 13;
// docs/configuration.md, "Checking a config").
#pragma once

#include <string>
#include <vector>

#include "config.h"

namespace tpool::server {

struct PreflightReport {
  std::vector<std::string> errors;    // the start would fail: one sentence each
  std::vector<std::string> warnings;  // the start would go on, and log these
};

// The plugin directories (as the plugin host checks them before loading:
// exists, a directory, not world-writable, listable), the directories of the
// port files, and the exporters' own files (check_exporters). Reads only.
PreflightReport preflight(const DaemonConfig& config);

// The exporters' part, where they are built (exporters.cc): the metrics
// password file is a readable regular file with a password on its first line.
// An error sentence, or "".
std::string check_exporters(const DaemonConfig& config);

}  // namespace tpool::server
