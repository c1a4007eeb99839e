// Finding and opening plugin files: the checks before dlopen (permissions,
// ELF), the staging copy, dlopen, the entry symbol and the descriptor's
// validation. Registry-level checks (duplicate names) and init are the host's.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "internal.h"

namespace tpool::plugin_host::detail {

// Appends the "*.so" files of dir, sorted, to files; a directory that is
// missing, unreadable or world-writable adds a LoadError instead.
void scan_dir(const std::string& dir, std::vector<std::string>& files,
              std::vector<LoadError>& errors);

struct Opened {
  std::shared_ptr<Library> library;     // set on success (not yet initialised)
  std::vector<tpool_handler> handlers;  // copied, zero-extended to this host's layout
  std::optional<LoadError> error;       // set on failure
};

// Opens one plugin file (see the file comment); never throws for a bad file.
Opened open_plugin(const std::string& file, const std::string& staging_dir,
                   const std::shared_ptr<Shared>& shared);

// "echo" or "sha-256.v2": 1..64 of [A-Za-z0-9_.-].
bool valid_name(const char* name);

}  // namespace tpool::plugin_host::detail
