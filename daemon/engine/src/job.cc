// Job: state transitions, waiters, and the services a handler sees
// (invariants in tpool/engine/job.h).
#include "tpool/engine/job.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <limits>
#include <string_view>
#include <thread>

#include "tpool/engine/engine.h"

namespace tpool::engine {

// ---- Job memory (job.h inv 7) ----
//
// Invariants (cited as M1..M4):
//  (M1) g_returned is a Treiber stack of freed Jobs' blocks. operator delete
//       pushes one (CAS, release); operator new takes the whole stack at
//       once (exchange, acquire), never one node, so no pop can see a node
//       that was popped and pushed again meanwhile (no ABA). The release
//       push and the acquire exchange order the freeing thread's last use of
//       the block (its destructor) before the next Job made in it.
//  (M2) A thread's cache (t_cache) is a list only that thread touches: the
//       stacks it took. operator new hands out its head first.
//  (M3) g_kept counts the blocks held (on the stack and in every cache): +1
//       by a push, -1 by a hand-out. A free that finds kKeptJobBlocks or
//       more held goes to malloc instead (relaxed: the bound is approximate
//       by the frees racing past it, at most one block per freeing thread).
//  (M4) A thread's cache goes back to malloc when the thread exits (its
//       thread_local's destructor), so a gRPC thread that goes keeps
//       nothing.
namespace {

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kRecycle = false;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kRecycle = false;
#else
constexpr bool kRecycle = true;
#endif
#else
constexpr bool kRecycle = true;
#endif

struct FreeBlock {
  FreeBlock* next;
};
[[maybe_unused]] std::atomic<FreeBlock*> g_returned{nullptr};  // (M1)
std::atomic<std::size_t> g_kept{0};                            // (M3)

struct BlockCache {  // (M2, M4)
  FreeBlock* head = nullptr;
  ~BlockCache() {
    while (head != nullptr) {
      FreeBlock* next = head->next;
      ::operator delete(head);
      g_kept.fetch_sub(1, std::memory_order_relaxed);
      head = next;
    }
  }
};
[[maybe_unused]] thread_local BlockCache t_cache;

}  // namespace

const bool Job::kRecyclesMemory = kRecycle;

void* Job::operator new(std::size_t size) {
  if constexpr (kRecycle) {
    BlockCache& c = t_cache;
    if (c.head == nullptr) {
      c.head = g_returned.exchange(nullptr, std::memory_order_acquire);  // (M1)
    }
    if (FreeBlock* b = c.head; b != nullptr) {
      c.head = b->next;                                // (M2)
      g_kept.fetch_sub(1, std::memory_order_relaxed);  // (M3)
      return b;
    }
  }
  return ::operator new(size);
}

void Job::operator delete(void* p) noexcept {
  if constexpr (kRecycle) {
    if (p == nullptr) return;
    if (g_kept.load(std::memory_order_relaxed) < kKeptJobBlocks) {  // (M3)
      g_kept.fetch_add(1, std::memory_order_relaxed);
      auto* b = static_cast<FreeBlock*>(p);
      FreeBlock* head = g_returned.load(std::memory_order_relaxed);
      do {
        b->next = head;
      } while (!g_returned.compare_exchange_weak(head, b, std::memory_order_release,
                                                 std::memory_order_relaxed));  // (M1)
      return;
    }
  }
  ::operator delete(p);
}

std::size_t Job::kept_blocks_for_testing() noexcept {
  return g_kept.load(std::memory_order_relaxed);
}

std::string_view to_string(JobState s) noexcept {
  switch (s) {
    case JobState::kQueued:
      return "queued";
    case JobState::kRunning:
      return "running";
    case JobState::kSucceeded:
      return "succeeded";
    case JobState::kFailed:
      return "failed";
    case JobState::kCancelled:
      return "cancelled";
    case JobState::kTimedOut:
      return "timed_out";
    case JobState::kScheduled:
      return "scheduled";
  }
  return "unknown";
}

namespace {
std::int64_t now_ns() noexcept {
  return std::chrono::steady_clock::now().time_since_epoch().count();
}
}  // namespace

namespace {
// The request's 32-bit milliseconds (Job's fields): every source fits
// (job.h), so the clamp only guards against a caller of the engine's own.
std::uint32_t ms32(std::chrono::milliseconds v) noexcept {
  return static_cast<std::uint32_t>(
      std::clamp<std::int64_t>(v.count(), 0, std::numeric_limits<std::uint32_t>::max()));
}
}  // namespace

Job::Job(Engine& engine, std::uint64_t id, JobSpec spec, plugin_host::HandlerRef handler, Lane lane,
         const std::atomic<bool>* group_cancel, std::pair<DoneFn, void*> first_waiter,
         Clock::time_point accepted, HandlerCounters* counters)
    : id_(id),
      tag_(spec.tag),
      timeout_(spec.timeout),
      rare_(spec.idempotency_key.empty() && spec.labels.empty()
                ? nullptr
                : std::make_unique<Rare>(
                      Rare{std::move(spec.idempotency_key), std::move(spec.labels), 0, 0, {}})),
      handler_(std::move(handler)),
      group_cancel_(group_cancel),
      accepted_(accepted),
      first_waiter_(first_waiter),
      counters_(counters != nullptr ? counters : &engine.counters_for(spec.handler)),
      max_attempts_(spec.max_attempts),
      backoff_base_ms_(ms32(spec.backoff_base)),
      backoff_cap_ms_(ms32(spec.backoff_cap)),
      delay_ms_(ms32(spec.delay)),
      lane_(lane),
      requested_lane_(spec.lane),
      retain_requested_(spec.retain),
      durable_requested_(spec.durable) {
  payload_.assign(spec.payload);
  payload_size_ = static_cast<std::uint32_t>(spec.payload.size());  // under max_payload_bytes
  if (spec.deadline != Clock::time_point::max()) token_.set_deadline(spec.deadline);
  if (rare_ && !rare_->idempotency_key.empty()) {
    rare_->payload_hash = std::hash<std::string_view>{}(payload());
  }
}

Job::~Job() {
  release_payload();
}

void Job::PayloadBytes::assign(std::string_view v) {
  if (v.size() <= kInline) {
    if (!v.empty()) std::memcpy(inline_, v.data(), v.size());
    return;
  }
  heap_ = new char[v.size()];
  std::memcpy(heap_, v.data(), v.size());
}

Job::Clock::time_point Job::deadline() const noexcept {
  return token_.deadline();
}

JobSpecCore Job::request() const {
  JobSpecCore r;
  r.handler = handler_name();
  r.payload = payload();
  r.deadline = deadline();
  r.tag = tag_;
  r.backoff_base = backoff_base();
  r.backoff_cap = backoff_cap();
  r.delay = delay();
  r.timeout = timeout_;
  r.max_attempts = max_attempts_;
  r.lane = requested_lane_;
  r.retain = retain_requested_;
  r.durable = durable_requested_;
  return r;
}

const std::string& Job::idempotency_key() const noexcept {
  static const std::string kNone;
  return rare_ ? rare_->idempotency_key : kNone;
}

const Labels& Job::labels() const noexcept {
  static const Labels kNone;
  return rare_ ? rare_->labels : kNone;
}

JobSpec Job::take_spec() noexcept {
  JobSpec out;
  static_cast<JobSpecCore&>(out) = request();
  if (rare_) {
    out.idempotency_key = std::move(rare_->idempotency_key);
    out.labels = std::move(rare_->labels);
  }
  return out;
}

Job::Outcome::Outcome(std::string_view output, std::string_view message) {
  if (output.empty() && message.empty()) return;                 // null: both empty
  const auto out_n = static_cast<std::uint32_t>(output.size());  // both under gRPC's message limit
  const auto msg_n = static_cast<std::uint32_t>(message.size());
  block_ = std::make_unique_for_overwrite<char[]>(8 + output.size() + message.size());
  std::memcpy(block_.get(), &out_n, 4);
  std::memcpy(block_.get() + 4, &msg_n, 4);
  // An empty view's data() may be null, which memcpy may not be given.
  if (!output.empty()) std::memcpy(block_.get() + 8, output.data(), output.size());
  if (!message.empty())
    std::memcpy(block_.get() + 8 + output.size(), message.data(), message.size());
}

std::string_view Job::Outcome::output() const noexcept {
  if (!block_) return {};
  std::uint32_t n;
  std::memcpy(&n, block_.get(), 4);
  return {block_.get() + 8, n};
}

std::string_view Job::Outcome::message() const noexcept {
  if (!block_) return {};
  std::uint32_t out_n, msg_n;
  std::memcpy(&out_n, block_.get(), 4);
  std::memcpy(&msg_n, block_.get() + 4, 4);
  return {block_.get() + 8 + out_n, msg_n};
}

bool Job::transition(JobState from, JobState to) noexcept {
  // (inv 1, 2) release: publishes the result fields written before a move to
  // a final state; pairs with the acquire load in state().
  return state_.compare_exchange_strong(from, to, std::memory_order_acq_rel,
                                        std::memory_order_acquire);
}

bool Job::finish(JobState from, JobState to, std::string_view output, std::string_view message) {
  // (inv 1) The finishers (the worker, a canceller of a queued job, the
  // pool's on_cancel) serialise on mu_, so the result fields are written only
  // by the one whose CAS from `from` succeeds; a worker's QUEUED -> RUNNING
  // CAS (outside mu_) simply makes a canceller's CAS from QUEUED fail.
  std::pair<DoneFn, void*> first{nullptr, nullptr};
  std::vector<std::pair<DoneFn, void*>> more;
  JobPtr unlinked;  // dropped after the lock
  {
    WordLock lock(mu_);
    if (state_.load(std::memory_order_acquire) != from) return false;
    outcome_ = Outcome(output, message);
    finished_ns_.store(now_ns(), std::memory_order_relaxed);
    if (!transition(from, to)) return false;                   // a worker started it meanwhile
    first = std::exchange(first_waiter_, {nullptr, nullptr});  // (inv 3)
    if (extras_) more.swap(extras_->more_waiters);
    // (E7) Ended from QUEUED or SCHEDULED, it may hold a batch link no
    // worker took; this thread won the move (inv 1) and drops it. Not from
    // RUNNING: the worker that started the job took the link itself.
    if (from != JobState::kRunning) unlinked = take_batch_next();
  }
  engine().on_job_final(*this);
  if (first.first != nullptr) first.first(first.second, *this);
  for (auto& [fn, user] : more) fn(user, *this);
  return true;
}

bool Job::reschedule(std::string attempt_message) {
  WordLock lock(mu_);  // (inv 1) serialised with finish(), as the deadline thread's
  if (state_.load(std::memory_order_acquire) != JobState::kRunning) return false;
  extras_locked().attempt_messages.push_back(std::move(attempt_message));
  return transition(JobState::kRunning, JobState::kScheduled);
}

bool Job::end_scheduled(JobState to, std::string message) {
  return finish(JobState::kScheduled, to, {}, std::move(message));
}

std::vector<std::string> Job::attempt_messages() const {
  WordLock lock(mu_);
  return extras_ ? extras_->attempt_messages : std::vector<std::string>{};
}

bool Job::add_waiter(DoneFn fn, void* user) {
  WordLock lock(mu_);
  if (final()) return false;  // (inv 3)
  if (first_waiter_.first == nullptr) {
    first_waiter_ = {fn, user};
  } else {
    extras_locked().more_waiters.emplace_back(fn, user);
  }
  return true;
}

bool Job::remove_waiter(DoneFn fn, void* user) {
  WordLock lock(mu_);
  if (first_waiter_ == std::make_pair(fn, user)) {
    first_waiter_ = {nullptr, nullptr};
    return true;
  }
  if (!extras_) return false;
  auto& more = extras_->more_waiters;
  auto it = std::find(more.begin(), more.end(), std::make_pair(fn, user));
  if (it == more.end()) return false;
  more.erase(it);
  return true;
}

void Job::cancel() {
  cancel_requested_.store(true, std::memory_order_relaxed);  // (D7) before any end it causes
  token_.cancel();
  // A queued job ends now; the pool sees the token when it dequeues the task
  // and calls on_cancel, which finds the job final and only releases it.
  // Past its deadline it ends TIMED_OUT, as on_cancel would end it (E5).
  const bool deadline = deadline_passed();
  const JobState to = deadline ? JobState::kTimedOut : JobState::kCancelled;
  if (finish(JobState::kQueued, to, {}, unstarted_message(deadline))) {
    handler_ = {};  // ended here, never started: no one else uses it (handler_)
    return;
  }
  // Waiting in the scheduler: it ends now; the scheduler drops it when its
  // time comes (scheduler.h, K3).
  end_scheduled(to, scheduled_message(deadline));
}

std::string Job::scheduled_message(bool deadline) const {
  const std::uint32_t done = attempts();
  if (done == 0) return unstarted_message(deadline);
  std::string last;
  {
    WordLock lock(mu_);
    if (extras_ && !extras_->attempt_messages.empty()) last = extras_->attempt_messages.back();
  }
  return "job " + std::to_string(id_) + " (" + handler_name() + ") " +
         (deadline ? "timed out" : "was cancelled") + " while waiting to retry after attempt " +
         std::to_string(done) + " of " + std::to_string(max_attempts_) + " failed: " + last;
}

std::string Job::unstarted_message(bool deadline) const {
  if (deadline) {
    return "job " + std::to_string(id_) + " (" + handler_name() +
           ") timed out while queued, before its handler started; raise its timeout or the "
           "call's deadline, or submit less at once";
  }
  return "job " + std::to_string(id_) + " (" + handler_name() +
         ") was cancelled before its handler started (a cancel request, the caller went away, "
         "or tpoold shut down)";
}

std::chrono::system_clock::time_point Job::accepted_wall() const noexcept {
  if (rare_ && rare_->recorded_accepted_unix_ms != 0) {  // from the journal: its own time
    return std::chrono::system_clock::time_point(
        std::chrono::milliseconds(rare_->recorded_accepted_unix_ms));
  }
  auto age = Clock::now() - accepted_;
  return std::chrono::system_clock::now() -
         std::chrono::duration_cast<std::chrono::system_clock::duration>(age);
}

std::chrono::microseconds Job::wait_time() const noexcept {
  std::int64_t start = started_ns_.load(std::memory_order_relaxed);
  std::int64_t accepted = accepted_.time_since_epoch().count();
  if (start == 0) {
    std::int64_t end = finished_ns_.load(std::memory_order_relaxed);
    start = end != 0 ? end : now_ns();
  }
  return std::chrono::duration_cast<std::chrono::microseconds>(
      std::chrono::nanoseconds(std::max<std::int64_t>(0, start - accepted)));
}

std::chrono::microseconds Job::run_time() const noexcept {
  std::int64_t start = started_ns_.load(std::memory_order_relaxed);
  if (start == 0) return std::chrono::microseconds(0);
  std::int64_t end = finished_ns_.load(std::memory_order_relaxed);
  if (end == 0) end = now_ns();
  return std::chrono::duration_cast<std::chrono::microseconds>(
      std::chrono::nanoseconds(std::max<std::int64_t>(0, end - start)));
}

std::pair<double, std::string> Job::progress_snapshot() const {
  WordLock lock(mu_);
  if (!extras_) return {0, std::string()};
  return {extras_->progress, extras_->progress_note};
}

std::size_t Job::retained_bytes() const noexcept {
  // The fixed part is an estimate of the Job object and its map entries:
  // picked by hand when sizeof(Job) was 472 bytes (x86-64, GCC 12) and a
  // retained job, with its control block and the result store's entry,
  // measured ~630 bytes of RSS; both are smaller now (docs/benchmarks.md,
  // "Memory per job"). Kept: it bounds max_retained_bytes as before.
  std::size_t label_bytes = 0;
  for (const auto& [k, v] : labels()) label_bytes += k.size() + v.size();
  // A job that did not succeed keeps its payload for Retry (engine.cc); a
  // succeeded one's is released by its worker after this is read (on the
  // same thread, in finish()).
  const std::size_t payload = state() == JobState::kSucceeded ? 0 : payload_size_;
  return 512 + outcome_.bytes() + idempotency_key().size() + label_bytes + payload;
}

bool Job::is_cancelled() const noexcept {
  return token_.is_cancelled() || group_or_all_cancelled();
}

bool Job::is_cancelled_at(Clock::time_point now) const noexcept {
  return token_.reason_at(now) != CancelToken::Reason::kNone || group_or_all_cancelled();
}

bool Job::group_or_all_cancelled() const noexcept {
  // relaxed: a flag polled repeatedly; a late observation only delays the
  // handler's stop by one poll.
  if (group_cancel_ != nullptr) {
    // (inv 6) seq_cst increment, then seq_cst load of the detach: pairs with
    // detach_group's store and load (Dekker; acquire/release would let both
    // miss each other).
    group_readers_.fetch_add(1, std::memory_order_seq_cst);
    // relaxed read of the flag itself: a late observation only delays a stop.
    const bool group = group_detached_.load(std::memory_order_seq_cst) ||
                       group_cancel_->load(std::memory_order_relaxed);
    group_readers_.fetch_sub(1, std::memory_order_release);  // pairs with detach_group's acquire
    if (group) return true;
  }
  return engine().cancel_all_.load(std::memory_order_relaxed);
}

std::optional<std::chrono::nanoseconds> Job::remaining() const noexcept {
  const Clock::time_point d = deadline();
  if (d == Clock::time_point::max()) return std::nullopt;
  return std::chrono::duration_cast<std::chrono::nanoseconds>(d - Clock::now());
}

bool Job::deadline_passed() const noexcept {
  // The deadline itself, not the token's reason: the token reports
  // kCancelled once cancel() was called, also after the deadline passed (the
  // daemon cancels a job when its call ends, and the call's deadline is the
  // job's), which would turn a time-out into a cancellation depending on
  // who ended the job first.
  const Clock::time_point d = deadline();
  return d != Clock::time_point::max() && Clock::now() >= d;
}

void Job::log(plugin_host::LogLevel level, std::string_view message) noexcept {
  spdlog::level::level_enum l = spdlog::level::info;
  switch (level) {
    case plugin_host::LogLevel::kDebug:
      l = spdlog::level::debug;
      break;
    case plugin_host::LogLevel::kInfo:
      l = spdlog::level::info;
      break;
    case plugin_host::LogLevel::kWarn:
      l = spdlog::level::warn;
      break;
    case plugin_host::LogLevel::kError:
      l = spdlog::level::err;
      break;
  }
  try {
    spdlog::log(l, "job {} handler {}: {}", id_, handler_name(), message);
  } catch (...) {  // a log line is never worth a failed job
  }
}

void Job::progress(double fraction, std::string_view note) noexcept {
  try {
    WordLock lock(mu_);
    Extras& x = extras_locked();
    x.progress = fraction;
    x.progress_note.assign(note);
  } catch (...) {  // bad_alloc for the block or the note: keep the old ones
  }
}

void Job::detach_group() noexcept {
  if (group_cancel_ == nullptr) return;
  group_detached_.store(true, std::memory_order_seq_cst);  // (inv 6) Dekker with is_cancelled
  while (group_readers_.load(std::memory_order_acquire) != 0) std::this_thread::yield();
}

bool Job::claim_ignored_cancellation() noexcept {
  return !ignored_claimed_.exchange(true, std::memory_order_relaxed);
}

std::vector<plugin_host::InvokeResult> Job::run_children(std::string_view handler,
                                                         std::span<const std::string_view> inputs) {
  return engine().run_children(*this, handler, inputs);
}

}  // namespace tpool::engine
