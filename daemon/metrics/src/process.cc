// process_* metrics from /proc (prometheus-cpp has no process collector).
// Field numbers follow proc(5), "/proc/pid/stat".
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tpool/metrics/exporter.h"

namespace tpool::metrics {
namespace {

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

ProcessStats read_process_stats(const std::string& proc) {
  ProcessStats p;
  const double ticks = static_cast<double>(::sysconf(_SC_CLK_TCK));
  const double page = static_cast<double>(::sysconf(_SC_PAGESIZE));

  double boot_time = -1;
  {
    std::istringstream in(slurp(proc + "/stat"));
    std::string key;
    while (in >> key) {
      if (key == "btime") {
        in >> boot_time;
        break;
      }
      in.ignore(1 << 20, '\n');
    }
  }

  // The command name (field 2) is in parentheses and may hold spaces or
  // parentheses itself: the fields after it start after the last ')'.
  const std::string stat = slurp(proc + "/self/stat");
  if (const auto close = stat.rfind(')'); close != std::string::npos) {
    std::istringstream in(stat.substr(close + 1));
    std::vector<std::string> f;  // f[0] is field 3
    for (std::string t; in >> t;) f.push_back(t);
    auto field = [&](std::size_t n) { return std::stod(f.at(n - 3)); };
    if (f.size() >= 22) {
      p.cpu_seconds = (field(14) + field(15)) / ticks;
      p.threads = field(20);
      if (boot_time >= 0) p.start_time_seconds = boot_time + field(22) / ticks;
      p.virtual_bytes = field(23);
      p.resident_bytes = field(24) * page;
    }
  }

  std::error_code ec;
  double fds = 0;
  for (std::filesystem::directory_iterator it(proc + "/self/fd", ec), end; !ec && it != end;
       it.increment(ec)) {
    ++fds;
  }
  if (!ec) p.open_fds = fds;

  std::istringstream limits(slurp(proc + "/self/limits"));
  for (std::string line; std::getline(limits, line);) {
    if (line.rfind("Max open files", 0) == 0) {
      std::istringstream l(line.substr(14));
      std::string soft;
      if (l >> soft) p.max_fds = soft == "unlimited" ? -1 : std::stod(soft);
    }
  }
  return p;
}

}  // namespace tpool::metrics
