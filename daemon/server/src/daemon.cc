#include "daemon.h"
//
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "crash.h"
#include "listeners.h"
#include "notify.h"

#ifndef TPOOL_VERSION
#error "TPOOL_VERSION must be defined by the build (daemon/server/CMakeLists.txt)"
#endif

namespace tpool::server {
namespace {

constexpr auto kTick =
    std::chrono::milliseconds(100);  // signal and request polling: picked by hand
constexpr auto kExpireEvery = std::chrono::seconds(1);
// How long open calls (idle Streams, a Drain reply) get to end once the
// drain is over, before the server cancels them: picked by hand.
constexpr auto kServerShutdownGrace = std::chrono::seconds(1);

sigset_t handled_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGHUP);
  return set;
}

// Signals that reach a thread which unblocked them (a library's thread may do
// that, e.g. the metrics HTTP server's) run this handler instead of killing
// the process; the main loop picks them up. Lock-free atomics are
// async-signal-safe.
std::atomic<int> g_stray_term{0};
std::atomic<int> g_stray_hup{0};
static_assert(std::atomic<int>::is_always_lock_free);

extern "C" void on_stray_signal(int sig) {
  if (sig == SIGHUP) {
    g_stray_hup.fetch_add(1, std::memory_order_relaxed);
  } else {
    g_stray_term.fetch_add(1, std::memory_order_relaxed);
  }
}

void install_stray_handlers() {
  struct sigaction sa {};
  sa.sa_handler = &on_stray_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (int sig : {SIGTERM, SIGINT, SIGHUP}) sigaction(sig, &sa, nullptr);
}

// Takes one stray signal counted by the handler, if any.
int take_stray() {
  for (auto* counter : {&g_stray_term, &g_stray_hup}) {
    int n = counter->load(std::memory_order_relaxed);
    while (n > 0 && !counter->compare_exchange_weak(n, n - 1, std::memory_order_relaxed)) {
    }
    if (n > 0) return counter == &g_stray_hup ? SIGHUP : SIGTERM;
  }
  return 0;
}

// The next handled signal within timeout, or 0.
int next_signal(std::chrono::milliseconds timeout) {
  if (int sig = take_stray(); sig != 0) return sig;
  sigset_t set = handled_signals();
  timespec ts{static_cast<time_t>(timeout.count() / 1000),
              static_cast<long>((timeout.count() % 1000) * 1000000)};
  int sig = sigtimedwait(&set, nullptr, &ts);
  if (sig > 0) return sig;
  return take_stray();
}

bool write_port_file(const std::string& path, int port, std::string* error) {
  std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << port << "\n";
    if (!out) {
      *error = "cannot write the port file '" + tmp + "'; check the directory and permissions";
      return false;
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    *error = "cannot rename '" + tmp + "' to '" + path + "'";
    return false;
  }
  return true;
}

std::uint64_t total_final(const engine::EngineSnapshot& s, std::uint64_t* cancelled) {
  std::uint64_t all = 0;
  *cancelled = 0;
  for (const auto& h : s.handlers) {
    all += h.succeeded + h.failed + h.cancelled + h.timed_out;
    *cancelled += h.cancelled;
  }
  return all;
}

}  // namespace

Daemon::Daemon(DaemonConfig config) : config_(std::move(config)) {}

Daemon::~Daemon() {
  // Order: no RPC may reach the engine once it is gone, and no job may run
  // once the host is gone.
  exporters_.reset();
  if (server_) server_->Shutdown(std::chrono::system_clock::now());
  if (admin_server_) admin_server_->Shutdown(std::chrono::system_clock::now());
  if (pool_) (void)pool_->shutdown(ShutdownMode::kCancelPending);
  server_.reset();
  admin_server_.reset();
  if (!admin_socket_.empty()) ::unlink(admin_socket_.c_str());  // e.g. a start that failed later
  admin_.reset();
  jobs_.reset();
  engine_.reset();
  pool_.reset();
  host_.reset();
}

std::string Daemon::state() const {
  return std::string(to_string(phase_.load()));
}

void Daemon::move_to(Phase from, Phase to) {
  if (Status s = phase_.transition(from, to); !s.ok()) spdlog::critical("{}", s.message());
}

std::chrono::milliseconds Daemon::uptime() const {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                               started_);
}

std::uint64_t Daemon::plugin_reloads() const {
  return reloads_.load(std::memory_order_relaxed);
}

