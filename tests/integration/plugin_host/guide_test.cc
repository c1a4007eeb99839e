// The minimal plugin of docs/plugins.md, compiled from the guide's own code
// block (see this folder's CMakeLists.txt), loads and behaves as the guide
// says.
#include <gtest/gtest.h>

#include <string>

#include "plugin_test_support.h"
#include "tpool/plugin_host/host.h"

namespace tpool::plugin_host {
namespace {

TEST(PluginGuide, MinimalPluginLoadsAndGreets) {
  testing::TempDir dir;
  dir.add(std::string(TPOOL_IT_PLUGIN_DIR) + "/minimal.so");
  testing::LogRecorder log;
  auto loaded = Host::load(testing::config_for({dir.str()}, log, /*abort=*/true));
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  auto host = std::move(loaded).value();
  HandlerRef greet = host->find("greet");
  ASSERT_TRUE(greet);
  EXPECT_EQ(greet.info().plugin_name, "minimal");
  EXPECT_EQ(greet.info().max_input_bytes, 256u);
  testing::TestServices services(host.get());
  auto r = host->invoke(greet, "world", services);
  ASSERT_TRUE(r.ok()) << r.message;
  EXPECT_EQ(r.output, "hello, world");
  auto empty = host->invoke(greet, "", services);
  EXPECT_EQ(empty.code, JobCode::kInvalidInput);
  EXPECT_EQ(empty.message, "greet: the input must be a name, e.g. \"world\"");
  EXPECT_EQ(host->invoke(greet, std::string(257, 'x'), services).code, JobCode::kInputTooLarge);
}

}  // namespace
}  // namespace tpool::plugin_host
