// fail_throw: the C++ variant of fail. Its handler throws
// std::runtime_error("fail_throw: <input>") across the C boundary, which a
// real plugin must never do; it exists to show (and test) that the host
// catches the exception, fails the job with its what() and keeps the worker
// alive.
#include <stdexcept>
#include <string>

#include <tpool/plugin.h>

namespace {

std::int32_t fail_throw_call(void*, tpool_job*, const std::uint8_t* input, std::size_t input_size) {
  std::string text = input == nullptr
                         ? std::string()
                         : std::string(reinterpret_cast<const char*>(input), input_size);
  throw std::runtime_error("fail_throw: " +
                           (text.empty() ? std::string("requested failure") : text));
}

const tpool_handler handlers[] = {
    {"fail_throw", "Throws a C++ exception (the host turns it into a failed job).",
     TPOOL_LANE_DEFAULT, 0, 0, fail_throw_call},
};

const tpool_plugin plugin = {
    TPOOL_PLUGIN_HEADER,
    "fail_throw",
    "1.0.0",
    "Fail (C++): a handler that throws.",
    handlers,
    1,
    nullptr,
    nullptr,
};

}  // namespace

extern "C" TPOOL_PLUGIN_EXPORT const tpool_plugin* tpool_plugin_entry(const tpool_host_api*) {
  return &plugin;
}
