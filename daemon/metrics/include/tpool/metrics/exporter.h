// tpool::metrics: tpoold's Prometheus endpoint (docs/metrics.md).
//
// Collector is a prometheus-cpp Collectable that reads every number at scrape
// time through a SnapshotSource (snapshot.h): plain structs of the pool's,
// the engine's, the plugin host's and the rpc layer's counters, filled by the
// server, plus /proc/self. Nothing is added to the pool's or the engine's hot
// path: a scrape costs one stats() call (relaxed loads of per-worker counters
// and histograms), the other components' counter reads and a few /proc reads.
//
// Exporter serves one Collector on `/metrics` with prometheus-cpp's pull
// Exposer (CivetWeb), optionally over TLS and behind HTTP basic auth (the
// password compared in constant time).
//
// Thread safety: Collector holds no mutable state; Collect() may run on
// several CivetWeb threads at once, so the SnapshotSource must allow that.
#pragma once

#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tpool/metrics/snapshot.h"
#include "tpool/pool.h"

namespace prometheus {
class Exposer;
}

namespace tpool::metrics {

// Where the numbers come from. An empty `snapshot` serves only
// tpoold_build_info and process_*; whatever it captures must outlive the
// Collector.
struct Sources {
  SnapshotSource snapshot;
  std::string version;  // tpoold_build_info{version}
};

class Collector final : public prometheus::Collectable {
 public:
  explicit Collector(Sources sources) : sources_(std::move(sources)) {}
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  Sources sources_;
};

// The cumulative Prometheus buckets of a job histogram: `le` bounds are the
// powers of two from 2^10 ns (1.024 us) to 2^36 ns (68.7 s), each an exact
// bucket boundary of LatencyHistogram, then +Inf. A bucket counts values
// below its bound (the pool's buckets are half-open), which differs from
// Prometheus' "<=" only for a value of exactly the bound in nanoseconds.
prometheus::ClientMetric::Histogram to_prometheus(const HistogramSnapshot& h);
std::vector<double> histogram_bounds_seconds();

// What /proc says about a process (process_* metrics).
struct ProcessStats {
  double cpu_seconds = -1;
  double resident_bytes = -1;
  double virtual_bytes = -1;
  double start_time_seconds = -1;  // since the Unix epoch
  double open_fds = -1;
  double max_fds = -1;
  double threads = -1;
};
// Reads <proc>/self/stat, <proc>/stat (boot time) and <proc>/self/fd.
// Fields it cannot read stay negative, and are then left out of a scrape.
ProcessStats read_process_stats(const std::string& proc = "/proc");

// The [metrics] keys of tpoold's config (docs/metrics.md, "Configuration").
struct ExporterOptions {
  std::string listen = "127.0.0.1:9464";  // host:port; port 0 picks a free one
  std::string basic_auth_user;            // empty: no authentication
  std::string basic_auth_password;        // or:
  std::string basic_auth_password_file;   // its first line is the password
  std::string port_file;                  // write the bound port here (whole, then renamed)
  // HTTPS (TLS 1.2 or newer) with this certificate: PEM files, the leaf
  // certificate then its chain, and its key ([tls] cert_file, key_file).
  // Read once at start: a rotated certificate is served after a restart.
  bool tls = false;
  std::string tls_cert_file;
  std::string tls_key_file;
  // Where libtpool-civetweb-lib{ssl,crypto}.so are (libssl_shim.c says why
  // CivetWeb needs them). Empty: <directory of this program>/../lib/tpool/civetweb.
  std::string civetweb_openssl_dir;
};

// The password in metrics.basic_auth_password_file: its first line, without
// the line end (LF or CRLF). An error sentence naming the file when it is not
// a readable regular file or its first line is empty. Exporter::start uses
// it, and so does `tpoold --check-config`.
Result<std::string> read_password_file(const std::string& path);

// With opts.tls: what Exporter::start checks before it binds (the OpenSSL
// shims load; the certificate and key files read), for `tpoold
// --check-config`. An error sentence naming the file; never its content.
Status check_tls(const ExporterOptions& opts);

class Exporter {
 public:
  // Binds and starts serving. The error is a sentence naming the address.
  static Result<std::unique_ptr<Exporter>> start(Sources sources, ExporterOptions opts);
  ~Exporter();
  Exporter(const Exporter&) = delete;
  Exporter& operator=(const Exporter&) = delete;

  int port() const noexcept { return port_; }  // the bound port

 private:
  Exporter() = default;
  std::shared_ptr<Collector> collector_;
  std::unique_ptr<prometheus::Exposer> exposer_;
  int port_ = 0;
};

}  // namespace tpool::metrics
