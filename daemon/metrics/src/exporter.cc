// The /metrics endpoint: prometheus-cpp's Exposer (CivetWeb) serving one
// Collector, behind basic auth when a user is configured.
#include <prometheus/exposer.h>

#include <exception>
#include <filesystem>
#include <fstream>

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

}  // namespace

Result<std::unique_ptr<Exporter>> Exporter::start(Sources sources, ExporterOptions opts) {
  if (!opts.basic_auth_password_file.empty()) {
    std::ifstream in(opts.basic_auth_password_file);
    if (!in || !std::getline(in, opts.basic_auth_password) || opts.basic_auth_password.empty()) {
      return Status::InvalidArgument(
          "cannot read a password from metrics.basic_auth_password_file '" +
          opts.basic_auth_password_file +
          "'; its first line must hold the password and tpoold must be able to read it");
    }
  }
  if (!opts.basic_auth_user.empty() && opts.basic_auth_password.empty()) {
    return Status::InvalidArgument("metrics.basic_auth_user '" + opts.basic_auth_user +
                                   "' has no password; set metrics.basic_auth_password_file");
  }
  std::unique_ptr<Exporter> e(new Exporter());
  e->collector_ = std::make_shared<Collector>(std::move(sources));
  try {
    // Two serving threads: an HA pair of Prometheus servers (or one plus a
    // curl) scrapes at once; a scrape is short (docs/benchmarks.md, Metrics).
    e->exposer_ = std::make_unique<prometheus::Exposer>(opts.listen, 2);
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
