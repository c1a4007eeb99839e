// Where the admin listener's Unix socket is when server.admin_listen is ""
// (docs/configuration.md, "server.admin_listen"): tpoold binds the first
// candidate, and tpoolctl's admin commands look for it the same way, so both
// resolve the same path in the same environment.
#pragma once

#include <string>
#include <vector>

namespace tpool {

// The default admin address, "unix:<path>":
//   $RUNTIME_DIRECTORY/admin.sock   when systemd sets it (RuntimeDirectory=tpoold),
//   else $XDG_RUNTIME_DIR/tpoold/admin.sock,
//   else /tmp/tpoold-<uid>/admin.sock.
// Empty or relative environment values are skipped. (systemd's
// RUNTIME_DIRECTORY may list several directories separated by ':'; the first
// is used.)
std::string default_admin_address();

// For tpoolctl: the default address first, then the other places a tpoold of
// this machine may use (the ones of the list above that the environment
// gives, and /run/tpoold/admin.sock, systemd's RuntimeDirectory=tpoold seen
// from a shell that has no RUNTIME_DIRECTORY). Every entry is "unix:<path>".
std::vector<std::string> admin_address_candidates();

}  // namespace tpool
