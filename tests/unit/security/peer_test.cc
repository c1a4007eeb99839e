// The principal of a client certificate (peer.h).
#include "tpool/security/peer.h"

#include <gtest/gtest.h>

namespace tpool::security {
namespace {

TEST(PrincipalFromPeer, FirstValidSanThenCn) {
  PeerIdentity p{{"spiffe://example.org/ci", "ci.example.org", "ops@example.org"}, "ci-cn"};
  auto r = principal_from_peer(p);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r.value(), "ci.example.org");  // the URI has ':' and '/': not a principal name
  EXPECT_EQ(principal_from_peer(p, PrincipalFrom::kCn).value(), "ci-cn");
  EXPECT_EQ(principal_from_peer(p, PrincipalFrom::kSan).value(), "ci.example.org");
  PeerIdentity cn_only{{}, "build-farm"};
  EXPECT_EQ(principal_from_peer(cn_only).value(), "build-farm");
  EXPECT_FALSE(principal_from_peer(cn_only, PrincipalFrom::kSan).ok());
}

TEST(PrincipalFromPeer, NoUsableNameSaysWhatTheCertificateCarried) {
  PeerIdentity p{{"spiffe://x/y"}, "Jane Doe"};
  auto r = principal_from_peer(p);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("SANs 'spiffe://x/y' and CN 'Jane Doe'"), std::string::npos)
      << r.status().message();
  auto none = principal_from_peer(PeerIdentity{});
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("no SAN and no CN"), std::string::npos);
  PeerIdentity weird{{}, std::string("a\x01") + std::string(200, 'b')};
  auto w = principal_from_peer(weird);
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find("'a?bbb"), std::string::npos);
  EXPECT_NE(w.status().message().find("...'"), std::string::npos);
}

TEST(PeerIdentityFromPem, RejectsNonPem) {
  EXPECT_FALSE(peer_identity_from_pem("not a certificate").ok());
  EXPECT_FALSE(peer_identity_from_pem("").ok());
}

}  // namespace
}  // namespace tpool::security
