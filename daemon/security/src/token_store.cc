// Parsing the token file and checking bearer tokens (token_store.h has the
// format). Error messages name the file, the line and the field, and describe
// a bad secret-bearing field by its length only: a token pasted into the wrong
// place must not end up in a log.
#include "tpool/security/token_store.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "crypto.h"

namespace tpool::security {
namespace {

constexpr std::size_t kSaltBytes = 16;
constexpr std::size_t kSecretBytes = 32;
constexpr std::size_t kFields = 5;

bool name_char(char c) noexcept {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '.' || c == '-';
}

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  for (;;) {
    auto pos = s.find(sep);
    out.push_back(s.substr(0, pos));
    if (pos == std::string_view::npos) return out;
    s.remove_prefix(pos + 1);
  }
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

// The salt used for a principal the file does not know, so that an unknown
// principal costs the same hash as a known one (the principal part of a token
// is not secret, but there is no reason to make probing it cheap).
constexpr std::uint8_t kDummySalt[kSaltBytes] = {};

}  // namespace

const char* to_string(Role r) noexcept {
  switch (r) {
    case Role::kSubmit:
      return "submit";
    case Role::kRead:
      return "read";
    case Role::kAdmin:
      return "admin";
  }
  return "unknown";
}

std::string RoleSet::to_string() const {
  std::string s;
  for (Role r : {Role::kSubmit, Role::kRead, Role::kAdmin}) {
    if (!has(r)) continue;
    if (!s.empty()) s += ',';
    s += security::to_string(r);
  }
  return s;
}

Result<RoleSet> parse_roles(std::string_view text) {
  RoleSet roles;
  if (trim(text).empty()) return roles;
  for (std::string_view part : split(text, ',')) {
    part = trim(part);
    if (part == "submit") {
      roles.add(Role::kSubmit);
    } else if (part == "read") {
      roles.add(Role::kRead);
    } else if (part == "admin") {
      roles.add(Role::kAdmin);
    } else {
      bool printable = part.size() <= 32 && std::all_of(part.begin(), part.end(), name_char);
      return Status::InvalidArgument(
          (printable ? "unknown role '" + std::string(part) + "'"
                     : "an unknown role of " + std::to_string(part.size()) + " characters") +
          ": the roles are submit, read and admin, separated by commas");
    }
  }
  return roles;
}

bool valid_principal(std::string_view name) noexcept {
  return !name.empty() && name.size() <= 128 &&
         std::all_of(name.begin(), name.end(), [](char c) { return name_char(c) || c == '@'; });
}

bool valid_handler_name(std::string_view name) noexcept {
  return !name.empty() && name.size() <= 64 && std::all_of(name.begin(), name.end(), name_char);
}

bool PrincipalEntry::allows_handler(std::string_view handler) const {
  return handlers.empty() || std::binary_search(handlers.begin(), handlers.end(), handler);
}

Result<std::shared_ptr<const TokenStore>> TokenStore::parse(std::string_view text,
                                                            std::string_view origin) {
  std::shared_ptr<TokenStore> store(new TokenStore());
  store->origin_ = std::string(origin);
  int line_no = 0;
  for (std::string_view raw : split(text, '\n')) {
    ++line_no;
    std::string_view line = trim(raw);
    if (line.empty() || line.front() == '#') continue;
    auto where = [&](const std::string& what) {
      return Status::InvalidArgument(std::string(origin) + ":" + std::to_string(line_no) + ": " +
                                     what);
    };
    auto fields = split(line, ':');
    if (fields.size() != kFields)
      return where("has " + std::to_string(fields.size()) + " field" +
                   (fields.size() == 1 ? "" : "s") +
                   " separated by ':', want 5 (principal:roles:handlers:salt_hex:sha256_hex); "
                   "make lines with `tpoolctl token create`");
    PrincipalEntry e;
    e.line = line_no;
    std::string_view name = trim(fields[0]);
    if (!valid_principal(name))
      return where("the principal (field 1, " + std::to_string(name.size()) +
                   " characters) is not a valid name: use 1 to 128 characters from A-Z a-z 0-9 "
                   "_ . @ -");
    e.name = std::string(name);
    auto roles = parse_roles(fields[1]);
    if (!roles.ok()) return where("principal '" + e.name + "': " + roles.status().message());
    e.roles = roles.value();
    std::string_view handlers = trim(fields[2]);
    if (!handlers.empty() && handlers != "*") {
      for (std::string_view h : split(handlers, ',')) {
        h = trim(h);
        if (!valid_handler_name(h))
          return where("principal '" + e.name + "': a handler name in field 3 (" +
                       std::to_string(h.size()) +
                       " characters) is not valid: use 1 to 64 characters from A-Z a-z 0-9 _ . "
                       "-, separated by commas, or '*' for every handler");
        e.handlers.emplace_back(h);
      }
      std::sort(e.handlers.begin(), e.handlers.end());
      e.handlers.erase(std::unique(e.handlers.begin(), e.handlers.end()), e.handlers.end());
    }
    std::string_view salt = trim(fields[3]), digest = trim(fields[4]);
    if (salt.empty() != digest.empty())
      return where("principal '" + e.name + "': the salt (field 4) and the hash (field 5) " +
                   "must both be set or both be empty (empty: certificate-only principal)");
    if (!salt.empty()) {
      if (!detail::hex_decode(salt, e.salt, kSaltBytes))
        return where("principal '" + e.name + "': the salt (field 4) must be " +
                     std::to_string(2 * kSaltBytes) + " hex digits, it has " +
                     std::to_string(salt.size()) + " characters");
      if (!detail::hex_decode(digest, e.digest, sizeof e.digest))
        return where("principal '" + e.name + "': the hash (field 5) must be " +
                     std::to_string(2 * sizeof e.digest) + " hex digits (SHA-256), it has " +
                     std::to_string(digest.size()) + " characters");
      e.has_token = true;
    }
    auto [it, inserted] = store->entries_.emplace(e.name, e);
    if (!inserted)
      return where("principal '" + e.name + "' is already defined on line " +
                   std::to_string(it->second.line) +
                   ": one line per principal; to rotate a token, replace its line");
  }
  return std::shared_ptr<const TokenStore>(std::move(store));
}

Result<std::shared_ptr<const TokenStore>> TokenStore::load(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    return Status::InvalidArgument("token file " + path + " cannot be read (" +
                                   std::strerror(errno) + "): check the path");
  if ((st.st_mode & (S_IWOTH | S_IWGRP)) != 0)
    return Status::InvalidArgument(
        "token file " + path +
        " is writable by group or others: whoever can write it can grant themselves any role; "
        "run `chmod go-w " +
        path + "`");
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return Status::InvalidArgument("token file " + path +
                                   " cannot be opened: give the daemon's user read permission");
  std::ostringstream text;
  text << in.rdbuf();
  return parse(text.str(), path);
}

Result<std::string> TokenStore::authenticate(std::string_view token) const {
  auto dot = token.rfind('.');
  std::string_view principal =
      dot == std::string_view::npos ? std::string_view{} : token.substr(0, dot);
  std::string_view secret = dot == std::string_view::npos ? token : token.substr(dot + 1);
  const PrincipalEntry* e = principal.empty() ? nullptr : find(principal);
  const bool usable = e != nullptr && e->has_token;
  // Hash even when the principal is unknown, so both answers cost the same.
  detail::Digest d = detail::salted_sha256(usable ? e->salt : kDummySalt, kSaltBytes, secret);
  if (usable && detail::digests_equal(d, e->digest)) return e->name;
  return Status::InvalidArgument(
      "the bearer token is not valid for " + origin_ +
      " (unknown principal, no token configured, or wrong secret): use a token printed by "
      "`tpoolctl token create` whose line is in the daemon's token file");
}

const PrincipalEntry* TokenStore::find(std::string_view principal) const {
  auto it = entries_.find(principal);
  return it == entries_.end() ? nullptr : &it->second;
}

Result<NewToken> make_token_line(std::string_view principal, RoleSet roles,
                                 const std::vector<std::string>& handlers) {
  if (!valid_principal(principal))
    return Status::InvalidArgument("principal '" + std::string(principal) +
                                   "' is not a valid name: use 1 to 128 characters from A-Z a-z "
                                   "0-9 _ . @ -");
  if (roles.empty())
    return Status::InvalidArgument("no roles given: name at least one of submit, read, admin");
  std::vector<std::string> hs = handlers;
  for (const auto& h : hs)
    if (!valid_handler_name(h))
      return Status::InvalidArgument("handler name '" + h +
                                     "' is not valid: use 1 to 64 characters from A-Z a-z 0-9 _ "
                                     ". -");
  std::sort(hs.begin(), hs.end());
  hs.erase(std::unique(hs.begin(), hs.end()), hs.end());
  std::uint8_t secret[kSecretBytes], salt[kSaltBytes];
  if (!detail::random_bytes(secret, sizeof secret) || !detail::random_bytes(salt, sizeof salt))
    return Status::InvalidArgument(
        "the system's random number generator failed (OpenSSL RAND_bytes): no token was made; "
        "retry, and check the kernel's entropy source");
  NewToken t;
  std::string secret_hex = detail::hex_encode(secret, sizeof secret);
  t.token = std::string(principal) + "." + secret_hex;
  detail::Digest d = detail::salted_sha256(salt, sizeof salt, secret_hex);
  std::string joined;
  for (const auto& h : hs) joined += (joined.empty() ? "" : ",") + h;
  t.line = std::string(principal) + ":" + roles.to_string() + ":" + (hs.empty() ? "*" : joined) +
           ":" + detail::hex_encode(salt, sizeof salt) + ":" +
           detail::hex_encode(d.data(), d.size());
  detail::cleanse(secret, sizeof secret);
  return t;
}

}  // namespace tpool::security
