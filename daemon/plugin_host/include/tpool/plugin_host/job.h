// What the plugin host needs from the daemon for one job, and what a handler
// call produces.
//
// The daemon implements JobServices once per job (cancellation, deadline,
// logging, progress and fan-out as nested pool tasks) and passes it to
// Host::invoke; the host adapts it to the C host table the plugin sees
// (plugins/include/tpool/plugin.h). No gRPC or protobuf types here: the daemon
// maps InvokeResult to its reply (and JobCode to a gRPC status) in daemon/rpc.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tpool::plugin_host {

// How a handler call ended. Values equal the C ABI's tpool_status codes.
enum class JobCode : std::int32_t {
  kOk = 0,
  kError = 1,             // the handler returned a failure (its own code is in plugin_status)
  kInvalidInput = 2,      // the handler said its input was malformed
  kCancelled = 3,         // cancelled (by the handler's return, or reported by the host)
  kDeadlineExceeded = 4,  // the deadline passed (idem)
  kOutputTooLarge = 5,    // the handler wrote more than HostConfig::max_output_bytes
  kInputTooLarge = 6,     // input over the handler's max_input_bytes: not called
  kUnknownHandler = 7,    // no handler of that name (fan-out children)
  kInternal = 8,          // a C++ exception escaped the handler, or the host failed
  kRetry = 9,             // the handler asked for its job to run again (ABI 1.1)
  kPermanent = 10,        // the handler said running again cannot help (ABI 1.1)
};
// Whether a job that failed with code may run again (when it has attempts
// left): kRetry, kError and kInternal may; the rest (input, output, handler
// lookups, kPermanent, and cancellation or deadlines) may not.
bool is_retryable(JobCode code) noexcept;

std::string_view to_string(JobCode code) noexcept;

// The code of a handler's failed return status (a TPOOL_STATUS_* other than
// OK; a status outside the ABI's list is kError), in process or in a runner.
JobCode code_of_status(std::int32_t status) noexcept;
// The one sentence for output over max_output_bytes; who names the handler
// and its plugin.
std::string output_too_large_message(const std::string& who, std::size_t attempted,
                                     std::size_t limit);

enum class LogLevel : std::int32_t { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

std::string_view to_string(LogLevel level) noexcept;

struct InvokeResult {
  JobCode code = JobCode::kOk;
  // The raw non-zero status the handler returned (0 when it returned OK or was
  // never called); a plugin-specific code outside tpool_status maps to kError.
  std::int32_t plugin_status = 0;
  // For a failure: a sentence for the caller (the plugin's, or the host's when
  // the host failed the job). May be set on success too.
  std::string message;
  std::string output;  // bytes, not text
  // Set by an IsolatedPlugin for what the host counts but did not see
  // itself (the call ran in a runner): the handler threw a C++ exception
  // (HostCounters::handler_exceptions), or returned OK after its job was
  // cancelled and this call claimed it (ignored_cancellation).
  bool threw = false;
  bool ignored_cancellation = false;
  // False when the handler was never called: an isolated job told to stop
  // (or past its deadline) while it waited in its runner's queue behind its
  // batch-mates (wire.h, W6). The engine ends it as a job that never started.
  bool started = true;

  bool ok() const noexcept { return code == JobCode::kOk; }
};

// The daemon's side of one job. Called from the thread running the handler
// (and, for is_cancelled/remaining, possibly from the handler's own helper
// threads), so every method must be thread-safe. Must outlive the invoke call.
class JobServices {
 public:
  virtual ~JobServices() = default;

  // True once the job is cancelled or its deadline has passed.
  virtual bool is_cancelled() const noexcept = 0;
  // Time left until the deadline; nullopt when the job has none. May be
  // negative or zero once passed (the host clamps for the plugin).
  virtual std::optional<std::chrono::nanoseconds> remaining() const noexcept = 0;
  // True when the deadline (not an explicit cancel) is why is_cancelled() is
  // true; lets the host report kDeadlineExceeded rather than kCancelled.
  virtual bool deadline_passed() const noexcept {
    auto r = remaining();
    return r.has_value() && r->count() <= 0;
  }
  // A log line of the running handler; the daemon adds job id and handler.
  virtual void log(LogLevel level, std::string_view message) noexcept = 0;
  // fraction in 0..1 (already clamped by the host); note may be empty.
  virtual void progress(double fraction, std::string_view note) noexcept = 0;
  // Fan-out: run one child job of `handler` per input, as nested jobs of this
  // one, and return when all have ended: one InvokeResult per input, in input
  // order. An unknown handler gives kUnknownHandler for every child. The
  // daemon runs them as pool tasks and waits with help_wait; a synchronous
  // implementation is valid too (tests).
  virtual std::vector<InvokeResult> run_children(std::string_view handler,
                                                 std::span<const std::string_view> inputs) = 0;
  // The host is about to count this call in ignored_cancellation (it
  // returned OK after cancellation): true if it should. A job whose handler
  // the daemon already counted (it overstayed its cancel grace) answers
  // false, so each call is counted once in
  // tpoold_handler_ignored_cancellation_total.
  virtual bool claim_ignored_cancellation() noexcept { return true; }
  // Which attempt of its job this call is, from 1 (tpool_host_api.attempt).
  virtual std::uint32_t attempt() const noexcept { return 1; }
};

}  // namespace tpool::plugin_host
