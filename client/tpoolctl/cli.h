// tpoolctl's shared pieces: exit codes, parsed arguments, output helpers.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "tpool/client/client.h"

namespace tpoolctl {

// Exit codes, documented in docs/client.md ("Exit codes"); scripts rely on
// them, so a code keeps its meaning forever.
enum Exit : int {
  kOk = 0,           // done; the job SUCCEEDED; health SERVING
  kNegative = 1,     // done, but the outcome is bad: job FAILED, NOT_SERVING, drain cancelled jobs,
                     // bench saw errors
  kUsage = 2,        // bad command line or unreadable payload file
  kUnavailable = 3,  // tpoold unreachable, or draining (UNAVAILABLE)
  kNotFound = 4,     // unknown handler or job id (NOT_FOUND)
  kDeadline = 5,     // the call's deadline or the job's timeout passed (DEADLINE_EXCEEDED)
  kCancelled = 6,    // the job was cancelled (CANCELLED)
  kRejected = 7,     // the daemon refused the request (INVALID_ARGUMENT, FAILED_PRECONDITION,
                     // RESOURCE_EXHAUSTED, ...)
  kInternal = 8,     // anything else (INTERNAL, UNKNOWN, UNIMPLEMENTED, ...)
};

// The exit code for a failed call.
int exit_code_of(const tpool::client::Error& e);

// The command line after global options were taken out.
struct Args {
  std::string command;
  std::vector<std::string> positional;
  std::map<std::string, std::vector<std::string>> options;  // "--timeout" -> values
  bool json = false;
  tpool::client::ClientOptions client;
  // AdminService's address (--admin-address, $TPOOL_ADMIN_ADDRESS, else the
  // default admin socket: tpool/common/admin_address.h).
  std::string admin_address;
  bool deadline_given = false;

  bool has(const std::string& opt) const { return options.count(opt) != 0; }
  std::optional<std::string> value(const std::string& opt) const;
};

// The options for AdminService calls (stats, drain, reload, version): the
// global options with the admin address; TLS only when it is a TCP address
// (a unix: socket is plaintext, its file mode is the access control).
tpool::client::ClientOptions admin_options(const Args& a);

// "tpoolctl <command>: <sentence>" on stderr, then the exit code to return.
int fail(const Args& a, int code, const std::string& sentence);
int fail(const Args& a, const tpool::client::Error& e);

// "250ms", "30s", "2m", "1h" or a bare number of milliseconds.
std::optional<std::chrono::milliseconds> parse_duration(const std::string& s);
std::optional<std::uint64_t> parse_uint(const std::string& s);

// A JSON string literal (UTF-8 passed through, control characters escaped).
std::string json_string(const std::string& s);
// Valid UTF-8 (JSON output puts other bytes in `..._base64`).
bool is_utf8(const std::string& s);
std::string base64(const std::string& s);

// Subcommands (commands.cc, bench.cc); each returns the exit code.
int cmd_execute(const Args& a);
int cmd_submit(const Args& a);
int cmd_wait(const Args& a);
int cmd_get(const Args& a);
int cmd_jobs(const Args& a);
int cmd_retry(const Args& a);
int cmd_cancel(const Args& a);
int cmd_handlers(const Args& a);
int cmd_stats(const Args& a);
int cmd_health(const Args& a);
int cmd_drain(const Args& a);
int cmd_reload(const Args& a);
int cmd_version(const Args& a);
int cmd_bench(const Args& a);
int cmd_token(const Args& a);  // token.cc: local, no daemon

// Payload and job options shared by execute, submit and bench; false (after
// printing the error) when an option is bad or the payload file unreadable.
bool job_from_args(const Args& a, std::size_t handler_pos, tpool::client::Job* job, int* exit);

}  // namespace tpoolctl
