// A temporary directory for a fuzz target, removed when the process exits, so
// a fuzz run or a seed replay (make fuzz-ci, make test) leaves nothing behind
// in /tmp. One per process: the targets make theirs once, in a static.
#pragma once

#include <stdlib.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>

namespace tpool::fuzz {

// mkdtemp(3) of "/tmp/<prefix>.XXXXXX"; "" if it failed (the caller says so).
inline std::string temp_dir_removed_at_exit(const std::string& prefix) {
  static std::string made;  // constructed before the handler is registered: outlives it
  std::string tmpl = "/tmp/" + prefix + ".XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr) return {};
  made = tmpl;
  std::atexit([] {
    std::error_code ec;
    std::filesystem::remove_all(made, ec);
  });
  return tmpl;
}

}  // namespace tpool::fuzz
