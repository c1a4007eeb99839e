// scripts/gen-test-certs.sh makes what it promises (openssl verify), and the
// client certificate's principal reads back through peer_identity_from_pem.
#include <gtest/gtest.h>

#include <cstdlib>

#include "test_certs.h"
#include "tpool/security/peer.h"

namespace tpool::security {
namespace {

int verify(const tpool::testing::TestCerts& c, const std::string& ca, const std::string& cert) {
  std::string cmd =
      "openssl verify -CAfile '" + c.path(ca) + "' '" + c.path(cert) + "' > /dev/null 2>&1";
  return std::system(cmd.c_str());
}

TEST(GenTestCerts, EachFileVerifiesAsDocumented) {
  tpool::testing::TestCerts certs("alice@example.org");
  ASSERT_TRUE(certs.ok()) << certs.read("gen.log");
  EXPECT_EQ(verify(certs, "ca.pem", "server.pem"), 0);
  EXPECT_EQ(verify(certs, "ca.pem", "client.pem"), 0);
  EXPECT_NE(verify(certs, "ca.pem", "expired.pem"), 0);    // signed by the CA, but expired
  EXPECT_NE(verify(certs, "ca.pem", "untrusted.pem"), 0);  // another CA's
  EXPECT_EQ(verify(certs, "untrusted-ca.pem", "untrusted.pem"), 0);
  std::string cmd =
      "openssl x509 -in '" + certs.path("expired.pem") + "' -noout -checkend 0 > /dev/null 2>&1";
  EXPECT_NE(std::system(cmd.c_str()), 0) << "expired.pem is still valid";

  auto client = peer_identity_from_pem(certs.read("client.pem"));
  ASSERT_TRUE(client.ok()) << client.status().message();
  EXPECT_EQ(client.value().common_name, "alice@example.org");
  ASSERT_EQ(client.value().sans.size(), 1u);
  EXPECT_EQ(client.value().sans[0], "alice@example.org");
  EXPECT_EQ(principal_from_peer(client.value()).value(), "alice@example.org");

  auto server = peer_identity_from_pem(certs.read("server.pem"));
  ASSERT_TRUE(server.ok()) << server.status().message();
  EXPECT_EQ(server.value().sans, (std::vector<std::string>{"127.0.0.1", "localhost"}));
  EXPECT_EQ(server.value().common_name, "localhost");
}

TEST(GenTestCerts, RefusesABadPrincipal) {
  std::string cmd = std::string(TPOOL_GEN_TEST_CERTS) + " /tmp/never-made 'a b' > /dev/null 2>&1";
  EXPECT_NE(std::system(cmd.c_str()), 0);
}

}  // namespace
}  // namespace tpool::security
