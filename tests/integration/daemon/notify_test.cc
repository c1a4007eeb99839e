// systemd notification: tpoold started with NOTIFY_SOCKET (a datagram socket
// of this test) and WATCHDOG_USEC sends READY=1, WATCHDOG=1 pings,
// RELOADING=1 then READY=1 on SIGHUP, and STOPPING=1 on SIGTERM.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "daemon_process.h"

namespace tpool::testing {
namespace {

class NotifySocket {
 public:
  NotifySocket() {
    path_ = std::filesystem::temp_directory_path() / ("tpoold-notify-" + std::to_string(getpid()));
    ::unlink(path_.c_str());
    fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path_.c_str());
    bound_ = ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  }
  ~NotifySocket() {
    ::close(fd_);
    ::unlink(path_.c_str());
  }
  bool bound() const { return bound_; }
  const std::string& path() const { return path_; }
  // Reads datagrams until one contains `what` (bounded wait); true if seen.
  bool expect(const std::string& what,
              std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      char buf[4096];
      ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) continue;
      std::string msg(buf, static_cast<std::size_t>(n));
      seen_ += msg + "\n";
      if (msg.find(what) != std::string::npos) return true;
    }
    return false;
  }
  const std::string& seen() const { return seen_; }

 private:
  std::string path_;
  int fd_ = -1;
  bool bound_ = false;
  std::string seen_;
};

TEST(Notify, ReadyWatchdogReloadingStopping) {
  NotifySocket sock;
  ASSERT_TRUE(sock.bound());
  DaemonProcess d("[metrics]\nenabled = false\n", {},
                  {"NOTIFY_SOCKET=" + sock.path(), "WATCHDOG_USEC=200000"});
  ASSERT_TRUE(d.started()) << d.log();
  EXPECT_TRUE(sock.expect("READY=1")) << sock.seen();
  EXPECT_TRUE(sock.expect("WATCHDOG=1")) << sock.seen();  // every 100 ms while live
  d.signal(SIGHUP);
  EXPECT_TRUE(sock.expect("RELOADING=1")) << sock.seen();
  EXPECT_TRUE(sock.expect("READY=1")) << sock.seen();
  d.signal(SIGTERM);
  EXPECT_TRUE(sock.expect("STOPPING=1")) << sock.seen();
  EXPECT_EQ(d.wait_exit(std::chrono::seconds(20)), std::optional<int>(0)) << d.log();
}

}  // namespace
}  // namespace tpool::testing
