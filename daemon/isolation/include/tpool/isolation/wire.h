// The channel between tpoold and a tpool-runner: framed binary messages over
// one end each of a SOCK_STREAM socketpair (docs/plugins.md, "Isolation").
// Standard C++ and POSIX only: the runner includes this header and nothing
// else of the daemon.
//
// Frame: a 16-byte header {u32 body_size, u8 type, u8 0, u8 0, u8 0,
// u64 job} followed by body_size bytes, little-endian (both ends are the same
// build on the same machine; the header's version check is the runner's
// --protocol argument). body_size is at most kMaxBody.
//
// The protocol, in the order a runner sees it:
//   daemon -> runner  kInit      {config}                  once, first
//   runner -> daemon  kReady     {notes}                   init OK, confined, serving
//                  or kInitFailed{status, message}         and the runner exits
//   daemon -> runner  kJob       job {handler, attempt, remaining_ns (-1: none),
//                                     cancelled, input}   1..n per call (W1)
//   runner -> daemon  kLog       job {level, message}      0..n, while the job runs
//                     kProgress  job {fraction, note}      0..n
//                     kChildren  job {handler, n, inputs}  0..n; each waits for
//   daemon -> runner  kChildrenResult job {n x {status, message, output}}
//                     kCancel    job {}                    at most once per job
//   runner -> daemon  kResult    job {status, overflow, attempted, unknown_handler,
//                                     message, output, run_ns (the handler call's time;
//                                     -1: not called, W6)}
//                  or kFault     job {kind, value}         the runner dies next
//
// Ownership of a job (the invariants the supervisor and the runner keep):
//  (W1) A runner holds the jobs of at most one call: the daemon sends kJob
//       frames only to a runner it has checked out as idle (one call of
//       IsolatedPlugin::invoke_batch: one job, or a batch of one handler's
//       jobs in one write), and checks it in only after reading the last of
//       their kResults. The runner queues them and runs them one at a time in
//       the order they came, and its results come back in that order; a
//       job's result is on the socket before the process can die of a fault
//       in a later job (written at once, or pending and written first on
//       every path to the process's end: a fatal signal, std::bad_alloc, the
//       CPU limit). So the daemon's front job (the first without a result)
//       is the one running, a runner's death ends exactly that job, and the
//       jobs behind it never started: they go to the next runner.
//  (W2) The daemon never forgets a job a runner holds: the pool worker that
//       sent the kJobs stays in the call, reading this runner's frames, until
//       it has read every kResult or sees the runner gone (EOF, then
//       waitpid). Each job's outcome is then its result, a failure naming the
//       runner's fault (signal, limit, denied system call) for the front job,
//       or a new runner for the ones behind it; never silence.
//  (W3) The runner never holds a job the daemon forgot: the daemon stops
//       waiting for a job only by killing the runner that holds it (the hard
//       time limit: the front job deadline-expired or cancelled, told by
//       kCancel, and still without a result cancel_grace_ms later; the runner
//       writes its pending results when a kCancel comes, so the front is the
//       job that is really running), and reaps it before it checks the slot
//       in again, so no result can arrive for a job nobody waits for, and a
//       restarted runner starts empty.
//  (W4) Frames of one job are in order on the one stream. kLog and kProgress
//       need no reply, and neither does a kResult with more jobs queued behind
//       it, so the runner batches them: one goes out at once, the ones that
//       follow within 20 ms wait and leave together with the next frame that
//       does not wait (kChildren, the last queued job's kResult), on the
//       runner's 20 ms tick, when a kCancel comes, or once kFlushBytes are
//       pending; several frames per write.
//  (W6) A job whose kCancel came while it waited in the runner's queue
//       behind its batch-mates (the daemon sends kCancel for a cancel and for
//       a deadline) is not given to its handler when its turn comes: its
//       kResult says so with run_ns -1, and the daemon ends it as a job that
//       never started (the engine's E5 sentence). A job the handler already
//       has, or one that came with its cancelled flag set (sent to a new
//       runner after a fault), is only told (is_cancelled), as in process.
//  (W5) kFault is written from the runner's fault path (a signal handler with
//       one write(2) of a frame prepared on its stack), so it may be missing
//       (the write failed or the fault was elsewhere): the daemon then words
//       the failure from the wait status alone.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

