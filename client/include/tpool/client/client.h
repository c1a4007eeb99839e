// tpool::client: the C++ client of tpoold (proto/tpool/v1), over the
// generated gRPC stubs.
//
// One Client owns one gRPC channel (and, given several addresses, one more per
// address) and is safe to use from many threads at once (gRPC channels and
// stubs are thread-safe; the Client's only mutable state is the map of which
// replica answers at which address, behind a mutex).
//
// Every call has a deadline: the CallOptions::deadline given to the call, or
// ClientOptions::default_deadline. A call never blocks past it.
//
// Retries (CallOptions::max_attempts) happen only where a second attempt
// cannot run a job twice:
//  - jobs (execute, submit, submit_batch) only when every job carries an
//    idempotency key (the daemon answers a repeated key with the first job),
//  - reads and cancels (wait, get, cancel, handlers, stats, health), which
//    change nothing or are idempotent by nature,
// and only on UNAVAILABLE (the connection failed or the daemon is draining:
// the request was not accepted). drain, reload, stream are never retried.
// Backoff is exponential with full jitter, and never sleeps past the deadline.
//
// Several replicas (docs/operations.md, "Scaling out"): ClientOptions::address
// may list several host:port, comma-separated ("10.0.0.1:50051,10.0.0.2:50051")
// or be a DNS name with several records ("dns:///tpoold-headless:50051"); new
// jobs are spread over the replicas with gRPC's round_robin policy. Each
// replica owns the jobs it accepted: submit_ref() returns a JobRef naming the
// owner, and wait/get/cancel of a JobRef go to it. A replica that is asked
// about another's job answers FAILED_PRECONDITION naming the owner; given a
// list of addresses, the client follows to the owner (it asks each address
// once, and remembers which replica answered where). A DNS name gives it no
// addresses to follow: use the headless Service's records, or a list.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "tpool/v1/admin.pb.h"
#include "tpool/v1/jobs.pb.h"

namespace grpc {
class Channel;
}  // namespace grpc

namespace tpool::client {

// A failed call: the gRPC status code (google.rpc.Code numbering) and the
// daemon's sentence. ok() is code 0.
class Error {
 public:
  Error() = default;
  Error(int code, std::string message, std::chrono::milliseconds retry_after = {})
      : code_(code), message_(std::move(message)), retry_after_(retry_after) {}

  bool ok() const noexcept { return code_ == 0; }
  int code() const noexcept { return code_; }
  const std::string& message() const noexcept { return message_; }
  // RESOURCE_EXHAUSTED: how long the daemon asked the client to wait
  // (the `retry-after-ms` trailer); 0 when it did not say.
  std::chrono::milliseconds retry_after() const noexcept { return retry_after_; }
  // "NOT_FOUND", "UNAVAILABLE", ... for code().
  std::string code_name() const;
  // "NOT_FOUND: no handler named 'x' is loaded ..." in one line.
  std::string to_string() const;

