// Linked into the integration tests whose processes speak TLS through gRPC
// (cmake/TpoolTesting.cmake, tpool_test_without_openssl_atexit): OpenSSL's
// exit-time cleanup is turned off before anything initialises OpenSSL, as
// tpoolctl's main() does (client/tpoolctl/main.cc says why: the cleanup frees
// OpenSSL's thread-local blocks while gRPC's threads may still be exiting,
// which then free them again). Under ASan that was a double free, or a
// LeakSanitizer report of 904 bytes from CRYPTO_zalloc, at the exit of a test
// process that had passed.
#include <openssl/crypto.h>

namespace {

// A static initialiser: it runs before main(), so before gRPC initialises
// OpenSSL (on its first channel or server).
const bool kOpensslNoAtexit = OPENSSL_init_crypto(OPENSSL_INIT_NO_ATEXIT, nullptr) == 1;

}  // namespace
