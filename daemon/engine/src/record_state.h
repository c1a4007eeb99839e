// The engine's JobState and the journal's RecordState, one to one (the
// journal's values are on disk; the engine's are not): durable.cc writes
// and reads records with them, listing.cc filters the journal's list.
#pragma once

#include "tpool/engine/job.h"
#include "tpool/store/journal.h"

namespace tpool::engine {

inline store::RecordState record_state(JobState s) noexcept {
  switch (s) {
    case JobState::kSucceeded:
      return store::RecordState::kSucceeded;
    case JobState::kFailed:
      return store::RecordState::kFailed;
    case JobState::kCancelled:
      return store::RecordState::kCancelled;
    case JobState::kTimedOut:
      return store::RecordState::kTimedOut;
    case JobState::kRunning:
      return store::RecordState::kRunning;
    case JobState::kScheduled:
      return store::RecordState::kScheduled;
    case JobState::kQueued:
      break;
  }
  return store::RecordState::kQueued;
}

inline JobState job_state(store::RecordState s) noexcept {
  switch (s) {
    case store::RecordState::kSucceeded:
      return JobState::kSucceeded;
    case store::RecordState::kFailed:
      return JobState::kFailed;
    case store::RecordState::kCancelled:
      return JobState::kCancelled;
    case store::RecordState::kTimedOut:
      return JobState::kTimedOut;
    case store::RecordState::kRunning:
      return JobState::kRunning;
    case store::RecordState::kScheduled:
      return JobState::kScheduled;
    case store::RecordState::kQueued:
      break;
  }
  return JobState::kQueued;
}

}  // namespace tpool::engine
