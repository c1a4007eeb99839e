// tpool::Lane: which of the pool's two lanes a task (and a handler) runs on.
//
// Shared by the pool (which owns the lanes), the plugin host (a handler
// declares its lane) and the engine (which submits to it), so it lives here
// and neither of those depends on the other for it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace tpool {

// kDefault: short CPU work. kBlocking: work that may wait on I/O or sleep;
// it runs on the blocking lane's own workers (docs/algorithms.md, "Lanes").
enum class Lane : std::uint8_t { kDefault = 0, kBlocking = 1 };
inline constexpr std::size_t kLaneCount = 2;

constexpr std::string_view to_string(Lane l) noexcept {
  return l == Lane::kBlocking ? "blocking" : "default";
}

}  // namespace tpool
