// The beanstalkd side of bench/peers (run by bench/peers/run.sh, not a test):
// the durable peer of issue 17's rows, beanstalkd with its binlog on and an
// fsync after every write (`beanstalkd -b DIR -f 0`).
//
//   peer_beanstalk client PORT N C BYTES   N jobs of BYTES bytes, C per window
//
// Standard C++ and POSIX sockets only: beanstalkd's text protocol
// (protocol.txt in its source) on two connections to 127.0.0.1:PORT, a
// producer (`use`, `put`) and a worker (`watch`, `reserve-with-timeout`,
// `delete`), both on the tube "tpool-bench". Each job is put, reserved and
// deleted, so the binlog gets two records per job (the put and the delete),
// each fsynced with -f 0.
//   C = 1   one at a time: put, wait for INSERTED; reserve, wait for RESERVED;
//           delete, wait for DELETED; then the next job.
//   C > 1   pipelined windows of C: C puts written at once, then the C
//           INSERTED read; C reserves written, the C RESERVED read; C deletes
//           written, the C DELETED read; then the next window.
// It prints one JSON line shaped like `tpoolctl bench --json` (and
// peer_gearman), so the report reads all three the same way. Latency: from
// the job's put (its window's puts, pipelined) being written to its DELETED
// being read. It checks that every job was inserted, reserved (with the body
// it was put with) and deleted, and that the tube is empty afterwards
// (`stats-tube`); "put", "reserved" and "deleted" in the JSON count them.
// "binlog_records_written" is the server's `stats` counter over the run: the
// binlog records written (0 without -b); with -f 0 each was one fsync.
//
// An answer other than the expected one (OUT_OF_MEMORY, DRAINING,
// BAD_FORMAT, EXPECTED_CRLF, JOB_TOO_BIG, INTERNAL_ERROR, UNKNOWN_COMMAND,
// BURIED, NOT_FOUND, TIMED_OUT, ...) or a closed connection ends the run at
// once: a sentence on stderr, no JSON, exit 1. Exit 2: usage.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

constexpr const char* kTube = "tpool-bench";
// reserve-with-timeout, so that a job that never becomes ready ends the run
// (TIMED_OUT) instead of hanging it; every job is ready when it is reserved.
constexpr int kReserveTimeoutS = 10;

[[noreturn]] void die(const std::string& sentence) {
  std::fprintf(stderr, "peer_beanstalk: %s\n", sentence.c_str());
  std::exit(1);
}

// What an unexpected answer means, as a sentence (protocol.txt's errors).
std::string explain(std::string_view command, std::string_view answer, std::size_t bytes) {
  std::string c(command), a(answer);
  std::string head = "beanstalkd answered '" + a + "' to " + c + ": ";
  if (a == "OUT_OF_MEMORY") {
    return head + "it could not allocate the job; give it more memory or run fewer jobs";
  }
  if (a == "DRAINING") {
    return head + "it is draining (it got SIGUSR1) and accepts no new jobs; restart it";
  }
  if (a == "BAD_FORMAT") {
    return head + "it could not parse the command line; this is a bug in peer_beanstalk";
  }
  if (a == "EXPECTED_CRLF") {
    return head + "the job body did not end in \\r\\n; this is a bug in peer_beanstalk";
  }
  if (a == "JOB_TOO_BIG") {
    return head + "a body of " + std::to_string(bytes) +
           " bytes is more than its max-job-size; use a smaller payload or start it with a "
           "larger -z";
  }
  if (a == "INTERNAL_ERROR") return head + "a bug in beanstalkd; see its stderr";
  if (a == "UNKNOWN_COMMAND") {
    return head + "it does not know the command; is the server on this port beanstalkd 1.x?";
  }
  if (a.rfind("BURIED", 0) == 0) {
    return head + "it buried the job because it could not grow its priority queue (out of memory)";
  }
  if (a == "NOT_FOUND") {
    return head +
           "the job is not there or not reserved by this worker; another client uses "
           "the tube '" +
           kTube + "'?";
  }
  if (a == "TIMED_OUT") {
    return head + "no job became ready within " + std::to_string(kReserveTimeoutS) +
           " s, though every job put was inserted; is another worker reserving from the tube '" +
           kTube + "'?";
  }
  if (a == "DEADLINE_SOON") {
    return head + "a reserved job's time-to-run is about to pass; the worker held it too long";
  }
  return head + "an answer the protocol does not give here";
}

