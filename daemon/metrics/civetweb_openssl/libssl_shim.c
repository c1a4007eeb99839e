/* The "libssl.so" CivetWeb loads for /metrics over TLS (docs/metrics.md,
 * "TLS"). Debian 12's libcivetweb1 (1.15, built for the OpenSSL 1.1 API)
 * dlopen()s "libssl.so" and "libcrypto.so" by these unversioned names and
 * looks each function up with dlsym(). Two problems with the system's
 * OpenSSL 3:
 *  - the unversioned names exist only with libssl-dev installed;
 *  - OpenSSL 3 exports no SSL_get_peer_certificate (a macro for
 *    SSL_get1_peer_certificate since 3.0). CivetWeb marks it optional, leaves
 *    a NULL pointer, and calls it for every TLS connection: tpoold died on the
 *    first HTTPS scrape (seen with a test program, 2026-12-05).
 * tpoold dlopen()s this file by its absolute path before it starts the
 * Exposer. Its SONAME is "libssl.so", so CivetWeb's dlopen("libssl.so")
 * finds it already loaded (glibc matches a loaded object's DT_SONAME) and
 * dlsym() on it searches this object, then its DT_NEEDED libssl.so.3 and
 * libcrypto.so.3: the real OpenSSL, plus the one function below. */
typedef struct ssl_st SSL;
typedef struct x509_st X509;

/* Declared here, not through <openssl/ssl.h>: there the old name is a macro
 * for the new one, which would make this definition recursive. */
extern X509* SSL_get1_peer_certificate(const SSL* s);

/* Same semantics: the 1.1 function also returned a new reference, which
 * CivetWeb frees with X509_free. */
X509* SSL_get_peer_certificate(const SSL* s) {
  return SSL_get1_peer_certificate(s);
}
