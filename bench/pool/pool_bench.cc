// bench_pool: tpool (every scheduler variant x queue kind) against oneTBB
// task_group, Boost.Asio thread_pool and rvaser thread_pool on the seed's
// scenarios (scenarios.h), in one run, 2 workers each. Every scenario runs
// --reps times (at least 5), interleaved across pools with the pool order
// rotated per repetition; medians are reported with the ratio to oneTBB
// (tpool time / TBB time: below 1 means tpool is faster). docs/benchmarks.md
// "Pool" says how to read it.
#include <tbb/global_control.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "driver.h"
#include "peer_runners.h"
#include "scenarios.h"
#include "tpool_runner.h"

namespace {

using bench::Sample;
// Workers per pool (--workers=N, default 2: the cores of the machine the
// figures in docs/benchmarks.md come from).
int g_workers = 2;

const std::vector<std::string> kScenarios = {
    "flood_1m_batched", "nested_fanout_4x", "contended_spawn_8x",    "contended_spawn_8x_plain",
    "cpu_work_100us",   "mixed_fast_slow",  "mixed_fast_slow_paced",
};

template <class R>
Sample run_scenario(R& r, const std::string& s) {
  if (s == "flood_1m_batched") return bench::flood_1m_batched(r);
  if (s == "nested_fanout_4x") return bench::nested_fanout_4x(r);
  if (s == "contended_spawn_8x") return bench::contended_spawn_8x(r);
  if (s == "contended_spawn_8x_plain") return bench::contended_spawn_8x(r, true);
  if (s == "cpu_work_100us") return bench::cpu_work_100us(r, g_workers);
  if (s == "mixed_fast_slow") return bench::mixed_fast_slow(r, false);
  return bench::mixed_fast_slow(r, true);
}

struct PoolDef {
  std::string name;
  bool mixed_only = false;  // the blocking-lane variant only matters for mixed_fast_slow
  std::function<Sample(const std::string&)> run;
};

// A tpool row: the scenario, then the pool's wake statistics per 1,000 tasks.
Sample run_tpool(const bench::TpoolSetup& setup, const std::string& s) {
  bench::TpoolRunner r(setup, g_workers);
  Sample out = run_scenario(r, s);
  const tpool::PoolStats st = r.pool().stats();
  const double k = static_cast<double>(std::max<std::uint64_t>(1, st.completed)) / 1000.0;
  out.parks_per_ktask = static_cast<double>(st.parks) / k;
  out.no_work_wakeups_per_ktask = static_cast<double>(st.wakeups_no_work) / k;
  return out;
}

template <class R, class... A>
std::function<Sample(const std::string&)> make(A... a) {
  return [=](const std::string& s) {
    R r(a...);
    return run_scenario(r, s);
  };
}

std::vector<PoolDef> pools() {
  using tpool::QueueKind;
  using tpool::SchedulerVariant;
  std::vector<PoolDef> v;
  for (auto var : {SchedulerVariant::kGlobalQueue, SchedulerVariant::kWorkStealing,
                   SchedulerVariant::kLaneExtension}) {
    for (auto kind : {QueueKind::kRing, QueueKind::kChaseLev}) {
      const std::string name =
          "tpool/" + std::string(tpool::to_string(var)) + "/" + std::string(tpool::to_string(kind));
      v.push_back({name, false, [var, kind](const std::string& s) {
                     // nested_fanout_4x keeps up to ~262k tasks live at once (the
                     // local ring queue is FIFO for its owner, so the tree unfolds
                     // breadth first); a worker blocked on a descriptor while every
                     // other worker is too deadlocks the pool, so size it.
                     bench::TpoolSetup setup{var, kind};
                     if (s == "nested_fanout_4x") setup.queue_capacity = std::size_t{1} << 19;
                     return run_tpool(setup, s);
                   }});
    }
  }
  // A 32-entry owner LIFO stack (lifo_capacity = 32, opt-in) against the
  // seed's one-entry slot of the rows above, same variant and queue
  // (docs/algorithms.md, "The owner's LIFO stack").
  v.push_back({"tpool/work_stealing/ring/lifo32", false, [](const std::string& s) {
                 bench::TpoolSetup setup{SchedulerVariant::kWorkStealing, QueueKind::kRing};
                 setup.lifo_capacity = 32;
                 if (s == "nested_fanout_4x") setup.queue_capacity = std::size_t{1} << 19;
                 return run_tpool(setup, s);
               }});
  // The searching-worker gate (searching_gate = true, opt-in) against the
  // same variant and queue without it (docs/algorithms.md, "The
  // searching-worker gate"): compare ns/task and the wake statistics.
  v.push_back({"tpool/work_stealing/ring/gate", false, [](const std::string& s) {
                 bench::TpoolSetup setup{SchedulerVariant::kWorkStealing, QueueKind::kRing};
                 setup.searching_gate = true;
                 if (s == "nested_fanout_4x") setup.queue_capacity = std::size_t{1} << 19;
                 return run_tpool(setup, s);
               }});
  v.push_back({"tpool/lane_extension/ring/slow_on_blocking_lane", true,
               make<bench::TpoolRunner>(
                   bench::TpoolSetup{SchedulerVariant::kLaneExtension, QueueKind::kRing, true},
                   g_workers)});
  v.push_back({"onetbb/task_group", false, make<bench::TbbRunner>(g_workers)});
  v.push_back({"asio/thread_pool", false, make<bench::AsioRunner>(g_workers)});
  v.push_back({"rvaser/thread_pool", false, make<bench::RvaserRunner>(g_workers)});
  return v;
}

constexpr const char* kTbb = "onetbb/task_group";

}  // namespace

