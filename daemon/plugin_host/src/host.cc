// The plugin host: registry, reload and the handler call boundary.
//
// Thread safety. find/list/invoke/counters run on any thread, concurrently
// with each other and with reload.
//  (1) A Registry is immutable once published: built by one reload on one
//      thread, then only read. Readers copy the shared_ptr under mu and read
//      without a lock.
//  (2) Publishing a registry is one pointer swap under mu; a reader sees the
//      old or the new registry, never a mix, so find() never misses a handler
//      present in both.
//  (3) A Handler holds a shared_ptr to its Library, a Registry holds its
//      Handlers, a HandlerRef holds one Handler. A Library is destroyed
//      (fini, then dlclose) only when no Registry and no HandlerRef holds any
//      of its Handlers: no code of it can still be running, because invoke()
//      runs under a HandlerRef the caller holds for the whole call.
//  (4) Reloads are serialised by reload_mu, so at most one registry is under
//      construction and generations grow by one.
#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <mutex>

#include "internal.h"
#include "loader.h"
#include "tpool/common/mutex.h"

namespace tpool::plugin_host {

std::string_view to_string(JobCode code) noexcept {
  switch (code) {
    case JobCode::kOk:
      return "ok";
    case JobCode::kError:
      return "error";
    case JobCode::kInvalidInput:
      return "invalid_input";
    case JobCode::kCancelled:
      return "cancelled";
    case JobCode::kDeadlineExceeded:
      return "deadline_exceeded";
    case JobCode::kOutputTooLarge:
      return "output_too_large";
    case JobCode::kInputTooLarge:
      return "input_too_large";
    case JobCode::kUnknownHandler:
      return "unknown_handler";
    case JobCode::kInternal:
      return "internal";
    case JobCode::kRetry:
      return "retry";
    case JobCode::kPermanent:
      return "permanent";
  }
  return "unknown";
}

std::string_view to_string(IsolationMode mode) noexcept {
  return mode == IsolationMode::kProcess ? "process" : "in_process";
}

JobCode code_of_status(std::int32_t status) noexcept {
  return status >= TPOOL_STATUS_ERROR && status <= TPOOL_STATUS_PERMANENT
             ? static_cast<JobCode>(status)
             : JobCode::kError;
}

std::string output_too_large_message(const std::string& who, std::size_t attempted,
                                     std::size_t limit) {
  return who + " tried to produce " + std::to_string(attempted) +
         " bytes of output, over the limit of " + std::to_string(limit) +
         " bytes (max_output_bytes): raise the daemon's output limit or make the job return "
         "less";
}

bool is_retryable(JobCode code) noexcept {
  return code == JobCode::kRetry || code == JobCode::kError || code == JobCode::kInternal;
}

std::string_view to_string(LogLevel level) noexcept {
  switch (level) {
    case LogLevel::kDebug:
      return "debug";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kWarn:
      return "warn";
    case LogLevel::kError:
      return "error";
  }
  return "unknown";
}

std::string_view to_string(LoadErrorKind kind) noexcept {
  switch (kind) {
    case LoadErrorKind::kDirectory:
      return "directory";
    case LoadErrorKind::kWorldWritable:
      return "world_writable";
    case LoadErrorKind::kUnreadable:
      return "unreadable";
    case LoadErrorKind::kNotElf:
      return "not_elf";
    case LoadErrorKind::kDlopen:
      return "dlopen";
    case LoadErrorKind::kNoEntry:
      return "no_entry";
    case LoadErrorKind::kEntryRefused:
      return "entry_refused";
    case LoadErrorKind::kAbiMajorMismatch:
      return "abi_major_mismatch";
    case LoadErrorKind::kAbiMinorNewer:
      return "abi_minor_newer";
    case LoadErrorKind::kBadDescriptor:
      return "bad_descriptor";
    case LoadErrorKind::kDuplicateHandler:
      return "duplicate_handler";
    case LoadErrorKind::kInitFailed:
      return "init_failed";
  }
  return "unknown";
}

namespace detail {

Library::Library(std::shared_ptr<Shared> s, std::string f, void* handle)
    : shared(std::move(s)), file(std::move(f)), dl(handle) {
  name = file.substr(file.find_last_of('/') + 1);
}

Library::~Library() {
  if (initialised) {
    if (desc.fini != nullptr) {
      tls_current_library = this;
      try {
        desc.fini(plugin_ctx);
      } catch (...) {
        log(LogLevel::kError, "fini threw a C++ exception; it must not (ignored)");
      }
      tls_current_library = nullptr;
    }
  }
  ::dlclose(dl);
  if (initialised) {
    Shared::bump(shared->libraries_closed);
    shared->libraries_open.fetch_sub(1, std::memory_order_relaxed);
  }
}

bool Library::init(const std::string& config, std::string& error, std::int32_t& status) {
  status = 0;
  if (desc.init != nullptr) {
    char buf[1024] = "";
    tls_current_library = this;
    try {
      status = desc.init(host_api(), config.c_str(), &plugin_ctx, buf, sizeof buf);
    } catch (const std::exception& e) {
      status = TPOOL_STATUS_INTERNAL;
      std::snprintf(buf, sizeof buf, "init threw a C++ exception: %s", e.what());
    } catch (...) {
      status = TPOOL_STATUS_INTERNAL;
      std::snprintf(buf, sizeof buf, "init threw a C++ exception");
    }
    tls_current_library = nullptr;
    buf[sizeof buf - 1] = '\0';
    if (status != 0) {
      error = buf[0] != '\0' ? buf : "(init gave no message)";
      return false;
    }
  }
  initialised = true;
  Shared::bump(shared->libraries_open);
  return true;
}

void Library::log(LogLevel level, std::string_view message) const {
  shared->log_sink(level, name, message);
}

// (inv 1) immutable once published.
struct Registry {
  std::uint64_t generation = 0;
  std::map<std::string, std::shared_ptr<const Handler>, std::less<>> handlers;
  std::size_t plugins = 0;
  std::vector<std::shared_ptr<IsolatedPlugin>> isolated;  // one per process-mode plugin
};

}  // namespace detail

using detail::Handler;
using detail::Library;
using detail::Registry;
using detail::Shared;

const HandlerInfo& HandlerRef::info() const noexcept {
  return handler_->info;
}

bool HandlerRef::isolated() const noexcept {
  return handler_->isolated != nullptr;
}

struct Host::Impl {
  std::shared_ptr<Shared> shared;
  Mutex reload_mu ACQUIRED_BEFORE(mu);  // (inv 4)
  HostConfig config GUARDED_BY(reload_mu);
  // config.max_output_bytes for invoke(), which does not take reload_mu.
  // Relaxed: a call that starts during a reload may use either limit.
  std::atomic<std::size_t> max_output{0};

