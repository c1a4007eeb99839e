#include "notify.h"

#include <systemd/sd-daemon.h>

#include <cstdlib>
#include <string>

namespace tpool::server {

Notifier::Notifier() {
  const char* sock = std::getenv("NOTIFY_SOCKET");
  enabled_ = sock != nullptr && *sock != '\0';
  std::uint64_t usec = 0;
  if (enabled_ && sd_watchdog_enabled(0, &usec) > 0) {
    watchdog_interval_ = std::chrono::microseconds(usec / 2);
  }
}

void Notifier::send(std::string_view state) const {
  if (!enabled_) return;
  std::string s(state);
  sd_notify(0, s.c_str());
}

void Notifier::ready() const {
  send("READY=1");
}
void Notifier::reloading() const {
  send("RELOADING=1");
}
void Notifier::stopping() const {
  send("STOPPING=1");
}
void Notifier::watchdog() const {
  send("WATCHDOG=1");
}
void Notifier::status(std::string_view text) const {
  send("STATUS=" + std::string(text));
}

}  // namespace tpool::server
