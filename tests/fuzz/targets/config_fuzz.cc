// Fuzz target (b): tpoold's configuration parser (daemon/server/src/config.h,
// TOML text through toml++), then validate() and pool_config() on whatever it
// accepts. An exception escaping parse_config is a finding (libFuzzer reports
// it as a crash): the daemon's parser promises errors as Status.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "config.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto parsed = tpool::server::parse_config(text, "fuzz.toml");
  if (!parsed.ok()) {
    if (parsed.status().message().empty()) std::abort();
    return 0;
  }
  if (parsed.value().validate().ok()) (void)parsed.value().pool_config();
  return 0;
}
