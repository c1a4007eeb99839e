// Opening one plugin file. Order of checks, each with its own LoadErrorKind:
//   1. open and fstat the file (the same fd is checked and copied, so the file
//      cannot be swapped between the check and the load);
//   2. refuse a world-writable file (the directory was checked by scan_dir);
//   3. refuse anything that is not an ELF shared object, before dlopen, so the
//      author reads "not an ELF shared object" rather than dlerror's guess;
//   4. copy it to a private staging file and dlopen that (RTLD_NOW |
//      RTLD_LOCAL). glibc returns the already-loaded object for a path it has
//      seen, so reloading a replaced file in place would silently keep the old
//      code; a unique staging name gives each load its own copy. The staging
//      file is unlinked right after dlopen (the mapping stays valid);
//   5. the entry symbol, then the descriptor: ABI major, minor, struct sizes,
//      names, handlers.
#include "loader.h"

#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <set>

namespace tpool::plugin_host::detail {
namespace {

// The sizes of the structs as ABI 1.0 defined them: the smallest a plugin may
// declare. Frozen: when fields are appended these stay.
constexpr std::size_t kPluginSizeV1_0 = sizeof(tpool_plugin);
constexpr std::size_t kHandlerSizeV1_0 = sizeof(tpool_handler);
// The four uint32 fields every ABI version starts tpool_plugin with.
constexpr std::size_t kPluginPrefix = 4 * sizeof(std::uint32_t);

std::string errno_text(int err) {
  return std::strerror(err);
}

std::string mode_text(mode_t mode) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "%04o", static_cast<unsigned>(mode & 07777));
  return buf;
}

std::string version_text(std::uint32_t major, std::uint32_t minor) {
  return std::to_string(major) + "." + std::to_string(minor);
}

std::string host_abi() {
  return version_text(TPOOL_PLUGIN_ABI_MAJOR, TPOOL_PLUGIN_ABI_MINOR);
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  if (from.empty()) return s;
  for (std::size_t pos = 0; (pos = s.find(from, pos)) != std::string::npos; pos += to.size())
    s.replace(pos, from.size(), to);
  return s;
}

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

Opened fail(LoadErrorKind kind, const std::string& file, std::string plugin, std::string message) {
  Opened o;
  o.error = LoadError{kind, file, std::move(plugin), std::move(message)};
  return o;
}

// Copies fd (from offset 0) to a new private file in staging_dir; returns its
// path, or "" with err set.
std::string stage_copy(int fd, const std::string& file, const std::string& staging_dir,
                       std::string& err) {
  static std::atomic<std::uint64_t> seq{0};  // relaxed: only uniqueness matters
  std::string base = file.substr(file.find_last_of('/') + 1);
  for (int attempt = 0; attempt < 100; ++attempt) {
    std::string path = staging_dir + "/tpool-plugin." + std::to_string(::getpid()) + "." +
                       std::to_string(seq.fetch_add(1, std::memory_order_relaxed)) + "." + base;
    int out = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0700);
    if (out < 0 && errno == EEXIST) continue;  // a stale copy of an earlier process
    if (out < 0) {
      err = "cannot create a staging copy in " + staging_dir + " (" + errno_text(errno) +
            "): set the plugin host's staging_dir to a writable directory";
      return "";
    }
    Fd out_fd(out);
    char buf[1 << 16];
    off_t off = 0;
    for (;;) {
      ssize_t n = ::pread(fd, buf, sizeof buf, off);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        err = "reading it failed (" + errno_text(errno) + ")";
        ::unlink(path.c_str());
        return "";
      }
      if (n == 0) break;
      off += n;
      for (ssize_t done = 0; done < n;) {
        ssize_t w = ::write(out, buf + done, static_cast<std::size_t>(n - done));
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) {
          err = "writing its staging copy " + path + " failed (" + errno_text(errno) + ")";
          ::unlink(path.c_str());
          return "";
        }
        done += w;
      }
    }
    return path;
  }
  err = "no free staging file name in " + staging_dir + ": remove stale tpool-plugin.* files";
  return "";
}

}  // namespace