class Conn {
 public:
  Conn(in_port_t port, const char* role) : role_(role) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd_ < 0) die(std::string("cannot create a socket: ") + std::strerror(errno));
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
      die("cannot connect the " + role_ + " to beanstalkd on 127.0.0.1:" + std::to_string(port) +
          ": " + std::strerror(errno) + "; is it running there?");
    }
    int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  Conn(const Conn&) = delete;
  Conn& operator=(const Conn&) = delete;
  ~Conn() { ::close(fd_); }

  void write_all(std::string_view s) {
    while (!s.empty()) {
      ssize_t w = ::send(fd_, s.data(), s.size(), MSG_NOSIGNAL);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) die("writing to beanstalkd (" + role_ + "): " + std::strerror(errno));
      s.remove_prefix(static_cast<std::size_t>(w));
    }
  }

  // One answer line, without its \r\n.
  std::string line() {
    for (;;) {
      auto pos = buf_.find("\r\n", off_);
      if (pos != std::string::npos) {
        std::string l = buf_.substr(off_, pos - off_);
        off_ = pos + 2;
        return l;
      }
      fill();
    }
  }

  // A job body of n bytes and its \r\n.
  std::string body(std::size_t n) {
    while (buf_.size() - off_ < n + 2) fill();
    std::string b = buf_.substr(off_, n);
    if (buf_.compare(off_ + n, 2, "\r\n") != 0) {
      die("beanstalkd (" + role_ + ") sent a job body not followed by \\r\\n");
    }
    off_ += n + 2;
    return b;
  }

 private:
  void fill() {
    if (off_ > 0 && off_ == buf_.size()) {
      buf_.clear();
      off_ = 0;
    } else if (off_ > (1u << 16)) {
      buf_.erase(0, off_);
      off_ = 0;
    }
    char tmp[1 << 16];
    ssize_t r;
    do {
      r = ::recv(fd_, tmp, sizeof tmp, 0);
    } while (r < 0 && errno == EINTR);
    if (r == 0) die("beanstalkd closed the " + role_ + "'s connection; see its stderr");
    if (r < 0) die("reading from beanstalkd (" + role_ + "): " + std::strerror(errno));
    buf_.append(tmp, static_cast<std::size_t>(r));
  }

  int fd_ = -1;
  std::string role_;
  std::string buf_;
  std::size_t off_ = 0;
};

// The line must start with `want`; else the run ends with what it means.
std::string expect(Conn& c, std::string_view command, std::string_view want, std::size_t bytes) {
  std::string l = c.line();
  if (l.rfind(want, 0) != 0) die(explain(command, l, bytes));
  return l;
}

std::uint64_t number_after(const std::string& line, std::size_t word) {
  // "INSERTED <id>", "RESERVED <id> <bytes>": the word-th space-separated field.
  std::size_t pos = 0;
  for (std::size_t i = 0; i < word; ++i) {
    pos = line.find(' ', pos);
    if (pos == std::string::npos) die("beanstalkd sent a malformed answer '" + line + "'");
    ++pos;
  }
  return std::strtoull(line.c_str() + pos, nullptr, 10);
}

// A field of stats-tube's YAML ("current-jobs-ready: 0").
std::uint64_t yaml_field(const std::string& yaml, const std::string& key) {
  auto pos = yaml.find("\n" + key + ": ");
  if (pos == std::string::npos) die("stats-tube has no '" + key + "' field");
  return std::strtoull(yaml.c_str() + pos + key.size() + 3, nullptr, 10);
}

