#include "crypto.h"
#include "tpool/security/process.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#include <climits>

namespace tpool::security::detail {

Digest salted_sha256(const std::uint8_t* salt, std::size_t salt_len, std::string_view secret) {
  Digest out{};
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  unsigned len = 0;
  bool ok = ctx != nullptr && EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr) == 1 &&
            EVP_DigestUpdate(ctx, salt, salt_len) == 1 &&
            EVP_DigestUpdate(ctx, secret.data(), secret.size()) == 1 &&
            EVP_DigestFinal_ex(ctx, out.data(), &len) == 1 && len == out.size();
  EVP_MD_CTX_free(ctx);
  // A failed digest must never match a stored one: fill with a pattern no
  // SHA-256 output is expected to take, and let the comparison fail.
  if (!ok) out.fill(0);
  return out;
}

bool digests_equal(const Digest& a, const std::uint8_t* b) noexcept {
  return CRYPTO_memcmp(a.data(), b, a.size()) == 0;
}

bool random_bytes(std::uint8_t* out, std::size_t n) noexcept {
  return n <= static_cast<std::size_t>(INT_MAX) && RAND_bytes(out, static_cast<int>(n)) == 1;
}

void cleanse(void* p, std::size_t n) noexcept {
  OPENSSL_cleanse(p, n);
}

std::string hex_encode(const std::uint8_t* data, std::size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string s(2 * n, '0');
  for (std::size_t i = 0; i < n; ++i) {
    s[2 * i] = kDigits[data[i] >> 4];
    s[2 * i + 1] = kDigits[data[i] & 0xf];
  }
  return s;
}

namespace {
int hex_value(char c) noexcept {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}
}  // namespace

bool hex_decode(std::string_view hex, std::uint8_t* out, std::size_t n) noexcept {
  if (hex.size() != 2 * n) return false;
  for (std::size_t i = 0; i < n; ++i) {
    int hi = hex_value(hex[2 * i]), lo = hex_value(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    out[i] = static_cast<std::uint8_t>(hi << 4 | lo);
  }
  return true;
}

}  // namespace tpool::security::detail

namespace tpool::security {

bool keep_openssl_state_at_exit() noexcept {
  return OPENSSL_init_crypto(OPENSSL_INIT_NO_ATEXIT, nullptr) == 1;
}

}  // namespace tpool::security
