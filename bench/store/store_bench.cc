// bench_store: the journal's writer thread on its own, fed the records the
// engine writes for durable jobs (durable.cc): an accept of a batch of jobs
// whose caller waits for the commit, then each job's start and end, which
// nobody waits for and which ride together in a later commit (writer.h, W6).
// One iteration is one batch: accept, wait, start + end of every job, and a
// flush() so the iteration's records are on disk before the next begins.
// items_processed counts jobs: items/s is durable jobs per second the writer
// records; the Stream's durable ceiling (docs/benchmarks.md, "Store").
//
// Arguments: the batch (jobs per accept). The database lives in a fresh
// directory under $TMPDIR (default /tmp), removed afterwards, so the disk
// measured is the one tpoold's tests use; set TMPDIR to measure another.
#include <benchmark/benchmark.h>
#include <stdlib.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

#include "tpool/store/journal.h"

namespace {

using tpool::store::JobRecord;
using tpool::store::Journal;
using tpool::store::JournalOptions;
using tpool::store::RecordState;

std::filesystem::path make_dir() {
  const char* tmp = getenv("TMPDIR");
  std::string templ =
      std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/bench_store.XXXXXX";
  if (mkdtemp(templ.data()) == nullptr) {
    std::perror("bench_store: mkdtemp");
    std::exit(1);
  }
  return templ;
}

// Waits for one Committed callback.
class Done {
 public:
  Journal::Committed callback() {
    return [this](const tpool::Status& s) {
      std::lock_guard lk(mu_);
      ok_ = s.ok();
      done_ = true;
      cv_.notify_one();
    };
  }
  bool wait() {
    std::unique_lock lk(mu_);
    cv_.wait(lk, [&] { return done_; });
    done_ = false;
    return ok_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false, ok_ = false;
};

void BM_DurableJobs(benchmark::State& state) {
  const auto batch = static_cast<std::size_t>(state.range(0));
  const std::filesystem::path dir = make_dir();
  JournalOptions opts;
  opts.path = (dir / "jobs.db").string();
  auto opened = Journal::open(opts);
  if (!opened.ok()) {
    state.SkipWithError(opened.status().message().c_str());
    return;
  }
  std::unique_ptr<Journal> journal = std::move(opened).value();
  const std::uint64_t first_id = journal->next_id_floor();
  std::uint64_t next_id = first_id;
  const std::string payload(16, 'p');
  Done done;
  for (auto _ : state) {
    std::vector<JobRecord> jobs(batch);
    const std::uint64_t first = next_id;
    for (JobRecord& r : jobs) {
      r.id = next_id++;
      r.handler = "echo";
      r.payload = payload;
      r.accepted_unix_ms = 1;
    }
    journal->append_accepted(std::move(jobs), done.callback());
    if (!done.wait()) {
      state.SkipWithError("an accept's commit failed");
      break;
    }
    for (std::uint64_t id = first; id < next_id; ++id) {
      journal->append_started(id, 1);
      journal->append_ended(id, RecordState::kSucceeded, payload, {}, 2);
    }
    if (!journal->flush().ok()) {
      state.SkipWithError("a start or end's commit failed");
      break;
    }
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(batch));
  const tpool::store::JournalStats st = journal->stats();
  state.counters["commits_per_job"] =
      benchmark::Counter(static_cast<double>(st.commits) /
                         static_cast<double>(std::max<std::uint64_t>(1, next_id - first_id)));
  journal.reset();
  std::filesystem::remove_all(dir);
}
BENCHMARK(BM_DurableJobs)
    ->Arg(1)
    ->Arg(100)
    ->Arg(1000)
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