bool Daemon::reload_plugins(std::string* sentence) {
  tpool::MutexLock lock(reload_mu_);
  Notifier n;
  n.reloading();
  Status s = host_->reload();
  n.ready();
  if (!s.ok()) {
    *sentence = "plugin reload failed; the previous plugins stay loaded: " + s.message();
    spdlog::error("{}", *sentence);
    return false;
  }
  reloads_.fetch_add(1, std::memory_order_relaxed);
  std::string names;
  for (const auto& h : host_->list()) names += (names.empty() ? "" : ", ") + h.name;
  *sentence = "plugins reloaded; handlers: " + (names.empty() ? std::string("none") : names);
  spdlog::info("{}", *sentence);
  return true;
}

void Daemon::reload_tokens() {
  if (!tokens_) return;
  Status s = tokens_->reload();
  if (!s.ok()) {
    spdlog::error("token file reload failed; the previous tokens stay in force: {}", s.message());
    return;
  }
  spdlog::info("token file {} reloaded: {} principals", tokens_->path(),
               tokens_->snapshot()->size());
}

void Daemon::shutdown(bool cancel_pending, std::chrono::milliseconds timeout,
                      std::function<void(const DrainOutcome&)> done) {
  tpool::MutexLock lock(request_mu_);
  if (!shutdown_requested_) {
    drain_timeout_ =
        timeout.count() > 0 ? timeout : std::chrono::milliseconds(config_.server.drain_timeout_ms);
  }
  shutdown_requested_ = true;
  cancel_requested_ = cancel_requested_ || cancel_pending;
  if (done) drain_waiters_.push_back(std::move(done));
}

int Daemon::run() {
  // Before any thread starts, so every thread inherits the mask (see the
  // header: only the main thread takes these signals, with sigtimedwait).
  sigset_t set = handled_signals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  install_stray_handlers();
  if (int rc = start(); rc != 0) {
    move_to(Phase::kStarting, Phase::kStopped);
    return rc;
  }
  serve();
  drain();
  stop();
  if (stuck_handlers_ != 0) {
    // A worker inside a handler that ignores cancellation cannot be joined
    // or interrupted: leave without running destructors (they would join it).
    spdlog::critical(
        "tpoold stopped with {} handlers still running; exiting with status {} without waiting "
        "for them",
        stuck_handlers_, kExitHandlersStuck);
    spdlog::default_logger()->flush();
    std::fflush(nullptr);
    std::_Exit(kExitHandlersStuck);
  }
  return 0;
}

