#include "config.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <sys/stat.h>
#include <toml++/toml.h>
#include <unistd.h>

#include <array>
#include <climits>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <sstream>

#include "tpool/common/admin_address.h"
#include "tpool/isolation/supervisor.h"
#include "tpool/security/token_store.h"

namespace tpool::server {
namespace {

std::string quote(std::string_view s) {
  return "'" + std::string(s) + "'";
}

// One section's keys: each entry reads a node into the config and returns an
// error sentence or "".
using Reader = std::function<std::string(const toml::node&, const std::string& key)>;

Reader u64(std::uint64_t& out) {
  return [&out](const toml::node& n, const std::string& key) -> std::string {
    // is_integer() first: toml++ converts a float node to int64_t by a plain
    // cast before checking the round trip, which is undefined behaviour for
    // 1e300 (found by fuzz_config; tests/fuzz/corpus/config/float-*.toml).
    if (!n.is_integer()) return key + " must be an integer";
    auto v = n.value<std::int64_t>();
    if (!v) return key + " must be an integer";
    if (*v < 0) return key + " = " + std::to_string(*v) + " is negative; it must be 0 or more";
    out = static_cast<std::uint64_t>(*v);
    return "";
  };
}

Reader opt_u64(std::optional<std::uint64_t>& out) {
  return [&out](const toml::node& n, const std::string& key) -> std::string {
    std::uint64_t v = 0;
    if (std::string err = u64(v)(n, key); !err.empty()) return err;
    out = v;
    return "";
  };
}

Reader str(std::string& out) {
  return [&out](const toml::node& n, const std::string& key) -> std::string {
    if (!n.is_string()) return key + " must be a string";
    out = *n.value<std::string>();
    return "";
  };
}

Reader boolean(bool& out) {
  return [&out](const toml::node& n, const std::string& key) -> std::string {
    if (!n.is_boolean()) return key + " must be true or false";
    out = *n.value<bool>();
    return "";
  };
}

Reader str_list(std::vector<std::string>& out) {
  return [&out](const toml::node& n, const std::string& key) -> std::string {
    const auto* arr = n.as_array();
    if (arr == nullptr) return key + " must be an array of strings";
    out.clear();
    for (const auto& e : *arr) {
      if (!e.is_string()) return key + " must be an array of strings";
      out.push_back(*e.value<std::string>());
    }
    return "";
  };
}

std::string read_section(const toml::table& root, const std::string& name,
                         const std::map<std::string, Reader>& keys) {
  const toml::node* node = root.get(name);
  if (node == nullptr) return "";
  const auto* table = node->as_table();
  if (table == nullptr) return "[" + name + "] must be a table";
  for (const auto& [k, v] : *table) {
    std::string key = name + "." + std::string(k.str());
    auto it = keys.find(std::string(k.str()));
    if (it == keys.end()) {
      std::string known;
      for (const auto& [kk, _] : keys) known += (known.empty() ? "" : ", ") + kk;
      return "unknown key " + key + "; the keys of [" + name + "] are: " + known;
    }
    if (std::string err = it->second(v, key); !err.empty()) return err;
  }
  return "";
}

Status range(std::string_view key, std::uint64_t v, std::uint64_t lo, std::uint64_t hi);

// [plugins.isolation]: its own keys are the defaults; a sub-table is one
// plugin's override, read after the defaults whatever their order in the file.
std::string read_isolation(const toml::node& n, const std::string& key, PluginsSection& p) {
  const auto* t = n.as_table();
  if (t == nullptr) {
    return key + " must be a table (mode, runners, address_space_mb, ...; docs/configuration.md)";
  }
  auto readers = [](IsolationSection& s) {
    return std::map<std::string, Reader>{{"mode", str(s.mode)},
                                         {"runners", u64(s.runners)},
                                         {"address_space_mb", u64(s.address_space_mb)},
                                         {"cpu_seconds_per_job", u64(s.cpu_seconds_per_job)},
                                         {"open_files", u64(s.open_files)},
                                         {"crash_limit", u64(s.crash_limit)},
                                         {"crash_window_ms", u64(s.crash_window_ms)},
                                         {"allow_syscalls", str_list(s.allow_syscalls)}};
  };
  auto read_keys = [&](const toml::table& table, IsolationSection& s, const std::string& where,
                       bool top) -> std::string {
    const auto keys = readers(s);
    for (const auto& [k, v] : table) {
      const std::string name(k.str());
      if (top && v.is_table()) continue;  // a plugin's table, read below
      if (top && name == "runner") {
        if (std::string err = str(p.runner)(v, where + ".runner"); !err.empty()) return err;
        continue;
      }
      auto it = keys.find(name);
      if (it == keys.end()) {
        return "unknown key " + where + "." + name +
               "; the keys of [plugins.isolation] and of each [plugins.isolation.NAME] are: "
               "address_space_mb, allow_syscalls, cpu_seconds_per_job, crash_limit, "
               "crash_window_ms, mode, open_files, runners (and runner, the defaults' only)";
      }
      if (std::string err = it->second(v, where + "." + name); !err.empty()) return err;
    }
    return "";
  };
  if (std::string err = read_keys(*t, p.isolation, key, true); !err.empty()) return err;
  for (const auto& [k, v] : *t) {
    if (!v.is_table()) continue;
    IsolationSection s = p.isolation;
    if (std::string err = read_keys(*v.as_table(), s, key + "." + std::string(k.str()), false);
        !err.empty()) {
      return err;
    }
    p.isolation_plugins[std::string(k.str())] = std::move(s);
  }
  return "";
}

Status check_isolation(const IsolationSection& s, const std::string& where) {
  constexpr std::uint64_t kDay = 86400000;
  if (s.mode != "in_process" && s.mode != "process") {
    return Status::InvalidArgument(where + ".mode = " + quote(s.mode) +
                                   " is not a mode; use \"in_process\" (handlers run inside "
                                   "tpoold, the default) or \"process\" (in tpool-runner "
                                   "processes)");
  }
  if (s.address_space_mb != 0 && s.address_space_mb < 64) {
    return Status::InvalidArgument(
        where + ".address_space_mb = " + std::to_string(s.address_space_mb) +
        " is too small for a runner to load its C++ runtime and the plugin; use 0 (no limit) "
        "or 64 and more");
  }
  for (Status st : {range(where + ".runners", s.runners, 1, 256),
                    range(where + ".address_space_mb", s.address_space_mb, 0, 1u << 24),
                    range(where + ".cpu_seconds_per_job", s.cpu_seconds_per_job, 0, 86400),
                    range(where + ".open_files", s.open_files, 16, 1u << 20),
                    range(where + ".crash_limit", s.crash_limit, 0, 100000),
                    range(where + ".crash_window_ms", s.crash_window_ms, 1000, kDay)}) {
    if (!st.ok()) return st;
  }
  if (auto unknown = isolation::unknown_syscalls(s.allow_syscalls); !unknown.empty()) {
    return Status::InvalidArgument(where + ".allow_syscalls names " + quote(unknown.front()) +
                                   ", which is not a system call on this machine; use the "
                                   "kernel's names (e.g. \"socket\", \"connect\")");
  }
  return Status::Ok();
}

plugin_host::IsolationSettings to_settings(const IsolationSection& s) {
  plugin_host::IsolationSettings o;
  o.mode = s.mode == "process" ? plugin_host::IsolationMode::kProcess
                               : plugin_host::IsolationMode::kInProcess;
  o.runners = static_cast<std::uint32_t>(s.runners);
  o.address_space_mb = s.address_space_mb;
  o.cpu_seconds_per_job = s.cpu_seconds_per_job;
  o.open_files = s.open_files;
  o.allow_syscalls = s.allow_syscalls;
  o.crash_limit = static_cast<std::uint32_t>(s.crash_limit);
  o.crash_window = std::chrono::milliseconds(s.crash_window_ms);
  return o;
}

Status range(std::string_view key, std::uint64_t v, std::uint64_t lo, std::uint64_t hi) {
  if (v >= lo && v <= hi) return Status::Ok();
  return Status::InvalidArgument(std::string(key) + " = " + std::to_string(v) +
                                 " is out of range; it must be in " + std::to_string(lo) + ".." +
                                 std::to_string(hi));
}

Status one_of(std::string_view key, const std::string& v, std::initializer_list<const char*> ok) {
  std::string list;
  for (const char* o : ok) {
    if (v == o) return Status::Ok();
    list += (list.empty() ? "" : ", ") + std::string(o);
  }
  return Status::InvalidArgument(std::string(key) + " = " + quote(v) +
                                 " is not valid; use one of " + list);
}

Status host_port(std::string_view key, const std::string& v) {
  auto colon = v.rfind(':');
  bool ok = colon != std::string::npos && colon > 0 && colon + 1 < v.size();
  if (ok) {
    for (std::size_t i = colon + 1; i < v.size(); ++i) ok = ok && v[i] >= '0' && v[i] <= '9';
    ok = ok && v.size() - colon - 1 <= 5 && std::stoul(v.substr(colon + 1)) <= 65535;
  }
  if (ok) return Status::Ok();
  return Status::InvalidArgument(std::string(key) + " = " + quote(v) +
                                 " is not an address; use HOST:PORT, e.g. 127.0.0.1:50051 "
                                 "(port 0 picks a free port)");
}

constexpr std::uint64_t kDay = 24ull * 3600 * 1000;

// A replica id travels in job refs and error messages: a host-name-like word.
Status replica_word(std::string_view key, const std::string& v) {
  bool ok = v.size() <= 253;
  for (char ch : v) {
    ok = ok && ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
                ch == '-' || ch == '_' || ch == '.' || ch == ':');
  }
  if (ok) return Status::Ok();
  return Status::InvalidArgument(std::string(key) + " = " + quote(v) +
                                 " is not valid; use at most 253 letters, digits and - _ . : "
                                 "(empty: the host name)");
}

constexpr const char* kUnixPrefix = "unix:";
// sockaddr_un's sun_path holds 108 bytes with the terminating NUL.
constexpr std::size_t kMaxSocketPath = 107;

Status validate_security(const DaemonConfig& c) {
  const TlsSection& t = c.tls;
  for (Status s : {
           one_of("tls.client_auth", t.client_auth, {"none", "request", "require"}),
           one_of("tls.principal_from", t.principal_from, {"san_then_cn", "san", "cn"}),
           range("tls.refresh_interval_ms", t.refresh_interval_ms, 1000, kDay),
       }) {
    if (!s.ok()) return s;
  }
  if (t.cert_file.empty() != t.key_file.empty()) {
    return Status::InvalidArgument(
        std::string(t.cert_file.empty() ? "tls.key_file" : "tls.cert_file") + " is set but " +
        (t.cert_file.empty() ? "tls.cert_file" : "tls.key_file") +
        " is not; TLS needs both the certificate chain and its private key (or neither: no TLS)");
  }
  if (!t.enabled() && !t.client_ca_file.empty()) {
    return Status::InvalidArgument(
        "tls.client_ca_file is set but tls.cert_file is not; client certificates are only "
        "verified on a TLS listener: set tls.cert_file and tls.key_file, or remove "
        "tls.client_ca_file");
  }
  if (t.client_auth != "none" && t.client_ca_file.empty()) {
    return Status::InvalidArgument("tls.client_auth = " + quote(t.client_auth) +
                                   " needs tls.client_ca_file, the CA bundle client "
                                   "certificates are verified against; set it, or use "
                                   "client_auth = 'none'");
  }
  if (!t.client_ca_file.empty() && t.client_auth == "none") {
    return Status::InvalidArgument(
        "tls.client_ca_file is set but tls.client_auth = 'none' never asks for a client "
        "certificate; use client_auth = 'request' or 'require', or remove client_ca_file");
  }
  const std::string& a = c.server.admin_listen;
  if (a.empty() || a == "none") return Status::Ok();
  if (a.rfind(kUnixPrefix, 0) == 0) {
    const std::string path = a.substr(std::string_view(kUnixPrefix).size());
    if (path.empty() || path.front() != '/' || path.back() == '/') {
      return Status::InvalidArgument("server.admin_listen = " + quote(a) +
                                     " is not a socket path; use unix:/ABSOLUTE/PATH, e.g. "
                                     "unix:/run/tpoold/admin.sock ('' = the default socket)");
    }
    if (path.size() > kMaxSocketPath) {
      return Status::InvalidArgument(
          "server.admin_listen = " + quote(a) + ": the path is " + std::to_string(path.size()) +
          " bytes long; a Unix socket path may have at most " + std::to_string(kMaxSocketPath));
    }
    return Status::Ok();
  }
  if (Status s = host_port("server.admin_listen", a); !s.ok()) {
    return Status::InvalidArgument(s.message() +
                                   "; or unix:/PATH, '' (the default socket), 'none'");
  }
  if (!t.enabled() || !c.auth.enabled()) {
    return Status::InvalidArgument(
        "server.admin_listen = " + quote(a) +
        " is a TCP address: an admin listener on TCP needs TLS (tls.cert_file, tls.key_file) and "
        "a token file (auth.token_file) so that only principals with the admin role reach it; "
        "set both, or use a Unix socket (admin_listen = '', the default)");
  }
  if (a == c.server.listen) {
    return Status::InvalidArgument("server.admin_listen = " + quote(a) +
                                   " is the job port (server.listen); give the admin listener "
                                   "an address of its own");
  }
  return Status::Ok();
}

// Reads a file the config names, at most 1 MiB (a certificate bundle is
// kilobytes): an error sentence naming the key, or "".
std::string read_small_file(const std::string& key, const std::string& path, std::string* out) {
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(st)) {
    return key + " = " + quote(path) + ": the file does not exist; check the path";
  }
  if (!std::filesystem::is_regular_file(st)) {
    return key + " = " + quote(path) + " is not a regular file; give the path of a PEM file";
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return key + " = " + quote(path) +
           ": cannot read the file; check its permissions (tpoold's user must read it)";
  }
  constexpr std::size_t kMax = 1u << 20;
  out->assign(kMax + 1, '\0');
  in.read(out->data(), static_cast<std::streamsize>(out->size()));
  out->resize(static_cast<std::size_t>(in.gcount()));
  if (out->size() > kMax) {
    return key + " = " + quote(path) + " is larger than 1 MiB; it is not a PEM file";
  }
  return "";
}

