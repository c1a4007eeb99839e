// tpoolctl's subcommands except bench: one call each, printed as text or JSON.
#include <google/protobuf/util/json_util.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <sstream>

#include "cli.h"

namespace tpoolctl {

using tpool::client::Client;
using tpool::client::Error;
using tpool::client::JobResult;
using tpool::client::JobState;

int exit_code_of(const Error& e) {
  switch (e.code()) {
    case 0:
      return kOk;
    case 14:
      return kUnavailable;  // UNAVAILABLE
    case 5:
      return kNotFound;  // NOT_FOUND
    case 4:
      return kDeadline;  // DEADLINE_EXCEEDED
    case 1:
      return kCancelled;  // CANCELLED
    case 3:               // INVALID_ARGUMENT
    case 6:               // ALREADY_EXISTS
    case 7:               // PERMISSION_DENIED
    case 8:               // RESOURCE_EXHAUSTED
    case 9:               // FAILED_PRECONDITION
    case 11:              // OUT_OF_RANGE
    case 16:
      return kRejected;  // UNAUTHENTICATED
    default:
      return kInternal;
  }
}

tpool::client::ClientOptions admin_options(const Args& a) {
  tpool::client::ClientOptions o = a.client;
  o.address = a.admin_address;
  if (tpool::client::is_unix_address(o.address)) o.tls = {};
  return o;
}

std::optional<std::string> Args::value(const std::string& opt) const {
  auto it = options.find(opt);
  if (it == options.end() || it->second.empty()) return std::nullopt;
  return it->second.back();
}

int fail(const Args& a, int code, const std::string& sentence) {
  std::cerr << "tpoolctl " << a.command << ": " << sentence << "\n";
  return code;
}

int fail(const Args& a, const Error& e) {
  std::string s;
  switch (e.code()) {
    case 14:
      s = "tpoold at " + a.client.address +
          " is unavailable (down, unreachable or draining): " + e.message();
      break;
    case 4:
      s = "the deadline passed (" + e.message() + "); raise --deadline or the job's --timeout";
      break;
    default:
      s = e.to_string();
      if (e.retry_after().count() > 0) {
        s += " (the daemon asks to retry after " + std::to_string(e.retry_after().count()) + " ms)";
      }
  }
  return fail(a, exit_code_of(e), s);
}

std::optional<std::chrono::milliseconds> parse_duration(const std::string& s) {
  std::size_t end = 0;
  double v = 0;
  try {
    v = std::stod(s, &end);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  if (v < 0) return std::nullopt;
  std::string unit = s.substr(end);
  double ms = 0;
  if (unit.empty() || unit == "ms") {
    ms = v;
  } else if (unit == "us") {
    ms = v / 1000;
  } else if (unit == "s") {
    ms = v * 1000;
  } else if (unit == "m") {
    ms = v * 60'000;
  } else if (unit == "h") {
    ms = v * 3'600'000;
  } else {
    return std::nullopt;
  }
  return std::chrono::milliseconds(static_cast<long long>(ms));
}

std::optional<std::uint64_t> parse_uint(const std::string& s) {
  if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  try {
    return std::stoull(s);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

bool is_utf8(const std::string& s) {
  std::size_t i = 0;
  while (i < s.size()) {
    auto c = static_cast<unsigned char>(s[i]);
    std::size_t n = c < 0x80           ? 0
                    : (c >> 5) == 0x6  ? 1
                    : (c >> 4) == 0xe  ? 2
                    : (c >> 3) == 0x1e ? 3
                                       : 9;
    if (n == 9 || i + n >= s.size()) {
      return false;
    }
    for (std::size_t k = 1; k <= n; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) >> 6) != 0x2) return false;
    }
    i += n + 1;
  }
  return true;
}

std::string base64(const std::string& s) {
  static const char* t = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  std::size_t i = 0;
  for (; i + 2 < s.size(); i += 3) {
    unsigned v = (static_cast<unsigned char>(s[i]) << 16) |
                 (static_cast<unsigned char>(s[i + 1]) << 8) | static_cast<unsigned char>(s[i + 2]);
    out += {t[v >> 18], t[(v >> 12) & 63], t[(v >> 6) & 63], t[v & 63]};
  }
  if (i + 1 == s.size()) {
    unsigned v = static_cast<unsigned char>(s[i]) << 16;
    out += {t[v >> 18], t[(v >> 12) & 63], '=', '='};
  } else if (i + 2 == s.size()) {
    unsigned v =
        (static_cast<unsigned char>(s[i]) << 16) | (static_cast<unsigned char>(s[i + 1]) << 8);
    out += {t[v >> 18], t[(v >> 12) & 63], t[(v >> 6) & 63], '='};
  }
  return out;
}

namespace {
std::string read_all(std::istream& in) {
  std::ostringstream s;
  s << in.rdbuf();  // an empty stream only sets s's failbit
  return s.str();
}
}  // namespace

bool job_from_args(const Args& a, std::size_t handler_pos, tpool::client::Job* job, int* exit) {
  job->handler = a.positional.at(handler_pos);
  const bool arg_payload = a.positional.size() > handler_pos + 1;
  std::string from = arg_payload ? a.positional[handler_pos + 1] : "";
  auto file = a.value("--file");
  int sources = (arg_payload ? 1 : 0) + (file ? 1 : 0) + (a.has("--stdin") ? 1 : 0);
  if (sources > 1) {
    *exit = fail(a, kUsage, "give the payload once: as an argument, --file or --stdin");
    return false;
  }
  if (a.has("--stdin") || (file && *file == "-") || (arg_payload && from == "-")) {
    job->payload = read_all(std::cin);
  } else if (file) {
    std::ifstream in(*file, std::ios::binary);
    if (!in) {
      *exit = fail(a, kUsage, "cannot read the payload file '" + *file + "'; check the path");
      return false;
    }
    job->payload = read_all(in);
  } else {
    job->payload = from;
  }
  if (auto t = a.value("--timeout")) {
    auto d = parse_duration(*t);
    if (!d) {
      *exit = fail(a, kUsage, "--timeout '" + *t + "' is not a duration; use e.g. 500ms or 30s");
      return false;
    }
    job->timeout = *d;
  }
  if (auto l = a.value("--lane")) {
    if (*l == "default") {
      job->lane = tpool::client::Lane::kDefault;
    } else if (*l == "blocking") {
      job->lane = tpool::client::Lane::kBlocking;
    } else {
      *exit = fail(a, kUsage, "--lane '" + *l + "' is not a lane; use default or blocking");
      return false;
    }
  }
  if (auto n = a.value("--attempts")) {
    char* end = nullptr;
    const unsigned long v = std::strtoul(n->c_str(), &end, 10);
    if (n->empty() || *end != '\0' || v < 1 || v > 100) {
      *exit = fail(a, kUsage, "--attempts '" + *n + "' is not a number from 1 to 100");
      return false;
    }
    job->max_attempts = static_cast<std::uint32_t>(v);
  }
  if (auto b = a.value("--backoff")) {  // BASE or BASE:CAP
    const auto colon = b->find(':');
    auto base = parse_duration(b->substr(0, colon));
    std::optional<std::chrono::milliseconds> cap = std::chrono::milliseconds(0);
    if (colon != std::string::npos) cap = parse_duration(b->substr(colon + 1));
    if (!base || !cap) {
      *exit = fail(a, kUsage,
                   "--backoff '" + *b + "' is not BASE or BASE:CAP durations; use e.g. 1s:60s");
      return false;
    }
    job->backoff_base = *base;
    job->backoff_cap = *cap;
  }
  if (auto t = a.value("--delay")) {
    auto d = parse_duration(*t);
    if (!d) {
      *exit = fail(a, kUsage, "--delay '" + *t + "' is not a duration; use e.g. 90s or 10m");
      return false;
    }
    job->delay = *d;
  }
  if (auto k = a.value("--key")) job->idempotency_key = *k;
  job->durable = a.has("--durable");
  if (a.has("--label")) {
    for (const auto& kv : a.options.at("--label")) {
      auto eq = kv.find('=');
      if (eq == std::string::npos || eq == 0) {
        *exit = fail(a, kUsage, "--label '" + kv + "' is not KEY=VALUE");
        return false;
      }
      job->labels[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
  }
  return true;
}

namespace {

// JOB_ID, or JOB_ID@REPLICA as `submit` prints it given several addresses.
std::optional<tpool::client::JobRef> job_id_arg(const Args& a, int* exit) {
  const std::string& arg = a.positional.at(0);
  auto at = arg.find('@');
  auto id = parse_uint(arg.substr(0, at));
  if (!id || *id == 0 || (at != std::string::npos && at + 1 == arg.size())) {
    *exit = fail(a, kUsage,
                 "'" + arg +
                     "' is not a job id (a positive number, or ID@REPLICA as submit prints "
                     "it given several addresses)");
    return std::nullopt;
  }
  return tpool::client::JobRef{*id, at == std::string::npos ? "" : arg.substr(at + 1)};
}

std::string bytes_json(const char* name, const std::string& b) {
  return is_utf8(b) ? json_string(name) + ":" + json_string(b)
                    : json_string(std::string(name) + "_base64") + ":" + json_string(base64(b));
}

// execute and wait: the output on stdout (text) or the whole result (JSON).
int print_result(const Args& a, const JobResult& r) {
  if (a.json) {
    std::cout << "{\"job_id\":" << r.job_id << ",\"state\":" << json_string(to_string(r.state))
              << "," << bytes_json("output", r.output) << ",\"message\":" << json_string(r.message)
              << ",\"wait_us\":" << r.wait.count() << ",\"run_us\":" << r.run.count() << "}\n";
  } else {
    std::cout << r.output;
    if (::isatty(STDOUT_FILENO) && !r.output.empty() && r.output.back() != '\n') std::cout << "\n";
    std::cout.flush();
  }
  switch (r.state) {
    case JobState::kSucceeded:
      return kOk;
    case JobState::kFailed:
      return a.json
                 ? kNegative
                 : fail(a, kNegative, "job " + std::to_string(r.job_id) + " FAILED: " + r.message);
    case JobState::kCancelled:
      return a.json ? kCancelled
                    : fail(a, kCancelled,
                           "job " + std::to_string(r.job_id) + " was CANCELLED: " + r.message);
    case JobState::kTimedOut:
      return a.json ? kDeadline
                    : fail(a, kDeadline,
                           "job " + std::to_string(r.job_id) + " TIMED_OUT: " + r.message);
    default:
      return fail(a, kInternal, "the daemon returned a result in no final state");
  }
}

std::string handlers_json(const std::vector<tpool::client::HandlerInfo>& hs) {
  std::string out = "[";
  for (std::size_t i = 0; i < hs.size(); ++i) {
    const auto& h = hs[i];
    out += (i ? "," : "") + std::string("{\"name\":") + json_string(h.name) +
           ",\"plugin\":" + json_string(h.plugin) +
           ",\"plugin_version\":" + json_string(h.plugin_version) +
           ",\"path\":" + json_string(h.path) + ",\"description\":" + json_string(h.description) +
           ",\"lane_hint\":" + json_string(to_string(h.lane_hint)) +
           ",\"isolation\":" + json_string(h.isolation) + "}";
  }
  return out + "]";
}

void print_handlers_text(const std::vector<tpool::client::HandlerInfo>& hs) {
  std::size_t w = 7;
  for (const auto& h : hs) w = std::max(w, h.name.size() + 2);
  std::cout << std::left << std::setw(static_cast<int>(w)) << "HANDLER" << std::setw(10) << "LANE"
            << std::setw(12) << "MODE" << std::setw(24) << "PLUGIN"
            << "DESCRIPTION\n";
  for (const auto& h : hs) {
    std::cout << std::setw(static_cast<int>(w)) << h.name << std::setw(10) << to_string(h.lane_hint)
              << std::setw(12) << (h.isolation.empty() ? "-" : h.isolation) << std::setw(24)
              << (h.plugin + " " + h.plugin_version) << h.description << "\n";
  }
}

std::string ms(std::chrono::microseconds us) {
  std::ostringstream o;
  o << std::fixed << std::setprecision(3) << static_cast<double>(us.count()) / 1000.0 << " ms";
  return o.str();
}

}  // namespace

int cmd_execute(const Args& a) {
  tpool::client::Job job;
  int exit = kOk;
  if (!job_from_args(a, 0, &job, &exit)) return exit;
  Client c(a.client);
  auto r = c.execute(job);
  if (!r.ok()) return fail(a, r.error());
  return print_result(a, *r);
}

int cmd_submit(const Args& a) {
  tpool::client::Job job;
  int exit = kOk;
  if (!job_from_args(a, 0, &job, &exit)) return exit;
  Client c(a.client);
  auto r = c.submit_ref(job);
  if (!r.ok()) return fail(a, r.error());
  if (a.json) {
    std::cout << "{\"job_id\":" << r->job_id << ",\"replica\":" << json_string(r->replica) << "}\n";
  } else if (a.client.address.find(',') != std::string::npos && !r->replica.empty()) {
    // Several replicas: the owner too, so that wait/get/cancel find it.
    std::cout << r->job_id << "@" << r->replica << "\n";
  } else {
    std::cout << r->job_id << "\n";
  }
  return kOk;
}

int cmd_wait(const Args& a) {
  int exit = kOk;
  auto id = job_id_arg(a, &exit);
  if (!id) return exit;
  Client c(a.client);
  auto r = c.wait(*id);
  if (!r.ok()) return fail(a, r.error());
  return print_result(a, *r);
}

int cmd_get(const Args& a) {
  int exit = kOk;
  auto id = job_id_arg(a, &exit);
  if (!id) return exit;
  Client c(a.client);
  auto r = c.get(*id);
  if (!r.ok()) return fail(a, r.error());
  const auto& s = *r;
  if (a.json) {
    std::cout << "{\"job_id\":" << s.job_id << ",\"handler\":" << json_string(s.handler)
              << ",\"state\":" << json_string(to_string(s.state))
              << ",\"lane\":" << json_string(to_string(s.lane)) << ",\"wait_us\":" << s.wait.count()
              << ",\"run_us\":" << s.run.count() << ",\"progress\":" << s.progress
              << ",\"progress_message\":" << json_string(s.progress_message)
              << ",\"message\":" << json_string(s.message)
              << ",\"accepted_unix_ms\":" << s.accepted_unix_ms << ",\"attempts\":" << s.attempts
              << ",\"labels\":{";
    bool first = true;
    for (const auto& [k, v] : s.labels) {
      std::cout << (first ? "" : ",") << json_string(k) << ":" << json_string(v);
      first = false;
    }
    std::cout << "},\"attempt_messages\":[";
    first = true;
    for (const auto& m : s.attempt_messages) {
      std::cout << (first ? "" : ",") << json_string(m);
      first = false;
    }
    std::cout << "]}\n";
    return kOk;
  }
  std::time_t secs = static_cast<std::time_t>(s.accepted_unix_ms / 1000);
  std::tm tm{};
  ::gmtime_r(&secs, &tm);
  std::cout << "job " << s.job_id << "\n"
            << "  handler   " << s.handler << "\n"
            << "  state     " << to_string(s.state) << "\n"
            << "  lane      " << to_string(s.lane) << "\n"
            << "  accepted  " << std::put_time(&tm, "%Y-%m-%dT%H:%M:%S") << "." << std::setfill('0')
            << std::setw(3) << s.accepted_unix_ms % 1000 << std::setfill(' ') << "Z\n"
            << "  waited    " << ms(s.wait) << "\n"
            << "  ran       " << ms(s.run) << "\n";
  if (s.progress > 0 || !s.progress_message.empty()) {
    std::cout << "  progress  " << std::fixed << std::setprecision(0) << s.progress * 100 << "%"
              << (s.progress_message.empty() ? "" : " " + s.progress_message) << "\n";
  }
  for (const auto& [k, v] : s.labels) std::cout << "  label     " << k << "=" << v << "\n";
  if (s.attempts > 1 || !s.attempt_messages.empty()) {
    std::cout << "  attempts  " << s.attempts << "\n";
    for (const auto& m : s.attempt_messages) std::cout << "  attempt   " << m << "\n";
  }
  if (!s.message.empty()) std::cout << "  message   " << s.message << "\n";
  return kOk;
}

int cmd_jobs(const Args& a) {
  tpool::client::ListJobsRequest req;
  if (a.has("--state")) {
    for (const auto& v : a.options.at("--state")) {
      // Comma-separated too: --state failed,timed_out.
      std::size_t start = 0;
      while (start <= v.size()) {
        const std::size_t comma = std::min(v.find(',', start), v.size());
        std::string name = v.substr(start, comma - start);
        for (auto& ch : name) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
        bool found = false;
        for (int s = 1; s <= 7; ++s) {
          const auto st = static_cast<JobState>(s);
          if (name == to_string(st)) {
            req.states.push_back(st);
            found = true;
          }
        }
        if (!found) {
          return fail(a, kUsage,
                      "--state '" + v +
                          "' is not a job state; use queued, running, scheduled, succeeded, "
                          "failed, cancelled or timed_out (comma-separated or repeated)");
        }
        start = comma + 1;
      }
    }
  }
  if (auto h = a.value("--handler")) req.handler = *h;
  if (auto l = a.value("--label")) {
    const auto eq = l->find('=');
    req.label_key = l->substr(0, eq);
    if (eq != std::string::npos) req.label_value = l->substr(eq + 1);
    if (req.label_key.empty()) return fail(a, kUsage, "--label '" + *l + "' names no label");
  }
  if (auto n = a.value("--limit")) {
    auto v = parse_uint(*n);
    if (!v || *v == 0 || *v > 1000) {
      return fail(a, kUsage, "--limit '" + *n + "' is not a number from 1 to 1000");
    }
    req.page_size = static_cast<std::uint32_t>(*v);
  }
  if (auto t = a.value("--page-token")) req.page_token = *t;
  Client c(a.client);
  auto r = c.list_jobs(req);
  if (!r.ok()) return fail(a, r.error());
  if (a.json) {
    std::cout << "{\"jobs\":[";
    bool first = true;
    for (const auto& s : r->jobs) {
      std::cout << (first ? "" : ",") << "{\"job_id\":" << s.job_id
                << ",\"handler\":" << json_string(s.handler)
                << ",\"state\":" << json_string(to_string(s.state))
                << ",\"attempts\":" << s.attempts << ",\"accepted_unix_ms\":" << s.accepted_unix_ms
                << ",\"message\":" << json_string(s.message) << "}";
      first = false;
    }
    std::cout << "],\"next_page_token\":" << json_string(r->next_page_token) << "}\n";
    return kOk;
  }
  std::cout << std::left << std::setw(22) << "JOB_ID" << std::setw(11) << "STATE" << std::setw(16)
            << "HANDLER" << std::setw(9) << "ATTEMPTS"
            << "MESSAGE\n";
  for (const auto& s : r->jobs) {
    std::cout << std::left << std::setw(22) << s.job_id << std::setw(11) << to_string(s.state)
              << std::setw(16) << s.handler << std::setw(9) << s.attempts << s.message << "\n";
  }
  if (!r->next_page_token.empty()) {
    std::cout << "(more: tpoolctl jobs ... --page-token " << r->next_page_token << ")\n";
  }
  return kOk;
}

int cmd_retry(const Args& a) {
  int exit = kOk;
  auto id = job_id_arg(a, &exit);
  if (!id) return exit;
  Client c(a.client);
  auto r = c.retry(id->job_id);
  if (!r.ok()) return fail(a, r.error());
  if (a.json) {
    std::cout << "{\"job_id\":" << r->job_id << ",\"replica\":" << json_string(r->replica)
              << ",\"retry_of\":" << id->job_id << "}\n";
  } else {
    std::cout << r->job_id << "\n";
  }
  return kOk;
}

int cmd_cancel(const Args& a) {
  int exit = kOk;
  auto id = job_id_arg(a, &exit);
  if (!id) return exit;
  Client c(a.client);
  auto r = c.cancel(*id);
  if (!r.ok()) return fail(a, r.error());
  if (a.json) {
    std::cout << "{\"job_id\":" << id->job_id << ",\"state\":" << json_string(to_string(*r))
              << "}\n";
  } else {
    std::cout << "job " << id->job_id << " " << to_string(*r) << "\n";
  }
  return kOk;
}

int cmd_handlers(const Args& a) {
  Client c(a.client);
  auto r = c.handlers();
  if (!r.ok()) return fail(a, r.error());
  if (a.json) {
    std::cout << "{\"handlers\":" << handlers_json(*r) << "}\n";
  } else {
    print_handlers_text(*r);
  }
  return kOk;
}

int cmd_stats(const Args& a) {
  Client c(admin_options(a));
  auto r = c.stats();
  if (!r.ok()) return fail(a, r.error());
  const auto& s = *r;
  if (a.json) {
    std::string out;
    google::protobuf::util::JsonPrintOptions o;
    o.preserve_proto_field_names = true;
    o.always_print_primitive_fields = true;
    (void)google::protobuf::util::MessageToJsonString(s, &out, o);
    std::cout << out << "\n";
    return kOk;
  }
  const auto& d = s.daemon();
  const auto& p = s.pool();
  std::cout << "tpoold " << d.version() << " at " << a.admin_address << ": " << d.state() << ", up "
            << d.uptime_ms() / 1000 << " s, " << d.plugin_reloads() << " plugin reloads\n"
            << "jobs      in flight " << d.jobs_in_flight() << ", streams " << d.streams_active()
            << ", retained results " << d.result_store_entries() << " (" << d.result_store_bytes()
            << " bytes)\n"
            << "rejected  invalid " << d.rejected_invalid() << ", not found "
            << d.rejected_not_found() << ", full " << d.rejected_full() << ", draining "
            << d.rejected_draining() << "\n"
            << "pool      " << p.workers() << " workers (" << p.busy_workers() << " busy, "
            << p.parked_workers() << " parked), submitted " << p.submitted() << ", completed "
            << p.completed() << ", failed " << p.failed() << ", cancelled " << p.cancelled() << "\n"
            << "          inject depth " << p.inject_depth() << ", descriptors "
            << p.live_descriptors() << "/" << p.descriptor_capacity() << ", steals "
            << p.steal_ops() << " (" << p.steal_tasks() << " tasks), parks " << p.parks()
            << ", stalls " << p.stalls_detected() << "\n";
  for (const auto& l : p.lanes()) {
    std::cout << "lane      " << to_string(static_cast<tpool::client::Lane>(l.lane()))
              << ": completed " << l.completed() << ", workers " << l.workers() << ", wait p50/p99 "
              << l.wait().p50_us() << "/" << l.wait().p99_us() << " us, run p50/p99 "
              << l.run().p50_us() << "/" << l.run().p99_us() << " us\n";
  }
  if (d.handlers_size() > 0) {
    std::cout << std::left << std::setw(14) << "HANDLER" << std::right << std::setw(11)
              << "SUBMITTED" << std::setw(11) << "SUCCEEDED" << std::setw(9) << "FAILED"
              << std::setw(11) << "CANCELLED" << std::setw(11) << "TIMED_OUT"
              << "\n";
    for (const auto& h : d.handlers()) {
      std::cout << std::left << std::setw(14) << h.handler() << std::right << std::setw(11)
                << h.submitted() << std::setw(11) << h.succeeded() << std::setw(9) << h.failed()
                << std::setw(11) << h.cancelled() << std::setw(11) << h.timed_out() << "\n";
    }
  }
  return kOk;
}

int cmd_health(const Args& a) {
  Client c(a.client);
  auto r = c.health();
  if (!r.ok()) return fail(a, r.error());
  if (a.json) {
    std::cout << "{\"status\":" << json_string(to_string(*r)) << "}\n";
  } else {
    std::cout << to_string(*r) << "\n";
  }
  return *r == tpool::client::Health::kServing ? kOk : kNegative;
}

int cmd_drain(const Args& a) {
  std::chrono::milliseconds timeout{0};
  if (auto t = a.value("--timeout")) {
    auto d = parse_duration(*t);
    if (!d) return fail(a, kUsage, "--timeout '" + *t + "' is not a duration; use e.g. 30s");
    timeout = *d;
  }
  // The reply comes when the drain ends: wait longer than any drain timeout
  // unless told otherwise.
  tpool::client::CallOptions call;
  if (!a.deadline_given) {
    call.deadline = timeout.count() > 0 ? timeout + std::chrono::seconds(30)
                                        : std::chrono::milliseconds(5 * 60'000);
  }
  Client c(admin_options(a));
  auto r = c.drain(timeout, call);
  if (!r.ok()) return fail(a, r.error());
  if (a.json) {
    std::cout << "{\"drained\":" << (r->drained ? "true" : "false")
              << ",\"finished\":" << r->finished << ",\"cancelled\":" << r->cancelled << "}\n";
  } else {
    std::cout << (r->drained ? "drained" : "drain timed out") << ": " << r->finished
              << " jobs finished, " << r->cancelled << " cancelled\n";
  }
  return r->drained ? kOk : kNegative;
}

int cmd_reload(const Args& a) {
  Client c(admin_options(a));
  auto r = c.reload();
  if (!r.ok()) return fail(a, r.error());
  if (a.json) {
    std::cout << "{\"message\":" << json_string(r->message)
              << ",\"handlers\":" << handlers_json(r->handlers) << "}\n";
  } else {
    std::cout << r->message << "\n";
    print_handlers_text(r->handlers);
  }
  return kOk;
}

int cmd_version(const Args& a) {
  Client c(admin_options(a));
  auto r = c.stats();
  if (a.json) {
    std::cout << "{\"tpoolctl\":" << json_string(TPOOL_VERSION);
    if (r.ok()) std::cout << ",\"tpoold\":" << json_string(r->daemon().version());
    std::cout << "}\n";
  } else {
    std::cout << "tpoolctl " << TPOOL_VERSION << "\n";
    if (r.ok())
      std::cout << "tpoold " << r->daemon().version() << " at " << a.admin_address << "\n";
  }
  return r.ok() ? kOk : fail(a, r.error());
}

}  // namespace tpoolctl
