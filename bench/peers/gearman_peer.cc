// The gearmand side of bench/peers (run by bench/peers/run.sh, not a test).
//
//   peer_gearman worker PORT            a worker with a no-op function "noop"
//   peer_gearman client PORT N C BYTES  N foreground jobs of BYTES bytes, C in flight
//
// The client prints one JSON line shaped like `tpoolctl bench --json`, so the
// report reads both the same way. C = 1 uses gearman_client_do (one job at a
// time); C > 1 keeps C tasks in flight with the task API: each completion
// callback adds the next task, so the window stays full until N are sent.
// Latency: task added to task complete, successful jobs only.
#include <libgearman/gearman.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

void* noop(gearman_job_st* /*job*/, void* /*context*/, size_t* result_size, gearman_return_t* ret) {
  *result_size = 0;
  *ret = GEARMAN_SUCCESS;
  return nullptr;
}

int worker(in_port_t port) {
  gearman_worker_st* w = gearman_worker_create(nullptr);
  if (w == nullptr || gearman_failed(gearman_worker_add_server(w, "127.0.0.1", port)) ||
      gearman_failed(gearman_worker_add_function(w, "noop", 0, noop, nullptr))) {
    std::fprintf(stderr, "peer_gearman worker: cannot register with gearmand on 127.0.0.1:%u\n",
                 port);
    return 1;
  }
  for (;;) {
    gearman_return_t rc = gearman_worker_work(w);
    if (gearman_failed(rc) && rc != GEARMAN_TIMEOUT) {
      std::fprintf(stderr, "peer_gearman worker: %s\n", gearman_worker_error(w));
      gearman_worker_free(w);
      return 1;
    }
  }
}

struct Run {
  gearman_client_st* client = nullptr;
  std::string payload;
  std::uint64_t n = 0, sent = 0, done = 0;
  std::vector<Clock::time_point> start;
  std::vector<std::uint64_t> latency_us;
  std::map<std::string, std::uint64_t> errors;

  bool add_next() {
    if (sent >= n) return true;
    std::uint64_t i = sent++;
    start[i] = Clock::now();
    gearman_return_t rc;
    // The task's context is its index (an integer in a pointer, never dereferenced).
    gearman_task_st* t =
        gearman_client_add_task(client, nullptr, reinterpret_cast<void*>(i), "noop", nullptr,
                                payload.data(), payload.size(), &rc);
    if (t == nullptr || gearman_failed(rc)) {
      ++errors[gearman_strerror(rc)];
      ++done;
      return false;
    }
    return true;
  }
};

// The one run of this single-threaded client (libgearman 1.1 has no task ->
// client accessor, and the callbacks take only the task).
Run* g_run = nullptr;

gearman_return_t on_complete(gearman_task_st* task) {
  Run* run = g_run;
  auto i = reinterpret_cast<std::uint64_t>(gearman_task_context(task));
  run->latency_us.push_back(static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - run->start[i]).count()));
  ++run->done;
  run->add_next();
  return GEARMAN_SUCCESS;
}

gearman_return_t on_fail(gearman_task_st* /*task*/) {
  Run* run = g_run;
  ++run->errors["GEARMAN_WORK_FAIL"];
  ++run->done;
  run->add_next();
  return GEARMAN_SUCCESS;
}

std::uint64_t quantile(const std::vector<std::uint64_t>& v, double q) {
  if (v.empty()) return 0;
  auto idx = static_cast<std::size_t>(std::ceil(q * static_cast<double>(v.size()))) - 1;
  return v[std::min(idx, v.size() - 1)];
}

int client(in_port_t port, std::uint64_t n, std::uint64_t c, std::size_t bytes) {
  Run run;
  run.client = gearman_client_create(nullptr);
  if (run.client == nullptr ||
      gearman_failed(gearman_client_add_server(run.client, "127.0.0.1", port))) {
    std::fprintf(stderr, "peer_gearman client: cannot use gearmand on 127.0.0.1:%u\n", port);
    return 1;
  }
  run.payload.assign(bytes, 'x');
  run.n = n;
  run.start.resize(n);
  run.latency_us.reserve(n);
  auto t0 = Clock::now();
  if (c == 1) {
    for (std::uint64_t i = 0; i < n; ++i) {
      auto s = Clock::now();
      size_t size = 0;
      gearman_return_t rc;
      void* out = gearman_client_do(run.client, "noop", nullptr, run.payload.data(),
                                    run.payload.size(), &size, &rc);
      std::free(out);
      if (gearman_success(rc)) {
        run.latency_us.push_back(static_cast<std::uint64_t>(
            std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - s).count()));
      } else {
        ++run.errors[gearman_strerror(rc)];
      }
    }
  } else {
    g_run = &run;
    gearman_client_set_complete_fn(run.client, on_complete);
    gearman_client_set_fail_fn(run.client, on_fail);
    for (std::uint64_t k = 0; k < std::min(n, c); ++k) run.add_next();
    while (run.done < n) {
      gearman_return_t rc = gearman_client_run_tasks(run.client);
      if (gearman_failed(rc)) {
        std::fprintf(stderr, "peer_gearman client: %s\n", gearman_client_error(run.client));
        run.errors[gearman_strerror(rc)] += n - run.done;
        break;
      }
    }
  }
  double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  std::sort(run.latency_us.begin(), run.latency_us.end());
  std::printf(
      "{\"system\":\"gearmand\",\"handler\":\"noop\",\"mode\":\"%s\",\"jobs\":%llu,"
      "\"concurrency\":%llu,\"payload_bytes\":%zu,\"seconds\":%.6f,\"jobs_per_s\":%.1f,"
      "\"succeeded\":%zu,\"errors\":{",
      c == 1 ? "do" : "tasks", static_cast<unsigned long long>(n),
      static_cast<unsigned long long>(c), bytes, secs, static_cast<double>(n) / secs,
      run.latency_us.size());
  bool first = true;
  for (const auto& [k, v] : run.errors) {
    std::printf("%s\"%s\":%llu", first ? "" : ",", k.c_str(), static_cast<unsigned long long>(v));
    first = false;
  }
  std::printf(
      "},\"latency_us\":{\"p50\":%llu,\"p90\":%llu,\"p99\":%llu,\"p99_9\":%llu,\"max\":%llu}}\n",
      static_cast<unsigned long long>(quantile(run.latency_us, 0.5)),
      static_cast<unsigned long long>(quantile(run.latency_us, 0.9)),
      static_cast<unsigned long long>(quantile(run.latency_us, 0.99)),
      static_cast<unsigned long long>(quantile(run.latency_us, 0.999)),
      static_cast<unsigned long long>(run.latency_us.empty() ? 0 : run.latency_us.back()));
  gearman_client_free(run.client);
  return run.errors.empty() ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::strcmp(argv[1], "worker") == 0) {
    return worker(static_cast<in_port_t>(std::atoi(argv[2])));
  }
  if (argc == 6 && std::strcmp(argv[1], "client") == 0) {
    return client(static_cast<in_port_t>(std::atoi(argv[2])), std::strtoull(argv[3], nullptr, 10),
                  std::strtoull(argv[4], nullptr, 10),
                  static_cast<std::size_t>(std::strtoull(argv[5], nullptr, 10)));
  }
  std::fprintf(stderr,
               "usage: peer_gearman worker PORT | peer_gearman client PORT N C PAYLOAD_BYTES\n");
  return 2;
}
