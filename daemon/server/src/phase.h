// tpool::server::Phase: where the daemon is in its lifecycle, and the one
// function that moves it (docs/operations.md, "Signals and lifecycle"):
//
//   starting --> serving --> draining --> stopping --> stopped
//       |                                                 ^
//       +------------- start failed (exit 1) -------------+
//
// Thread safety:
//  (P1) Only the main thread (Daemon::run and what it calls) moves the phase,
//       and only through PhaseCell::transition(from, to), which checks that
//       the daemon is in `from` and that from -> to is an edge above. Any
//       other move is a bug: it is refused (the phase stays) and reported
//       with a sentence naming both phases and the one the daemon is in.
//  (P2) Other threads (AdminService.Stats on gRPC threads) only read it, to
//       report it: relaxed loads; a stale phase is fine there, nothing is
//       read or decided on its strength.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>

#include "tpool/common/status.h"

namespace tpool::server {

// One line per phase: what holds in it.
enum class Phase : std::uint8_t {
  kStarting,  // plugins load, the pool starts, gRPC binds; nothing is served yet
  kServing,   // gRPC takes jobs, health SERVING; SIGHUP reloads plugins
  kDraining,  // health NOT_SERVING, new jobs UNAVAILABLE; queued and running jobs end
  kStopping,  // the gRPC server shuts down (open calls end), then the pool stops
  kStopped,   // nothing is served and no job runs; run() returns (or _Exit(3))
};

constexpr std::string_view to_string(Phase p) noexcept {
  switch (p) {
    case Phase::kStarting:
      return "starting";
    case Phase::kServing:
      return "serving";
    case Phase::kDraining:
      return "draining";
    case Phase::kStopping:
      return "stopping";
    case Phase::kStopped:
      return "stopped";
  }
  return "unknown";
}

// The edges of the diagram above, and no others.
constexpr bool legal_transition(Phase from, Phase to) noexcept {
  switch (from) {
    case Phase::kStarting:
      return to == Phase::kServing || to == Phase::kStopped;
    case Phase::kServing:
      return to == Phase::kDraining;
    case Phase::kDraining:
      return to == Phase::kStopping;
    case Phase::kStopping:
      return to == Phase::kStopped;
    case Phase::kStopped:
      return false;
  }
  return false;
}

class PhaseCell {
 public:
  // (P2) For reports only.
  Phase load() const noexcept { return phase_.load(std::memory_order_relaxed); }

  // (P1) Moves from `from` to `to`; an error sentence (and no move) when the
  // daemon is not in `from` or from -> to is not an edge of the lifecycle.
  Status transition(Phase from, Phase to) {
    const Phase now = phase_.load(std::memory_order_relaxed);  // (P1) only this thread writes
    if (now != from || !legal_transition(from, to)) {
      return Status::InvalidArgument(
          "illegal daemon phase transition " + std::string(to_string(from)) + " -> " +
          std::string(to_string(to)) + " (the daemon is " + std::string(to_string(now)) +
          "): a bug in daemon/server; the lifecycle is starting -> serving -> draining -> "
          "stopping -> stopped (docs/operations.md)");
    }
    phase_.store(to, std::memory_order_relaxed);  // (P2) readers only report it
    return Status::Ok();
  }

 private:
  std::atomic<Phase> phase_{Phase::kStarting};
};

}  // namespace tpool::server
