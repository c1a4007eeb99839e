// tpool::Status: the one error type of every component (pool, plugin host,
// engine, store).
//
// Named constructors, ok(), no exceptions across the API (after LevelDB's
// include/leveldb/status.h). The message is a sentence for a person: what was
// wrong, the value, and what to do.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

namespace tpool {

enum class StatusCode : std::uint8_t {
  kOk = 0,
  kInvalidArgument,  // a Config field or a call argument out of range
  kFull,             // no free descriptor (or queue slot) and backpressure says reject
  kTimeout,          // a blocking call's timeout expired
  kShutdown,         // the pool is shutting down or stopped: no new work is accepted
  kStaleHandle,      // the handle's generation no longer matches its descriptor
  // Appended for the durable store (issue 17); append only, never renumber.
  kIoError,             // a read or write of a file failed (disk full, permissions, I/O)
  kCorruption,          // a file's content is not what it must be (not a database, bad pages)
  kFailedPrecondition,  // the world is not in a state the call can work with (a newer schema)
};

std::string_view to_string(StatusCode code) noexcept;

class [[nodiscard]] Status {
 public:
  Status() noexcept = default;
  static Status Ok() noexcept { return Status(); }
  static Status InvalidArgument(std::string msg) {
    return {StatusCode::kInvalidArgument, std::move(msg)};
  }
  static Status Full(std::string msg) { return {StatusCode::kFull, std::move(msg)}; }
  static Status Timeout(std::string msg) { return {StatusCode::kTimeout, std::move(msg)}; }
  static Status Shutdown(std::string msg) { return {StatusCode::kShutdown, std::move(msg)}; }
  static Status StaleHandle(std::string msg) { return {StatusCode::kStaleHandle, std::move(msg)}; }
  static Status IoError(std::string msg) { return {StatusCode::kIoError, std::move(msg)}; }
  static Status Corruption(std::string msg) { return {StatusCode::kCorruption, std::move(msg)}; }
  static Status FailedPrecondition(std::string msg) {
    return {StatusCode::kFailedPrecondition, std::move(msg)};
  }

  bool ok() const noexcept { return code_ == StatusCode::kOk; }
  StatusCode code() const noexcept { return code_; }
  const std::string& message() const noexcept { return message_; }
  // "kind: message", for logs.
  std::string to_string() const;

 private:
  Status(StatusCode code, std::string msg) : code_(code), message_(std::move(msg)) {}
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

// A value or a Status; the pool's API returns these instead of throwing.
template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}          // NOLINT(google-explicit-constructor)
  Result(Status status) : status_(std::move(status)) {}  // NOLINT(google-explicit-constructor)
  bool ok() const noexcept { return status_.ok(); }
  const Status& status() const noexcept { return status_; }
  T& value() & { return value_; }
  const T& value() const& { return value_; }
  T&& value() && { return std::move(value_); }
  T* operator->() { return &value_; }
  const T* operator->() const { return &value_; }

 private:
  Status status_;
  T value_{};
};

}  // namespace tpool
