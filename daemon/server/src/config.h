// tpoold's configuration: the TOML file (docs/configuration.md), then the
// command-line flags over it, then validate().
//
// Every field has its default here and nowhere else; docs/configuration.md
// lists the same defaults (a unit test parses the sample config to keep both
// honest).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tpool/engine/engine.h"
#include "tpool/plugin_host/host.h"
#include "tpool/pool.h"
#include "tpool/rpc/limits.h"

namespace tpool::server {

struct ServerSection {
  std::string listen = "127.0.0.1:50051";
  // Write the bound port (decimal, then a newline) here once serving: for
  // `listen = "127.0.0.1:0"` (tests, scripts). Empty: do not write.
  std::string port_file;
  bool reflection = true;
  std::uint64_t max_message_bytes = 4u << 20;  // gRPC receive/send limit
  std::uint64_t max_payload_bytes = 1u << 20;  // one job's payload
  std::uint64_t max_inflight_jobs = 65536;     // accepted and not yet final, daemon-wide
  std::uint64_t max_streams = 1024;            // concurrent Stream calls
  std::uint64_t stream_window = 4096;          // in-flight jobs per Stream call
  // One job's output. 4 MiB - 16 KiB: a result must fit in one reply of
  // max_message_bytes with kOutputHeadroomBytes for the envelope.
  std::uint64_t max_output_bytes = (4u << 20) - (16u << 10);
  std::uint64_t drain_timeout_ms = 30000;
  std::uint64_t cancel_grace_ms = 5000;  // after a drain times out: for running handlers to stop
  // This process's name among replicas, set on every job ref it returns and
  // checked on Wait/Get/Cancel. Empty: the host name (replica_id() below).
  std::string replica_id;
  // Bytes of finished-but-unsent results one Stream call may hold before it
  // stops taking jobs and reading its client (a client that does not read).
  std::uint64_t stream_buffer_bytes = 16u << 20;
  // true: listeners on non-loopback addresses without TLS (and auth) start,
  // with a warning at every start. (The field only: its parsing and the
  // job/admin half of the rule are h16-listen's; metrics validation reads it.)
  bool allow_insecure = false;
};

// [tls] (docs/configuration.md): the certificate gRPC and /metrics serve.
// Minimal here for metrics.tls: the lead merges it with h16-listen's [tls].
struct TlsSection {
  std::string cert_file;  // PEM: the leaf certificate, then its chain
  std::string key_file;   // PEM private key of cert_file
  std::string client_ca_file;
  std::string client_auth = "none";            // none | request | require
  std::string principal_from = "san_then_cn";  // san_then_cn | san | cn
};

// Room a reply keeps beyond a job's output (the gRPC frame and the result's
// other fields): max_output_bytes may be at most max_message_bytes minus this.
inline constexpr std::uint64_t kOutputHeadroomBytes = rpc::kReplyHeadroomBytes;

struct PoolSection {
  std::uint64_t min_threads = 0;  // 0: one per core
  std::uint64_t max_threads = 0;  // 0: one per core
  std::uint64_t blocking_workers = 2;
  std::uint64_t queue_capacity = 65536;
  std::uint64_t local_queue_capacity = 256;
  std::string scheduler = "lane_extension";
  std::string queue = "ring";
  std::uint64_t wake_coalesce_batch = 1;
  std::uint64_t watchdog_interval_ms = 100;
  std::uint64_t blocking_promotion_timeout_ms = 100;
  std::uint64_t max_overflow_workers = 4;
};

struct PluginsSection {
  std::vector<std::string> dirs;
  // A plugin file that fails to load stops tpoold from starting (and a reload
  // from taking effect). false: log the failure and serve the plugins that did
  // load.
  bool abort_on_load_error = true;
  // Per-plugin config strings, by plugin name ([plugins.config] name = "...").
  std::vector<std::pair<std::string, std::string>> config;
};

struct ResultsSection {
  std::uint64_t retention_ms = 300000;
  std::uint64_t max_bytes = 64u << 20;
  std::uint64_t max_entries = 100000;
};

struct LogSection {
  std::string level = "info";   // trace, debug, info, warn, error, critical, off
  std::string format = "text";  // text or json
};

struct MetricsSection {
  bool enabled = true;
  std::string listen = "127.0.0.1:9464";
  // Write the bound metrics port here once serving (for port 0). Empty: do not.
  std::string port_file;
  // HTTP basic auth on /metrics when basic_auth_user is set; the password is
  // given inline or (better) as the first line of basic_auth_password_file.
  std::string basic_auth_user;
  std::string basic_auth_password;
  std::string basic_auth_password_file;
  // Serve /metrics over HTTPS (TLS 1.2+) with [tls] cert_file and key_file.
  // A non-loopback listen needs it, unless server.allow_insecure.
  bool tls = false;
};

struct DaemonConfig {
  ServerSection server;
  PoolSection pool;
  PluginsSection plugins;
  ResultsSection results;
  LogSection log;
  MetricsSection metrics;
  TlsSection tls;

  // Checks every value; the error names the key, its value and the range.
  Status validate() const;
  // metrics.tls's certificate, and no plain HTTP /metrics off loopback
  // unless server.allow_insecure (part of validate()).
  Status metrics_transport() const;
  // metrics.tls, or metrics.listen on a loopback address.
  bool metrics_transport_is_private() const;
  // Each component's config, translated from this one in one function per
  // component (validate() first). Wiring that is not configuration (log
  // sinks, thread hooks) is the caller's.
  tpool::Config pool_config() const;
  engine::EngineLimits engine_limits() const;
  plugin_host::HostConfig host_config() const;
  rpc::RpcLimits rpc_limits() const;
  // server.replica_id, or the host name (gethostname) when it is empty.
  std::string replica_id() const;
};

// Parses TOML text; `origin` (a file name) prefixes errors. Unknown keys and
// values of the wrong type are errors naming the key.
Result<DaemonConfig> parse_config(std::string_view toml_text, std::string_view origin);
Result<DaemonConfig> load_config_file(const std::string& path);

// The command line. Flags override the file.
struct Options {
  std::string config_path;               // --config FILE
  bool check_only = false;               // --check-config FILE
  bool show_version = false;             // --version
  bool show_help = false;                // --help
  std::string listen;                    // --listen ADDR
  std::string port_file;                 // --port-file FILE
  std::vector<std::string> plugin_dirs;  // --plugin-dir DIR (repeatable)
  std::string log_level;                 // --log-level
  std::string log_format;                // --log-format
  std::string metrics_listen;            // --metrics-listen ADDR
  std::string replica_id;                // --replica-id ID
};

Result<Options> parse_args(int argc, const char* const* argv);
std::string usage();

// File (if any), then flags, then validate.
Result<DaemonConfig> resolve_config(const Options& opts);

}  // namespace tpool::server