int Daemon::start() {
  plugin_host::HostConfig hc = config_.host_config();
  hc.log_sink = [](plugin_host::LogLevel level, std::string_view plugin, std::string_view msg) {
    auto l = level == plugin_host::LogLevel::kError  ? spdlog::level::err
             : level == plugin_host::LogLevel::kWarn ? spdlog::level::warn
             : level == plugin_host::LogLevel::kInfo ? spdlog::level::info
                                                     : spdlog::level::debug;
    spdlog::log(l, "plugin host{}{}: {}", plugin.empty() ? "" : " ", plugin, msg);
  };
  if (hc.dirs.empty()) {
    spdlog::warn(
        "no plugin directories are configured (plugins.dirs or --plugin-dir): "
        "tpoold serves no handlers");
  }
  auto host = plugin_host::Host::load(std::move(hc));
  if (!host.ok()) {
    spdlog::critical("cannot load the plugins: {}", host.status().message());
    return 1;
  }
  host_ = std::move(host).value();

  auto pool = Pool::create(config_.pool_config());
  if (!pool.ok()) {
    spdlog::critical("cannot start the pool: {}", pool.status().message());
    return 1;
  }
  pool_ = std::move(pool).value();

  if (config_.auth.enabled()) {
    auto tokens = security::TokenFile::open(config_.auth.token_file);
    if (!tokens.ok()) {
      spdlog::critical("cannot load the token file (auth.token_file): {}",
                       tokens.status().message());
      return 1;
    }
    tokens_ = std::move(tokens).value();
  }
  rpc::AccessConfig access;
  access.tokens = tokens_.get();
  access.principal_from = principal_from(config_);

  if (config_.store.enabled()) {
    store::JournalOptions jo;
    jo.path = config_.store.path;
    jo.max_batch = config_.store.max_batch;
    jo.retention = std::chrono::milliseconds(config_.results.retention_ms);
    auto journal = store::Journal::open(std::move(jo));
    if (!journal.ok()) {
      spdlog::critical("cannot open the job store ([store] path): {}", journal.status().message());
      return 1;
    }
    journal_ = std::move(journal).value();
    store_metrics_ = std::make_unique<StoreMetrics>(*journal_);
    spdlog::info("job store {}: incarnation {}, {} accepted jobs to replay", journal_->path(),
                 journal_->incarnation(), journal_->recovered().size());
  }
  engine::EngineLimits limits = config_.engine_limits();
  limits.thread_init = &crash_handler_thread_init;
  engine_ =
      std::make_unique<engine::Engine>(*pool_, *host_, limits, nullptr, nullptr, journal_.get());
  engine_->recover();  // (D4) before the first request
  jobs_ = std::make_unique<rpc::JobServiceImpl>(*engine_, config_.rpc_limits(),
                                                config_.replica_id(), rpc::Access(access));
  const AdminListen admin_listen = config_.admin_listen();
  rpc::AccessConfig admin_access = access;
  admin_access.local_socket_is_admin = admin_listen.kind == AdminListen::Kind::kUnix;
  admin_ = std::make_unique<rpc::AdminServiceImpl>(*engine_, *jobs_, *this, TPOOL_VERSION,
                                                   rpc::Access(admin_access));

  for (const auto& w : config_.insecure_listeners()) {
    // validate() let it through: server.allow_insecure = true.
    spdlog::warn("INSECURE: {} (server.allow_insecure = true)", w);
  }
  grpc::EnableDefaultHealthCheckService(true);
  if (config_.server.reflection) grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  const auto creds = server_credentials(config_);
  // The admin listener first: its socket is bound under a narrowed umask
  // (process-wide), before the job port lets any job run code that creates
  // files.
  if (!start_admin_listener(creds)) return 1;
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(config_.server.listen, creds, &port);
  // A second tpoold on the same port must fail, not share it (gRPC enables
  // SO_REUSEPORT by default).
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.SetMaxReceiveMessageSize(static_cast<int>(config_.server.max_message_bytes));
  builder.SetMaxSendMessageSize(static_cast<int>(config_.server.max_message_bytes));
  {
    // Unary requests whose bytes do not parse: INVALID_ARGUMENT saying so
    // (gRPC alone answers UNIMPLEMENTED with no message).
    std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> f;
    f.push_back(rpc::unparsable_request_interceptors());
    builder.experimental().SetInterceptorCreators(std::move(f));
  }
  // The job port serves JobService only: AdminService is on the admin
  // listener (a call for it here is UNIMPLEMENTED).
  builder.RegisterService(jobs_.get());
  server_ = builder.BuildAndStart();
  if (!server_ || port == 0) {
    spdlog::critical(
        "cannot listen on {} (server.listen / --listen): the address is in use or "
        "not local; pick another address or port",
        config_.server.listen);
    return 1;
  }
  server_->GetHealthCheckService()->SetServingStatus(true);
  if (!config_.server.port_file.empty()) {
    std::string err;
    if (!write_port_file(config_.server.port_file, port, &err)) {
      spdlog::critical("{}", err);
      return 1;
    }
  }
  std::string exporter_error;
  DaemonView view{&config_,      pool_.get(), host_.get(),
                  engine_.get(), jobs_.get(), store_metrics_.get()};
  exporters_ = start_exporters(view, &exporter_error);
  if (!exporter_error.empty()) {
    spdlog::critical("{}", exporter_error);
    return 1;
  }

  std::string handlers;
  for (const auto& h : host_->list()) {
    handlers += (handlers.empty() ? "" : ", ") + h.name + " (" + h.plugin_name + " " +
                h.plugin_version + ")";
  }
  const Config& pc = pool_->config();
  std::string host_part = config_.server.listen.substr(0, config_.server.listen.rfind(':'));
  spdlog::info(
      "tpoold {} (replica {}, incarnation {}) serving gRPC on {}:{} ({}, {}); admin on {}; "
      "metrics {}; pool: {} workers ({} blocking), scheduler {}, {} descriptors; plugins: {}",
      TPOOL_VERSION, jobs_->replica(), engine_->incarnation(), host_part, port,
      config_.tls.enabled() ? "TLS, client certificates " + config_.tls.client_auth
                            : std::string("plaintext"),
      tokens_ ? "auth on: " + std::to_string(tokens_->snapshot()->size()) + " principals"
              : std::string("auth off"),
      admin_listen.kind == AdminListen::Kind::kNone ? std::string("none") : admin_listen.address,
      config_.metrics.enabled ? config_.metrics.listen : std::string("off"), pc.max_threads,
      pc.blocking_workers, to_string(pc.scheduler_variant), pc.queue_capacity,
      handlers.empty() ? std::string("none") : handlers);
  move_to(Phase::kStarting, Phase::kServing);
  Notifier n;
  n.ready();
  n.status("serving on " + host_part + ":" + std::to_string(port));
  return 0;
}

