#include "tpool/rpc/access.h"
//
#include <grpcpp/grpcpp.h>

#include "convert.h"

namespace tpool::rpc {
namespace {

// "Bearer <token>" -> the token (the scheme is case-insensitive, RFC 6750).
std::optional<std::string_view> bearer(std::string_view value) {
  constexpr std::string_view kScheme = "bearer ";
  if (value.size() <= kScheme.size()) return std::nullopt;
  for (std::size_t i = 0; i < kScheme.size(); ++i) {
    char c = value[i];
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    if (c != kScheme[i]) return std::nullopt;
  }
  value.remove_prefix(kScheme.size());
  while (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  if (value.empty()) return std::nullopt;
  return value;
}

Admission refuse(Refusal r, std::string sentence) {
  Admission a;
  a.refused = to_status(r, std::move(sentence));
  return a;
}

}  // namespace

std::string Caller::handler_refusal(security::Method method, std::string_view handler) const {
  if (principal_.empty()) return "";
  Status s = security::Authorizer(store_).check(principal_, method, handler);
  return s.ok() ? std::string() : s.message();
}

bool Access::reloaded_since(const Caller& caller) const {
  if (config_.tokens == nullptr || caller.admitted_under() == nullptr) return false;
  return config_.tokens->snapshot().get() != caller.admitted_under();
}

Admission Access::admit(grpc::CallbackServerContext* ctx, security::Method method,
                        std::string_view handler) const {
  if (config_.tokens == nullptr) return {};  // auth off
  const auto& md = ctx->client_metadata();
  const auto [first, last] = md.equal_range("authorization");
  std::shared_ptr<const security::TokenStore> store = config_.tokens->snapshot();
  std::string principal;
  if (first != last) {
    if (std::next(first) != last) {
      return refuse(Refusal::kUnauthenticated,
                    "the call carries more than one authorization header; send one: "
                    "'authorization: Bearer <token>'");
    }
    // The header's value is never echoed: it is (or was meant to be) a token.
    auto token = bearer(std::string_view(first->second.data(), first->second.size()));
    if (!token) {
      return refuse(Refusal::kUnauthenticated,
                    "the authorization header is not 'Bearer <token>'; send the token that "
                    "`tpoolctl token create` printed (tpoolctl --token-file)");
    }
    auto who = store->authenticate(*token);
    if (!who.ok()) return refuse(Refusal::kUnauthenticated, who.status().message());
    principal = std::move(who).value();
  } else if (config_.local_socket_is_admin) {
    return {};  // the service user on the 0600 admin socket
  } else if (auto ac = ctx->auth_context(); ac != nullptr && ac->IsPeerAuthenticated()) {
    security::PeerIdentity id;
    for (const auto& v : ac->FindPropertyValues("x509_subject_alternative_name")) {
      id.sans.emplace_back(v.data(), v.size());
    }
    for (const auto& v : ac->FindPropertyValues("x509_common_name")) {
      id.common_name.assign(v.data(), v.size());
    }
    auto who = security::principal_from_peer(id, config_.principal_from);
    if (!who.ok()) return refuse(Refusal::kUnauthenticated, who.status().message());
    principal = std::move(who).value();
  } else {
    return refuse(Refusal::kUnauthenticated,
                  std::string("the call to ") + security::to_string(method) +
                      " carries no credentials and tpoold requires them (auth.token_file is "
                      "set); send 'authorization: Bearer <token>' (tpoolctl --token-file) or a "
                      "client certificate the server trusts");
  }
  Status s = security::Authorizer(store).check(principal, method, handler);
  if (!s.ok()) return refuse(Refusal::kPermissionDenied, s.message());
  Admission a;
  a.caller = Caller(std::move(principal), std::move(store));
  return a;
}

}  // namespace tpool::rpc
