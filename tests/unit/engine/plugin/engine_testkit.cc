// engine_testkit: handlers for the engine's in-process tests
// (tests/unit/engine), each the smallest handler that puts a job where a
// rule of the engine applies: done at once, failed with a code, blocked until
// the test opens a gate (ignoring cancellation), spinning until cancelled,
// fanning out, or producing a big output. Built as a MODULE against
// tpool/plugin.h only and dlopen'ed by the real plugin host; it reaches the
// test's Control (testkit_control.h) through the address in its config.
#include <tpool/plugin.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <new>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "testkit_control.h"

namespace {

using tpool::engine::testkit::Control;
using tpool::engine::testkit::kHang;

struct Ctx {
  const tpool_host_api* host;
  Control* ctl;
};

std::string_view in(const std::uint8_t* input, std::size_t size) {
  return size == 0 ? std::string_view()
                   : std::string_view(reinterpret_cast<const char*>(input), size);
}

std::size_t parse_size(std::string_view s) {
  std::size_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') break;
    v = v * 10 + static_cast<std::size_t>(c - '0');
  }
  return v;
}

std::int32_t write(const Ctx& c, tpool_job* job, std::string_view s) {
  return c.host->output_write(job, s.data(), s.size());
}

std::int32_t init(const tpool_host_api* h, const char* config, void** plugin_ctx, char* error,
                  std::size_t error_size) {
  Control* ctl = tpool::engine::testkit::control_of(config);
  if (ctl == nullptr) {
    std::snprintf(error, error_size, "engine_testkit needs its Control's address as its config");
    return TPOOL_STATUS_INVALID_INPUT;
  }
  auto* c = new (std::nothrow) Ctx{h, ctl};
  if (c == nullptr) return TPOOL_STATUS_INTERNAL;
  *plugin_ctx = c;
  return TPOOL_STATUS_OK;
}

void fini(void* plugin_ctx) {
  delete static_cast<Ctx*>(plugin_ctx);
}

// Output = input.
std::int32_t echo(void* p, tpool_job* job, const std::uint8_t* input, std::size_t size) {
  const Ctx& c = *static_cast<Ctx*>(p);
  c.ctl->called();
  return write(c, job, in(input, size));
}

// Input "<status>[:<message>]": returns that status, with that message.
std::int32_t fail(void* p, tpool_job* job, const std::uint8_t* input, std::size_t size) {
  const Ctx& c = *static_cast<Ctx*>(p);
  c.ctl->called();
  std::string_view s = in(input, size);
  if (auto colon = s.find(':'); colon != std::string_view::npos) {
    c.host->set_message(job, std::string(s.substr(colon + 1)).c_str());
  }
  return static_cast<std::int32_t>(parse_size(s));
}

// Input "<n>[:<status>]": fails attempts 1..n with <status> (default
// TPOOL_STATUS_RETRY) and the message "attempt <k> failed", then succeeds
// with "ok on attempt <k>". Reads its attempt through the ABI 1.1 host call.
std::int32_t flaky(void* p, tpool_job* job, const std::uint8_t* input, std::size_t size) {
  const Ctx& c = *static_cast<Ctx*>(p);
  c.ctl->called();
  if (!TPOOL_HOST_HAS(c.host, attempt)) return TPOOL_STATUS_INTERNAL;
  std::string_view s = in(input, size);
  std::int32_t status = TPOOL_STATUS_RETRY;
  if (auto colon = s.find(':'); colon != std::string_view::npos) {
    status = static_cast<std::int32_t>(parse_size(s.substr(colon + 1)));
    s = s.substr(0, colon);
  }
  const std::uint32_t k = c.host->attempt(job);
  if (k <= parse_size(s)) {
    c.host->set_message(job, ("attempt " + std::to_string(k) + " failed").c_str());
    return status;
  }
  return write(c, job, "ok on attempt " + std::to_string(k));
}

// Reports progress, then waits for the gate, whatever happens to its job
// (it ignores cancellation and deadlines), and returns OK with "late:<input>".
std::int32_t block(void* p, tpool_job* job, const std::uint8_t* input, std::size_t size) {
  const Ctx& c = *static_cast<Ctx*>(p);
  c.ctl->called();
  c.host->progress(job, 0.5, "waiting for the gate");
  c.ctl->enter();
  const bool opened = c.ctl->wait_open();
  c.ctl->leave();
  if (!opened) {
    c.host->set_message(job, "the test never opened the gate");
    return TPOOL_STATUS_ERROR;
  }
  return write(c, job, "late:" + std::string(in(input, size)));
}

// Spins until its job is cancelled (or past its deadline), then returns
// CANCELLED. Never returns otherwise (but for the hang guard).
std::int32_t spin(void* p, tpool_job* job, const std::uint8_t*, std::size_t) {
  const Ctx& c = *static_cast<Ctx*>(p);
  c.ctl->called();
  c.ctl->enter();
  const auto give_up = std::chrono::steady_clock::now() + kHang;
  while (c.host->is_cancelled(job) == 0) {
    if (std::chrono::steady_clock::now() > give_up) {
      c.ctl->leave();
      c.host->set_message(job, "spin was never cancelled");
      return TPOOL_STATUS_ERROR;
    }
    std::this_thread::yield();
  }
  c.ctl->leave();
  c.host->set_message(job, "spin saw the cancellation and stopped");
  return TPOOL_STATUS_CANCELLED;
}

