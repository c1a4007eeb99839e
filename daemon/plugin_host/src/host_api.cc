// The C host function table (tpool_host_api) that every plugin receives, and
// the adapters from it to the daemon's JobServices.
//
// Every function here is called by plugin code through a C function pointer,
// so none may let a C++ exception escape: each body that can allocate is
// wrapped and turns failure into a status code (or a dropped log line).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <limits>
#include <string_view>

#include "internal.h"

namespace tpool::plugin_host::detail {

thread_local const Library* tls_current_library = nullptr;

namespace {

std::string_view view_of(const char* s) {
  return s == nullptr ? std::string_view{} : s;
}

LogLevel level_of(std::int32_t level) {
  if (level <= TPOOL_LOG_DEBUG) return LogLevel::kDebug;
  if (level >= TPOOL_LOG_ERROR) return LogLevel::kError;
  return static_cast<LogLevel>(level);
}

// Marks the job over its output limit unless new_total fits.
bool fits(tpool_job* job, std::size_t add) {
  std::size_t have = job->output.size();
  if (add > job->max_output || have > job->max_output - add) {
    job->output_overflow = true;
    std::size_t total = add > std::numeric_limits<std::size_t>::max() - have
                            ? std::numeric_limits<std::size_t>::max()
                            : have + add;
    job->attempted_output = std::max(job->attempted_output, total);
    return false;
  }
  return true;
}

int32_t host_output_write(tpool_job* job, const void* data, size_t size) {
  if (job == nullptr || (data == nullptr && size != 0)) return TPOOL_STATUS_INVALID_INPUT;
  if (!fits(job, size)) return TPOOL_STATUS_OUTPUT_TOO_LARGE;
  try {
    job->output.append(static_cast<const char*>(data), size);
    return TPOOL_STATUS_OK;
  } catch (const std::exception&) {
    return TPOOL_STATUS_INTERNAL;
  }
}

void* host_output_reserve(tpool_job* job, size_t size) {
  if (job == nullptr || !fits(job, size)) return nullptr;
  try {
    std::size_t old = job->output.size();
    job->output.resize(old + size);
    return job->output.data() + old;
  } catch (const std::exception&) {
    return nullptr;
  }
}

void host_set_message(tpool_job* job, const char* message) {
  if (job == nullptr) return;
  try {
    job->message.assign(view_of(message));
  } catch (const std::exception&) {
    job->message.clear();
  }
}

int32_t host_is_cancelled(const tpool_job* job) {
  return job != nullptr && job->services->is_cancelled() ? 1 : 0;
}

int64_t host_remaining_ns(const tpool_job* job) {
  if (job == nullptr) return INT64_MAX;
  auto r = job->services->remaining();
  if (!r.has_value()) return INT64_MAX;
  return std::max<std::int64_t>(0, r->count());
}

void host_log(tpool_job* job, int32_t level, const char* message) {
  try {
    if (job != nullptr) {
      job->services->log(level_of(level), view_of(message));
    } else if (const Library* lib = tls_current_library) {
      lib->log(level_of(level), view_of(message));
    }
    // No job and no init/fini on this thread (a plugin's own thread): the
    // line has no owner to be attributed to and is dropped (docs/plugins.md).
  } catch (const std::exception&) {
    // A log line that cannot be built is dropped rather than failing the job.
  }
}

void host_progress(tpool_job* job, double fraction, const char* note) {
  if (job == nullptr) return;
  if (std::isnan(fraction)) fraction = 0;
  job->services->progress(std::clamp(fraction, 0.0, 1.0), view_of(note));
}

int32_t host_run_children(tpool_job* job, const char* handler, const tpool_bytes* inputs,
                          size_t count, tpool_child_result* results) {
  if (job == nullptr || handler == nullptr ||
      (count != 0 && (inputs == nullptr || results == nullptr)))
    return TPOOL_STATUS_INVALID_INPUT;
  static const char kInternal[] = "the host could not run the child jobs (out of memory)";
  try {
    std::vector<std::string_view> views;
    views.reserve(count);
    for (std::size_t i = 0; i < count; ++i) {
      const auto* p = reinterpret_cast<const char*>(inputs[i].data);
      views.emplace_back(p == nullptr ? "" : std::string_view(p, inputs[i].size));
    }
    auto got = job->services->run_children(handler, views);
    got.resize(count);  // defensive: a services implementation must return one per input
    job->children.push_back(std::move(got));
    const auto& kept = job->children.back();
    bool all_unknown = count != 0;
    for (std::size_t i = 0; i < count; ++i) {
      const InvokeResult& r = kept[i];
      results[i].status = r.code == JobCode::kError && r.plugin_status != 0
                              ? r.plugin_status
                              : static_cast<std::int32_t>(r.code);
      results[i].message = r.message.c_str();
      results[i].output =
          r.output.empty() ? nullptr : reinterpret_cast<const uint8_t*>(r.output.data());
      results[i].output_size = r.output.size();
      all_unknown = all_unknown && r.code == JobCode::kUnknownHandler;
    }
    return all_unknown ? TPOOL_STATUS_UNKNOWN_HANDLER : TPOOL_STATUS_OK;
  } catch (const std::exception&) {
    for (std::size_t i = 0; i < count; ++i)
      results[i] = {TPOOL_STATUS_INTERNAL, kInternal, nullptr, 0};
    return TPOOL_STATUS_INTERNAL;
  }
}

uint32_t host_attempt(const tpool_job* job) {
  return job == nullptr || job->services == nullptr ? 1 : job->services->attempt();
}

constexpr tpool_host_api kHostApi = {
    static_cast<uint32_t>(sizeof(tpool_host_api)),
    TPOOL_PLUGIN_ABI_MAJOR,
    TPOOL_PLUGIN_ABI_MINOR,
    0,
    host_output_write,
    host_output_reserve,
    host_set_message,
    host_is_cancelled,
    host_remaining_ns,
    host_log,
    host_progress,
    host_run_children,
    host_attempt,
};

}  // namespace

const tpool_host_api* host_api() noexcept {
  return &kHostApi;
}

}  // namespace tpool::plugin_host::detail