bool valid_name(const char* name) {
  if (name == nullptr) return false;
  std::size_t n = std::strlen(name);
  if (n == 0 || n > 64) return false;
  return std::all_of(name, name + n, [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '.' || c == '-';
  });
}

void scan_dir(const std::string& dir, std::vector<std::string>& files,
              std::vector<LoadError>& errors) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) {
    errors.push_back({LoadErrorKind::kDirectory, dir, "",
                      "plugin directory " + dir + " cannot be read (" + errno_text(errno) +
                          "): create it, or remove it from the configured plugin directories"});
    return;
  }
  if (!S_ISDIR(st.st_mode)) {
    errors.push_back({LoadErrorKind::kDirectory, dir, "",
                      "plugin directory " + dir +
                          " is not a directory: configure the directory that holds the .so files"});
    return;
  }
  if ((st.st_mode & S_IWOTH) != 0) {
    errors.push_back(
        {LoadErrorKind::kDirectory, dir, "",
         "plugin directory " + dir + " is world-writable (mode " + mode_text(st.st_mode) +
             "): any user could drop in a .so that tpoold would run, so none of its plugins "
             "are loaded; run `chmod o-w " +
             dir + "`"});
    return;
  }
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) {
    errors.push_back({LoadErrorKind::kDirectory, dir, "",
                      "plugin directory " + dir + " cannot be listed (" + errno_text(errno) +
                          "): give the daemon's user read and execute permission on it"});
    return;
  }
  std::vector<std::string> found;
  while (const dirent* e = ::readdir(d)) {
    std::string_view n = e->d_name;
    if (n.size() > 3 && n.substr(n.size() - 3) == ".so") found.emplace_back(n);
  }
  ::closedir(d);
  std::sort(found.begin(), found.end());
  std::string prefix = dir.empty() || dir.back() == '/' ? dir : dir + "/";
  for (const auto& n : found) files.push_back(prefix + n);
}

