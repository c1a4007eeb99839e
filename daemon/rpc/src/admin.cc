// AdminService: stats, plugin reload, drain and shutdown.
#include <memory>

#include "convert.h"
#include "tpool/rpc/services.h"

namespace tpool::rpc {
namespace {

grpc::ServerUnaryReactor* finish_now(grpc::CallbackServerContext* ctx, const grpc::Status& s) {
  auto* r = ctx->DefaultReactor();
  r->Finish(s);
  return r;
}

void fill_latency(const HistogramSnapshot& h, tpool::v1::Latency& out) {
  out.set_count(h.count());
  out.set_p50_us(h.percentile_ns(0.50) / 1000);
  out.set_p99_us(h.percentile_ns(0.99) / 1000);
  out.set_max_us(h.percentile_ns(1.0) / 1000);
}

void fill_handlers(const engine::Engine& engine,
                   google::protobuf::RepeatedPtrField<tpool::v1::HandlerInfo>& out) {
  for (const auto& h : engine.handlers()) {
    auto* o = out.Add();
    o->set_name(h.name);
    o->set_plugin(h.plugin_name);
    o->set_plugin_version(h.plugin_version);
    o->set_path(h.plugin_file);
    o->set_description(h.description);
    o->set_lane_hint(to_proto(h.lane));
    o->set_isolation(h.isolation == plugin_host::IsolationMode::kProcess ? "process"
                                                                         : "in_process");
  }
}

std::chrono::milliseconds timeout_of(std::uint64_t ms) {
  return std::chrono::milliseconds(std::min<std::uint64_t>(ms, 24ull * 3600 * 1000));
}

}  // namespace

grpc::ServerUnaryReactor* AdminServiceImpl::Stats(grpc::CallbackServerContext* ctx,
                                                  const tpool::v1::StatsRequest*,
                                                  tpool::v1::StatsReply* resp) {
  if (auto a = access_.admit(ctx, security::Method::kStats); a.refused) {
    return finish_now(ctx, *a.refused);
  }
  PoolStats ps = engine_.pool_stats();
  auto* p = resp->mutable_pool();
  p->set_submitted(ps.submitted);
  p->set_completed(ps.completed);
  p->set_failed(ps.failed);
  p->set_cancelled(ps.cancelled);
  p->set_rejected_full(ps.rejected_full);
  p->set_rejected_shutdown(ps.rejected_shutdown);
  p->set_rejected_timeout(ps.rejected_timeout);
  p->set_steal_ops(ps.steal_ops);
  p->set_steal_tasks(ps.steal_tasks);
  p->set_parks(ps.parks);
  p->set_inject_depth(ps.inject_depth);
  p->set_live_descriptors(ps.live_descriptors);
  p->set_descriptor_capacity(ps.descriptor_capacity);
  p->set_workers(ps.workers);
  p->set_busy_workers(ps.busy_workers);
  p->set_parked_workers(ps.parked_workers);
  p->set_stalls_detected(ps.stalls_detected);
  p->set_overflow_active(ps.overflow_active);
  p->set_overflow_spawned(ps.overflow_spawned);
  for (std::size_t i = 0; i < kLaneCount; ++i) {
    auto* l = p->add_lanes();
    l->set_lane(to_proto(static_cast<Lane>(i)));
    l->set_completed(ps.lanes[i].completed);
    l->set_inject_depth(ps.lanes[i].inject_depth);
    l->set_workers(ps.lanes[i].workers);
    fill_latency(ps.lanes[i].wait, *l->mutable_wait());
    fill_latency(ps.lanes[i].run, *l->mutable_run());
  }
  engine::EngineSnapshot es = engine_.snapshot();
  RpcSnapshot rs = jobs_.snapshot();
  auto* d = resp->mutable_daemon();
  d->set_state(life_.state());
  d->set_jobs_in_flight(es.in_flight);
  d->set_result_store_entries(es.retained_entries);
  d->set_result_store_bytes(es.retained_bytes);
  d->set_streams_active(rs.streams_active);
  d->set_rejected_invalid(es.rejected_invalid + es.rejected_conflict);
  d->set_rejected_not_found(es.rejected_not_found);
  d->set_rejected_full(es.rejected_full);
  d->set_rejected_draining(es.rejected_draining);
  d->set_jobs_retried(es.retried);
  d->set_jobs_scheduled(es.scheduled);
  for (const auto& h : es.handlers) {
    auto* o = d->add_handlers();
    o->set_handler(h.handler);
    o->set_submitted(h.submitted);
    o->set_succeeded(h.succeeded);
    o->set_failed(h.failed);
    o->set_cancelled(h.cancelled);
    o->set_timed_out(h.timed_out);
  }
  d->set_uptime_ms(static_cast<std::uint64_t>(life_.uptime().count()));
  d->set_version(version_);
  d->set_plugin_reloads(life_.plugin_reloads());
  d->set_stream_buffered_bytes(rs.stream_buffered_bytes);
  d->set_stream_unparsable_messages(rs.stream_unparsable_messages);
  return finish_now(ctx, grpc::Status::OK);
}

grpc::ServerUnaryReactor* AdminServiceImpl::ReloadPlugins(grpc::CallbackServerContext* ctx,
                                                          const tpool::v1::ReloadPluginsRequest*,
                                                          tpool::v1::ReloadPluginsReply* resp) {
  if (auto a = access_.admit(ctx, security::Method::kReloadPlugins); a.refused) {
    return finish_now(ctx, *a.refused);
  }
  std::string sentence;
  if (!life_.reload_plugins(&sentence)) {
    return finish_now(ctx, to_status(Refusal::kReloadFailed, sentence));
  }
  fill_handlers(engine_, *resp->mutable_handlers());
  resp->set_message(sentence);
  return finish_now(ctx, grpc::Status::OK);
}

grpc::ServerUnaryReactor* AdminServiceImpl::Drain(grpc::CallbackServerContext* ctx,
                                                  const tpool::v1::DrainRequest* req,
                                                  tpool::v1::DrainReply* resp) {
  if (auto a = access_.admit(ctx, security::Method::kDrain); a.refused) {
    return finish_now(ctx, *a.refused);
  }
  auto* r = ctx->DefaultReactor();
  life_.shutdown(false, timeout_of(req->timeout_ms()), [r, resp](const Lifecycle::DrainOutcome& o) {
    resp->set_drained(o.drained);
    resp->set_finished(o.finished);
    resp->set_cancelled(o.cancelled);
    r->Finish(grpc::Status::OK);
  });
  return r;
}

grpc::ServerUnaryReactor* AdminServiceImpl::Shutdown(grpc::CallbackServerContext* ctx,
                                                     const tpool::v1::ShutdownRequest* req,
                                                     tpool::v1::ShutdownReply* resp) {
  if (auto a = access_.admit(ctx, security::Method::kShutdown); a.refused) {
    return finish_now(ctx, *a.refused);
  }
  bool cancel = req->mode() == tpool::v1::SHUTDOWN_MODE_CANCEL;
  if (req->mode() < 0 || req->mode() > tpool::v1::SHUTDOWN_MODE_CANCEL) {
    return finish_now(
        ctx, to_status(Refusal::kInvalidRequest, "shutdown mode " + std::to_string(req->mode()) +
                                                     " is not valid; use DRAIN (1) or CANCEL (2)"));
  }
  life_.shutdown(cancel, timeout_of(req->timeout_ms()), {});
  resp->set_accepted(true);
  return finish_now(ctx, grpc::Status::OK);
}

}  // namespace tpool::rpc
