// tpoolctl: the command line of tpoold. Parses the command line, prints help,
// dispatches to a subcommand (commands.cc, bench.cc).
#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>

#include "cli.h"
#include "tpool/common/admin_address.h"
#include "tpool/security/process.h"

namespace tpoolctl {
namespace {

struct Option {
  const char* flag;
  const char* value;  // nullptr: a switch
  const char* help;
};

struct Command {
  const char* name;
  const char* args;
  const char* summary;
  std::vector<Option> options;
  int (*run)(const Args&);
  int min_pos, max_pos;
};

const std::vector<Option> kJobOptions = {
    {"--file", "FILE", "read the payload from FILE (- for stdin)"},
    {"--stdin", nullptr, "read the payload from standard input"},
    {"--timeout", "DUR", "the job's own time limit from acceptance (e.g. 500ms, 30s; 0 = none)"},
    {"--lane", "LANE", "default or blocking (default: the handler's hint)"},
    {"--key", "KEY", "idempotency key: a repeat with the same key returns the first job"},
    {"--label", "K=V", "a label for the job (repeatable)"},
    {"--attempts", "N", "run a failed job again, up to N attempts in all (1-100; default 1)"},
    {"--backoff", "BASE[:CAP]", "wait before a retry: full jitter under BASE*2^(n-1), at most CAP"},
    {"--delay", "DUR", "run the job this long after acceptance (e.g. 90s, 10m)"},
    {"--durable", nullptr,
     "acknowledged only once on disk, run again after a crash (needs tpoold's [store] path)"},
};

std::vector<Option> with_job_options(std::vector<Option> extra) {
  std::vector<Option> all = kJobOptions;
  all.insert(all.end(), extra.begin(), extra.end());
  return all;
}

const std::vector<Command>& commands() {
  static const std::vector<Command> cmds = {
      {"execute", "HANDLER [PAYLOAD]",
       "Run a job and print its output (the raw bytes; --json for the whole result).", kJobOptions,
       cmd_execute, 1, 2},
      {"submit", "HANDLER [PAYLOAD]",
       "Accept a job and print its id at once; `wait` or `get` it later.", kJobOptions, cmd_submit,
       1, 2},
      {"wait",
       "JOB_ID",
       "Wait for a submitted job's result and print its output.",
       {},
       cmd_wait,
       1,
       1},
      {"get", "JOB_ID", "Print a job's state, timings, progress and labels.", {}, cmd_get, 1, 1},
      {"jobs",
       "",
       "List retained jobs (Submit, keyed, durable): id, state, handler, attempts, message.",
       {{"--state", "STATES",
         "only these states, comma-separated or repeated (e.g. failed,timed_out: the dead "
         "letters)"},
        {"--handler", "NAME", "only this handler's jobs"},
        {"--label", "K[=V]", "only jobs with this label (and value)"},
        {"--limit", "N", "at most N jobs (1-1000; default 100)"},
        {"--page-token", "T", "the next page: the token the previous page printed"}},
       cmd_jobs,
       0,
       0},
      {"retry",
       "JOB_ID",
       "Run a failed, timed out or cancelled job again as a new job; print the new id.",
       {},
       cmd_retry,
       1,
       1},
      {"cancel",
       "JOB_ID",
       "Cancel a submitted job and print its state after the request.",
       {},
       cmd_cancel,
       1,
       1},
      {"handlers", "", "List the loaded handlers.", {}, cmd_handlers, 0, 0},
      {"stats", "", "Print the daemon's and the pool's counters.", {}, cmd_stats, 0, 0},
      {"health",
       "",
       "Check the daemon's health (grpc.health.v1): SERVING exits 0, NOT_SERVING 1.",
       {},
       cmd_health,
       0,
       0},
      {"drain",
       "",
       "Stop accepting jobs and wait for the work in flight; the daemon then exits.",
       {{"--timeout", "DUR",
         "how long jobs may take to finish (default: the daemon's "
         "server.drain_timeout_ms)"}},
       cmd_drain,
       0,
       0},
      {"reload",
       "",
       "Rescan the plugin directories and print the handlers loaded after it.",
       {},
       cmd_reload,
       0,
       0},
      {"version", "", "Print tpoolctl's version and the daemon's.", {}, cmd_version, 0, 0},
      {"bench", "HANDLER [PAYLOAD]",
       "Send N jobs at a concurrency and report jobs/s, errors and latency percentiles.",
       with_job_options({
           {"-n", "N", "jobs to run (default 10000)"},
           {"-c", "C", "jobs in flight at once (default 64)"},
           {"--mode", "MODE",
            "unary (Execute), batch (SubmitBatch + WaitBatch) or stream (default unary)"},
           {"--batch", "B", "jobs per SubmitBatch call or Stream message (default 64)"},
           {"--wait", "HOW",
            "batch mode: batch (one WaitBatch per SubmitBatch, default) or each (a Wait "
            "per job)"},
           {"--progress", nullptr, "draw the progress bar even when stderr is not a terminal"},
           {"--quiet", nullptr, "no progress output"},
       }),
       cmd_bench, 1, 2},
      {"token",
       "create",
       "Make a bearer token: prints the token (once) and the line for the daemon's token file.",
       {{"--principal", "NAME", "who the token names (1-128 of A-Z a-z 0-9 _ . @ -)"},
        {"--roles", "ROLES", "comma-separated: submit, read, admin"},
        {"--handlers", "LIST", "comma-separated handler allow-list (default: every handler)"}},
       cmd_token,
       1,
       1},
  };
  return cmds;
}

const std::vector<Option> kGlobal = {
    {"--address", "HOST:PORT",
     "tpoold's address (default $TPOOL_ADDRESS, else 127.0.0.1:50051); several replicas: "
     "IP:PORT,IP:PORT,... or dns:///NAME:PORT (round_robin); a Unix socket: unix:/PATH"},
    {"--admin-address", "ADDR",
     "tpoold's admin listener, for stats, drain, reload and version (default "
     "$TPOOL_ADMIN_ADDRESS, else the default admin socket: unix:$RUNTIME_DIRECTORY/admin.sock, "
     "unix:$XDG_RUNTIME_DIR/tpoold/admin.sock, unix:/run/tpoold/admin.sock or "
     "unix:/tmp/tpoold-UID/admin.sock, the first that exists)"},
    {"--deadline", "DUR", "deadline of each call (default 30s; drain: 5m)"},
    {"--json", nullptr, "print JSON instead of text"},
    {"--tls", nullptr, "use TLS (system roots unless --tls-ca)"},
    {"--tls-ca", "FILE", "PEM roots to verify the daemon with (implies --tls)"},
    {"--tls-cert", "FILE", "PEM client certificate chain, for mutual TLS (implies --tls)"},
    {"--tls-key", "FILE", "PEM private key of --tls-cert"},
    {"--tls-server-name", "NAME", "check the daemon's certificate against NAME"},
    {"--token-file", "FILE",
     "bearer token to authenticate with, first line of FILE, mode 0600 (default "
     "$TPOOL_TOKEN_FILE); sent only over TLS or a unix: socket"},
    {"--insecure-token", nullptr,
     "send the token over plaintext TCP too (only behind a TLS-terminating proxy on this host)"},
    {"--help", nullptr, "help (also: tpoolctl help COMMAND)"},
};

void print_options(std::ostream& out, const std::vector<Option>& opts) {
  for (const auto& o : opts) {
    std::string head = std::string("  ") + o.flag + (o.value ? std::string(" ") + o.value : "");
    out << head << std::string(head.size() < 26 ? 26 - head.size() : 1, ' ') << o.help << "\n";
  }
}

void print_usage(std::ostream& out) {
  out << "usage: tpoolctl [GLOBAL OPTIONS] COMMAND [ARGS] [OPTIONS]\n\n"
         "Commands:\n";
  for (const auto& c : commands()) {
    std::string head = std::string("  ") + c.name;
    out << head << std::string(12 - head.size(), ' ') << c.summary << "\n";
  }
  out << "\nGlobal options (anywhere on the line):\n";
  print_options(out, kGlobal);
  out << "  --version                 print tpoolctl's version\n"
         "\nExit codes: 0 ok, 1 negative outcome (job FAILED, NOT_SERVING, ...), 2 usage,\n"
         "3 unavailable, 4 not found, 5 deadline exceeded, 6 cancelled, 7 rejected, 8 other.\n"
         "`tpoolctl COMMAND --help` describes one command; docs/client.md has the details.\n";
}

void print_command_help(const Command& c) {
  std::cout << "usage: tpoolctl " << c.name << (*c.args ? " " : "") << c.args << " [OPTIONS]\n\n"
            << c.summary << "\n";
  if (std::string(c.args).find("PAYLOAD") != std::string::npos) {
    std::cout << "PAYLOAD is the job's input as an argument; `-` reads it from stdin.\n";
  }
  if (!c.options.empty()) {
    std::cout << "\nOptions:\n";
    print_options(std::cout, c.options);
  }
  std::cout << "\nGlobal options:\n";
  print_options(std::cout, kGlobal);
}

const Option* find_option(const std::vector<Option>& opts, const std::string& flag) {
  for (const auto& o : opts) {
    if (flag == o.flag) return &o;
  }
  return nullptr;
}

std::optional<std::string> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

int run(int argc, char** argv) {
  Args a;
  if (const char* env = std::getenv("TPOOL_ADDRESS"); env != nullptr && *env != '\0') {
    a.client.address = env;
  }
  if (const char* env = std::getenv("TPOOL_ADMIN_ADDRESS"); env != nullptr && *env != '\0') {
    a.admin_address = env;
  }
  a.client.max_attempts = 3;
  std::vector<std::string> rest;
  bool help = false;
  std::string tls_ca, tls_cert, tls_key, token_file;
  if (const char* env = std::getenv("TPOOL_TOKEN_FILE"); env != nullptr && *env != '\0') {
    token_file = env;
  }
  // Global options first, wherever they are; the rest belongs to the command.
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    std::string value;
    bool has_inline = false;
    if (arg.rfind("--", 0) == 0 && arg.find('=') != std::string::npos) {
      value = arg.substr(arg.find('=') + 1);
      arg = arg.substr(0, arg.find('='));
      has_inline = true;
    }
    const Option* g = find_option(kGlobal, arg);
    if (arg == "--version") {
      std::cout << "tpoolctl " << TPOOL_VERSION << "\n";
      return kOk;
    }
    if (arg == "-h" || arg == "--help") {
      help = true;
      continue;
    }
    if (g == nullptr) {
      rest.push_back(argv[i]);
      continue;
    }
    if (g->value != nullptr && !has_inline) {
      if (i + 1 >= argc) {
        std::cerr << "tpoolctl: option " << arg << " needs a value (" << g->value << ")\n";
        return kUsage;
      }
      value = argv[++i];
    }
    if (arg == "--address") {
      a.client.address = value;
    } else if (arg == "--admin-address") {
      a.admin_address = value;
    } else if (arg == "--deadline") {
      auto d = parse_duration(value);
      if (!d || d->count() <= 0) {
        std::cerr << "tpoolctl: --deadline '" << value
                  << "' is not a positive duration; use e.g. 500ms, 30s or 2m\n";
        return kUsage;
      }
      a.client.default_deadline = *d;
      a.deadline_given = true;
    } else if (arg == "--json") {
      a.json = true;
    } else if (arg == "--tls") {
      a.client.tls.enabled = true;
    } else if (arg == "--tls-ca") {
      tls_ca = value;
    } else if (arg == "--tls-cert") {
      tls_cert = value;
    } else if (arg == "--tls-key") {
      tls_key = value;
    } else if (arg == "--tls-server-name") {
      a.client.tls.server_name_override = value;
    } else if (arg == "--token-file") {
      token_file = value;
    } else if (arg == "--insecure-token") {
      a.client.allow_insecure_token = true;
    }
  }
  if (tls_cert.empty() != tls_key.empty()) {
    std::cerr << "tpoolctl: --tls-cert and --tls-key go together (the client certificate and its "
                 "private key); give both or neither\n";
    return kUsage;
  }
  for (auto [path, field] : {std::pair{&tls_ca, &a.client.tls.root_certs_pem},
                             std::pair{&tls_cert, &a.client.tls.cert_chain_pem},
                             std::pair{&tls_key, &a.client.tls.private_key_pem}}) {
    if (path->empty()) continue;
    auto text = read_file(*path);
    if (!text) {
      std::cerr << "tpoolctl: cannot read the TLS file '" << *path << "'; check the path\n";
      return kUsage;
    }
    *field = *text;
    a.client.tls.enabled = true;
  }
  if (!token_file.empty()) {
    // The token itself is never printed: errors name the file only.
    auto token = tpool::client::read_token_file(token_file);
    if (!token.ok()) {
      std::cerr << "tpoolctl: " << token.error().message() << "\n";
      return kUsage;
    }
    a.client.bearer_token = token.value();
  }

