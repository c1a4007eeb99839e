// Linked into the integration tests whose processes speak TLS through gRPC
// (cmake/TpoolTesting.cmake, tpool_test_without_openssl_atexit): OpenSSL's
// exit-time cleanup is turned off before anything initialises OpenSSL, as
// tpoolctl's main() does (tpool/security/process.h says why). Under ASan a
// test process that had passed could end in a double free, or a
// LeakSanitizer report of 904 bytes from CRYPTO_zalloc, at its exit.
#include "tpool/security/process.h"

namespace {

// A static initialiser: it runs before main(), so before gRPC initialises
// OpenSSL (on its first channel or server).
const bool kOpensslStateKept = tpool::security::keep_openssl_state_at_exit();

}  // namespace
