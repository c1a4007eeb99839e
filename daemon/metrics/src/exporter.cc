// The /metrics endpoint: prometheus-cpp's Exposer (CivetWeb) serving one
// Collector, behind basic auth when a user is configured.
#include <prometheus/exposer.h>

#include <exception>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tpool/metrics/exporter.h"

namespace tpool::metrics {
namespace {

// Compares without an early exit, so the time taken does not tell an
// attacker how long a prefix of the password was right.
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
std::vector<std::string> civetweb_options(const std::string& listen) {
  return {"listening_ports",    listen, "num_threads",       "8",
          "request_timeout_ms", "2000", "enable_keep_alive", "no"};
}

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
  std::unique_ptr<Exporter> e(new Exporter());
  e->collector_ = std::make_shared<Collector>(std::move(sources));
  try {
    e->exposer_ = std::make_unique<prometheus::Exposer>(civetweb_options(opts.listen));
  } catch (const std::exception& ex) {
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
