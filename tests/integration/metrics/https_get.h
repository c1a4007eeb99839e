// An HTTPS GET on loopback for the metrics TLS tests (issue 16, item 6):
// OpenSSL verifying the server against a CA file and the address 127.0.0.1,
// with an optional highest protocol version (to check that older ones are
// refused).
#pragma once

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <signal.h>

#include <string>

#include "metrics_test_util.h"

namespace tpool::testing {

struct HttpsReply {
  bool handshake = false;  // the TLS handshake (and the certificate check) succeeded
  HttpReply http;          // status 0: no reply
};

inline HttpsReply https_get(int port, const std::string& target, const std::string& ca_file,
                            const std::string& auth = "", int max_version = 0) {
  HttpsReply out;
  // A daemon that drops the connection must fail the check, not kill the test.
  ::signal(SIGPIPE, SIG_IGN);
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  if (ctx == nullptr) return out;
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
  SSL_CTX_set_min_proto_version(ctx, max_version != 0 ? TLS1_VERSION : TLS1_2_VERSION);
  if (max_version != 0) {
    SSL_CTX_set_max_proto_version(ctx, max_version);
    SSL_CTX_set_security_level(ctx, 0);  // let the client offer TLS 1.0/1.1 at all
  }
  if (SSL_CTX_load_verify_locations(ctx, ca_file.c_str(), nullptr) != 1) {
    SSL_CTX_free(ctx);
    return out;
  }
  BIO* bio = BIO_new_ssl_connect(ctx);
  SSL* ssl = nullptr;
  BIO_get_ssl(bio, &ssl);
  X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), "127.0.0.1");
  const std::string host = "127.0.0.1:" + std::to_string(port);
  BIO_set_conn_hostname(bio, host.c_str());
  if (BIO_do_connect(bio) == 1 && BIO_do_handshake(bio) == 1 &&
      SSL_get_verify_result(ssl) == X509_V_OK) {
    out.handshake = true;
    std::string req = "GET " + target + " HTTP/1.0\r\nHost: 127.0.0.1\r\n";
    if (!auth.empty()) req += "Authorization: Basic " + base64(auth) + "\r\n";
    req += "\r\n";
    BIO_write(bio, req.data(), static_cast<int>(req.size()));
    std::string all;
    char buf[65536];
    for (int n; (n = BIO_read(bio, buf, sizeof buf)) > 0;) all.append(buf, static_cast<size_t>(n));
    if (all.rfind("HTTP/", 0) == 0) {
      out.http.status = std::atoi(all.c_str() + all.find(' ') + 1);
      const auto head_end = all.find("\r\n\r\n");
      if (head_end != std::string::npos) out.http.body = all.substr(head_end + 4);
    }
  }
  ERR_clear_error();
  BIO_free_all(bio);
  SSL_CTX_free(ctx);
  return out;
}

}  // namespace tpool::testing
