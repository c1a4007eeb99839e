#include "listeners.h"
//
#include <grpcpp/security/tls_certificate_provider.h>
#include <grpcpp/security/tls_credentials_options.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace tpool::server {

std::shared_ptr<grpc::ServerCredentials> server_credentials(const DaemonConfig& c) {
  if (!c.tls.enabled()) return grpc::InsecureServerCredentials();
  // gRPC's watcher counts whole seconds.
  const auto refresh_s = static_cast<unsigned>((c.tls.refresh_interval_ms + 999) / 1000);
  std::shared_ptr<grpc::experimental::CertificateProviderInterface> provider;
  if (c.tls.client_ca_file.empty()) {
    provider = std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
        c.tls.key_file, c.tls.cert_file, refresh_s);
  } else {
    provider = std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
        c.tls.key_file, c.tls.cert_file, c.tls.client_ca_file, refresh_s);
  }
  grpc::experimental::TlsServerCredentialsOptions options(provider);
  options.watch_identity_key_cert_pairs();
  if (!c.tls.client_ca_file.empty()) options.watch_root_certs();
  options.set_cert_request_type(
      c.tls.client_auth == "require"   ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
      : c.tls.client_auth == "request" ? GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY
                                       : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  return grpc::experimental::TlsServerCredentials(options);
}

security::PrincipalFrom principal_from(const DaemonConfig& c) {
  if (c.tls.principal_from == "san") return security::PrincipalFrom::kSan;
  if (c.tls.principal_from == "cn") return security::PrincipalFrom::kCn;
  return security::PrincipalFrom::kSanThenCn;
}

std::string prepare_admin_socket(const std::string& path) {
  const std::string dir = std::filesystem::path(path).parent_path().string();
  const std::string where = "the admin socket " + path + " (server.admin_listen)";
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) {
    if (errno != ENOENT) {
      return "cannot use the directory of " + where + ": " + std::strerror(errno);
    }
    if (::mkdir(dir.c_str(), 0700) != 0) {
      return "cannot create the directory " + dir + " for " + where + ": " + std::strerror(errno) +
             "; create it (mode 0700, owned by tpoold's user)";
    }
    if (::lstat(dir.c_str(), &st) != 0) return "cannot stat " + dir + ": " + std::strerror(errno);
  }
  if (!S_ISDIR(st.st_mode)) {
    return "the directory " + dir + " of " + where +
           " is not a directory (or is a symbolic link); remove it or pick another path";
  }
  if (st.st_uid != ::getuid() && st.st_uid != 0) {
    return "the directory " + dir + " of " + where + " belongs to uid " +
           std::to_string(st.st_uid) +
           ", not to tpoold's user or root: its owner could replace the socket; remove it or "
           "pick another path";
  }
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0 && (st.st_mode & S_ISVTX) == 0) {
    return "the directory " + dir + " of " + where +
           " is writable by other users, who could replace the socket; chmod go-w it or pick "
           "another path";
  }
  if (::lstat(path.c_str(), &st) != 0) return "";  // nothing there yet
  if (!S_ISSOCK(st.st_mode)) {
    return where + " exists and is not a socket; remove it or pick another path";
  }
  // A socket file: a running tpoold's, or a stale one left by a crash. gRPC
  // would unlink either before binding; refuse to take over a live one.
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof addr.sun_path) return where + ": the path is too long";
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return "cannot make a socket: " + std::string(std::strerror(errno));
  const bool live = ::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0;
  ::close(fd);
  if (live) {
    return where +
           " is in use: another tpoold serves it; stop that one, or give this one "
           "another server.admin_listen (--admin-listen)";
  }
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    return "cannot remove the stale " + where + ": " + std::strerror(errno);
  }
  return "";
}

SocketUmask::SocketUmask() : previous_(::umask(0177)) {}
SocketUmask::~SocketUmask() {
  ::umask(static_cast<mode_t>(previous_));
}

std::string check_admin_socket_mode(const std::string& path) {
  // Already 0600 (SocketUmask); chmod makes sure whatever gRPC did.
  struct stat st {};
  if (::chmod(path.c_str(), 0600) != 0 || ::lstat(path.c_str(), &st) != 0) {
    return "cannot set the mode of the admin socket " + path + ": " + std::strerror(errno);
  }
  if ((st.st_mode & 0777) != 0600 || !S_ISSOCK(st.st_mode)) {
    return "the admin socket " + path + " is not a socket of mode 0600 after binding";
  }
  return "";
}

}  // namespace tpool::server
