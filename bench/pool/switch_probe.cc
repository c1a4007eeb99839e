// pool_switch_<name>: one repetition of the scenarios the build-time switches
// are measured on, with tpool (work_stealing, ring, 2 workers) built with that
// copy's switches (bench/pool/CMakeLists.txt). Run by bench_pool_switches,
// which interleaves the copies; prints one line per scenario:
//   RESULT <scenario> <ns/task> <overhead> <fast p50 ns> <fast p99 ns>
#include <cstdio>

#include "scenarios.h"
#include "tpool_runner.h"

int main() {
  constexpr int kWorkers = 2;
  bench::calibrate_spin();
  const bench::TpoolSetup setup{};  // work_stealing, ring: the defaults
  auto report = [](const char* name, const bench::Sample& s) {
    std::printf("RESULT %s %.3f %.5f %.0f %.0f\n", name, s.ns_per_task, s.overhead, s.p50_ns,
                s.p99_ns);
  };
  {
    bench::TpoolRunner r(setup, kWorkers);
    report("contended_spawn_8x", bench::contended_spawn_8x(r));
  }
  {
    bench::TpoolRunner r(setup, kWorkers);
    report("cpu_work_100us", bench::cpu_work_100us(r, kWorkers));
  }
  {
    bench::TpoolRunner r(setup, kWorkers);
    report("mixed_fast_slow", bench::mixed_fast_slow(r, false));
  }
  {
    bench::TpoolRunner r(setup, kWorkers);
    report("mixed_fast_slow_paced", bench::mixed_fast_slow(r, true));
  }
  return 0;
}