 private:
  int code_ = 0;
  std::string message_;
  std::chrono::milliseconds retry_after_{0};
};

// std::expected in C++20 clothing: a value or an Error.
template <class T>
class Result {
 public:
  Result(T value) : v_(std::move(value)) {}      // NOLINT(google-explicit-constructor)
  Result(Error error) : v_(std::move(error)) {}  // NOLINT(google-explicit-constructor)
  bool ok() const noexcept { return v_.index() == 0; }
  const T& value() const& { return std::get<0>(v_); }
  T& value() & { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  const T& operator*() const& { return value(); }
  const T* operator->() const { return &value(); }
  // The error; an OK Error when ok().
  Error error() const { return ok() ? Error() : std::get<1>(v_); }

 private:
  std::variant<T, Error> v_;
};

enum class Lane { kUnspecified = 0, kDefault = 1, kBlocking = 2 };

enum class JobState {
  kUnspecified = 0,  // a stream item rejected before it became a job (see JobResult::code)
  kQueued = 1,
  kRunning = 2,
  kSucceeded = 3,
  kFailed = 4,
  kCancelled = 5,
  kTimedOut = 6,
  kScheduled = 7,  // waiting for its time: a delay, or a retry's backoff
};
// "SUCCEEDED", "FAILED", ... (the proto names without the JOB_STATE_ prefix).
const char* to_string(JobState s) noexcept;
const char* to_string(Lane l) noexcept;

// One job to run (tpool.v1.JobRequest).
struct Job {
  std::string handler{};
  std::string payload{};
  Lane lane = Lane::kUnspecified;
  // The job's own limit from acceptance; 0 = none.
  std::chrono::milliseconds timeout{0};
  // Makes execute/submit safe to retry (see the header comment).
  std::string idempotency_key{};
  std::map<std::string, std::string> labels{};
  // submit_batch and stream: copied into the result to match it.
  std::uint64_t tag = 0;
  // Retries (docs/api.md, "Retries and delayed jobs"): the most attempts (0:
  // one) and the backoff's base and cap (full jitter).
  std::uint32_t max_attempts = 0;
  std::chrono::milliseconds backoff_base{0};
  std::chrono::milliseconds backoff_cap{0};
  // Run the first attempt this long after acceptance (JOB_STATE_SCHEDULED until then).
  std::chrono::milliseconds delay{0};
  // Acknowledged only once on disk, run again after a crash (docs/api.md,
  // "Durable jobs"); needs tpoold's job store.
  bool durable = false;
};

// The end of a job (tpool.v1.JobResult).
struct JobResult {
  std::uint64_t job_id = 0;
  JobState state = JobState::kUnspecified;
  std::string output;
  std::string message;
  std::uint64_t tag = 0;
  int code = 0;  // stream items rejected before becoming a job: their status code
  std::chrono::microseconds wait{0};
  std::chrono::microseconds run{0};
  std::string replica;         // the replica that ran it (empty for stream items rejected up front)
  std::uint32_t attempts = 0;  // attempts that started (> 1: retried)
  bool succeeded() const noexcept { return state == JobState::kSucceeded; }
};

// submit_batch: one item per job, in request order.
struct BatchItem {
  std::uint64_t job_id = 0;  // 0 when rejected
  Error error;               // ok() when accepted
  std::uint64_t tag = 0;
  std::string replica;  // the replica that owns the job (empty when rejected)
};

// A submitted job across replicas: its id and the replica (tpoold's
// server.replica_id) that owns it. The id means nothing to another replica.
struct JobRef {
  std::uint64_t job_id = 0;
  std::string replica;
};

// A job's state now (tpool.v1.JobStatus).
struct JobStatus {
  std::uint64_t job_id = 0;
  std::string handler;
  JobState state = JobState::kUnspecified;
  Lane lane = Lane::kUnspecified;
  std::chrono::microseconds wait{0};
  std::chrono::microseconds run{0};
  double progress = 0;
  std::string progress_message;
  std::string message;
  std::map<std::string, std::string> labels{};
  std::uint64_t accepted_unix_ms = 0;
  std::uint32_t attempts = 0;
  std::vector<std::string> attempt_messages{};  // each ended attempt's, oldest first
};

// list_jobs: filters (empty: everything) and the page (JobService.ListJobs).
struct ListJobsRequest {
  std::vector<JobState> states{};  // any of these
  std::string handler{};
  std::string label_key{};
  std::string label_value{};    // with label_key: that value only
  std::uint32_t page_size = 0;  // 0: 100; at most 1000
  std::string page_token{};     // a previous page's next_page_token
};
struct JobPage {
  std::vector<JobStatus> jobs{};
  std::string next_page_token{};  // empty: the last page
};

struct HandlerInfo {
  std::string name;
  std::string plugin;
  std::string plugin_version;
  std::string path;
  std::string description;
  Lane lane_hint = Lane::kUnspecified;
  std::string isolation;  // "in_process" or "process" (empty from an older tpoold)
};

enum class Health { kUnknown = 0, kServing = 1, kNotServing = 2 };
const char* to_string(Health h) noexcept;

struct DrainResult {
  bool drained = false;
  std::uint64_t finished = 0;
  std::uint64_t cancelled = 0;
};

struct ReloadResult {
  std::vector<HandlerInfo> handlers;
  std::string message;
};

// Transport security. Off = plaintext (tpoold's listener today). On = TLS with
// the given roots (empty: the system's), optionally a client certificate
// (mutual TLS), and a name to check the server's certificate against.
struct TlsOptions {
  bool enabled = false;
  std::string root_certs_pem;
  std::string cert_chain_pem;
  std::string private_key_pem;
  std::string server_name_override;
};

struct ClientOptions {
  // host:port, or any gRPC target ("unix:/run/tpoold.sock", "dns:///h:50051"),
  // or several replicas: IP:port,IP:port,... (IPv4 or [IPv6] literals), which
  // becomes gRPC's ipv4:/ipv6: target. Several addresses and dns: targets use
  // the round_robin load-balancing policy; one host:port keeps pick_first.
  // A Unix socket: "unix:/run/tpoold/admin.sock" (absolute path),
  // "unix:relative/path", "unix-abstract:name", or just an absolute path
  // ("/run/tpoold/admin.sock", taken as unix:). One socket, not a list.
  std::string address = "127.0.0.1:50051";
  TlsOptions tls;
  // A bearer token (`tpoolctl token create` prints one), sent with every call
  // as the metadata `authorization: Bearer <token>`. Never printed and never
  // part of an Error. It is sent only where nobody on the path can read it:
  // with TLS on, or to a unix: socket; to a plaintext TCP address only with
  // allow_insecure_token (e.g. behind a TLS-terminating proxy on the same
  // host). Otherwise every call fails with UNAUTHENTICATED before anything
  // is sent (token_transport_problem() says why).
  std::string bearer_token;
  bool allow_insecure_token = false;
  // The deadline of a call whose CallOptions leaves it at 0.
  std::chrono::milliseconds default_deadline{30'000};
  // Message size limit both ways (tpoold's server.max_message_bytes defaults to 4 MiB).
  int max_message_bytes = 64 << 20;
  // Attempts of a retryable call (1 = no retry), and the first backoff.
  int max_attempts = 3;
  std::chrono::milliseconds initial_backoff{50};
  // More channel arguments (grpc::ChannelArguments::SetInt), e.g.
  // {"grpc.keepalive_time_ms", 10000}.
  std::map<std::string, int> channel_args;
  // Sent with every call as metadata, e.g. {"authorization", "Bearer ..."}.
  std::map<std::string, std::string> metadata;
};

struct CallOptions {
  // 0: ClientOptions::default_deadline.
  std::chrono::milliseconds deadline{0};
  // 0: ClientOptions::max_attempts. Only retryable calls use it.
  int max_attempts = 0;
};

class Stream;
struct StreamOptions;

class Client {
 public:
  explicit Client(ClientOptions options = {});
  // A client over a channel the caller built (tests, custom credentials).
  Client(std::shared_ptr<grpc::Channel> channel, ClientOptions options = {});
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  const ClientOptions& options() const noexcept;

