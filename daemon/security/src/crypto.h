// The few OpenSSL libcrypto calls of the security component, behind plain
// types so the rest of it (and its header) never sees OpenSSL.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace tpool::security::detail {

using Digest = std::array<std::uint8_t, 32>;

// SHA-256(salt || secret).
Digest salted_sha256(const std::uint8_t* salt, std::size_t salt_len, std::string_view secret);

// Constant time in the length (CRYPTO_memcmp): the time taken does not depend
// on where the first differing byte is. The only comparison of secrets-derived
// bytes in this component goes through here.
bool digests_equal(const Digest& a, const std::uint8_t* b) noexcept;

// false when the system's random source failed (RAND_bytes).
bool random_bytes(std::uint8_t* out, std::size_t n) noexcept;

// Overwrites with zeros in a way the compiler may not drop (OPENSSL_cleanse).
void cleanse(void* p, std::size_t n) noexcept;

std::string hex_encode(const std::uint8_t* data, std::size_t n);
// Exactly 2 * n hex digits (either case) -> n bytes; false otherwise.
bool hex_decode(std::string_view hex, std::uint8_t* out, std::size_t n) noexcept;

}  // namespace tpool::security::detail
