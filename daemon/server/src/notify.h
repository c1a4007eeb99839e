// systemd notification (sd_notify) and the watchdog's liveness rule.
#pragma once

#include <chrono>
#include <cstdint>
#include <string_view>

namespace tpool::server {

// sd_notify when NOTIFY_SOCKET is set; a no-op otherwise.
class Notifier {
 public:
  Notifier();
  bool enabled() const noexcept { return enabled_; }
  void ready() const;      // READY=1
  void reloading() const;  // RELOADING=1
  void stopping() const;   // STOPPING=1
  void watchdog() const;   // WATCHDOG=1
  void status(std::string_view text) const;
  // Half the unit's WatchdogSec (ping at least this often), or zero when the
  // watchdog is off.
  std::chrono::microseconds watchdog_interval() const noexcept { return watchdog_interval_; }

 private:
  void send(std::string_view state) const;
  bool enabled_ = false;
  std::chrono::microseconds watchdog_interval_{0};
};

// The pool is live when it has nothing queued, or when it started a task
// since the last check: a stuck scheduler has queued work and no progress.
// A long handler on every worker with an empty queue is not a stall (the
// pool's own watchdog handles those with overflow workers).
class Liveness {
 public:
  bool check(std::uint64_t progress, std::uint64_t queued) noexcept {
    bool live = queued == 0 || progress != last_progress_;
    last_progress_ = progress;
    return live;
  }

 private:
  std::uint64_t last_progress_ = UINT64_MAX;
};

}  // namespace tpool::server