// Writes <input> bytes of 'x'.
std::int32_t big(void* p, tpool_job* job, const std::uint8_t* input, std::size_t size) {
  const Ctx& c = *static_cast<Ctx*>(p);
  c.ctl->called();
  std::string out(parse_size(in(input, size)), 'x');
  return write(c, job, out);
}

// Records the thread it runs on, echoes its input.
std::int32_t where(void* p, tpool_job* job, const std::uint8_t* input, std::size_t size) {
  const Ctx& c = *static_cast<Ctx*>(p);
  c.ctl->called();
  c.ctl->where(c.ctl->child_threads);
  return write(c, job, in(input, size));
}

// Writes whether its job has a deadline: "none" or "some".
std::int32_t deadline(void* p, tpool_job* job, const std::uint8_t*, std::size_t) {
  const Ctx& c = *static_cast<Ctx*>(p);
  c.ctl->called();
  return write(c, job, c.host->remaining_ns(job) == INT64_MAX ? "none" : "some");
}

// Input "<handler> <n> <child input>": runs n children of <handler>, each
// with <child input>; records its thread; writes
// "<rc>|<status>:<output>:<message>|..." and returns OK; or fails (ERROR,
// naming the first failed child, with that line in [] in its message: the
// host keeps no output of a failed call) when a child failed, and returns
// CANCELLED when its job was cancelled meanwhile.
std::int32_t fanout(void* p, tpool_job* job, const std::uint8_t* input, std::size_t size) {
  const Ctx& c = *static_cast<Ctx*>(p);
  c.ctl->called();
  c.ctl->where(c.ctl->parent_threads);
  std::string_view s = in(input, size);
  const auto sp1 = s.find(' ');
  if (sp1 == std::string_view::npos) return TPOOL_STATUS_INVALID_INPUT;
  const std::string handler(s.substr(0, sp1));
  std::string_view rest = s.substr(sp1 + 1);
  const auto sp2 = rest.find(' ');
  const std::size_t n = parse_size(rest.substr(0, sp2));
  const std::string_view child_in =
      sp2 == std::string_view::npos ? std::string_view() : rest.substr(sp2 + 1);
  std::vector<tpool_bytes> inputs(
      n, tpool_bytes{reinterpret_cast<const std::uint8_t*>(child_in.data()), child_in.size()});
  std::vector<tpool_child_result> results(n);
  const std::int32_t rc =
      c.host->run_children(job, handler.c_str(), inputs.data(), n, results.data());
  std::string out = std::to_string(rc);
  std::string failed;
  for (std::size_t i = 0; i < n; ++i) {
    const tpool_child_result& r = results[i];
    out += "|" + std::to_string(r.status) + ":" +
           std::string(reinterpret_cast<const char*>(r.output),
                       r.output == nullptr ? 0 : r.output_size) +
           ":" + r.message;
    if (r.status != TPOOL_STATUS_OK && failed.empty()) {
      failed = "child " + std::to_string(i) + " of " + handler + " failed: " + r.message;
    }
  }
  if (const std::int32_t w = write(c, job, out); w != TPOOL_STATUS_OK) return w;
  if (rc != TPOOL_STATUS_OK) {
    c.host->set_message(job, ("run_children failed: [" + out + "]").c_str());
    return rc;
  }
  if (c.host->is_cancelled(job) != 0) {
    c.host->set_message(job, ("cancelled; " + failed + " [" + out + "]").c_str());
    return TPOOL_STATUS_CANCELLED;
  }
  if (!failed.empty()) {
    c.host->set_message(job, (failed + " [" + out + "]").c_str());
    return TPOOL_STATUS_ERROR;
  }
  return TPOOL_STATUS_OK;
}

const tpool_handler kHandlers[] = {
    {"echo", "output = input", TPOOL_LANE_DEFAULT, 0, 0, echo},
    {"fail", "returns <status>[:<message>]", TPOOL_LANE_DEFAULT, 0, 0, fail},
    {"flaky", "<n>[:<status>]: fails n attempts, then succeeds", TPOOL_LANE_DEFAULT, 0, 0, flaky},
    {"block", "waits for the test's gate, ignoring cancellation", TPOOL_LANE_DEFAULT, 0, 0, block},
    {"spin", "spins until cancelled", TPOOL_LANE_DEFAULT, 0, 0, spin},
    {"big", "writes <input> bytes", TPOOL_LANE_DEFAULT, 0, 0, big},
    {"where", "records its thread, echoes", TPOOL_LANE_DEFAULT, 0, 0, where},
    {"deadline", "none or some", TPOOL_LANE_DEFAULT, 0, 0, deadline},
    {"fanout", "<handler> <n> <input>: n children", TPOOL_LANE_DEFAULT, 0, 0, fanout},
    {"blocking_echo", "echo on the blocking lane", TPOOL_LANE_BLOCKING, 0, 0, echo},
};

const tpool_plugin kPlugin = {
    TPOOL_PLUGIN_HEADER,
    "engine_testkit",
    "0.1",
    "engine unit-test handlers",
    kHandlers,
    sizeof kHandlers / sizeof kHandlers[0],
    init,
    fini,
};

}  // namespace

extern "C" TPOOL_PLUGIN_EXPORT const tpool_plugin* tpool_plugin_entry(const tpool_host_api*) {
  return &kPlugin;
}
