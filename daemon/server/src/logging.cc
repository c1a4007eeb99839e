#include "logging.h"

#include <google/protobuf/stubs/logging.h>
#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <memory>

namespace tpool::server {
namespace {

// One JSON object per line: {"ts":..., "level":..., "logger":..., "msg":...}
// with the message escaped (a pattern string cannot escape it).
class JsonFormatter final : public spdlog::formatter {
 public:
  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override {
    auto secs = std::chrono::duration_cast<std::chrono::microseconds>(msg.time.time_since_epoch());
    std::time_t t = static_cast<std::time_t>(secs.count() / 1000000);
    std::tm tm{};
    gmtime_r(&t, &tm);
    char ts[40];
    std::size_t n = std::strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%S", &tm);
    std::snprintf(ts + n, sizeof ts - n, ".%06lldZ",
                  static_cast<long long>(secs.count() % 1000000));
    append(dest, "{\"ts\":\"");
    append(dest, ts);
    append(dest, "\",\"level\":\"");
    auto lv = spdlog::level::to_string_view(msg.level);
    dest.append(lv.data(), lv.data() + lv.size());
    append(dest, "\",\"thread\":");
    append(dest, std::to_string(msg.thread_id));
    append(dest, ",\"msg\":\"");
    escape(dest, std::string_view(msg.payload.data(), msg.payload.size()));
    append(dest, "\"}\n");
  }
  std::unique_ptr<spdlog::formatter> clone() const override {
    return std::make_unique<JsonFormatter>();
  }

 private:
  static void append(spdlog::memory_buf_t& d, std::string_view s) {
    d.append(s.data(), s.data() + s.size());
  }
  static void escape(spdlog::memory_buf_t& d, std::string_view s) {
    for (char c : s) {
      switch (c) {
        case '"':
          append(d, "\\\"");
          break;
        case '\\':
          append(d, "\\\\");
          break;
        case '\n':
          append(d, "\\n");
          break;
        case '\r':
          append(d, "\\r");
          break;
        case '\t':
          append(d, "\\t");
          break;
        default:
          if (static_cast<unsigned char>(c) < 0x20) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
            append(d, buf);
          } else {
            d.push_back(c);
          }
      }
    }
  }
};

// protobuf's own log lines (e.g. "[libprotobuf ERROR ...] String field
// 'tpool.v1.JobRequest.handler' contains invalid UTF-8 data" for every such
// request) go to spdlog at debug level instead of straight to stderr: they
// are about a client's bytes, which the caller already answers with
// INVALID_ARGUMENT, so anyone who can reach the port could otherwise make
// tpoold write one unformatted stderr line per request (found by
// fuzz_job_request). FATAL stays critical.
void protobuf_log(google::protobuf::LogLevel level, const char* file, int line,
                  const std::string& message) {
  const auto lv =
      level == google::protobuf::LOGLEVEL_FATAL ? spdlog::level::critical : spdlog::level::debug;
  spdlog::log(lv, "protobuf ({}:{}): {}", file, line, message);
}

}  // namespace

void setup_logging(const std::string& level, const std::string& format) {
  auto sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
  auto logger = std::make_shared<spdlog::logger>("tpoold", sink);
  if (format == "json") {
    logger->set_formatter(std::make_unique<JsonFormatter>());
  } else {
    logger->set_pattern("%Y-%m-%dT%H:%M:%S.%f%z %^%l%$ %v");
  }
  logger->set_level(spdlog::level::from_str(level));
  logger->flush_on(spdlog::level::info);
  spdlog::set_default_logger(logger);
  google::protobuf::SetLogHandler(&protobuf_log);
}

}  // namespace tpool::server
