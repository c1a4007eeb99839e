// bench_pool_switches: the build-time switches (TPOOL_SINGLE_POOL,
// TPOOL_TIMESTAMPS=disabled, TPOOL_SCHEDULER_VARIANT=work_stealing, and all
// three) against a baseline copy built with the defaults, side by side: each
// repetition runs every pool_switch_* probe once, in an order rotated per
// repetition, and the medians are compared. A gain above 0 means the switch
// made tpool faster. docs/benchmarks.md "Lanes and build-time switches".
#include <unistd.h>

#include <cstdio>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "driver.h"

namespace {

const std::vector<std::string> kProbes = {"baseline", "single_pool", "no_timestamps",
                                          "pinned_work_stealing", "all_three"};
const std::vector<std::string> kScenarios = {"contended_spawn_8x", "cpu_work_100us",
                                             "mixed_fast_slow", "mixed_fast_slow_paced"};

struct Row {
  double ns = 0, overhead = 0, p50 = 0, p99 = 0;
};

std::string self_dir() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return ".";
  std::string p(buf, static_cast<std::size_t>(n));
  return p.substr(0, p.rfind('/'));
}

// Runs one probe and parses its RESULT lines.
std::map<std::string, Row> run_probe(const std::string& path) {
  std::map<std::string, Row> out;
  FILE* f = popen(path.c_str(), "r");
  if (f == nullptr) {
    std::fprintf(stderr, "bench_pool_switches: cannot run %s\n", path.c_str());
    std::exit(2);
  }
  char line[512];
  while (std::fgets(line, sizeof line, f) != nullptr) {
    std::istringstream in(line);
    std::string tag, name;
    Row r;
    if (in >> tag >> name >> r.ns >> r.overhead >> r.p50 >> r.p99 && tag == "RESULT") out[name] = r;
  }
  if (pclose(f) != 0 || out.size() != kScenarios.size()) {
    std::fprintf(stderr,
                 "bench_pool_switches: %s failed or printed %zu of %zu results; build it with "
                 "`cmake --build <dir> --target bench_pool_switches`\n",
                 path.c_str(), out.size(), kScenarios.size());
    std::exit(2);
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  const bench::Args args = bench::parse_args(argc, argv);
  const std::string dir = self_dir();
  const std::string load_before = bench::loadavg();
  std::printf("bench_pool_switches: %u cores, load %s, %d reps interleaved\n",
              std::thread::hardware_concurrency(), load_before.c_str(), args.reps);
  std::map<std::string, std::map<std::string, std::vector<Row>>> rows;  // [probe][scenario]
  for (int rep = 0; rep < args.reps; ++rep) {
    for (std::size_t k = 0; k < kProbes.size(); ++k) {
      const std::string& p = kProbes[(k + static_cast<std::size_t>(rep)) % kProbes.size()];
      for (const auto& [s, r] : run_probe(dir + "/pool_switch_" + p)) rows[p][s].push_back(r);
    }
    std::fprintf(stderr, "bench_pool_switches: repetition %d/%d done, load %s\n", rep + 1,
                 args.reps, bench::loadavg().c_str());
  }
  const std::string load_after = bench::loadavg();
  auto med = [&](const std::string& p, const std::string& s, double Row::*f) {
    std::vector<double> v;
    for (const Row& r : rows[p][s]) v.push_back(r.*f);
    return bench::median(v);
  };
  std::ostringstream json;
  json << "{\n\"machine\": " << bench::machine_json(load_before, load_after)
       << ",\n\"reps\": " << args.reps << ",\n\"results\": [";
  bool first = true;
  for (const std::string& s : kScenarios) {
    const double base = med("baseline", s, &Row::ns);
    std::printf("\n%s\n  %-22s %12s %14s %12s %12s\n", s.c_str(), "build", "ns/task",
                "gain vs base", "fast p50 us", "fast p99 us");
    for (const std::string& p : kProbes) {
      const double m = med(p, s, &Row::ns);
      const double gain = base > 0 ? 1.0 - m / base : 0;
      const double p50 = med(p, s, &Row::p50), p99 = med(p, s, &Row::p99);
      std::printf("  %-22s %12.1f %13.1f%% %12.1f %12.1f\n", p.c_str(), m, gain * 100, p50 / 1e3,
                  p99 / 1e3);
      std::vector<double> ns;
      for (const Row& r : rows[p][s]) ns.push_back(r.ns);
      json << (first ? "\n" : ",\n") << "  {\"scenario\": \"" << s << "\", \"build\": \"" << p
           << "\", \"median_ns_per_task\": " << m << ", \"gain_vs_baseline\": " << gain
           << ", \"median_overhead\": " << med(p, s, &Row::overhead)
           << ", \"median_fast_p50_ns\": " << p50 << ", \"median_fast_p99_ns\": " << p99
           << ", \"ns_per_task_samples\": " << bench::json_array(ns) << "}";
      first = false;
    }
  }
  bench::finish_report(json, load_before, load_after, args.out);
  return 0;
}
