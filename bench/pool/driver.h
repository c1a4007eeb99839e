// What the pool benchmark drivers share: the machine description, medians,
// and the command line (Google Benchmark's --benchmark_out / _repetitions /
// _filter are understood, so scripts/run-benchmarks.sh can run these like
// every other bench_* executable).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace bench {

struct Args {
  int reps = 5;
  int workers = 2;     // bench_pool: workers per pool (--workers=N; default: the cores here)
  std::string out;     // JSON file; empty: none
  std::string filter;  // substrings of "<scenario>/<pool>", '|'-separated; empty: all

  // True if name contains any of the '|'-separated substrings of filter.
  bool selects(std::string_view name) const {
    if (filter.empty()) return true;
    std::string_view f = filter;
    for (;;) {
      const std::size_t bar = f.find('|');
      if (name.find(f.substr(0, bar)) != std::string_view::npos) return true;
      if (bar == std::string_view::npos) return false;
      f.remove_prefix(bar + 1);
    }
  }
};

inline Args parse_args(int argc, char** argv) {
  Args a;
  auto value = [](std::string_view arg, std::string_view key, std::string& out) {
    if (arg.substr(0, key.size()) != key) return false;
    out = std::string(arg.substr(key.size()));
    return true;
  };
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    std::string v;
    if (value(arg, "--reps=", v)) {
      a.reps = std::max(1, std::stoi(v));  // fewer than 5 only to profile (callgrind)
    } else if (value(arg, "--benchmark_repetitions=", v)) {
      a.reps = std::max(5, std::stoi(v));  // medians of at least 5 (issue 4)
    } else if (value(arg, "--workers=", v)) {
      a.workers = std::clamp(std::stoi(v), 1, 256);
    } else if (value(arg, "--json=", v) || value(arg, "--benchmark_out=", v)) {
      a.out = v;
    } else if (value(arg, "--filter=", v) || value(arg, "--benchmark_filter=", v)) {
      a.filter = v == "." || v == ".*" || v == "all" ? "" : v;
    } else if (arg.substr(0, 12) == "--benchmark_") {
      // other Google Benchmark flags (out_format, aggregates) do not apply
    } else {
      std::fprintf(stderr,
                   "usage: %s [--reps=N (default 5; fewer only to profile)] [--workers=N] "
                   "[--json=FILE] [--filter=SUBSTRING[|SUBSTRING...]]\n"
                   "unknown argument '%s'\n",
                   argv[0], argv[i]);
      std::exit(2);
    }
  }
  return a;
}

inline std::string read_first_line_with(const char* path, std::string_view key) {
  std::ifstream f(path);
  for (std::string line; std::getline(f, line);) {
    if (line.rfind(key, 0) == 0) {
      const auto colon = line.find(':');
      return colon == std::string::npos ? line : line.substr(colon + 2);
    }
  }
  return "unknown";
}

inline std::string loadavg() {
  std::ifstream f("/proc/loadavg");
  std::string a, b, c;
  f >> a >> b >> c;
  return a + " " + b + " " + c;
}

inline std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

inline std::string machine_json(const std::string& load_before, const std::string& load_after) {
  std::ostringstream o;
  o << "{\"nproc\": " << std::thread::hardware_concurrency() << ", \"cpu\": \""
    << read_first_line_with("/proc/cpuinfo", "model name") << "\", \"date\": \"" << utc_now()
    << "\", \"loadavg_before\": \"" << load_before << "\", \"loadavg_after\": \"" << load_after
    << "\"}";
  return o.str();
}

inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

inline std::string json_array(const std::vector<double>& v) {
  std::ostringstream o;
  o << "[";
  for (std::size_t i = 0; i < v.size(); ++i) o << (i ? ", " : "") << v[i];
  o << "]";
  return o.str();
}

// The end of a run: close the JSON rows array, print the load averages, and
// write the JSON to `out` when one was asked for.
inline void finish_report(std::ostringstream& json, const std::string& load_before,
                          const std::string& load_after, const std::string& out) {
  json << "\n]\n}\n";
  std::printf("\nload average before %s, after %s\n", load_before.c_str(), load_after.c_str());
  if (!out.empty()) {
    std::ofstream(out) << json.str();
    std::printf("JSON: %s\n", out.c_str());
  }
}

}  // namespace bench
