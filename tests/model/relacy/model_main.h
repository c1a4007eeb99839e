// The command line shared by the Relacy model binaries.
//
//   <model> [--bug=<name>] [--iterations=<n>] [--context-bound=<k>] [--list]
//
// Each run has two passes: Relacy's random scheduler for <n> iterations (each
// a random interleaving with random weak-memory choices), then its
// context-bound scheduler, which enumerates every schedule with at most <k>
// preemptions (k = 0 skips it). Each model picks its default: the bound whose
// enumeration finishes in seconds (the BoundedRing model's four threads and
// retry loops make even k = 1 take minutes, so it relies on the random pass).
//
// Retry loops in the models (a push that found the queue full and could not
// make room) call rl::yield: Relacy lets a load keep returning a stale value
// for as long as nothing forces it forward, so an unmarked spin on a stale
// value would be reported as a livelock that real cache coherence rules out.
// Without --bug the model runs against the queue as written and exits 0 only
// if Relacy explored every iteration without a failure. With --bug=<name> one
// seeded bug (relacy_atomics.h, Mutation) is installed and the binary exits 0
// only if Relacy reported a failure: the check is shown able to fail.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <span>
#include <string_view>

#include "relacy_atomics.h"

namespace tpool::model {

struct NamedBug {
  const char* name;
  const char* what;  // one line for the log: which operation is broken, how
  SeededBug bug;
};

// Runs `run(params)` (which calls rl::simulate for each of the model's test
// suites and returns true when all succeeded) with the bug the command line
// names installed; returns the process exit code.
template <class Run>
int model_main(int argc, char** argv, std::span<const NamedBug> bugs, unsigned default_iterations,
               unsigned default_context_bound, Run run) {
  const NamedBug* chosen = nullptr;
  unsigned iterations = default_iterations;
  unsigned context_bound = default_context_bound;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--list") {
      for (const NamedBug& b : bugs) std::printf("%s\t%s\n", b.name, b.what);
      return 0;
    }
    if (arg.starts_with("--iterations=")) {
      iterations = static_cast<unsigned>(std::strtoul(argv[i] + 13, nullptr, 10));
      continue;
    }
    if (arg.starts_with("--context-bound=")) {
      context_bound = static_cast<unsigned>(std::strtoul(argv[i] + 16, nullptr, 10));
      continue;
    }
    if (arg.starts_with("--bug=")) {
      const std::string_view name = arg.substr(6);
      for (const NamedBug& b : bugs) {
        if (name == b.name) chosen = &b;
      }
      if (chosen == nullptr) {
        std::fprintf(stderr, "unknown seeded bug '%.*s'; run with --list to see the names\n",
                     static_cast<int>(name.size()), name.data());
        return 2;
      }
      continue;
    }
    std::fprintf(stderr, "unknown argument '%s'; usage: %s [--bug=<name>] [--iterations=<n>]\n",
                 argv[i], argv[0]);
    return 2;
  }
  if (chosen != nullptr) {
    g_bug = chosen->bug;
    std::printf("seeded bug %s: %s\n", chosen->name, chosen->what);
  }
  // Random scheduler: each iteration is one interleaving with random
  // weak-memory choices. The iteration counts (per model, ~5 s each on this
  // machine) are picked by hand: every seeded bug is caught within the first
  // hundred iterations, so the clean runs explore thousands of times more.
  rl::test_params params;
  params.iteration_count = iterations;
  params.search_type = rl::random_scheduler_type;
  std::cout.setf(std::ios::unitbuf);
  std::printf("pass 1: random scheduler, %u iterations\n", iterations);
  bool clean = run(params);
  if (clean && context_bound != 0) {
    rl::test_params bounded;
    bounded.search_type = rl::fair_context_bound_scheduler_type;
    bounded.context_bound = context_bound;
    bounded.iteration_count = 1000000000;  // a cap only: it stops when all are enumerated
    std::printf("pass 2: context-bound scheduler, every schedule with <= %u preemptions\n",
                context_bound);
    clean = run(bounded);
  }
  if (chosen == nullptr) {
    std::printf(clean ? "model: no failure in any explored execution\n"
                      : "model: Relacy reported a failure in the queue as written\n");
    return clean ? 0 : 1;
  }
  std::printf(clean ? "model: Relacy did NOT catch seeded bug %s: the model is too weak\n"
                    : "model: Relacy caught seeded bug %s, as it must\n",
              chosen->name);
  return clean ? 1 : 0;
}

}  // namespace tpool::model
