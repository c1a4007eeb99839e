// The principal of a TLS client certificate. The gRPC glue (daemon/rpc) reads
// the peer's subject alternative names and common name from the call's
// AuthContext ("x509_subject_alternative_name", "x509_common_name") and hands
// them over as plain strings; this file decides which one names the caller.
#pragma once

#include <string>
#include <vector>

#include "tpool/common/status.h"

namespace tpool::security {

struct PeerIdentity {
  std::vector<std::string> sans;  // DNS names, e-mail addresses, URIs, IPs, in certificate order
  std::string common_name;        // the subject's CN; empty when absent
};

enum class PrincipalFrom : std::uint8_t {
  kSanThenCn,  // the first SAN that is a valid principal name, else the CN (default)
  kSan,        // only SANs
  kCn,         // only the CN
};

// The principal name, or an error naming what the certificate carried (the
// names are not secrets) and what a principal may look like.
Result<std::string> principal_from_peer(const PeerIdentity& peer,
                                        PrincipalFrom from = PrincipalFrom::kSanThenCn);

// The SANs (DNS, e-mail, URI, IP) and CN of a PEM certificate, read with
// OpenSSL: for tests and for tools; the daemon gets them from gRPC.
Result<PeerIdentity> peer_identity_from_pem(const std::string& pem);

}  // namespace tpool::security
