/* The "libcrypto.so" CivetWeb loads (see libssl_shim.c): no code of its own,
 * only SONAME "libcrypto.so" and DT_NEEDED libcrypto.so.3, so CivetWeb's
 * dlopen("libcrypto.so") and dlsym() land in the real libcrypto. */
int tpool_civetweb_libcrypto_shim;
