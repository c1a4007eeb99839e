#include "tpool/security/authorizer.h"

#include <array>
#include <string>
#include <utility>

namespace tpool::security {
namespace {

struct MethodInfo {
  Method method;
  const char* name;
  const char* path;
  Role role;
  bool names_handler;
};

// One row per RPC of proto/tpool/v1 (issue 16's role table).
constexpr std::array<MethodInfo, 15> kMethods{{
    {Method::kExecute, "Execute", "/tpool.v1.JobService/Execute", Role::kSubmit, true},
    {Method::kSubmit, "Submit", "/tpool.v1.JobService/Submit", Role::kSubmit, true},
    {Method::kSubmitBatch, "SubmitBatch", "/tpool.v1.JobService/SubmitBatch", Role::kSubmit, true},
    {Method::kStream, "Stream", "/tpool.v1.JobService/Stream", Role::kSubmit, true},
    {Method::kCancel, "Cancel", "/tpool.v1.JobService/Cancel", Role::kSubmit, false},
    {Method::kGet, "Get", "/tpool.v1.JobService/Get", Role::kRead, false},
    {Method::kWait, "Wait", "/tpool.v1.JobService/Wait", Role::kRead, false},
    {Method::kListHandlers, "ListHandlers", "/tpool.v1.JobService/ListHandlers", Role::kRead,
     false},
    {Method::kStats, "Stats", "/tpool.v1.AdminService/Stats", Role::kRead, false},
    {Method::kReloadPlugins, "ReloadPlugins", "/tpool.v1.AdminService/ReloadPlugins", Role::kAdmin,
     false},
    {Method::kDrain, "Drain", "/tpool.v1.AdminService/Drain", Role::kAdmin, false},
    {Method::kShutdown, "Shutdown", "/tpool.v1.AdminService/Shutdown", Role::kAdmin, false},
    {Method::kListJobs, "ListJobs", "/tpool.v1.JobService/ListJobs", Role::kRead, false},
    // Runs the retried job's handler: the allow-list is checked against it
    // once the job is found (jobs.cc, Caller::handler_refusal).
    {Method::kRetry, "Retry", "/tpool.v1.JobService/Retry", Role::kSubmit, true},
    {Method::kWaitBatch, "WaitBatch", "/tpool.v1.JobService/WaitBatch", Role::kRead, false},
}};

const MethodInfo* info(Method m) noexcept {
  for (const auto& i : kMethods)
    if (i.method == m) return &i;
  return nullptr;
}

}  // namespace

const char* to_string(Method m) noexcept {
  const MethodInfo* i = info(m);
  return i != nullptr ? i->name : "unknown";
}

Method method_from_path(std::string_view path) noexcept {
  for (const auto& i : kMethods)
    if (path == i.path) return i.method;
  return Method::kUnknown;
}

Role required_role(Method m) noexcept {
  const MethodInfo* i = info(m);
  // kUnknown: the strongest role, and check() refuses it before asking.
  return i != nullptr ? i->role : Role::kAdmin;
}

bool names_handler(Method m) noexcept {
  const MethodInfo* i = info(m);
  return i != nullptr && i->names_handler;
}

Status Authorizer::check(std::string_view principal, Method method,
                         std::string_view handler) const {
  const std::string who = "principal '" + std::string(principal) + "'";
  if (method == Method::kUnknown)
    return Status::InvalidArgument(who +
                                   " called a method no role grants: only the methods of "
                                   "tpool.v1.JobService and tpool.v1.AdminService are authorised");
  const PrincipalEntry* e = store_ != nullptr ? store_->find(principal) : nullptr;
  if (e == nullptr)
    return Status::InvalidArgument(who + " has no line in the token file" +
                                   (store_ != nullptr ? " " + store_->origin() : std::string()) +
                                   ", so it has no roles: add one (docs/security.md)");
  const Role need = required_role(method);
  if (!e->roles.has(need))
    return Status::InvalidArgument(who + " may not call " + to_string(method) +
                                   ": it needs the role '" + to_string(need) + "' and has " +
                                   (e->roles.empty() ? "none" : "'" + e->roles.to_string() + "'") +
                                   "; add the role to its line in the token file");
  if (names_handler(method) && !handler.empty() && !e->allows_handler(handler))
    return Status::InvalidArgument(who + " may not run handler '" + std::string(handler) + "' (" +
                                   to_string(method) +
                                   "): it is not in the principal's handler allow-list; add it "
                                   "to field 3 of its line in the token file");
  return Status::Ok();
}

}  // namespace tpool::security
