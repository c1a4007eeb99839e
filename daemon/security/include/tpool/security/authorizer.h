// tpool::security::Authorizer: may this principal call this method (with this
// handler)? Roles (issue 16, docs/security.md "Roles"):
//
//   submit  JobService Execute, Submit, SubmitBatch, Stream, Cancel
//   read    JobService Get, Wait, ListHandlers; AdminService Stats
//   admin   AdminService ReloadPlugins, Drain, Shutdown
//
// and, for the methods that name a handler, the principal's handler
// allow-list (empty: every handler).
//
// A refusal is a Status whose sentence names the principal, the method and the
// missing role or handler. The two failures the rpc layer maps to gRPC codes
// come from two different calls: TokenStore::authenticate (no or wrong
// credentials: UNAUTHENTICATED) and Authorizer::check (known principal, not
// allowed: PERMISSION_DENIED). tpool::StatusCode has no code of its own for
// either yet; both use kInvalidArgument and the caller knows which call failed.
#pragma once

#include <memory>
#include <string_view>

#include "tpool/common/status.h"
#include "tpool/security/token_store.h"

namespace tpool::security {

enum class Method : std::uint8_t {
  kUnknown = 0,
  kExecute,
  kSubmit,
  kSubmitBatch,
  kStream,
  kCancel,
  kGet,
  kWait,
  kListHandlers,
  kStats,
  kReloadPlugins,
  kDrain,
  kShutdown,
  kListJobs,  // appended (issue 17)
  kRetry,
  kWaitBatch,  // appended (issue 17: waiting for a SubmitBatch's jobs in one call)
};
// "Execute", "Stats", ... ("unknown" for kUnknown).
const char* to_string(Method m) noexcept;
// "/tpool.v1.JobService/Execute" (a gRPC method path) -> kExecute; any other
// path -> kUnknown, which no role grants.
Method method_from_path(std::string_view path) noexcept;
// The role a method needs.
Role required_role(Method m) noexcept;
// Whether the method runs a named handler (the allow-list applies).
bool names_handler(Method m) noexcept;

class Authorizer {
 public:
  explicit Authorizer(std::shared_ptr<const TokenStore> store) : store_(std::move(store)) {}

  // OK, or why not. `handler` is the job's handler for Execute, Submit, and
  // each item of SubmitBatch and Stream; empty otherwise (and for Stream's
  // call-level check before any item arrives).
  Status check(std::string_view principal, Method method, std::string_view handler = {}) const;

 private:
  std::shared_ptr<const TokenStore> store_;
};

}  // namespace tpool::security