  mutable Mutex mu;                                        // (inv 2)
  std::shared_ptr<const Registry> current GUARDED_BY(mu);  // never null after load
  std::vector<LoadError> last_errors GUARDED_BY(mu);

  std::shared_ptr<const Registry> snapshot() const EXCLUDES(mu) {
    MutexLock lock(mu);
    return current;
  }

  // Builds a registry from config; fills errors.
  std::shared_ptr<Registry> build(const HostConfig& cfg, std::uint64_t generation,
                                  std::vector<LoadError>& errors);
  void report(const std::vector<LoadError>& errors) const {
    for (const auto& e : errors) shared->log_sink(LogLevel::kError, e.plugin, e.message);
  }
};

namespace {

std::string resolve_staging(const HostConfig& cfg) {
  if (!cfg.staging_dir.empty()) return cfg.staging_dir;
  const char* tmp = std::getenv("TMPDIR");
  return tmp != nullptr && tmp[0] != '\0' ? tmp : "/tmp";
}

std::string describe(const Library& lib) {
  return lib.file + " (plugin '" + lib.name + "' " + lib.version + ")";
}

std::string join(const std::vector<LoadError>& errors) {
  std::string s = std::to_string(errors.size()) + " plugin load error(s):";
  for (const auto& e : errors) s += "\n  " + e.message;
  return s;
}

}  // namespace

std::vector<LoadError> Host::check_dirs(const std::vector<std::string>& dirs) {
  std::vector<LoadError> errors;
  std::vector<std::string> files;  // listed, not opened
  for (const auto& dir : dirs) detail::scan_dir(dir, files, errors);
  return errors;
}

std::shared_ptr<Registry> Host::Impl::build(const HostConfig& cfg, std::uint64_t generation,
                                            std::vector<LoadError>& errors) {
  auto reg = std::make_shared<Registry>();
  reg->generation = generation;
  std::vector<std::string> files;
  for (const auto& dir : cfg.dirs) detail::scan_dir(dir, files, errors);
  const std::string staging = resolve_staging(cfg);
  for (const auto& file : files) {
    detail::Opened o = detail::open_plugin(file, staging, shared);
    if (o.error) {
      errors.push_back(std::move(*o.error));
      continue;
    }
    Library& lib = *o.library;
    // Registry-level check before init, so a refused plugin never runs init.
    bool dup = false;
    for (const auto& h : o.handlers) {
      auto it = reg->handlers.find(std::string_view(h.name));
      if (it == reg->handlers.end()) continue;
      const HandlerInfo& first = it->second->info;
      errors.push_back({LoadErrorKind::kDuplicateHandler, file, lib.name,
                        describe(lib) + " declares handler '" + h.name + "', which " +
                            first.plugin_file + " (plugin '" + first.plugin_name +
                            "') already registered; handler names are unique across plugins, so " +
                            file +
                            " is not loaded: rename the handler or remove one of the files"});
      dup = true;
      break;
    }
    if (dup) continue;
    auto cfg_it = cfg.plugin_config.find(lib.name);
    const std::string plugin_cfg =
        cfg_it == cfg.plugin_config.end() ? std::string() : cfg_it->second;
    auto iso_it = cfg.plugin_isolation.find(lib.name);
    const IsolationSettings& iso =
        iso_it == cfg.plugin_isolation.end() ? cfg.isolation : iso_it->second;
    std::shared_ptr<IsolatedPlugin> isolated;
    if (iso.mode == IsolationMode::kProcess) {
      // init runs in each runner, never here (isolation.h).
      if (!cfg.isolation_factory) {
        errors.push_back({LoadErrorKind::kInitFailed, file, lib.name,
                          describe(lib) +
                              " is configured for process isolation, but this host has no "
                              "runner to start (HostConfig::isolation_factory is empty); set "
                              "its mode to \"in_process\" or run it under tpoold"});
        continue;
      }
      auto started = cfg.isolation_factory(
          IsolatedLoad{file, lib.name, lib.version, plugin_cfg, iso, cfg.max_output_bytes,
                       [sink = shared](LogLevel l, std::string_view p, std::string_view m) {
                         sink->log_sink(l, p, m);
                       }});
      if (!started.ok()) {
        errors.push_back({LoadErrorKind::kInitFailed, file, lib.name,
                          describe(lib) + " could not start in process isolation: " +
                              started.status().message()});
        continue;
      }
      isolated = std::move(started).value();
      reg->isolated.push_back(isolated);
    }
    std::string error;
    std::int32_t status = 0;
    if (!isolated && !lib.init(plugin_cfg, error, status)) {
      errors.push_back({LoadErrorKind::kInitFailed, file, lib.name,
                        describe(lib) + " failed to initialise (init returned " +
                            std::to_string(status) + "): " + error +
                            "; fix its config string (plugin_config['" + lib.name +
                            "']) or the plugin, or remove the file"});
      continue;
    }
    for (const auto& h : o.handlers) {
      auto handler = std::make_shared<Handler>();
      handler->info.name = h.name;
      handler->info.description = h.description != nullptr ? h.description : "";
      handler->info.lane = h.lane == TPOOL_LANE_BLOCKING ? Lane::kBlocking : Lane::kDefault;
      handler->info.max_input_bytes = h.max_input_bytes;
      handler->info.plugin_name = lib.name;
      handler->info.plugin_version = lib.version;
      handler->info.plugin_file = file;
      handler->info.plugin_abi_major = lib.desc.abi_major;
      handler->info.plugin_abi_minor = lib.desc.abi_minor;
      handler->info.generation = generation;
      handler->info.isolation = iso.mode;
      handler->call = h.call;
      handler->library = o.library;
      handler->isolated = isolated;
      reg->handlers.emplace(handler->info.name, std::move(handler));
    }
    reg->plugins++;
    lib.log(LogLevel::kInfo,
            "loaded " + describe(lib) + " with " + std::to_string(o.handlers.size()) +
                " handler(s), generation " + std::to_string(generation) +
                (isolated ? ", isolated in " + std::to_string(iso.runners) + " runner process(es)"
                          : std::string()));
  }
  for (std::size_t i = 0; i < errors.size(); ++i) Shared::bump(shared->load_failures);
  return reg;
}

Host::Host(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Host::~Host() = default;

Result<std::unique_ptr<Host>> Host::load(HostConfig config, std::vector<LoadError>* errors_out) {
  auto impl = std::make_unique<Impl>();
  impl->shared = std::make_shared<Shared>();
  impl->shared->log_sink = config.log_sink;
  if (!impl->shared->log_sink) {
    impl->shared->log_sink = [](LogLevel level, std::string_view plugin, std::string_view msg) {
      std::fprintf(stderr, "tpoold plugin_host %.*s [%.*s] %.*s\n",
                   static_cast<int>(to_string(level).size()), to_string(level).data(),
                   static_cast<int>(plugin.size()), plugin.data(), static_cast<int>(msg.size()),
                   msg.data());
    };
  }
  std::vector<LoadError> errors;
  auto reg = impl->build(config, 1, errors);
  impl->report(errors);
  if (errors_out != nullptr) *errors_out = errors;
  if (!errors.empty() && config.abort_on_load_error) {
    return Status::InvalidArgument(
        join(errors) +
        "\n(abort_on_load_error is set: fix or remove these files, or unset it to "
        "start with the plugins that did load)");
  }
  // Not yet shared with any thread; the locks are for the analysis' sake.
  {
    MutexLock lock(impl->mu);
    impl->current = std::move(reg);
    impl->last_errors = std::move(errors);
  }
  impl->max_output.store(config.max_output_bytes, std::memory_order_relaxed);
  {
    MutexLock lock(impl->reload_mu);
    impl->config = std::move(config);
  }
  return std::unique_ptr<Host>(new Host(std::move(impl)));
}

Status Host::reload() {
  HostConfig cfg;
  {
    MutexLock lock(impl_->reload_mu);
    cfg = impl_->config;
  }
  return reload(std::move(cfg));
}

Status Host::reload(HostConfig config) {
  MutexLock reload_lock(impl_->reload_mu);  // (inv 4)
  std::uint64_t generation = impl_->snapshot()->generation + 1;
  std::vector<LoadError> errors;
  std::shared_ptr<const Registry> reg = impl_->build(config, generation, errors);
  impl_->report(errors);
  if (!errors.empty() && config.abort_on_load_error) {
    {
      MutexLock lock(impl_->mu);
      impl_->last_errors = errors;
    }
    Shared::bump(impl_->shared->reload_failures);
    // reg goes out of scope here: its new libraries get fini + dlclose.
    return Status::InvalidArgument(join(errors) +
                                   "\n(abort_on_load_error is set: the previous plugins keep "
                                   "serving; fix or remove these files and reload again)");
  }
  std::shared_ptr<const Registry> old;
  {
    MutexLock lock(impl_->mu);  // (inv 2) one swap
    old = std::exchange(impl_->current, std::move(reg));
    impl_->last_errors = std::move(errors);
  }
  impl_->max_output.store(config.max_output_bytes, std::memory_order_relaxed);
  impl_->config = std::move(config);
  Shared::bump(impl_->shared->reloads);
  // Retained jobs keep their HandlerRef (and so the old generation) for as
  // long as their results are kept: the old runners are told now, so they
  // end with their last running job instead.
  for (const auto& p : old->isolated) p->retire();
  impl_->shared->log_sink(LogLevel::kInfo, "",
                          "reloaded plugins: generation " + std::to_string(generation) +
                              " serves new jobs; generation " + std::to_string(old->generation) +
                              " stays loaded until its in-flight jobs end");
  return Status::Ok();
  // old is released here; (inv 3) its libraries close when their last
  // HandlerRef (an in-flight job) is dropped.
}

HandlerRef Host::find(std::string_view name) const {
  auto reg = impl_->snapshot();
  auto it = reg->handlers.find(name);
  return it == reg->handlers.end() ? HandlerRef() : HandlerRef(it->second);
}

std::vector<HandlerInfo> Host::list() const {
  auto reg = impl_->snapshot();
  std::vector<HandlerInfo> out;
  out.reserve(reg->handlers.size());
  for (const auto& [name, h] : reg->handlers) out.push_back(h->info);
  return out;
}

std::vector<LoadError> Host::load_errors() const {
  MutexLock lock(impl_->mu);
  return impl_->last_errors;
}

HostCounters Host::counters() const {
  auto reg = impl_->snapshot();
  const Shared& s = *impl_->shared;
  auto get = [](const std::atomic<std::uint64_t>& c) { return c.load(std::memory_order_relaxed); };
  HostCounters c;
  c.plugins_loaded = reg->plugins;
  c.handlers_registered = reg->handlers.size();
  c.load_failures = get(s.load_failures);
  c.reloads = get(s.reloads);
  c.reload_failures = get(s.reload_failures);
  c.libraries_open = get(s.libraries_open);
  c.libraries_closed = get(s.libraries_closed);
  c.invocations = get(s.invocations);
  c.handler_failures = get(s.handler_failures);
  c.handler_exceptions = get(s.handler_exceptions);
  c.output_too_large = get(s.output_too_large);
  c.ignored_cancellation = get(s.ignored_cancellation);
  return c;
}

std::vector<IsolationStats> Host::isolation_stats() const {
  auto reg = impl_->snapshot();
  std::vector<IsolationStats> out;
  out.reserve(reg->isolated.size());
  for (const auto& p : reg->isolated) out.push_back(p->stats());
  return out;
}

std::string Host::unavailable(const HandlerRef& ref) const {
  if (!ref || !ref.handler_->isolated) return {};
  return ref.handler_->isolated->unavailable();
}

InvokeResult Host::invoke(const HandlerRef& ref, std::string_view input,
                          JobServices& services) const {
  Shared& s = *impl_->shared;
  Shared::bump(s.invocations);
  InvokeResult r;
  if (!ref) {
    r.code = JobCode::kUnknownHandler;
    r.message = "no handler given (the HandlerRef is empty): look the handler up with find()";
    Shared::bump(s.handler_failures);
    return r;
  }
  const Handler& h = *ref.handler_;
  // Only failures name the handler: built on those paths, not per call.
  auto who = [&h] {
    return "handler '" + h.info.name + "' (plugin '" + h.info.plugin_name + "' " +
           h.info.plugin_version + ")";
  };
  if (h.info.max_input_bytes != 0 && input.size() > h.info.max_input_bytes) {
    r.code = JobCode::kInputTooLarge;
    r.message = "the input of " + std::to_string(input.size()) + " bytes is larger than " + who() +
                " accepts (max_input_bytes " + std::to_string(h.info.max_input_bytes) +
                "): send a smaller input";
    Shared::bump(s.handler_failures);
    return r;
  }
  if (h.isolated) {
    r = h.isolated->invoke(h.info, input, services);
    if (r.code == JobCode::kOutputTooLarge) Shared::bump(s.output_too_large);
    if (r.threw) Shared::bump(s.handler_exceptions);
    if (r.ignored_cancellation) Shared::bump(s.ignored_cancellation);
    if (!r.ok()) Shared::bump(s.handler_failures);
    return r;
  }
  tpool_job job;
  job.services = &services;
  job.handler = &h;
  job.max_output = impl_->max_output.load(std::memory_order_relaxed);
  std::int32_t status = TPOOL_STATUS_OK;
  bool threw = false;
  try {
    status = h.call(h.library->plugin_ctx, &job, reinterpret_cast<const uint8_t*>(input.data()),
                    input.size());
  } catch (const std::exception& e) {
    threw = true;
    r.message = who() + " threw a C++ exception: " + e.what() +
                " (handlers must catch their exceptions and return a status)";
  } catch (...) {
    threw = true;
    r.message = who() +
                " threw a C++ exception that is not a std::exception (handlers must "
                "catch their exceptions and return a status)";
  }
  if (threw) {
    Shared::bump(s.handler_exceptions);
    r.code = JobCode::kInternal;
  } else if (job.output_overflow) {
    Shared::bump(s.output_too_large);
    r.code = JobCode::kOutputTooLarge;
    r.plugin_status = status;
    r.message = output_too_large_message(who(), job.attempted_output, job.max_output);
  } else if (status != TPOOL_STATUS_OK) {
    r.plugin_status = status;
    r.code = code_of_status(status);
    r.message = !job.message.empty() ? std::move(job.message)
                                     : who() + " failed with status " + std::to_string(status) +
                                           " and gave no message";
  } else if (services.is_cancelled()) {
    // The handler ignored the cancellation: its caller still hears that the
    // job was cancelled or timed out, and the handler is counted.
    if (services.claim_ignored_cancellation()) Shared::bump(s.ignored_cancellation);
    bool deadline = services.deadline_passed();
    r.code = deadline ? JobCode::kDeadlineExceeded : JobCode::kCancelled;
    r.message = "the job was " + std::string(deadline ? "past its deadline" : "cancelled") +
                " when " + who() + " returned; its output is discarded";
  } else {
    r.output = std::move(job.output);
    r.message = std::move(job.message);
    return r;
  }
  Shared::bump(s.handler_failures);
  return r;
}

std::size_t Host::batch_limit(const HandlerRef& ref) const {
  if (!ref || !ref.handler_->isolated) return 1;
  return std::max<std::size_t>(1, ref.handler_->isolated->batch_limit(ref.handler_->info));
}

void Host::invoke_batch(const HandlerRef& ref, std::span<const BatchCall> calls,
                        const BatchDone& done) const {
  if (!ref || !ref.handler_->isolated || calls.size() == 1) {
    for (std::size_t i = 0; i < calls.size(); ++i) {
      done(i, invoke(ref, calls[i].input, *calls[i].services));
    }
    return;
  }
  Shared& s = *impl_->shared;
  const Handler& h = *ref.handler_;
  // The checks invoke() makes before a call leaves this thread; the calls
  // that pass go to the runner together, under their index here.
  std::vector<BatchCall> sent;
  std::vector<std::size_t> index;
  sent.reserve(calls.size());
  index.reserve(calls.size());
  for (std::size_t i = 0; i < calls.size(); ++i) {
    if (h.info.max_input_bytes != 0 && calls[i].input.size() > h.info.max_input_bytes) {
      done(i, invoke(ref, calls[i].input, *calls[i].services));  // its refusal, counted there
      continue;
    }
    Shared::bump(s.invocations);
    sent.push_back(calls[i]);
    index.push_back(i);
  }
  if (sent.empty()) return;
  h.isolated->invoke_batch(h.info, sent, [&](std::size_t k, InvokeResult&& r) {
    if (r.code == JobCode::kOutputTooLarge) Shared::bump(s.output_too_large);
    if (r.threw) Shared::bump(s.handler_exceptions);
    if (r.ignored_cancellation) Shared::bump(s.ignored_cancellation);
    if (!r.ok()) Shared::bump(s.handler_failures);
    done(index[k], std::move(r));
  });
}

}  // namespace tpool::plugin_host
