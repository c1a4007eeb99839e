// The SDK header as C++ (a C++ plugin author's compiler, with the project's
// warnings, -Wold-style-cast included): same layout as the C99 check.
#include <gtest/gtest.h>
#include <tpool/plugin.h>

#include <cstddef>

#include "tpool/plugin_host/job.h"

namespace {

static_assert(offsetof(tpool_plugin, name) == 16, "the four u32 header fields come first");
static_assert(sizeof(tpool_plugin) == 72);
static_assert(sizeof(tpool_handler) == 40);
static_assert(sizeof(tpool_host_api) == 88);  // ABI 1.1 appended attempt
static_assert(offsetof(tpool_host_api, run_children) == 72, "ABI 1.0's table is unchanged");
static_assert(offsetof(tpool_host_api, attempt) == 80, "ABI 1.1 appends after it");
static_assert(sizeof(tpool_child_result) == 32);

using tpool::plugin_host::JobCode;
static_assert(static_cast<int>(JobCode::kError) == TPOOL_STATUS_ERROR);
static_assert(static_cast<int>(JobCode::kCancelled) == TPOOL_STATUS_CANCELLED);
static_assert(static_cast<int>(JobCode::kDeadlineExceeded) == TPOOL_STATUS_DEADLINE_EXCEEDED);
static_assert(static_cast<int>(JobCode::kOutputTooLarge) == TPOOL_STATUS_OUTPUT_TOO_LARGE);
static_assert(static_cast<int>(JobCode::kInputTooLarge) == TPOOL_STATUS_INPUT_TOO_LARGE);
static_assert(static_cast<int>(JobCode::kUnknownHandler) == TPOOL_STATUS_UNKNOWN_HANDLER);
static_assert(static_cast<int>(JobCode::kInternal) == TPOOL_STATUS_INTERNAL);
static_assert(static_cast<int>(JobCode::kRetry) == TPOOL_STATUS_RETRY);
static_assert(static_cast<int>(JobCode::kPermanent) == TPOOL_STATUS_PERMANENT);
static_assert(TPOOL_STATUS_INTERNAL == 8 && TPOOL_STATUS_RETRY == 9 && TPOOL_STATUS_PERMANENT == 10,
              "status values are appended, never renumbered");

std::int32_t call(void*, tpool_job*, const std::uint8_t*, std::size_t) {
  return 0;
}

TEST(PluginAbi, HeaderMacroFillsSizesAndVersion) {
  static const tpool_handler handlers[] = {{"cxx", "C++ check", TPOOL_LANE_BLOCKING, 0, 7, call}};
  static const tpool_plugin plugin = {
      TPOOL_PLUGIN_HEADER, "cxx", "1", "C++ check", handlers, 1, nullptr, nullptr,
  };
  EXPECT_EQ(plugin.struct_size, sizeof(tpool_plugin));
  EXPECT_EQ(plugin.abi_major, static_cast<std::uint32_t>(TPOOL_PLUGIN_ABI_MAJOR));
  EXPECT_EQ(plugin.abi_minor, static_cast<std::uint32_t>(TPOOL_PLUGIN_ABI_MINOR));
  EXPECT_EQ(plugin.handler_size, sizeof(tpool_handler));
  EXPECT_EQ(plugin.handlers[0].max_input_bytes, 7u);
}

TEST(PluginAbi, HostHasChecksTheTableSize) {
  tpool_host_api api{};
  api.struct_size = static_cast<std::uint32_t>(offsetof(tpool_host_api, run_children));
  EXPECT_TRUE(TPOOL_HOST_HAS(&api, progress));
  EXPECT_FALSE(TPOOL_HOST_HAS(&api, run_children));
  api.struct_size = sizeof api;
  EXPECT_TRUE(TPOOL_HOST_HAS(&api, run_children));
}

}  // namespace
