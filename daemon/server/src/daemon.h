// tpool::server::Daemon: builds and wires the components, and runs the
// lifecycle (docs/architecture.md, "Lifecycle"; the phases and their one
// transition function are in phase.h):
//
//   starting -> serving -> draining -> stopping -> stopped
//
//  starting  plugins load, the pool starts, the gRPC server binds; any failure
//            exits 1 with a sentence.
//  serving   READY=1; SIGHUP reloads plugins (RELOADING=1, then READY=1) and
//            the token file (auth.token_file; a bad file keeps the old one).
//  draining  on SIGTERM/SIGINT, AdminService.Drain/Shutdown: health
//            NOT_SERVING, new jobs UNAVAILABLE, STOPPING=1; queued and running
//            jobs finish within the drain timeout. A second SIGTERM/SIGINT (or
//            the timeout, or Shutdown(CANCEL)) cancels what is pending and
//            tells running handlers to stop.
//  stopping  the gRPC server shuts down (open calls end), the pool stops.
//  stopped   exit 0; or, when handlers still run cancel_grace_ms after being
//            told to stop (they ignore cancellation), their jobs are logged
//            and tpoold exits kExitHandlersStuck at once, without joining
//            their workers (docs/operations.md, "Exit status").
//
// Signals are blocked in every thread and taken by the main thread with
// sigtimedwait. A library thread that unblocks them gets a handler that only
// counts them (lock-free atomics) for the main loop to take.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "config.h"
#include "phase.h"
#include "store_metrics.h"
#include "tpool/common/mutex.h"
#include "tpool/engine/engine.h"
#include "tpool/plugin_host/host.h"
#include "tpool/rpc/services.h"
#include "tpool/security/token_store.h"
#include "tpool/store/journal.h"

namespace grpc {
class Server;
class ServerCredentials;
}  // namespace grpc

namespace tpool::server {

// What an exporter (daemon/metrics) reads; valid while the daemon serves.
struct DaemonView {
  const DaemonConfig* config = nullptr;
  Pool* pool = nullptr;
  const plugin_host::Host* host = nullptr;
  const engine::Engine* engine = nullptr;
  const rpc::JobServiceImpl* jobs = nullptr;
  StoreMetrics* store = nullptr;  // null: no job store
};

// The exit status when handlers ignored cancellation through the whole stop
// (docs/operations.md, "Exit status").
inline constexpr int kExitHandlersStuck = 3;

class Daemon final : public rpc::Lifecycle {
 public:
  explicit Daemon(DaemonConfig config);
  ~Daemon() override;

  // Runs until stopped; the process exit code.
  int run();

  // rpc::Lifecycle
  std::string state() const override;
  std::chrono::milliseconds uptime() const override;
  std::uint64_t plugin_reloads() const override;
  bool reload_plugins(std::string* sentence) override EXCLUDES(reload_mu_);
  void shutdown(bool cancel_pending, std::chrono::milliseconds timeout,
                std::function<void(const DrainOutcome&)> done) override EXCLUDES(request_mu_);

 private:
  int start();
  void serve() EXCLUDES(request_mu_, reload_mu_);
  void drain() EXCLUDES(request_mu_, reload_mu_);
  void stop();
  // Re-reads auth.token_file (SIGHUP); a file that fails keeps the current
  // snapshot, and the log says why.
  void reload_tokens();
  // Builds and starts the admin listener (server.admin_listen); false after
  // logging why.
  bool start_admin_listener(const std::shared_ptr<grpc::ServerCredentials>& creds);
  // phase_.transition, and a critical log line when it is refused (a bug).
  void move_to(Phase from, Phase to);

  DaemonConfig config_;
  std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  PhaseCell phase_;  // main thread moves it (phase.h, P1)
  std::atomic<std::uint64_t> reloads_{0};
  // Serialises SIGHUP and ReloadPlugins: held across host_->reload() and the
  // RELOADING=1 / READY=1 pair around it (it guards a sequence, not a field).
  tpool::Mutex reload_mu_;

  // A shutdown request from AdminService (the main thread polls it).
  tpool::Mutex request_mu_;
  bool shutdown_requested_ GUARDED_BY(request_mu_) = false;
  bool cancel_requested_ GUARDED_BY(request_mu_) = false;
  std::chrono::milliseconds drain_timeout_ GUARDED_BY(request_mu_){0};
  std::vector<std::function<void(const DrainOutcome&)>> drain_waiters_ GUARDED_BY(request_mu_);

  std::size_t stuck_handlers_ = 0;  // main thread only: set by drain()

  // The job store ([store] path; null: none). Declared first of the parts:
  // destroyed last, after the engine and the pool whose jobs append to it.
  std::unique_ptr<store::Journal> journal_;
  std::unique_ptr<StoreMetrics> store_metrics_;  // with journal_
  std::unique_ptr<plugin_host::Host> host_;
  std::unique_ptr<Pool> pool_;
  std::unique_ptr<engine::Engine> engine_;
  std::unique_ptr<rpc::JobServiceImpl> jobs_;
  std::unique_ptr<rpc::AdminServiceImpl> admin_;
  std::unique_ptr<security::TokenFile> tokens_;  // auth.token_file; null: auth off
  std::unique_ptr<grpc::Server> server_;         // the job port
  std::unique_ptr<grpc::Server> admin_server_;   // the admin listener; null: "none"
  std::string admin_socket_;                     // its Unix socket's path, removed at stop
  std::shared_ptr<void> exporters_;              // started by start_exporters (exporters.cc)
};

// Starts the exporters (the Prometheus endpoint of daemon/metrics when it is
// built) once the daemon serves; the returned handle stops them when reset.
// Errors are sentences in *error (then nullptr is returned).
std::shared_ptr<void> start_exporters(const DaemonView& view, std::string* error);

}  // namespace tpool::server
