// The /metrics endpoint: prometheus-cpp's Exposer (CivetWeb) serving one
// Collector, over TLS when metrics.tls is set, behind basic auth when a user
// is configured.
#include <dlfcn.h>
#include <prometheus/exposer.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tpool/metrics/exporter.h"

namespace tpool::metrics {
namespace {

// Compares without an early exit, so the time taken does not tell an
// attacker how long a prefix of the password was right: it depends only on
// the length of `a`, the attacker's guess. prometheus-cpp's BasicAuthHandler
// only decodes the header and calls our callback (below), so this is the one
// comparison of a secret on /metrics.
bool same(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (std::size_t i = 0; i < a.size(); ++i) {
    diff |= static_cast<unsigned char>(a[i] ^ b[i % (b.empty() ? 1 : b.size())]);
  }
  return diff == 0 && !b.empty();
}

// CivetWeb gives each connection a thread of its own until the connection
// ends, so the numbers below decide how many idle or slow clients it takes to
// keep a scrape from being served (issue 13, item 8; docs/metrics.md,
// "Idle and slow connections"):
// - num_threads: 8 connections are served at once; a scrape takes well
//   under a millisecond (docs/benchmarks.md, Metrics), so 8 is for clients
//   that do not send, not for load. Picked by hand.
// - request_timeout_ms: a connection that has not sent a whole request
//   within 2 s is closed, so a thread held by an idle or dripping client is
//   back within 2 s. Far above a real request's few microseconds on loopback
//   or a LAN; far below Prometheus' default 10 s scrape timeout.
// - enable_keep_alive: no; a thread is then free as soon as its reply is
//   sent, instead of waiting for a next request that an idle Prometheus
//   connection may never send. Prometheus opens one connection per scrape
//   interval at worst; its cost is nothing next to a scrape's.
// Connections beyond the 8 wait in CivetWeb's accept queue, in order, and
// are served as the threads come back: many idle clients delay a scrape
// by about (idle clients / 8) x 2 s, they do not stop it.
// With TLS: the port gets CivetWeb's "s" suffix (TLS only on it: a plain
// HTTP request is answered by a closed connection), `pem` names one PEM
// with the key and the certificate chain (CivetWeb wants both in one file:
// ssl_certificate for the key and leaf, ssl_certificate_chain for the
// chain), and ssl_protocol_version 4 refuses anything older than TLS 1.2.
// Ciphers: OpenSSL 3's defaults.
std::vector<std::string> civetweb_options(const std::string& listen, const std::string& pem) {
  std::vector<std::string> o = {"listening_ports",    pem.empty() ? listen : listen + "s",
                                "num_threads",        "8",
                                "request_timeout_ms", "2000",
                                "enable_keep_alive",  "no"};
  if (!pem.empty()) {
    o.insert(o.end(),
             {"ssl_certificate", pem, "ssl_certificate_chain", pem, "ssl_protocol_version", "4"});
  }
  return o;
}

// Debian 12's CivetWeb reaches OpenSSL through dlopen("libssl.so") and
// dlopen("libcrypto.so"); the shims make both names resolve to OpenSSL 3
// with the one function it lacks (civetweb_openssl/libssl_shim.c). Loaded
// once per Exporter start and never unloaded (dlopen counts references).
Status load_civetweb_openssl(const std::string& configured_dir) {
  using CheckFeature = unsigned (*)(unsigned);
  auto* check = reinterpret_cast<CheckFeature>(::dlsym(RTLD_DEFAULT, "mg_check_feature"));
  constexpr unsigned kFeatureTls = 2;  // MG_FEATURES_TLS (civetweb.h)
  if (check == nullptr || check(kFeatureTls) == 0) {
    return Status::InvalidArgument(
        "metrics.tls = true, but the CivetWeb library prometheus-cpp uses was built without TLS; "
        "serve /metrics on loopback (metrics.tls = false) behind a TLS proxy instead");
  }
  std::string dir = configured_dir;
  if (dir.empty()) {
    std::error_code ec;
    const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
    dir = (exe.parent_path() / ".." / "lib" / "tpool" / "civetweb").lexically_normal().string();
  }
  // libcrypto first: the libssl shim needs it, and CivetWeb loads it first.
  for (const char* name : {"libtpool-civetweb-libcrypto.so", "libtpool-civetweb-libssl.so"}) {
    const std::string path = dir + "/" + name;
    if (::dlopen(path.c_str(), RTLD_NOW) == nullptr) {
      const char* why = ::dlerror();
      return Status::InvalidArgument(
          "metrics.tls = true needs " + path + ", which tpoold's package installs (" +
          std::string(why != nullptr ? why : "not loadable") + "); reinstall the package");
    }
  }
  return Status::Ok();
}

std::string read_whole(const std::string& path, bool* ok) {
  std::error_code ec;
  std::ifstream in;
  if (std::filesystem::is_regular_file(path, ec)) in.open(path, std::ios::binary);
  std::ostringstream text;
  if (in.is_open()) text << in.rdbuf();
  *ok = in.is_open() && !in.bad() && !text.str().empty();
  return text.str();
}

// The key and the certificate chain in one anonymous in-memory file
// (memfd), named to CivetWeb as /proc/self/fd/N: the key is never written
// to a disk or a shared directory, and the file is gone when the fd is
// closed, right after the Exposer has read it.
class PemFile {
 public:
  ~PemFile() {
    if (fd_ >= 0) ::close(fd_);
  }
  Status open(const std::string& cert_file, const std::string& key_file) {
    bool ok = false;
    std::string key = read_whole(key_file, &ok);
    if (!ok) {
      return Status::InvalidArgument("cannot read tls.key_file '" + key_file +
                                     "' for metrics.tls; it must be a PEM private key that "
                                     "tpoold's user can read");
    }
    std::string chain = read_whole(cert_file, &ok);
    if (!ok) {
      ::explicit_bzero(key.data(), key.size());
      return Status::InvalidArgument("cannot read tls.cert_file '" + cert_file +
                                     "' for metrics.tls; it must be a PEM certificate (then "
                                     "its chain) that tpoold's user can read");
    }
    std::string pem = key + "\n" + chain;
    ::explicit_bzero(key.data(), key.size());
    fd_ = ::memfd_create("tpoold-metrics-tls", MFD_CLOEXEC);
    bool written = fd_ >= 0;
    for (std::size_t off = 0; written && off < pem.size();) {
      const ssize_t n = ::write(fd_, pem.data() + off, pem.size() - off);
      written = n > 0;
      off += written ? static_cast<std::size_t>(n) : 0;
    }
    ::explicit_bzero(pem.data(), pem.size());
    if (!written) {
      return Status::InvalidArgument(std::string("cannot hand the metrics.tls certificate to "
                                                 "CivetWeb (memfd_create/write: ") +
                                     std::strerror(errno) + ")");
    }
    return Status::Ok();
  }
  std::string path() const { return "/proc/self/fd/" + std::to_string(fd_); }

