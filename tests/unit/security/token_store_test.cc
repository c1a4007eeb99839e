// The token file: format, hashing, refusals, reload (token_store.h).
#include "tpool/security/token_store.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

namespace tpool::security {
namespace {

// A fixed vector of the documented format: salt 00 01 .. 0f, secret text of
// 64 '0' digits, SHA-256(salt bytes || secret text) computed with Python's
// hashlib. Breaking the format (hashing the decoded bytes, swapping salt and
// secret) breaks this test.
constexpr char kVectorLine[] =
    "vec:submit::000102030405060708090a0b0c0d0e0f:"
    "465c115b0637508ae0cde79b9e9cce812b948fcc9e5e7f043e04328d5b21e37c";
const std::string kVectorToken = "vec." + std::string(64, '0');

std::shared_ptr<const TokenStore> parse_ok(const std::string& text) {
  auto r = TokenStore::parse(text, "tokens.txt");
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? r.value() : nullptr;
}

TEST(TokenStore, KnownVectorAuthenticates) {
  auto store = parse_ok(kVectorLine);
  ASSERT_NE(store, nullptr);
  auto who = store->authenticate(kVectorToken);
  ASSERT_TRUE(who.ok()) << who.status().message();
  EXPECT_EQ(who.value(), "vec");
}

TEST(TokenStore, MadeLineRoundTrips) {
  auto t = make_token_line("ci-runner", RoleSet(3), {"sha256", "echo", "echo"});
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ(t.value().token.rfind("ci-runner.", 0), 0u);
  EXPECT_EQ(t.value().token.size(), std::string("ci-runner.").size() + 64);
  // The line stores no part of the secret.
  EXPECT_EQ(t.value().line.find(t.value().token.substr(10)), std::string::npos);
  EXPECT_EQ(t.value().line.rfind("ci-runner:submit,read:echo,sha256:", 0), 0u) << t.value().line;
  auto store = parse_ok("# made by the test\n" + t.value().line + "\n");
  ASSERT_NE(store, nullptr);
  auto who = store->authenticate(t.value().token);
  ASSERT_TRUE(who.ok()) << who.status().message();
  EXPECT_EQ(who.value(), "ci-runner");
  const PrincipalEntry* e = store->find("ci-runner");
  ASSERT_NE(e, nullptr);
  EXPECT_TRUE(e->allows_handler("echo"));
  EXPECT_FALSE(e->allows_handler("sleep"));
  // Two tokens for the same principal differ (fresh secret and salt).
  auto t2 = make_token_line("ci-runner", RoleSet(3), {});
  ASSERT_TRUE(t2.ok());
  EXPECT_NE(t.value().token, t2.value().token);
}

TEST(TokenStore, WrongOrMalformedTokensAreRefusedWithoutEchoingThem) {
  auto store = parse_ok(std::string(kVectorLine) + "\ncert-only:read:::\n");
  ASSERT_NE(store, nullptr);
  std::string flipped = kVectorToken;
  flipped.back() = '1';
  const std::string upper = "vec." + std::string(63, '0') + "A";
  for (const std::string& bad :
       {flipped, upper, std::string("vec"), std::string(""), std::string("."),
        "nobody." + std::string(64, '0'), "cert-only." + std::string(64, '0'), std::string(64, '0'),
        kVectorToken + "0"}) {
    auto r = store->authenticate(bad);
    EXPECT_FALSE(r.ok()) << "accepted '" << bad << "'";
    if (!bad.empty() && bad != ".") {
      EXPECT_EQ(r.status().message().find(bad), std::string::npos) << r.status().message();
    }
  }
}

struct BadLine {
  const char* text;
  const char* expect;  // part of the message
  const char* secret;  // must not appear in the message ("" for none)
};

TEST(TokenStore, BadLinesNameFileLineAndFieldButNoSecret) {
  const std::string salt = "000102030405060708090a0b0c0d0e0f";
  const std::string hash(64, 'a');
  const BadLine cases[] = {
      {"alice:submit", "has 2 fields", ""},
      {"alice.0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", "has 1 field ",
       "0123456789abcdef0123"},
      {"al ice:submit:::", "principal (field 1", ""},
      {"alice:submit,root:::", "unknown role 'root'", ""},
      {"alice:submit:bad/name::", "handler name in field 3", ""},
      {"alice:submit::00zz:", "both be set or both be empty", ""},
      {"alice:submit::zz0102030405060708090a0b0c0d0e0f:aaaa", "salt (field 4) must be 32 hex",
       "zz0102030405060708090a0b0c0d0e0f"},
      {"alice:submit::000102030405060708090a0b0c0d0e0f:deadbeefdeadbeef",
       "hash (field 5) must be 64 hex digits (SHA-256), it has 16", "deadbeefdeadbeef"},
  };
  for (const auto& c : cases) {
    std::string text = "# header\n\n" + std::string(c.text) + "\n";
    auto r = TokenStore::parse(text, "/etc/tpoold/tokens");
    ASSERT_FALSE(r.ok()) << c.text;
    const std::string& m = r.status().message();
    EXPECT_EQ(m.rfind("/etc/tpoold/tokens:3: ", 0), 0u) << m;
    EXPECT_NE(m.find(c.expect), std::string::npos) << m;
    if (*c.secret != 0) {
      EXPECT_EQ(m.find(c.secret), std::string::npos) << m;
    }
  }
  auto dup = TokenStore::parse("a:read:::\n# x\na:submit:::\n", "t");
  ASSERT_FALSE(dup.ok());
  EXPECT_NE(dup.status().message().find("t:3: principal 'a' is already defined on line 1"),
            std::string::npos)
      << dup.status().message();
}

TEST(TokenStore, CommentsBlankLinesCrlfAndWildcards) {
  auto store = parse_ok(
      "# a comment\r\n\r\n   # indented comment\n  ops : read,admin : * : : \r\nb:submit:echo:: ");
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->size(), 2u);
  const PrincipalEntry* ops = store->find("ops");
  ASSERT_NE(ops, nullptr);
  EXPECT_EQ(ops->roles.to_string(), "read,admin");
  EXPECT_TRUE(ops->handlers.empty());
  EXPECT_FALSE(ops->has_token);
  EXPECT_EQ(ops->line, 4);
  EXPECT_EQ(store->find("nobody"), nullptr);
}

class TempDir : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/tpool-security-test.XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::system(("rm -rf '" + dir_ + "'").c_str()); }
  std::string write(const std::string& name, const std::string& text, mode_t mode = 0600) {
    std::string path = dir_ + "/" + name;
    std::ofstream(path, std::ios::trunc) << text;
    ::chmod(path.c_str(), mode);
    return path;
  }
  std::string dir_;
};

