// tpool::security::TokenStore: the principals of the token file, their roles,
// their handler allow-lists and the salted hashes of their bearer tokens, as
// one immutable snapshot. TokenFile keeps the current snapshot of a file and
// replaces it on reload() (SIGHUP).
//
// The file (docs/security.md, "The token file"), one principal per line:
//
//   # comment lines start with '#'; blank lines are ignored
//   ci-runner:submit,read:echo,sha256:<salt_hex>:<sha256_hex>
//   ops:read,admin:*:<salt_hex>:<sha256_hex>
//   build-farm.example.com:submit:::
//
//   field 1  principal: 1..128 of [A-Za-z0-9_.@-]
//   field 2  roles: comma-separated, each of submit, read, admin
//   field 3  handlers: comma-separated handler names, or '*' or empty for all
//   field 4  salt: 32 hex digits (16 random bytes), or empty
//   field 5  sha256: 64 hex digits, SHA-256(salt bytes || the token's secret part as
//            text, i.e. its 64 hex digits), or empty
//
// Fields 4 and 5 both empty: the principal has no token and authenticates only
// by its TLS client certificate (principal_from_peer, peer.h); the line still
// gives the certificate's principal its roles.
//
// A bearer token is "<principal>.<64 hex digits>" (make_token_line makes one):
// the principal part selects the line without trying every salt, the secret
// part is 32 random bytes. Only the secret's hash is stored; the comparison of
// hashes is CRYPTO_memcmp (constant time). Neither tokens nor the hash fields
// are ever put into a Status message.
//
// Thread safety:
//  (1) A TokenStore never changes after parse() returns it; any number of
//      threads may call its const members.
//  (2) TokenFile::snapshot() returns the current store; a caller keeps using
//      the store it got even while reload() installs a newer one (in-flight
//      calls finish under the policy they started with).
//  (3) TokenFile::reload() parses outside the lock and swaps the pointer under
//      it; a file that fails to parse leaves the current snapshot installed.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tpool/common/mutex.h"
#include "tpool/common/status.h"
#include "tpool/common/thread_annotations.h"

namespace tpool::security {

enum class Role : std::uint8_t { kSubmit = 1, kRead = 2, kAdmin = 4 };
const char* to_string(Role r) noexcept;

// A set of roles as a bit mask of Role values.
class RoleSet {
 public:
  constexpr RoleSet() = default;
  constexpr explicit RoleSet(std::uint8_t bits) : bits_(bits) {}
  constexpr bool has(Role r) const noexcept { return (bits_ & static_cast<std::uint8_t>(r)) != 0; }
  constexpr void add(Role r) noexcept { bits_ |= static_cast<std::uint8_t>(r); }
  constexpr std::uint8_t bits() const noexcept { return bits_; }
  constexpr bool empty() const noexcept { return bits_ == 0; }
  // "submit,read" (in the order submit, read, admin); "" for none.
  std::string to_string() const;

 private:
  std::uint8_t bits_ = 0;
};

// "submit,read" -> roles; the error names the unknown role.
Result<RoleSet> parse_roles(std::string_view text);

// 1..128 characters of [A-Za-z0-9_.@-]: what a principal may be called.
bool valid_principal(std::string_view name) noexcept;
// 1..64 characters of [A-Za-z0-9_.-]: the plugin host's rule for names.
bool valid_handler_name(std::string_view name) noexcept;

// One line of the token file.
struct PrincipalEntry {
  std::string name;
  RoleSet roles;
  // Empty: every handler. Otherwise sorted, unique.
  std::vector<std::string> handlers;
  bool has_token = false;
  std::uint8_t salt[16] = {};
  std::uint8_t digest[32] = {};
  int line = 0;  // where it was defined, for messages

  bool allows_handler(std::string_view handler) const;
};

class TokenStore {
 public:
  // Parses the file's text. `origin` (the file name) starts every error, with
  // the line number: "tokens.txt:7: ...". Unknown roles, bad names, bad hex,
  // a wrong number of fields and duplicate principals are errors.
  static Result<std::shared_ptr<const TokenStore>> parse(std::string_view text,
                                                         std::string_view origin);
  // Reads and parses `path`. A file that others may write (mode o+w or g+w)
  // is refused: whoever can write it can grant themselves any role.
  static Result<std::shared_ptr<const TokenStore>> load(const std::string& path);

  // The principal a bearer token (the text after "Bearer ") belongs to, or an
  // error (the rpc layer answers UNAUTHENTICATED). The message never contains
  // the token.
  Result<std::string> authenticate(std::string_view token) const;

  // nullptr when the file has no line for `principal`.
  const PrincipalEntry* find(std::string_view principal) const;
  std::size_t size() const noexcept { return entries_.size(); }
  const std::string& origin() const noexcept { return origin_; }

 private:
  TokenStore() = default;
  std::string origin_;
  std::map<std::string, PrincipalEntry, std::less<>> entries_;
};

// The token file of a running daemon: the current snapshot, replaced by
// reload() (the daemon calls it on SIGHUP). See (2) and (3) above.
class TokenFile {
 public:
  // Loads `path` once; the error is the parse error (the daemon refuses to
  // start).
  static Result<std::unique_ptr<TokenFile>> open(std::string path);

  std::shared_ptr<const TokenStore> snapshot() const EXCLUDES(mu_);
  // Re-reads the file. OK: the new snapshot is installed. Otherwise the
  // current one stays and the Status says which line is wrong.
  Status reload() EXCLUDES(mu_);
  const std::string& path() const noexcept { return path_; }

 private:
  TokenFile(std::string path, std::shared_ptr<const TokenStore> store)
      : path_(std::move(path)), current_(std::move(store)) {}
  const std::string path_;
  mutable Mutex mu_;
  std::shared_ptr<const TokenStore> current_ GUARDED_BY(mu_);
};

// A new token and the line that stores its hash (tpoolctl token create).
struct NewToken {
  std::string token;  // "<principal>.<64 hex>": shown once, never stored
  std::string line;   // append to the token file
};
// Makes a token from 32 bytes of RAND_bytes and a fresh 16-byte salt.
// `handlers` empty: every handler.
Result<NewToken> make_token_line(std::string_view principal, RoleSet roles,
                                 const std::vector<std::string>& handlers);

}  // namespace tpool::security