int main(int argc, char** argv) {
  const bench::Args args = bench::parse_args(argc, argv);
  g_workers = args.workers;
  // One TBB worker thread + the thread in wait(): 2 running threads.
  tbb::global_control tbb_threads(tbb::global_control::max_allowed_parallelism, g_workers);
  bench::calibrate_spin();
  const std::string load_before = bench::loadavg();
  std::printf(
      "bench_pool: %u cores, load %s, %d reps interleaved, %d workers per pool, "
      "spin %llu units/us\n",
      std::thread::hardware_concurrency(), load_before.c_str(), args.reps, g_workers,
      static_cast<unsigned long long>(bench::g_units_per_us));

  const std::vector<PoolDef> defs = pools();
  // samples[scenario][pool]
  std::map<std::string, std::map<std::string, std::vector<Sample>>> samples;
  for (int rep = 0; rep < args.reps; ++rep) {
    for (const std::string& s : kScenarios) {
      const bool mixed = s.rfind("mixed", 0) == 0;
      for (std::size_t k = 0; k < defs.size(); ++k) {
        const PoolDef& p = defs[(k + static_cast<std::size_t>(rep)) % defs.size()];
        if (p.mixed_only && !mixed) continue;
        if (!args.selects(s + "/" + p.name)) continue;
        samples[s][p.name].push_back(p.run(s));
      }
    }
    std::fprintf(stderr, "bench_pool: repetition %d/%d done, load %s\n", rep + 1, args.reps,
                 bench::loadavg().c_str());
  }
  const std::string load_after = bench::loadavg();

  std::ostringstream json;
  json << "{\n\"machine\": " << bench::machine_json(load_before, load_after)
       << ",\n\"workers\": " << g_workers << ",\n\"reps\": " << args.reps << ",\n\"results\": [";
  bool first = true;
  for (const std::string& s : kScenarios) {
    if (samples[s].empty()) continue;
    auto med = [&](const std::string& pool, double Sample::*f) {
      std::vector<double> v;
      for (const Sample& x : samples[s][pool]) v.push_back(x.*f);
      return bench::median(v);
    };
    const double tbb = samples[s].count(kTbb) ? med(kTbb, &Sample::ns_per_task) : 0;
    std::printf("\n%s\n  %-50s %12s %10s %12s %12s\n", s.c_str(), "pool", "ns/task", "vs TBB",
                s == "cpu_work_100us" ? "overhead" : "fast p50 us",
                s == "cpu_work_100us" ? "" : "fast p99 us");
    for (const PoolDef& p : defs) {
      if (!samples[s].count(p.name)) continue;
      std::vector<double> ns;
      for (const Sample& x : samples[s][p.name]) ns.push_back(x.ns_per_task);
      const double m = bench::median(ns);
      const double ratio = tbb > 0 ? m / tbb : 0;
      const double over = med(p.name, &Sample::overhead);
      const double p50 = med(p.name, &Sample::p50_ns);
      const double p99 = med(p.name, &Sample::p99_ns);
      const double parks = med(p.name, &Sample::parks_per_ktask);
      const double no_work = med(p.name, &Sample::no_work_wakeups_per_ktask);
      if (s == "cpu_work_100us") {
        std::printf("  %-50s %12.1f %9.2fx %11.1f%%", p.name.c_str(), m, ratio, over * 100);
      } else if (s.rfind("mixed", 0) == 0) {
        std::printf("  %-50s %12.1f %9.2fx %12.1f %12.1f", p.name.c_str(), m, ratio, p50 / 1e3,
                    p99 / 1e3);
      } else {
        std::printf("  %-50s %12.1f %9.2fx", p.name.c_str(), m, ratio);
      }
      if (p.name.rfind("tpool/", 0) == 0) {
        std::printf("   parks/1k %.2f, wake-ups with no work/1k %.2f", parks, no_work);
      }
      std::printf("\n");
      json << (first ? "\n" : ",\n") << "  {\"scenario\": \"" << s << "\", \"pool\": \"" << p.name
           << "\", \"median_ns_per_task\": " << m << ", \"ratio_to_onetbb\": " << ratio
           << ", \"median_overhead\": " << over << ", \"median_fast_p50_ns\": " << p50
           << ", \"median_fast_p99_ns\": " << p99 << ", \"median_parks_per_1k_tasks\": " << parks
           << ", \"median_no_work_wakeups_per_1k_tasks\": " << no_work
           << ", \"ns_per_task_samples\": " << bench::json_array(ns) << "}";
      first = false;
    }
  }
  bench::finish_report(json, load_before, load_after, args.out);
  return 0;
}
