// The state of one JobService.Stream call (stream.cc), and the edges it may
// take. The reactor moves it only through StreamReactor::transition(from,
// to), which checks both the current state and the edge (check_transition).
//
//              StartRead              OnReadDone(message)
//   kHeld  ----------------> kReading ------------------> kHeld
//    | | \  engine full                 OnReadDone(end or bad message)
//    | |  +--------------> kWaitingCapacity          kReading --> kInputClosed
//    | |   on_capacity <--+                  draining: kHeld --> kInputClosed
//    | +-- refused (max_streams) --> kFinished <-- kInputClosed (all reported)
//    |                                  ^
//    |   client gone (OnCancel, a failed write):
//    |     kReading -> kGoneReading --OnReadDone--> kGone
//    |     kWaitingCapacity -> kGoneWaitingCapacity --on_capacity--> kGone
//    +---- kHeld, kInputClosed -> kGone --(all reported)--> kFinished
//
// The one write outstanding (S2) is not part of the state: it may be
// outstanding in every state but kFinished (the call finishes only when no
// write is), so the reactor keeps it beside the state (writing_).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tpool::rpc {

// One line per state: what holds in it.
enum class StreamState : std::uint8_t {
  kHeld,                 // no read outstanding: the items of in_ wait to be submitted, or the
                         //   window is full (S3); a read starts when neither holds
  kReading,              // a read is outstanding: gRPC owns in_bytes_ (S2)
  kWaitingCapacity,      // the engine was full: its waiter list holds the stream (S4) until
                         //   on_capacity; the items of in_ wait
  kInputClosed,          // nothing more is read (the client half-closed, a bad message (S7), or
                         //   draining): the jobs report and their results are written
  kGoneReading,          // the client is gone (OnCancel, a failed write); its read is still
                         //   outstanding; results are dropped
  kGoneWaitingCapacity,  // the client is gone; the engine still holds the stream as a waiter
  kGone,                 // the client is gone, nothing of the input is outstanding: results
                         //   are dropped while the jobs report
  kFinished,             // Finish was called: only OnDone and the jobs' references remain (S4)
};

constexpr std::string_view to_string(StreamState s) noexcept {
  switch (s) {
    case StreamState::kHeld:
      return "held";
    case StreamState::kReading:
      return "reading";
    case StreamState::kWaitingCapacity:
      return "waiting for capacity";
    case StreamState::kInputClosed:
      return "input closed";
    case StreamState::kGoneReading:
      return "client gone, read outstanding";
    case StreamState::kGoneWaitingCapacity:
      return "client gone, waiting for capacity";
    case StreamState::kGone:
      return "client gone";
    case StreamState::kFinished:
      return "finished";
  }
  return "unknown";
}

// The client has gone away (results are dropped).
constexpr bool client_gone(StreamState s) noexcept {
  return s == StreamState::kGoneReading || s == StreamState::kGoneWaitingCapacity ||
         s == StreamState::kGone;
}

// The edges of the diagram above, and no others.
constexpr bool legal_transition(StreamState from, StreamState to) noexcept {
  using S = StreamState;
  switch (from) {
    case S::kHeld:
      return to == S::kReading || to == S::kWaitingCapacity || to == S::kInputClosed ||
             to == S::kGone || to == S::kFinished;
    case S::kReading:
      return to == S::kHeld || to == S::kInputClosed || to == S::kGoneReading;
    case S::kWaitingCapacity:
      return to == S::kHeld || to == S::kGoneWaitingCapacity;
    case S::kInputClosed:
      return to == S::kGone || to == S::kFinished;
    case S::kGoneReading:
    case S::kGoneWaitingCapacity:
      return to == S::kGone;
    case S::kGone:
      return to == S::kFinished;
    case S::kFinished:
      return false;
  }
  return false;
}

// nullopt when a stream in `now` may move from -> to; else the sentence that
// reports the bug.
inline std::optional<std::string> check_transition(StreamState now, StreamState from,
                                                   StreamState to) {
  if (now == from && legal_transition(from, to)) return std::nullopt;
  return "illegal Stream state transition " + std::string(to_string(from)) + " -> " +
         std::string(to_string(to)) + " (the stream is " + std::string(to_string(now)) +
         "): a bug in daemon/rpc/src/stream.cc; the call is left as it was";
}

}  // namespace tpool::rpc
