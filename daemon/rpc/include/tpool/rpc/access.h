// tpool::rpc::Access: who is calling, and may they (issue 16; docs/security.md,
// "Authentication"). Every reactor of JobService and AdminService asks it
// first; the answers become UNAUTHENTICATED or PERMISSION_DENIED through the
// one table (convert.h).
//
//   auth off (no token file)      every caller may call everything
//   admin Unix socket, no token   the caller is the service user (the socket
//                                 is 0600): admin, with every role
//   a bearer token                TokenStore::authenticate -> the principal
//                                 (auth on; with auth off the header is ignored)
//   a verified client certificate principal_from_peer -> the principal
//   none of these                 UNAUTHENTICATED
//
// then Authorizer::check(principal, method, handler): PERMISSION_DENIED with
// its sentence. A call keeps the token file's snapshot it started with
// (TokenFile (2)), with one exception: a Stream outlives reloads, so before it
// runs each message it asks reloaded_since() and, after a reload, is admitted
// again under the new file (stream.cc, S11). A revoked token or a removed role
// ends the stream at its next message; a changed allow-list applies to it.
// Every other call ends soon enough that a SIGHUP changes only the calls that
// start after it.
//
// Tokens never appear in a status message or a log line: the messages are
// TokenStore's and Authorizer's, which never contain one.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "tpool/security/authorizer.h"
#include "tpool/security/peer.h"
#include "tpool/security/token_store.h"
//
#include <grpcpp/support/status.h>

namespace grpc {
class CallbackServerContext;
}

namespace tpool::rpc {

struct AccessConfig {
  // The token file (owned by the daemon, outlives the services); nullptr:
  // auth is off.
  const security::TokenFile* tokens = nullptr;
  security::PrincipalFrom principal_from = security::PrincipalFrom::kSanThenCn;
  // The admin listener's Unix socket (mode 0600): a caller without a token is
  // the service user and may call everything.
  bool local_socket_is_admin = false;
};

// The caller of one call, once admitted.
class Caller {
 public:
  // Everything allowed (auth off, or the service user on the admin socket).
  static Caller unrestricted() { return Caller(); }
  Caller(std::string principal, std::shared_ptr<const security::TokenStore> store)
      : principal_(std::move(principal)), store_(std::move(store)) {}

  // "" if the caller may run `handler` through `method` (Execute, Submit,
  // and each item of SubmitBatch and Stream); else the sentence saying why
  // not (PERMISSION_DENIED).
  std::string handler_refusal(security::Method method, std::string_view handler) const;
  const std::string& principal() const noexcept { return principal_; }
  // The token file snapshot it was admitted under (nullptr: unrestricted).
  const security::TokenStore* admitted_under() const noexcept { return store_.get(); }

 private:
  Caller() = default;
  std::string principal_;  // empty: unrestricted
  std::shared_ptr<const security::TokenStore> store_;
};

// The outcome of Access::admit: a Caller, or the status to end the call with.
struct Admission {
  std::optional<grpc::Status> refused;
  Caller caller = Caller::unrestricted();
};

class Access {
 public:
  Access() = default;  // auth off
  explicit Access(AccessConfig config) : config_(config) {}

  // Authenticates the call and checks that its principal has the method's
  // role (and, when `handler` is given, the handler's allow-list).
  Admission admit(grpc::CallbackServerContext* ctx, security::Method method,
                  std::string_view handler = {}) const;

  bool auth_on() const noexcept { return config_.tokens != nullptr; }
  // Whether the token file was reloaded since `caller` was admitted: its
  // admission may no longer hold. False for an unrestricted caller (auth off,
  // or the service user on the admin socket): nothing to revoke.
  bool reloaded_since(const Caller& caller) const;

 private:
  AccessConfig config_;
};

}  // namespace tpool::rpc