// OpenSSL's BIO over a string, freed on scope exit.
struct Bio {
  explicit Bio(const std::string& s) : b(BIO_new_mem_buf(s.data(), static_cast<int>(s.size()))) {}
  ~Bio() { BIO_free(b); }
  BIO* b;
};

// The number of certificates in a PEM text (0: none parse).
int count_certs(const std::string& pem) {
  Bio bio(pem);
  int n = 0;
  while (X509* x = PEM_read_bio_X509(bio.b, nullptr, nullptr, nullptr)) {
    X509_free(x);
    ++n;
  }
  ERR_clear_error();
  return n;
}

}  // namespace

bool is_loopback_address(const std::string& host_port) {
  const auto colon = host_port.rfind(':');
  std::string host = colon == std::string::npos ? host_port : host_port.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (host == "localhost") return true;
  in_addr a4{};
  if (::inet_pton(AF_INET, host.c_str(), &a4) == 1) return (ntohl(a4.s_addr) >> 24) == 127;
  in6_addr a6{};
  return ::inet_pton(AF_INET6, host.c_str(), &a6) == 1 && IN6_IS_ADDR_LOOPBACK(&a6);
}

AdminListen DaemonConfig::admin_listen() const {
  AdminListen a;
  const std::string v = server.admin_listen.empty() ? default_admin_address() : server.admin_listen;
  if (v == "none") return a;
  a.address = v;
  if (v.rfind(kUnixPrefix, 0) == 0) {
    a.kind = AdminListen::Kind::kUnix;
    a.path = v.substr(std::string_view(kUnixPrefix).size());
  } else {
    a.kind = AdminListen::Kind::kTcp;
  }
  return a;
}

