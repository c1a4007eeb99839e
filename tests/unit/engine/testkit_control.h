// What the engine's tests share with their plugin (plugin/engine_testkit.cc):
// one Control object in the test process, whose address reaches the plugin as
// its config string (HostConfig::plugin_config["engine_testkit"]), so a
// handler dlopen'ed through the real plugin host can block on a gate the test
// opens, and report which thread it ran on. No sleeps: every wait here is a
// condition variable with a generous bound that only guards against a hang.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace tpool::engine::testkit {

// How long a wait may take before it counts as a hang (tests and plugin).
inline constexpr std::chrono::seconds kHang{60};

struct Control {
  std::mutex mu;
  std::condition_variable cv;
  int entered = 0;                              // "block" and "spin" calls that started
  int left = 0;                                 // ... and returned
  bool open = false;                            // the gate: "block" calls return once it is open
  int calls = 0;                                // handler calls of any handler
  std::vector<std::thread::id> child_threads;   // "where": the thread of each call
  std::vector<std::thread::id> parent_threads;  // "fanout": the thread of each call

  // Plugin side.
  void called() {
    std::lock_guard lock(mu);
    ++calls;
  }
  void enter() {
    std::lock_guard lock(mu);
    ++entered;
    cv.notify_all();
  }
  void leave() {
    std::lock_guard lock(mu);
    ++left;
    cv.notify_all();
  }
  // False after kHang (the test never opened the gate).
  bool wait_open() {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, kHang, [&] { return open; });
  }
  void where(std::vector<std::thread::id>& v) {
    std::lock_guard lock(mu);
    v.push_back(std::this_thread::get_id());
  }

  // Test side.
  void open_gate() {
    std::lock_guard lock(mu);
    open = true;
    cv.notify_all();
  }
  // Closes the gate again (between phases; no "block" call may be waiting).
  void close_gate() {
    std::lock_guard lock(mu);
    open = false;
  }
  bool wait_entered(int n, std::chrono::nanoseconds bound = kHang) {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, bound, [&] { return entered >= n; });
  }
  bool wait_left(int n, std::chrono::nanoseconds bound = kHang) {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, bound, [&] { return left >= n; });
  }
  int calls_now() {
    std::lock_guard lock(mu);
    return calls;
  }
  int entered_now() {
    std::lock_guard lock(mu);
    return entered;
  }
};

// The plugin's config string for a Control (its address) and back.
inline std::string config_of(Control* c) {
  return std::to_string(reinterpret_cast<std::uintptr_t>(c));
}
inline Control* control_of(const char* config) {
  return reinterpret_cast<Control*>(
      static_cast<std::uintptr_t>(std::strtoull(config, nullptr, 10)));
}

}  // namespace tpool::engine::testkit
