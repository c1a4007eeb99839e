// ListJobs and Retry (issue 17, item 6: the dead letters): the retained jobs
// by state, handler and label, a page at a time, and an ended job run again
// as a new job.
//
//  (L1) list() reads the result store's jobs (ResultStore::list, a copy of
//       the pointers under its lock) and, with a journal, the journal's
//       ended records of jobs not in memory (durable jobs of earlier runs,
//       D5); it filters outside every lock, on fields that do not change
//       once a job is stored (handler, labels) and on state() (acquire). Pages
//       are by id, ascending: the page token is the last id returned, so a
//       job that ends or is evicted between pages is never returned twice.
//  (L2) retry() builds a new JobSpec from the ended job's spec, whose payload
//       a job that did not succeed keeps read-only (inv 5 in job.h), and
//       submits it through admission like any request (A1-A9): the same
//       checks, sentences and durability.
#include <algorithm>

#include "record_state.h"
#include "tpool/engine/engine.h"
#include "tpool/store/journal.h"

namespace tpool::engine {

namespace {

bool matches(const Job& j, const ListFilter& f) {
  if (!f.states.empty() && std::find(f.states.begin(), f.states.end(), j.state()) == f.states.end())
    return false;
  if (!f.handler.empty() && j.handler_name() != f.handler) return false;
  if (f.label_key.empty()) return true;
  for (const auto& [k, v] : j.labels()) {
    if (k == f.label_key && (f.label_value.empty() || v == f.label_value)) return true;
  }
  return false;
}

std::optional<store::RecordState> final_record_state(JobState s) {
  if (!is_final(s)) return std::nullopt;
  return record_state(s);
}

}  // namespace

// (L1)
std::vector<JobPtr> Engine::list(const ListFilter& f, bool* more) {
  const std::size_t want = f.limit + 1;  // one more tells whether a next page exists
  std::vector<JobPtr> out;
  for (auto& j : store_->list(f.after_id)) {
    if (!matches(*j, f)) continue;
    out.push_back(std::move(j));
    if (out.size() == want) break;
  }
  // The journal's ended jobs not in memory (a live durable job always is).
  bool journal_wanted = journal_ != nullptr;
  store::ListFilter jf;
  if (journal_wanted) {
    for (JobState s : f.states) {
      if (auto rs = final_record_state(s)) jf.states.push_back(*rs);
    }
    if (!f.states.empty() && jf.states.empty()) journal_wanted = false;  // only live states asked
    if (f.states.empty()) {
      jf.states = {store::RecordState::kSucceeded, store::RecordState::kFailed,
                   store::RecordState::kCancelled, store::RecordState::kTimedOut};
    }
  }
  if (journal_wanted) {
    jf.handler = f.handler;
    jf.label_key = f.label_key;
    jf.label_value = f.label_value;
    jf.after_id = f.after_id;
    jf.limit = want;
    for (const store::JobRecord& r : journal_->list(jf)) {
      if (store_->get(r.id) != nullptr) continue;  // the memory's copy is the live one
      out.push_back(job_from_record(r));
    }
    std::sort(out.begin(), out.end(),
              [](const auto& a, const auto& b) { return a->id() < b->id(); });
  }
  *more = out.size() > f.limit;
  if (out.size() > f.limit) out.resize(f.limit);
  return out;
}

// (L2)
Engine::SubmitResult Engine::retry(std::uint64_t id, DoneFn done, void* user) {
  Expected<JobPtr> found = find(id);
  if (!found.ok()) return {{}, std::move(found.error)};
  const Job& old = *found.value;
  const JobState state = old.state();
  if (!is_final(state) || state == JobState::kSucceeded) {
    rejected_invalid_.fetch_add(1, std::memory_order_relaxed);  // relaxed: a reporting counter
    return {{},
            Error{ErrorCode::kFailedPrecondition,
                  "job " + std::to_string(id) + " is " + std::string(to_string(state)) +
                      ": Retry runs a failed, timed out or cancelled job again; " +
                      (state == JobState::kSucceeded ? "submit a new job to run it again"
                                                     : "wait for it to end first (Wait)")}};
  }
  JobSpec s;
  s.handler = old.handler_name();
  s.payload = old.payload();  // kept, read-only, by a job that did not succeed (inv 5)
  s.lane = old.requested_lane();
  s.labels = old.labels();
  s.retain = true;
  s.max_attempts = old.max_attempts();
  s.backoff_base = old.backoff_base();
  s.backoff_cap = old.backoff_cap();
  s.durable = old.durable_requested();
  s.timeout = old.timeout();
  if (s.timeout.count() > 0) s.deadline = std::chrono::steady_clock::now() + s.timeout;
  return submit(std::move(s), done, user);
}

}  // namespace tpool::engine