  if (a.admin_address.empty()) {
    // The daemon binds the first candidate; from a shell the environment may
    // differ (no RUNTIME_DIRECTORY), so take the first socket that exists.
    const auto candidates = tpool::admin_address_candidates();
    a.admin_address = candidates.front();
    for (const auto& c : candidates) {
      struct stat st {};
      if (::stat(c.substr(5).c_str(), &st) == 0 && S_ISSOCK(st.st_mode)) {
        a.admin_address = c;
        break;
      }
    }
  }

  if (rest.empty()) {
    print_usage(help ? std::cout : std::cerr);
    return help ? kOk : kUsage;
  }
  a.command = rest[0];
  if (a.command == "help") {
    if (rest.size() < 2) {
      print_usage(std::cout);
      return kOk;
    }
    a.command = rest[1];
    help = true;
    rest.erase(rest.begin() + 1, rest.end());
  }
  const Command* cmd = nullptr;
  for (const auto& c : commands()) {
    if (a.command == c.name) cmd = &c;
  }
  if (cmd == nullptr) {
    std::cerr << "tpoolctl: unknown command '" << a.command
              << "'; run `tpoolctl --help` for the list\n";
    return kUsage;
  }
  if (help) {
    print_command_help(*cmd);
    return kOk;
  }
  if (!a.client.bearer_token.empty()) {
    // Where this command's calls go: the admin listener for the admin
    // commands, the job port for the rest.
    const std::string name = cmd->name;
    const bool admin = name == "stats" || name == "drain" || name == "reload" || name == "version";
    if (auto why = tpool::client::token_transport_problem(admin ? admin_options(a) : a.client);
        !why.empty()) {
      std::cerr << "tpoolctl: " << why << "\n";
      return kUsage;
    }
  }
  for (std::size_t i = 1; i < rest.size(); ++i) {
    const std::string& arg = rest[i];
    if (arg.size() > 1 && arg[0] == '-' && arg != "-") {
      std::string flag = arg, value;
      bool has_inline = false;
      if (arg.rfind("--", 0) == 0 && arg.find('=') != std::string::npos) {
        flag = arg.substr(0, arg.find('='));
        value = arg.substr(arg.find('=') + 1);
        has_inline = true;
      }
      const Option* o = find_option(cmd->options, flag);
      if (o == nullptr) {
        std::cerr << "tpoolctl " << cmd->name << ": unknown option '" << flag << "'; run `tpoolctl "
                  << cmd->name << " --help` for its options\n";
        return kUsage;
      }
      if (o->value != nullptr && !has_inline) {
        if (i + 1 >= rest.size()) {
          std::cerr << "tpoolctl " << cmd->name << ": option " << flag << " needs a value ("
                    << o->value << ")\n";
          return kUsage;
        }
        value = rest[++i];
      }
      a.options[flag].push_back(value);
    } else {
      a.positional.push_back(arg);
    }
  }
  const int n = static_cast<int>(a.positional.size());
  if (n < cmd->min_pos || n > cmd->max_pos) {
    std::cerr << "tpoolctl " << cmd->name << ": expected "
              << (*cmd->args ? cmd->args : "no arguments") << ", got " << n
              << " argument(s); run `tpoolctl " << cmd->name << " --help`\n";
    return kUsage;
  }
  return cmd->run(a);
}

}  // namespace
}  // namespace tpoolctl

int main(int argc, char** argv) {
  // First, before gRPC initialises OpenSSL (process.h says why): without it,
  // secure.Tpoolctl.BenchEveryMode under ASan failed ~1 run in 3 with a
  // double free at exit.
  tpool::security::keep_openssl_state_at_exit();
  return tpoolctl::run(argc, argv);
}