Opened open_plugin(const std::string& file, const std::string& staging_dir,
                   const std::shared_ptr<Shared>& shared) {
  // 1. open + fstat
  Fd fd(::open(file.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0)
    return fail(LoadErrorKind::kUnreadable, file, "",
                file + " cannot be opened (" + errno_text(errno) +
                    "): give the daemon's user read permission, or remove the file");
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode))
    return fail(LoadErrorKind::kUnreadable, file, "",
                file +
                    " is not a regular file: only plugin .so files belong in a plugin "
                    "directory");
  // 2. permissions
  if ((st.st_mode & S_IWOTH) != 0)
    return fail(LoadErrorKind::kWorldWritable, file, "",
                file + " is world-writable (mode " + mode_text(st.st_mode) +
                    "): any user could replace the code tpoold would run, so it is not loaded; "
                    "run `chmod o-w " +
                    file + "`");
  // 3. ELF shared object?
  unsigned char ident[18] = {};
  ssize_t n = ::pread(fd.get(), ident, sizeof ident, 0);
  if (n < static_cast<ssize_t>(sizeof ident) || std::memcmp(ident,
                                                            "\x7f"
                                                            "ELF",
                                                            4) != 0) {
    char shown[64] = "";
    std::size_t used = 0;
    for (ssize_t i = 0; i < std::min<ssize_t>(n, 4) && used < sizeof shown; ++i)
      used += static_cast<std::size_t>(
          std::snprintf(shown + used, sizeof shown - used, "%s%02x", i ? " " : "", ident[i]));
    return fail(LoadErrorKind::kNotElf, file, "",
                file + " is not an ELF shared object (it is " + std::to_string(st.st_size) +
                    " bytes starting with " + (n > 0 ? shown : "nothing") +
                    ", not 7f 45 4c 46): only compiled plugins belong in a plugin directory; "
                    "remove the file or rename it so its name does not end in .so");
  }
  // e_type is at offset 16, in the file's byte order (ident[5]: 1 little, 2 big).
  unsigned e_type = ident[5] == 2 ? (ident[16] << 8) | ident[17] : (ident[17] << 8) | ident[16];
  if (e_type != 3 /* ET_DYN */)
    return fail(LoadErrorKind::kNotElf, file, "",
                file + " is an ELF file but not a shared object (e_type " + std::to_string(e_type) +
                    ", want 3 = ET_DYN): link the plugin with -shared "
                    "(CMake: add_library(<name> MODULE ...))");
  // 4. staging copy + dlopen
  std::string err;
  std::string staged = stage_copy(fd.get(), file, staging_dir, err);
  if (staged.empty())
    return fail(LoadErrorKind::kUnreadable, file, "", file + " cannot be staged: " + err);
  void* dl = ::dlopen(staged.c_str(), RTLD_NOW | RTLD_LOCAL);
  std::string dl_err = dl == nullptr ? replace_all(::dlerror(), staged, file) : "";
  ::unlink(staged.c_str());
  if (dl == nullptr)
    return fail(LoadErrorKind::kDlopen, file, "",
                file + " cannot be loaded: " + dl_err + " (check its dependencies with `ldd " +
                    file + "`; if the staging directory " + staging_dir +
                    " is mounted noexec, point staging_dir elsewhere)");
  auto lib = std::make_shared<Library>(shared, file, dl);

  // 5. entry symbol and descriptor
  ::dlerror();
  auto* sym = ::dlsym(dl, TPOOL_PLUGIN_ENTRY_SYMBOL);
  if (sym == nullptr)
    return fail(LoadErrorKind::kNoEntry, file, "",
                file +
                    " does not export the entry symbol " TPOOL_PLUGIN_ENTRY_SYMBOL
                    ": define it as `TPOOL_PLUGIN_EXPORT const tpool_plugin* "
                    "tpool_plugin_entry(const tpool_host_api* host)` with C linkage (include "
                    "tpool/plugin.h) and check `nm -D " +
                    file + " | grep " TPOOL_PLUGIN_ENTRY_SYMBOL "` lists it");
  auto entry = reinterpret_cast<tpool_plugin_entry_fn>(sym);
  const tpool_plugin* p = nullptr;
  {
    tls_current_library = lib.get();
    try {
      p = entry(host_api());
    } catch (...) {
      p = nullptr;
    }
    tls_current_library = nullptr;
  }
  if (p == nullptr)
    return fail(
        LoadErrorKind::kEntryRefused, file, "",
        file + ": " TPOOL_PLUGIN_ENTRY_SYMBOL " returned NULL (the plugin refused this host, ABI " +
            host_abi() + "; see its log lines above for why)");
  std::uint32_t prefix[4];
  std::memcpy(prefix, p, kPluginPrefix);
  const std::uint32_t struct_size = prefix[0], major = prefix[1], minor = prefix[2],
                      handler_size = prefix[3];
  if (major != TPOOL_PLUGIN_ABI_MAJOR)
    return fail(LoadErrorKind::kAbiMajorMismatch, file, "",
                file + " was built against plugin ABI " + version_text(major, minor) +
                    " but this tpoold speaks ABI " + host_abi() +
                    " and major versions must match: rebuild the plugin against the "
                    "tpool/plugin.h shipped with this tpoold, or run a tpoold whose ABI major is " +
                    std::to_string(major));
  if (struct_size < kPluginSizeV1_0)
    return fail(LoadErrorKind::kBadDescriptor, file, "",
                file + " declares a tpool_plugin of " + std::to_string(struct_size) +
                    " bytes, smaller than ABI 1.0's " + std::to_string(kPluginSizeV1_0) +
                    ": start the descriptor with TPOOL_PLUGIN_HEADER");
  // Read the fields this host knows; a larger (newer) struct is cut, a
  // smaller one is impossible past the check above.
  std::memcpy(&lib->desc, p, std::min<std::size_t>(struct_size, sizeof(tpool_plugin)));
  const tpool_plugin& d = lib->desc;
  std::string pname = valid_name(d.name) ? d.name : "";
  if (!pname.empty()) lib->name = pname;
  lib->version = d.version != nullptr ? d.version : "";
  const std::string who = file + (pname.empty() ? "" : " (plugin '" + pname + "')");
  if (minor > TPOOL_PLUGIN_ABI_MINOR)
    return fail(LoadErrorKind::kAbiMinorNewer, file, pname,
                who + " was built against plugin ABI " + version_text(major, minor) +
                    ", newer than this tpoold's ABI " + host_abi() +
                    ": it may use host functions this tpoold lacks; upgrade tpoold, or rebuild "
                    "the plugin against the tpool/plugin.h shipped with this tpoold");
  if (pname.empty())
    return fail(LoadErrorKind::kBadDescriptor, file, "",
                file + " declares an invalid plugin name (" +
                    (d.name == nullptr ? std::string("NULL") : "'" + std::string(d.name) + "'") +
                    "): use 1 to 64 characters from A-Z a-z 0-9 _ . -");
  if (handler_size < kHandlerSizeV1_0)
    return fail(LoadErrorKind::kBadDescriptor, file, pname,
                who + " declares handler_size " + std::to_string(handler_size) +
                    ", smaller than ABI 1.0's tpool_handler of " +
                    std::to_string(kHandlerSizeV1_0) +
                    " bytes: start the descriptor with TPOOL_PLUGIN_HEADER");
  if (d.handler_count == 0 || d.handlers == nullptr)
    return fail(LoadErrorKind::kBadDescriptor, file, pname,
                who + " declares no handlers: set handlers and handler_count");
  if (d.handler_count > 4096)  // picked by hand: far above any real plugin, catches garbage
    return fail(LoadErrorKind::kBadDescriptor, file, pname,
                who + " declares " + std::to_string(d.handler_count) +
                    " handlers, more than the 4096 a plugin may have: check handler_count");
  Opened out;
  std::set<std::string, std::less<>> names;
  const auto* base = reinterpret_cast<const unsigned char*>(d.handlers);
  for (std::size_t i = 0; i < d.handler_count; ++i) {
    tpool_handler h{};
    std::memcpy(&h, base + i * handler_size, std::min<std::size_t>(handler_size, sizeof h));
    const std::string idx = "handler #" + std::to_string(i);
    if (!valid_name(h.name))
      return fail(LoadErrorKind::kBadDescriptor, file, pname,
                  who + " " + idx + " has an invalid name (" +
                      (h.name == nullptr ? std::string("NULL") : "'" + std::string(h.name) + "'") +
                      "): use 1 to 64 characters from A-Z a-z 0-9 _ . -");
    if (h.call == nullptr)
      return fail(LoadErrorKind::kBadDescriptor, file, pname,
                  who + " handler '" + h.name + "' has no call function: set its `call` field");
    if (h.lane != TPOOL_LANE_DEFAULT && h.lane != TPOOL_LANE_BLOCKING)
      return fail(LoadErrorKind::kBadDescriptor, file, pname,
                  who + " handler '" + h.name + "' has lane " + std::to_string(h.lane) +
                      ": use TPOOL_LANE_DEFAULT (0) or TPOOL_LANE_BLOCKING (1)");
    if (!names.insert(h.name).second)
      return fail(LoadErrorKind::kDuplicateHandler, file, pname,
                  who + " declares handler '" + h.name +
                      "' twice: handler names must be unique; rename one");
    out.handlers.push_back(h);
  }
  out.library = std::move(lib);
  return out;
}

}  // namespace tpool::plugin_host::detail
