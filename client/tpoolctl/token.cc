// tpoolctl token create: a new bearer token and the token-file line that
// stores its salted hash (tpool/security/token_store.h). Runs locally; talks to
// no daemon. The token goes to stdout exactly once and nowhere else: not to
// stderr, not to a log, not into the line.
#include <iostream>
#include <sstream>

#include "cli.h"
#include "tpool/security/token_store.h"

namespace tpoolctl {
namespace {

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string part; std::getline(in, part, ',');)
    if (!part.empty()) out.push_back(part);
  return out;
}

}  // namespace

int cmd_token(const Args& a) {
  if (a.positional[0] != "create")
    return fail(a, kUsage,
                "unknown token subcommand '" + a.positional[0] +
                    "'; the only one is `tpoolctl token create --principal NAME --roles ROLES`");
  auto principal = a.value("--principal");
  auto roles_text = a.value("--roles");
  if (!principal || !roles_text)
    return fail(a, kUsage,
                "needs --principal NAME and --roles ROLES (submit, read, admin, "
                "comma-separated)");
  auto roles = tpool::security::parse_roles(*roles_text);
  if (!roles.ok()) return fail(a, kUsage, roles.status().message());
  std::vector<std::string> handlers;
  if (auto h = a.value("--handlers"); h && *h != "*") handlers = split_commas(*h);
  auto made = tpool::security::make_token_line(*principal, roles.value(), handlers);
  if (!made.ok()) return fail(a, kUsage, made.status().message());
  if (a.json) {
    std::cout << "{\"principal\":" << json_string(*principal)
              << ",\"token\":" << json_string(made.value().token)
              << ",\"line\":" << json_string(made.value().line) << "}\n";
  } else {
    std::cerr << "tpoolctl token: line 1 on stdout is the token (shown only now: store it where "
                 "the client reads it, e.g. a 0600 file for --token-file); line 2 is the line to "
                 "append to the daemon's token file (it holds only a salted hash)\n";
    std::cout << made.value().token << "\n" << made.value().line << "\n";
  }
  return kOk;
}

}  // namespace tpoolctl
