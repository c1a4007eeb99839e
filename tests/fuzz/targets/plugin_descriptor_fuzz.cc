// Fuzz target (c): the plugin host's validation of a plugin descriptor,
// through its public API (Host::load of a directory holding one plugin,
// descriptor_plugin.c, whose entry builds the descriptor from these bytes).
// Each run is a real load: scan, checks, staging copy, dlopen, descriptor
// validation, init, registry; then the Host and the library are dropped.
// Properties: a load either succeeds with at least one handler or fails with
// at least one LoadError whose message is a non-empty sentence.
#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "fuzz_temp_dir.h"
#include "tpool/plugin_host/host.h"

extern "C" {
__attribute__((visibility("default"))) const unsigned char* tpool_fuzz_descriptor_data = nullptr;
__attribute__((visibility("default"))) std::size_t tpool_fuzz_descriptor_size = 0;
}

namespace {

const std::string& staging_dir() {
  static const std::string dir = [] {
    std::string d = tpool::fuzz::temp_dir_removed_at_exit("tpool-fuzz-staging");
    if (d.empty()) std::abort();
    return d;
  }();
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace ph = tpool::plugin_host;
  tpool_fuzz_descriptor_data = data;
  tpool_fuzz_descriptor_size = size;
  ph::HostConfig config;
  config.dirs = {TPOOL_FUZZ_PLUGIN_DIR};
  config.staging_dir = staging_dir();
  config.log_sink = [](ph::LogLevel, std::string_view, std::string_view) {};
  std::vector<ph::LoadError> errors;
  auto host = ph::Host::load(config, &errors);
  static const bool verbose = std::getenv("TPOOL_FUZZ_VERBOSE") != nullptr;  // seed authoring
  if (verbose) {
    std::fprintf(
        stderr, "%s\n",
        host.ok()
            ? ("loaded " + std::to_string(host.value()->list().size()) + " handler(s)").c_str()
            : host.status().message().c_str());
  }
  if (host.ok()) {
    if (host.value()->list().empty() || !errors.empty()) std::abort();
  } else {
    if (errors.empty()) std::abort();
    for (const auto& e : errors)
      if (e.message.empty()) std::abort();
  }
  tpool_fuzz_descriptor_data = nullptr;
  tpool_fuzz_descriptor_size = 0;
  return 0;
}