namespace tpool::isolation::wire {

inline constexpr std::uint32_t kProtocol = 1;  // the runner refuses another version
inline constexpr std::size_t kHeaderSize = 16;
// 80 MiB: the daemon's max_output_bytes (64 MiB default) plus room for a
// message and a batch of child inputs; picked by hand.
inline constexpr std::uint32_t kMaxBody = 80u << 20;
// Pending kLog/kProgress bytes after which the runner writes without waiting
// for the next blocking frame; picked by hand.
inline constexpr std::size_t kFlushBytes = 64u << 10;

enum class Type : std::uint8_t {
  kInit = 1,
  kReady = 2,
  kInitFailed = 3,
  kJob = 4,
  kLog = 5,
  kProgress = 6,
  kChildren = 7,
  kChildrenResult = 8,
  kCancel = 9,
  kResult = 10,
  kFault = 11,
};

// Why a runner is about to die (kFault's kind).
enum class Fault : std::uint8_t {
  kSignal = 1,         // value: the signal number (SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL)
  kSignalNearAs = 2,   // value: the signal; the address space was within 10% of RLIMIT_AS
  kOutOfMemory = 3,    // value: 0; std::bad_alloc in the handler or the runner
  kCpuLimit = 4,       // value: the job's CPU milliseconds when it was stopped
  kDeniedSyscall = 5,  // value: the system call number the seccomp filter trapped
};

struct Header {
  std::uint32_t body_size = 0;
  Type type = Type::kInit;
  std::uint64_t job = 0;
};

inline void put_header(char* out, const Header& h) {
  std::memcpy(out, &h.body_size, 4);
  out[4] = static_cast<char>(h.type);
  out[5] = out[6] = out[7] = 0;
  std::memcpy(out + 8, &h.job, 8);
}

inline Header get_header(const char* in) {
  Header h;
  std::memcpy(&h.body_size, in, 4);
  h.type = static_cast<Type>(static_cast<std::uint8_t>(in[4]));
  std::memcpy(&h.job, in + 8, 8);
  return h;
}

// Appends one frame to out: the header, then the body the caller writes with
// the put_* helpers; finish() fills in the size.
class FrameWriter {
 public:
  FrameWriter(std::string& out, Type type, std::uint64_t job) : out_(out), start_(out.size()) {
    out_.resize(start_ + kHeaderSize);
    header_.type = type;
    header_.job = job;
  }
  FrameWriter& u32(std::uint32_t v) { return raw(&v, 4); }
  FrameWriter& i32(std::int32_t v) { return raw(&v, 4); }
  FrameWriter& u64(std::uint64_t v) { return raw(&v, 8); }
  FrameWriter& i64(std::int64_t v) { return raw(&v, 8); }
  FrameWriter& f64(double v) { return raw(&v, 8); }
  FrameWriter& bytes(std::string_view b) {
    u64(b.size());
    out_.append(b.data(), b.size());
    return *this;
  }
  void finish() {
    header_.body_size = static_cast<std::uint32_t>(out_.size() - start_ - kHeaderSize);
    put_header(out_.data() + start_, header_);
  }

 private:
  FrameWriter& raw(const void* p, std::size_t n) {
    out_.append(static_cast<const char*>(p), n);
    return *this;
  }
  std::string& out_;
  std::size_t start_;
  Header header_;
};

// Reads a body written by FrameWriter; every getter fails (ok() false) rather
// than read past the end, so a truncated or hostile body is an error, not UB.
class BodyReader {
 public:
  explicit BodyReader(std::string_view body) : b_(body) {}
  bool ok() const { return ok_; }
  bool done() const { return ok_ && pos_ == b_.size(); }
  std::uint32_t u32() { return pod<std::uint32_t>(); }
  std::int32_t i32() { return pod<std::int32_t>(); }
  std::uint64_t u64() { return pod<std::uint64_t>(); }
  std::int64_t i64() { return pod<std::int64_t>(); }
  double f64() { return pod<double>(); }
  std::string_view bytes() {
    std::uint64_t n = u64();
    if (!ok_ || n > b_.size() - pos_) {
      ok_ = false;
      return {};
    }
    std::string_view v = b_.substr(pos_, n);
    pos_ += n;
    return v;
  }

 private:
  template <class T>
  T pod() {
    T v{};
    if (!ok_ || b_.size() - pos_ < sizeof(T)) {
      ok_ = false;
      return v;
    }
    std::memcpy(&v, b_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string_view b_;
  std::size_t pos_ = 0;
  bool ok_ = true;
};

// Incremental frame parsing over a byte stream: feed what read(2) returned,
// then take whole frames. A body over kMaxBody is a protocol error.
class FrameBuffer {
 public:
  char* space(std::size_t n) {
    compact();
    buf_.resize(end_ + n);
    return buf_.data() + end_;
  }
  void commit(std::size_t n) { end_ += n; }
  // A whole frame if one is buffered: header and a view of its body, valid
  // until the next space()/next() call.
  struct Frame {
    Header header;
    std::string_view body;
  };
  std::optional<Frame> next(bool& bad) {
    if (end_ - begin_ < kHeaderSize) return std::nullopt;
    Header h = get_header(buf_.data() + begin_);
    if (h.body_size > kMaxBody) {
      bad = true;
      return std::nullopt;
    }
    if (end_ - begin_ < kHeaderSize + h.body_size) return std::nullopt;
    Frame f{h, std::string_view(buf_.data() + begin_ + kHeaderSize, h.body_size)};
    begin_ += kHeaderSize + h.body_size;
    return f;
  }

 private:
  void compact() {
    if (begin_ == 0) return;
    buf_.erase(0, begin_);
    end_ -= begin_;
    begin_ = 0;
    buf_.resize(end_);
  }
  std::string buf_;
  std::size_t begin_ = 0, end_ = 0;
};

}  // namespace tpool::isolation::wire
