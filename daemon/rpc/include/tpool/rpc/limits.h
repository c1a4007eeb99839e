// tpool::rpc's limits, as plain C++ (no gRPC): daemon/server translates its
// config into them (server/src/config.cc, DaemonConfig::rpc_limits).
#pragma once

#include <cstdint>

namespace tpool::rpc {

// The daemon's values come from the [server] section (docs/configuration.md);
// these defaults serve tests and embedders.
struct RpcLimits {
  std::uint64_t max_streams = 1024;
  std::uint64_t stream_window = 4096;  // jobs per Stream call: in flight or result unsent
  // gRPC's send limit: no reply (a ResultBatch, a JobResult) is built larger.
  std::uint64_t max_message_bytes = 4u << 20;
  // Bytes of finished-but-unsent results one Stream call may hold before it
  // stops taking jobs and reading (server.stream_buffer_bytes).
  std::uint64_t stream_buffer_bytes = 16u << 20;
};

// Room kept in every reply for what is not a result's own bytes (the gRPC
// frame, the ResultBatch and JobResult field headers). Picked by hand: the
// envelope is tens of bytes; 16 KiB leaves room for the result's message and
// fields added later. server.max_output_bytes must leave it (config check).
inline constexpr std::uint64_t kReplyHeadroomBytes = 16u << 10;

}  // namespace tpool::rpc
