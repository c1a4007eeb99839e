// Roles and handler allow-lists (authorizer.h).
#include "tpool/security/authorizer.h"

#include <gtest/gtest.h>

#include <string>

namespace tpool::security {
namespace {

Authorizer make() {
  auto store = TokenStore::parse(
      "submitter:submit:::\n"
      "reader:read:::\n"
      "root:submit,read,admin:::\n"
      "echo-only:submit:echo,upper::\n"
      "nobody::::\n",
      "tokens.txt");
  EXPECT_TRUE(store.ok()) << store.status().message();
  return Authorizer(store.value());
}

TEST(Authorizer, EachMethodNeedsItsRole) {
  const Authorizer a = make();
  const struct {
    Method m;
    const char* role;
  } table[] = {
      {Method::kExecute, "submit"},     {Method::kSubmit, "submit"},
      {Method::kSubmitBatch, "submit"}, {Method::kStream, "submit"},
      {Method::kCancel, "submit"},      {Method::kGet, "read"},
      {Method::kWait, "read"},          {Method::kListHandlers, "read"},
      {Method::kStats, "read"},         {Method::kReloadPlugins, "admin"},
      {Method::kDrain, "admin"},        {Method::kShutdown, "admin"},
      {Method::kListJobs, "read"},      {Method::kRetry, "submit"},
      {Method::kWaitBatch, "read"},
  };
  for (const auto& row : table) {
    EXPECT_STREQ(to_string(required_role(row.m)), row.role) << to_string(row.m);
    EXPECT_TRUE(a.check("root", row.m).ok()) << to_string(row.m);
    const char* holder = std::string(row.role) == "submit" ? "submitter"
                         : std::string(row.role) == "read" ? "reader"
                                                           : nullptr;
    for (const char* p : {"submitter", "reader", "nobody"}) {
      Status s = a.check(p, row.m);
      if (holder != nullptr && std::string(p) == holder) {
        EXPECT_TRUE(s.ok()) << s.message();
        continue;
      }
      ASSERT_FALSE(s.ok()) << p << " " << to_string(row.m);
      EXPECT_NE(s.message().find("needs the role '" + std::string(row.role) + "'"),
                std::string::npos)
          << s.message();
      EXPECT_NE(s.message().find(to_string(row.m)), std::string::npos) << s.message();
    }
  }
}

TEST(Authorizer, SubmitPrincipalCallingShutdownIsDeniedNamingAdmin) {
  Status s = make().check("submitter", Method::kShutdown);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message(),
            "principal 'submitter' may not call Shutdown: it needs the role 'admin' and has "
            "'submit'; add the role to its line in the token file");
}

TEST(Authorizer, HandlerAllowList) {
  const Authorizer a = make();
  EXPECT_TRUE(a.check("echo-only", Method::kExecute, "echo").ok());
  EXPECT_TRUE(a.check("echo-only", Method::kStream, "upper").ok());
  for (Method m : {Method::kExecute, Method::kSubmit, Method::kSubmitBatch, Method::kStream}) {
    Status s = a.check("echo-only", m, "sleep");
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.message().find("may not run handler 'sleep'"), std::string::npos) << s.message();
  }
  // No allow-list: every handler. Cancel names no handler.
  EXPECT_TRUE(a.check("submitter", Method::kExecute, "sleep").ok());
  EXPECT_TRUE(a.check("echo-only", Method::kCancel).ok());
  // The call-level Stream check (no item yet) passes; items are checked one by one.
  EXPECT_TRUE(a.check("echo-only", Method::kStream).ok());
}

TEST(Authorizer, UnknownPrincipalAndUnknownMethod) {
  const Authorizer a = make();
  Status s = a.check("mallory", Method::kGet);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("no line in the token file tokens.txt"), std::string::npos);
  Status u = a.check("root", method_from_path("/grpc.health.v1.Health/Check"));
  ASSERT_FALSE(u.ok());
  EXPECT_NE(u.message().find("no role grants"), std::string::npos);
  EXPECT_FALSE(Authorizer(nullptr).check("root", Method::kGet).ok());
}

TEST(Authorizer, MethodPaths) {
  EXPECT_EQ(method_from_path("/tpool.v1.JobService/Execute"), Method::kExecute);
  EXPECT_EQ(method_from_path("/tpool.v1.JobService/Stream"), Method::kStream);
  EXPECT_EQ(method_from_path("/tpool.v1.AdminService/Stats"), Method::kStats);
  EXPECT_EQ(method_from_path("/tpool.v1.AdminService/Shutdown"), Method::kShutdown);
  EXPECT_EQ(method_from_path("/tpool.v1.JobService/Shutdown"), Method::kUnknown);
  EXPECT_EQ(method_from_path(""), Method::kUnknown);
}

}  // namespace
}  // namespace tpool::security