using TokenFileTest = TempDir;

TEST_F(TokenFileTest, RefusesAFileOthersMayWriteAndAMissingOne) {
  auto p = write("tokens", kVectorLine, 0666);
  auto r = TokenStore::load(p);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("chmod go-w " + p), std::string::npos);
  auto missing = TokenFile::open(dir_ + "/none");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("cannot be read"), std::string::npos);
}

TEST_F(TokenFileTest, ReloadSwapsSnapshotsAndKeepsTheOldOneOnError) {
  auto t_alice = make_token_line("alice", RoleSet(1), {});
  auto t_bob = make_token_line("bob", RoleSet(2), {});
  ASSERT_TRUE(t_alice.ok() && t_bob.ok());
  auto path = write("tokens", t_alice.value().line + "\n");
  auto file = TokenFile::open(path);
  ASSERT_TRUE(file.ok()) << file.status().message();
  auto first = file.value()->snapshot();
  EXPECT_TRUE(first->authenticate(t_alice.value().token).ok());

  write("tokens", t_bob.value().line + "\n");  // alice revoked, bob added
  ASSERT_TRUE(file.value()->reload().ok());
  auto second = file.value()->snapshot();
  EXPECT_FALSE(second->authenticate(t_alice.value().token).ok());
  EXPECT_TRUE(second->authenticate(t_bob.value().token).ok());
  // (inv 2) a snapshot taken before the reload is unchanged.
  EXPECT_TRUE(first->authenticate(t_alice.value().token).ok());

  write("tokens", t_bob.value().line + "\nbroken line\n");
  Status s = file.value()->reload();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find(path + ":2: "), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("unchanged"), std::string::npos) << s.message();
  // (inv 3) the failed reload left the bob snapshot installed.
  EXPECT_EQ(file.value()->snapshot(), second);
}

// The constant-time comparison, by inspection: the only place token-derived
// bytes are compared is detail::digests_equal, which is CRYPTO_memcmp. This
// test fails if someone compares digests some other way in the store.
TEST(TokenStore, DigestsAreComparedOnlyWithCryptoMemcmp) {
  auto read = [](const char* name) {
    std::ifstream in(std::string(TPOOL_SECURITY_SRC_DIR) + "/" + name);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  };
  const std::string store = read("token_store.cc"), crypto = read("crypto.cc");
  ASSERT_FALSE(store.empty());
  EXPECT_NE(store.find("detail::digests_equal(d, e->digest)"), std::string::npos);
  EXPECT_EQ(store.find("memcmp"), std::string::npos);
  EXPECT_EQ(store.find("d == "), std::string::npos);
  EXPECT_NE(crypto.find("return CRYPTO_memcmp(a.data(), b, a.size()) == 0;"), std::string::npos);
}

TEST(Roles, ParseAndPrint) {
  auto r = parse_roles(" admin , submit");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.value().to_string(), "submit,admin");
  EXPECT_FALSE(parse_roles("submit,Admin").ok());
  EXPECT_TRUE(parse_roles("").value().empty());
}

}  // namespace
}  // namespace tpool::security
