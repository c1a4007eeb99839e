// Test helpers for the plugin host: a private temporary plugin directory, a
// log sink that records lines, and JobServices that records what a handler
// asked for and runs fan-out children synchronously through the Host.
#pragma once

#include <stdlib.h>
#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "tpool/plugin_host/host.h"

namespace tpool::plugin_host::testing {

namespace fs = std::filesystem;

// A fresh mode-0700 directory under $TMPDIR, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "tpool-plugin-test-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::permissions(path_, fs::perms::owner_all, ec);
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const fs::path& path() const { return path_; }
  std::string str() const { return path_.string(); }
  // Copies a built plugin in as `as` (default: its own file name).
  fs::path add(const fs::path& so, std::string as = "") const {
    fs::path dst = path_ / (as.empty() ? so.filename().string() : as);
    fs::copy_file(so, dst, fs::copy_options::overwrite_existing);
    ::chmod(dst.c_str(), 0755);
    return dst;
  }
  // Replaces `as` atomically (rename over it), as a deploy would.
  fs::path replace(const fs::path& so, const std::string& as) const {
    fs::path tmp = path_ / (".incoming-" + as);
    fs::copy_file(so, tmp, fs::copy_options::overwrite_existing);
    ::chmod(tmp.c_str(), 0755);
    fs::path dst = path_ / as;
    fs::rename(tmp, dst);
    return dst;
  }

 private:
  fs::path path_;
};

struct LogLine {
  LogLevel level;
  std::string plugin;
  std::string message;
};

// A LogSink that keeps every line; shared so it can outlive a Host.
class LogRecorder {
 public:
  LogSink sink() {
    auto self = state_;
    return [self](LogLevel level, std::string_view plugin, std::string_view message) {
      std::lock_guard lock(self->mu);
      self->lines.push_back({level, std::string(plugin), std::string(message)});
    };
  }
  std::vector<LogLine> lines() const {
    std::lock_guard lock(state_->mu);
    return state_->lines;
  }
  bool contains(std::string_view fragment) const {
    for (const auto& l : lines())
      if (l.message.find(fragment) != std::string::npos) return true;
    return false;
  }

 private:
  struct State {
    mutable std::mutex mu;
    std::vector<LogLine> lines;
  };
  std::shared_ptr<State> state_ = std::make_shared<State>();
};

// JobServices for tests: cancellation and deadline set by the test, log and
// progress recorded, children run one after another on the calling thread.
class TestServices : public JobServices {
 public:
  explicit TestServices(const Host* host = nullptr) : host_(host) {}

  void cancel() { cancelled_.store(true, std::memory_order_release); }
  void set_deadline_in(std::chrono::nanoseconds d) {
    std::lock_guard lock(mu_);
    deadline_ = std::chrono::steady_clock::now() + d;
  }
  // Called from progress() (on the handler's thread) before it is recorded.
  std::function<void(double, std::string_view)> on_progress;

  bool is_cancelled() const noexcept override {
    return cancelled_.load(std::memory_order_acquire) || deadline_passed();
  }
  std::optional<std::chrono::nanoseconds> remaining() const noexcept override {
    std::lock_guard lock(mu_);
    if (!deadline_) return std::nullopt;
    return *deadline_ - std::chrono::steady_clock::now();
  }
  void log(LogLevel level, std::string_view message) noexcept override {
    std::lock_guard lock(mu_);
    logs_.push_back({level, "", std::string(message)});
  }
  void progress(double fraction, std::string_view note) noexcept override {
    if (on_progress) on_progress(fraction, note);
    std::lock_guard lock(mu_);
    progress_.emplace_back(fraction, std::string(note));
  }
  std::vector<InvokeResult> run_children(std::string_view handler,
                                         std::span<const std::string_view> inputs) override {
    std::vector<InvokeResult> out;
    HandlerRef ref = host_ != nullptr ? host_->find(handler) : HandlerRef();
    for (std::string_view in : inputs) {
      if (!ref) {
        InvokeResult r;
        r.code = JobCode::kUnknownHandler;
        r.message = "no handler named '" + std::string(handler) + "' is loaded";
        out.push_back(std::move(r));
        continue;
      }
      TestServices child(host_);
      if (is_cancelled()) child.cancel();
      out.push_back(host_->invoke(ref, in, child));
    }
    return out;
  }

  std::vector<LogLine> logs() const {
    std::lock_guard lock(mu_);
    return logs_;
  }
  std::vector<std::pair<double, std::string>> progress_reports() const {
    std::lock_guard lock(mu_);
    return progress_;
  }

 private:
  const Host* host_;
  std::atomic<bool> cancelled_{false};
  mutable std::mutex mu_;
  std::optional<std::chrono::steady_clock::time_point> deadline_;
  std::vector<LogLine> logs_;
  std::vector<std::pair<double, std::string>> progress_;
};

inline HostConfig config_for(std::vector<std::string> dirs, LogRecorder& log,
                             bool abort_on_error = false) {
  HostConfig c;
  c.dirs = std::move(dirs);
  c.abort_on_load_error = abort_on_error;
  c.log_sink = log.sink();
  return c;
}

}  // namespace tpool::plugin_host::testing