bool Daemon::start_admin_listener(const std::shared_ptr<grpc::ServerCredentials>& tls_creds) {
  const AdminListen a = config_.admin_listen();
  if (a.kind == AdminListen::Kind::kNone) {
    spdlog::info("no admin listener (server.admin_listen = \"none\"): AdminService is not served");
    return true;
  }
  grpc::ServerBuilder builder;
  int port = 0;
  if (a.kind == AdminListen::Kind::kUnix) {
    if (std::string err = prepare_admin_socket(a.path); !err.empty()) {
      spdlog::critical("{}", err);
      return false;
    }
    // The socket's mode is its access control: callers on it are treated as
    // the service user (docs/security.md).
    builder.AddListeningPort(a.address, grpc::InsecureServerCredentials());
  } else {
    builder.AddListeningPort(a.address, tls_creds, &port);  // validate(): TLS and auth
    builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  }
  builder.SetMaxReceiveMessageSize(static_cast<int>(config_.server.max_message_bytes));
  builder.SetMaxSendMessageSize(static_cast<int>(config_.server.max_message_bytes));
  {
    std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> f;
    f.push_back(rpc::unparsable_request_interceptors());
    builder.experimental().SetInterceptorCreators(std::move(f));
  }
  builder.RegisterService(admin_.get());
  {
    SocketUmask umask_0600;  // the socket is created 0600 inside BuildAndStart
    admin_server_ = builder.BuildAndStart();
  }
  if (!admin_server_ || (a.kind == AdminListen::Kind::kTcp && port == 0)) {
    spdlog::critical(
        "cannot listen on {} (server.admin_listen / --admin-listen): the address is in use, "
        "not local, or its directory is not writable; pick another address",
        a.address);
    return false;
  }
  if (a.kind == AdminListen::Kind::kUnix) {
    admin_socket_ = a.path;
    if (std::string err = check_admin_socket_mode(a.path); !err.empty()) {
      spdlog::critical("{}", err);
      return false;
    }
  }
  return true;
}

void Daemon::serve() {
  Notifier n;
  Liveness live;
  auto next_expire = std::chrono::steady_clock::now() + kExpireEvery;
  auto next_ping = std::chrono::steady_clock::now();
  for (;;) {
    int sig = next_signal(kTick);
    if (sig == SIGTERM || sig == SIGINT) {
      spdlog::info("received {}: draining", sig == SIGTERM ? "SIGTERM" : "SIGINT");
      shutdown(false, std::chrono::milliseconds(0), {});
    } else if (sig == SIGHUP) {
      spdlog::info("received SIGHUP: reloading plugins{}", tokens_ ? " and the token file" : "");
      std::string sentence;
      (void)reload_plugins(&sentence);
      reload_tokens();
    }
    {
      tpool::MutexLock lock(request_mu_);
      if (shutdown_requested_) return;
    }
    auto now = std::chrono::steady_clock::now();
    if (now >= next_expire) {
      engine_->expire();
      if (store_metrics_) store_metrics_->drain();
      next_expire = now + kExpireEvery;
    }
    if (n.watchdog_interval().count() > 0 && now >= next_ping) {
      PoolStats ps = pool_->stats();
      if (live.check(pool_->progress(),
                     ps.inject_depth + ps.local_depth_sum + ps.submitter_depth)) {
        n.watchdog();
      } else {
        spdlog::error(
            "the pool has queued work and started no task for {} ms: not pinging the "
            "systemd watchdog",
            n.watchdog_interval().count() / 1000);
      }
      next_ping = now + n.watchdog_interval();
    }
  }
}

