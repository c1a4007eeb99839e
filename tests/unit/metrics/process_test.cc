// read_process_stats over a fabricated /proc tree (field numbers per proc(5))
// and over the real one.
#include <unistd.h>

#include <gtest/gtest.h>
#include <filesystem>
#include <fstream>

#include "tpool/metrics/exporter.h"

namespace tpool::metrics {
namespace {

namespace fs = std::filesystem;

TEST(ProcessStats, ParsesAFabricatedProc) {
  const fs::path root = fs::temp_directory_path() / ("tpool-proc-" + std::to_string(::getpid()));
  fs::create_directories(root / "self" / "fd");
  for (int i = 0; i < 5; ++i) std::ofstream(root / "self" / "fd" / std::to_string(i)) << "";
  std::ofstream(root / "stat") << "cpu  1 2 3 4\nintr 5\nbtime 1700000000\nprocesses 9\n";
  const double tck = static_cast<double>(::sysconf(_SC_CLK_TCK));
  const double page = static_cast<double>(::sysconf(_SC_PAGESIZE));
  // A command name with a space and a ')' inside: fields count after the last ')'.
  std::ofstream(root / "self" / "stat")
      << "42 (tpool d) x) S 1 42 42 0 -1 4194560 10 0 0 0 300 200 0 0 20 0 7 0 5000 123456789 "
         "1000 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0\n";
  std::ofstream(root / "self" / "limits")
      << "Limit                     Soft Limit           Hard Limit           Units\n"
         "Max cpu time              unlimited            unlimited            seconds\n"
         "Max open files            1024                 524288               files\n";
  const ProcessStats p = read_process_stats(root.string());
  EXPECT_DOUBLE_EQ(p.cpu_seconds, 500 / tck);
  EXPECT_DOUBLE_EQ(p.threads, 7);
  EXPECT_DOUBLE_EQ(p.start_time_seconds, 1700000000 + 5000 / tck);
  EXPECT_DOUBLE_EQ(p.virtual_bytes, 123456789);
  EXPECT_DOUBLE_EQ(p.resident_bytes, 1000 * page);
  EXPECT_DOUBLE_EQ(p.open_fds, 5);
  EXPECT_DOUBLE_EQ(p.max_fds, 1024);
  fs::remove_all(root);
}

TEST(ProcessStats, MissingFilesAreLeftOut) {
  const ProcessStats p = read_process_stats("/nonexistent-proc-root");
  EXPECT_LT(p.cpu_seconds, 0);
  EXPECT_LT(p.resident_bytes, 0);
  EXPECT_LT(p.open_fds, 0);
  EXPECT_LT(p.max_fds, 0);
  EXPECT_LT(p.start_time_seconds, 0);
}

TEST(ProcessStats, RealProcIsPlausible) {
  const ProcessStats p = read_process_stats();
  EXPECT_GE(p.cpu_seconds, 0);
  EXPECT_GT(p.resident_bytes, 0);
  EXPECT_GT(p.open_fds, 2);  // stdin, stdout, stderr at least
  EXPECT_GT(p.max_fds, 0);
  EXPECT_GT(p.threads, 0);
  EXPECT_GT(p.start_time_seconds, 1.6e9);
}

}  // namespace
}  // namespace tpool::metrics
