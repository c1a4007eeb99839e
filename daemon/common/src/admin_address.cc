#include "tpool/common/admin_address.h"

#include <unistd.h>

#include <cstdlib>

namespace tpool {
namespace {

// An absolute path from the environment, or "".
std::string env_dir(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || v[0] != '/') return "";
  std::string s(v);
  if (auto colon = s.find(':'); colon != std::string::npos) s.resize(colon);
  while (s.size() > 1 && s.back() == '/') s.pop_back();
  return s;
}

}  // namespace

std::string default_admin_address() {
  if (std::string d = env_dir("RUNTIME_DIRECTORY"); !d.empty()) return "unix:" + d + "/admin.sock";
  if (std::string d = env_dir("XDG_RUNTIME_DIR"); !d.empty()) {
    return "unix:" + d + "/tpoold/admin.sock";
  }
  return "unix:/tmp/tpoold-" + std::to_string(::getuid()) + "/admin.sock";
}

std::vector<std::string> admin_address_candidates() {
  std::vector<std::string> out{default_admin_address()};
  auto add = [&out](std::string a) {
    for (const auto& o : out) {
      if (o == a) return;
    }
    out.push_back(std::move(a));
  };
  if (std::string d = env_dir("XDG_RUNTIME_DIR"); !d.empty())
    add("unix:" + d + "/tpoold/admin.sock");
  add("unix:/run/tpoold/admin.sock");
  add("unix:/tmp/tpoold-" + std::to_string(::getuid()) + "/admin.sock");
  return out;
}

}  // namespace tpool