void Daemon::drain() {
  move_to(Phase::kServing, Phase::kDraining);
  server_->GetHealthCheckService()->SetServingStatus(false);
  engine_->begin_drain();
  Notifier n;
  n.stopping();
  std::chrono::milliseconds timeout;
  bool cancel = false;
  {
    tpool::MutexLock lock(request_mu_);
    timeout = drain_timeout_;
    cancel = cancel_requested_;
  }
  std::uint64_t cancelled_before = 0;
  std::uint64_t final_before = total_final(engine_->snapshot(), &cancelled_before);
  spdlog::info("draining: {} jobs in flight, up to {} ms", engine_->in_flight(), timeout.count());
  auto deadline = std::chrono::steady_clock::now() + timeout;
  bool drained = false;
  while (!cancel) {
    if (engine_->in_flight() == 0) {
      drained = true;
      break;
    }
    if (std::chrono::steady_clock::now() >= deadline) break;
    int sig = next_signal(kTick);
    if (sig == SIGTERM || sig == SIGINT) {
      spdlog::warn("second {}: cancelling pending jobs", sig == SIGTERM ? "SIGTERM" : "SIGINT");
      cancel = true;
    } else if (sig == SIGHUP) {
      std::string sentence;
      (void)reload_plugins(&sentence);
      reload_tokens();
    }
    tpool::MutexLock lock(request_mu_);
    cancel = cancel || cancel_requested_;
    engine_->expire();
  }
  std::size_t stuck = 0;
  if (!drained) {
    if (!cancel) {
      spdlog::warn(
          "the drain timeout ({} ms) passed with {} jobs in flight: cancelling the queued ones "
          "and telling the running handlers to stop",
          timeout.count(), engine_->in_flight());
    }
    engine_->cancel_all();
    // Ends every queued job cancelled now; running ones end when their
    // handler returns (or the engine ends them after cancel_grace_ms).
    (void)pool_->shutdown(ShutdownMode::kCancelPending, std::chrono::nanoseconds(0));
    auto grace = std::chrono::milliseconds(config_.server.cancel_grace_ms);
    auto grace_end = std::chrono::steady_clock::now() + grace;
    while (engine_->in_flight() != 0 && std::chrono::steady_clock::now() < grace_end) {
      int sig = next_signal(std::min(
          kTick, std::chrono::duration_cast<std::chrono::milliseconds>(
                     grace_end - std::chrono::steady_clock::now() + std::chrono::milliseconds(1))));
      if (sig == SIGTERM || sig == SIGINT) {
        spdlog::warn("{} while handlers are told to stop: not waiting for them any longer",
                     sig == SIGTERM ? "SIGTERM" : "SIGINT");
        break;
      }
    }
    if (engine_->in_flight() != 0) {
      engine_->enforce();  // end (CANCELLED) the jobs whose handlers ignore it, for their callers
      std::vector<engine::RunningJob> running = engine_->running();
      stuck = running.size();
      for (const auto& r : running) {
        spdlog::error(
            "job {} (handler {}) did not stop: its handler has run for {} ms and ignores "
            "cancellation",
            r.id, r.handler, r.running_for.count());
      }
      // None inside a handler: the rest are between a handler's return and
      // their task's end, which stop() waits for.
    }
  }
  std::uint64_t cancelled_after = 0;
  std::uint64_t final_after = total_final(engine_->snapshot(), &cancelled_after);
  DrainOutcome outcome{drained, final_after - final_before - (cancelled_after - cancelled_before),
                       cancelled_after - cancelled_before};
  if (stuck == 0) {
    spdlog::info("drain {}: {} jobs finished, {} cancelled", drained ? "complete" : "cut short",
                 outcome.finished, outcome.cancelled);
  } else {
    spdlog::error(
        "drain cut short: {} jobs finished, {} cancelled; {} handlers are still running after "
        "server.cancel_grace_ms ({} ms)",
        outcome.finished, outcome.cancelled, stuck, config_.server.cancel_grace_ms);
  }
  stuck_handlers_ = stuck;
  std::vector<std::function<void(const DrainOutcome&)>> waiters;
  {
    tpool::MutexLock lock(request_mu_);
    waiters.swap(drain_waiters_);
  }
  for (auto& w : waiters) w(outcome);
}

void Daemon::stop() {
  move_to(Phase::kDraining, Phase::kStopping);
  const auto grace_end = std::chrono::system_clock::now() + kServerShutdownGrace;
  server_->Shutdown(grace_end);
  if (admin_server_) admin_server_->Shutdown(grace_end);
  if (!admin_socket_.empty()) {
    ::unlink(admin_socket_.c_str());  // gRPC may have already
    admin_socket_.clear();
  }
  exporters_.reset();
  if (stuck_handlers_ != 0) {
    // Their workers cannot be joined: run() exits without waiting for them.
    (void)pool_->shutdown(ShutdownMode::kCancelPending, std::chrono::nanoseconds(0));
    move_to(Phase::kStopping, Phase::kStopped);
    return;
  }
  Status s = pool_->shutdown(ShutdownMode::kCancelPending,
                             std::chrono::milliseconds(config_.server.cancel_grace_ms));
  if (!s.ok()) spdlog::warn("pool shutdown: {}", s.message());
  move_to(Phase::kStopping, Phase::kStopped);
  spdlog::info("tpoold stopped");
}

}  // namespace tpool::server