std::vector<std::string> DaemonConfig::insecure_listeners() const {
  std::vector<std::string> out;
  auto check = [&](const std::string& key, const std::string& address) {
    if (is_loopback_address(address)) return;
    std::string missing;
    if (!tls.enabled()) missing = "TLS (tls.cert_file, tls.key_file)";
    if (!auth.enabled()) {
      missing += std::string(missing.empty() ? "" : " and ") + "a token file (auth.token_file)";
    }
    if (missing.empty()) return;
    out.push_back(key + " = " + quote(address) + " is reachable from other hosts without " +
                  missing);
  };
  check("server.listen", server.listen);
  // A TCP admin listener needs TLS and a token file whatever allow_insecure
  // says (validate_security); a Unix socket is not reachable from the network.
  return out;
}

Status check_security_files(const DaemonConfig& c) {
  const TlsSection& t = c.tls;
  if (t.enabled()) {
    std::string cert, key;
    if (auto e = read_small_file("tls.cert_file", t.cert_file, &cert); !e.empty()) {
      return Status::InvalidArgument(e);
    }
    if (auto e = read_small_file("tls.key_file", t.key_file, &key); !e.empty()) {
      return Status::InvalidArgument(e);
    }
    Bio cert_bio(cert);
    X509* leaf = PEM_read_bio_X509(cert_bio.b, nullptr, nullptr, nullptr);
    if (leaf == nullptr) {
      ERR_clear_error();
      return Status::InvalidArgument("tls.cert_file = " + quote(t.cert_file) +
                                     " holds no PEM certificate (-----BEGIN CERTIFICATE-----); "
                                     "give the server's certificate chain, leaf first");
    }
    Bio key_bio(key);
    EVP_PKEY* pkey = PEM_read_bio_PrivateKey(key_bio.b, nullptr, nullptr, nullptr);
    if (pkey == nullptr) {
      X509_free(leaf);
      ERR_clear_error();
      // The text is not echoed: it is a private key (or was meant to be).
      return Status::InvalidArgument(
          "tls.key_file = " + quote(t.key_file) +
          " holds no unencrypted PEM private key; give the key of tls.cert_file "
          "(-----BEGIN PRIVATE KEY----- or -----BEGIN EC/RSA PRIVATE KEY-----, no passphrase)");
    }
    const bool match = X509_check_private_key(leaf, pkey) == 1;
    EVP_PKEY_free(pkey);
    X509_free(leaf);
    ERR_clear_error();
    if (!match) {
      return Status::InvalidArgument("tls.key_file = " + quote(t.key_file) +
                                     " is not the private key of the certificate in "
                                     "tls.cert_file = " +
                                     quote(t.cert_file) +
                                     "; give the key the certificate was issued for (the first "
                                     "certificate of cert_file is the server's own)");
    }
    struct stat st {};
    if (::stat(t.key_file.c_str(), &st) == 0 && (st.st_mode & S_IROTH) != 0) {
      return Status::InvalidArgument("tls.key_file = " + quote(t.key_file) +
                                     " is readable by every user; chmod o-r it (0600, or 0640 "
                                     "with the service's group)");
    }
    if (!t.client_ca_file.empty()) {
      std::string ca;
      if (auto e = read_small_file("tls.client_ca_file", t.client_ca_file, &ca); !e.empty()) {
        return Status::InvalidArgument(e);
      }
      if (count_certs(ca) == 0) {
        return Status::InvalidArgument("tls.client_ca_file = " + quote(t.client_ca_file) +
                                       " holds no PEM certificate; give the CA certificate(s) "
                                       "that issue the client certificates");
      }
    }
  }
  if (c.auth.enabled()) {
    auto store = security::TokenStore::load(c.auth.token_file);
    if (!store.ok()) {
      return Status::InvalidArgument("auth.token_file: " + store.status().message());
    }
  }
  return Status::Ok();
}