 private:
  int fd_ = -1;
};

}  // namespace

Result<std::string> read_password_file(const std::string& path) {
  std::error_code ec;
  std::ifstream in;
  if (std::filesystem::is_regular_file(path, ec)) in.open(path, std::ios::binary);
  std::string password;
  if (in) std::getline(in, password);
  // A file written on Windows ends its line in CRLF: the CR is not part of
  // the password (issue 13).
  while (password.ends_with('\r')) password.pop_back();
  if (password.empty()) {
    return Status::InvalidArgument(
        "cannot read a password from metrics.basic_auth_password_file '" + path +
        "'; it must be a regular file that tpoold's user can read, and its first line must hold "
        "the password");
  }
  return password;
}

Status check_tls(const ExporterOptions& opts) {
  if (!opts.tls) return Status::Ok();
  if (Status s = load_civetweb_openssl(opts.civetweb_openssl_dir); !s.ok()) return s;
  PemFile pem;
  return pem.open(opts.tls_cert_file, opts.tls_key_file);
}

Result<std::unique_ptr<Exporter>> Exporter::start(Sources sources, ExporterOptions opts) {
  if (!opts.basic_auth_password_file.empty()) {
    auto pw = read_password_file(opts.basic_auth_password_file);
    if (!pw.ok()) return pw.status();
    opts.basic_auth_password = std::move(pw).value();
  }
  if (!opts.basic_auth_user.empty() && opts.basic_auth_password.empty()) {
    return Status::InvalidArgument("metrics.basic_auth_user '" + opts.basic_auth_user +
                                   "' has no password; set metrics.basic_auth_password_file");
  }
  PemFile pem;
  if (opts.tls) {
    if (Status s = load_civetweb_openssl(opts.civetweb_openssl_dir); !s.ok()) return s;
    if (Status s = pem.open(opts.tls_cert_file, opts.tls_key_file); !s.ok()) return s;
  }
  std::unique_ptr<Exporter> e(new Exporter());
  e->collector_ = std::make_shared<Collector>(std::move(sources));
  try {
    e->exposer_ = std::make_unique<prometheus::Exposer>(
        civetweb_options(opts.listen, opts.tls ? pem.path() : std::string()));
  } catch (const std::exception& ex) {
    if (opts.tls) {
      return Status::InvalidArgument(
          "cannot serve metrics over TLS on '" + opts.listen + "' (" + ex.what() +
          "); check that tls.cert_file holds a PEM certificate (then its chain) and "
          "tls.key_file its PEM key, and that metrics.listen is a free host:port");
    }
    return Status::InvalidArgument("cannot serve metrics on '" + opts.listen + "' (" + ex.what() +
                                   "); pick a free host:port for metrics.listen");
  }
  if (!opts.basic_auth_user.empty()) {
    e->exposer_->RegisterAuth(
        [user = opts.basic_auth_user, password = opts.basic_auth_password](const std::string& u,
                                                                           const std::string& p) {
          const bool user_ok = same(u, user);  // both compared, whichever is wrong
          const bool password_ok = same(p, password);
          return user_ok && password_ok;
        },
        "tpoold metrics");
  }
  e->exposer_->RegisterCollectable(e->collector_);
  const auto ports = e->exposer_->GetListeningPorts();
  e->port_ = ports.empty() ? 0 : ports.front();
  if (!opts.port_file.empty()) {
    // Written whole, then renamed: a reader never sees half a number.
    const std::string tmp = opts.port_file + ".tmp";
    std::ofstream out(tmp);
    out << e->port_ << "\n";
    out.close();
    std::error_code ec;
    if (!out || (std::filesystem::rename(tmp, opts.port_file, ec), ec)) {
      return Status::InvalidArgument("cannot write the metrics port to metrics.port_file '" +
                                     opts.port_file +
                                     "'; check the directory exists and is "
                                     "writable");
    }
  }
  return e;
}

Exporter::~Exporter() = default;  // the Exposer stops serving and joins its thread

}  // namespace tpool::metrics
