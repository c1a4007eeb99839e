// TokenFile: the current TokenStore of a file, replaced whole on reload()
// (token_store.h, invariants (2) and (3)).
#include "tpool/security/token_store.h"

namespace tpool::security {

Result<std::unique_ptr<TokenFile>> TokenFile::open(std::string path) {
  auto store = TokenStore::load(path);
  if (!store.ok()) return store.status();
  return std::unique_ptr<TokenFile>(new TokenFile(std::move(path), std::move(store.value())));
}

std::shared_ptr<const TokenStore> TokenFile::snapshot() const {
  MutexLock lk(mu_);
  return current_;  // (inv 2) the caller's copy keeps this snapshot alive
}

Status TokenFile::reload() {
  // (inv 3) parse without the lock: snapshot() callers never wait for file IO.
  auto store = TokenStore::load(path_);
  if (!store.ok())
    return Status::InvalidArgument(store.status().message() +
                                   "; the token file in use is unchanged");
  std::shared_ptr<const TokenStore> old;
  {
    MutexLock lk(mu_);
    old = std::move(current_);
    current_ = std::move(store.value());
  }
  // `old` is released here, outside the lock (possibly the last reference).
  return Status::Ok();
}

}  // namespace tpool::security