  // Submit and wait in one call. A job that ended is not an error, whatever
  // its state: the result says FAILED, CANCELLED or TIMED_OUT (the job's
  // timeout). Errors: INVALID_ARGUMENT, NOT_FOUND (unknown handler),
  // RESOURCE_EXHAUSTED, UNAVAILABLE (down or draining), DEADLINE_EXCEEDED (the
  // call's deadline passed), CANCELLED (the call was cancelled),
  // FAILED_PRECONDITION.
  Result<JobResult> execute(const Job& job, const CallOptions& call = {}) const;
  // execute without blocking: `done` runs once, on a gRPC thread.
  void execute_async(const Job& job, std::function<void(Result<JobResult>)> done,
                     const CallOptions& call = {}) const;
  // Accept a job and return its id at once; wait()/get() it later.
  Result<std::uint64_t> submit(const Job& job, const CallOptions& call = {}) const;
  // Many jobs in one call; items[i] answers jobs[i] (one bad job does not fail
  // the others).
  Result<std::vector<BatchItem>> submit_batch(const std::vector<Job>& jobs,
                                              const CallOptions& call = {}) const;
  // submit, returning the job's owner too: the ref to wait/get/cancel it by
  // when the client talks to several replicas.
  Result<JobRef> submit_ref(const Job& job, const CallOptions& call = {}) const;
  // The final result of a submitted job, whatever its state (a cancelled
  // job's result says CANCELLED); DEADLINE_EXCEEDED if the call's deadline
  // passes first (the job goes on).
  Result<JobResult> wait(std::uint64_t job_id, const CallOptions& call = {}) const;
  // By ref: sent to the owner (see the header comment); FAILED_PRECONDITION
  // naming the owner when no address answers for it, UNAVAILABLE when the
  // owner cannot be reached (a stopped replica's jobs are lost).
  Result<JobResult> wait(const JobRef& ref, const CallOptions& call = {}) const;
  // Many jobs in one call (JobService.WaitBatch, at most 10,000 ids): returns
  // when every one has ended, results[i] answering job_ids[i]. An id that
  // cannot be waited for is a result with a non-zero `code` (NOT_FOUND: unknown
  // or expired; RESOURCE_EXHAUSTED: its result did not fit in the reply, wait()
  // for it alone) and the call still succeeds. DEADLINE_EXCEEDED if the call's
  // deadline passes first (the jobs go on).
  Result<std::vector<JobResult>> wait_batch(const std::vector<std::uint64_t>& job_ids,
                                            const CallOptions& call = {}) const;
  // The same, sent to `replica`, the owner of every id (a SubmitBatch's items
  // all name the one replica that accepted them), as wait(const JobRef&).
  Result<std::vector<JobResult>> wait_batch(const std::string& replica,
                                            const std::vector<std::uint64_t>& job_ids,
                                            const CallOptions& call = {}) const;
  Result<JobStatus> get(const JobRef& ref, const CallOptions& call = {}) const;
  Result<JobState> cancel(const JobRef& ref, const CallOptions& call = {}) const;
  void wait_async(std::uint64_t job_id, std::function<void(Result<JobResult>)> done,
                  const CallOptions& call = {}) const;
  // By ref: finds the owner first (blocking, see wait(const JobRef&)), then
  // waits asynchronously there.
  void wait_async(const JobRef& ref, std::function<void(Result<JobResult>)> done,
                  const CallOptions& call = {}) const;
  Result<JobStatus> get(std::uint64_t job_id, const CallOptions& call = {}) const;
  // The job's state after the request (see tpool.v1.CancelReply).
  Result<JobState> cancel(std::uint64_t job_id, const CallOptions& call = {}) const;
  Result<std::vector<HandlerInfo>> handlers(const CallOptions& call = {}) const;
  // Retained jobs by state, handler and label, a page at a time (the dead
  // letters: FAILED, TIMED_OUT, CANCELLED).
  Result<JobPage> list_jobs(const ListJobsRequest& req, const CallOptions& call = {}) const;
  // Run a FAILED, TIMED_OUT or CANCELLED job again as a new job; its ref.
  // Not retried by the client (a second attempt could start a second job).
  Result<JobRef> retry(std::uint64_t job_id, const CallOptions& call = {}) const;
  // The daemon's full counters, as the versioned proto message (it grows with
  // the API; docs/api.md describes each field).
  Result<tpool::v1::StatsReply> stats(const CallOptions& call = {}) const;
  // grpc.health.v1 Check of the whole server.
  Result<Health> health(const CallOptions& call = {}) const;
  // Admin: stop accepting jobs and wait for the work in flight (timeout 0: the
  // daemon's drain_timeout_ms). Give the call a deadline longer than that.
  Result<DrainResult> drain(std::chrono::milliseconds timeout, const CallOptions& call = {}) const;
  Result<ReloadResult> reload(const CallOptions& call = {}) const;

  // A pipelined session (JobService.Stream); see stream.h.
  std::unique_ptr<Stream> stream(const StreamOptions& options) const;

  std::shared_ptr<grpc::Channel> channel() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Why bearer_token would not be sent with these options ("" when it would, or
// when there is no token): a sentence naming the address and what to do.
std::string token_transport_problem(const ClientOptions& options);
// Whether the address is a Unix socket (unix:, unix-abstract:, or a path).
bool is_unix_address(const std::string& address);
// Reads a token file: the token on its first line (surrounding whitespace
// dropped). A file that others can read is refused (chmod 600), as is an
// empty one. The Error never contains the file's contents.
Result<std::string> read_token_file(const std::string& path);

// Conversions to and from the wire types, for code that mixes the two.
tpool::v1::JobRequest to_proto(const Job& job);
JobResult from_proto(const tpool::v1::JobResult& r);
HandlerInfo from_proto(const tpool::v1::HandlerInfo& h);
JobStatus from_proto(const tpool::v1::JobStatus& s);

}  // namespace tpool::client