Status DaemonConfig::validate() const {
  const std::uint64_t kMiB = 1u << 20;
  for (Status s : {
           host_port("server.listen", server.listen),
           replica_word("server.replica_id", server.replica_id),
           range("server.max_message_bytes", server.max_message_bytes, 1024, 1024 * kMiB),
           range("server.max_payload_bytes", server.max_payload_bytes, 0, server.max_message_bytes),
           range("server.max_output_bytes", server.max_output_bytes, 0, 1024 * kMiB),
           range("server.max_inflight_jobs", server.max_inflight_jobs, 1, 1u << 24),
           range("server.max_streams", server.max_streams, 1, 1u << 20),
           range("server.stream_window", server.stream_window, 1, 1u << 20),
           range("server.stream_buffer_bytes", server.stream_buffer_bytes, 64u << 10, 1ull << 40),
           range("server.drain_timeout_ms", server.drain_timeout_ms, 0, kDay),
           range("server.cancel_grace_ms", server.cancel_grace_ms, 0, kDay),
           range("pool.min_threads", pool.min_threads, 0, 1024),
           range("pool.max_threads", pool.max_threads, 0, 1024),
           range("pool.blocking_workers", pool.blocking_workers, 0, 1024),
           range("pool.queue_capacity", pool.queue_capacity, 2, 1u << 24),
           range("pool.local_queue_capacity", pool.local_queue_capacity, 2, 65536),
           one_of("pool.scheduler", pool.scheduler,
                  {"global_queue", "work_stealing", "lane_extension"}),
           one_of("pool.queue", pool.queue, {"ring", "chase_lev"}),
           range("pool.wake_coalesce_batch", pool.wake_coalesce_batch, 1, 1024),
           range("pool.watchdog_interval_ms", pool.watchdog_interval_ms, 0, 60000),
           range("pool.blocking_promotion_timeout_ms", pool.blocking_promotion_timeout_ms, 1,
                 3600000),
           range("pool.max_overflow_workers", pool.max_overflow_workers, 0, 1024),
           range("results.retention_ms", results.retention_ms, 0, 30 * kDay),
           range("results.max_bytes", results.max_bytes, 0, 1ull << 40),
           range("results.max_entries", results.max_entries, 0, 1u << 26),
           range("retry.max_scheduled_jobs", retry.max_scheduled_jobs, 0, 1u << 26),
           range("store.max_batch", store.max_batch, 1, 1u << 20),
           one_of("log.level", log.level,
                  {"trace", "debug", "info", "warn", "error", "critical", "off"}),
           one_of("log.format", log.format, {"text", "json"}),
       }) {
    if (!s.ok()) return s;
  }
  auto policy = [](const std::string& where, const RetryPolicySection& p) -> Status {
    for (const Status& s : {range(where + ".max_attempts", p.max_attempts, 1, 100),
                            range(where + ".backoff_base_ms", p.backoff_base_ms, 0, 3600000),
                            range(where + ".backoff_cap_ms", p.backoff_cap_ms, 0, 3600000)}) {
      if (!s.ok()) return s;
    }
    if (p.backoff_cap_ms != 0 && p.backoff_cap_ms < p.backoff_base_ms) {
      return Status::InvalidArgument(
          where + ".backoff_cap_ms = " + std::to_string(p.backoff_cap_ms) + " is below " + where +
          ".backoff_base_ms = " + std::to_string(p.backoff_base_ms) +
          "; make the cap at least the base, or 0 for no cap");
    }
    return Status::Ok();
  };
  if (Status s = policy("retry", retry.defaults); !s.ok()) return s;
  for (const auto& [name, p] : retry.handlers) {
    if (Status s = policy("retry.handlers." + name, p); !s.ok()) return s;
  }
  if (!store.enabled()) {
    if (store.durable) {
      return Status::InvalidArgument(
          "store.durable = true needs the store: set store.path to the journal's file (e.g. "
          "/var/lib/tpoold/jobs.db), or remove store.durable");
    }
    for (const auto& [name, d] : store.handlers) {
      if (d) {
        return Status::InvalidArgument("store.handlers." + name +
                                       ".durable = true needs the store: set store.path to the "
                                       "journal's file, or remove that table");
      }
    }
  }
  if (Status s = validate_security(*this); !s.ok()) return s;
  if (metrics.enabled) {
    if (Status s = host_port("metrics.listen", metrics.listen); !s.ok()) return s;
    const bool inline_pw = !metrics.basic_auth_password.empty();
    const bool file_pw = !metrics.basic_auth_password_file.empty();
    if (!metrics.basic_auth_user.empty() && inline_pw == file_pw) {
      return Status::InvalidArgument(
          "metrics.basic_auth_user is set, so give exactly one of metrics.basic_auth_password "
          "and metrics.basic_auth_password_file (the file is better: it keeps the password "
          "out of the config)");
    }
    if (metrics.basic_auth_user.empty() && (inline_pw || file_pw)) {
      return Status::InvalidArgument(
          "a metrics basic auth password is set but metrics.basic_auth_user is empty; set the "
          "user too, or remove the password");
    }
    if (Status s = metrics_transport(); !s.ok()) return s;
  }
  if (server.max_output_bytes + kOutputHeadroomBytes > server.max_message_bytes) {
    return Status::InvalidArgument(
        "server.max_output_bytes = " + std::to_string(server.max_output_bytes) +
        " does not fit in a reply: a result must fit in server.max_message_bytes = " +
        std::to_string(server.max_message_bytes) + " with " + std::to_string(kOutputHeadroomBytes) +
        " bytes to spare; lower max_output_bytes to at most " +
        std::to_string(server.max_message_bytes - kOutputHeadroomBytes) +
        " or raise max_message_bytes to at least " +
        std::to_string(server.max_output_bytes + kOutputHeadroomBytes));
  }
  if (server.max_inflight_jobs > pool.queue_capacity) {
    return Status::InvalidArgument(
        "server.max_inflight_jobs = " + std::to_string(server.max_inflight_jobs) +
        " is larger than pool.queue_capacity = " + std::to_string(pool.queue_capacity) +
        "; every in-flight job holds a descriptor, so raise the capacity or lower the limit");
  }
  if ((pool.queue_capacity & (pool.queue_capacity - 1)) != 0) {
    return Status::InvalidArgument("pool.queue_capacity = " + std::to_string(pool.queue_capacity) +
                                   " is not a power of two; use e.g. 65536");
  }
  if (pool.scheduler != "lane_extension" && pool.blocking_workers != 0) {
    return Status::InvalidArgument(
        "pool.blocking_workers = " + std::to_string(pool.blocking_workers) +
        " needs pool.scheduler = 'lane_extension' (it is " + quote(pool.scheduler) +
        "); set blocking_workers = 0 or use lane_extension");
  }
  for (const auto& d : plugins.dirs) {
    if (d.empty()) return Status::InvalidArgument("plugins.dirs has an empty entry; remove it");
  }
  if (Status st = check_isolation(plugins.isolation, "plugins.isolation"); !st.ok()) return st;
  for (const auto& [name, iso] : plugins.isolation_plugins) {
    if (Status st = check_isolation(iso, "plugins.isolation." + name); !st.ok()) return st;
  }
  if (!server.allow_insecure) {
    if (auto insecure = insecure_listeners(); !insecure.empty()) {
      return Status::InvalidArgument(
          insecure.front() +
          "; anyone who can reach it could run jobs and read their output. Configure [tls] "
          "and [auth] (docs/security.md, \"Deployment checklist\"), listen on 127.0.0.1, or "
          "set server.allow_insecure = true to accept the risk (tpoold then warns at every "
          "start)");
    }
  }
  return pool_config().validate();
}

