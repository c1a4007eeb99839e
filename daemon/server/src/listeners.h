// The listeners' security (issue 16): the job port's and a TCP admin
// listener's credentials from [tls], and the admin Unix socket's directory
// and mode. Daemon::start() wires them (daemon.cc).
#pragma once

#include <memory>
#include <string>

#include "config.h"
#include "tpool/rpc/access.h"
//
#include <grpcpp/security/server_credentials.h>

namespace tpool::server {

// Plaintext without [tls]; with it, gRPC's TLS server credentials (TLS 1.2 or
// newer: gRPC's minimum) over a FileWatcherCertificateProvider that re-reads
// cert_file, key_file and client_ca_file every tls.refresh_interval_ms, so a
// rotated certificate serves new connections without a restart while open
// connections (and their streams) keep the one they were made with.
// client_auth: none = no client certificate asked; request = asked, verified
// when sent; require = a verified one or no handshake.
std::shared_ptr<grpc::ServerCredentials> server_credentials(const DaemonConfig& config);

// tls.principal_from as security's enum.
security::PrincipalFrom principal_from(const DaemonConfig& config);

// Before binding the admin socket at `path`: its directory exists (created
// 0700 when it does not, its parent must), belongs to this user or root and
// is not writable by others (else anyone could replace the socket); a stale
// socket left by a tpoold that died is removed, a live one (another tpoold
// answers) or a file that is not a socket is an error. "" or the sentence.
std::string prepare_admin_socket(const std::string& path);

// Sets the process umask so that the socket gRPC creates while the admin
// server is built is 0600 from the start (no window in which it is wider);
// the destructor restores the previous umask.
class SocketUmask {
 public:
  SocketUmask();
  ~SocketUmask();
  SocketUmask(const SocketUmask&) = delete;
  SocketUmask& operator=(const SocketUmask&) = delete;

 private:
  unsigned previous_;
};

// After binding: the socket is mode 0600 (chmod, then checked); "" or the
// sentence.
std::string check_admin_socket_mode(const std::string& path);

}  // namespace tpool::server
