#include "tpool/common/status.h"

namespace tpool {

std::string_view to_string(StatusCode code) noexcept {
  switch (code) {
    case StatusCode::kOk:
      return "ok";
    case StatusCode::kInvalidArgument:
      return "invalid argument";
    case StatusCode::kFull:
      return "full";
    case StatusCode::kTimeout:
      return "timeout";
    case StatusCode::kShutdown:
      return "shutdown";
    case StatusCode::kStaleHandle:
      return "stale handle";
    case StatusCode::kIoError:
      return "I/O error";
    case StatusCode::kCorruption:
      return "corruption";
    case StatusCode::kFailedPrecondition:
      return "failed precondition";
  }
  return "unknown";
}

std::string Status::to_string() const {
  if (ok()) return "ok";
  std::string s(tpool::to_string(code_));
  s += ": ";
  s += message_;
  return s;
}

}  // namespace tpool