// The metrics half of "no plaintext on a non-loopback address"
// (docs/security.md): basic auth over plain HTTP would hand the password to
// anyone on the path.
Status DaemonConfig::metrics_transport() const {
  if (metrics.tls && (tls.cert_file.empty() || tls.key_file.empty())) {
    return Status::InvalidArgument(
        "metrics.tls = true needs a certificate: set tls.cert_file and tls.key_file (the same "
        "PEM files the gRPC listeners serve)");
  }
  if (!server.allow_insecure && !metrics_transport_is_private()) {
    return Status::InvalidArgument(
        "metrics.listen = " + quote(metrics.listen) +
        " is not a loopback address, and /metrics would be served in plain HTTP; set "
        "metrics.tls = true (with tls.cert_file and tls.key_file), listen on 127.0.0.1, or set "
        "server.allow_insecure = true to accept the risk");
  }
  return Status::Ok();
}

bool DaemonConfig::metrics_transport_is_private() const {
  return metrics.tls || is_loopback_address(metrics.listen);
}

std::string DaemonConfig::replica_id() const {
  if (!server.replica_id.empty()) return server.replica_id;
  char name[HOST_NAME_MAX + 1] = {};
  if (::gethostname(name, sizeof name - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

tpool::Config DaemonConfig::pool_config() const {
  tpool::Config c;
  // The CPU workers: pool.max_threads, or the pool's own default for 0 (one
  // per core, Config::resolved(): computed there and nowhere else).
  c.max_threads = pool.max_threads;
  const std::size_t cpu_workers = c.resolved().max_threads;
  // Daemon policy: the blocking lane's workers come on top of the CPU
  // workers, so a blocking handler never takes a core's worker away.
  const std::size_t extra = pool.scheduler == "lane_extension" ? pool.blocking_workers : 0;
  c.max_threads = cpu_workers + extra;
  // 0 stays 0: the pool starts every worker (Config::resolved()).
  c.min_threads = std::min<std::size_t>(pool.min_threads, c.max_threads);
  c.queue_capacity = pool.queue_capacity;
  c.local_queue_capacity = pool.local_queue_capacity;
  c.queue_kind = pool.queue == "chase_lev" ? QueueKind::kChaseLev : QueueKind::kRing;
  c.scheduler_variant = pool.scheduler == "global_queue"    ? SchedulerVariant::kGlobalQueue
                        : pool.scheduler == "work_stealing" ? SchedulerVariant::kWorkStealing
                                                            : SchedulerVariant::kLaneExtension;
  c.blocking_workers = pool.blocking_workers;
  c.wake_coalesce_batch = pool.wake_coalesce_batch;
  c.searching_gate = pool.searching_gate;
  // The daemon's submits come from gRPC threads and must never block a
  // reactor: full is an answer (RESOURCE_EXHAUSTED, or a Stream that stops
  // reading), not a wait.
  c.backpressure = Backpressure::kReject;
  c.watchdog_interval = std::chrono::milliseconds(pool.watchdog_interval_ms);
  c.blocking_promotion_timeout = std::chrono::milliseconds(pool.blocking_promotion_timeout_ms);
  c.max_overflow_workers = pool.watchdog_interval_ms == 0 ? 0 : pool.max_overflow_workers;
  c.name = "tpoold";
  return c;
}

engine::EngineLimits DaemonConfig::engine_limits() const {
  engine::EngineLimits l;
  l.max_payload_bytes = server.max_payload_bytes;
  l.max_inflight_jobs = server.max_inflight_jobs;
  l.retention = std::chrono::milliseconds(results.retention_ms);
  l.max_retained_bytes = results.max_bytes;
  l.max_retained_entries = results.max_entries;
  l.cancel_grace = std::chrono::milliseconds(server.cancel_grace_ms);
  auto policy = [](const RetryPolicySection& p) {
    return engine::RetryPolicy{static_cast<std::uint32_t>(p.max_attempts),
                               std::chrono::milliseconds(p.backoff_base_ms),
                               std::chrono::milliseconds(p.backoff_cap_ms)};
  };
  l.retry = policy(retry.defaults);
  for (const auto& [name, p] : retry.handlers) l.handler_retry.emplace_back(name, policy(p));
  l.max_scheduled_jobs = retry.max_scheduled_jobs;
  l.durable = store.durable;
  for (const auto& [name, d] : store.handlers) l.handler_durable.emplace_back(name, d);
  return l;
}

plugin_host::HostConfig DaemonConfig::host_config() const {
  plugin_host::HostConfig h;
  h.dirs = plugins.dirs;
  h.abort_on_load_error = plugins.abort_on_load_error;
  for (const auto& [name, text] : plugins.config) h.plugin_config[name] = text;
  h.max_output_bytes = server.max_output_bytes;
  h.isolation = to_settings(plugins.isolation);
  for (const auto& [name, iso] : plugins.isolation_plugins) {
    h.plugin_isolation[name] = to_settings(iso);
  }
  h.isolation_factory =
      isolation::make_factory({plugins.runner, std::chrono::milliseconds(server.cancel_grace_ms)});
  return h;
}

rpc::RpcLimits DaemonConfig::rpc_limits() const {
  return {server.max_streams, server.stream_window, server.max_message_bytes,
          server.stream_buffer_bytes};
}

Result<DaemonConfig> parse_config(std::string_view text, std::string_view origin) {
  DaemonConfig c;
  toml::table root;
  try {
    root = toml::parse(text, origin);
  } catch (const toml::parse_error& e) {
    std::ostringstream os;
    os << origin << ":" << e.source().begin.line << ":" << e.source().begin.column
       << ": not valid TOML: " << e.description();
    return Status::InvalidArgument(os.str());
  }
  std::vector<std::pair<std::string, std::string>> plugin_config;
  // [retry.handlers.NAME]: max_attempts, backoff_base_ms, backoff_cap_ms as set.
  std::map<std::string, std::array<std::optional<std::uint64_t>, 3>> retry_overrides;
  const std::map<std::string, std::map<std::string, Reader>> sections = {
      {"server",
       {{"listen", str(c.server.listen)},
        {"port_file", str(c.server.port_file)},
        {"reflection", boolean(c.server.reflection)},
        {"max_message_bytes", u64(c.server.max_message_bytes)},
        {"max_payload_bytes", u64(c.server.max_payload_bytes)},
        {"max_output_bytes", u64(c.server.max_output_bytes)},
        {"max_inflight_jobs", u64(c.server.max_inflight_jobs)},
        {"max_streams", u64(c.server.max_streams)},
        {"stream_window", u64(c.server.stream_window)},
        {"stream_buffer_bytes", u64(c.server.stream_buffer_bytes)},
        {"drain_timeout_ms", u64(c.server.drain_timeout_ms)},
        {"cancel_grace_ms", u64(c.server.cancel_grace_ms)},
        {"replica_id", str(c.server.replica_id)},
        {"admin_listen", str(c.server.admin_listen)},
        {"allow_insecure", boolean(c.server.allow_insecure)}}},
      {"tls",
       {{"cert_file", str(c.tls.cert_file)},
        {"key_file", str(c.tls.key_file)},
        {"client_ca_file", str(c.tls.client_ca_file)},
        {"client_auth", str(c.tls.client_auth)},
        {"principal_from", str(c.tls.principal_from)},
        {"refresh_interval_ms", u64(c.tls.refresh_interval_ms)}}},
      {"auth", {{"token_file", str(c.auth.token_file)}}},
      {"pool",
       {{"min_threads", u64(c.pool.min_threads)},
        {"max_threads", u64(c.pool.max_threads)},
        {"blocking_workers", u64(c.pool.blocking_workers)},
        {"queue_capacity", u64(c.pool.queue_capacity)},
        {"local_queue_capacity", u64(c.pool.local_queue_capacity)},
        {"scheduler", str(c.pool.scheduler)},
        {"queue", str(c.pool.queue)},
        {"wake_coalesce_batch", u64(c.pool.wake_coalesce_batch)},
        {"searching_gate", boolean(c.pool.searching_gate)},
        {"watchdog_interval_ms", u64(c.pool.watchdog_interval_ms)},
        {"blocking_promotion_timeout_ms", u64(c.pool.blocking_promotion_timeout_ms)},
        {"max_overflow_workers", u64(c.pool.max_overflow_workers)}}},
      {"plugins",
       {{"dirs", str_list(c.plugins.dirs)},
        {"abort_on_load_error", boolean(c.plugins.abort_on_load_error)},
        {"isolation", [&c](const toml::node& n,
                           const std::string& key) { return read_isolation(n, key, c.plugins); }},
        {"config",
         [&plugin_config](const toml::node& n, const std::string& key) -> std::string {
           const auto* t = n.as_table();
           if (t == nullptr) return key + " must be a table of plugin name = \"config string\"";
           for (const auto& [name, v] : *t) {
             if (!v.is_string()) {
               return key + "." + std::string(name.str()) + " must be a string";
             }
             plugin_config.emplace_back(std::string(name.str()), *v.value<std::string>());
           }
           return "";
         }}}},
      {"retry",
       {{"max_attempts", u64(c.retry.defaults.max_attempts)},
        {"backoff_base_ms", u64(c.retry.defaults.backoff_base_ms)},
        {"backoff_cap_ms", u64(c.retry.defaults.backoff_cap_ms)},
        {"max_scheduled_jobs", u64(c.retry.max_scheduled_jobs)},
        {"handlers",
         [&retry_overrides](const toml::node& n, const std::string& key) -> std::string {
           const auto* t = n.as_table();
           if (t == nullptr) return key + " must be a table of [retry.handlers.NAME] tables";
           for (const auto& [name, v] : *t) {
             const std::string where = key + "." + std::string(name.str());
             const auto* h = v.as_table();
             if (h == nullptr) {
               return where + " must be a table (max_attempts, backoff_base_ms, backoff_cap_ms)";
             }
             // Unset keys take the [retry] values, once the whole section is
             // read (below): [retry]'s own keys may come after this table.
             auto& p = retry_overrides[std::string(name.str())];
             const std::map<std::string, Reader> keys = {{"max_attempts", opt_u64(p[0])},
                                                         {"backoff_base_ms", opt_u64(p[1])},
                                                         {"backoff_cap_ms", opt_u64(p[2])}};
             for (const auto& [k, hv] : *h) {
               auto it = keys.find(std::string(k.str()));
               if (it == keys.end()) {
                 return "unknown key " + where + "." + std::string(k.str()) +
                        "; the keys of a handler's retry policy are: backoff_base_ms, "
                        "backoff_cap_ms, max_attempts";
               }
               if (std::string err = it->second(hv, where + "." + std::string(k.str()));
                   !err.empty()) {
                 return err;
               }
             }
           }
           return "";
         }}}},
      {"store",
       {{"path", str(c.store.path)},
        {"durable", boolean(c.store.durable)},
        {"max_batch", u64(c.store.max_batch)},
        {"handlers",
         [&c](const toml::node& n, const std::string& key) -> std::string {
           const auto* t = n.as_table();
           if (t == nullptr) return key + " must be a table of [store.handlers.NAME] tables";
           for (const auto& [name, v] : *t) {
             const std::string where = key + "." + std::string(name.str());
             const auto* h = v.as_table();
             if (h == nullptr) return where + " must be a table (durable = true or false)";
             for (const auto& [k, hv] : *h) {
               if (k.str() != "durable") {
                 return "unknown key " + where + "." + std::string(k.str()) +
                        "; a handler's store table has one key: durable";
               }
               if (!hv.is_boolean()) return where + ".durable must be true or false";
               c.store.handlers[std::string(name.str())] = *hv.value<bool>();
             }
           }
           return "";
         }}}},
      {"results",
       {{"retention_ms", u64(c.results.retention_ms)},
        {"max_bytes", u64(c.results.max_bytes)},
        {"max_entries", u64(c.results.max_entries)}}},
      {"log", {{"level", str(c.log.level)}, {"format", str(c.log.format)}}},
      {"metrics",
       {{"enabled", boolean(c.metrics.enabled)},
        {"listen", str(c.metrics.listen)},
        {"port_file", str(c.metrics.port_file)},
        {"basic_auth_user", str(c.metrics.basic_auth_user)},
        {"basic_auth_password", str(c.metrics.basic_auth_password)},
        {"basic_auth_password_file", str(c.metrics.basic_auth_password_file)},
        {"tls", boolean(c.metrics.tls)}}},

  };
  for (const auto& [k, v] : root) {
    if (!sections.contains(std::string(k.str()))) {
      std::string known;
      for (const auto& [s, _] : sections) known += (known.empty() ? "" : ", ") + s;
      return Status::InvalidArgument(std::string(origin) + ": unknown section or key " +
                                     quote(k.str()) + "; the sections are: " + known);
    }
  }
  for (const auto& [name, keys] : sections) {
    if (std::string err = read_section(root, name, keys); !err.empty()) {
      return Status::InvalidArgument(std::string(origin) + ": " + err);
    }
  }
  c.plugins.config = std::move(plugin_config);
  for (const auto& [name, o] : retry_overrides) {
    const RetryPolicySection& d = c.retry.defaults;
    c.retry.handlers[name] = {o[0].value_or(d.max_attempts), o[1].value_or(d.backoff_base_ms),
                              o[2].value_or(d.backoff_cap_ms)};
  }
  return c;
}

Result<DaemonConfig> load_config_file(const std::string& path) {
  // A directory opens and reads as empty, which used to give the defaults
  // without a word (issue 13): only a regular file (or a link to one) is a
  // config file.
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);
  if (!ec && std::filesystem::exists(st) && !std::filesystem::is_regular_file(st)) {
    return Status::InvalidArgument(
        "the config file " + quote(path) + " is " +
        (std::filesystem::is_directory(st) ? "a directory" : "not a regular file") +
        "; give the path of a TOML file, e.g. /etc/tpoold/tpoold.toml");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return Status::InvalidArgument("cannot read the config file " + quote(path) +
                                   "; check the path and its permissions");
  }
  std::ostringstream text;
  text << in.rdbuf();
  return parse_config(text.str(), path);
}

std::string usage() {
  return "usage: tpoold [--config FILE] [--listen HOST:PORT] [--admin-listen ADDR]\n"
         "              [--plugin-dir DIR]...\n"
         "              [--log-level LEVEL] [--log-format text|json] [--port-file FILE]\n"
         "              [--metrics-listen HOST:PORT] [--replica-id ID]\n"
         "       tpoold --check-config FILE\n"
         "       tpoold --version | --help\n"
         "Flags override the config file; docs/configuration.md lists every key.\n";
}

Result<Options> parse_args(int argc, const char* const* argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    std::string value;
    bool has_inline = false;
    if (auto eq = a.find('='); a.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = a.substr(eq + 1);
      a = a.substr(0, eq);
      has_inline = true;
    }
    auto take = [&](std::string& out) -> Status {
      if (has_inline) {
        out = value;
        return Status::Ok();
      }
      if (i + 1 >= argc) {
        return Status::InvalidArgument("flag " + a + " needs a value; see tpoold --help");
      }
      out = argv[++i];
      return Status::Ok();
    };
    Status s;
    if (a == "--config") {
      s = take(o.config_path);
    } else if (a == "--check-config") {
      s = take(o.config_path);
      o.check_only = true;
    } else if (a == "--listen") {
      s = take(o.listen);
    } else if (a == "--admin-listen") {
      s = take(o.admin_listen);
    } else if (a == "--port-file") {
      s = take(o.port_file);
    } else if (a == "--plugin-dir") {
      std::string d;
      s = take(d);
      o.plugin_dirs.push_back(d);
    } else if (a == "--log-level") {
      s = take(o.log_level);
    } else if (a == "--log-format") {
      s = take(o.log_format);
    } else if (a == "--metrics-listen") {
      s = take(o.metrics_listen);
    } else if (a == "--replica-id") {
      s = take(o.replica_id);
    } else if (a == "--version") {
      o.show_version = true;
    } else if (a == "--help" || a == "-h") {
      o.show_help = true;
    } else {
      return Status::InvalidArgument("unknown argument " + quote(argv[i]) + "; see tpoold --help");
    }
    if (!s.ok()) return s;
  }
  return o;
}

Result<DaemonConfig> resolve_config(const Options& o) {
  DaemonConfig c;
  if (!o.config_path.empty()) {
    auto loaded = load_config_file(o.config_path);
    if (!loaded.ok()) return loaded.status();
    c = std::move(loaded).value();
  }
  if (!o.listen.empty()) c.server.listen = o.listen;
  if (!o.admin_listen.empty()) c.server.admin_listen = o.admin_listen;
  if (!o.port_file.empty()) c.server.port_file = o.port_file;
  if (!o.plugin_dirs.empty()) c.plugins.dirs = o.plugin_dirs;
  if (!o.log_level.empty()) c.log.level = o.log_level;
  if (!o.log_format.empty()) c.log.format = o.log_format;
  if (!o.metrics_listen.empty()) c.metrics.listen = o.metrics_listen;
  if (!o.replica_id.empty()) c.server.replica_id = o.replica_id;
  Status s = c.validate();
  if (s.ok()) s = check_security_files(c);
  if (!s.ok()) {
    if (o.config_path.empty()) return s;
    return Status::InvalidArgument(o.config_path + ": " + s.message());
  }
  return c;
}

}  // namespace tpool::server
