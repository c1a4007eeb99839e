// Fuzz target (d): the token file parser, then authentication and
// authorisation against whatever it accepted (tpool/security/token_store.h).
// Properties checked beyond "no crash, no sanitizer report":
//  - a parse error names the origin and a line ("fuzz:<n>: ...");
//  - a token built from the input never authenticates a principal the store
//    does not have, and authenticates only with a line that has a token.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "tpool/security/authorizer.h"
#include "tpool/security/token_store.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace sec = tpool::security;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto parsed = sec::TokenStore::parse(text, "fuzz");
  if (!parsed.ok()) {
    if (parsed.status().message().rfind("fuzz:", 0) != 0) std::abort();
    return 0;
  }
  const auto& store = parsed.value();
  // Every line of the input, and its last field, as a candidate token.
  sec::Authorizer authz(store);
  std::size_t start = 0;
  for (int n = 0; n < 64 && start <= text.size(); ++n) {
    std::size_t end = text.find('\n', start);
    std::string_view line =
        text.substr(start, end == std::string_view::npos ? text.size() : end - start);
    for (std::string_view candidate :
         {line, line.substr(line.rfind(':') == std::string_view::npos ? 0 : line.rfind(':') + 1)}) {
      auto who = store->authenticate(candidate);
      if (who.ok()) {
        const sec::PrincipalEntry* e = store->find(who.value());
        if (e == nullptr || !e->has_token) std::abort();
      }
      auto method = static_cast<sec::Method>(candidate.empty() ? 0 : candidate[0] % 13);
      (void)authz.check(candidate.substr(0, candidate.find('.')), method, candidate);
    }
    if (end == std::string_view::npos) break;
    start = end + 1;
  }
  return 0;
}
