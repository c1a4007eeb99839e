// tpoold's configuration: the TOML file (docs/configuration.md), then the
// command-line flags over it, then validate().
//
// Every field has its default here and nowhere else; docs/configuration.md
// lists the same defaults (a unit test parses the sample config to keep both
// honest).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "tpool/engine/engine.h"
#include "tpool/plugin_host/host.h"
#include "tpool/pool.h"
#include "tpool/rpc/limits.h"

namespace tpool::server {

struct ServerSection {
  std::string listen = "127.0.0.1:50051";  // the job port: JobService, health, reflection
  // AdminService's listener: "" = the default Unix socket
  // (tpool/common/admin_address.h), "none" = no admin listener,
  // "unix:/ABSOLUTE/PATH", or HOST:PORT (only with [tls] and [auth]).
  std::string admin_listen;
  // true: listeners on non-loopback addresses without TLS and a token file
  // are allowed, and warned about at every start (insecure_listeners()).
  bool allow_insecure = false;
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
  bool searching_gate = false;  // tpool::Config::searching_gate
  std::uint64_t watchdog_interval_ms = 100;
  std::uint64_t blocking_promotion_timeout_ms = 100;
  std::uint64_t max_overflow_workers = 4;
};

// [plugins.isolation] (the defaults) and [plugins.isolation.NAME] (one
// plugin; unset keys take the defaults): docs/configuration.md.
struct IsolationSection {
  std::string mode = "in_process";  // "in_process" | "process"
  std::uint64_t runners = 2;
  std::uint64_t address_space_mb = 1024;  // 0: no limit
  std::uint64_t cpu_seconds_per_job = 0;  // 0: no limit
  std::uint64_t open_files = 64;
  std::uint64_t crash_limit = 5;  // 0: never unhealthy
  std::uint64_t crash_window_ms = 60000;
  std::vector<std::string> allow_syscalls;
};

struct PluginsSection {
  std::vector<std::string> dirs;
  IsolationSection isolation;
  std::map<std::string, IsolationSection> isolation_plugins;  // by plugin name
  // The tpool-runner executable; empty: next to tpoold.
  std::string runner;
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

// Retries for requests that leave max_attempts / backoff_*_ms at 0
// (docs/configuration.md, [retry]); [retry.handlers.NAME] overrides them for
// one handler.
struct RetryPolicySection {
  std::uint64_t max_attempts = 1;
  std::uint64_t backoff_base_ms = 1000;
  std::uint64_t backoff_cap_ms = 60000;
};
struct RetrySection {
  RetryPolicySection defaults;
  std::map<std::string, RetryPolicySection> handlers;
  std::uint64_t max_scheduled_jobs = 100000;  // delayed jobs waiting at once
};

// The job store (docs/store.md, docs/configuration.md [store]): durable
// jobs in an SQLite journal. path empty: no store, jobs live in memory only
// and a durable request is refused.
struct StoreSection {
  std::string path;
  bool durable = false;                  // the default for requests that do not ask
  std::map<std::string, bool> handlers;  // [store.handlers.NAME] durable
  std::uint64_t max_batch = 1024;        // records per transaction (group commit)

  bool enabled() const { return !path.empty(); }
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

struct TlsSection {
  // Both or neither: set, the job port (and a TCP admin listener) serve TLS
  // 1.2 or newer with this certificate chain and key, re-read from the files
  // every refresh_interval_ms (rotation without a restart).
  std::string cert_file;
  std::string key_file;
  // The CA bundle client certificates are verified against (client_auth
  // request or require).
  std::string client_ca_file;
  std::string client_auth = "none";            // none | request | require
  std::string principal_from = "san_then_cn";  // san_then_cn | san | cn
  std::uint64_t refresh_interval_ms = 60000;   // gRPC's file watcher: whole seconds, rounded up

  bool enabled() const { return !cert_file.empty(); }
};

struct AuthSection {
  // Set: auth is on. Every call needs a principal (a bearer token, or a
  // verified client certificate whose principal has a line here); SIGHUP
  // re-reads the file (docs/security.md, "The token file").
  std::string token_file;

  bool enabled() const { return !token_file.empty(); }
};

// The admin listener, resolved from server.admin_listen.
struct AdminListen {
  enum class Kind : std::uint8_t { kNone, kUnix, kTcp };
  Kind kind = Kind::kNone;
  std::string address;  // for gRPC: "unix:/path" or HOST:PORT
  std::string path;     // kUnix: the socket's path
};

struct DaemonConfig {
  ServerSection server;
  TlsSection tls;
  AuthSection auth;
  PoolSection pool;
  PluginsSection plugins;
  ResultsSection results;
  RetrySection retry;
  StoreSection store;
  LogSection log;
  MetricsSection metrics;

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
  // server.admin_listen resolved ("" -> the default Unix socket).
  AdminListen admin_listen() const;
  // One sentence per listener that would be reachable from other hosts
  // without TLS, or (job and admin ports) without a token file: refused by
  // validate() unless server.allow_insecure, then logged at every start.
  std::vector<std::string> insecure_listeners() const;
};

// Whether HOST of "HOST:PORT" is a loopback address (127.0.0.0/8, [::1],
// localhost). 0.0.0.0, [::] and every other name are not.
bool is_loopback_address(const std::string& host_port);

// The start-time checks of the files the config names: the TLS certificate,
// key and client CA are readable PEM, the key belongs to the certificate, and
// the token file parses. Each error names the key, the file and what to do.
// (Kept out of validate(), which looks at values only.)
Status check_security_files(const DaemonConfig& config);

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
  std::string admin_listen;              // --admin-listen ADDR
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
