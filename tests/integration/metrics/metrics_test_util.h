// Helpers for the metrics integration tests: a minimal HTTP/1.0 client on
// loopback, the exposition format parsed into series, a free port, and a
// child process (Prometheus, promtool) that the test always stops.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace tpool::testing {

struct HttpReply {
  int status = 0;  // 0: no connection or no reply
  std::string body;
};

inline std::string base64(const std::string& in) {
  static const char* k = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  std::size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    const unsigned v = (static_cast<unsigned char>(in[i]) << 16) |
                       (static_cast<unsigned char>(in[i + 1]) << 8) |
                       static_cast<unsigned char>(in[i + 2]);
    out += {k[(v >> 18) & 63], k[(v >> 12) & 63], k[(v >> 6) & 63], k[v & 63]};
  }
  if (i + 1 == in.size()) {
    const unsigned v = static_cast<unsigned char>(in[i]) << 16;
    out += {k[(v >> 18) & 63], k[(v >> 12) & 63], '=', '='};
  } else if (i + 2 == in.size()) {
    const unsigned v =
        (static_cast<unsigned char>(in[i]) << 16) | (static_cast<unsigned char>(in[i + 1]) << 8);
    out += {k[(v >> 18) & 63], k[(v >> 12) & 63], k[(v >> 6) & 63], '='};
  }
  return out;
}

// GET http://127.0.0.1:port<target>; `auth` is "user:password" or empty.
inline HttpReply http_get(int port, const std::string& target, const std::string& auth = "") {
  HttpReply r;
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return r;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval tv{10, 0};  // a bound on a stuck server, not a synchronisation
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return r;
  }
  std::string req = "GET " + target + " HTTP/1.0\r\nHost: 127.0.0.1\r\n";
  if (!auth.empty()) req += "Authorization: Basic " + base64(auth) + "\r\n";
  req += "\r\n";
  if (::send(fd, req.data(), req.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(req.size())) {
    ::close(fd);
    return r;
  }
  std::string all;
  char buf[65536];
  for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;)
    all.append(buf, static_cast<size_t>(n));
  ::close(fd);
  if (all.rfind("HTTP/", 0) != 0) return r;
  r.status = std::atoi(all.c_str() + all.find(' ') + 1);
  const auto head_end = all.find("\r\n\r\n");
  if (head_end != std::string::npos) r.body = all.substr(head_end + 4);
  return r;
}

// A connection to 127.0.0.1:port that sends `partial` (possibly nothing) and
// then stays idle: what a stuck or slow client does. The fd (-1 on failure);
// the caller closes it.
inline int idle_connection(int port, const std::string& partial = "") {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      (!partial.empty() && ::send(fd, partial.data(), partial.size(), MSG_NOSIGNAL) !=
                               static_cast<ssize_t>(partial.size()))) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// A port that was free a moment ago (for programs that take no port 0).
inline int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

// The exposition text as "name{labels}" -> value (labels as printed).
inline std::map<std::string, double> parse_exposition(const std::string& text) {
  std::map<std::string, double> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    const auto sp = line.rfind(' ');
    if (sp == std::string::npos) continue;
    out[line.substr(0, sp)] = std::strtod(line.c_str() + sp + 1, nullptr);
  }
  return out;
}

// The families (# TYPE lines): name -> type.
inline std::map<std::string, std::string> exposition_types(const std::string& text) {
  std::map<std::string, std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("# TYPE ", 0) != 0) continue;
    std::istringstream l(line.substr(7));
    std::string name, type;
    l >> name >> type;
    out[name] = type;
  }
  return out;
}

// Polls cond with a bounded deadline (waiting on another process).
template <class Cond>
bool eventually(Cond cond, std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (cond()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return cond();
}

// A child process with stdout+stderr in a file; SIGTERM, then SIGKILL, on
// destruction, and killed with the test process if that dies first.
class Child {
 public:
  Child(std::vector<std::string> args, const std::string& log_file,
        const std::string& stdin_file = "")
      : log_file_(log_file) {
    pid_ = ::fork();
    if (pid_ == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      int fd = ::open(log_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd >= 0) {
        ::dup2(fd, 1);
        ::dup2(fd, 2);
      }
      if (!stdin_file.empty()) {
        int in = ::open(stdin_file.c_str(), O_RDONLY);
        if (in >= 0) ::dup2(in, 0);
      }
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execvp(argv[0], argv.data());
      ::_exit(127);
    }
  }
  ~Child() { stop(); }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  // Waits (bounded) for the exit; the exit code.
  std::optional<int> wait(std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!exited()) {
      if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return code_;
  }
  std::optional<int> stop() {
    if (pid_ <= 0 || exited()) return code_;
    ::kill(pid_, SIGTERM);
    if (auto c = wait(std::chrono::seconds(20))) return c;
    ::kill(pid_, SIGKILL);
    return wait(std::chrono::seconds(20));
  }
  bool running() { return pid_ > 0 && !exited(); }
  std::string log() const {
    std::ifstream in(log_file_);
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
  }

 private:
  bool exited() {
    if (code_) return true;
    int st = 0;
    if (::waitpid(pid_, &st, WNOHANG) == pid_) {
      code_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      return true;
    }
    return false;
  }
  std::string log_file_;
  pid_t pid_ = -1;
  std::optional<int> code_;
};

// A temporary directory removed with the test.
struct TempDir {
  TempDir() {
    path = std::filesystem::temp_directory_path() /
           ("tpoold-metrics-" + std::to_string(::getpid()) + "-" + std::to_string(n()++));
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string file(const std::string& name) const { return (path / name).string(); }
  static int& n() {
    static int i = 0;
    return i;
  }
  std::filesystem::path path;
};

inline std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Reads a port number from a file another process writes (bounded).
inline int wait_port_file(const std::string& path) {
  int port = 0;
  eventually(
      [&] {
        std::ifstream p(path);
        return static_cast<bool>(p >> port) && port > 0;
      },
      std::chrono::seconds(30));
  return port;
}

}  // namespace tpool::testing
