// tpool::client::Stream: a pipelined session over JobService.Stream.
//
// The caller sends jobs (one upstream message per send()); results come back
// as jobs finish, in completion order (match them by Job::tag), either to a
// callback or to a queue the caller drains with next().
//
// Thread safety:
//  (1) send() and close_send() may be called from any thread; writes are
//      serialised by one mutex, so one upstream message is never interleaved
//      with another.
//  (2) One reader thread, owned by the Stream, reads every downstream message.
//      In callback mode it calls StreamOptions::on_result for each result, one
//      at a time and never concurrently with itself; in queue mode it appends
//      to the queue under the queue mutex and notifies next().
//  (3) finish() joins the reader thread: after it returns no callback runs.
//      The destructor calls cancel() then finish() if the caller did not.
//
// Backpressure: when tpoold's stream window is full it stops reading, HTTP/2
// flow control fills up, and send() blocks until jobs finish. The session's
// deadline bounds the whole call, so send() never blocks past it.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "tpool/client/client.h"

namespace tpool::client {

struct StreamOptions {
  // Callback mode when set: runs on the stream's reader thread (2). Queue
  // mode when empty: read results with Stream::next().
  std::function<void(const JobResult&)> on_result{};
  // Optional, either mode: runs once on the reader thread after the last
  // result, when the call has ended (finish() then has its status at once).
  std::function<void()> on_end{};
  // The deadline of the whole session; 0: ClientOptions::default_deadline.
  std::chrono::milliseconds deadline{0};
};

class Stream {
 public:
  virtual ~Stream() = default;
  // Sends the jobs as one upstream message. false once the call has ended
  // (the daemon closed it, the deadline passed, or close_send() was called);
  // finish() then says why.
  virtual bool send(const std::vector<Job>& jobs) = 0;
  bool send(const Job& job) { return send(std::vector<Job>{job}); }
  // No more jobs; the results of those sent still arrive.
  virtual void close_send() = 0;
  // Queue mode: the next result; nullopt when `timeout` passes first or the
  // call has ended and every result was read (ended() tells which).
  virtual std::optional<JobResult> next(std::chrono::milliseconds timeout) = 0;
  // True once the call has ended and, in queue mode, its queue is empty.
  virtual bool ended() const = 0;
  // Closes the sending half, waits for the remaining results (delivered to the
  // callback, or queued) and returns the call's status: OK when every result
  // arrived.
  virtual Error finish() = 0;
  // Ends the call at once; jobs still running are cancelled by the daemon.
  virtual void cancel() = 0;
};

}  // namespace tpool::client
