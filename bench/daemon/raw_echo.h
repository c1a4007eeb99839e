// The ceiling: a raw gRPC echo speaking tpoold's own messages (JobService),
// with no pool, no engine and no plugin: Execute copies the payload into the
// result; Stream answers each JobBatch with one ResultBatch of the same size.
#pragma once

#include <string>

namespace tpool::bench {

// Serves on 127.0.0.1:0, writes the port to port_file, runs until SIGTERM.
int run_raw_echo_server(const std::string& port_file);

}  // namespace tpool::bench
