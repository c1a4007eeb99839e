// Fan-out: a handler's run_children as nested pool tasks.
//
// The children of one call are submitted with one submit_batch and a
// WaitGroup; the parent's worker then help_waits, running queued tasks
// (often its own children, from its LIFO slot and local queue) instead of
// blocking, so a pool whose every worker runs a fan-out parent still makes
// progress. Children the pool cannot take (no free descriptor) run inline on
// the parent's thread: fan-out never fails for lack of room. Children share
// the parent's cancellation and deadline (they poll the parent's
// JobServices) and are not jobs of their own: no id, no result store.
#include <memory>

#include "tpool/engine/thread_job.h"

#include "tpool/engine/engine.h"

namespace tpool::engine {

using plugin_host::InvokeResult;
using plugin_host::JobCode;

namespace {

class Child final : public plugin_host::JobServices {
 public:
  Child(const plugin_host::Host& host, Job& root, const plugin_host::HandlerRef& handler,
        std::string_view input)
      : host_(host), root_(root), handler_(handler), input_(input) {}

  static void run(void* ctx) {
    auto& c = *static_cast<Child*>(ctx);
    if (c.is_cancelled()) {
      c.cancelled_before_start();
      return;
    }
    try {
      ThreadJobScope on_thread(c.handler_.name(), c.root_.id());  // for a crash report (T1)
      c.result_ = c.host_.invoke(c.handler_, c.input_, c);
    } catch (const std::exception& ex) {
      c.result_.code = JobCode::kInternal;
      c.result_.message = std::string("the daemon failed while running a child job: ") + ex.what();
    }
  }
  static void cancelled(void* ctx) { static_cast<Child*>(ctx)->cancelled_before_start(); }

  InvokeResult take() { return std::move(result_); }

  bool is_cancelled() const noexcept override { return root_.is_cancelled(); }
  std::optional<std::chrono::nanoseconds> remaining() const noexcept override {
    return root_.remaining();
  }
  bool deadline_passed() const noexcept override { return root_.deadline_passed(); }
  std::uint32_t attempt() const noexcept override { return root_.attempt(); }  // its parent's
  void log(plugin_host::LogLevel level, std::string_view message) noexcept override {
    root_.log(level, message);
  }
  // A child's progress is not the job's progress: the parent reports its own.
  void progress(double, std::string_view) noexcept override {}
  std::vector<InvokeResult> run_children(std::string_view handler,
                                         std::span<const std::string_view> inputs) override {
    return root_.run_children(handler, inputs);  // grandchildren are nested jobs of the root too
  }

 private:
  void cancelled_before_start() {
    bool deadline = root_.deadline_passed();
    result_.code = deadline ? JobCode::kDeadlineExceeded : JobCode::kCancelled;
    result_.message = deadline ? "the parent job's deadline passed before this child started"
                               : "the parent job was cancelled before this child started";
  }

  const plugin_host::Host& host_;
  Job& root_;
  const plugin_host::HandlerRef& handler_;
  std::string_view input_;
  InvokeResult result_;
};

}  // namespace

std::vector<InvokeResult> Engine::run_children(Job& parent, std::string_view handler,
                                               std::span<const std::string_view> inputs) {
  std::vector<InvokeResult> results(inputs.size());
  plugin_host::HandlerRef ref = host_.find(handler);
  if (!ref) {
    for (auto& r : results) {
      r.code = JobCode::kUnknownHandler;
      r.message = "no handler named '" + std::string(handler.substr(0, 128)) +
                  "' is loaded for the child jobs; ListHandlers lists the loaded ones";
    }
    return results;
  }
  std::vector<std::unique_ptr<Child>> children;
  std::vector<Task> tasks;
  children.reserve(inputs.size());
  tasks.reserve(inputs.size());
  for (std::string_view in : inputs) {
    children.push_back(std::make_unique<Child>(host_, parent, ref, in));
    tasks.push_back(Task{&Child::run, children.back().get()});
  }
  WaitGroup wg;
  SubmitOptions opts;
  opts.wait_group = &wg;
  opts.lane = ref.lane();
  opts.on_cancel = &Child::cancelled;
  // Never wait for a descriptor: what the pool cannot take runs inline below.
  opts.backpressure = Backpressure::kReject;
  std::size_t accepted = 0;
  if (Result<std::size_t> r = pool_.submit_batch(tasks, opts); r.ok()) accepted = r.value();
  for (std::size_t i = accepted; i < tasks.size(); ++i) Child::run(children[i].get());
  if (accepted != 0) pool_.help_wait(wg);
  for (std::size_t i = 0; i < children.size(); ++i) results[i] = children[i]->take();
  return results;
}

}  // namespace tpool::engine