std::string stats_tube(Conn& c) {
  c.write_all(std::string("stats-tube ") + kTube + "\r\n");
  std::string l = expect(c, "stats-tube", "OK ", 0);
  return c.body(number_after(l, 1));
}

// The server's binlog records so far (with -f 0, one fsync each).
std::uint64_t binlog_records(Conn& c) {
  c.write_all("stats\r\n");
  std::string l = expect(c, "stats", "OK ", 0);
  return yaml_field(c.body(number_after(l, 1)), "binlog-records-written");
}

std::uint64_t quantile(const std::vector<std::uint64_t>& v, double q) {
  if (v.empty()) return 0;
  auto idx = static_cast<std::size_t>(std::ceil(q * static_cast<double>(v.size()))) - 1;
  return v[std::min(idx, v.size() - 1)];
}

std::uint64_t micros(Clock::duration d) {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(d).count());
}

int client(in_port_t port, std::uint64_t n, std::uint64_t c, std::size_t bytes) {
  Conn producer(port, "producer");
  Conn worker(port, "worker");
  const std::string payload(bytes, 'x');
  // priority 1024, no delay, time-to-run 60 s.
  const std::string put = "put 1024 0 60 " + std::to_string(bytes) + "\r\n" + payload + "\r\n";
  const std::string reserve = "reserve-with-timeout " + std::to_string(kReserveTimeoutS) + "\r\n";

  producer.write_all(std::string("use ") + kTube + "\r\n");
  expect(producer, "use", std::string("USING ") + kTube, bytes);
  worker.write_all(std::string("watch ") + kTube + "\r\nignore default\r\n");
  expect(worker, "watch", "WATCHING ", bytes);
  expect(worker, "ignore default", "WATCHING 1", bytes);
  // A tube left with jobs by an earlier run would make the counts below lie.
  std::string before = stats_tube(producer);
  if (yaml_field(before, "current-jobs-ready") + yaml_field(before, "current-jobs-reserved") +
          yaml_field(before, "current-jobs-delayed") + yaml_field(before, "current-jobs-buried") !=
      0) {
    die(std::string("the tube '") + kTube +
        "' already holds jobs (from an earlier run?); start beanstalkd with an empty binlog "
        "directory");
  }
  const std::uint64_t total_before = yaml_field(before, "total-jobs");
  const std::uint64_t records_before = binlog_records(producer);

  std::uint64_t put_n = 0, reserved_n = 0, deleted_n = 0;
  std::vector<std::uint64_t> latency_us;
  latency_us.reserve(n);
  std::unordered_set<std::uint64_t> ids;
  std::vector<std::uint64_t> window_ids;
  std::string out;
  const auto t0 = Clock::now();
  for (std::uint64_t first = 0; first < n;) {
    const std::uint64_t w = std::min(c, n - first);
    const auto start = Clock::now();
    // Puts.
    out.clear();
    for (std::uint64_t i = 0; i < w; ++i) out += put;
    producer.write_all(out);
    ids.clear();
    for (std::uint64_t i = 0; i < w; ++i) {
      ids.insert(number_after(expect(producer, "put", "INSERTED ", bytes), 1));
      ++put_n;
    }
    // Reserves: each must be one of this window's jobs, with its body.
    out.clear();
    for (std::uint64_t i = 0; i < w; ++i) out += reserve;
    worker.write_all(out);
    window_ids.clear();
    for (std::uint64_t i = 0; i < w; ++i) {
      std::string l = expect(worker, "reserve", "RESERVED ", bytes);
      std::uint64_t id = number_after(l, 1);
      std::string b = worker.body(number_after(l, 2));
      if (ids.erase(id) != 1 || b != payload) {
        die("reserved job " + std::to_string(id) +
            " is not one this run put, or its body differs; another client uses the tube '" +
            kTube + "'?");
      }
      window_ids.push_back(id);
      ++reserved_n;
    }
    // Deletes.
    out.clear();
    for (std::uint64_t id : window_ids) out += "delete " + std::to_string(id) + "\r\n";
    worker.write_all(out);
    for (std::uint64_t i = 0; i < w; ++i) {
      expect(worker, "delete", "DELETED", bytes);
      latency_us.push_back(micros(Clock::now() - start));
      ++deleted_n;
    }
    first += w;
  }
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();

  const std::uint64_t records = binlog_records(producer) - records_before;
  std::string after = stats_tube(producer);
  const std::uint64_t left =
      yaml_field(after, "current-jobs-ready") + yaml_field(after, "current-jobs-reserved") +
      yaml_field(after, "current-jobs-delayed") + yaml_field(after, "current-jobs-buried");
  const std::uint64_t created = yaml_field(after, "total-jobs") - total_before;
  if (put_n != n || reserved_n != n || deleted_n != n || created != n || left != 0) {
    die("counts disagree: " + std::to_string(n) + " jobs, " + std::to_string(put_n) + " put, " +
        std::to_string(reserved_n) + " reserved, " + std::to_string(deleted_n) +
        " deleted; beanstalkd counts " + std::to_string(created) + " created and " +
        std::to_string(left) + " still in the tube");
  }

  std::sort(latency_us.begin(), latency_us.end());
  std::printf(
      "{\"system\":\"beanstalkd\",\"handler\":\"put-reserve-delete\",\"mode\":\"%s\","
      "\"jobs\":%llu,\"concurrency\":%llu,\"batch\":%llu,\"payload_bytes\":%zu,\"seconds\":%.6f,"
      "\"jobs_per_s\":%.1f,\"succeeded\":%llu,\"put\":%llu,\"reserved\":%llu,\"deleted\":%llu,"
      "\"binlog_records_written\":%llu,\"errors\":{},",
      c == 1 ? "sequential" : "pipelined", static_cast<unsigned long long>(n),
      static_cast<unsigned long long>(c), static_cast<unsigned long long>(c), bytes, secs,
      static_cast<double>(n) / secs, static_cast<unsigned long long>(deleted_n),
      static_cast<unsigned long long>(put_n), static_cast<unsigned long long>(reserved_n),
      static_cast<unsigned long long>(deleted_n), static_cast<unsigned long long>(records));
  std::printf(
      "\"latency_us\":{\"p50\":%llu,\"p90\":%llu,\"p99\":%llu,\"p99_9\":%llu,\"max\":%llu}}\n",
      static_cast<unsigned long long>(quantile(latency_us, 0.5)),
      static_cast<unsigned long long>(quantile(latency_us, 0.9)),
      static_cast<unsigned long long>(quantile(latency_us, 0.99)),
      static_cast<unsigned long long>(quantile(latency_us, 0.999)),
      static_cast<unsigned long long>(latency_us.empty() ? 0 : latency_us.back()));
  return 0;
}

bool parse(const char* s, std::uint64_t* out) {
  char* end = nullptr;
  errno = 0;
  unsigned long long v = std::strtoull(s, &end, 10);
  if (errno != 0 || end == s || *end != '\0' || v == 0) return false;
  *out = v;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  std::uint64_t port = 0, n = 0, c = 0, bytes = 0;
  if (argc == 6 && std::strcmp(argv[1], "client") == 0 && parse(argv[2], &port) && port < 65536 &&
      parse(argv[3], &n) && parse(argv[4], &c) && parse(argv[5], &bytes)) {
    return client(static_cast<in_port_t>(port), n, c, static_cast<std::size_t>(bytes));
  }
  std::fprintf(stderr,
               "usage: peer_beanstalk client PORT N C PAYLOAD_BYTES   (all positive; C = 1: one "
               "job at a time, C > 1: pipelined windows of C)\n");
  return 2;
}
