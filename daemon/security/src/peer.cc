#include "tpool/security/peer.h"

#include <openssl/bio.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <arpa/inet.h>

#include <memory>

#include "tpool/security/token_store.h"

namespace tpool::security {
namespace {

std::string shown(const std::string& s) {
  // Certificate names are not secrets, but they are attacker-chosen: show a
  // bounded, printable prefix.
  std::string out;
  for (char c : s.substr(0, 80)) out += (c >= 0x20 && c < 0x7f) ? c : '?';
  return "'" + out + (s.size() > 80 ? "...'" : "'");
}

}  // namespace

Result<std::string> principal_from_peer(const PeerIdentity& peer, PrincipalFrom from) {
  if (from != PrincipalFrom::kCn)
    for (const auto& san : peer.sans)
      if (valid_principal(san)) return san;
  if (from != PrincipalFrom::kSan && valid_principal(peer.common_name)) return peer.common_name;
  std::string carried;
  for (const auto& san : peer.sans) carried += (carried.empty() ? "SANs " : ", ") + shown(san);
  if (!peer.common_name.empty())
    carried += (carried.empty() ? "" : " and ") + std::string("CN ") + shown(peer.common_name);
  if (carried.empty()) carried = "no SAN and no CN";
  const char* looked = from == PrincipalFrom::kCn    ? "its CN"
                       : from == PrincipalFrom::kSan ? "its SANs"
                                                     : "its SANs or CN";
  return Status::InvalidArgument(
      "the client certificate names no principal in " + std::string(looked) + " (it carries " +
      carried +
      "): issue it with a SAN or CN of 1 to 128 characters from A-Z a-z 0-9 _ . @ - "
      "(scripts/gen-test-certs.sh shows how)");
}

Result<PeerIdentity> peer_identity_from_pem(const std::string& pem) {
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(
      BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())), &BIO_free);
  if (!bio) return Status::InvalidArgument("out of memory reading a PEM certificate");
  std::unique_ptr<X509, decltype(&X509_free)> cert(
      PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr), &X509_free);
  if (!cert)
    return Status::InvalidArgument(
        "the text is not a PEM certificate (no '-----BEGIN CERTIFICATE-----' block OpenSSL "
        "could read)");
  PeerIdentity id;
  auto* names = static_cast<GENERAL_NAMES*>(
      X509_get_ext_d2i(cert.get(), NID_subject_alt_name, nullptr, nullptr));
  for (int i = 0; names != nullptr && i < sk_GENERAL_NAME_num(names); ++i) {
    const GENERAL_NAME* gn = sk_GENERAL_NAME_value(names, i);
    if (gn->type == GEN_DNS || gn->type == GEN_EMAIL || gn->type == GEN_URI) {
      const ASN1_IA5STRING* s = gn->d.ia5;
      id.sans.emplace_back(reinterpret_cast<const char*>(ASN1_STRING_get0_data(s)),
                           static_cast<std::size_t>(ASN1_STRING_length(s)));
    } else if (gn->type == GEN_IPADD) {
      const ASN1_OCTET_STRING* s = gn->d.iPAddress;
      char buf[INET6_ADDRSTRLEN] = "";
      int len = ASN1_STRING_length(s);
      if ((len == 4 || len == 16) &&
          inet_ntop(len == 4 ? AF_INET : AF_INET6, ASN1_STRING_get0_data(s), buf, sizeof buf))
        id.sans.emplace_back(buf);
    }
  }
  GENERAL_NAMES_free(names);
  X509_NAME* subject = X509_get_subject_name(cert.get());
  int idx = subject != nullptr ? X509_NAME_get_index_by_NID(subject, NID_commonName, -1) : -1;
  if (idx >= 0) {
    const ASN1_STRING* cn = X509_NAME_ENTRY_get_data(X509_NAME_get_entry(subject, idx));
    unsigned char* utf8 = nullptr;
    int len = ASN1_STRING_to_UTF8(&utf8, cn);
    if (len >= 0)
      id.common_name.assign(reinterpret_cast<char*>(utf8), static_cast<std::size_t>(len));
    OPENSSL_free(utf8);
  }
  return id;
}

}  // namespace tpool::security
