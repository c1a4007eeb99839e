// tpool::security: what a process that speaks TLS through gRPC sets up first.
#pragma once

namespace tpool::security {

// Turns off OpenSSL's exit-time cleanup (OPENSSL_INIT_NO_ATEXIT). That
// cleanup, an atexit handler, frees OpenSSL's thread-local blocks while
// gRPC's threads may still be exiting, and their thread-local destructors
// then free the same blocks again: a double free (or a LeakSanitizer report)
// at the exit of a process that did nothing wrong. Without it the process
// exits with OpenSSL's state intact and the kernel takes it back. Call it
// first in main (or from a static initialiser), before gRPC initialises
// OpenSSL; false if OpenSSL refused (then nothing changed). tpoolctl and the
// integration tests call it; tpoold was never seen to need it.
bool keep_openssl_state_at_exit() noexcept;

}  // namespace tpool::security
